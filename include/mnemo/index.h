/* mnemo/index.h: advanced indexing (PyTorch's integer-tensor and boolean-mask
 * indexing) as gather and scatter copies. Unlike the view operations of
 * mnemo/view.h these never share storage: a gather makes a new storage, a
 * scatter writes into an existing view. Thread-safe as the views they take.
 *
 * Rules shared by every call (docs/VIEWS.md, "Advanced indexing"):
 * - Index views are int32 or int64 (a mask is bool, or uint8 as PyTorch's
 *   deprecated byte mask), of any layout, on any device: one that is not on
 *   v's device is copied there first.
 * - Negative indices wrap once (-1 is the last) in take, index and
 *   index_put; any index outside [-size, size) is refused with PyTorch's
 *   message before a byte is written (validation reads the indices, so on a
 *   queued device the call waits for the index's device). index_select,
 *   gather, scatter and scatter_add take [0, size), as PyTorch 1.13 does.
 * - A result is sized and allocated before any integer index is read: a
 *   result too large for int64 / size_t is MN_ERR_OVERFLOW, one no memory
 *   holds MN_ERR_OUT_OF_MEMORY, at once (a mask is read first: its count is
 *   a size).
 * - Values and sources must have v's dtype (PyTorch's rule: no casting).
 * - Work is queued on `stream` (NULL: the default stream of v's device), as
 *   copies are (mnemo/view.h). Calls whose result size depends on mask
 *   values (masked_select, boolean indices) wait for the mask first.
 * - On the meta device the result's metadata is computed without reading
 *   any index (as PyTorch's meta kernels); masks are refused there (the size
 *   depends on the data). Shapes are checked as on the CPU: a non-empty
 *   index into a dim of size 0 is refused by every call (torch 1.13's meta
 *   gather / scatter / index_select accept it; every real device refuses).
 * - Quantized views: index_select and index only (take, gather and
 *   masked_select: MN_ERR_NOT_SUPPORTED, as torch 1.13 has no quantized
 *   kernel for them); no writes; no packed dtypes.
 * - A refused call changes nothing and leaves *out untouched. */
#ifndef MNEMO_INDEX_H
#define MNEMO_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "mnemo/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* index_select(dim, index): index is 0-d or 1-d; the result has v's sizes
 * with sizes[dim] = index's numel, contiguous, in a new storage. */
MN_API MN_NODISCARD mn_status mn_view_index_select(const mn_view_t *v, int dim, const mn_view_t *index,
                                                   mn_stream_t *stream, mn_view_t **out);
/* take(index): v seen as 1-d in row-major order; the result has index's shape. */
MN_API MN_NODISCARD mn_status mn_view_take(const mn_view_t *v, const mn_view_t *index, mn_stream_t *stream,
                                           mn_view_t **out);
/* gather(dim, index): index has v's ndim and index.size(d) <= v.size(d) for
 * every d != dim; out[i][j][k] = v[index[i][j][k]][j][k] (dim 0). The result
 * has index's shape. An empty index is not checked (any ndim, any dtype). */
MN_API MN_NODISCARD mn_status mn_view_gather(const mn_view_t *v, int dim, const mn_view_t *index, mn_stream_t *stream,
                                             mn_view_t **out);
/* masked_select(mask): v and mask broadcast together; the result is 1-d, the
 * elements where mask is true in row-major order of the broadcast shape. */
MN_API MN_NODISCARD mn_status mn_view_masked_select(const mn_view_t *v, const mn_view_t *mask, mn_stream_t *stream,
                                                    mn_view_t **out);
/* v[indices[0], ..., indices[n-1]] (PyTorch's advanced indexing, aten::index):
 * indices[d] indexes dim d; NULL stands for ":" (the whole dim). Integer
 * indices broadcast together to a shape B. A bool (or uint8) mask of k dims
 * stands for k integer indices (its nonzero positions) and must match the k
 * dims it covers. The result: when the indexed dims are adjacent, B takes
 * their place among the other dims; otherwise B comes first (PyTorch's rule).
 * n <= v's ndim; n == 0 or all NULL gives a copy of v. */
MN_API MN_NODISCARD mn_status mn_view_index(const mn_view_t *v, int n, const mn_view_t *const *indices,
                                            mn_stream_t *stream, mn_view_t **out);
/* v[indices...] = values (index_put_), or += with `accumulate`: the same
 * indices as mn_view_index; values (v's dtype) broadcast to the shape
 * mn_view_index would return. Without accumulate, an element indexed more
 * than once gets the last write in row-major order of that shape (PyTorch
 * leaves it undefined). With accumulate every contribution is added, in
 * row-major order, on every device: the CPU and CUDA give bit-identical
 * results (CUDA sums each destination element in one thread, in that order;
 * no atomics). A v with internal overlap is refused. */
MN_API MN_NODISCARD mn_status mn_view_index_put(mn_view_t *v, int n, const mn_view_t *const *indices,
                                                const mn_view_t *values, bool accumulate, mn_stream_t *stream);
/* scatter_(dim, index, src): v[index[i][j][k]][j][k] = src[i][j][k] (dim 0);
 * index has v's ndim, index.size(d) <= src.size(d) for every d (a 0-d src
 * has size 1) and <= v.size(d) for d != dim; src has v's dtype. An empty
 * index is not checked (nothing is written). Duplicates: the last in
 * row-major order of index wins, on every device. */
MN_API MN_NODISCARD mn_status mn_view_scatter(mn_view_t *v, int dim, const mn_view_t *index, const mn_view_t *src,
                                              mn_stream_t *stream);
/* scatter_add_(dim, index, src): as scatter, adding; summed in row-major
 * order of index on every device (deterministic, as index_put's accumulate). */
MN_API MN_NODISCARD mn_status mn_view_scatter_add(mn_view_t *v, int dim, const mn_view_t *index, const mn_view_t *src,
                                                  mn_stream_t *stream);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_INDEX_H */
