/* storage/view.c: strided views over storages: construction with bounds
 * checks, the invariant checker, queries and shared geometry helpers.
 * Views are immutable after creation; any thread may read one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "kernels/ops.h"
#include "runtime/checked.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "storage/storage.h"
#include "storage/view_internal.h"

const char *mn__format_sizes(const int64_t *sizes, int ndim, char *buf, size_t n) {
  size_t at = 0;
  at += (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)sizes[d]);
  if (at < n) snprintf(buf + at, n - at, "]");
  return buf;
}

bool mn__contiguous_strides(const int64_t *sizes, int ndim, int64_t *strides) {
  bool ovf = false;
  int64_t acc = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    strides[d] = acc;
    if (d > 0) acc = mn__ck_mul(acc, sizes[d] > 1 ? sizes[d] : 1, &ovf);
  }
  return !ovf;
}

mn_status mn__wrap_dim(int64_t dim, int ndim, bool wrap_scalar, const char *func, int *out) {
  int64_t n = ndim;
  if (n == 0) {
    if (!wrap_scalar)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "dimension specified as %lld but tensor has no dimensions",
                       (long long)dim);
    n = 1;
  }
  if (dim < -n || dim > n - 1)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)", (long long)-n,
                     (long long)(n - 1), (long long)dim);
  *out = (int)(dim < 0 ? dim + n : dim);
  return MN_OK;
}

mn_status mn__view_stream(mn_device_t dev, mn_stream_t *given, mn_stream_t **out) {
  if (given) {
    *out = given;
    return MN_OK;
  }
  return mn_stream_default(dev, out);
}

int mn__dtype_packed_per_byte(mn_dtype dtype) {
  int bits = mn_dtype_bits(dtype);
  return bits > 0 && bits < 8 ? 8 / bits : 0;
}

/* Bytes of n elements of dtype: n * itemsize, or ceil(n * bits / 8) packed. */
static size_t dtype_bytes_of(mn_dtype dtype, size_t n) {
  int per = mn__dtype_packed_per_byte(dtype);
  return per ? n / (size_t)per + (n % (size_t)per != 0) : n * mn_dtype_itemsize(dtype);
}

/* Checks that every element the geometry reaches lies inside nbytes of
 * storage, in overflow-checked arithmetic (runtime/checked.h): PyTorch's
 * computeStorageNbytes refuses a geometry whose extent overflows as well.
 * Packed dtypes count the bytes holding the elements, from a byte start. */
static mn_status check_geometry(const char *func, mn_dtype dtype, int ndim, const int64_t *sizes,
                                const int64_t *strides, int64_t offset, size_t nbytes) {
  size_t item = mn_dtype_itemsize(dtype);
  const int per = mn__dtype_packed_per_byte(dtype);
  if (offset < 0) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "storage offset %lld is negative", (long long)offset);
  if (per && offset % per != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "storage offset %lld of a %s view does not start a byte (%d elements per byte)", (long long)offset,
                     mn_dtype_name(dtype), per);
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "size %lld at dim %d is negative", (long long)sizes[d], d);
    if (strides[d] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stride %lld at dim %d is negative", (long long)strides[d], d);
  }
  /* Even a view of no elements keeps a byte offset that must be computable. */
  bool ovf = false;
  mn__ck_size_mul(mn__ck_to_size(offset, &ovf), item, &ovf);
  size_t need = 0;
  if (ovf || !mn__strided_span_bytes(ndim, sizes, strides, offset, item, &need)) {
    char sz[512], st[512];
    return mn__error(MN_ERR_OVERFLOW, func,
                     "storage size calculation overflowed with sizes=%s, strides=%s, offset %lld and itemsize %zu",
                     mn__format_sizes(sizes, ndim, sz, sizeof sz), mn__format_sizes(strides, ndim, st, sizeof st),
                     (long long)offset, item);
  }
  /* packed: need counted elements (item 1); the bytes holding them */
  if (per) need = need / (size_t)per + (need % (size_t)per != 0);
  /* A view of no elements reaches nothing (PyTorch skips the check too). */
  if (need > nbytes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "view reaches byte %zu but the storage has %zu bytes (offset %lld, itemsize %zu)", need, nbytes,
                     (long long)offset, item);
  return MN_OK;
}

static mn_status check_sizes_product(const char *func, int ndim, const int64_t *sizes) {
  /* numel must fit in int64 (PyTorch's limit as well). */
  bool ovf = false;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0) continue; /* reported by check_geometry */
    n = mn__ck_mul(n, sizes[d], &ovf);
    if (ovf) return mn__error(MN_ERR_OVERFLOW, func, "numel overflows at dim %d", d);
  }
  return MN_OK;
}

static mn_status view_make_q(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset, double q_scale, int64_t q_zero_point,
                             const char *func, mn_view_t **out) {
  mn_status st = check_sizes_product(func, ndim, sizes);
  if (st == MN_OK) st = check_geometry(func, dtype, ndim, sizes, strides, offset, mn_storage_nbytes(storage));
  if (st != MN_OK) return st;
  mn_view_t *v = mn__calloc(1, sizeof *v);
  if (!v) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  v->storage = mn__storage_view_attach(storage);
  v->dtype = dtype;
  v->ndim = ndim;
  if (ndim) {
    memcpy(v->sizes, sizes, (size_t)ndim * sizeof *sizes);
    memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
  }
  v->offset = offset;
  if (mn_dtype_is_quantized(dtype)) {
    v->q_scale = q_scale;
    v->q_zero_point = q_zero_point;
  }
  *out = v;
  return MN_OK;
}

static mn_status view_make(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                           const int64_t *strides, int64_t offset, const char *func, mn_view_t **out) {
  return view_make_q(storage, dtype, ndim, sizes, strides, offset, 1.0, 0, func, out);
}

/* mn_view_create and mn_view_create_quantized: the caller's arguments
 * checked, NULL strides made contiguous, the view made. */
static mn_status create_checked(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                                const int64_t *strides, int64_t offset, double scale, int64_t zero_point,
                                const char *func, mn_view_t **out) {
  if (!storage || !out) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "storage and out must not be NULL");
  if (!mn_dtype_is_valid(dtype)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid dtype %d", (int)dtype);
  if (ndim < 0 || ndim > MN_MAX_DIMS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  if (ndim > 0 && !sizes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sizes must not be NULL when ndim=%d", ndim);
  int64_t contig[MN_MAX_DIMS];
  if (!strides) {
    for (int d = 0; d < ndim; d++)
      if (sizes[d] < 0)
        return mn__error(MN_ERR_INVALID_ARGUMENT, func, "size %lld at dim %d is negative", (long long)sizes[d], d);
    if (!mn__contiguous_strides(sizes, ndim, contig))
      return mn__error(MN_ERR_OVERFLOW, func, "contiguous strides overflow");
    strides = contig;
  }
  return view_make_q(storage, dtype, ndim, sizes, strides, offset, scale, zero_point, func, out);
}

mn_status mn_view_create(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                         const int64_t *strides, int64_t offset, mn_view_t **out) {
  return create_checked(storage, dtype, ndim, sizes, strides, offset, 1.0, 0, __func__, out);
}

void mn__geom_of(const mn_view_t *v, mn__geom_t *g) {
  memset(g, 0, sizeof *g);
  g->dtype = v->dtype;
  g->ndim = v->ndim;
  memcpy(g->sizes, v->sizes, sizeof g->sizes);
  memcpy(g->strides, v->strides, sizeof g->strides);
  g->offset = v->offset;
  g->q_scale = v->q_scale;
  g->q_zero_point = v->q_zero_point;
}

mn_status mn__view_from_geom(const mn_view_t *v, const mn__geom_t *g, const char *func, mn_view_t **out) {
  if (g->overflow)
    return mn__error(MN_ERR_OVERFLOW, func, "the result's sizes, strides or offset overflow int64 (view of sizes %s)",
                     mn__format_sizes(v->sizes, v->ndim, (char[512]){0}, 512));
  if (g->ndim < 0 || g->ndim > MN_MAX_DIMS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the result would have %d dims; at most %d are supported",
                     g->ndim, MN_MAX_DIMS);
  return view_make_q(v->storage, g->dtype, g->ndim, g->sizes, g->strides, g->offset, g->q_scale, g->q_zero_point,
                     func, out);
}

mn_status mn_view_empty_strided(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes,
                                const int64_t *strides, mn_view_t **out) {
  mn_status st = mn__view_empty_on(dev, dtype, ndim, sizes, strides, NULL, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn__view_empty_on(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes, const int64_t *strides,
                            mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || sizes != NULL, "sizes must not be NULL when ndim=%d", ndim);
  int64_t contig[MN_MAX_DIMS];
  for (int d = 0; d < ndim; d++) {
    MN__CHECK_ARG(sizes[d] >= 0, "size %lld at dim %d is negative", (long long)sizes[d], d);
    MN__CHECK_ARG(!strides || strides[d] >= 0, "stride %lld at dim %d is negative", (long long)strides[d], d);
  }
  mn_status st = check_sizes_product(__func__, ndim, sizes);
  if (st != MN_OK) return st;
  if (!strides) {
    if (!mn__contiguous_strides(sizes, ndim, contig))
      return mn__error(MN_ERR_OVERFLOW, __func__, "contiguous strides overflow");
    strides = contig;
  }
  size_t nbytes = 0;
  if (!mn__strided_span_bytes(ndim, sizes, strides, 0, mn_dtype_itemsize(dtype), &nbytes))
    return mn__error(MN_ERR_OVERFLOW, __func__, "storage size overflows");
  if (mn__dtype_packed_per_byte(dtype)) nbytes = dtype_bytes_of(dtype, nbytes); /* nbytes counted elements */
  mn_storage_t *s = NULL;
  if (stream && !mn_device_equal(mn_stream_device(stream), dev)) stream = NULL;
  st = mn_storage_create(dev, nbytes, NULL, stream, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = view_make(s, dtype, ndim, sizes, strides, 0, __func__, out);
  mn_storage_release(s); /* the view holds its own reference */
  return st;
}

mn_status mn_view_empty(mn_device_t dev, mn_dtype dtype, int ndim, const int64_t *sizes, mn_view_t **out) {
  mn_status st = mn_view_empty_strided(dev, dtype, ndim, sizes, NULL, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_as_strided(const mn_view_t *v, int ndim, const int64_t *sizes, const int64_t *strides,
                             int64_t offset, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || (sizes != NULL && strides != NULL), "sizes and strides must not be NULL");
  if (offset == MN_VIEW_OFFSET_KEEP) offset = v->offset;
  MN__CHECK_ARG(offset >= 0, "Tensor: invalid storage offset %lld", (long long)offset);
  for (int d = 0; d < ndim; d++) {
    MN__CHECK_ARG(sizes[d] >= 0, "Trying to create tensor with negative dimension %lld", (long long)sizes[d]);
    MN__CHECK_ARG(strides[d] >= 0, "as_strided: Negative strides are not supported at the moment, got strides: %lld",
                  (long long)strides[d]);
  }
  return view_make_q(v->storage, v->dtype, ndim, sizes, strides, offset, v->q_scale, v->q_zero_point, __func__, out);
}

void mn_view_destroy(mn_view_t *v) {
  if (!v) return;
  mn__storage_view_detach(v->storage);
  free(v);
}

mn_status mn_view_check(const mn_view_t *v) {
  if (!v) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "view must not be NULL");
  if (!v->storage) return mn__error(MN_ERR_INTERNAL, __func__, "view has no storage");
  if (!mn_dtype_is_valid(v->dtype)) return mn__error(MN_ERR_INTERNAL, __func__, "invalid dtype %d", (int)v->dtype);
  if (v->ndim < 0 || v->ndim > MN_MAX_DIMS) return mn__error(MN_ERR_INTERNAL, __func__, "ndim=%d", v->ndim);
  mn_status st = check_sizes_product(__func__, v->ndim, v->sizes);
  if (st == MN_OK)
    st = check_geometry(__func__, v->dtype, v->ndim, v->sizes, v->strides, v->offset, mn_storage_nbytes(v->storage));
  return st == MN_OK ? MN_OK : mn__error(MN_ERR_INTERNAL, __func__, "broken view invariant: %s", mn__last_error_detail());
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

size_t mn_view_nbytes(const mn_view_t *v) {
  bool ovf = false; /* an expanded view can hold more elements than bytes exist */
  size_t n = mn__ck_size_mul(mn__ck_to_size(mn_view_numel(v), &ovf), mn_dtype_itemsize(v->dtype), &ovf);
  if (!ovf && mn__dtype_packed_per_byte(v->dtype)) n = dtype_bytes_of(v->dtype, n); /* ceil(numel * bits / 8) */
  return ovf ? SIZE_MAX : n;
}

void *mn_view_data(const mn_view_t *v) {
  char *base = mn_storage_data(v->storage);
  /* An empty view may sit past its storage (PyTorch allows any offset when
   * nothing is reached): integer arithmetic, as no byte there is ever used. */
  int per = mn__dtype_packed_per_byte(v->dtype); /* packed: the offset starts a byte */
  return base ? (void *)((uintptr_t)base + (per ? (uintptr_t)v->offset / (uintptr_t)per
                                                : (uintptr_t)v->offset * mn_dtype_itemsize(v->dtype)))
              : NULL;
}

/* PyTorch's rule: dims of size 1 are ignored; empty views are contiguous. */
bool mn_view_is_contiguous(const mn_view_t *v) {
  for (int d = 0; d < v->ndim; d++)
    if (v->sizes[d] == 0) return true;
  int64_t expected = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->sizes[d] == 1) continue;
    if (v->strides[d] != expected) return false;
    expected *= v->sizes[d];
  }
  return true;
}

/* c10's compute_channels_last_contiguous_2d/3d: dims visited in the order
 * C, W, H, N (C, W, H, D, N), size-1 dims skipped, no special case for 0. */
static bool channels_last_rule(const mn_view_t *v, const int *order, int n) {
  int64_t expected = 1;
  for (int i = 0; i < n; i++) {
    int d = order[i];
    if (v->sizes[d] == 1) continue;
    if (v->strides[d] != expected) return false;
    expected *= v->sizes[d];
  }
  return true;
}

bool mn_view_is_contiguous_channels_last(const mn_view_t *v) {
  static const int order[4] = {1, 3, 2, 0};
  return v->ndim == 4 && channels_last_rule(v, order, 4);
}

bool mn_view_is_contiguous_channels_last_3d(const mn_view_t *v) {
  static const int order[5] = {1, 4, 3, 2, 0};
  return v->ndim == 5 && channels_last_rule(v, order, 5);
}

/* c10's compute_non_overlapping_and_dense: the dims of size >= 2, sorted by
 * stride, must be exactly packed. */
bool mn_view_is_non_overlapping_and_dense(const mn_view_t *v) {
  if (mn_view_is_contiguous(v) || mn_view_is_contiguous_channels_last(v) || mn_view_is_contiguous_channels_last_3d(v))
    return true;
  mn__strided_t t;
  mn__strided_of_view(v, &t);
  return mn__strided_is_dense(&t);
}

bool mn_view_shares_storage(const mn_view_t *a, const mn_view_t *b) { return a->storage == b->storage; }

bool mn_view_same_storage_and_layout(const mn_view_t *a, const mn_view_t *b) {
  if (a->storage != b->storage || a->dtype != b->dtype || a->ndim != b->ndim || a->offset != b->offset) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d]) return false;
  return true;
}

/* ---- quantized views (mnemo/quantized.h) ---------------------------------- */

bool mn_view_is_quantized(const mn_view_t *v) { return v != NULL && mn_dtype_is_quantized(v->dtype); }
double mn_view_q_scale(const mn_view_t *v) { return mn_view_is_quantized(v) ? v->q_scale : 0.0; }
int64_t mn_view_q_zero_point(const mn_view_t *v) { return mn_view_is_quantized(v) ? v->q_zero_point : 0; }

mn_status mn__check_qparams(mn_dtype dtype, double scale, int64_t zero_point, const char *func) {
  int64_t qmin = 0, qmax = 0;
  if (!mn_dtype_is_quantized(dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "dtype %s is not quantized (need qint8, quint8, qint32, quint4x2 or quint2x4)",
                     mn_dtype_name(dtype));
  if (!(scale > 0) || scale - scale != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "scale %g must be finite and > 0", scale);
  if (mn_dtype_quant_range(dtype, &qmin, &qmax) != MN_OK) return mn__error_wrap(MN_ERR_INVALID_ARGUMENT, func);
  if (zero_point < qmin || zero_point > qmax)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "zero_point %lld is out of range for %s [%lld, %lld]",
                     (long long)zero_point, mn_dtype_name(dtype), (long long)qmin, (long long)qmax);
  return MN_OK;
}

mn_status mn_view_create_quantized(mn_storage_t *storage, mn_dtype dtype, int ndim, const int64_t *sizes,
                                   const int64_t *strides, int64_t offset, double scale, int64_t zero_point,
                                   mn_view_t **out) {
  MN__CHECK_ARG(storage != NULL && out != NULL, "storage and out must not be NULL");
  mn_status st = mn__check_qparams(dtype, scale, zero_point, __func__);
  if (st != MN_OK) return st;
  return create_checked(storage, dtype, ndim, sizes, strides, offset, scale, zero_point, __func__, out);
}

void mn__view_set_qparams(mn_view_t *v, double scale, int64_t zero_point) {
  if (mn_dtype_is_quantized(v->dtype)) {
    v->q_scale = scale;
    v->q_zero_point = zero_point;
  }
}

void mn__strided_of_view(const mn_view_t *v, mn__strided_t *out) {
  memset(out, 0, sizeof *out);
  out->data = mn_view_data(v);
  out->ndim = v->ndim;
  memcpy(out->sizes, v->sizes, (size_t)v->ndim * sizeof v->sizes[0]);
  memcpy(out->strides, v->strides, (size_t)v->ndim * sizeof v->strides[0]);
}
