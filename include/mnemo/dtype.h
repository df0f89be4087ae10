/* mnemo/dtype.h: the element types of PyTorch storages (name, item size, kind),
 * name parsing, scalars and exact scalar conversion to any dtype's bytes. */
#ifndef MNEMO_DTYPE_H
#define MNEMO_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/dtype_table.h"
#include "mnemo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most dims a view (and a kernel operand) may have. */
#define MN_MAX_DIMS 25

/* One row per dtype: symbol, value, canonical name, item size in bytes, kind.
 * Values are stable (never renumbered). The first columns of MN_DTYPE_TABLE
 * (mnemo/dtype_table.h, which holds every per-dtype fact). */
#define MN__DTYPE_MAP_ROW(X, sfx, val, name, size, kind, ...) X(MN_DTYPE_##sfx, val, name, size, kind)
#define MN_DTYPE_MAP(X) MN_DTYPE_TABLE(MN__DTYPE_MAP_ROW, X)

typedef enum mn_dtype_kind {
  MN_KIND_BOOL = 0,
  MN_KIND_UINT = 1, /* unsigned integer */
  MN_KIND_INT = 2,  /* signed integer */
  MN_KIND_FLOAT = 3,
  MN_KIND_COMPLEX = 4,
  MN_KIND_QUANTIZED = 5 /* per-tensor affine quantized integers (mnemo/quantized.h) */
} mn_dtype_kind;

/* One enumerator per row of MN_DTYPE_TABLE (a macro clang-format cannot read: left as written). */
/* clang-format off */
typedef enum mn_dtype {
#define MN__DTYPE_ENUM(A, sfx, val, ...) MN_DTYPE_##sfx = val,
  MN_DTYPE_TABLE(MN__DTYPE_ENUM, ~)
#undef MN__DTYPE_ENUM
  MN_DTYPE_COUNT = MN_DTYPE_TABLE_ROWS
} mn_dtype;
/* clang-format on */

typedef struct mn_dtype_info_s {
  mn_dtype dtype;
  const char *name; /* canonical: "bfloat16" */
  size_t itemsize;  /* bytes per element */
  mn_dtype_kind kind;
  bool is_signed; /* int, float and complex kinds */
} mn_dtype_info_t;

/* Info for a dtype; NULL for values outside the table. */
MN_API const mn_dtype_info_t *mn_dtype_info(mn_dtype dtype);
MN_API bool mn_dtype_is_valid(mn_dtype dtype);
/* Canonical name, or "invalid". */
MN_API const char *mn_dtype_name(mn_dtype dtype);
/* Bytes per element; 0 for an invalid dtype. */
MN_API size_t mn_dtype_itemsize(mn_dtype dtype);
MN_API bool mn_dtype_is_floating(mn_dtype dtype); /* float kinds (not complex) */
MN_API bool mn_dtype_is_complex(mn_dtype dtype);

/* Parses canonical names, PyTorch names with or without "torch." ("float",
 * "half", "long", "cfloat", ...) and short forms ("bf16", "f32", "fp8_e4m3",
 * "i64", "u8"), case-insensitively. MN_ERR_INVALID_ARGUMENT for others;
 * *out is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_dtype_parse(const char *name, mn_dtype *out);

/* A scalar value of any dtype, as PyTorch's c10::Scalar: bool, signed or
 * unsigned integer, double or complex double. */
typedef enum mn_scalar_kind {
  MN_SCALAR_BOOL,
  MN_SCALAR_INT,    /* int64_t */
  MN_SCALAR_UINT,   /* uint64_t */
  MN_SCALAR_FLOAT,  /* double */
  MN_SCALAR_COMPLEX /* two doubles */
} mn_scalar_kind;

typedef struct mn_scalar_s {
  mn_scalar_kind kind;
  union {
    bool b;
    int64_t i;
    uint64_t u;
    double f;
    double c[2]; /* real, imaginary */
  } v;
} mn_scalar_t;

MN_API mn_scalar_t mn_scalar_bool(bool v);
MN_API mn_scalar_t mn_scalar_int(int64_t v);
MN_API mn_scalar_t mn_scalar_uint(uint64_t v);
MN_API mn_scalar_t mn_scalar_float(double v);
MN_API mn_scalar_t mn_scalar_complex(double re, double im);

/* Writes `value` converted to `dtype` into out[0 .. itemsize) with PyTorch's
 * cast rules: round to nearest even for narrow floats, x != 0 for bool (NaN is
 * true), the real part for complex->real, integers wrap modulo 2^bits.
 * float->integer (mnemo's one rule, the same on CPU and GPU): truncate toward
 * zero to int64, NaN giving 0 and out-of-range saturating at INT64_MIN/MAX,
 * then wrap to the target width (-1.5 -> uint8 255, 300.0 -> int8 44, as
 * PyTorch on CPU); uint64 takes values >= 2^63 directly (saturating). */
MN_API MN_NODISCARD mn_status mn_scalar_to_bytes(mn_scalar_t value, mn_dtype dtype, void *out);
/* Reads one element of `dtype` at `in` into a scalar (exact: integers stay
 * integers, narrow floats widen to double, complex stays complex). */
MN_API MN_NODISCARD mn_status mn_scalar_from_bytes(mn_dtype dtype, const void *in, mn_scalar_t *out);

/* Exact narrow-float conversions used by the scalar code and the CPU kernels. */
MN_API uint16_t mn_float_to_half(float f); /* round to nearest even */
MN_API float mn_half_to_float(uint16_t h);
MN_API uint16_t mn_float_to_bfloat16(float f); /* round to nearest even; NaN stays NaN */
MN_API float mn_bfloat16_to_float(uint16_t b);
MN_API uint8_t mn_float_to_e4m3fn(float f); /* RNE; saturates to +-448; NaN -> NaN */
MN_API float mn_e4m3fn_to_float(uint8_t v);
MN_API uint8_t mn_float_to_e5m2(float f); /* RNE; overflow to inf (PyTorch rule) */
MN_API float mn_e5m2_to_float(uint8_t v);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_DTYPE_H */
