/* runtime/nvtx.h: NVTX ranges in the "mnemo" domain around mnemo's work;
 * no-ops without CUDA, and near-free until enabled at run time. */
#ifndef MNEMO_RUNTIME_NVTX_H
#define MNEMO_RUNTIME_NVTX_H

#include <stdbool.h>
#include <stdint.h>

/* Opens a range named `name` with a byte count in its payload. */
void mn__nvtx_push(const char *name, uint64_t nbytes);
void mn__nvtx_pop(void);
/* Switches the ranges on or off (also MNEMO_NVTX=1 in the environment). */
void mn__nvtx_enable(bool on);

#endif /* MNEMO_RUNTIME_NVTX_H */
