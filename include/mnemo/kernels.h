/* mnemo/kernels.h: the device kernels behind fill and copy, dispatched by
 * device: CPU code on CPU and SIM memory, CUDA kernels on CUDA memory. */
#ifndef MNEMO_KERNELS_H
#define MNEMO_KERNELS_H

#include <stddef.h>

#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the `itemsize`-byte pattern (1, 2, 4, 8 or 16 bytes) `count` times
 * from dst, on `stream` (device memory of the stream's device). */
mn_status mn_kernel_fill(mn_stream_t *stream, void *dst, size_t count, size_t itemsize,
                         const void *pattern);
/* Copies nbytes inside one device's memory, on `stream` (non-overlapping). */
mn_status mn_kernel_copy(mn_stream_t *stream, void *dst, const void *src, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_H */
