/* tests/cuda_emu/mn_emu.h: what the CUDA launch emulation (tests/cuda_emu)
 * counted, for tests to prove kernels really ran through it. C and C++.
 * Threading: the counters and faults live under the emulation's launch lock. */
#ifndef MNEMO_TESTS_CUDA_EMU_MN_EMU_H
#define MNEMO_TESTS_CUDA_EMU_MN_EMU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_emu_stats_s {
  uint64_t launches;       /* kernels run */
  uint64_t refused;        /* launches refused for their configuration */
  uint64_t blocks;         /* blocks run */
  uint64_t threads;        /* threads run */
  uint64_t barriers;       /* __syncthreads completed by a whole block */
  uint64_t multi_block;    /* launches with more than one block */
  uint64_t max_block_threads;
  uint64_t faults;         /* calls failed on purpose (mn_emu_inject_fault) */
} mn_emu_stats_t;

typedef enum mn_emu_fault {
  MN_EMU_FAULT_LAUNCH = 1, /* a launch: cudaErrorLaunchOutOfResources, nothing runs */
  MN_EMU_FAULT_MEMCPY = 2  /* cudaMemcpyAsync: cudaErrorInvalidValue, nothing copied */
} mn_emu_fault;

/* The counters since the process started (or the last reset). */
void mn_emu_stats(mn_emu_stats_t *out);
void mn_emu_stats_reset(void);
/* The next `count` calls of that kind fail (as a real device may), so tests
 * reach the launchers' error paths; 0 clears. Process-wide. */
void mn_emu_inject_fault(mn_emu_fault what, unsigned count);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_TESTS_CUDA_EMU_MN_EMU_H */
