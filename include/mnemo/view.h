/* mnemo/view.h: strided views over storages (PyTorch's tensor metadata):
 * dtype, sizes, strides in elements, storage offset in elements. */
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

#define MN_MAX_DIMS 25

typedef struct mn_view_s mn_view_t;

/* A view of `storage` (retained) with explicit sizes, strides (elements; NULL
 * means contiguous) and offset (elements). Every reachable element must lie
 * inside the storage; negative sizes/strides are refused. */
mn_status mn_view_create(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                         const int64_t *strides, int64_t offset, mn_view_t **out);
/* A contiguous view over a new storage on `dev` (default allocator). */
mn_status mn_view_empty(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes,
                        mn_view_t **out);
void mn_view_destroy(mn_view_t *v);

int mn_view_ndim(const mn_view_t *v);
int64_t mn_view_size(const mn_view_t *v, int dim);   /* dim may be negative */
int64_t mn_view_stride(const mn_view_t *v, int dim); /* elements */
const int64_t *mn_view_sizes(const mn_view_t *v);
const int64_t *mn_view_strides(const mn_view_t *v);
int64_t mn_view_offset(const mn_view_t *v);          /* elements */
int64_t mn_view_numel(const mn_view_t *v);
mn_dtype mn_view_dtype(const mn_view_t *v);
mn_device_t mn_view_device(const mn_view_t *v);
mn_storage_t *mn_view_storage(const mn_view_t *v);   /* borrowed */
/* Address of element 0 (storage data + offset * itemsize). */
void *mn_view_data(const mn_view_t *v);
bool mn_view_is_contiguous(const mn_view_t *v);

/* Writes `value` (cast to the view's dtype) into every element, on `stream`
 * (NULL: the device's default). The skeleton handles contiguous views; the
 * kernels issue generalizes it. */
mn_status mn_view_fill(mn_view_t *v, mn_scalar_t value, mn_stream_t *stream);
/* Copies src into dst: same dtype and shape, any devices and layouts the copy
 * engine supports; mn_copy_view(dst, src, stream, true) of mnemo/copy.h.
 * Ordered on `stream` (NULL: the default stream of the non-CPU device). */
mn_status mn_view_copy(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_VIEW_H */
