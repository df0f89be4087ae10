/* kernels/index.h: the gather and scatter kernels behind advanced indexing
 * (mnemo/index.h). One iteration shape; the data operand is addressed by its
 * own strides over that shape plus, for each of up to MN__INDEX_MAX index
 * operands, the index read at the same position times that indexed dim's
 * stride. Elements move as they are (one dtype, no cast; add for the
 * accumulating scatter). Run at once on the CPU, queued as host work on SIM
 * streams (the emulated CUDA kernels in the emu build), by CUDA kernels on
 * CUDA streams. The callers (storage/) validate every index first: the
 * kernels only wrap negatives. Thread-safe. */
#ifndef MNEMO_KERNELS_INDEX_H
#define MNEMO_KERNELS_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/strided.h"
#include "mnemo/device.h"
#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MN__INDEX_MAX 8

/* The index operands of one gather or scatter. Index j at iteration
 * position p is the element of idx[j] at p (idx[j].ndim and sizes are the
 * iteration shape's; stride 0 on dims the index does not vary on), of dtype
 * idx_dtype[j] (MN_DTYPE_INT32 or MN_DTYPE_INT64), and in [-size[j],
 * size[j]) (validated by the caller); a negative one reaches i + size[j].
 * It moves the data operand's address by (wrapped i) * stride[j] elements. */
typedef struct mn__index_ops_s {
  int n; /* 1 .. MN__INDEX_MAX */
  mn__strided_t idx[MN__INDEX_MAX];
  mn_dtype idx_dtype[MN__INDEX_MAX];
  int64_t size[MN__INDEX_MAX];
  int64_t stride[MN__INDEX_MAX];
} mn__index_ops_t;

/* dst[p] = src at (src.data + sum_d p[d] * src.strides[d] + sum_j i_j(p) * stride[j]),
 * for every p of the iteration shape (dst's sizes; src, idx[] have the same
 * ndim and sizes). dst must not overlap src or the indices and has no
 * stride 0 on a dim of size > 1. Memory of the stream's device. */
mn_status mn__kernel_gather(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                            const mn__index_ops_t *ix, const char *func);

/* The element of dst at (dst.data + sum_d p[d] * dst.strides[d] + sum_j i_j(p) * stride[j])
 * gets src[p] (src may broadcast: stride 0), or += src[p] with `accumulate`
 * (integers wrap, floats add in float32 for the narrow floats and round as
 * a cast does, bool ORs, complex adds both parts), for every p of the
 * iteration shape (src's sizes). Order: every destination element sees its
 * writes in row-major order of p (the last one wins without accumulate),
 * on the CPU and on CUDA alike. Destinations of distinct p may coincide
 * only through the index terms on dims where dst.strides[d] == 0 (the
 * caller's duty: a dst that reaches one element two ways through its own
 * strides is refused upstream); the CUDA kernel runs those dims serially
 * in one thread per destination line, so results are bit-identical to the
 * CPU's. src must not overlap dst. */
mn_status mn__kernel_scatter(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                             const mn__index_ops_t *ix, bool accumulate, const char *func);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_INDEX_H */
