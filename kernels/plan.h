/* kernels/plan.h: the copy/cast/fill planner shared by the CPU and CUDA
 * executors: (dst, src, op) -> canonical dims and a path. Pure: thread-safe. */
#ifndef MNEMO_KERNELS_PLAN_H
#define MNEMO_KERNELS_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/divmod.h"
#include "kernels/strided.h"
#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mn__plan_kind {
  MN__PLAN_CONTIG = 0,    /* one dim, stride 1 on both sides (memcpy / vector cast) */
  MN__PLAN_TRANSPOSE = 1, /* dst's innermost dim differs from src's: tiled transpose */
  MN__PLAN_BROADCAST = 2, /* src has stride 0 on some dim (src scalar: ndim 1, stride 0) */
  MN__PLAN_FILL = 3,      /* scalar fill (no src); contiguous when ndim 1 and stride 1 */
  MN__PLAN_GENERIC = 4    /* anything else: N-d index walk */
} mn__plan_kind;

/* A plan. Dims are innermost first (dim 0 has the smallest dst stride), size-1
 * dims dropped, dims contiguous in both operands merged; strides in elements.
 * A plan always has ndim >= 1 (a single element is one dim of size 1). */
typedef struct mn__plan_s {
  mn__plan_kind kind;
  int ndim;
  int64_t sizes[MN_MAX_DIMS];
  int64_t dst_strides[MN_MAX_DIMS], src_strides[MN_MAX_DIMS];
  char *dst;        /* element 0 of dst */
  const char *src;  /* element 0 of src (NULL for a fill) */
  mn_dtype dst_dtype, src_dtype;
  size_t dst_item, src_item;
  int64_t numel;
  /* TRANSPOSE: the dim on which src has stride 1 (dim 0 has dst stride 1). */
  int tdim;
  /* CONTIG and FILL: elements per vector access, a power of two such that
   * vec * item <= 16 bytes on both sides and both addresses are aligned to it. */
  int vec;
  /* Some element index or byte offset does not fit in 31 bits: the CUDA
   * kernels take their 64-bit index variants. */
  bool index64;
} mn__plan_t;

/* The planner's first step, shared by every strided walk of the library (the
 * plans below and the CPU strided copy of kernels/strided.h): size-1 dims
 * dropped and dims contiguous in both operands merged, innermost first, into
 * sizes/dstr/sstr (MN_MAX_DIMS each; strides in elements; src NULL: a fill,
 * src strides 0). sort = false keeps row-major order (element i of the
 * result is element i of the operands); sort = true first orders the dims by
 * dst stride, then src stride. Returns the number of dims (>= 1; a single
 * element is one dim of size 1, contiguous). */
int mn__plan_dims(const mn__strided_t *dst, const mn__strided_t *src, bool sort, int64_t *sizes, int64_t *dstr,
                  int64_t *sstr);

/* Plans a copy (src != NULL) or a fill (src == NULL) over dst's shape. pre:
 * same ndim and sizes, valid dtypes, non-negative strides, numel > 0. */
void mn__plan_make(mn__plan_t *plan, const mn__strided_t *dst, mn_dtype dst_dtype, const mn__strided_t *src,
                   mn_dtype src_dtype);

/* The offsets walk of the CUDA generic kernels over a plan's dims (byte
 * strides; divisors exact whenever the plan has no index64). */
void mn__offcalc_of_plan(const mn__plan_t *plan, mn__offcalc_t *c);
/* The offsets walk of a random fill of dst: dst's logical row-major dims,
 * innermost first, size-1 dims dropped and neighbours merged (src strides 0).
 * Sets *numel and *max_end, the byte offset just past the farthest element. */
void mn__offcalc_of_rows(const mn__strided_t *dst, size_t item, mn__offcalc_t *c, int64_t *numel, int64_t *max_end);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_PLAN_H */
