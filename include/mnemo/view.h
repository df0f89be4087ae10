/* mnemo/view.h: strided views over storages (PyTorch's tensor metadata): dtype,
 * sizes, strides and offset in elements. Views are immutable: any thread may use one. */
#ifndef MNEMO_VIEW_H
#define MNEMO_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/dtype.h"
#include "mnemo/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_view_s mn_view_t;

/* A view of `storage` (retained) with explicit sizes, strides (elements; NULL
 * means contiguous) and offset (elements). Every reachable element must lie
 * inside the storage (a view of no elements reaches none, as in PyTorch);
 * negative sizes/strides/offsets are refused. */
MN_API MN_NODISCARD mn_status mn_view_create(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                                             const int64_t *strides, int64_t offset, mn_view_t **out);
/* A contiguous view over a new storage on `dev` (default allocator). */
MN_API MN_NODISCARD mn_status mn_view_empty(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes,
                                            mn_view_t **out);
MN_API void mn_view_destroy(mn_view_t *v);

MN_API int mn_view_ndim(const mn_view_t *v);
MN_API int64_t mn_view_size(const mn_view_t *v, int dim);   /* dim may be negative */
MN_API int64_t mn_view_stride(const mn_view_t *v, int dim); /* elements */
MN_API const int64_t *mn_view_sizes(const mn_view_t *v);
MN_API const int64_t *mn_view_strides(const mn_view_t *v);
MN_API int64_t mn_view_offset(const mn_view_t *v); /* elements */
MN_API int64_t mn_view_numel(const mn_view_t *v);
MN_API mn_dtype mn_view_dtype(const mn_view_t *v);
MN_API mn_device_t mn_view_device(const mn_view_t *v);
MN_API mn_storage_t *mn_view_storage(const mn_view_t *v); /* borrowed */
/* Address of element 0 (storage data + offset * itemsize). */
MN_API void *mn_view_data(const mn_view_t *v);
MN_API bool mn_view_is_contiguous(const mn_view_t *v);

/* ---- Construction and invariants ------------------------------------------
 * Every function below that returns a view returns a NEW handle (the caller
 * destroys it) holding its own storage reference; views of one storage see
 * each other's writes. Failures leave *out untouched and retain nothing.
 * Dims may be negative (Python style) wherever a dim is taken. */

/* PyTorch's empty_strided: a new storage on `dev` just large enough for the
 * geometry (strides NULL: contiguous). */
MN_API MN_NODISCARD mn_status mn_view_empty_strided(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes,
                                                    const int64_t *strides, mn_view_t **out);
/* as_strided: v's storage and dtype with new sizes, strides and offset
 * (MN_VIEW_OFFSET_KEEP keeps v's offset), bounds-checked against the storage. */
#define MN_VIEW_OFFSET_KEEP INT64_MIN
MN_API MN_NODISCARD mn_status mn_view_as_strided(const mn_view_t *v, int ndim, const int64_t *sizes,
                                                 const int64_t *strides, int64_t offset, mn_view_t **out);
/* Checks v's invariants: dims in 0..MN_MAX_DIMS, sizes and strides >= 0,
 * offset >= 0, every reachable element inside the storage. MN_ERR_INTERNAL
 * with a message when one is broken. */
MN_API MN_NODISCARD mn_status mn_view_check(const mn_view_t *v);

/* ---- Queries (PyTorch's exact rules) ---------------------------------------- */
MN_API bool mn_view_is_contiguous_channels_last(const mn_view_t *v);    /* false unless 4-d */
MN_API bool mn_view_is_contiguous_channels_last_3d(const mn_view_t *v); /* false unless 5-d */
MN_API bool mn_view_is_non_overlapping_and_dense(const mn_view_t *v);
/* The same storage object (torch: a.untyped_storage() is b's; is_alias_of). */
MN_API bool mn_view_shares_storage(const mn_view_t *a, const mn_view_t *b);
/* Same storage, dtype, offset, sizes and strides (every element aliased). */
MN_API bool mn_view_same_storage_and_layout(const mn_view_t *a, const mn_view_t *b);
/* Bytes the view's elements span: numel * itemsize; SIZE_MAX when that does
 * not fit a size_t (an expanded view of more elements than bytes exist). */
MN_API size_t mn_view_nbytes(const mn_view_t *v);

/* ---- View operations (never copy) ------------------------------------------ */
/* view(shape): one size may be -1 (inferred). Refused (with a message that
 * says to use reshape) when the shape cannot be formed by splitting and
 * merging dims that are contiguous relative to each other. */
MN_API MN_NODISCARD mn_status mn_view_view(const mn_view_t *v, int ndim, const int64_t *shape, mn_view_t **out);
MN_API MN_NODISCARD mn_status mn_view_transpose(const mn_view_t *v, int dim0, int dim1, mn_view_t **out);
/* PyTorch's t(): transposes a 2-d view, returns 0-d and 1-d views as they
 * are (named t2d since mn_view_t is the type). */
MN_API MN_NODISCARD mn_status mn_view_t2d(const mn_view_t *v, mn_view_t **out);
/* permute(dims): dims is a permutation of 0..ndim-1 (negative allowed). */
MN_API MN_NODISCARD mn_status mn_view_permute(const mn_view_t *v, int ndim, const int *dims, mn_view_t **out);
/* movedim(source, destination): n dims moved, the others keep their order. */
MN_API MN_NODISCARD mn_status mn_view_movedim(const mn_view_t *v, int n, const int *source, const int *destination,
                                              mn_view_t **out);
/* v[start:end:step] along dim: Python indices (negative wrap, out of range
 * clamps; MN_VIEW_END for "to the end"), step > 0. */
#define MN_VIEW_END INT64_MAX
MN_API MN_NODISCARD mn_status mn_view_slice(const mn_view_t *v, int dim, int64_t start, int64_t end, int64_t step,
                                            mn_view_t **out);
/* narrow(dim, start, length): start may be negative; the range must fit. */
MN_API MN_NODISCARD mn_status mn_view_narrow(const mn_view_t *v, int dim, int64_t start, int64_t length,
                                             mn_view_t **out);
/* select(dim, index): removes dim; index may be negative. */
MN_API MN_NODISCARD mn_status mn_view_select(const mn_view_t *v, int dim, int64_t index, mn_view_t **out);
MN_API MN_NODISCARD mn_status mn_view_unsqueeze(const mn_view_t *v, int dim, mn_view_t **out);
/* squeeze(): removes every dim of size 1; squeeze(dim): that dim if size 1. */
MN_API MN_NODISCARD mn_status mn_view_squeeze(const mn_view_t *v, mn_view_t **out);
MN_API MN_NODISCARD mn_status mn_view_squeeze_dim(const mn_view_t *v, int dim, mn_view_t **out);
/* expand(sizes): broadcast dims of size 1 (stride 0), -1 keeps a size, new
 * leading dims allowed. The result is read-only in practice: in-place writes
 * to it are refused (internal overlap). */
MN_API MN_NODISCARD mn_status mn_view_expand(const mn_view_t *v, int ndim, const int64_t *sizes, mn_view_t **out);
/* unflatten(dim, sizes): splits dim into sizes (one -1 allowed); a view. */
MN_API MN_NODISCARD mn_status mn_view_unflatten(const mn_view_t *v, int dim, int n, const int64_t *sizes,
                                                mn_view_t **out);
/* diagonal(offset, dim1, dim2): removes both dims, appends the diagonal. */
MN_API MN_NODISCARD mn_status mn_view_diagonal(const mn_view_t *v, int64_t offset, int dim1, int dim2, mn_view_t **out);
/* unfold(dim, size, step): windows of `size` every `step` as a new last dim. */
MN_API MN_NODISCARD mn_status mn_view_unfold(const mn_view_t *v, int dim, int64_t size, int64_t step, mn_view_t **out);
/* split(split_size, dim) and chunk(chunks, dim): *out is a malloc'ed array of
 * *count views; free it with mn_view_list_destroy. */
MN_API MN_NODISCARD mn_status mn_view_split(const mn_view_t *v, int64_t split_size, int dim, mn_view_t ***out,
                                            int *count);
MN_API MN_NODISCARD mn_status mn_view_chunk(const mn_view_t *v, int64_t chunks, int dim, mn_view_t ***out, int *count);
MN_API void mn_view_list_destroy(mn_view_t **views, int count);
/* view(dtype): same item size keeps the geometry; a different one rescales
 * the last dim (stride 1 required; PyTorch's divisibility rules). */
MN_API MN_NODISCARD mn_status mn_view_view_dtype(const mn_view_t *v, mn_dtype dtype, mn_view_t **out);
/* real/imag of a complex view (a float view with strides doubled); real of
 * a real view is the view itself (a new handle); imag of a real view is refused. */
MN_API MN_NODISCARD mn_status mn_view_real(const mn_view_t *v, mn_view_t **out);
MN_API MN_NODISCARD mn_status mn_view_imag(const mn_view_t *v, mn_view_t **out);

/* ---- Operations that may copy ------------------------------------------------
 * Copies are queued on `stream` (NULL: the default stream of the device that
 * works; see docs/VIEWS.md) and, like PyTorch on CUDA, are asynchronous on
 * devices with queues (SIM, CUDA): synchronize before reading on the host. */

/* reshape: view() when possible, else a contiguous copy of the new shape. */
MN_API MN_NODISCARD mn_status mn_view_reshape(const mn_view_t *v, int ndim, const int64_t *shape, mn_stream_t *stream,
                                              mn_view_t **out);
/* flatten(start_dim, end_dim): reshape that merges dims start..end (a 0-d
 * view becomes 1-d); a view when possible. */
MN_API MN_NODISCARD mn_status mn_view_flatten(const mn_view_t *v, int start_dim, int end_dim, mn_stream_t *stream,
                                              mn_view_t **out);
/* contiguous(): an already contiguous view gives a new handle of the SAME
 * storage and layout (no copy, as PyTorch returns self); otherwise a copy. */
MN_API MN_NODISCARD mn_status mn_view_contiguous(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out);
/* clone(preserve_format): a copy in a new storage; keeps v's strides when v
 * is non-overlapping and dense, else the dense strides in v's dim order. */
MN_API MN_NODISCARD mn_status mn_view_clone(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out);
/* to(device, dtype): a new handle of v when both match (no copy), else a copy
 * laid out as clone's. non_blocking as mn_copy_view's; `stream` orders the
 * work (NULL: the default stream of the non-CPU side). */
MN_API MN_NODISCARD mn_status mn_view_to(const mn_view_t *v, mn_device_t dev, mn_dtype dtype, bool non_blocking,
                                         mn_stream_t *stream, mn_view_t **out);

/* empty_like(v, device=dev): a new storage on `dev` with v's dtype and sizes,
 * laid out as clone's (preserve_format), contents uninitialised (PyTorch's
 * way from meta to a real device: module.to_empty()). Quantized views keep
 * their parameters. */
MN_API MN_NODISCARD mn_status mn_view_empty_like(const mn_view_t *v, mn_device_t dev, mn_view_t **out);

/* ---- In-place writes ------------------------------------------------------------
 * A destination with internal overlap (a dim of size > 1 with stride 0) is
 * refused: "unsupported operation: more than one element of the written-to
 * tensor refers to a single memory location". */

/* copy_: src broadcast to dst's shape (PyTorch's broadcasting), cast to dst's
 * dtype, any devices. A src partially overlapping dst is refused as PyTorch
 * does; identical views are a no-op; other overlaps go through a temporary.
 * Ordered on `stream` (NULL: the default stream of the non-CPU device);
 * returns once queued (non_blocking). */
MN_API MN_NODISCARD mn_status mn_view_copy(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream);
/* fill_: writes `value` (any scalar kind, cast to the view's dtype) into
 * every element, any layout, on `stream` (NULL: the device's default). */
MN_API MN_NODISCARD mn_status mn_view_fill(mn_view_t *v, mn_scalar_t value, mn_stream_t *stream);
MN_API MN_NODISCARD mn_status mn_view_zero(mn_view_t *v, mn_stream_t *stream);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_VIEW_H */
