/* tests/kernels_reference.c: the scalar reference kernels (kernels_reference.h),
 * one multi-index walk and one scalar conversion per element. Thread-safe. */
#include <string.h>

#include "kernels_reference.h"

void mn__ref_cast_element(void *dst, mn_dtype dst_dtype, const void *src, mn_dtype src_dtype) {
  mn_scalar_t v;
  if (mn_scalar_from_bytes(src_dtype, src, &v) == MN_OK) {
    mn_status ignored = mn_scalar_to_bytes(v, dst_dtype, dst); /* valid dtypes: cannot fail */
    (void)ignored;
  }
}

/* Byte offset of multi-index idx in operand o (strides in elements). */
static int64_t offset_of(const mn__strided_t *o, const int64_t *idx, int64_t item) {
  int64_t off = -o->origin;
  for (int d = 0; d < o->ndim; d++) off += idx[d] * o->strides[d];
  return off * item;
}

void mn__ref_copy_cast(const mn__strided_t *dst, mn_dtype dst_dtype, const mn__strided_t *src,
                       mn_dtype src_dtype, int64_t begin, int64_t end) {
  int64_t di = (int64_t)mn_dtype_itemsize(dst_dtype), si = (int64_t)mn_dtype_itemsize(src_dtype);
  int64_t idx[MN_MAX_DIMS];
  for (int64_t e = begin; e < end; e++) {
    int64_t rest = e;
    for (int d = dst->ndim - 1; d >= 0; d--) {
      idx[d] = rest % dst->sizes[d];
      rest /= dst->sizes[d];
    }
    mn__ref_cast_element(dst->data + offset_of(dst, idx, di), dst_dtype, src->data + offset_of(src, idx, si),
                         src_dtype);
  }
}

void mn__ref_fill(const mn__strided_t *dst, size_t itemsize, const void *pattern) {
  int64_t n = 1;
  for (int d = 0; d < dst->ndim; d++) n *= dst->sizes[d];
  int64_t idx[MN_MAX_DIMS];
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e;
    for (int d = dst->ndim - 1; d >= 0; d--) {
      idx[d] = rest % dst->sizes[d];
      rest /= dst->sizes[d];
    }
    memcpy(dst->data + offset_of(dst, idx, (int64_t)itemsize), pattern, itemsize);
  }
}
