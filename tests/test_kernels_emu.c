/* tests/test_kernels_emu.c: every CUDA kernel (kernels/cuda_*.cu) run on the host
 * through the launch emulation (tests/cuda_emu, preset emu): the shared kernel
 * matrix of tests/test_kernels_cases.h (every dtype pair x layouts, fills,
 * casts, random fills, bit-exact against the scalar reference) on a SIM device,
 * whose kernels in this build are the emulated CUDA ones, and the cases of
 * tests/test_kernels_emu_cases.h (aligned dense random fills, 64-bit indices,
 * refusals, failed launches), the gather/scatter cases of
 * tests/test_kernels_index_cases.h (kernels/cuda_index.cu against the naive
 * row-major reference: accumulate order bit-identical to the CPU's); then the
 * counters prove the kernels ran
 * emulated, and the emulation checks itself: a real barrier, per-block shared
 * memory, grid-stride loops, refused configurations.
 * Threading: the main thread and the SIM stream's worker. */
#include "cuda_emu/mn_emu.h"
#include "test_kernels_cases.h"
#include "test_kernels_emu_cases.h"
#include "test_kernels_index_cases.h"

/* The emulator's own checks live in emu_selftest.cc (C++: it launches kernels). */
int mn_emu_selftest(void);

int main(void) {
  mn_test_configure_sim(1, (size_t)1 << 30);
  kc_dev = mn_device_sim(0);
  MN_CHECK_OK(mn_stream_create(kc_dev, &kc_stream));
  mn_emu_stats_reset();
  kc_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats_t s;
  mn_emu_stats(&s);
  printf("emulation: %llu launches (%llu of several blocks), %llu blocks, %llu threads, %llu barriers\n",
         (unsigned long long)s.launches, (unsigned long long)s.multi_block, (unsigned long long)s.blocks,
         (unsigned long long)s.threads, (unsigned long long)s.barriers);
  MN_CHECK(s.launches > 1000);        /* the matrix ran through the CUDA kernels */
  MN_CHECK(s.multi_block > 0);        /* grid-stride loops over several blocks */
  MN_CHECK(s.blocks > s.launches);
  MN_CHECK(s.barriers > 0);           /* tiled transposes met at __syncthreads */
  MN_CHECK(s.refused == 0);           /* no launcher built a configuration CUDA refuses */
  MN_CHECK(s.faults == 0);
  MN_CHECK(s.max_block_threads == 256);
  kc_run_emu_cases();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats(&s);
  const mn_emu_stats_t before = s; /* the failure cases above refused launches on purpose */
  ki_dev = kc_dev;
  ki_stream = kc_stream;
  ki_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats(&s);
  printf("emulation: %llu gather/scatter launches\n", (unsigned long long)(s.launches - before.launches));
  MN_CHECK(s.launches - before.launches > 500); /* the index cases ran through kernels/cuda_index.cu */
  MN_CHECK(s.multi_block > before.multi_block);
  MN_CHECK(s.refused == before.refused && s.faults == before.faults);
  MN_CHECK_OK(mn_stream_destroy(kc_stream));
  MN_CHECK(mn_emu_selftest() == 0);
  mn_test_release_sim_caches();
  return mn_test_finish();
}
