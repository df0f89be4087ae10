/* mnemo/kernels.h: the device kernels behind fill and copy, dispatched by
 * device: CPU code on CPU and SIM memory, CUDA kernels on CUDA memory. The
 * lowest level of copying: one stream, one device, no broadcasting of dst,
 * no staging through temporaries (mn_view_copy in mnemo/view.h does all of
 * that). The raw-memory functions are the kernels layer's; the *_view and
 * random functions are the storage layer's wrappers that turn views into the
 * kernels' strided operands (kernels/ops.h). Thread-safe. */
#ifndef MNEMO_KERNELS_H
#define MNEMO_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"
#include "mnemo/dtype.h"
#include "mnemo/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the `itemsize`-byte pattern (1, 2, 4, 8 or 16 bytes) `count` times
 * from dst, on `stream` (device memory of the stream's device). */
MN_API MN_NODISCARD mn_status mn_kernel_fill(mn_stream_t *stream, void *dst, size_t count, size_t itemsize,
                                             const void *pattern);
/* Copies nbytes inside one device's memory, on `stream` (non-overlapping). */
MN_API MN_NODISCARD mn_status mn_kernel_copy(mn_stream_t *stream, void *dst, const void *src, size_t nbytes);

/* Copies src into dst element by element on `stream` (a stream of the device
 * both views live on), converting src's dtype to dst's with the cast rules of
 * mn_scalar_to_bytes (mnemo/dtype.h). Same ndim and sizes; src may have
 * stride 0 on any dim (a broadcast source); dst may not (refused). dst and src
 * must not partially overlap: where both are non-overlapping and dense this is
 * checked (ATen's rule: bytes that meet without being the same elements, i.e.
 * the same range with the same strides, are refused; the same elements, e.g.
 * an in-place cast, run element by element);
 * otherwise it is the caller's duty (mn_view_copy stages through a temporary).
 * Identical same-dtype views are a no-op. */
MN_API MN_NODISCARD mn_status mn_kernel_copy_view(mn_stream_t *stream, const mn_view_t *dst, const mn_view_t *src);
/* Writes `value` (cast to dst's dtype) into every element of dst, any layout
 * (a dst with stride 0 on a dim of size > 1 is refused), on `stream`. */
MN_API MN_NODISCARD mn_status mn_kernel_fill_view(mn_stream_t *stream, const mn_view_t *dst, mn_scalar_t value);
/* Converts `count` contiguous elements of src_dtype at src into dst_dtype at
 * dst (memory of the stream's device; non-overlapping unless dst == src with
 * equal item sizes), on `stream`. */
MN_API MN_NODISCARD mn_status mn_kernel_cast(mn_stream_t *stream, void *dst, mn_dtype dst_dtype, const void *src,
                                             mn_dtype src_dtype, size_t count);

/* Random fill with Philox4x32-10 (docs/KERNELS.md has the counter layout):
 * the same seed and offset give the same bits on CPU, SIM and CUDA, for any
 * layout of dst (element i is the i-th in row-major order of dst's shape).
 * dst is float16, bfloat16, float32 or float64. Uniform: low + (high - low) * u
 * with u in [0, 1) (24 bits; 53 for float64); rounding may give high itself.
 * Normal: mean + std * z, z from Box-Muller in float32 (portable log/sincos).
 * The fill consumes mn_kernel_random_blocks(...) counter blocks from offset:
 * pass offset + that to the next fill for fresh numbers. */
MN_API MN_NODISCARD mn_status mn_kernel_random_uniform(mn_stream_t *stream, const mn_view_t *dst, uint64_t seed,
                                                       uint64_t offset, double low, double high);
MN_API MN_NODISCARD mn_status mn_kernel_random_normal(mn_stream_t *stream, const mn_view_t *dst, uint64_t seed,
                                                      uint64_t offset, double mean, double std);
/* Philox counter blocks used by a random fill of numel elements of dtype. */
MN_API uint64_t mn_kernel_random_blocks(mn_dtype dtype, int64_t numel, bool normal);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_H */
