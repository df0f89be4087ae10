/* kernels/cast.h: the element conversions of every dtype pair, shared by the
 * CPU executor (C) and the CUDA kernels (host+device), bit-exact with
 * mn_scalar_to_bytes(mn_scalar_from_bytes(...)); and the item loads and stores
 * (typed when aligned in device code). The narrow floats come from
 * runtime/narrow_float.h (dtype.c's too). Pure inline functions: thread-safe. */
#ifndef MNEMO_KERNELS_CAST_H
#define MNEMO_KERNELS_CAST_H

#include <stdint.h>
#include <string.h>

#include "mnemo/dtype.h"
#include "runtime/hd.h"
#include "runtime/narrow_float.h"

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

/* A dtype row's case when its format (column FMT) is a narrow float
 * (runtime/narrow_float.h's row): nothing for the other rows. */
#define MN__CAST_NF_CASE(X, SFX, FMT) MN__NF_ROW(FMT, X, SFX)
#define MN__CAST_LOAD_NF(A, SFX, VAL, NAME, SIZE, KIND, FMT, ...) MN__CAST_NF_CASE(MN__CAST_LOAD_NF_ROW, SFX, FMT)
#define MN__CAST_LOAD_NF_ROW(SFX, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case MN_DTYPE_##SFX: {                                                       \
    T x;                                                                       \
    MN__LOAD(T, x, p, al);                                                     \
    v.cls = MN__CLS_F;                                                         \
    v.f = TO_F32(x);                                                           \
    break;                                                                     \
  }
#define MN__CAST_STORE_NF(A, SFX, VAL, NAME, SIZE, KIND, FMT, ...) MN__CAST_NF_CASE(MN__CAST_STORE_NF_ROW, SFX, FMT)
#define MN__CAST_STORE_NF_ROW(SFX, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case MN_DTYPE_##SFX: {                                                        \
    T x = (T)mn__cval_nf(v, FMT);                                               \
    MN__STORE(T, p, x, al);                                                     \
    break;                                                                      \
  }

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
    MN_DTYPE_TABLE_PLAIN(MN__CAST_LOAD_NF, ~) /* the narrow floats */
    case MN_DTYPE_FLOAT32: { float x; MN__LOAD(float, x, p, al); v.cls = MN__CLS_F; v.f = x; break; }
    case MN_DTYPE_FLOAT64: { double x; MN__LOAD(double, x, p, al); v.cls = MN__CLS_D; v.d = x; break; }
    case MN_DTYPE_COMPLEX64: { mn__c64_t x; MN__LOAD(mn__c64_t, x, p, al); v.cls = MN__CLS_F; v.f = x.v[0]; v.im = mn__f32_to_f64(x.v[1]); break; }
    case MN_DTYPE_COMPLEX128: { mn__c128_t x; MN__LOAD(mn__c128_t, x, p, al); v.cls = MN__CLS_D; v.d = x.v[0]; v.im = x.v[1]; break; }
    default: break;
  }
  return v;
}

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

/* Narrow float encoding (format fmt, MN_DTYPE_FMT_*) of the value, rounded
 * once from its exact form; the fast float path is taken whenever the value
 * is exactly a float. */
MN__HD uint32_t mn__cval_nf(mn__cval_t v, int fmt) {
  switch (v.cls) {
    case MN__CLS_I:
      if (v.i >= -(INT64_C(1) << 24) && v.i <= (INT64_C(1) << 24)) return mn__nf_from_f32(fmt, (float)v.i);
      return mn__nf_from_i64(mn__nf_fmt(fmt), v.i);
    case MN__CLS_U:
      if (v.u <= (UINT64_C(1) << 24)) return mn__nf_from_f32(fmt, (float)v.u);
      return mn__nf_from_u64(mn__nf_fmt(fmt), v.u);
    case MN__CLS_F: return mn__nf_from_f32(fmt, v.f);
    default: return mn__nf_from_f64(mn__nf_fmt(fmt), v.d);
  }
}

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
    MN_DTYPE_TABLE_PLAIN(MN__CAST_STORE_NF, ~) /* the narrow floats */
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
