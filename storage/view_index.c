/* storage/view_index.c: advanced indexing (mnemo/index.h): index_select,
 * take, gather, masked_select, index (x[i, :, mask]) as gathers into new
 * storages, and index_put_, scatter_, scatter_add_ as scatters into a view.
 * Every argument and every index is checked here, with PyTorch 1.13's
 * messages, before a byte is written (the indices are read on the host);
 * the moves are the kernels of kernels/index.h. Thread-safe as the views
 * it takes (no state of its own). */
#include <stdlib.h>
#include <string.h>

#include "kernels/index.h"
#include "kernels/ops.h"
#include "mnemo/index.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "storage/view_internal.h"


/* How an index's range is checked and which of PyTorch's messages a bad one
 * gets. */
typedef enum {
  RANGE_SELECT, /* index_select: [0, size), "index out of range in self" */
  RANGE_TAKE,   /* take: [-size, size) */
  RANGE_DIM,    /* gather, scatter: [0, size), "index i is out of bounds for dimension d ..." */
  RANGE_INDEX   /* index, index_put: [-size, size), as RANGE_DIM's message */
} range_mode;

/* The temporaries of one call: freed at its end (after its queued work ran). */
typedef struct {
  mn_view_t *v[2 * MN_MAX_DIMS + 8];
  int n;
} temps_t;

static mn_view_t *keep(temps_t *t, mn_view_t *v) {
  t->v[t->n++] = v;
  return v;
}

static void temps_free(temps_t *t) {
  for (int i = 0; i < t->n; i++) mn_view_destroy(t->v[i]);
  t->n = 0;
}

/* Quantized views: the gathers move their stored integers and keep scale and
 * zero point (torch 1.13 has index_select and index for them); the packed
 * dtypes (elements inside bytes) and writes into quantized views (torch
 * wants float values to quantize there) are refused. */
static mn_status quant_check(const mn_view_t *v, bool write, const char *func) {
  if (!mn_dtype_is_quantized(v->dtype)) return MN_OK;
  if (write)
    return mn__error(MN_ERR_NOT_SUPPORTED, func,
                     "writing into a %s view through indices is not supported: its values are quantized (write "
                     "into a float view, then mn_view_quantize_per_tensor)",
                     mn_dtype_name(v->dtype));
  if (mn_dtype_bits(v->dtype) < 8)
    return mn__error(MN_ERR_NOT_SUPPORTED, func,
                     "indexing a %s view is not supported: its elements are packed inside bytes (dequantize, or "
                     "index the float view before quantizing)",
                     mn_dtype_name(v->dtype));
  return MN_OK;
}
static bool is_int_index(mn_dtype dt) { return dt == MN_DTYPE_INT32 || dt == MN_DTYPE_INT64; }
static bool is_mask(mn_dtype dt) { return dt == MN_DTYPE_BOOL || dt == MN_DTYPE_UINT8; }

/* PyTorch's has_internal_overlap answering YES (as mn_view_copy). */
static bool internal_overlap(const mn_view_t *v) {
  if (mn_view_is_non_overlapping_and_dense(v)) return false;
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] == 0 && v->sizes[d] > 1) return true;
  return false;
}

static mn__overlap overlap_status(const mn_view_t *a, const mn_view_t *b) {
  if (a->storage != b->storage) return MN__OVERLAP_NO;
  mn__strided_t ta, tb;
  mn__strided_of_view(a, &ta);
  mn__strided_of_view(b, &tb);
  return mn__strided_overlap(&ta, mn_dtype_itemsize(a->dtype), &tb, mn_dtype_itemsize(b->dtype));
}

/* A new handle with v's geometry. */
static mn_status same_view(const mn_view_t *v, const char *func, mn_view_t **out) {
  mn__geom_t g;
  mn__geom_of(v, &g);
  return mn__view_from_geom(v, &g, func, out);
}

/* v seen with another shape and strides (no copy, no checks beyond the storage's). */
static mn_status restride(const mn_view_t *v, int ndim, const int64_t *sizes, const int64_t *strides,
                          const char *func, mn_view_t **out) {
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.ndim = ndim;
  memcpy(g.sizes, sizes, (size_t)ndim * sizeof *sizes);
  memcpy(g.strides, strides, (size_t)ndim * sizeof *strides);
  return mn__view_from_geom(v, &g, func, out);
}

/* A readable host copy of x (x itself, as a new handle, on the CPU). On a
 * queued device the device's work is waited for first: the producer of x
 * may be on any of its streams. */
static mn_status to_host(const mn_view_t *x, const char *func, mn_view_t **out) {
  mn_device_t dev = mn_view_device(x);
  if (dev.type == MN_DEVICE_CPU) return same_view(x, func, out);
  if (mn__is_meta(dev))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "an index on the meta device has no values to read");
  mn_status st = mn_device_synchronize(dev);
  if (st == MN_OK) st = mn_view_to(x, mn_device_cpu(), x->dtype, false, NULL, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* The element of a host view at row-major position given by the counter. */
static int64_t read_int(const mn_view_t *h, const int64_t *at) {
  const char *p = (const char *)mn_view_data(h);
  int64_t off = 0;
  for (int d = 0; d < h->ndim; d++) off += at[d] * h->strides[d];
  if (h->dtype == MN_DTYPE_INT32) {
    int32_t x;
    memcpy(&x, p + off * 4, 4);
    return x;
  }
  if (h->dtype == MN_DTYPE_INT64) {
    int64_t x;
    memcpy(&x, p + off * 8, 8);
    return x;
  }
  return p[off] != 0; /* bool, uint8 */
}

/* Advances a row-major counter over sizes; false after the last element. */
static bool next_pos(int64_t *at, const int64_t *sizes, int ndim) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (++at[d] < sizes[d]) return true;
    at[d] = 0;
  }
  return false;
}

/* Checks every index of x (int32/int64, any device) against a dim of `size`
 * (dim `dim` for the message) of v before anything is written; nothing to
 * read when v or x is on the meta device (as PyTorch's meta kernels). */
static mn_status check_range(const mn_view_t *v, const mn_view_t *x, int64_t size, int dim, range_mode mode,
                             const char *func) {
  if (mn_view_numel(x) == 0 || mn__is_meta(mn_view_device(x)) || mn__is_meta(mn_view_device(v))) return MN_OK;
  mn_view_t *h = NULL;
  mn_status st = to_host(x, func, &h);
  if (st != MN_OK) return st;
  int64_t at[MN_MAX_DIMS] = {0};
  int64_t lo = (mode == RANGE_TAKE || mode == RANGE_INDEX) ? -size : 0;
  if (mn_view_is_contiguous(h)) { /* the common case: one pass over the array, the first bad one found after */
    int64_t n = mn_view_numel(h);
    bool bad = false;
    if (h->dtype == MN_DTYPE_INT64) {
      const int64_t *p = mn_view_data(h);
      for (int64_t k = 0; k < n; k++) bad |= (p[k] < lo) | (p[k] >= size);
    } else {
      const int32_t *p = mn_view_data(h);
      for (int64_t k = 0; k < n; k++) bad |= (p[k] < lo) | (p[k] >= size);
    }
    if (!bad) {
      mn_view_destroy(h);
      return MN_OK;
    }
  }
  do {
    int64_t i = read_int(h, at);
    if (i < lo || i >= size) {
      mn_view_destroy(h);
      switch (mode) {
        case RANGE_SELECT: return mn__error(MN_ERR_INVALID_ARGUMENT, func, "index out of range in self");
        case RANGE_TAKE:
          return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                           "out of range: tried to access index %lld on a tensor of %lld elements.", (long long)i,
                           (long long)size);
        default:
          return mn__error(MN_ERR_INVALID_ARGUMENT, func, "index %lld is out of bounds for dimension %d with size %lld",
                           (long long)i, dim, (long long)size);
      }
    }
  } while (next_pos(at, h->sizes, h->ndim));
  mn_view_destroy(h);
  return MN_OK;
}

/* x on dev (a new handle; a copy when x lives elsewhere or shares storage
 * with `avoid`, the view a scatter writes). Meta: x as it is (only its
 * shape is used). */
static mn_status to_dev(const mn_view_t *x, mn_device_t dev, const mn_view_t *avoid, const char *func,
                        mn_view_t **out) {
  mn_status st;
  if (mn__is_meta(dev) || (mn_device_equal(mn_view_device(x), dev) && !(avoid && mn_view_shares_storage(x, avoid))))
    st = same_view(x, func, out);
  else if (mn_device_equal(mn_view_device(x), dev))
    st = mn_view_clone(x, NULL, out);
  else
    st = mn_view_to(x, dev, x->dtype, false, NULL, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* The stream of a call on dev (NULL on meta). */
static mn_status call_stream(mn_device_t dev, mn_stream_t *given, const char *func, mn_stream_t **out) {
  *out = NULL;
  if (mn__is_meta(dev)) return MN_OK;
  mn_status st = mn__view_stream(dev, given, out);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (!mn_device_equal(mn_stream_device(*out), dev))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream is on another device than the view");
  return MN_OK;
}

/* Ends a call: waits for the queued work when temporaries feed it, frees them. */
static mn_status finish(mn_stream_t *s, temps_t *t, mn_status st, const char *func) {
  if (s && t->n > 0 && mn_stream_device(s).type != MN_DEVICE_CPU) {
    mn_status w = mn_stream_synchronize(s);
    if (st == MN_OK) st = w;
  }
  temps_free(t);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* The kernels' operand of v over an iteration shape of nd dims: element 0 of
 * v, the given strides. */
static void operand(const mn_view_t *v, int nd, const int64_t *sizes, const int64_t *strides, mn__strided_t *o) {
  mn__strided_of_view(v, o);
  o->ndim = nd;
  for (int d = 0; d < nd; d++) {
    o->sizes[d] = sizes[d];
    o->strides[d] = strides[d];
  }
  o->origin = 0;
}

/* A dim list with 0-d seen as [1] (the kernels iterate >= 1 dim). */
static int at_least_1d(const mn_view_t *v, int64_t *sizes, int64_t *strides) {
  if (v->ndim == 0) {
    sizes[0] = 1;
    strides[0] = 0;
    return 1;
  }
  memcpy(sizes, v->sizes, (size_t)v->ndim * sizeof *sizes);
  memcpy(strides, v->strides, (size_t)v->ndim * sizeof *strides);
  return v->ndim;
}

/* ---- advanced indexing: the plan shared by index and index_put ---------- */

typedef struct {
  int n;                      /* integer index operands (masks expanded) */
  int dims[MN__INDEX_MAX];    /* the dim of v each indexes */
  mn_view_t *idx[MN__INDEX_MAX]; /* on v's device (in the call's temps) */
  int bnd;
  int64_t bsizes[MN_MAX_DIMS]; /* their broadcast shape B */
  int rnd;
  int64_t rsizes[MN_MAX_DIMS]; /* the result's shape */
  int64_t vstrides[MN_MAX_DIMS]; /* v's strides over the result (0 on B's dims) */
  mn__index_ops_t ix;          /* (idx data pointers filled in) */
} plan_t;

static const char *fmt(const int64_t *s, int n, char *buf, size_t len) { return mn__format_sizes(s, n, buf, len); }

/* Nonzero of a mask (any device) as k int64 index views on dev (in temps). */
static mn_status mask_indices(const mn_view_t *mask, mn_device_t dev, const mn_view_t *avoid, temps_t *t,
                              const char *func, mn_view_t **out) {
  mn_view_t *h = NULL;
  mn_status st = to_host(mask, func, &h);
  if (st != MN_OK) return st;
  int k = mask->ndim;
  int64_t numel = mn_view_numel(h), nnz = 0;
  int64_t at[MN_MAX_DIMS] = {0};
  if (numel > 0) do {
      nnz += read_int(h, at) != 0;
    } while (next_pos(at, h->sizes, k));
  mn_view_t *cols[MN_MAX_DIMS] = {0};
  for (int j = 0; j < k && st == MN_OK; j++) st = mn_view_empty(mn_device_cpu(), MN_DTYPE_INT64, 1, &nnz, &cols[j]);
  if (st == MN_OK && nnz > 0) {
    memset(at, 0, sizeof at);
    int64_t w = 0;
    do {
      if (read_int(h, at) != 0) {
        for (int j = 0; j < k; j++) ((int64_t *)mn_view_data(cols[j]))[w] = at[j];
        w++;
      }
    } while (next_pos(at, h->sizes, k));
  }
  mn_view_destroy(h);
  for (int j = 0; j < k; j++) {
    mn_view_t *d = NULL;
    if (st == MN_OK) st = to_dev(cols[j], dev, avoid, func, &d);
    if (st == MN_OK) out[j] = keep(t, d);
    mn_view_destroy(cols[j]);
  }
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* Broadcasts the shapes of the plan's indices into B (PyTorch's message). */
static mn_status broadcast_indices(plan_t *p, const char *func) {
  p->bnd = 0;
  for (int j = 0; j < p->n; j++)
    if (p->idx[j]->ndim > p->bnd) p->bnd = p->idx[j]->ndim;
  for (int d = 0; d < p->bnd; d++) p->bsizes[d] = 1;
  for (int j = 0; j < p->n; j++) {
    const mn_view_t *x = p->idx[j];
    for (int i = 0; i < x->ndim; i++) {
      int64_t *b = &p->bsizes[p->bnd - x->ndim + i];
      if (x->sizes[i] == *b || x->sizes[i] == 1) continue;
      if (*b == 1) {
        *b = x->sizes[i];
        continue;
      }
      char msg[1024];
      size_t len = 0;
      for (int q = 0; q < p->n; q++) {
        char s[256];
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s", q ? ", " : "",
                                fmt(p->idx[q]->sizes, p->idx[q]->ndim, s, sizeof s));
        if (len >= sizeof msg) break;
      }
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "shape mismatch: indexing tensors could not be broadcast together with shapes %s", msg);
    }
  }
  return MN_OK;
}

/* Validates indices[0..n) against v and builds the plan (indices on v's
 * device, in temps). Nothing is written. */
static mn_status plan_build(const mn_view_t *v, int n, const mn_view_t *const *indices, const mn_view_t *avoid,
                            bool checked, temps_t *t, const char *func, plan_t *p) {
  memset(p, 0, sizeof *p);
  if (n < 0 || (n > 0 && !indices)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "indices must not be NULL");
  mn_device_t dev = mn_view_device(v);
  int covered = 0;
  for (int i = 0; i < n; i++) {
    const mn_view_t *x = indices[i];
    if (x && !is_int_index(x->dtype) && !is_mask(x->dtype))
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "tensors used as indices must be long, byte or bool tensors");
    covered += (x && is_mask(x->dtype)) ? x->ndim : 1;
  }
  if (covered > v->ndim)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "too many indices for tensor of dimension %d (got %d)", v->ndim,
                     covered);
  int pos = 0;
  mn_status st = MN_OK;
  const mn_view_t *orig[MN__INDEX_MAX] = {0};
  for (int i = 0; i < n && st == MN_OK; i++) {
    const mn_view_t *x = indices[i];
    if (!x) {
      pos++;
      continue;
    }
    int k = is_mask(x->dtype) ? x->ndim : 1;
    if (p->n + k > MN__INDEX_MAX)
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "more than %d indexed dims", MN__INDEX_MAX);
    if (is_mask(x->dtype)) {
      if (k == 0) return mn__error(MN_ERR_NOT_SUPPORTED, func, "a 0-d mask as an index is not supported");
      if (mn__is_meta(dev))
        return mn__error(MN_ERR_NOT_SUPPORTED, func,
                         "boolean masks are not supported on the meta device (the result's size depends on the data)");
      for (int d = 0; d < k; d++)
        if (x->sizes[d] != v->sizes[pos + d]) {
          char a[256], b[256];
          return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                           "The shape of the mask %s at index %d does not match the shape of the indexed tensor %s at "
                           "index %d",
                           fmt(x->sizes, x->ndim, a, sizeof a), d, fmt(v->sizes, v->ndim, b, sizeof b), pos + d);
        }
      st = mask_indices(x, dev, avoid, t, func, &p->idx[p->n]);
      for (int d = 0; d < k; d++) p->dims[p->n + d] = pos + d;
    } else {
      orig[p->n] = x; /* range-checked below, once the result's size is known */
      mn_view_t *d = NULL;
      st = to_dev(x, dev, avoid, func, &d);
      if (st == MN_OK) p->idx[p->n] = keep(t, d);
      p->dims[p->n] = pos;
    }
    p->n += k;
    pos += k;
  }
  if (st != MN_OK) return st;
  if (p->n == 0) { /* a copy: every dim kept */
    p->rnd = v->ndim;
    memcpy(p->rsizes, v->sizes, (size_t)v->ndim * sizeof *v->sizes);
    memcpy(p->vstrides, v->strides, (size_t)v->ndim * sizeof *v->strides);
    return MN_OK;
  }
  st = broadcast_indices(p, func);
  if (st != MN_OK) return st;
  bool adjacent = true;
  for (int j = 1; j < p->n; j++) adjacent &= p->dims[j] == p->dims[j - 1] + 1;
  int kept = v->ndim - p->n;
  if (p->bnd + kept > MN_MAX_DIMS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the result would have more than %d dims", MN_MAX_DIMS);
  p->rnd = p->bnd + kept;
  int bpos = adjacent ? p->dims[0] : 0, r = 0;
  for (int d = 0; d <= v->ndim; d++) {
    if (d == bpos) /* B's place */
      for (int b = 0; b < p->bnd; b++) {
        p->rsizes[r] = p->bsizes[b];
        p->vstrides[r++] = 0;
      }
    if (d == v->ndim) break;
    bool indexed = false;
    for (int j = 0; j < p->n; j++) indexed |= p->dims[j] == d;
    if (indexed) continue;
    p->rsizes[r] = v->sizes[d];
    p->vstrides[r++] = v->strides[d];
  }
  /* As PyTorch, indices are checked only when the result has elements. */
  int64_t numel = 1;
  for (int d = 0; d < p->rnd; d++) numel *= p->rsizes[d];
  int64_t bnumel = 1;
  for (int d = 0; d < p->bnd; d++) bnumel *= p->bsizes[d];
  for (int j = 0; j < p->n; j++)
    if (v->sizes[p->dims[j]] == 0 && bnumel > 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "index is out of bounds for dimension with size 0");
  for (int j = 0; j < p->n && numel > 0 && !checked; j++)
    if (orig[j] && (st = check_range(v, orig[j], v->sizes[p->dims[j]], j, RANGE_INDEX, func)) != MN_OK)
      return st;
  p->ix.n = p->n;
  for (int j = 0; j < p->n; j++) {
    const mn_view_t *x = p->idx[j];
    int64_t strides[MN_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++)
      strides[bpos + p->bnd - x->ndim + i] = x->sizes[i] == 1 ? 0 : x->strides[i];
    operand(x, p->rnd, p->rsizes, strides, &p->ix.idx[j]);
    p->ix.idx_dtype[j] = x->dtype;
    p->ix.size[j] = v->sizes[p->dims[j]];
    p->ix.stride[j] = v->strides[p->dims[j]];
  }
  return MN_OK;
}

/* A gather's result: a new contiguous view of v's dtype on v's device
 * (allocated ordered on s), with v's quantization parameters. */
static mn_status gathered_view(const mn_view_t *v, int ndim, const int64_t *sizes, mn_stream_t *s, mn_view_t **out) {
  mn_status st = mn__view_empty_on(mn_view_device(v), v->dtype, ndim, sizes, NULL, s, out);
  if (st == MN_OK) mn__view_set_qparams(*out, v->q_scale, v->q_zero_point);
  return st;
}

/* Runs a plan as a gather into a new contiguous view on s. */
static mn_status plan_gather(const mn_view_t *v, const plan_t *p, mn_stream_t *s, const char *func, mn_view_t **out) {
  mn_view_t *r = NULL;
  mn_status st = gathered_view(v, p->rnd, p->rsizes, s, &r);
  if (st == MN_OK && s && mn_view_numel(r) > 0) {
    if (p->n == 0) {
      st = mn_kernel_copy_view(s, r, v);
    } else {
      mn__strided_t dst, src;
      mn__strided_of_view(r, &dst);
      operand(v, p->rnd, p->rsizes, p->vstrides, &src);
      st = mn__kernel_gather(s, &dst, &src, v->dtype, &p->ix, func);
    }
  }
  if (st != MN_OK) {
    mn_view_destroy(r);
    return mn__error_wrap(st, func);
  }
  *out = r;
  return MN_OK;
}

/* mn_view_index; `checked`: the caller has range-checked the indices. */
static mn_status index_impl(const mn_view_t *v, int n, const mn_view_t *const *indices, mn_stream_t *stream,
                            bool checked, const char *func, mn_view_t **out) {
  mn_device_t dev = mn_view_device(v);
  mn_stream_t *s = NULL;
  mn_status st = call_stream(dev, stream, func, &s);
  if (st != MN_OK) return st;
  temps_t t = {.n = 0};
  plan_t p;
  st = plan_build(v, n, indices, NULL, checked, &t, func, &p);
  if (st == MN_OK) st = plan_gather(v, &p, s, func, out);
  return finish(s, &t, st, func);
}

mn_status mn_view_index(const mn_view_t *v, int n, const mn_view_t *const *indices, mn_stream_t *stream,
                        mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && out != NULL, "view and out must not be NULL");
  mn_status qst = quant_check(v, false, __func__);
  if (qst != MN_OK) return qst;
  *out = NULL;
  return index_impl(v, n, indices, stream, false, __func__, out);
}

/* values checked and broadcast to the plan's result shape, on v's device,
 * not overlapping v (a copy when it would). */
static mn_status values_for(const mn_view_t *v, const mn_view_t *values, int rnd, const int64_t *rsizes, temps_t *t,
                            const char *func, const mn_view_t **out) {
  mn_view_t *e = NULL;
  mn_status st = mn_view_expand(values, rnd, rsizes, &e);
  if (st != MN_OK && st != MN_ERR_INVALID_ARGUMENT) return mn__error_wrap(st, func); /* out of host memory */
  if (st != MN_OK) {
    char a[256], b[256];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of shape %s",
                     fmt(values->sizes, values->ndim, a, sizeof a), fmt(rsizes, rnd, b, sizeof b));
  }
  keep(t, e);
  mn__overlap ov = overlap_status(v, values);
  if (ov == MN__OVERLAP_PARTIAL || ov == MN__OVERLAP_FULL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, MN__PARTIAL_MSG);
  mn_device_t dev = mn_view_device(v);
  if (mn__is_meta(dev) || (mn_device_equal(mn_view_device(e), dev) && ov == MN__OVERLAP_NO)) {
    *out = e;
    return MN_OK;
  }
  /* Elsewhere, or overlapping in a way too hard to tell: a dense copy on dev. */
  mn_view_t *c = NULL;
  if (mn_device_equal(mn_view_device(values), dev)) {
    st = mn_view_clone(values, NULL, &c);
  } else {
    st = mn_view_to(values, dev, values->dtype, false, NULL, &c);
  }
  mn_view_t *ce = NULL;
  if (st == MN_OK) {
    keep(t, c);
    st = mn_view_expand(c, rnd, rsizes, &ce);
  }
  if (st != MN_OK) return mn__error_wrap(st, func);
  *out = keep(t, ce);
  return MN_OK;
}

/* An int64 index of one zero seen over nd dims (stride 0): lets a scatter
 * without indices run through the scatter kernel. */
static mn_status zero_index(mn_device_t dev, mn_stream_t *s, temps_t *t, const char *func, mn_view_t **out) {
  const int64_t one = 1;
  mn_view_t *z = NULL;
  mn_status st = mn__view_empty_on(dev, MN_DTYPE_INT64, 1, &one, NULL, s, &z);
  if (st == MN_OK) st = mn_view_zero(z, s);
  if (st != MN_OK) {
    mn_view_destroy(z);
    return mn__error_wrap(st, func);
  }
  *out = keep(t, z);
  return MN_OK;
}

mn_status mn_view_index_put(mn_view_t *v, int n, const mn_view_t *const *indices, const mn_view_t *values,
                            bool accumulate, mn_stream_t *stream) {
  MN__CHECK_ARG(v != NULL && values != NULL, "view and values must not be NULL");
  mn_status qst = quant_check(v, true, __func__);
  if (qst != MN_OK) return qst;
  if (values->dtype != v->dtype)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "Index put requires the source and destination dtypes match, got %s for the destination and %s "
                     "for the source.",
                     mn_dtype_name(v->dtype), mn_dtype_name(values->dtype));
  if (internal_overlap(v)) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, MN__OVERLAP_MSG);
  mn_device_t dev = mn_view_device(v);
  mn_stream_t *s = NULL;
  mn_status st = call_stream(dev, stream, __func__, &s);
  if (st != MN_OK) return st;
  temps_t t = {.n = 0};
  plan_t p;
  const mn_view_t *vals = NULL;
  st = plan_build(v, n, indices, v, false, &t, __func__, &p);
  if (st == MN_OK) st = values_for(v, values, p.rnd, p.rsizes, &t, __func__, &vals);
  if (st == MN_OK && p.n == 0 && s) { /* no index: one zero index of a size-1 stride-0 dim */
    mn_view_t *z = NULL;
    st = zero_index(dev, s, &t, __func__, &z);
    if (st == MN_OK) {
      int64_t zs[MN_MAX_DIMS] = {0};
      p.ix.n = 1;
      operand(z, p.rnd, p.rsizes, zs, &p.ix.idx[0]);
      p.ix.idx_dtype[0] = MN_DTYPE_INT64;
      p.ix.size[0] = 1;
      p.ix.stride[0] = 0;
    }
  }
  if (st == MN_OK && s && mn_view_numel(vals) > 0) {
    mn__strided_t dst, src;
    operand(v, p.rnd, p.rsizes, p.vstrides, &dst);
    mn__strided_of_view(vals, &src);
    st = mn__kernel_scatter(s, &dst, &src, v->dtype, &p.ix, accumulate, __func__);
  }
  return finish(s, &t, st, __func__);
}

/* ---- index_select, take, gather, masked_select --------------------------- */

mn_status mn_view_index_select(const mn_view_t *v, int dim, const mn_view_t *index, mn_stream_t *stream,
                               mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && index != NULL && out != NULL, "view, index and out must not be NULL");
  mn_status qst = quant_check(v, false, __func__);
  if (qst != MN_OK) return qst;
  *out = NULL;
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, __func__, &d);
  if (st != MN_OK) return st;
  if (index->ndim > 1)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "index_select(): Index is supposed to be a vector");
  if (!is_int_index(index->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "index_select(): Expected dtype int32 or int64 for index");
  int64_t n = mn_view_numel(index), size = v->ndim ? v->sizes[d] : 1;
  if (v->ndim && size == 0 && n > 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "index_select(): self indexing axis dim should be positive");
  if (v->ndim == 0 && n != 1)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "index_select(): Index to scalar can have only 1 value, got %lld value(s)", (long long)n);
  st = check_range(v, index, size, d, RANGE_SELECT, __func__);
  if (st != MN_OK) return st;
  if (v->ndim == 0) { /* the one element (index 0), as a new storage */
    mn_stream_t *s = NULL;
    st = call_stream(mn_view_device(v), stream, __func__, &s);
    temps_t t = {.n = 0};
    plan_t p = {.n = 0, .rnd = 0};
    if (st == MN_OK) st = plan_gather(v, &p, s, __func__, out);
    return finish(s, &t, st, __func__);
  }
  /* v[:, ..., index] with index seen as 1-d */
  mn_view_t *flat = NULL;
  const int64_t one = 1, zero = 0;
  st = index->ndim == 1 ? same_view(index, __func__, &flat) : restride(index, 1, &one, &zero, __func__, &flat);
  if (st != MN_OK) return st;
  const mn_view_t *ixs[MN_MAX_DIMS] = {0};
  ixs[d] = flat;
  st = index_impl(v, d + 1, ixs, stream, true, __func__, out);
  mn_view_destroy(flat);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_take(const mn_view_t *v, const mn_view_t *index, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && index != NULL && out != NULL, "view, index and out must not be NULL");
  mn_status qst = quant_check(v, false, __func__);
  if (qst != MN_OK) return qst;
  *out = NULL;
  if (!is_int_index(index->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "take(): Expected a long tensor for index, but got %s",
                     mn_dtype_name(index->dtype));
  int64_t numel = mn_view_numel(v);
  if (numel == 0 && mn_view_numel(index) > 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "take(): tried to take from an empty tensor");
  mn_status st = check_range(v, index, numel, 0, RANGE_TAKE, __func__);
  if (st != MN_OK) return st;
  mn_device_t dev = mn_view_device(v);
  mn_stream_t *s = NULL;
  st = call_stream(dev, stream, __func__, &s);
  if (st != MN_OK) return st;
  temps_t t = {.n = 0};
  mn_view_t *r = NULL, *vc = NULL, *ix = NULL;
  st = gathered_view(v, index->ndim, index->sizes, s, &r);
  if (st == MN_OK && s && mn_view_numel(r) > 0) {
    st = mn_view_contiguous(v, s, &vc);
    if (st == MN_OK) keep(&t, vc);
    if (st == MN_OK) st = to_dev(index, dev, NULL, __func__, &ix);
    if (st == MN_OK) {
      keep(&t, ix);
      int64_t sizes[MN_MAX_DIMS], istr[MN_MAX_DIMS], zeros[MN_MAX_DIMS] = {0};
      int nd = at_least_1d(ix, sizes, istr);
      mn__index_ops_t ops;
      memset(&ops, 0, sizeof ops);
      ops.n = 1;
      operand(ix, nd, sizes, istr, &ops.idx[0]);
      ops.idx_dtype[0] = ix->dtype;
      ops.size[0] = numel;
      ops.stride[0] = 1;
      mn__strided_t dst, src;
      int64_t rstr[MN_MAX_DIMS];
      int64_t rs[MN_MAX_DIMS];
      at_least_1d(r, rs, rstr);
      operand(r, nd, sizes, rstr, &dst);
      operand(vc, nd, sizes, zeros, &src);
      st = mn__kernel_gather(s, &dst, &src, v->dtype, &ops, __func__);
    }
  }
  if (st != MN_OK) mn_view_destroy(r);
  else *out = r;
  return finish(s, &t, st, __func__);
}

/* The operands of gather / scatter along dim d: the iteration shape is the
 * index's (0-d seen as 1-d); v is reached through the index along d (its
 * stride there moves into the index operand), `other` (the gather's result,
 * the scatter's source) is walked over the same shape. */
static void along_dim(const mn_view_t *ix, const mn_view_t *v, int d, int64_t size, const mn_view_t *other,
                      mn__strided_t *vop, mn__strided_t *oop, mn__index_ops_t *ops) {
  int64_t sizes[MN_MAX_DIMS], istr[MN_MAX_DIMS], vs[MN_MAX_DIMS], vstr[MN_MAX_DIMS], os[MN_MAX_DIMS],
      ostr[MN_MAX_DIMS];
  int nd = at_least_1d(ix, sizes, istr);
  at_least_1d(v, vs, vstr);
  at_least_1d(other, os, ostr);
  memset(ops, 0, sizeof *ops);
  ops->n = 1;
  operand(ix, nd, sizes, istr, &ops->idx[0]);
  ops->idx_dtype[0] = ix->dtype;
  ops->size[0] = size;
  ops->stride[0] = vstr[d];
  vstr[d] = 0;
  operand(v, nd, sizes, vstr, vop);
  operand(other, nd, sizes, ostr, oop);
}

/* gather's and scatter's checks of the index (and src) shapes. */
static mn_status check_dim_shapes(const mn_view_t *v, int d, const mn_view_t *index, const mn_view_t *src,
                                  const char *func) {
  int vn = v->ndim ? v->ndim : 1, in = index->ndim ? index->ndim : 1;
  if (vn != in)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "Index tensor must have the same number of dimensions as %s tensor",
                     src ? "self" : "input");
  if (src && (src->ndim ? src->ndim : 1) != in)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "Index tensor must have the same number of dimensions as src tensor");
  if (mn_view_numel(index) == 0) return MN_OK;
  for (int k = 0; k < index->ndim; k++) {
    int64_t is = index->sizes[k];
    bool bad = (k != d && v->ndim && is > v->sizes[k]) || (src && src->ndim && is > src->sizes[k]);
    if (!bad) continue;
    char a[256], b[256], c[256];
    if (src)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "Expected index %s to be smaller than self %s apart from dimension %d and to be smaller size "
                       "than src %s",
                       fmt(index->sizes, index->ndim, a, sizeof a), fmt(v->sizes, v->ndim, b, sizeof b), d,
                       fmt(src->sizes, src->ndim, c, sizeof c));
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "Size does not match at dimension %d expected index %s to be smaller than self %s apart from "
                     "dimension %d",
                     k, fmt(index->sizes, index->ndim, a, sizeof a), fmt(v->sizes, v->ndim, b, sizeof b), d);
  }
  return MN_OK;
}

mn_status mn_view_gather(const mn_view_t *v, int dim, const mn_view_t *index, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && index != NULL && out != NULL, "view, index and out must not be NULL");
  mn_status qst = quant_check(v, false, __func__);
  if (qst != MN_OK) return qst;
  *out = NULL;
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, __func__, &d);
  if (st != MN_OK) return st;
  if (!is_int_index(index->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "gather(): Expected dtype int32 or int64 for index");
  st = check_dim_shapes(v, d, index, NULL, __func__);
  int64_t size = v->ndim ? v->sizes[d] : 1;
  if (st == MN_OK) st = check_range(v, index, size, d, RANGE_DIM, __func__);
  if (st != MN_OK) return st;
  mn_device_t dev = mn_view_device(v);
  mn_stream_t *s = NULL;
  st = call_stream(dev, stream, __func__, &s);
  if (st != MN_OK) return st;
  temps_t t = {.n = 0};
  mn_view_t *r = NULL, *ix = NULL;
  st = gathered_view(v, index->ndim, index->sizes, s, &r);
  if (st == MN_OK && s && mn_view_numel(r) > 0) {
    st = to_dev(index, dev, NULL, __func__, &ix);
    if (st == MN_OK) {
      keep(&t, ix);
      mn__index_ops_t ops;
      mn__strided_t dst, src;
      along_dim(ix, v, d, size, r, &src, &dst, &ops);
      st = mn__kernel_gather(s, &dst, &src, v->dtype, &ops, __func__);
    }
  }
  if (st != MN_OK) mn_view_destroy(r);
  else *out = r;
  return finish(s, &t, st, __func__);
}

mn_status mn_view_masked_select(const mn_view_t *v, const mn_view_t *mask, mn_stream_t *stream, mn_view_t **out) {
  MN__CHECK_ARG(v != NULL && mask != NULL && out != NULL, "view, mask and out must not be NULL");
  mn_status qst = quant_check(v, false, __func__);
  if (qst != MN_OK) return qst;
  *out = NULL;
  if (!is_mask(mask->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "masked_select: expected BoolTensor or ByteTensor for mask");
  int nd = v->ndim > mask->ndim ? v->ndim : mask->ndim;
  int64_t shape[MN_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    int ai = i - (nd - v->ndim), bi = i - (nd - mask->ndim);
    int64_t a = ai >= 0 ? v->sizes[ai] : 1, b = bi >= 0 ? mask->sizes[bi] : 1;
    if (a != b && a != 1 && b != 1)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                       "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton dimension %d",
                       (long long)a, (long long)b, i);
    shape[i] = a == 1 ? b : a;
  }
  if (mn__is_meta(mn_view_device(v)))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "masked_select is not supported on the meta device (the result's size depends on the data)");
  mn_view_t *ve = NULL, *me = NULL;
  mn_status st = mn_view_expand(v, nd, shape, &ve);
  if (st == MN_OK) st = mn_view_expand(mask, nd, shape, &me);
  if (st == MN_OK && nd == 0) { /* a 0-d pair: seen as 1-d */
    const int64_t one = 1, zero = 0;
    mn_view_t *a = NULL, *b = NULL;
    st = restride(ve, 1, &one, &zero, __func__, &a);
    if (st == MN_OK) st = restride(me, 1, &one, &zero, __func__, &b);
    mn_view_destroy(ve);
    mn_view_destroy(me);
    ve = a;
    me = b;
  }
  if (st == MN_OK) {
    const mn_view_t *ixs[1] = {me};
    st = index_impl(ve, 1, ixs, stream, true, __func__, out);
  }
  mn_view_destroy(ve);
  mn_view_destroy(me);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- scatter, scatter_add --------------------------------------------------- */

static mn_status scatter_impl(mn_view_t *v, int dim, const mn_view_t *index, const mn_view_t *src, bool add,
                              mn_stream_t *stream, const char *name, const char *func) {
  if (!v || !index || !src) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "view, index and src must not be NULL");
  mn_status qst = quant_check(v, true, func);
  if (qst != MN_OK) return qst;
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, func, &d);
  if (st != MN_OK) return st;
  if (!is_int_index(index->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s(): Expected dtype int32 or int64 for index", name);
  if (src->dtype != v->dtype)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s(): Expected self.dtype to be equal to src.dtype", name);
  st = check_dim_shapes(v, d, index, src, func);
  if (st != MN_OK) return st;
  if (internal_overlap(v)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, MN__OVERLAP_MSG);
  mn__overlap o1 = overlap_status(v, index), o2 = overlap_status(v, src);
  if (o1 == MN__OVERLAP_PARTIAL || o1 == MN__OVERLAP_FULL || o2 == MN__OVERLAP_PARTIAL || o2 == MN__OVERLAP_FULL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, MN__PARTIAL_MSG);
  int64_t size = v->ndim ? v->sizes[d] : 1;
  st = check_range(v, index, size, d, RANGE_DIM, func);
  if (st != MN_OK) return st;
  mn_device_t dev = mn_view_device(v);
  mn_stream_t *s = NULL;
  st = call_stream(dev, stream, func, &s);
  if (st != MN_OK || !s || mn_view_numel(index) == 0) return st;
  temps_t t = {.n = 0};
  mn_view_t *ix = NULL, *sv = NULL;
  st = to_dev(index, dev, v, func, &ix);
  if (st == MN_OK) {
    keep(&t, ix);
    st = to_dev(src, dev, v, func, &sv);
  }
  if (st == MN_OK) {
    keep(&t, sv);
    mn__index_ops_t ops;
    mn__strided_t dst, from;
    along_dim(ix, v, d, size, sv, &dst, &from, &ops);
    st = mn__kernel_scatter(s, &dst, &from, v->dtype, &ops, add, func);
  }
  return finish(s, &t, st, func);
}

mn_status mn_view_scatter(mn_view_t *v, int dim, const mn_view_t *index, const mn_view_t *src, mn_stream_t *stream) {
  return scatter_impl(v, dim, index, src, false, stream, "scatter", __func__);
}

mn_status mn_view_scatter_add(mn_view_t *v, int dim, const mn_view_t *index, const mn_view_t *src,
                              mn_stream_t *stream) {
  return scatter_impl(v, dim, index, src, true, stream, "scatter_add", __func__);
}
