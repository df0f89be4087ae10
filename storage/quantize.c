/* storage/quantize.c: quantized views (mnemo/quantized.h): quantize_per_tensor,
 * dequantize and int_repr as new dense views (row-major, or channels_last
 * as torch's suggested memory format), run by the kernels layer's
 * quantize job (kernels/quant.h) on the view's device (CPU at once, SIM
 * queued, CUDA kernels); on the meta device only the result's metadata is
 * made. Thread-safe: views are immutable; temporaries live
 * until the stream has run the work that reads them. */
#include <string.h>

#include "kernels/ops.h"
#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "runtime/error.h"
#include "storage/view_internal.h"

/* Waits for `stream` unless it is the CPU's (where work ran at once). */
static mn_status sync_if_queued(mn_stream_t *stream) {
  if (mn_stream_device(stream).type == MN_DEVICE_CPU) return MN_OK;
  return mn_stream_synchronize(stream);
}

/* A contiguous copy of v in dtype (v itself, retained as a new handle, when it
 * already is one). */
static mn_status contiguous_as(const mn_view_t *v, mn_dtype dtype, mn_stream_t *s, mn_view_t **out, bool *copied) {
  *copied = false;
  if (v->dtype == dtype && mn_view_is_contiguous(v)) {
    mn__geom_t g;
    mn__geom_of(v, &g);
    return mn__view_from_geom(v, &g, "mnemo.quantize", out);
  }
  mn_view_t *r = NULL;
  mn_status st = mn__view_empty_on(mn_view_device(v), dtype, v->ndim, v->sizes, NULL, s, &r);
  if (st == MN_OK && dtype == v->dtype) mn__view_set_qparams(r, v->q_scale, v->q_zero_point);
  if (st == MN_OK && mn_view_numel(v) > 0) st = mn_kernel_copy_view(s, r, v);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return st;
  }
  *copied = true;
  *out = r;
  return MN_OK;
}

static void job_of(mn__quant_t *j, mn_dtype dtype, double scale, int64_t zp, int64_t numel) {
  memset(j, 0, sizeof *j);
  j->dtype = (int)dtype;
  j->bits = mn_dtype_bits(dtype);
  j->numel = numel;
  j->scale = (float)scale;
  j->inv_scale = 1.0f / (float)scale; /* torch 1.13: value * (1.0f / float(scale)) */
  j->zp = zp;
  j->zpf = (float)zp;
  if (mn_dtype_quant_range(dtype, &j->qmin, &j->qmax) != MN_OK) j->qmin = j->qmax = 0; /* checked by the caller */
}

/* c10's is_channels_last_strides_2d_s4 / _3d_s5 (what suggest_memory_format
 * reads): dims visited in `order`, strides not decreasing, ambiguous cases
 * (stride 0 on C, N111-like) row-major. */
static bool strides_like_channels_last(const mn_view_t *v, const int *order, int n) {
  if (v->ndim != n || v->strides[1] == 0) return false;
  int64_t min = 0;
  for (int i = 0; i < n; i++) {
    const int d = order[i];
    if (v->sizes[d] == 0 || v->strides[d] < min) return false;
    if (d == 0 && min == v->strides[1]) return false;
    min = v->strides[d];
    if (v->sizes[d] > 1) min *= v->sizes[d];
  }
  return true;
}

/* v's stream: `given` (a stream of v's device) or its default one. */
static mn_status quant_stream(const mn_view_t *v, mn_stream_t *given, mn_stream_t **out) {
  mn_status st = mn__view_stream(mn_view_device(v), given, out);
  if (st == MN_OK && !mn_device_equal(mn_stream_device(*out), mn_view_device(v))) {
    char a[32], b[32];
    mn_device_format(mn_stream_device(*out), a, sizeof a);
    mn_device_format(mn_view_device(v), b, sizeof b);
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mnemo.quantize", "the stream is on %s but the view on %s", a, b);
  }
  return st;
}

/* What the row-major workers take besides v. */
typedef struct qargs {
  double scale;
  int64_t zero_point;
  mn_dtype dtype;
} qargs;
typedef mn_status (*rowmajor_fn)(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out);

/* fn's result laid out as torch 1.13 lays out a quantized op's result: v's
 * suggested memory format (channels_last for a 4-d view with strides like it,
 * channels_last_3d for 5-d; else row-major). fn makes row-major results: it
 * runs on v permuted to NHWC / NDHWC order, and its result is permuted back. */
static mn_status in_suggested_layout(const mn_view_t *v, bool allowed, rowmajor_fn fn, const qargs *a,
                                     mn_stream_t *stream, mn_view_t **out) {
  static const int cl2[4] = {1, 3, 2, 0}, cl3[5] = {1, 4, 3, 2, 0};
  static const int to2[4] = {0, 2, 3, 1}, back2[4] = {0, 3, 1, 2};
  static const int to3[5] = {0, 2, 3, 4, 1}, back3[5] = {0, 4, 1, 2, 3};
  const int *to = NULL, *back = NULL;
  if (allowed && strides_like_channels_last(v, cl2, 4)) to = to2, back = back2;
  else if (allowed && strides_like_channels_last(v, cl3, 5)) to = to3, back = back3;
  if (to == NULL) return fn(v, a, stream, out);
  mn_view_t *p = NULL, *q = NULL;
  mn_status st = mn_view_permute(v, v->ndim, to, &p);
  if (st == MN_OK) st = fn(p, a, stream, &q);
  if (st == MN_OK) st = mn_view_permute(q, q->ndim, back, out);
  mn_view_destroy(p);
  mn_view_destroy(q);
  return st;
}

/* quantize into a new row-major view */
static mn_status quantize_rowmajor(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out) {
  const double scale = a->scale;
  const int64_t zero_point = a->zero_point;
  const mn_dtype dtype = a->dtype;
  mn_stream_t *s = NULL;
  mn_status st = quant_stream(v, stream, &s);
  if (st != MN_OK) return st; /* wrapped by the caller */
  mn_view_t *f = NULL, *r = NULL;
  if (mn__is_meta(mn_view_device(v))) { /* the result's metadata only: nothing read, no kernel */
    st = mn__view_empty_on(mn_view_device(v), dtype, v->ndim, v->sizes, NULL, s, &r);
    if (st == MN_OK) {
      mn__view_set_qparams(r, scale, zero_point);
      *out = r;
    }
    return st;
  }
  bool copied = false;
  st = contiguous_as(v, MN_DTYPE_FLOAT32, s, &f, &copied);
  if (st == MN_OK) st = mn__view_empty_on(mn_view_device(v), dtype, v->ndim, v->sizes, NULL, s, &r);
  if (st == MN_OK) {
    mn__view_set_qparams(r, scale, zero_point);
    mn__quant_t j;
    job_of(&j, dtype, scale, zero_point, mn_view_numel(v));
    j.src = mn_view_data(f);
    j.dst = mn_view_data(r);
    st = mn__kernel_quant(s, &j, "mn_view_quantize_per_tensor");
  }
  if (copied) {
    mn_status sync = sync_if_queued(s); /* f dies after the job read it */
    if (st == MN_OK) st = sync;
  }
  mn_view_destroy(f);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return st; /* wrapped by the caller */
  }
  *out = r;
  return MN_OK;
}

mn_status mn_view_quantize_per_tensor(const mn_view_t *v, double scale, int64_t zero_point, mn_dtype dtype,
                                      mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_status st = mn__check_qparams(dtype, scale, zero_point, __func__);
  if (st != MN_OK) return st;
  if (v->dtype != MN_DTYPE_FLOAT16 && v->dtype != MN_DTYPE_BFLOAT16 && v->dtype != MN_DTYPE_FLOAT32 &&
      v->dtype != MN_DTYPE_FLOAT64)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "Quantize only works on Float Tensor, got %s",
                     mn_dtype_name(v->dtype));
  const qargs qa = {scale, zero_point, dtype};
  /* packed results: row-major (torch 1.13 fails on the others) */
  st = in_suggested_layout(v, !mn__dtype_packed_per_byte(dtype), quantize_rowmajor, &qa, stream, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status need_quantized(const mn_view_t *v, const char *what, const char *func) {
  if (!mn_dtype_is_quantized(v->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s needs a quantized view (qint8, quint8, qint32, quint4x2 or "
                     "quint2x4), not %s", what, mn_dtype_name(v->dtype));
  if (mn__dtype_packed_per_byte(v->dtype) && !mn_view_is_contiguous(v))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s of a %s view needs a contiguous view (packed elements)", what,
                     mn_dtype_name(v->dtype));
  return MN_OK;
}

static mn_status dequantize_rowmajor(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out);
static mn_status int_repr_rowmajor(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out);

mn_status mn_view_dequantize(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_status st = need_quantized(v, "dequantize", __func__);
  if (st == MN_OK) st = in_suggested_layout(v, !mn__dtype_packed_per_byte(v->dtype), dequantize_rowmajor, NULL, stream, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_int_repr(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_status st = need_quantized(v, "int_repr", __func__);
  if (st == MN_OK) st = in_suggested_layout(v, !mn__dtype_packed_per_byte(v->dtype), int_repr_rowmajor, NULL, stream, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status dequantize_rowmajor(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out) {
  (void)a;
  mn_status st;
  mn_stream_t *s = NULL;
  st = quant_stream(v, stream, &s);
  if (st != MN_OK) return st;
  mn_view_t *c = NULL, *r = NULL;
  if (mn__is_meta(mn_view_device(v))) { /* the result's metadata only */
    st = mn__view_empty_on(mn_view_device(v), MN_DTYPE_FLOAT32, v->ndim, v->sizes, NULL, s, &r);
    if (st == MN_OK) *out = r;
    return st;
  }
  bool copied = false;
  st = contiguous_as(v, v->dtype, s, &c, &copied);
  if (st == MN_OK) st = mn__view_empty_on(mn_view_device(v), MN_DTYPE_FLOAT32, v->ndim, v->sizes, NULL, s, &r);
  if (st == MN_OK) {
    mn__quant_t j;
    job_of(&j, v->dtype, v->q_scale, v->q_zero_point, mn_view_numel(v));
    j.dequant = 1;
    j.src = mn_view_data(c);
    j.dst = mn_view_data(r);
    st = mn__kernel_quant(s, &j, "mn_view_dequantize");
  }
  if (copied) {
    mn_status sync = sync_if_queued(s);
    if (st == MN_OK) st = sync;
  }
  mn_view_destroy(c);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return st;
  }
  *out = r;
  return MN_OK;
}

static mn_status int_repr_rowmajor(const mn_view_t *v, const qargs *a, mn_stream_t *stream, mn_view_t **out) {
  (void)a;
  mn_status st;
  mn_stream_t *s = NULL;
  st = quant_stream(v, stream, &s);
  if (st != MN_OK) return st;
  const mn_dtype under = mn_dtype_quant_underlying(v->dtype);
  mn_view_t *src = NULL, *r = NULL;
  if (mn__dtype_packed_per_byte(v->dtype)) { /* the packed bytes themselves, 1-d */
    int64_t nb = (int64_t)mn_view_nbytes(v);
    st = mn_view_create(v->storage, MN_DTYPE_UINT8, 1, &nb, NULL, v->offset / mn__dtype_packed_per_byte(v->dtype), &src);
    if (st == MN_OK) st = mn__view_empty_on(mn_view_device(v), MN_DTYPE_UINT8, 1, &nb, NULL, s, &r);
  } else { /* the same elements read as the stored integers */
    st = mn_view_create(v->storage, under, v->ndim, v->sizes, v->strides, v->offset, &src);
    if (st == MN_OK) st = mn__view_empty_on(mn_view_device(v), under, v->ndim, v->sizes, NULL, s, &r);
  }
  if (st == MN_OK && mn_view_numel(r) > 0 && !mn__is_meta(mn_view_device(v)))
    st = mn_kernel_copy_view(s, r, src); /* v holds the storage */
  mn_view_destroy(src);
  if (st != MN_OK) {
    mn_view_destroy(r);
    return st;
  }
  *out = r;
  return MN_OK;
}
