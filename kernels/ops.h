/* kernels/ops.h: the kernels' strided entry points, used by the storage layer
 * (views, storages, the copy engine) and by tests: copy with cast, fill and
 * random fill over plain strided operands (kernels/strided.h), planned once
 * (kernels/plan.h) and run by device: at once on the CPU, as queued host work
 * on SIM streams, by the CUDA executor on CUDA streams. `func` is the public
 * call that error messages name. Thread-safe. */
#ifndef MNEMO_KERNELS_OPS_H
#define MNEMO_KERNELS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/quant.h"
#include "kernels/strided.h"
#include "mnemo/device.h"
#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ATen's overlap status of two operands (get_overlap_status), the library's
 * one overlap check: NO when their byte ranges do not meet; FULL when they
 * are the same elements, or both are non-overlapping and dense over the same
 * bytes with the same strides; PARTIAL when both are dense and meet
 * otherwise; TOO_HARD when the ranges meet and one is not dense. */
typedef enum mn__overlap {
  MN__OVERLAP_NO = 0,
  MN__OVERLAP_FULL,
  MN__OVERLAP_PARTIAL,
  MN__OVERLAP_TOO_HARD
} mn__overlap;

/* c10's is_non_overlapping_and_dense for an operand: its elements, in some
 * order of its dims, fill one gap-free range (size-1 dims ignored). */
bool mn__strided_is_dense(const mn__strided_t *t);
/* The bytes [lo, hi) the operand reaches (numel > 0, strides >= 0). */
void mn__strided_extent(const mn__strided_t *t, size_t itemsize, uintptr_t *lo, uintptr_t *hi);
mn__overlap mn__strided_overlap(const mn__strided_t *a, size_t aitem, const mn__strided_t *b, size_t bitem);

/* Copies src into dst element by element, casting src_dtype to dst_dtype
 * (mn_scalar_to_bytes's rules), on `stream` (memory of its device). Same ndim
 * and sizes; src may broadcast (stride 0), dst may not. Identical same-dtype
 * operands are a no-op; operands that partially overlap are refused (ATen's
 * rule; an in-place cast over the same bytes runs). */
mn_status mn__kernel_copy_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dst_dtype,
                                  const mn__strided_t *src, mn_dtype src_dtype, const char *func);
/* Writes the dtype-sized `pattern` into every element of dst (no stride 0 on
 * a dim of size > 1). */
mn_status mn__kernel_fill_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dtype, const void *pattern,
                                  const char *func);
/* Philox random fill of dst (float16, bfloat16, float32, float64): uniform
 * a + b * u, or normal a + b * z (see mn_kernel_random_uniform). */
mn_status mn__kernel_random_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dtype, uint64_t seed,
                                    uint64_t offset, bool normal, double a, double b, const char *func);
/* Quantizes contiguous float32 into a quantized dtype, or dequantizes into
 * contiguous float32 (kernels/quant.h; q's pointers: memory of the stream's
 * device, disjoint), on `stream`. */
mn_status mn__kernel_quant(mn_stream_t *stream, const mn__quant_t *q, const char *func);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_OPS_H */
