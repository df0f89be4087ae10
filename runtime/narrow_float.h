/* runtime/narrow_float.h: the one implementation of the narrow floats
 * (binary16, bfloat16, float8 e4m3fn and e5m2): each format's row, keyed by
 * the dtype table's format column (MN_DTYPE_FMT_*, mnemo/dtype_table.h), the
 * parameters derived from it, the exact rounding of any value into a format,
 * and each format's conversion pair (fast float -> format, format -> float);
 * and the float -> integer rule (truncate, NaN to 0, saturate) that scalars
 * and casts share.
 * Header-only, host and device (MN__HD): runtime/dtype.c (scalars, the public
 * mn_float_to_half and friends) and the CPU and CUDA kernels (kernels/cast.h)
 * include it, so they agree bit for bit. Pure inline functions: thread-safe.
 *
 * Adding a float format: its MN_DTYPE_FMT_* and dtype row in
 * mnemo/dtype_table.h, its row here (MN__NF_ROW_<value>, listed in
 * MN__NF_FORMATS), and its conversion pair below; dtype.c and the kernels'
 * loads, stores and casts expand the rows. */
#ifndef MNEMO_RUNTIME_NARROW_FLOAT_H
#define MNEMO_RUNTIME_NARROW_FLOAT_H

#include <stdint.h>
#include <string.h>

#include "mnemo/dtype_table.h"
#include "runtime/hd.h"

/* ---- the formats ------------------------------------------------------------
 * MN__NF_ROW_<n>(X, A), for each value n of the dtype table's format column,
 * expands X(A, FMT, EBITS, MBITS, INF, NANV, T, TO_F32, FROM_F32) for a narrow
 * format and nothing for the others (none, binary32, binary64):
 *   FMT       the MN_DTYPE_FMT_* (whose value is n)
 *   EBITS     exponent bits; the bias is 2^(EBITS-1) - 1
 *   MBITS     stored mantissa bits
 *   INF       1: IEEE-like, the all-ones exponent holds inf and the NaNs, a
 *             too large value becomes inf; 0 ("fn"): no inf, only the
 *             all-ones pattern is NaN, a too large value saturates at the
 *             largest finite
 *   NANV       the NaN a conversion produces (sign clear; the sign is kept)
 *   T         the storage type
 *   TO_F32    format -> float, exact
 *   FROM_F32  float -> format, round to nearest even: the fast path, bit for
 *             bit mn__nf_from_f64's (tests/test_kernels.c checks)
 * MN__NF_ROW(FMT, X, A) takes the format by value (a MN_DTYPE_FMT_* name, or
 * a table column holding one). */
/* clang-format off */
#define MN__NF_ROW_0(X, A) /* MN_DTYPE_FMT_NONE */
#define MN__NF_ROW_1(X, A) X(A, MN_DTYPE_FMT_BINARY16, 5, 10, 1, 0x7E00u, uint16_t, mn__f16_to_f32,  mn__f32_to_f16)
#define MN__NF_ROW_2(X, A) X(A, MN_DTYPE_FMT_BFLOAT16, 8, 7,  1, 0x7FC0u, uint16_t, mn__bf16_to_f32, mn__f32_to_bf16)
#define MN__NF_ROW_3(X, A) /* MN_DTYPE_FMT_BINARY32: native float */
#define MN__NF_ROW_4(X, A) /* MN_DTYPE_FMT_BINARY64: native double */
#define MN__NF_ROW_5(X, A) X(A, MN_DTYPE_FMT_E4M3FN,   4, 3,  0, 0x7Fu,   uint8_t,  mn__e4m3_to_f32, mn__f32_to_e4m3)
#define MN__NF_ROW_6(X, A) X(A, MN_DTYPE_FMT_E5M2,     5, 2,  1, 0x7Fu,   uint8_t,  mn__e5m2_to_f32, mn__f32_to_e5m2)
/* clang-format on */
#define MN__NF_ROW(FMT, X, A) MN__NF_ROW_I(FMT, X, A)
#define MN__NF_ROW_I(FMT, X, A) MN__NF_ROW_##FMT(X, A)
/* Every narrow format once. */
#define MN__NF_FORMATS(X, A)                                                                     \
  MN__NF_ROW(MN_DTYPE_FMT_BINARY16, X, A) MN__NF_ROW(MN_DTYPE_FMT_BFLOAT16, X, A)                \
  MN__NF_ROW(MN_DTYPE_FMT_E4M3FN, X, A) MN__NF_ROW(MN_DTYPE_FMT_E5M2, X, A)

/* A format's parameters, derived from its row. */
typedef struct mn__nf_fmt_s {
  int mbits;     /* stored mantissa bits */
  int emin;      /* exponent of the smallest normal (1 - bias) */
  int emax;      /* exponent of the largest finite normal */
  uint32_t maxf; /* encoding of the largest finite magnitude */
  uint32_t ovf;  /* encoding for larger magnitudes: inf, or maxf (saturating) */
  uint32_t nan;  /* the NaN produced, sign clear */
  uint32_t sign; /* the sign bit */
  int bytes;     /* sizeof(T); 0: not a narrow format */
} mn__nf_fmt_t;

#define MN__NF_BIAS(EB) ((1 << ((EB) - 1)) - 1)
#define MN__NF_EMAX(EB, INF) ((INF) ? MN__NF_BIAS(EB) : (1 << (EB)) - 1 - MN__NF_BIAS(EB))
/* IEEE-like: the exponent below all-ones with a full mantissa; fn: all-ones
 * but the last mantissa bit (all-ones is the NaN) */
#define MN__NF_MAXF(EB, MB, INF)                                            \
  ((INF) ? ((((1u << (EB)) - 2u) << (MB)) | ((1u << (MB)) - 1u))             \
         : ((((1u << (EB)) - 1u) << (MB)) | ((1u << (MB)) - 2u)))
#define MN__NF_OVF(EB, MB, INF) ((INF) ? ((1u << (EB)) - 1u) << (MB) : MN__NF_MAXF(EB, MB, INF))
#define MN__NF_FMT_CASE(A, FMT, EB, MB, INF, NANV, T, ...)                                               \
  case FMT: {                                                                                         \
    mn__nf_fmt_t f = {MB,  1 - MN__NF_BIAS(EB), MN__NF_EMAX(EB, INF), MN__NF_MAXF(EB, MB, INF),       \
                      MN__NF_OVF(EB, MB, INF), NANV, 1u << ((EB) + (MB)), (int)sizeof(T)};             \
    return f;                                                                                         \
  }
/* The parameters of format fmt (MN_DTYPE_FMT_*); all zero for one that is not
 * narrow. A constant fmt folds away. */
MN__HD mn__nf_fmt_t mn__nf_fmt(int fmt) {
  switch (fmt) {
    MN__NF_FORMATS(MN__NF_FMT_CASE, ~)
    default: break;
  }
  mn__nf_fmt_t none = {0, 0, 0, 0, 0, 0, 0, 0};
  return none;
}
#undef MN__NF_FMT_CASE

/* ---- bits ------------------------------------------------------------------- */

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

/* Index of the highest set bit of a nonzero value. */
MN__HD int mn__msb64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll((long long)x);
#elif defined(__GNUC__) || defined(__clang__)
  return 63 - __builtin_clzll(x);
#else
  int p = 0;
  for (int step = 32; step > 0; step >>= 1) {
    if (x >> step) {
      x >>= step;
      p += step;
    }
  }
  return p;
#endif
}

/* ---- exact rounding of any value ------------------------------------------- */

/* Encodes (-1)^sign * mag * 2^exp2 exactly rounded to nearest, ties to even;
 * `sign` is 0 or f.sign. */
MN__HD uint32_t mn__nf_round(mn__nf_fmt_t f, uint32_t sign, uint64_t mag, int exp2) {
  if (mag == 0) return sign;
  int e = mn__msb64(mag) + exp2; /* exponent of the leading bit */
  if (e > f.emax) return sign | f.ovf;
  /* q: exponent of the target's last mantissa bit at this magnitude */
  int q = (e >= f.emin ? e : f.emin) - f.mbits;
  int s = q - exp2; /* right shift from mag to units of 2^q */
  uint64_t n;
  if (s <= 0) {
    n = mag << -s; /* exact; n < 2^(mbits+1) */
  } else if (s >= 64) {
    /* mag / 2^s < 1: rounds to 1 only when strictly above one half */
    n = (s == 64 && mag > (UINT64_C(1) << 63)) ? 1 : 0;
  } else {
    n = mag >> s;
    uint64_t rem = mag & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
    if (rem > half || (rem == half && (n & 1))) ++n;
  }
  /* Normal: n holds the implicit bit, which adds one to the exponent field; a
   * carry out of the mantissa moves to the next binade; a subnormal that
   * rounds up to 2^mbits becomes the smallest normal. */
  uint64_t enc = n;
  if (e >= f.emin) enc += (uint64_t)(e - f.emin) << f.mbits;
  if (enc > f.maxf) return sign | f.ovf;
  return sign | (uint32_t)enc;
}

MN__HD uint32_t mn__nf_from_f64(mn__nf_fmt_t f, double d) {
  uint64_t bits = mn__f64_bits(d);
  uint32_t sign = (bits >> 63) ? f.sign : 0;
  unsigned ef = (unsigned)(bits >> 52) & 0x7FFu;
  uint64_t frac = bits & ((UINT64_C(1) << 52) - 1);
  if (ef == 0x7FF) return sign | (frac != 0 ? f.nan : f.ovf);
  if (ef == 0) return mn__nf_round(f, sign, frac, -1074);
  return mn__nf_round(f, sign, frac | (UINT64_C(1) << 52), (int)ef - 1075);
}

MN__HD uint32_t mn__nf_from_i64(mn__nf_fmt_t f, int64_t v) {
  uint64_t mag = v < 0 ? UINT64_C(0) - (uint64_t)v : (uint64_t)v;
  return mn__nf_round(f, v < 0 ? f.sign : 0, mag, 0);
}

MN__HD uint32_t mn__nf_from_u64(mn__nf_fmt_t f, uint64_t v) { return mn__nf_round(f, 0, v, 0); }

/* ---- the conversion pairs (fast paths) -------------------------------------- */

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

/* Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even; a
 * carry into the exponent is the correct next binade (or inf). */
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

/* e5m2 is the top byte of IEEE binary16. */
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

/* ---- by format --------------------------------------------------------------- */

/* Float -> format fmt by its fast path; format fmt -> float. A constant fmt
 * folds away; 0 for a format that is not narrow. */
#define MN__NF_FROM_F32_CASE(A, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case FMT: return FROM_F32(A);
MN__HD uint32_t mn__nf_from_f32(int fmt, float x) {
  switch (fmt) {
    MN__NF_FORMATS(MN__NF_FROM_F32_CASE, x)
    default: return 0;
  }
}
#undef MN__NF_FROM_F32_CASE
#define MN__NF_TO_F32_CASE(A, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case FMT: return TO_F32((T)(A));
MN__HD float mn__nf_to_f32(int fmt, uint32_t x) {
  switch (fmt) {
    MN__NF_FORMATS(MN__NF_TO_F32_CASE, x)
    default: return 0.0f;
  }
}
#undef MN__NF_TO_F32_CASE

#endif /* MNEMO_RUNTIME_NARROW_FLOAT_H */
