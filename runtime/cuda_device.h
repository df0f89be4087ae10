/* runtime/cuda_device.h: the CUDA device guard. Every CUDA call of mnemo that
 * needs a current device enters a guard and leaves it before returning, so the
 * calling thread's current device is what it was: a PyTorch process using mnemo
 * as its allocator keeps its device. Defined by runtime/cuda_backend.c in CUDA
 * builds (and by tests/cuda_emu in the kernel emulation).
 * Threading: per calling thread (the current device is thread state). */
#ifndef MNEMO_RUNTIME_CUDA_DEVICE_H
#define MNEMO_RUNTIME_CUDA_DEVICE_H

#include <stdbool.h>

#include "mnemo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn__cuda_guard_s {
  int restore; /* the device to make current again on leave; -1: none */
} mn__cuda_guard_t;

/* Makes `index` current for the calling thread. Without `force` nothing is set
 * when it already is current; `force` always calls cudaSetDevice, which also
 * makes the device's primary context current (the driver-API calls need it).
 * The previous device is restored on leave only when its primary context is
 * active: restoring a device the thread never used would create a context on
 * it (cudaGetDevice answers 0 on a fresh thread). A missing device or driver is
 * MN_ERR_NO_DEVICE, other failures MN_ERR_DEVICE; on failure the guard holds
 * nothing to restore and leaving it is a no-op. */
mn_status mn__cuda_guard_enter(mn__cuda_guard_t *g, const char *func, int index, bool force);
/* Restores the device recorded by enter (errors are cleared, not reported). */
void mn__cuda_guard_leave(mn__cuda_guard_t *g);

/* For tests: the calling thread's current CUDA device (cudaGetDevice) and
 * cudaSetDevice; MN_ERR_NO_DEVICE in builds without CUDA. */
mn_status mn__cuda_get_current(int *index);
mn_status mn__cuda_set_current(int index);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_RUNTIME_CUDA_DEVICE_H */
