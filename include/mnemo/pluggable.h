/* mnemo/pluggable.h: C entry points that frameworks load from libmnemo.so
 * (PyTorch's CUDAPluggableAllocator, CuPy's CFunctionAllocator). Thread-safe. */
#ifndef MNEMO_PLUGGABLE_H
#define MNEMO_PLUGGABLE_H

#include <stddef.h>

#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* All of them serve device `device` of the pluggable device type (CUDA unless
 * changed for tests, below) through that device's default allocator
 * (mn_allocator_get_default). They never abort: a failed alloc returns NULL
 * and a failed free returns nothing; either leaves the reason in this
 * thread's mn_last_error(). */

/* PyTorch: torch.cuda.memory.CUDAPluggableAllocator(path, "mnemo_torch_alloc",
 * "mnemo_torch_free"). `stream` is a cudaStream_t (NULL: the legacy default
 * stream); each (device, stream) pair is wrapped once (mn_stream_wrap) and the
 * wrapper is kept for the process's life, so its mn_stream_id is stable.
 * size 0 returns NULL. */
MN_API void *mnemo_torch_alloc(size_t size, int device, void *stream);
/* `size` and `stream` are not needed: the allocator knows the block. */
MN_API void mnemo_torch_free(void *ptr, size_t size, int device, void *stream);

/* CuPy: cupy.cuda.memory.CFunctionAllocator(param, mnemo_cupy_malloc,
 * mnemo_cupy_free, owner). `param` is NULL (the device's default allocator) or
 * an mn_allocator_t * for that device, which is then used instead. CuPy passes
 * no stream: the default stream is used. */
MN_API void *mnemo_cupy_malloc(void *param, size_t size, int device);
MN_API void mnemo_cupy_free(void *param, void *ptr, int device);

/* Returns the cached memory of the device's default allocator to the device.
 * 0 on success, else an mn_status value (message in mn_last_error). */
MN_API int mnemo_empty_cache(int device);

/* For tests without a GPU: serve the entry points from devices of `type`
 * (MN_DEVICE_CUDA, the default, or MN_DEVICE_SIM). Off CUDA, `stream`
 * arguments are mn_stream_t * of that device (or NULL), not native handles. */
MN_API MN_NODISCARD mn_status mn_pluggable_set_device_type(mn_device_type type);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_PLUGGABLE_H */
