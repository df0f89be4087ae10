/* mnemo/quantized.h: quantized storages and views (PyTorch's QInt8Storage ...
 * QUInt2x4Storage and per-tensor affine quantized tensors). The dtypes are
 * rows of the dtype table (mnemo/dtype_table.h): qint8, quint8, qint32 (one
 * stored integer per element: 1, 1, 4 bytes) and the packed quint4x2 and
 * quint2x4 (2 or 4 elements per byte, element 0 in the low bits; item size 1
 * as PyTorch's element_size, storage bytes ceil(numel * bits / 8)). A
 * quantized view carries its scale and zero point; every view operation
 * keeps them. value = (q - zero_point) * scale. Thread-safe as views are.
 * docs/VIEWS.md ("Quantized views") has the rounding, clamping and packing
 * rules. */
#ifndef MNEMO_QUANTIZED_H
#define MNEMO_QUANTIZED_H

#include <stdbool.h>
#include <stdint.h>

#include "mnemo/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether dtype is one of the quantized dtypes. */
MN_API bool mn_dtype_is_quantized(mn_dtype dtype);
/* Bits per element: 8 * item size for every dtype but the packed ones (4 for
 * quint4x2, 2 for quint2x4); 0 for an invalid dtype. */
MN_API int mn_dtype_bits(mn_dtype dtype);
/* The integer range of a quantized dtype ([-128, 127] for qint8, [0, 15]
 * for quint4x2, ...); MN_ERR_INVALID_ARGUMENT for other dtypes. */
MN_API MN_NODISCARD mn_status mn_dtype_quant_range(mn_dtype dtype, int64_t *qmin, int64_t *qmax);
/* The integer dtype of a quantized dtype's stored values (int_repr's dtype:
 * int8, uint8, int32; uint8 bytes for the packed ones); other dtypes are
 * returned unchanged. */
MN_API mn_dtype mn_dtype_quant_underlying(mn_dtype dtype);

/* Whether v's dtype is quantized. */
MN_API bool mn_view_is_quantized(const mn_view_t *v);
/* The view's per-tensor affine parameters (PyTorch's q_scale and
 * q_zero_point); 0 for views that are not quantized. */
MN_API double mn_view_q_scale(const mn_view_t *v);
MN_API int64_t mn_view_q_zero_point(const mn_view_t *v);

/* A quantized view of `storage` (retained), as mn_view_create with the
 * parameters (PyTorch's _make_per_tensor_quantized_tensor over a storage).
 * dtype must be quantized; scale finite and > 0; zero_point inside the
 * dtype's range. A packed dtype (quint4x2, quint2x4) needs an offset that
 * starts a byte (a multiple of its elements per byte) and is bounds-checked
 * in bytes. */
MN_API MN_NODISCARD mn_status mn_view_create_quantized(mn_storage_t *storage, mn_dtype dtype, int ndim,
                                                       const int64_t *sizes, const int64_t *strides, int64_t offset,
                                                       double scale, int64_t zero_point, mn_view_t **out);
/* quantize_per_tensor(v, scale, zero_point, dtype): v (float16, bfloat16,
 * float32 or float64; read as float32 as PyTorch does) quantized into a new
 * contiguous storage on v's device, with PyTorch 1.13's rounding (round half
 * to even of value / scale in float32, plus zero_point) and clamping to the
 * dtype's range (NaN gives the range's minimum). Queued on `stream`.
 * Layout (as torch 1.13, also for dequantize and int_repr): channels_last /
 * channels_last_3d when v's strides are like it (4-d / 5-d), else row-major;
 * packed dtypes always row-major. */
MN_API MN_NODISCARD mn_status mn_view_quantize_per_tensor(const mn_view_t *v, double scale, int64_t zero_point,
                                                          mn_dtype dtype, mn_stream_t *stream, mn_view_t **out);
/* dequantize(v): a new contiguous float32 view, (q - zero_point) * scale as
 * PyTorch computes it (bit-exact against torch 1.13). */
MN_API MN_NODISCARD mn_status mn_view_dequantize(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out);
/* int_repr(v): the stored integers in a new contiguous view: int8 for qint8,
 * uint8 for quint8, int32 for qint32; for the packed dtypes the packed bytes
 * themselves (uint8, ceil(numel * bits / 8) of them, as torch 1.13). */
MN_API MN_NODISCARD mn_status mn_view_int_repr(const mn_view_t *v, mn_stream_t *stream, mn_view_t **out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_QUANTIZED_H */
