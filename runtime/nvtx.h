/* runtime/nvtx.h: NVTX ranges in the "mnemo" domain around mnemo's work;
 * no-ops without CUDA, and near-free until enabled at run time. */
#ifndef MNEMO_RUNTIME_NVTX_H
#define MNEMO_RUNTIME_NVTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Opens a range named `name` with a byte count in its payload. */
void mn__nvtx_push(const char *name, uint64_t nbytes);
void mn__nvtx_pop(void);
/* -1 until read from the environment, then 0 (off) or 1 (on); nvtx.c owns it. */
extern atomic_int mn__nvtx_state;
/* Whether ranges may be on: one relaxed load, for the hot paths to skip the
 * calls when they are off (the exact answer is mn_nvtx_enabled's). */
static inline bool mn__nvtx_maybe_on(void) {
  return atomic_load_explicit(&mn__nvtx_state, memory_order_relaxed) != 0;
}

#endif /* MNEMO_RUNTIME_NVTX_H */
