/* storage/view_internal.h: the view struct and helpers shared by view.c,
 * view_ops.c, view_copy.c, view_index.c, view_kernels.c, quantize.c and
 * dlpack.c. Views are immutable after creation. */
#ifndef MNEMO_STORAGE_VIEW_INTERNAL_H
#define MNEMO_STORAGE_VIEW_INTERNAL_H

#include "kernels/strided.h"
#include "mnemo/mnemo.h"
#include "runtime/meta.h" /* mn__is_meta, MN__META_NO_DATA: every view file refuses meta reads */

struct mn_view_s {
  mn_storage_t *storage; /* one reference held */
  mn_dtype dtype;
  int ndim;
  int64_t sizes[MN_MAX_DIMS];
  int64_t strides[MN_MAX_DIMS];
  int64_t offset;
  double q_scale;       /* quantized dtypes: per-tensor affine parameters */
  int64_t q_zero_point; /* (0 for other dtypes) */
};

/* Geometry of a view being built (no storage reference). */
typedef struct mn__geom_s {
  mn_dtype dtype;
  int ndim;
  int64_t sizes[MN_MAX_DIMS];
  int64_t strides[MN_MAX_DIMS];
  int64_t offset;
  double q_scale; /* kept by every view op (mn__geom_of copies them) */
  int64_t q_zero_point;
  /* Set by the mn__ck_* helpers (runtime/checked.h) while the fields are
   * computed; mn__view_from_geom then refuses the view with MN_ERR_OVERFLOW. */
  bool overflow;
} mn__geom_t;

/* PyTorch's refusals of a write into a view with internal overlap (a dim of
 * size > 1 with stride 0) and of a source that partially overlaps the
 * written view (copy_, fill_, index_put_, scatter_). */
#define MN__OVERLAP_MSG                                                                                       \
  "unsupported operation: more than one element of the written-to tensor refers to a single memory location. " \
  "Please clone() the tensor before performing the operation."
#define MN__PARTIAL_MSG                                                                                            \
  "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory " \
  "location. Please clone() the tensor before performing the operation."

/* The geometry of v. */
void mn__geom_of(const mn_view_t *v, mn__geom_t *g);
/* A new view of v's storage with geometry g, checked against the storage. */
mn_status mn__view_from_geom(const mn_view_t *v, const mn__geom_t *g, const char *func, mn_view_t **out);
/* Wraps dim into [0, ndim) (a 0-d view accepts -1 and 0 as dim 0 when
 * wrap_scalar); error text as PyTorch's. */
mn_status mn__wrap_dim(int64_t dim, int ndim, bool wrap_scalar, const char *func, int *out);
/* Writes "[a, b, c]" into buf. */
const char *mn__format_sizes(const int64_t *sizes, int ndim, char *buf, size_t n);
/* Contiguous strides for sizes (>= 0); false when one overflows int64. */
bool mn__contiguous_strides(const int64_t *sizes, int ndim, int64_t *strides);
/* PyTorch's computeStride: strides that let `newshape` view memory laid out as
 * (oldshape, oldstride), or false when no such strides exist. */
bool mn__compute_stride(const int64_t *oldshape, const int64_t *oldstride, int oldn, const int64_t *newshape,
                        int newn, int64_t *newstride);
/* PyTorch's infer_size: resolves one -1 in shape for numel elements. */
mn_status mn__infer_size(const int64_t *shape, int n, int64_t numel, const char *func, int64_t *out);
/* empty_strided whose storage is allocated ordered on `stream` (used when
 * it is a stream of dev; else the default stream), so that the caching
 * allocator ties the block to the stream the copy into it runs on. */
mn_status mn__view_empty_on(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes, const int64_t *strides,
                            mn_stream_t *stream, mn_view_t **out);
/* The stream to use: `given`, or the default stream of dev. */
mn_status mn__view_stream(mn_device_t dev, mn_stream_t *given, mn_stream_t **out);
/* Elements per byte of a packed dtype (2 quint4x2, 4 quint2x4), else 0. */
int mn__dtype_packed_per_byte(mn_dtype dtype);
/* Checks quantization parameters (mn_view_create_quantized's rules). */
mn_status mn__check_qparams(mn_dtype dtype, double scale, int64_t zero_point, const char *func);
/* Sets the parameters of a view being built (quantized dtypes; before it is shared). */
void mn__view_set_qparams(mn_view_t *v, double scale, int64_t zero_point);
/* Whether a copy between dst and src is allowed for quantized dtypes: same
 * dtype only; packed ones both contiguous with one shape. */
mn_status mn__check_quant_copy(const mn_view_t *dst, const mn_view_t *src, const char *func);
/* The kernels' operand of a view (data = element 0). */
void mn__strided_of_view(const mn_view_t *v, mn__strided_t *out);

#endif /* MNEMO_STORAGE_VIEW_INTERNAL_H */
