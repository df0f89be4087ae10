/* kernels/cast.h: the element conversions of every dtype pair, shared by the
 * CPU executor (C) and the CUDA kernels (host+device), bit-exact with
 * mn_scalar_to_bytes(mn_scalar_from_bytes(...)); and the item loads and stores
 * (typed when aligned in device code). Pure inline functions: thread-safe. */
#ifndef MNEMO_KERNELS_CAST_H
#define MNEMO_KERNELS_CAST_H

#include <stdint.h>
#include <string.h>

#include "kernels/hd.h"
#include "mnemo/dtype.h"

/* Exact float arithmetic that no compiler contracts into an FMA (the random
 * fill must give the same bits on CPU and GPU). C11 builds do not contract. */
#if defined(__CUDA_ARCH__)
#define MN__FMUL(a, b) __fmul_rn((a), (b))
#define MN__FADD(a, b) __fadd_rn((a), (b))
#define MN__DMUL(a, b) __dmul_rn((a), (b))
#define MN__DADD(a, b) __dadd_rn((a), (b))
#else
#define MN__FMUL(a, b) ((a) * (b))
#define MN__FADD(a, b) ((a) + (b))
#define MN__DMUL(a, b) ((a) * (b))
#define MN__DADD(a, b) ((a) + (b))
#endif

MN__HD uint32_t mn__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
MN__HD float mn__f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
MN__HD uint64_t mn__f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

MN__HD double mn__f64_of(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* c ? a : b for c in {0, 1}, with masks (vectorizers take it; branches they do not). */
MN__HD uint32_t mn__sel(uint32_t c, uint32_t a, uint32_t b) {
  uint32_t m = 0u - c;
  return (a & m) | (b & ~m);
}

/* float <-> double with x86's NaN rule spelled out (quiet the NaN, keep the
 * payload's top bits), so that CPU and GPU agree on NaN bits. */
MN__HD double mn__f32_to_f64(float f) {
  uint32_t u = mn__f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return mn__f64_of(((uint64_t)(u & 0x80000000u) << 32) | UINT64_C(0x7FF8000000000000) |
                      ((uint64_t)(u & 0x3FFFFFu) << 29));
  return (double)f;
}
MN__HD float mn__f64_to_f32(double d) {
  uint64_t b = mn__f64_bits(d);
  if ((b & UINT64_C(0x7FFFFFFFFFFFFFFF)) > UINT64_C(0x7FF0000000000000))
    return mn__f32_of((uint32_t)((b >> 32) & 0x80000000u) | 0x7FC00000u | (uint32_t)((b >> 29) & 0x3FFFFFu));
  return (float)d;
}
/* A float that went through double and back: NaNs come out quiet. */
MN__HD float mn__f32_quiet(float f) {
  uint32_t u = mn__f32_bits(f);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? mn__f32_of(u | 0x400000u) : f;
}

/* ---- narrow floats ---------------------------------------------------------- */

/* A narrow format: stored mantissa bits, min/max normal exponents, largest
 * finite encoding, overflow encoding (inf or max finite), quiet NaN, sign bit. */
#define MN__NF_HALF 10, -14, 15, 0x7BFFu, 0x7C00u, 0x7E00u, 0x8000u
#define MN__NF_BF16 7, -126, 127, 0x7F7Fu, 0x7F80u, 0x7FC0u, 0x8000u
#define MN__NF_E4M3 3, -6, 8, 0x7Eu, 0x7Eu, 0x7Fu, 0x80u
#define MN__NF_E5M2 2, -14, 15, 0x7Bu, 0x7Cu, 0x7Fu, 0x80u

MN__HD int mn__msb64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll((long long)x);
#else
  return 63 - __builtin_clzll(x);
#endif
}

/* (-1)^sign * mag * 2^exp2 rounded to nearest even in the narrow format. */
MN__HD uint32_t mn__nf_round(int mbits, int emin, int emax, uint32_t maxf, uint32_t ovf, uint32_t nan,
                             uint32_t signbit, uint32_t sign, uint64_t mag, int exp2) {
  (void)nan;
  (void)signbit;
  if (mag == 0) return sign;
  int e = mn__msb64(mag) + exp2;
  if (e > emax) return sign | ovf;
  int q = (e >= emin ? e : emin) - mbits;
  int s = q - exp2;
  uint64_t n;
  if (s <= 0) {
    n = mag << -s;
  } else if (s >= 64) {
    n = (s == 64 && mag > (UINT64_C(1) << 63)) ? 1 : 0;
  } else {
    n = mag >> s;
    uint64_t rem = mag & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
    if (rem > half || (rem == half && (n & 1))) ++n;
  }
  uint64_t enc = n;
  if (e >= emin) enc += (uint64_t)(e - emin) << mbits;
  if (enc > maxf) return sign | ovf;
  return sign | (uint32_t)enc;
}

MN__HD uint32_t mn__nf_from_f64(int mbits, int emin, int emax, uint32_t maxf, uint32_t ovf, uint32_t nan,
                                uint32_t signbit, double d) {
  uint64_t bits = mn__f64_bits(d);
  uint32_t sign = (bits >> 63) ? signbit : 0;
  unsigned ef = (unsigned)(bits >> 52) & 0x7FFu;
  uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
  if (ef == 0x7FF) return sign | (frac != 0 ? nan : ovf);
  if (ef == 0) return mn__nf_round(mbits, emin, emax, maxf, ovf, nan, signbit, sign, frac, -1074);
  return mn__nf_round(mbits, emin, emax, maxf, ovf, nan, signbit, sign, frac | (UINT64_C(1) << 52),
                      (int)ef - 1075);
}

MN__HD uint32_t mn__nf_from_i64(int mbits, int emin, int emax, uint32_t maxf, uint32_t ovf, uint32_t nan,
                                uint32_t signbit, int64_t v) {
  uint64_t mag = v < 0 ? UINT64_C(0) - (uint64_t)v : (uint64_t)v;
  return mn__nf_round(mbits, emin, emax, maxf, ovf, nan, signbit, v < 0 ? signbit : 0, mag, 0);
}

MN__HD uint32_t mn__nf_from_u64(int mbits, int emin, int emax, uint32_t maxf, uint32_t ovf, uint32_t nan,
                                uint32_t signbit, uint64_t v) {
  return mn__nf_round(mbits, emin, emax, maxf, ovf, nan, signbit, 0, v, 0);
}

/* float -> half, round to nearest even. Every case is computed and one is
 * selected (no branches: the loops vectorize); the subnormal case lets the FPU
 * round with one exact float add. */
MN__HD uint16_t mn__f32_to_f16(float f) {
  uint32_t u = mn__f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  uint32_t big = mn__sel(u > 0x7F800000u, 0x7E00u, 0x7C00u);                /* NaN, or inf / overflow */
  uint32_t sub = mn__f32_bits(MN__FADD(mn__f32_of(u), 0.5f)) - 0x3F000000u; /* units of 2^-24 */
  uint32_t nor = (u + 0xC8000FFFu + ((u >> 13) & 1u)) >> 13;                /* rebias -112, round */
  uint32_t r = mn__sel(u >= 0x47800000u, big, mn__sel(u < 0x38800000u, sub, nor));
  return (uint16_t)(sign | r);
}

MN__HD float mn__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  uint32_t infnan = sign | 0x7F800000u | (man << 13);
  uint32_t sub = sign | mn__f32_bits(MN__FMUL((float)man, 0x1p-24f));
  uint32_t nor = sign | ((exp + 112u) << 23) | (man << 13);
  return mn__f32_of(mn__sel(exp == 0x1Fu, infnan, mn__sel(exp == 0, sub, nor)));
}

MN__HD uint16_t mn__f32_to_bf16(float f) {
  uint32_t u = mn__f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

MN__HD float mn__bf16_to_f32(uint16_t b) { return mn__f32_of((uint32_t)b << 16); }

MN__HD float mn__e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24, exp = (v >> 3) & 0xFu, man = v & 0x7u;
  uint32_t nan = sign | 0x7FC00000u;
  uint32_t sub = sign | mn__f32_bits(MN__FMUL((float)man, 0x1p-9f));
  uint32_t nor = sign | ((exp + 120u) << 23) | (man << 20);
  return mn__f32_of(mn__sel((v & 0x7Fu) == 0x7Fu, nan, mn__sel(exp == 0, sub, nor)));
}

MN__HD float mn__e5m2_to_f32(uint8_t v) { return mn__f16_to_f32((uint16_t)((unsigned)v << 8)); }

/* float -> e4m3fn: RNE, saturating at 448 (0x7E), NaN -> 0x7F (sign kept). */
MN__HD uint8_t mn__f32_to_e4m3(float f) {
  uint32_t u = mn__f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7FFFFFFFu;
  uint32_t sub = mn__f32_bits(MN__FADD(mn__f32_of(u), 16384.0f)) - 0x46800000u; /* units of 2^-9 */
  uint32_t nor = (u - 0x3C000000u + 0x7FFFFu + ((u >> 20) & 1u)) >> 20;          /* rebias -120, round */
  nor = mn__sel(nor > 0x7Eu, 0x7Eu, nor);
  uint32_t r = mn__sel(u > 0x7F800000u, 0x7Fu, mn__sel(u >= 0x43E00000u, 0x7Eu, mn__sel(u < 0x3C800000u, sub, nor)));
  return (uint8_t)(sign | r);
}

/* float -> e5m2: RNE, overflow to inf (0x7C), NaN -> 0x7F (sign kept). */
MN__HD uint8_t mn__f32_to_e5m2(float f) {
  uint32_t u = mn__f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7FFFFFFFu;
  uint32_t sub = mn__f32_bits(MN__FADD(mn__f32_of(u), 128.0f)) - 0x43000000u; /* units of 2^-16 */
  uint32_t nor = (u - 0x38000000u + 0xFFFFFu + ((u >> 21) & 1u)) >> 21;       /* rebias -112, round */
  nor = mn__sel(nor > 0x7Cu, 0x7Cu, nor);
  uint32_t r = mn__sel(u > 0x7F800000u, 0x7Fu, mn__sel(u >= 0x47800000u, 0x7Cu, mn__sel(u < 0x38800000u, sub, nor)));
  return (uint8_t)(sign | r);
}

/* ---- every dtype pair, for dispatch tables (CPU rows) ------------------------ */

/* MN__DT_PAIRS(X) expands X(D, DSIZE, S, SSIZE) for every ordered pair of
 * plain dtypes (quantized ones have no casts), dst-major: D and S the MN_DTYPE_ suffixes, DSIZE and SSIZE their item
 * sizes, all from MN_DTYPE_TABLE (mnemo/dtype_table.h). A macro cannot expand
 * inside its own expansion, so each outer row leaves the inner table deferred
 * ("MN__DT_TABLE_AGAIN () (...)", not yet a call); MN__DT_EXPAND's rescan, after
 * the outer table has ended, expands it. X must not itself use MN_DTYPE_TABLE. */
#define MN__DT_EMPTY()
#define MN__DT_DEFER(m) m MN__DT_EMPTY()
#define MN__DT_EXPAND(...) __VA_ARGS__
#define MN__DT_TABLE_AGAIN() MN_DTYPE_TABLE_PLAIN
#define MN__DT_PAIRS(X) MN__DT_EXPAND(MN_DTYPE_TABLE_PLAIN(MN__DT_PAIRS_ROW, X))
#define MN__DT_PAIRS_ROW(X, D, dval, dname, DSIZE, ...) \
  MN__DT_DEFER(MN__DT_TABLE_AGAIN)()(MN__DT_PAIRS_CELL, (X, D, DSIZE))
#define MN__DT_PAIRS_CELL(XD, S, sval, sname, SSIZE, ...) MN__DT_PAIRS_CALL(MN__DT_PAIRS_UNPACK XD, S, SSIZE)
#define MN__DT_PAIRS_UNPACK(X, D, DSIZE) X, D, DSIZE
#define MN__DT_PAIRS_CALL(...) MN__DT_PAIRS_CALL2(__VA_ARGS__)
#define MN__DT_PAIRS_CALL2(X, D, DSIZE, S, SSIZE) X(D, DSIZE, S, SSIZE)

/* ---- float -> integer: mnemo's one rule ------------------------------------ */

/* Truncates toward zero to int64; NaN gives 0, out of range saturates. */
MN__HD int64_t mn__f64_to_i64_sat(double d) {
  int hi = d >= 0x1p63, lo = d <= -0x1p63, in = d == d && !hi && !lo;
  int64_t r = (int64_t)(in ? d : 0.0); /* selects, no branches: loops vectorize */
  r = hi ? INT64_MAX : r;
  return lo ? INT64_MIN : r;
}
MN__HD uint64_t mn__f64_to_u64_bits(double d) {
  if (d >= 0x1p63) return d >= 0x1p64 ? UINT64_MAX : (uint64_t)d;
  return (uint64_t)mn__f64_to_i64_sat(d);
}

/* ---- one element of any pair ---------------------------------------------------
 * A source element loads into one of four exact classes (signed int64, unsigned
 * uint64, float, double) plus an imaginary part; the destination stores from
 * the class. With constant dtypes (template or literal arguments) the switches
 * fold away and the loop bodies vectorize. */
enum { MN__CLS_I = 0, MN__CLS_U = 1, MN__CLS_F = 2, MN__CLS_D = 3 };

typedef struct mn__cval_s {
  int cls;
  int64_t i;
  uint64_t u;
  float f;
  double d;
  double im;
} mn__cval_t;

/* Items in memory. A device access through memcpy becomes one byte access
 * per byte (ld.u8 / st.u8), so the kernels load and store an item through a
 * naturally aligned type of its size when they know the address is aligned to
 * the item size (al != 0): a typed dereference in device code and in its host
 * emulation (MN_CUDA_EMULATION, where UBSan's alignment check then catches
 * what would fault on a GPU), memcpy on the host (as fast there, and no
 * alignment assumed). al = 0: memcpy everywhere (any address; registers). */
#if defined(__CUDA_ARCH__) || defined(MN_CUDA_EMULATION)
#define MN__TYPED_ACCESS 1
#else
#define MN__TYPED_ACCESS 0
#endif
#if defined(__cplusplus)
#define MN__ALIGNAS(n) alignas(n)
#else
#define MN__ALIGNAS(n) _Alignas(n)
#endif
/* complex items: one 8-byte (complex64) or 16-byte (complex128) access */
typedef struct mn__c64_s {
  MN__ALIGNAS(8) float v[2];
} mn__c64_t;
typedef struct mn__c128_s {
  MN__ALIGNAS(16) double v[2];
} mn__c128_t;
#define MN__LOAD(T, x, p, al)                                           \
  do {                                                                  \
    if (MN__TYPED_ACCESS && (al))                                       \
      (x) = *(const T *)(p);                                            \
    else                                                                \
      memcpy(&(x), (p), sizeof(T));                                     \
  } while (0)
#define MN__STORE(T, p, x, al)                                          \
  do {                                                                  \
    if (MN__TYPED_ACCESS && (al))                                       \
      *(T *)(p) = (x);                                                  \
    else                                                                \
      memcpy((p), &(x), sizeof(T));                                     \
  } while (0)

/* Loads the item of dtype S at p; al: p is aligned to S's item size. */
MN__HD mn__cval_t mn__cast_load_al(int S, const void *p, int al) {
  mn__cval_t v;
  v.cls = MN__CLS_U;
  v.i = 0;
  v.u = 0;
  v.f = 0.0f;
  v.d = 0.0;
  v.im = 0.0;
  switch (S) {
    case MN_DTYPE_BOOL: { uint8_t x; MN__LOAD(uint8_t, x, p, al); v.u = x != 0; break; }
    case MN_DTYPE_UINT8: { uint8_t x; MN__LOAD(uint8_t, x, p, al); v.u = x; break; }
    case MN_DTYPE_UINT16: { uint16_t x; MN__LOAD(uint16_t, x, p, al); v.u = x; break; }
    case MN_DTYPE_UINT32: { uint32_t x; MN__LOAD(uint32_t, x, p, al); v.u = x; break; }
    case MN_DTYPE_UINT64: { uint64_t x; MN__LOAD(uint64_t, x, p, al); v.u = x; break; }
    case MN_DTYPE_INT8: { int8_t x; MN__LOAD(int8_t, x, p, al); v.cls = MN__CLS_I; v.i = x; break; }
    case MN_DTYPE_INT16: { int16_t x; MN__LOAD(int16_t, x, p, al); v.cls = MN__CLS_I; v.i = x; break; }
    case MN_DTYPE_INT32: { int32_t x; MN__LOAD(int32_t, x, p, al); v.cls = MN__CLS_I; v.i = x; break; }
    case MN_DTYPE_INT64: { int64_t x; MN__LOAD(int64_t, x, p, al); v.cls = MN__CLS_I; v.i = x; break; }
    case MN_DTYPE_FLOAT16: { uint16_t x; MN__LOAD(uint16_t, x, p, al); v.cls = MN__CLS_F; v.f = mn__f16_to_f32(x); break; }
    case MN_DTYPE_BFLOAT16: { uint16_t x; MN__LOAD(uint16_t, x, p, al); v.cls = MN__CLS_F; v.f = mn__bf16_to_f32(x); break; }
    case MN_DTYPE_FLOAT8_E4M3FN: { uint8_t x; MN__LOAD(uint8_t, x, p, al); v.cls = MN__CLS_F; v.f = mn__e4m3_to_f32(x); break; }
    case MN_DTYPE_FLOAT8_E5M2: { uint8_t x; MN__LOAD(uint8_t, x, p, al); v.cls = MN__CLS_F; v.f = mn__e5m2_to_f32(x); break; }
    case MN_DTYPE_FLOAT32: { float x; MN__LOAD(float, x, p, al); v.cls = MN__CLS_F; v.f = x; break; }
    case MN_DTYPE_FLOAT64: { double x; MN__LOAD(double, x, p, al); v.cls = MN__CLS_D; v.d = x; break; }
    case MN_DTYPE_COMPLEX64: { mn__c64_t x; MN__LOAD(mn__c64_t, x, p, al); v.cls = MN__CLS_F; v.f = x.v[0]; v.im = mn__f32_to_f64(x.v[1]); break; }
    case MN_DTYPE_COMPLEX128: { mn__c128_t x; MN__LOAD(mn__c128_t, x, p, al); v.cls = MN__CLS_D; v.d = x.v[0]; v.im = x.v[1]; break; }
    default: break;
  }
  return v;
}
MN__HD mn__cval_t mn__cast_load(int S, const void *p) { return mn__cast_load_al(S, p, 0); }

/* The value as 64-bit two's complement bits (float: saturating truncation). */
MN__HD uint64_t mn__cval_bits(mn__cval_t v, int to_u64) {
  switch (v.cls) {
    case MN__CLS_I: return (uint64_t)v.i;
    case MN__CLS_U: return v.u;
    /* a NaN's bits do not matter here (it becomes 0): plain widening */
    case MN__CLS_F: return to_u64 ? mn__f64_to_u64_bits((double)v.f) : (uint64_t)mn__f64_to_i64_sat((double)v.f);
    default: return to_u64 ? mn__f64_to_u64_bits(v.d) : (uint64_t)mn__f64_to_i64_sat(v.d);
  }
}
MN__HD float mn__cval_f32(mn__cval_t v) {
  switch (v.cls) {
    case MN__CLS_I: return (float)v.i;
    case MN__CLS_U: return (float)v.u;
    case MN__CLS_F: return mn__f32_quiet(v.f);
    default: return mn__f64_to_f32(v.d);
  }
}
MN__HD double mn__cval_f64(mn__cval_t v) {
  switch (v.cls) {
    case MN__CLS_I: return (double)v.i;
    case MN__CLS_U: return (double)v.u;
    case MN__CLS_F: return mn__f32_to_f64(v.f);
    default: return v.d;
  }
}
MN__HD int mn__cval_truth(mn__cval_t v) {
  switch (v.cls) {
    case MN__CLS_I: return v.i != 0;
    case MN__CLS_U: return v.u != 0;
    case MN__CLS_F: return v.f != 0.0f || v.im != 0.0;
    default: return v.d != 0.0 || v.im != 0.0;
  }
}

/* Narrow float encoding of the value, rounded once from its exact form; the
 * fast float path is taken whenever the value is exactly a float. */
#define MN__CVAL_NARROW(NAME, FMT, FAST)                                                   \
  MN__HD uint32_t NAME(mn__cval_t v) {                                                     \
    switch (v.cls) {                                                                       \
      case MN__CLS_I:                                                                      \
        if (v.i >= -(INT64_C(1) << 24) && v.i <= (INT64_C(1) << 24)) return FAST((float)v.i); \
        return mn__nf_from_i64(FMT, v.i);                                                  \
      case MN__CLS_U:                                                                      \
        if (v.u <= (UINT64_C(1) << 24)) return FAST((float)v.u);                           \
        return mn__nf_from_u64(FMT, v.u);                                                  \
      case MN__CLS_F: return FAST(v.f);                                                    \
      default: return mn__nf_from_f64(FMT, v.d);                                           \
    }                                                                                      \
  }
MN__CVAL_NARROW(mn__cval_f16, MN__NF_HALF, mn__f32_to_f16)
MN__CVAL_NARROW(mn__cval_bf16, MN__NF_BF16, mn__f32_to_bf16)
MN__CVAL_NARROW(mn__cval_e4m3, MN__NF_E4M3, mn__f32_to_e4m3)
MN__CVAL_NARROW(mn__cval_e5m2, MN__NF_E5M2, mn__f32_to_e5m2)
#undef MN__CVAL_NARROW

/* Stores v as dtype D at p; al: p is aligned to D's item size. */
MN__HD void mn__cast_store_al(int D, void *p, mn__cval_t v, int al) {
  switch (D) {
    case MN_DTYPE_BOOL: { uint8_t x = (uint8_t)mn__cval_truth(v); MN__STORE(uint8_t, p, x, al); break; }
    case MN_DTYPE_UINT8:
    case MN_DTYPE_INT8: { uint8_t x = (uint8_t)mn__cval_bits(v, 0); MN__STORE(uint8_t, p, x, al); break; }
    case MN_DTYPE_UINT16:
    case MN_DTYPE_INT16: { uint16_t x = (uint16_t)mn__cval_bits(v, 0); MN__STORE(uint16_t, p, x, al); break; }
    case MN_DTYPE_UINT32:
    case MN_DTYPE_INT32: { uint32_t x = (uint32_t)mn__cval_bits(v, 0); MN__STORE(uint32_t, p, x, al); break; }
    case MN_DTYPE_INT64: { uint64_t x = mn__cval_bits(v, 0); MN__STORE(uint64_t, p, x, al); break; }
    case MN_DTYPE_UINT64: { uint64_t x = mn__cval_bits(v, 1); MN__STORE(uint64_t, p, x, al); break; }
    case MN_DTYPE_FLOAT16: { uint16_t x = (uint16_t)mn__cval_f16(v); MN__STORE(uint16_t, p, x, al); break; }
    case MN_DTYPE_BFLOAT16: { uint16_t x = (uint16_t)mn__cval_bf16(v); MN__STORE(uint16_t, p, x, al); break; }
    case MN_DTYPE_FLOAT8_E4M3FN: { uint8_t x = (uint8_t)mn__cval_e4m3(v); MN__STORE(uint8_t, p, x, al); break; }
    case MN_DTYPE_FLOAT8_E5M2: { uint8_t x = (uint8_t)mn__cval_e5m2(v); MN__STORE(uint8_t, p, x, al); break; }
    case MN_DTYPE_FLOAT32: { float x = mn__cval_f32(v); MN__STORE(float, p, x, al); break; }
    case MN_DTYPE_FLOAT64: { double x = mn__cval_f64(v); MN__STORE(double, p, x, al); break; }
    case MN_DTYPE_COMPLEX64: {
      mn__c64_t x;
      x.v[0] = mn__cval_f32(v);
      x.v[1] = mn__f64_to_f32(v.im);
      MN__STORE(mn__c64_t, p, x, al);
      break;
    }
    case MN_DTYPE_COMPLEX128: {
      mn__c128_t x;
      x.v[0] = mn__cval_f64(v);
      x.v[1] = v.im;
      MN__STORE(mn__c128_t, p, x, al);
      break;
    }
    default: break;
  }
}
MN__HD void mn__cast_store(int D, void *p, mn__cval_t v) { mn__cast_store_al(D, p, v, 0); }

/* Converts one element; D and S are mn_dtype values (constants for speed);
 * al: both addresses are aligned to their item sizes. */
MN__HD void mn__cast_elem_al(int D, void *dst, int S, const void *src, int al) {
  mn__cast_store_al(D, dst, mn__cast_load_al(S, src, al), al);
}
MN__HD void mn__cast_elem(int D, void *dst, int S, const void *src) { mn__cast_elem_al(D, dst, S, src, 0); }

#endif /* MNEMO_KERNELS_CAST_H */
