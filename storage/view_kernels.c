/* storage/view_kernels.c: the kernels on views (mnemo/kernels.h:
 * mn_kernel_copy_view, mn_kernel_fill_view, the random fills): each view
 * becomes a plain strided operand for the kernels layer (kernels/ops.h), after
 * checking it lives on the stream's device. Thread-safe (views are immutable). */
#include <string.h>

#include "kernels/ops.h"
#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "runtime/error.h"
#include "storage/view_internal.h"

static mn_status check_device(mn_stream_t *stream, const mn_view_t *v, const char *what, const char *func) {
  if (!mn_device_equal(mn_view_device(v), mn_stream_device(stream)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s view is on another device than the stream", what);
  return MN_OK;
}

mn_status mn__check_quant_copy(const mn_view_t *dst, const mn_view_t *src, const char *func) {
  const bool qd = mn_dtype_is_quantized(dst->dtype), qs = mn_dtype_is_quantized(src->dtype);
  if (!qd && !qs) return MN_OK;
  if (qs && !qd)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "Copying from quantized Tensor to non-quantized Tensor is not allowed, please use dequantize to "
                     "get a float Tensor from a quantized Tensor");
  if (dst->dtype != src->dtype)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "copying %s into %s is not supported: quantized copies need the same dtype (use "
                     "quantize_per_tensor / dequantize)",
                     mn_dtype_name(src->dtype), mn_dtype_name(dst->dtype));
  if (mn__dtype_packed_per_byte(dst->dtype) && mn_view_numel(dst) > 0) {
    bool same_shape = dst->ndim == src->ndim;
    for (int d = 0; same_shape && d < dst->ndim; d++) same_shape = dst->sizes[d] == src->sizes[d];
    if (!same_shape || !mn_view_is_contiguous(dst) || !mn_view_is_contiguous(src))
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "copying %s views needs both contiguous with one shape (packed elements copy as whole bytes)",
                       mn_dtype_name(dst->dtype));
  }
  return MN_OK;
}

mn_status mn_kernel_copy_view(mn_stream_t *stream, const mn_view_t *dst, const mn_view_t *src) {
  MN__CHECK_ARG(stream != NULL && dst != NULL && src != NULL, "stream, dst and src must not be NULL");
  mn_status st = check_device(stream, dst, "dst", __func__);
  if (st == MN_OK) st = check_device(stream, src, "src", __func__);
  if (st == MN_OK) st = mn__check_quant_copy(dst, src, __func__);
  if (st != MN_OK) return st;
  if (mn__dtype_packed_per_byte(dst->dtype)) /* contiguous, starting on a byte: whole bytes */
    return mn_view_numel(dst) == 0 ? MN_OK
                                   : mn_kernel_copy(stream, mn_view_data(dst), mn_view_data(src), mn_view_nbytes(dst));
  mn__strided_t sd, ss;
  mn__strided_of_view(dst, &sd);
  mn__strided_of_view(src, &ss);
  return mn__kernel_copy_strided(stream, &sd, dst->dtype, &ss, src->dtype, __func__);
}

mn_status mn_kernel_fill_view(mn_stream_t *stream, const mn_view_t *dst, mn_scalar_t value) {
  MN__CHECK_ARG(stream != NULL && dst != NULL, "stream and dst must not be NULL");
  MN__CHECK_ARG(!mn_dtype_is_quantized(dst->dtype), "filling a %s view is not supported (quantize a float view instead)",
                mn_dtype_name(dst->dtype));
  mn_status st = check_device(stream, dst, "dst", __func__);
  if (st != MN_OK) return st;
  unsigned char pattern[16];
  st = mn_scalar_to_bytes(value, dst->dtype, pattern);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__strided_t sd;
  mn__strided_of_view(dst, &sd);
  return mn__kernel_fill_strided(stream, &sd, dst->dtype, pattern, __func__);
}

static mn_status random_fill(mn_stream_t *stream, const mn_view_t *dst, uint64_t seed, uint64_t offset, bool normal,
                             double a, double b, const char *func) {
  if (stream == NULL || dst == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream and dst must not be NULL");
  mn_status st = check_device(stream, dst, "dst", func);
  if (st != MN_OK) return st;
  mn__strided_t sd;
  mn__strided_of_view(dst, &sd);
  return mn__kernel_random_strided(stream, &sd, dst->dtype, seed, offset, normal, a, b, func);
}

mn_status mn_kernel_random_uniform(mn_stream_t *stream, const mn_view_t *dst, uint64_t seed, uint64_t offset,
                                   double low, double high) {
  if (!(low <= high))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "low (%g) must not be above high (%g)", low, high);
  return random_fill(stream, dst, seed, offset, false, low, high - low, __func__);
}

mn_status mn_kernel_random_normal(mn_stream_t *stream, const mn_view_t *dst, uint64_t seed, uint64_t offset,
                                  double mean, double std) {
  if (!(std >= 0)) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "std (%g) must be >= 0", std);
  return random_fill(stream, dst, seed, offset, true, mean, std, __func__);
}
