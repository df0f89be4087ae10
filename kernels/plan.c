/* kernels/plan.c: the planner (kernels/plan.h): drop size-1 dims, sort by
 * dst strides, merge dims contiguous in both, classify. Pure: thread-safe. */
#include <string.h>

#include "kernels/plan.h"
#include "runtime/checked.h"
#include "runtime/debug.h"

/* Largest byte offset any element of one operand reaches. */
static uint64_t extent_bytes(const mn__plan_t *p, const int64_t *strides, size_t item) {
  size_t bytes = 0;
  return mn__strided_span_bytes(p->ndim, p->sizes, strides, 0, item, &bytes) ? bytes : UINT64_MAX;
}

int mn__plan_dims(const mn__strided_t *dst, const mn__strided_t *src, bool sort, int64_t *sizes, int64_t *dstr,
                  int64_t *sstr) {
  bool fill = src == NULL;
  /* Drop size-1 dims, innermost first: in row-major order (the last dim
   * first), or, sorting, by dst stride then src stride (stable). */
  int n = 0;
  for (int i = 0; i < dst->ndim; i++) {
    int k = sort ? i : dst->ndim - 1 - i;
    int64_t size = dst->sizes[k];
    if (size == 1) continue;
    int64_t ds = dst->strides[k], ss = fill ? 0 : src->strides[k];
    int j = n++;
    while (sort && j > 0 && (dstr[j - 1] > ds || (dstr[j - 1] == ds && sstr[j - 1] > ss))) {
      sizes[j] = sizes[j - 1];
      dstr[j] = dstr[j - 1];
      sstr[j] = sstr[j - 1];
      j--;
    }
    sizes[j] = size;
    dstr[j] = ds;
    sstr[j] = ss;
  }
  if (n == 0) { /* a single element */
    n = 1;
    sizes[0] = 1;
    dstr[0] = 1;
    sstr[0] = fill ? 0 : 1;
  }
  /* Merge an outer dim into the one inside it when both operands continue. */
  int m = 0;
  for (int k = 1; k < n; k++) {
    if (dstr[k] == dstr[m] * sizes[m] && sstr[k] == sstr[m] * sizes[m]) {
      sizes[m] *= sizes[k];
      continue;
    }
    m++;
    sizes[m] = sizes[k];
    dstr[m] = dstr[k];
    sstr[m] = sstr[k];
  }
  /* a lone element is contiguous on both sides */
  if (m == 0 && sizes[0] == 1) {
    dstr[0] = 1;
    sstr[0] = fill ? 0 : 1;
  }
  return m + 1;
}

void mn__plan_make(mn__plan_t *p, const mn__strided_t *dst, mn_dtype dst_dtype, const mn__strided_t *src,
                   mn_dtype src_dtype) {
  /* The stated preconditions (kernels/plan.h), O(ndim). */
  MN__ASSERT(dst->ndim >= 0 && dst->ndim <= MN_MAX_DIMS, "dst has %d dims", dst->ndim);
  MN__ASSERT(src == NULL || src->ndim == dst->ndim, "src has %d dims, dst %d", src ? src->ndim : 0, dst->ndim);
  MN__ASSERT(mn_dtype_itemsize(dst_dtype) > 0 && (src == NULL || mn_dtype_itemsize(src_dtype) > 0),
             "an invalid dtype (dst %d, src %d)", (int)dst_dtype, (int)src_dtype);
#if MNEMO_DEBUG >= 1
  for (int k = 0; k < dst->ndim; k++) {
    MN__ASSERT(dst->sizes[k] > 0, "dim %d of dst has size %lld (numel must be > 0)", k, (long long)dst->sizes[k]);
    MN__ASSERT(dst->strides[k] >= 0 && (src == NULL || (src->sizes[k] == dst->sizes[k] && src->strides[k] >= 0)),
               "dim %d: sizes differ or a stride is negative", k);
  }
#endif
  memset(p, 0, sizeof *p);
  bool fill = src == NULL;
  p->dst = dst->data;
  p->src = fill ? NULL : src->data;
  p->dst_dtype = dst_dtype;
  p->src_dtype = fill ? dst_dtype : src_dtype;
  p->dst_item = mn_dtype_itemsize(dst_dtype);
  p->src_item = mn_dtype_itemsize(p->src_dtype);
  p->numel = 1;

  for (int k = 0; k < dst->ndim; k++) p->numel *= dst->sizes[k];
  p->ndim = mn__plan_dims(dst, src, true, p->sizes, p->dst_strides, p->src_strides);

  if (fill) {
    p->kind = MN__PLAN_FILL;
  } else if (p->ndim == 1 && p->dst_strides[0] == 1 && p->src_strides[0] == 1) {
    p->kind = MN__PLAN_CONTIG;
  } else {
    p->kind = MN__PLAN_GENERIC;
    for (int d = 0; d < p->ndim; d++)
      if (p->src_strides[d] == 0) p->kind = MN__PLAN_BROADCAST;
    if (p->kind == MN__PLAN_GENERIC && p->dst_strides[0] == 1 && p->src_strides[0] != 1)
      for (int d = 1; d < p->ndim; d++)
        if (p->src_strides[d] == 1) {
          p->kind = MN__PLAN_TRANSPOSE;
          p->tdim = d;
          break;
        }
  }

  /* Vector width: elements per access, <= 16 bytes and aligned on both sides. */
  p->vec = 1;
  if (p->ndim == 1 && p->dst_strides[0] == 1 && (fill || p->kind == MN__PLAN_CONTIG)) {
    size_t wide = p->dst_item > p->src_item ? p->dst_item : p->src_item;
    int v = (int)(16 / wide);
    while (v > 1 && (((uintptr_t)p->dst % ((size_t)v * p->dst_item)) != 0 ||
                     (!fill && ((uintptr_t)p->src % ((size_t)v * p->src_item)) != 0)))
      v /= 2;
    p->vec = v < 1 ? 1 : v;
  }

  p->index64 = p->numel > INT32_MAX || extent_bytes(p, p->dst_strides, p->dst_item) > INT32_MAX ||
               (!fill && extent_bytes(p, p->src_strides, p->src_item) > INT32_MAX);
}

void mn__offcalc_of_plan(const mn__plan_t *p, mn__offcalc_t *c) {
  memset(c, 0, sizeof *c);
  c->ndim = p->ndim;
  for (int k = 0; k < p->ndim; k++) {
    c->size[k] = p->sizes[k];
    c->div[k] = mn__div32_of_size(p->sizes[k]);
    c->ds[k] = p->dst_strides[k] * (int64_t)p->dst_item;
    c->ss[k] = p->src_strides[k] * (int64_t)p->src_item;
  }
}

void mn__offcalc_of_rows(const mn__strided_t *dst, size_t item, mn__offcalc_t *c, int64_t *numel, int64_t *max_end) {
  memset(c, 0, sizeof *c);
  int64_t n = 1, end = (int64_t)item;
  for (int d = dst->ndim - 1; d >= 0; d--) {
    const int64_t size = dst->sizes[d], stride = dst->strides[d] * (int64_t)item;
    n *= size;
    if (size == 0) continue;
    end += (size - 1) * stride;
    if (size == 1) continue;
    const int m = c->ndim - 1;
    if (m >= 0 && stride == c->ds[m] * c->size[m]) {
      c->size[m] *= size;
      continue;
    }
    c->size[c->ndim] = size;
    c->ds[c->ndim] = stride;
    c->ndim++;
  }
  for (int k = 0; k < c->ndim; k++) c->div[k] = mn__div32_of_size(c->size[k]);
  *numel = n;
  *max_end = n == 0 ? 0 : end;
}
