/* storage/view_copy.c: the view operations that may copy (reshape, flatten,
 * contiguous, clone, to, empty_like) and the in-place writes (copy_, fill_,
 * zero_) with PyTorch's overlap rules. Work is queued on streams; see
 * docs/VIEWS.md. On the meta device the copies make new storages and run no
 * kernel, writes are checked and then do nothing, and nothing is copied out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "runtime/error.h"
#include "storage/view_internal.h"

/* PyTorch's has_internal_overlap answering YES: not dense and a dim of size
 * > 1 with stride 0. (TOO_HARD layouts are allowed, as in PyTorch.) */
static bool internal_overlap(const mn_view_t *v) {
  if (mn_view_is_non_overlapping_and_dense(v)) return false;
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] == 0 && v->sizes[d] > 1) return true;
  return false;
}

typedef mn__overlap overlap_t;
#define OVERLAP_NO MN__OVERLAP_NO
#define OVERLAP_PARTIAL MN__OVERLAP_PARTIAL
#define OVERLAP_TOO_HARD MN__OVERLAP_TOO_HARD

/* PyTorch's get_overlap_status of two views of one storage (the kernels' one
 * check, kernels/ops.h); views of different storages do not overlap. */
static overlap_t overlap_status(const mn_view_t *a, const mn_view_t *b) {
  if (a->storage != b->storage) return OVERLAP_NO;
  mn__strided_t ta, tb;
  mn__strided_of_view(a, &ta);
  mn__strided_of_view(b, &tb);
  if (mn__is_meta(mn_view_device(a))) { /* no address: the offsets alone tell (one storage) */
    const uintptr_t base = (uintptr_t)1 << 40;
    ta.data = (char *)(base + (uintptr_t)a->offset * mn_dtype_itemsize(a->dtype));
    tb.data = (char *)(base + (uintptr_t)b->offset * mn_dtype_itemsize(b->dtype));
  }
  return mn__strided_overlap(&ta, mn_dtype_itemsize(a->dtype), &tb, mn_dtype_itemsize(b->dtype));
}

/* clone's layout (PyTorch's empty_like with preserve_format): v's strides when
 * v is non-overlapping and dense, else dense strides following v's stride order
 * (ATen's infer_dense_strides). */
static void dense_strides_like(const mn_view_t *v, int64_t *out) {
  if (mn_view_is_non_overlapping_and_dense(v)) {
    memcpy(out, v->strides, (size_t)v->ndim * sizeof *out);
    return;
  }
  int n = v->ndim, perm[MN_MAX_DIMS];
  for (int i = 0; i < n; i++) perm[i] = n - 1 - i; /* innermost first */
  for (int i = 1; i < n; i++) {
    int d1 = i;
    for (int d0 = i - 1; d0 >= 0; d0--) {
      int64_t s0 = v->strides[perm[d0]], s1 = v->strides[perm[d1]];
      int cmp = 0;
      if (s0 != 0 && s1 != 0) {
        if (s0 < s1) cmp = -1;
        else if (s0 > s1) cmp = 1;
        else if (v->sizes[perm[d0]] > v->sizes[perm[d1]]) cmp = 1;
      }
      if (cmp > 0) {
        int t = perm[d0];
        perm[d0] = perm[d1];
        perm[d1] = t;
        d1 = d0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  int64_t acc = 1;
  for (int i = 0; i < n; i++) {
    out[perm[i]] = acc;
    acc *= v->sizes[perm[i]] > 1 ? v->sizes[perm[i]] : 1;
  }
}

/* Whether a and b (same sizes) are non-overlapping and dense with the same
 * strides on every dim of size > 1: their elements then fill one byte range
 * each, in the same order. */
static bool same_dense_layout(const mn_view_t *a, const mn_view_t *b) {
  if (!mn_view_is_non_overlapping_and_dense(a) || !mn_view_is_non_overlapping_and_dense(b)) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] > 1 && a->strides[d] != b->strides[d]) return false;
  return true;
}

/* A new handle with v's geometry (no copy). */
static mn_status same_view(const mn_view_t *v, const char *func, mn_view_t **out) {
  mn__geom_t g;
  mn__geom_of(v, &g);
  return mn__view_from_geom(v, &g, func, out);
}

/* Waits for `stream` unless it is the CPU's (where work ran at once). */
static mn_status sync_if_queued(mn_stream_t *stream) {
  if (mn_stream_device(stream).type == MN_DEVICE_CPU) return MN_OK;
  return mn_stream_synchronize(stream);
}

/* A dense copy of v on v's device laid out by `strides` (NULL: contiguous),
 * dtype `dtype`, queued on `stream` (a stream of v's device). */
static mn_status copy_to_new(const mn_view_t *v, mn_dtype dtype, const int64_t *strides, mn_stream_t *stream,
                             const char *func, mn_view_t **out) {
  mn_view_t *r = NULL;
  mn_status st = mn__view_empty_on(mn_view_device(v), dtype, v->ndim, v->sizes, strides, stream, &r);
  if (st == MN_OK && dtype == v->dtype) mn__view_set_qparams(r, v->q_scale, v->q_zero_point);
  if (st == MN_OK && mn_view_numel(v) > 0 && !mn__is_meta(mn_view_device(v))) st = mn_kernel_copy_view(stream, r, v);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return mn__error_wrap(st, func);
  }
  *out = r;
  return MN_OK;
}

mn_status mn_view_contiguous(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  if (mn_view_is_contiguous(v)) return same_view(v, __func__, out);
  mn_stream_t *s = NULL;
  mn_status st = mn__view_stream(mn_view_device(v), stream, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  return copy_to_new(v, v->dtype, NULL, s, __func__, out);
}

mn_status mn_view_clone(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_stream_t *s = NULL;
  mn_status st = mn__view_stream(mn_view_device(v), stream, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  int64_t strides[MN_MAX_DIMS];
  dense_strides_like(v, strides);
  /* torch 1.13 clones a quantized tensor row-major, whatever its layout */
  return copy_to_new(v, v->dtype, mn_dtype_is_quantized(v->dtype) ? NULL : strides, s, __func__, out);
}

mn_status mn_view_reshape(const mn_view_t *v, int ndim, const int64_t *shape, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || shape != NULL, "shape must not be NULL");
  int64_t sizes[MN_MAX_DIMS], strides[MN_MAX_DIMS];
  mn_status st = mn__infer_size(shape, ndim, mn_view_numel(v), __func__, sizes);
  if (st != MN_OK) return st;
  if (mn__compute_stride(v->sizes, v->strides, v->ndim, sizes, ndim, strides)) {
    mn__geom_t g;
    mn__geom_of(v, &g);
    g.ndim = ndim;
    memcpy(g.sizes, sizes, (size_t)ndim * sizeof *sizes);
    memcpy(g.strides, strides, (size_t)ndim * sizeof *strides);
    return mn__view_from_geom(v, &g, __func__, out);
  }
  mn_stream_t *s = NULL;
  st = mn__view_stream(mn_view_device(v), stream, &s);
  mn_view_t *c = NULL;
  if (st == MN_OK) st = copy_to_new(v, v->dtype, NULL, s, __func__, &c);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = mn_view_view(c, ndim, sizes, out);
  mn_view_destroy(c); /* the result holds the storage */
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_flatten(const mn_view_t *v, int start_dim, int end_dim, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  int a, b;
  mn_status st = mn__wrap_dim(start_dim, v->ndim, true, __func__, &a);
  if (st == MN_OK) st = mn__wrap_dim(end_dim, v->ndim, true, __func__, &b);
  if (st != MN_OK) return st;
  if (a > b)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "flatten() has invalid args: start_dim cannot come after end_dim");
  if (v->ndim == 0) {
    const int64_t one = 1;
    st = mn_view_reshape(v, 1, &one, stream, out);
    return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
  }
  if (a == b) return same_view(v, __func__, out);
  int64_t shape[MN_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < a; d++) shape[k++] = v->sizes[d];
  int64_t merged = 1;
  for (int d = a; d <= b; d++) merged *= v->sizes[d];
  shape[k++] = merged;
  for (int d = b + 1; d < v->ndim; d++) shape[k++] = v->sizes[d];
  st = mn_view_reshape(v, k, shape, stream, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* copy_ behind mn_view_copy and mn_view_to: dst <- broadcast(src), cast. */
static mn_status copy_impl(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream, bool non_blocking,
                           const char *func) {
  if (mn__is_meta(mn_view_device(src)) && !mn__is_meta(mn_view_device(dst)))
    return mn__error(MN_ERR_NOT_SUPPORTED, func, MN__META_NO_DATA);
  if (internal_overlap(dst)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, MN__OVERLAP_MSG);
  mn_status st = mn__check_quant_copy(dst, src, func);
  if (st != MN_OK) return st;
  mn_view_t *bsrc = NULL; /* src broadcast to dst's shape */
  st = mn_view_expand(src, dst->ndim, dst->sizes, &bsrc);
  if (st != MN_OK && st != MN_ERR_INVALID_ARGUMENT) return mn__error_wrap(st, func);
  if (st != MN_OK) {
    char a[512], b[512];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "shapes differ: src %s cannot be broadcast to dst %s",
                     mn__format_sizes(src->sizes, src->ndim, a, sizeof a),
                     mn__format_sizes(dst->sizes, dst->ndim, b, sizeof b));
  }
  if (mn_view_numel(dst) == 0 || (dst->dtype == src->dtype && mn_view_same_storage_and_layout(dst, src))) {
    mn_view_destroy(bsrc);
    return MN_OK;
  }
  overlap_t ov = overlap_status(dst, src); /* PyTorch looks at src before broadcasting */
  if (ov == OVERLAP_NO && overlap_status(dst, bsrc) != OVERLAP_NO) ov = OVERLAP_TOO_HARD;
  if (ov == OVERLAP_PARTIAL) {
    mn_view_destroy(bsrc);
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, MN__PARTIAL_MSG);
  }
  if (mn__is_meta(mn_view_device(dst))) { /* checked; a write into meta has nothing to write */
    mn_view_destroy(bsrc);
    return MN_OK;
  }
  mn_device_t ddev = mn_view_device(dst), sdev = mn_view_device(bsrc);
  bool same_dev = mn_device_equal(ddev, sdev);
  mn_stream_t *s = stream;
  /* NULL: the default stream of the non-CPU side, dst's when both are devices. */
  if (!s) st = mn_stream_default(ddev.type == MN_DEVICE_CPU ? sdev : ddev, &s);
  mn_view_t *tmp = NULL, *tmp2 = NULL;
  bool temps = false;
  if (st == MN_OK && same_dev) {
    if (ov != OVERLAP_NO) { /* full or unknown overlap: read everything first */
      st = copy_to_new(bsrc, bsrc->dtype, NULL, s, func, &tmp);
      if (st == MN_OK) st = mn_kernel_copy_view(s, dst, tmp);
      temps = true;
    } else {
      st = mn_kernel_copy_view(s, dst, bsrc);
    }
  } else if (st == MN_OK) {
    /* Between devices the copy engine moves same-dtype, un-broadcast data;
     * anything else is staged: materialize on src's device, move to a dst
     * device temporary in src's dtype, cast there. */
    bool broadcast = false;
    for (int d = 0; d < bsrc->ndim; d++) broadcast |= bsrc->strides[d] == 0 && bsrc->sizes[d] > 1;
    if (!broadcast && dst->dtype == bsrc->dtype && same_dense_layout(dst, bsrc)) {
      /* Both dense with one layout (e.g. to() of a transposed view): the
       * elements are one byte range on each side. */
      st = mn_copy_bytes(ddev, mn_view_data(dst), sdev, mn_view_data(bsrc), mn_view_nbytes(dst), s,
                         non_blocking ? MN_COPY_NON_BLOCKING : 0);
    } else if (!broadcast && dst->dtype == bsrc->dtype) {
      st = mn_copy_view(dst, bsrc, s, non_blocking);
    } else {
      temps = true;
      const mn_view_t *from = bsrc;
      if (broadcast) {
        mn_stream_t *ss = NULL;
        st = mn_stream_default(sdev, &ss);
        if (st == MN_OK) st = copy_to_new(bsrc, bsrc->dtype, NULL, ss, func, &tmp);
        if (st == MN_OK) st = sync_if_queued(ss);
        from = tmp;
      }
      if (st == MN_OK) st = mn_view_empty(ddev, bsrc->dtype, dst->ndim, dst->sizes, &tmp2);
      if (st == MN_OK) st = mn_copy_view(tmp2, from, NULL, false);
      mn_stream_t *ds = NULL;
      if (st == MN_OK) st = mn__view_stream(ddev, mn_device_equal(mn_stream_device(s), ddev) ? s : NULL, &ds);
      if (st == MN_OK) st = mn_kernel_copy_view(ds, dst, tmp2);
      if (st == MN_OK) st = sync_if_queued(ds);
    }
  }
  /* Temporaries die only after the work reading them has run (also when a
   * later step failed: earlier steps may be queued). */
  if (temps && s) {
    mn_status sync = sync_if_queued(s);
    if (st == MN_OK) st = sync;
  } else if (st == MN_OK && !non_blocking) {
    st = sync_if_queued(s);
  }
  mn_view_destroy(tmp);
  mn_view_destroy(tmp2);
  mn_view_destroy(bsrc);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

mn_status mn_view_copy(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream) {
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL");
  return copy_impl(dst, src, stream, true, __func__);
}

mn_status mn_view_to(const mn_view_t *v, mn_device_t dev, mn_dtype dtype, bool non_blocking, mn_stream_t *stream,
                     mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (mn_device_equal(dev, mn_view_device(v)) && dtype == v->dtype) return same_view(v, __func__, out);
  if (mn__is_meta(mn_view_device(v)) && !mn__is_meta(dev))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, MN__META_NO_DATA);
  int64_t strides[MN_MAX_DIMS];
  dense_strides_like(v, strides);
  mn_view_t *r = NULL;
  st = mn__view_empty_on(dev, dtype, v->ndim, v->sizes, strides, stream, &r);
  if (st == MN_OK && dtype == v->dtype) mn__view_set_qparams(r, v->q_scale, v->q_zero_point);
  if (st == MN_OK) st = copy_impl(r, v, stream, non_blocking, __func__);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return mn__error_wrap(st, __func__);
  }
  *out = r;
  return MN_OK;
}

mn_status mn_view_empty_like(const mn_view_t *v, mn_device_t dev, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  int64_t strides[MN_MAX_DIMS];
  dense_strides_like(v, strides);
  /* laid out as clone: row-major for quantized views, which keep their parameters */
  mn_view_t *r = NULL;
  st = mn__view_empty_on(dev, v->dtype, v->ndim, v->sizes, mn_dtype_is_quantized(v->dtype) ? NULL : strides, NULL, &r);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__view_set_qparams(r, v->q_scale, v->q_zero_point);
  *out = r;
  return MN_OK;
}

/* c10's checked_convert (Scalar::to<T> in fill_): whether `value` is out of
 * the range of `dtype` (negative integers may wrap into unsigned types; inf
 * and NaN fit floating types; a complex with an imaginary part fits only
 * complex types; anything fits bool). */
static bool scalar_overflows(mn_scalar_t value, mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  if (dtype == MN_DTYPE_BOOL || value.kind == MN_SCALAR_BOOL) return false;
  /* the largest finite value of a float (or complex part) and whether it has infinities */
#define FMAX_ROW(A, sfx, val, nm, size, knd, fmt, real, dlc, dlb, dll, st, fmax, inf) [val] = {fmax, inf},
  static const struct {
    double fmax;
    bool has_inf;
  } RANGE[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(FMAX_ROW, ~)};
#undef FMAX_ROW
  const double fmax = RANGE[dtype].fmax;
  const bool has_inf = RANGE[dtype].has_inf;
  bool is_int = info->kind == MN_KIND_INT || info->kind == MN_KIND_UINT;
  int bits = is_int ? (int)info->itemsize * 8 : 64;
  /* The integer range (unused for other kinds). */
  int64_t imin = info->kind == MN_KIND_UINT ? 0 : (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1)));
  uint64_t umax = info->kind == MN_KIND_UINT ? (bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1)
                                             : (bits == 64 ? (uint64_t)INT64_MAX : ((uint64_t)1 << (bits - 1)) - 1);
  double parts[2] = {0, 0};
  int np = 1;
  switch (value.kind) {
    case MN_SCALAR_INT:
      if (!is_int) return (double)value.v.i < -fmax || (double)value.v.i > fmax;
      if (info->kind == MN_KIND_UINT) return value.v.i > 0 ? (uint64_t)value.v.i > umax : -(uint64_t)value.v.i > umax;
      return value.v.i < imin || (value.v.i > 0 && (uint64_t)value.v.i > umax);
    case MN_SCALAR_UINT:
      return is_int ? value.v.u > umax : (double)value.v.u > fmax;
    case MN_SCALAR_FLOAT: parts[0] = value.v.f; break;
    case MN_SCALAR_COMPLEX:
      if (info->kind != MN_KIND_COMPLEX && value.v.c[1] != 0) return true;
      parts[0] = value.v.c[0];
      parts[1] = value.v.c[1];
      np = 2;
      break;
    default: return false;
  }
  for (int i = 0; i < np; i++) {
    double f = parts[i];
    if (is_int) {
      if (f != f) return true;
      if (f < (double)imin || f > (double)umax) return true;
    } else {
      if (isinf(f) && has_inf) continue;
      if (f != f) continue;
      if (f < -fmax || f > fmax) return true;
    }
  }
  return false;
}

mn_status mn_view_fill(mn_view_t *v, mn_scalar_t value, mn_stream_t *stream) {
  MN__CHECK_ARG(v != NULL, "view must not be NULL");
  MN__CHECK_ARG(!mn_dtype_is_quantized(v->dtype), "filling a %s view is not supported (quantize a float view instead)",
                mn_dtype_name(v->dtype));
  if (internal_overlap(v)) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, MN__OVERLAP_MSG);
  if (scalar_overflows(value, v->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "value cannot be converted to type %s without overflow",
                     mn_dtype_name(v->dtype));
  /* Scalar::to<bool> of a complex looks at the real part only. */
  if (v->dtype == MN_DTYPE_BOOL && value.kind == MN_SCALAR_COMPLEX) value = mn_scalar_float(value.v.c[0]);
  if (mn_view_numel(v) == 0) return MN_OK;
  mn_stream_t *s = NULL;
  mn_status st = mn__view_stream(mn_view_device(v), stream, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!mn_device_equal(mn_stream_device(s), mn_view_device(v)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "stream is on another device than the view");
  if (mn__is_meta(mn_view_device(v))) return MN_OK; /* checked; nothing to write */
  st = mn_kernel_fill_view(s, v, value);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_zero(mn_view_t *v, mn_stream_t *stream) {
  mn_status st = mn_view_fill(v, mn_scalar_int(0), stream);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
