/* storage/view_ops.c: the view operations (PyTorch's TensorShape semantics):
 * each returns a new handle over the same storage and never copies. */
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "runtime/checked.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "storage/view_internal.h"

#define CHECK_VO(v, out) MN__CHECK_ARG((v) != NULL && (out) != NULL, "view and out must not be NULL")

/* Removes dim d from g. */
static void geom_erase(mn__geom_t *g, int d) {
  for (int i = d; i < g->ndim - 1; i++) {
    g->sizes[i] = g->sizes[i + 1];
    g->strides[i] = g->strides[i + 1];
  }
  g->ndim--;
}

/* Inserts (size, stride) at position d of g (g->ndim < MN_MAX_DIMS). */
static void geom_insert(mn__geom_t *g, int d, int64_t size, int64_t stride) {
  for (int i = g->ndim; i > d; i--) {
    g->sizes[i] = g->sizes[i - 1];
    g->strides[i] = g->strides[i - 1];
  }
  g->sizes[d] = size;
  g->strides[d] = stride;
  g->ndim++;
}

static mn_status too_many_dims(const char *func, int ndim) {
  return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the result would have %d dims; at most %d are supported", ndim,
                   MN_MAX_DIMS);
}

/* The stride of a dim stepped by `step` (slice, unfold). A dim of at most one
 * element never moves by its stride: when the product overflows there (a
 * step of INT64_MAX), the dim keeps its stride instead of failing, so that
 * x[::INT64_MAX] gives one element as in PyTorch. */
static int64_t step_stride(int64_t stride, int64_t step, int64_t size, bool *overflow) {
  bool ovf = false;
  int64_t r = mn__ck_mul(stride, step, &ovf);
  if (!ovf) return r;
  if (size <= 1) return stride;
  *overflow = true;
  return 0;
}

/* ---- shape inference and the view rule -------------------------------------- */

mn_status mn__infer_size(const int64_t *shape, int n, int64_t numel, const char *func, int64_t *out) {
  char buf[512];
  int infer = -1;
  int64_t known = 1;
  bool overflow = false;
  for (int d = 0; d < n; d++) {
    if (shape[d] == -1) {
      if (infer >= 0) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "only one dimension can be inferred");
      infer = d;
    } else if (shape[d] < 0) {
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid shape dimension %lld", (long long)shape[d]);
    } else {
      if (shape[d] && known > INT64_MAX / shape[d]) overflow = true;
      else known *= shape[d];
    }
    out[d] = shape[d];
  }
  if (!overflow) {
    if (infer < 0 && known == numel) return MN_OK;
    if (infer >= 0 && known > 0 && numel % known == 0) {
      out[infer] = numel / known;
      return MN_OK;
    }
    if (infer >= 0 && known == 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "cannot reshape tensor of %lld elements into shape %s because the unspecified dimension size -1 "
                       "can be any value and is ambiguous",
                       (long long)numel, mn__format_sizes(shape, n, buf, sizeof buf));
  }
  return mn__error(MN_ERR_INVALID_ARGUMENT, func, "shape '%s' is invalid for input of size %lld",
                   mn__format_sizes(shape, n, buf, sizeof buf), (long long)numel);
}

bool mn__compute_stride(const int64_t *oldshape, const int64_t *oldstride, int oldn, const int64_t *newshape,
                        int newn, int64_t *newstride) {
  if (oldn == 0) {
    for (int d = 0; d < newn; d++) newstride[d] = 1;
    return true;
  }
  bool ovf = false;
  int64_t numel = 1;
  for (int d = 0; d < oldn; d++) numel = mn__ck_mul(numel, oldshape[d], &ovf);
  if (numel == 0) {
    bool same = oldn == newn;
    for (int d = 0; same && d < oldn; d++) same = oldshape[d] == newshape[d];
    if (same) {
      memcpy(newstride, oldstride, (size_t)newn * sizeof *newstride);
      return true;
    }
    for (int d = newn - 1; d >= 0; d--)
      newstride[d] = d == newn - 1 ? 1 : mn__ck_mul(newshape[d + 1] > 1 ? newshape[d + 1] : 1, newstride[d + 1], &ovf);
    return !ovf;
  }
  int view_d = newn - 1;
  int64_t chunk_base_stride = oldstride[oldn - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = oldn - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel = mn__ck_mul(tensor_numel, oldshape[tensor_d], &ovf);
    /* A chunk ends where the next dim out is not contiguous with this one
     * (a stride the product cannot even reach ends it too). */
    bool far = false;
    int64_t reach = tensor_d == 0 ? 0 : mn__ck_mul(tensor_numel, chunk_base_stride, &far);
    if (tensor_d == 0 || (oldshape[tensor_d - 1] != 1 && (far || oldstride[tensor_d - 1] != reach))) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        newstride[view_d] = mn__ck_mul(view_numel, chunk_base_stride, &ovf);
        view_numel = mn__ck_mul(view_numel, newshape[view_d], &ovf);
        view_d--;
      }
      if (ovf) return false;
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

mn_status mn_view_view(const mn_view_t *v, int ndim, const int64_t *shape, mn_view_t **out) {
  CHECK_VO(v, out);
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || shape != NULL, "shape must not be NULL");
  mn__geom_t g;
  mn__geom_of(v, &g);
  mn_status st = mn__infer_size(shape, ndim, mn_view_numel(v), __func__, g.sizes);
  if (st != MN_OK) return st;
  if (!mn__compute_stride(v->sizes, v->strides, v->ndim, g.sizes, ndim, g.strides))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "view size is not compatible with input tensor's size and stride (at least one dimension spans "
                     "across two contiguous subspaces). Use .reshape(...) instead.");
  g.ndim = ndim;
  return mn__view_from_geom(v, &g, __func__, out);
}

/* ---- dim reordering -------------------------------------------------------------- */

mn_status mn_view_transpose(const mn_view_t *v, int dim0, int dim1, mn_view_t **out) {
  CHECK_VO(v, out);
  int a, b;
  mn_status st = mn__wrap_dim(dim0, v->ndim, true, __func__, &a);
  if (st == MN_OK) st = mn__wrap_dim(dim1, v->ndim, true, __func__, &b);
  if (st != MN_OK) return st;
  mn__geom_t g;
  mn__geom_of(v, &g);
  if (v->ndim > 0) {
    g.sizes[a] = v->sizes[b];
    g.sizes[b] = v->sizes[a];
    g.strides[a] = v->strides[b];
    g.strides[b] = v->strides[a];
  }
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_t2d(const mn_view_t *v, mn_view_t **out) {
  CHECK_VO(v, out);
  if (v->ndim > 2)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "t() expects a tensor with <= 2 dimensions, but self is %dD", v->ndim);
  mn_status st = mn_view_transpose(v, 0, v->ndim < 2 ? 0 : 1, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_permute(const mn_view_t *v, int ndim, const int *dims, mn_view_t **out) {
  CHECK_VO(v, out);
  MN__CHECK_ARG(ndim == 0 || dims != NULL, "dims must not be NULL");
  if (ndim != v->ndim)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "number of dims don't match in permute (the view has %d, %d given)", v->ndim, ndim);
  bool seen[MN_MAX_DIMS] = {false};
  mn__geom_t g;
  mn__geom_of(v, &g);
  for (int i = 0; i < ndim; i++) {
    int d;
    mn_status st = mn__wrap_dim(dims[i], v->ndim, false, __func__, &d);
    if (st != MN_OK) return st;
    if (seen[d]) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "repeated dim in permute (dim %d)", d);
    seen[d] = true;
    g.sizes[i] = v->sizes[d];
    g.strides[i] = v->strides[d];
  }
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_movedim(const mn_view_t *v, int n, const int *source, const int *destination, mn_view_t **out) {
  CHECK_VO(v, out);
  MN__CHECK_ARG(n >= 0 && (n == 0 || (source != NULL && destination != NULL)), "source and destination needed");
  if (n > (v->ndim ? v->ndim : 1))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "movedim: %d dims given for a %d-d view", n, v->ndim);
  int src[MN_MAX_DIMS], dst[MN_MAX_DIMS];
  bool src_used[MN_MAX_DIMS] = {false}, dst_used[MN_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    mn_status st = mn__wrap_dim(source[i], v->ndim, true, __func__, &src[i]);
    if (st == MN_OK) st = mn__wrap_dim(destination[i], v->ndim, true, __func__, &dst[i]);
    if (st != MN_OK) return st;
    if (src_used[src[i]]) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "movedim: repeated dim in `source`");
    if (dst_used[dst[i]])
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "movedim: repeated dim in `destination`");
    src_used[src[i]] = dst_used[dst[i]] = true;
  }
  if (v->ndim == 0)
    return mn__view_from_geom(v,
                              &(mn__geom_t){.dtype = v->dtype, .offset = v->offset, .q_scale = v->q_scale,
                                            .q_zero_point = v->q_zero_point},
                              __func__, out);
  int order[MN_MAX_DIMS];
  for (int i = 0; i < v->ndim; i++) order[i] = -1;
  for (int i = 0; i < n; i++) order[dst[i]] = src[i];
  int next_src = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (order[i] >= 0) continue;
    while (src_used[next_src]) next_src++;
    order[i] = next_src++;
  }
  mn_status st = mn_view_permute(v, v->ndim, order, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- indexing --------------------------------------------------------------------- */

mn_status mn_view_slice(const mn_view_t *v, int dim, int64_t start, int64_t end, int64_t step, mn_view_t **out) {
  CHECK_VO(v, out);
  if (v->ndim == 0) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "slice() cannot be applied to a 0-dim tensor.");
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, false, __func__, &d);
  if (st != MN_OK) return st;
  if (step <= 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "slice step must be positive (got %lld)", (long long)step);
  int64_t n = v->sizes[d];
  if (start < 0) start = start < -n ? 0 : start + n;
  if (end < 0) end = end < -n ? 0 : end + n;
  if (start > n) start = n;
  if (end < start) end = start;
  else if (end > n) end = n;
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.offset = mn__ck_add(v->offset, mn__ck_mul(start, v->strides[d], &g.overflow), &g.overflow);
  g.sizes[d] = mn__ceil_div(end - start, step);
  g.strides[d] = step_stride(v->strides[d], step, g.sizes[d], &g.overflow);
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_narrow(const mn_view_t *v, int dim, int64_t start, int64_t length, mn_view_t **out) {
  CHECK_VO(v, out);
  if (v->ndim == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "narrow() cannot be applied to a 0-dim tensor.");
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, false, __func__, &d);
  if (st != MN_OK) return st;
  if (length < 0) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "narrow(): length must be non-negative.");
  int64_t n = v->sizes[d];
  if (start != n) {
    if (start < -n || start >= n || n == 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                       "start out of range (expected to be in range of [%lld, %lld], but got %lld)", (long long)-n,
                       (long long)(n - 1), (long long)start);
    if (start < 0) start += n;
  }
  if (start > n - length)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "start (%lld) + length (%lld) exceeds dimension size (%lld).",
                     (long long)start, (long long)length, (long long)n);
  st = mn_view_slice(v, d, start, start + length, 1, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_select(const mn_view_t *v, int dim, int64_t index, mn_view_t **out) {
  CHECK_VO(v, out);
  if (v->ndim == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "select() cannot be applied to a 0-dim tensor.");
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, false, __func__, &d);
  if (st != MN_OK) return st;
  int64_t n = v->sizes[d];
  if (index < -n || index >= n) {
    char buf[512];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "select(): index %lld out of range for tensor of size %s at dimension %d", (long long)index,
                     mn__format_sizes(v->sizes, v->ndim, buf, sizeof buf), d);
  }
  if (index < 0) index += n;
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.offset = mn__ck_add(v->offset, mn__ck_mul(index, v->strides[d], &g.overflow), &g.overflow);
  geom_erase(&g, d);
  return mn__view_from_geom(v, &g, __func__, out);
}

/* ---- adding and removing dims ------------------------------------------------------- */

mn_status mn_view_unsqueeze(const mn_view_t *v, int dim, mn_view_t **out) {
  CHECK_VO(v, out);
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim + 1, false, __func__, &d);
  if (st != MN_OK) return st;
  if (v->ndim >= MN_MAX_DIMS) return too_many_dims(__func__, v->ndim + 1);
  mn__geom_t g;
  mn__geom_of(v, &g);
  geom_insert(&g, d, 1, d >= v->ndim ? 1 : mn__ck_mul(v->sizes[d], v->strides[d], &g.overflow));
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_squeeze(const mn_view_t *v, mn_view_t **out) {
  CHECK_VO(v, out);
  mn__geom_t g;
  mn__geom_of(v, &g);
  for (int d = g.ndim - 1; d >= 0; d--)
    if (g.sizes[d] == 1) geom_erase(&g, d);
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_squeeze_dim(const mn_view_t *v, int dim, mn_view_t **out) {
  CHECK_VO(v, out);
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, __func__, &d);
  if (st != MN_OK) return st;
  mn__geom_t g;
  mn__geom_of(v, &g);
  if (v->ndim > 0 && v->sizes[d] == 1) geom_erase(&g, d);
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_expand(const mn_view_t *v, int ndim, const int64_t *sizes, mn_view_t **out) {
  CHECK_VO(v, out);
  MN__CHECK_ARG(ndim >= 0 && ndim <= MN_MAX_DIMS, "ndim=%d is not in 0..%d", ndim, MN_MAX_DIMS);
  MN__CHECK_ARG(ndim == 0 || sizes != NULL, "sizes must not be NULL");
  if (ndim < v->ndim)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "expand: the number of sizes provided (%d) must be greater or equal to the number of dimensions "
                     "in the tensor (%d)",
                     ndim, v->ndim);
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.ndim = ndim;
  for (int i = ndim - 1; i >= 0; i--) {
    int d = v->ndim - (ndim - i);
    int64_t size = d >= 0 ? v->sizes[d] : 1;
    int64_t stride =
        d >= 0 ? v->strides[d] : (i + 1 < ndim ? mn__ck_mul(g.sizes[i + 1], g.strides[i + 1], &g.overflow) : 0);
    int64_t target = sizes[i];
    if (target == -1) {
      if (d < 0)
        return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                         "The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension %d",
                         i);
      target = size;
    }
    if (target < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "The expanded size of the tensor (%lld) isn't allowed",
                       (long long)target);
    if (size != target) {
      if (size != 1) {
        char want[512], have[512];
        return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                         "The expanded size of the tensor (%lld) must match the existing size (%lld) at non-singleton "
                         "dimension %d.  Target sizes: %s.  Tensor sizes: %s",
                         (long long)target, (long long)size, i, mn__format_sizes(sizes, ndim, want, sizeof want),
                         mn__format_sizes(v->sizes, v->ndim, have, sizeof have));
      }
      size = target;
      stride = 0;
    }
    g.sizes[i] = size;
    g.strides[i] = stride;
  }
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_unflatten(const mn_view_t *v, int dim, int n, const int64_t *sizes, mn_view_t **out) {
  CHECK_VO(v, out);
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, __func__, &d);
  if (st != MN_OK) return st;
  if (n <= 0 || !sizes) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "unflatten: sizes must be non-empty");
  if (v->ndim == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "unflatten: a 0-d view has no dim to unflatten");
  if (v->ndim - 1 + n > MN_MAX_DIMS) return too_many_dims(__func__, v->ndim - 1 + n);
  int64_t inferred[MN_MAX_DIMS];
  st = mn__infer_size(sizes, n, v->sizes[d], __func__, inferred);
  if (st != MN_OK) {
    char buf[512];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "unflatten: Provided sizes %s don't multiply up to the size of dim %d (%lld) in the input tensor",
                     mn__format_sizes(sizes, n, buf, sizeof buf), d, (long long)v->sizes[d]);
  }
  int64_t shape[MN_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (i == d)
      for (int j = 0; j < n; j++) shape[k++] = inferred[j];
    else
      shape[k++] = v->sizes[i];
  }
  st = mn_view_view(v, k, shape, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_view_diagonal(const mn_view_t *v, int64_t offset, int dim1, int dim2, mn_view_t **out) {
  CHECK_VO(v, out);
  int a, b;
  mn_status st = mn__wrap_dim(dim1, v->ndim, false, __func__, &a);
  if (st == MN_OK) st = mn__wrap_dim(dim2, v->ndim, false, __func__, &b);
  if (st != MN_OK) return st;
  if (a == b)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "diagonal dimensions cannot be identical %d, %d", dim1, dim2);
  int64_t n;
  mn__geom_t g;
  mn__geom_of(v, &g);
  /* Sizes are >= 0, so size - offset (offset >= 0) and size + offset (< 0) cannot overflow. */
  if (offset >= 0) {
    n = v->sizes[b] - offset < v->sizes[a] ? v->sizes[b] - offset : v->sizes[a];
  } else {
    n = v->sizes[a] + offset < v->sizes[b] ? v->sizes[a] + offset : v->sizes[b];
  }
  if (n < 0) n = 0;
  if (n > 0) /* then -offset < sizes[a]: no overflow negating it */
    g.offset = mn__ck_add(g.offset,
                          offset >= 0 ? mn__ck_mul(offset, v->strides[b], &g.overflow)
                                      : mn__ck_mul(-offset, v->strides[a], &g.overflow),
                          &g.overflow);
  int64_t stride = mn__ck_add(v->strides[a], v->strides[b], &g.overflow);
  geom_erase(&g, a > b ? a : b);
  geom_erase(&g, a > b ? b : a);
  g.sizes[g.ndim] = n;
  g.strides[g.ndim] = stride;
  g.ndim++;
  return mn__view_from_geom(v, &g, __func__, out);
}

mn_status mn_view_unfold(const mn_view_t *v, int dim, int64_t size, int64_t step, mn_view_t **out) {
  CHECK_VO(v, out);
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, true, __func__, &d);
  if (st != MN_OK) return st;
  int64_t max_size = v->ndim == 0 ? 1 : v->sizes[d];
  if (size > max_size)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "maximum size for tensor at dimension %d is %lld but size is %lld", d, (long long)max_size,
                     (long long)size);
  if (size < 0) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "size is %lld but must be >= 0", (long long)size);
  if (step <= 0) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "step is %lld but must be > 0", (long long)step);
  if (v->ndim >= MN_MAX_DIMS) return too_many_dims(__func__, v->ndim + 1);
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.sizes[g.ndim] = size;
  g.strides[g.ndim] = v->ndim == 0 ? 1 : v->strides[d];
  g.ndim++;
  if (v->ndim > 0) {
    g.sizes[d] = (v->sizes[d] - size) / step + 1;
    g.strides[d] = step_stride(v->strides[d], step, g.sizes[d], &g.overflow);
  }
  return mn__view_from_geom(v, &g, __func__, out);
}

/* ---- several views ------------------------------------------------------------------ */

void mn_view_list_destroy(mn_view_t **views, int count) {
  if (!views) return;
  for (int i = 0; i < count; i++) mn_view_destroy(views[i]);
  free(views);
}

/* Views of `d` cut into `n` pieces of `piece` elements, the last `last`. */
static mn_status split_pieces(const mn_view_t *v, int d, int64_t n, int64_t piece, int64_t last, const char *func,
                              mn_view_t ***out, int *count) {
  if (n > 1 << 24) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%lld pieces are too many", (long long)n);
  mn_view_t **views = mn__calloc((size_t)n, sizeof *views);
  if (!views) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  for (int64_t i = 0; i < n; i++) {
    mn_status st = mn_view_narrow(v, d, i * piece, i == n - 1 ? last : piece, &views[i]);
    if (st != MN_OK) {
      mn_view_list_destroy(views, (int)i);
      return mn__error_wrap(st, func);
    }
  }
  *out = views;
  *count = (int)n;
  return MN_OK;
}

mn_status mn_view_split(const mn_view_t *v, int64_t split_size, int dim, mn_view_t ***out, int *count) {
  MN__CHECK_ARG(v != NULL && out != NULL && count != NULL, "view, out and count must not be NULL");
  if (v->ndim == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "split expects at least a 1-dimensional tensor");
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, false, __func__, &d);
  if (st != MN_OK) return st;
  if (split_size < 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "split expects split_size be non-negative, but got split_size=%lld", (long long)split_size);
  int64_t n = v->sizes[d];
  if (split_size == 0 && n != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "split_size can only be 0 if dimension size is 0, but got dimension size of %lld", (long long)n);
  int64_t pieces = split_size ? mn__ceil_div(n, split_size) : 1;
  if (pieces < 1) pieces = 1;
  int64_t last = n - split_size * (pieces - 1); /* split_size * (pieces - 1) < n */
  return split_pieces(v, d, pieces, split_size, last, __func__, out, count);
}

mn_status mn_view_chunk(const mn_view_t *v, int64_t chunks, int dim, mn_view_t ***out, int *count) {
  MN__CHECK_ARG(v != NULL && out != NULL && count != NULL, "view, out and count must not be NULL");
  if (v->ndim == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "chunk expects at least a 1-dimensional tensor");
  if (chunks <= 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "chunk expects `chunks` to be greater than 0, got: %lld",
                     (long long)chunks);
  int d;
  mn_status st = mn__wrap_dim(dim, v->ndim, false, __func__, &d);
  if (st != MN_OK) return st;
  int64_t n = v->sizes[d];
  int64_t split_size = mn__ceil_div(n, chunks);
  if (split_size == 0 && n == 0) return split_pieces(v, d, chunks, 0, 0, __func__, out, count);
  st = mn_view_split(v, split_size, d, out, count);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- dtype views -------------------------------------------------------------------- */

mn_status mn_view_view_dtype(const mn_view_t *v, mn_dtype dtype, mn_view_t **out) {
  CHECK_VO(v, out);
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  const char *from = mn_dtype_name(v->dtype), *to = mn_dtype_name(dtype);
  /* PyTorch 1.13: a quantized view's dtype view is its own dtype only */
  if (v->dtype != dtype && (mn_dtype_is_quantized(v->dtype) || mn_dtype_is_quantized(dtype)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "viewing %s as %s is not supported: quantized views need quantize_per_tensor, dequantize or "
                     "int_repr",
                     from, to);
  int64_t have = (int64_t)mn_dtype_itemsize(v->dtype), want = (int64_t)mn_dtype_itemsize(dtype);
  mn__geom_t g;
  mn__geom_of(v, &g);
  g.dtype = dtype;
  if (have != want) {
    if (v->ndim == 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                       "self.dim() cannot be 0 to view %s as %s (different element sizes)", from, to);
    int last = v->ndim - 1;
    if (v->strides[last] != 1)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                       "self.stride(-1) must be 1 to view %s as %s (different element sizes), but got %lld", from, to,
                       (long long)v->strides[last]);
    if (have > want) {
      int64_t r = have / want;
      g.offset = mn__ck_mul(v->offset, r, &g.overflow);
      for (int d = 0; d < last; d++) g.strides[d] = mn__ck_mul(v->strides[d], r, &g.overflow);
      g.sizes[last] = mn__ck_mul(v->sizes[last], r, &g.overflow);
    } else {
      int64_t r = want / have;
      if (v->sizes[last] % r)
        return mn__error(
            MN_ERR_INVALID_ARGUMENT, __func__,
            "self.size(-1) must be divisible by %lld to view %s as %s (different element sizes), but got %lld",
            (long long)r, from, to, (long long)v->sizes[last]);
      if (v->offset % r)
        return mn__error(
            MN_ERR_INVALID_ARGUMENT, __func__,
            "self.storage_offset() must be divisible by %lld to view %s as %s (different element sizes), but "
            "got %lld",
            (long long)r, from, to, (long long)v->offset);
      for (int d = 0; d < last; d++) {
        if (v->strides[d] % r)
          return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                           "self.stride(%d) must be divisible by %lld to view %s as %s (different element sizes), but "
                           "got %lld",
                           d, (long long)r, from, to, (long long)v->strides[d]);
        g.strides[d] = v->strides[d] / r;
      }
      g.sizes[last] = v->sizes[last] / r;
      g.offset = v->offset / r;
    }
  }
  return mn__view_from_geom(v, &g, __func__, out);
}

static mn_status complex_part(const mn_view_t *v, int part, const char *func, mn_view_t **out) {
  mn__geom_t g;
  mn__geom_of(v, &g);
#define REAL_ROW(A, sfx, val, nm, size, knd, fmt, real, ...) [val] = MN_DTYPE_##real,
  static const mn_dtype REAL_OF[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(REAL_ROW, ~)}; /* mnemo/dtype_table.h */
#undef REAL_ROW
  g.dtype = REAL_OF[v->dtype];
  for (int d = 0; d < g.ndim; d++) g.strides[d] = mn__ck_mul(g.strides[d], 2, &g.overflow);
  g.offset = mn__ck_add(mn__ck_mul(v->offset, 2, &g.overflow), part, &g.overflow);
  return mn__view_from_geom(v, &g, func, out);
}

mn_status mn_view_real(const mn_view_t *v, mn_view_t **out) {
  CHECK_VO(v, out);
  if (!mn_dtype_is_complex(v->dtype)) {
    mn__geom_t g;
    mn__geom_of(v, &g);
    return mn__view_from_geom(v, &g, __func__, out);
  }
  return complex_part(v, 0, __func__, out);
}

mn_status mn_view_imag(const mn_view_t *v, mn_view_t **out) {
  CHECK_VO(v, out);
  if (!mn_dtype_is_complex(v->dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "imag is not implemented for tensors with non-complex dtypes.");
  return complex_part(v, 1, __func__, out);
}
