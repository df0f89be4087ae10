/* runtime/dtype.c: the dtype table, dtype name parsing, scalars, and exact
 * conversions between scalars, narrow floats (half, bf16, fp8: the public
 * entry points of runtime/narrow_float.h) and dtype bytes. Immutable tables and
 * pure functions: thread-safe. */
#include "mnemo/dtype.h"

#include <stdint.h>
#include <string.h>

#include "mnemo/quantized.h"
#include "runtime/error.h"
#include "runtime/narrow_float.h"

/* ---- The dtype table ------------------------------------------------------ */

/* quantized: signed when the stored integer is (qint8, qint32) */
#define MN__DTYPE_ROW(A, sfx, val, nm, size, knd, ...)                                             \
  [val] = {MN_DTYPE_##sfx, nm, size, knd,                                                          \
           (knd) == MN_KIND_QUANTIZED ? MN_DTYPE_##sfx == MN_DTYPE_QINT8 || MN_DTYPE_##sfx == MN_DTYPE_QINT32 \
                                      : (knd) != MN_KIND_BOOL && (knd) != MN_KIND_UINT},
static const mn_dtype_info_t dtype_rows[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(MN__DTYPE_ROW, ~)};
#undef MN__DTYPE_ROW

/* The float format of each dtype (MN_DTYPE_FMT_*), for the scalar conversions. */
#define MN__DTYPE_FMT(A, sfx, val, nm, size, knd, fmt, ...) [val] = fmt,
static const unsigned char dtype_fmt[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(MN__DTYPE_FMT, ~)};
#undef MN__DTYPE_FMT

/* Values are unique (a duplicate is a duplicate case label below) and below the
 * row count (a larger one overflows the arrays above): 0 .. MN_DTYPE_COUNT - 1. */
#define MN__DTYPE_CASE(A, sfx, val, ...) case val:
const mn_dtype_info_t *mn_dtype_info(mn_dtype dtype) {
  switch ((int)dtype) {
    MN_DTYPE_TABLE(MN__DTYPE_CASE, ~)
    return &dtype_rows[dtype];
    default: return NULL;
  }
}
#undef MN__DTYPE_CASE

bool mn_dtype_is_valid(mn_dtype dtype) { return mn_dtype_info(dtype) != NULL; }

const char *mn_dtype_name(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  return info ? info->name : "invalid";
}

size_t mn_dtype_itemsize(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  return info ? info->itemsize : 0;
}

bool mn_dtype_is_floating(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  return info != NULL && info->kind == MN_KIND_FLOAT;
}

bool mn_dtype_is_complex(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  return info != NULL && info->kind == MN_KIND_COMPLEX;
}

/* ---- Quantized dtypes (mnemo/quantized.h) ------------------------------- */

typedef struct mn__dtype_quant {
  int bits;
  int64_t qmin, qmax;
  mn_dtype underlying;
} mn__dtype_quant;

#define MN__DTYPE_QROW(A, sfx, bits, qmin, qmax, under) [MN_DTYPE_##sfx] = {bits, qmin, qmax, MN_DTYPE_##under},
static const mn__dtype_quant dtype_quant_table[MN_DTYPE_COUNT] = {MN_DTYPE_QUANT_TABLE(MN__DTYPE_QROW, ~)};
#undef MN__DTYPE_QROW

bool mn_dtype_is_quantized(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  return info != NULL && info->kind == MN_KIND_QUANTIZED;
}

int mn_dtype_bits(mn_dtype dtype) {
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  if (info == NULL) return 0;
  return info->kind == MN_KIND_QUANTIZED ? dtype_quant_table[dtype].bits : (int)(8 * info->itemsize);
}

mn_status mn_dtype_quant_range(mn_dtype dtype, int64_t *qmin, int64_t *qmax) {
  if (!mn_dtype_is_quantized(dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "dtype %s is not quantized", mn_dtype_name(dtype));
  if (qmin) *qmin = dtype_quant_table[dtype].qmin;
  if (qmax) *qmax = dtype_quant_table[dtype].qmax;
  return MN_OK;
}

mn_dtype mn_dtype_quant_underlying(mn_dtype dtype) {
  return mn_dtype_is_quantized(dtype) ? dtype_quant_table[dtype].underlying : dtype;
}

/* ---- Name parsing --------------------------------------------------------- */

typedef struct mn__dtype_alias {
  const char *name; /* lower case */
  mn_dtype dtype;
} mn__dtype_alias;

/* Names other than the canonical ones (which come from the table). */
static const mn__dtype_alias dtype_aliases[] = {
    /* PyTorch names */
    {"float", MN_DTYPE_FLOAT32},
    {"double", MN_DTYPE_FLOAT64},
    {"half", MN_DTYPE_FLOAT16},
    {"long", MN_DTYPE_INT64},
    {"int", MN_DTYPE_INT32},
    {"short", MN_DTYPE_INT16},
    {"char", MN_DTYPE_INT8}, /* Storage.char() */
    {"byte", MN_DTYPE_UINT8},
    {"cfloat", MN_DTYPE_COMPLEX64},
    {"complex_float", MN_DTYPE_COMPLEX64},
    {"cdouble", MN_DTYPE_COMPLEX128},
    {"complex_double", MN_DTYPE_COMPLEX128},
    /* short forms */
    {"bf16", MN_DTYPE_BFLOAT16},
    {"f16", MN_DTYPE_FLOAT16},
    {"fp16", MN_DTYPE_FLOAT16},
    {"f32", MN_DTYPE_FLOAT32},
    {"fp32", MN_DTYPE_FLOAT32},
    {"f64", MN_DTYPE_FLOAT64},
    {"fp64", MN_DTYPE_FLOAT64},
    {"i8", MN_DTYPE_INT8},
    {"i16", MN_DTYPE_INT16},
    {"i32", MN_DTYPE_INT32},
    {"i64", MN_DTYPE_INT64},
    {"u8", MN_DTYPE_UINT8},
    {"u16", MN_DTYPE_UINT16},
    {"u32", MN_DTYPE_UINT32},
    {"u64", MN_DTYPE_UINT64},
    {"c64", MN_DTYPE_COMPLEX64},
    {"c128", MN_DTYPE_COMPLEX128},
    {"fp8_e4m3", MN_DTYPE_FLOAT8_E4M3FN},
    {"fp8_e4m3fn", MN_DTYPE_FLOAT8_E4M3FN},
    {"e4m3", MN_DTYPE_FLOAT8_E4M3FN},
    {"e4m3fn", MN_DTYPE_FLOAT8_E4M3FN},
    {"float8_e4m3", MN_DTYPE_FLOAT8_E4M3FN},
    {"f8e4m3", MN_DTYPE_FLOAT8_E4M3FN},
    {"f8e4m3fn", MN_DTYPE_FLOAT8_E4M3FN},
    {"fp8_e5m2", MN_DTYPE_FLOAT8_E5M2},
    {"e5m2", MN_DTYPE_FLOAT8_E5M2},
    {"f8e5m2", MN_DTYPE_FLOAT8_E5M2},
};

static char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* Whether `s` equals the lower-case `lower`, ignoring ASCII case. */
static bool ieq(const char *s, const char *lower) {
  for (; *lower != '\0'; ++s, ++lower) {
    if (ascii_lower(*s) != *lower) return false;
  }
  return *s == '\0';
}

/* Whether `s` starts with the lower-case `prefix`, ignoring ASCII case. */
static bool iprefix(const char *s, const char *prefix) {
  for (; *prefix != '\0'; ++s, ++prefix) {
    if (ascii_lower(*s) != *prefix) return false;
  }
  return true;
}

mn_status mn_dtype_parse(const char *name, mn_dtype *out) {
  if (name == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "dtype name is NULL");
  if (out == NULL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "out is NULL (name \"%.64s\")", name);
  const char *s = name;
  if (iprefix(s, "torch.")) s += 6;
  if (*s != '\0') {
    for (int i = 0; i < MN_DTYPE_COUNT; ++i) {
      if (ieq(s, dtype_rows[i].name)) {
        *out = dtype_rows[i].dtype;
        return MN_OK;
      }
    }
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; ++i) {
      if (ieq(s, dtype_aliases[i].name)) {
        *out = dtype_aliases[i].dtype;
        return MN_OK;
      }
    }
  }
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "unknown dtype name \"%.64s%s\"", name,
                   strlen(name) > 64 ? "..." : "");
}

/* ---- Narrow floats -------------------------------------------------------- */

/* The rounding and the formats are runtime/narrow_float.h's: float -> half
 * and float -> fp8 round exactly through the format's row (mn__nf_from_f64),
 * float -> bfloat16 and every decode are the formats' conversion pairs. */

uint16_t mn_float_to_half(float f) { return (uint16_t)mn__nf_from_f64(mn__nf_fmt(MN_DTYPE_FMT_BINARY16), (double)f); }

float mn_half_to_float(uint16_t h) { return mn__f16_to_f32(h); }

uint16_t mn_float_to_bfloat16(float f) { return mn__f32_to_bf16(f); }

float mn_bfloat16_to_float(uint16_t b) { return mn__bf16_to_f32(b); }

uint8_t mn_float_to_e4m3fn(float f) { return (uint8_t)mn__nf_from_f64(mn__nf_fmt(MN_DTYPE_FMT_E4M3FN), (double)f); }

float mn_e4m3fn_to_float(uint8_t v) { return mn__e4m3_to_f32(v); }

uint8_t mn_float_to_e5m2(float f) { return (uint8_t)mn__nf_from_f64(mn__nf_fmt(MN_DTYPE_FMT_E5M2), (double)f); }

float mn_e5m2_to_float(uint8_t v) { return mn__e5m2_to_f32(v); }

/* ---- Scalars -------------------------------------------------------------- */

mn_scalar_t mn_scalar_bool(bool v) {
  mn_scalar_t s;
  memset(&s, 0, sizeof s);
  s.kind = MN_SCALAR_BOOL;
  s.v.b = v;
  return s;
}

mn_scalar_t mn_scalar_int(int64_t v) {
  mn_scalar_t s;
  memset(&s, 0, sizeof s);
  s.kind = MN_SCALAR_INT;
  s.v.i = v;
  return s;
}

mn_scalar_t mn_scalar_uint(uint64_t v) {
  mn_scalar_t s;
  memset(&s, 0, sizeof s);
  s.kind = MN_SCALAR_UINT;
  s.v.u = v;
  return s;
}

mn_scalar_t mn_scalar_float(double v) {
  mn_scalar_t s;
  memset(&s, 0, sizeof s);
  s.kind = MN_SCALAR_FLOAT;
  s.v.f = v;
  return s;
}

mn_scalar_t mn_scalar_complex(double re, double im) {
  mn_scalar_t s;
  memset(&s, 0, sizeof s);
  s.kind = MN_SCALAR_COMPLEX;
  s.v.c[0] = re;
  s.v.c[1] = im;
  return s;
}

/* The real part of a float or complex scalar. */
static double scalar_real(const mn_scalar_t *v) {
  return v->kind == MN_SCALAR_COMPLEX ? v->v.c[0] : v->v.f;
}

static bool scalar_truth(const mn_scalar_t *v) {
  switch (v->kind) {
    case MN_SCALAR_BOOL: return v->v.b;
    case MN_SCALAR_INT: return v->v.i != 0;
    case MN_SCALAR_UINT: return v->v.u != 0;
    case MN_SCALAR_FLOAT: return v->v.f != 0.0; /* NaN is true */
    case MN_SCALAR_COMPLEX: return v->v.c[0] != 0.0 || v->v.c[1] != 0.0;
  }
  return false;
}

/* The value as the low bits of a 64-bit two's complement integer; `to_u64`
 * lets floats >= 2^63 through directly (saturating at UINT64_MAX). */
static uint64_t scalar_int_bits(const mn_scalar_t *v, bool to_u64) {
  switch (v->kind) {
    case MN_SCALAR_BOOL: return v->v.b ? 1u : 0u;
    case MN_SCALAR_INT: return (uint64_t)v->v.i;
    case MN_SCALAR_UINT: return v->v.u;
    case MN_SCALAR_FLOAT:
    case MN_SCALAR_COMPLEX: {
      double d = scalar_real(v);
      return to_u64 ? mn__f64_to_u64_bits(d) : (uint64_t)mn__f64_to_i64_sat(d);
    }
  }
  return 0;
}

static float scalar_f32(const mn_scalar_t *v) {
  switch (v->kind) {
    case MN_SCALAR_BOOL: return v->v.b ? 1.0f : 0.0f;
    case MN_SCALAR_INT: return (float)v->v.i;
    case MN_SCALAR_UINT: return (float)v->v.u;
    case MN_SCALAR_FLOAT:
    case MN_SCALAR_COMPLEX: return (float)scalar_real(v);
  }
  return 0.0f;
}

static double scalar_f64(const mn_scalar_t *v) {
  switch (v->kind) {
    case MN_SCALAR_BOOL: return v->v.b ? 1.0 : 0.0;
    case MN_SCALAR_INT: return (double)v->v.i;
    case MN_SCALAR_UINT: return (double)v->v.u;
    case MN_SCALAR_FLOAT:
    case MN_SCALAR_COMPLEX: return scalar_real(v);
  }
  return 0.0;
}

/* Rounds the value once, straight from its exact form (integers do not pass
 * through double, which could round twice). */
static uint32_t scalar_narrow(const mn_scalar_t *v, mn__nf_fmt_t fmt) {
  switch (v->kind) {
    case MN_SCALAR_BOOL: return mn__nf_from_u64(fmt, v->v.b ? 1u : 0u);
    case MN_SCALAR_INT: return mn__nf_from_i64(fmt, v->v.i);
    case MN_SCALAR_UINT: return mn__nf_from_u64(fmt, v->v.u);
    case MN_SCALAR_FLOAT:
    case MN_SCALAR_COMPLEX: return mn__nf_from_f64(fmt, scalar_real(v));
  }
  return 0;
}

/* Stores the low `size` bytes of an integer's bits (as a uintN_t). */
static bool store_uint(void *out, uint64_t bits, size_t size) {
  switch (size) {
    case 1: { uint8_t x = (uint8_t)bits; memcpy(out, &x, sizeof x); return true; }
    case 2: { uint16_t x = (uint16_t)bits; memcpy(out, &x, sizeof x); return true; }
    case 4: { uint32_t x = (uint32_t)bits; memcpy(out, &x, sizeof x); return true; }
    case 8: { uint64_t x = bits; memcpy(out, &x, sizeof x); return true; }
    default: return false;
  }
}

/* Stores the scalar's real value in float format `fmt` (MN_DTYPE_FMT_*); the
 * bytes written, 0 for a format without a conversion. */
#define STORE_NARROW(A, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case FMT: {                                                        \
    T x = (T)scalar_narrow(v, mn__nf_fmt(FMT));                      \
    memcpy(out, &x, sizeof x);                                       \
    return sizeof x;                                                 \
  }
static size_t store_real(void *out, const mn_scalar_t *v, unsigned fmt) {
  switch (fmt) {
    MN__NF_FORMATS(STORE_NARROW, ~)
    case MN_DTYPE_FMT_BINARY32: {
      float x = scalar_f32(v);
      memcpy(out, &x, sizeof x);
      return sizeof x;
    }
    case MN_DTYPE_FMT_BINARY64: {
      double x = scalar_f64(v);
      memcpy(out, &x, sizeof x);
      return sizeof x;
    }
    default: return 0;
  }
}
#undef STORE_NARROW

mn_status mn_scalar_to_bytes(mn_scalar_t value, mn_dtype dtype, void *out) {
  /* a quantized element's bytes are its stored integer (one byte of a packed
   * dtype: the value wraps modulo 256) */
  if (mn_dtype_is_quantized(dtype)) dtype = mn_dtype_quant_underlying(dtype);
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  if (info == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "invalid dtype %d", (int)dtype);
  if (out == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "out is NULL (dtype %s)", info->name);
  if ((int)value.kind < (int)MN_SCALAR_BOOL || (int)value.kind > (int)MN_SCALAR_COMPLEX)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "invalid scalar kind %d", (int)value.kind);

  const unsigned fmt = dtype_fmt[dtype];
  switch ((int)info->kind) {
    case MN_KIND_BOOL: {
      uint8_t b = scalar_truth(&value) ? 1 : 0;
      memcpy(out, &b, 1);
      return MN_OK;
    }
    case MN_KIND_UINT:
    case MN_KIND_INT: {
      /* uint64 alone takes floats >= 2^63 directly */
      const bool to_u64 = info->kind == MN_KIND_UINT && info->itemsize == 8;
      if (store_uint(out, scalar_int_bits(&value, to_u64), info->itemsize)) return MN_OK;
      break;
    }
    case MN_KIND_FLOAT:
      if (store_real(out, &value, fmt) == info->itemsize) return MN_OK;
      break;
    case MN_KIND_COMPLEX: {
      /* the real part as the float of its format, then the imaginary part */
      mn_scalar_t im = mn_scalar_float(value.kind == MN_SCALAR_COMPLEX ? value.v.c[1] : 0.0);
      size_t part = store_real(out, &value, fmt);
      if (part != 0 && 2 * part == info->itemsize && store_real((char *)out + part, &im, fmt) == part)
        return MN_OK;
      break;
    }
  }
  return mn__error(MN_ERR_INTERNAL, __func__, "dtype %s has no conversion", info->name);
}

/* Reads a float of format `fmt` at `in` as a double; the bytes read, 0 for a
 * format without a conversion. */
#define LOAD_NARROW(A, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case FMT: {                                                       \
    T x;                                                            \
    memcpy(&x, in, sizeof x);                                       \
    *out = TO_F32(x);                                               \
    return sizeof x;                                                \
  }
static size_t load_real(const void *in, unsigned fmt, double *out) {
  switch (fmt) {
    MN__NF_FORMATS(LOAD_NARROW, ~)
    case MN_DTYPE_FMT_BINARY32: {
      float x;
      memcpy(&x, in, sizeof x);
      *out = x;
      return sizeof x;
    }
    case MN_DTYPE_FMT_BINARY64: {
      double x;
      memcpy(&x, in, sizeof x);
      *out = x;
      return sizeof x;
    }
    default: return 0;
  }
}
#undef LOAD_NARROW

mn_status mn_scalar_from_bytes(mn_dtype dtype, const void *in, mn_scalar_t *out) {
  if (mn_dtype_is_quantized(dtype)) dtype = mn_dtype_quant_underlying(dtype); /* the stored integer */
  const mn_dtype_info_t *info = mn_dtype_info(dtype);
  if (info == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "invalid dtype %d", (int)dtype);
  if (in == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "in is NULL (dtype %s)", info->name);
  if (out == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "out is NULL (dtype %s)", info->name);

  const unsigned fmt = dtype_fmt[dtype];
  switch ((int)info->kind) {
    case MN_KIND_BOOL: {
      uint8_t x;
      memcpy(&x, in, sizeof x);
      *out = mn_scalar_bool(x != 0);
      return MN_OK;
    }
    case MN_KIND_UINT:
      switch (info->itemsize) {
        case 1: { uint8_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_uint(x); return MN_OK; }
        case 2: { uint16_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_uint(x); return MN_OK; }
        case 4: { uint32_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_uint(x); return MN_OK; }
        case 8: { uint64_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_uint(x); return MN_OK; }
        default: break;
      }
      break;
    case MN_KIND_INT:
      switch (info->itemsize) {
        case 1: { int8_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_int(x); return MN_OK; }
        case 2: { int16_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_int(x); return MN_OK; }
        case 4: { int32_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_int(x); return MN_OK; }
        case 8: { int64_t x; memcpy(&x, in, sizeof x); *out = mn_scalar_int(x); return MN_OK; }
        default: break;
      }
      break;
    case MN_KIND_FLOAT: {
      double x;
      if (load_real(in, fmt, &x) == info->itemsize) {
        *out = mn_scalar_float(x);
        return MN_OK;
      }
      break;
    }
    case MN_KIND_COMPLEX: {
      double re, im;
      size_t part = load_real(in, fmt, &re);
      if (part != 0 && 2 * part == info->itemsize && load_real((const char *)in + part, fmt, &im) == part) {
        *out = mn_scalar_complex(re, im);
        return MN_OK;
      }
      break;
    }
  }
  return mn__error(MN_ERR_INTERNAL, __func__, "dtype %s has no conversion", info->name);
}
