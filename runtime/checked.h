/* runtime/checked.h: overflow-checked integer arithmetic, the one set of
 * helpers every size, stride, offset and byte-count computation goes through
 * (views, view ops, DLPack import, loaders, kernels' extents). Pure inline
 * functions: thread-safe.
 *
 * Two styles:
 * - mn__ck_*: "sticky" helpers. Each takes a bool *overflow that it sets on
 *   overflow (and then returns 0); a run of computations checks the flag once
 *   at the end, so a formula reads as it is written:
 *     bool ovf = false;
 *     g.offset = mn__ck_add(v->offset, mn__ck_mul(start, stride, &ovf), &ovf);
 *     if (ovf) return <MN_ERR_OVERFLOW with the operands>;
 * - mn__strided_span / mn__strided_span_bytes: the storage a strided geometry
 *   reaches, the bound every view is checked against. */
#ifndef MNEMO_RUNTIME_CHECKED_H
#define MNEMO_RUNTIME_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mn__ck_add, mn__ck_sub, mn__ck_mul (int64_t) and mn__ck_size_add,
 * mn__ck_size_mul (size_t): a op b, or 0 with *overflow set. */
#define MN__CK_DEFINE(name, type, op)                         \
  static inline type name(type a, type b, bool *overflow) {   \
    type r;                                                   \
    if (__builtin_##op##_overflow(a, b, &r)) {                \
      *overflow = true;                                       \
      return 0;                                               \
    }                                                         \
    return r;                                                 \
  }
MN__CK_DEFINE(mn__ck_add, int64_t, add)
MN__CK_DEFINE(mn__ck_sub, int64_t, sub)
MN__CK_DEFINE(mn__ck_mul, int64_t, mul)
MN__CK_DEFINE(mn__ck_size_add, size_t, add)
MN__CK_DEFINE(mn__ck_size_mul, size_t, mul)
#undef MN__CK_DEFINE

/* Converts a non-negative int64 to size_t (always fits on 64-bit hosts). */
static inline size_t mn__ck_to_size(int64_t a, bool *overflow) {
  if (a < 0 || (uint64_t)a > (uint64_t)SIZE_MAX) {
    *overflow = true;
    return 0;
  }
  return (size_t)a;
}

/* ceil(a / b) for a >= 0, b > 0, without forming a + b - 1. */
static inline int64_t mn__ceil_div(int64_t a, int64_t b) { return a == 0 ? 0 : (a - 1) / b + 1; }

/* The storage elements a strided geometry reaches: 0 when a size is 0, else
 * offset + 1 + sum((size - 1) * stride). pre: sizes, strides and offset are
 * >= 0. False (and *elems untouched) when that does not fit an int64. */
static inline bool mn__strided_span(int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset,
                                    int64_t *elems) {
  for (int d = 0; d < ndim; d++)
    if (sizes[d] == 0) {
      *elems = 0;
      return true;
    }
  bool ovf = false;
  int64_t last = offset;
  for (int d = 0; d < ndim; d++) last = mn__ck_add(last, mn__ck_mul(sizes[d] - 1, strides[d], &ovf), &ovf);
  last = mn__ck_add(last, 1, &ovf);
  if (ovf) return false;
  *elems = last;
  return true;
}

/* The same in bytes for items of `item` bytes; false when it does not fit a size_t. */
static inline bool mn__strided_span_bytes(int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset,
                                          size_t item, size_t *bytes) {
  int64_t elems;
  if (!mn__strided_span(ndim, sizes, strides, offset, &elems)) return false;
  bool ovf = false;
  size_t b = mn__ck_size_mul(mn__ck_to_size(elems, &ovf), item, &ovf);
  if (ovf) return false;
  *bytes = b;
  return true;
}

#endif /* MNEMO_RUNTIME_CHECKED_H */
