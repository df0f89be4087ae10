/* runtime/view.c: strided views over storages: construction with bounds
 * checks, queries, and the skeleton's contiguous fill and copy. */
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"

struct mn_view_s {
  mn_storage_t *storage; /* one reference held */
  mn_dtype dtype;
  int ndim;
  int64_t sizes[MN_MAX_DIMS];
  int64_t strides[MN_MAX_DIMS];
  int64_t offset;
};

/* Checks that every element the geometry reaches lies inside nbytes of storage. */
static mn_status check_geometry(const char *func, mn_dtype dtype, int ndim, const int64_t *sizes,
                                const int64_t *strides, int64_t offset, size_t nbytes) {
  size_t item = mn_dtype_itemsize(dtype);
  if (offset < 0) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "storage offset %lld is negative", (long long)offset);
  bool empty = false;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "size %lld at dim %d is negative", (long long)sizes[d], d);
    if (strides[d] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stride %lld at dim %d is negative", (long long)strides[d], d);
    if (sizes[d] == 0) empty = true;
  }
  /* The last reachable element: offset + sum((size-1) * stride). */
  unsigned __int128 last = (unsigned __int128)offset;
  if (!empty)
    for (int d = 0; d < ndim; d++) last += (unsigned __int128)(sizes[d] - 1) * (unsigned __int128)strides[d];
  unsigned __int128 need = empty ? (unsigned __int128)offset * item : (last + 1) * item;
  if (need > nbytes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "view reaches byte %llu but the storage has %zu bytes (offset %lld, itemsize %zu)",
                     (unsigned long long)(need > (unsigned __int128)UINT64_MAX ? UINT64_MAX : (uint64_t)need), nbytes,
                     (long long)offset, item);
  return MN_OK;
}

mn_status mn_view_create(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                         const int64_t *strides, int64_t offset, mn_view_t **out) {
  MN__CHECK_ARG(storage != NULL && out != NULL, "storage and out must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || sizes != NULL, "sizes must not be NULL when ndim=%d", ndim);
  int64_t contig[MN_MAX_DIMS];
  if (!strides) {
    int64_t acc = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      contig[d] = acc;
      if (sizes[d] > 0 && acc > INT64_MAX / sizes[d])
        return mn__error(MN_ERR_OVERFLOW, __func__, "contiguous strides overflow at dim %d", d);
      acc *= sizes[d] > 1 ? sizes[d] : 1;
    }
    strides = contig;
  }
  mn_status st = check_geometry(__func__, dtype, ndim, sizes, strides, offset, mn_storage_nbytes(storage));
  if (st != MN_OK) return st;
  mn_view_t *v = calloc(1, sizeof *v);
  if (!v) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  v->storage = mn_storage_retain(storage);
  v->dtype = dtype;
  v->ndim = ndim;
  if (ndim) {
    memcpy(v->sizes, sizes, (size_t)ndim * sizeof *sizes);
    memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
  }
  v->offset = offset;
  *out = v;
  return MN_OK;
}

mn_status mn_view_empty(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes, mn_view_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || sizes != NULL, "sizes must not be NULL when ndim=%d", ndim);
  size_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    MN__CHECK_ARG(sizes[d] >= 0, "size %lld at dim %d is negative", (long long)sizes[d], d);
    if (sizes[d] && numel > SIZE_MAX / (size_t)sizes[d] / mn_dtype_itemsize(dtype))
      return mn__error(MN_ERR_OVERFLOW, __func__, "numel overflows at dim %d", d);
    numel *= (size_t)sizes[d];
  }
  mn_storage_t *s = NULL;
  mn_status st = mn_storage_create(dev, numel * mn_dtype_itemsize(dtype), NULL, NULL, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = mn_view_create(s, dtype, ndim, sizes, NULL, 0, out);
  mn_storage_release(s); /* the view holds its own reference */
  return st;
}

void mn_view_destroy(mn_view_t *v) {
  if (!v) return;
  mn_storage_release(v->storage);
  free(v);
}

int mn_view_ndim(const mn_view_t *v) { return v->ndim; }

static int wrap_dim(const mn_view_t *v, int dim) { return dim < 0 ? dim + v->ndim : dim; }

int64_t mn_view_size(const mn_view_t *v, int dim) {
  dim = wrap_dim(v, dim);
  return (dim >= 0 && dim < v->ndim) ? v->sizes[dim] : -1;
}

int64_t mn_view_stride(const mn_view_t *v, int dim) {
  dim = wrap_dim(v, dim);
  return (dim >= 0 && dim < v->ndim) ? v->strides[dim] : -1;
}

const int64_t *mn_view_sizes(const mn_view_t *v) { return v->sizes; }
const int64_t *mn_view_strides(const mn_view_t *v) { return v->strides; }
int64_t mn_view_offset(const mn_view_t *v) { return v->offset; }
mn_dtype mn_view_dtype(const mn_view_t *v) { return v->dtype; }
mn_device_t mn_view_device(const mn_view_t *v) { return mn_storage_device(v->storage); }
mn_storage_t *mn_view_storage(const mn_view_t *v) { return v->storage; }

int64_t mn_view_numel(const mn_view_t *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->sizes[d];
  return n;
}

void *mn_view_data(const mn_view_t *v) {
  char *base = mn_storage_data(v->storage);
  return base ? base + (size_t)v->offset * mn_dtype_itemsize(v->dtype) : NULL;
}

/* PyTorch's rule: dims of size 1 are ignored; empty views are contiguous. */
bool mn_view_is_contiguous(const mn_view_t *v) {
  int64_t expected = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->sizes[d] == 0) return true;
    if (v->sizes[d] == 1) continue;
    if (v->strides[d] != expected) return false;
    expected *= v->sizes[d];
  }
  return true;
}

static mn_status view_stream(mn_device_t dev, mn_stream_t *given, mn_stream_t **out) {
  if (given) {
    *out = given;
    return MN_OK;
  }
  return mn_stream_default(dev, out);
}

mn_status mn_view_fill(mn_view_t *v, mn_scalar_t value, mn_stream_t *stream) {
  MN__CHECK_ARG(v != NULL, "view must not be NULL");
  if (!mn_view_is_contiguous(v))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "fill of a non-contiguous view is not implemented yet");
  unsigned char pattern[16];
  mn_status st = mn_scalar_to_bytes(value, v->dtype, pattern);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_stream_t *s = NULL;
  st = view_stream(mn_view_device(v), stream, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!mn_device_equal(mn_stream_device(s), mn_view_device(v)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "stream is on another device than the view");
  st = mn_kernel_fill(s, mn_view_data(v), (size_t)mn_view_numel(v), mn_dtype_itemsize(v->dtype), pattern);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_copy(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream) {
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL");
  MN__CHECK_ARG(dst->dtype == src->dtype, "dtypes differ: dst %s, src %s (casting copies come later)",
                mn_dtype_name(dst->dtype), mn_dtype_name(src->dtype));
  bool same_shape = dst->ndim == src->ndim;
  for (int d = 0; same_shape && d < dst->ndim; d++) same_shape = dst->sizes[d] == src->sizes[d];
  MN__CHECK_ARG(same_shape, "shapes differ (dst ndim %d, src ndim %d)", dst->ndim, src->ndim);
  /* The copy engine (runtime/copy.c): any layout, any devices, non_blocking. */
  mn_status st = mn_copy_view(dst, src, stream, true);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
