/* kernels/index_kern.h: what the CPU and CUDA gather/scatter kernels
 * (kernels/index.c, kernels/cuda_index.cu) share: the prepared geometry of
 * one gather or scatter (dims coalesced, byte strides, index operands) and
 * the element operations (index loads with negative wrapping, the typed
 * accumulating add of every dtype), host+device (MN__HD) so both sides run
 * the same arithmetic bit for bit. Pure inline functions and plain data:
 * thread-safe. */
#ifndef MNEMO_KERNELS_INDEX_KERN_H
#define MNEMO_KERNELS_INDEX_KERN_H

#include <stdint.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/index.h"
#include "mnemo/dtype.h"
#include "runtime/hd.h"

/* The three operations. */
enum { MN__IX_GATHER = 0, MN__IX_SCATTER = 1, MN__IX_SCATTER_ADD = 2 };

/* One gather or scatter ready to run: the iteration shape in row-major
 * order (dim 0 outermost), size-1 dims dropped, neighbours merged where
 * every operand allows (the order of positions is unchanged), at least one
 * dim; every stride in bytes. The "data" operand is src for a gather and dst
 * for a scatter: the index terms move it. */
typedef struct mn__index_geom_s {
  int op;    /* MN__IX_* */
  int dtype; /* mn_dtype */
  int item;  /* item bytes: 1, 2, 4, 8, 16 */
  int ndim;  /* 1 .. MN_MAX_DIMS */
  int n;     /* index operands, 1 .. MN__INDEX_MAX */
  int64_t numel;
  char *dst;
  const char *src;
  int64_t size[MN_MAX_DIMS];
  int64_t ds[MN_MAX_DIMS], ss[MN_MAX_DIMS];
  const char *idx[MN__INDEX_MAX];
  int idx64[MN__INDEX_MAX];             /* 1: int64 indices, 0: int32 */
  int64_t isize[MN__INDEX_MAX];         /* the indexed dim's size (negatives wrap by it) */
  int64_t istride[MN__INDEX_MAX];       /* the indexed dim's byte stride in the data operand */
  int64_t is[MN__INDEX_MAX][MN_MAX_DIMS]; /* byte strides of each index over the iteration dims */
} mn__index_geom_t;

/* The index at p (int32 or int64, any alignment), wrapped into [0, size). */
MN__HD int64_t mn__ix_load(const char *p, int is64, int64_t size) {
  int64_t v;
  if (is64) {
    memcpy(&v, p, 8);
  } else {
    int32_t w;
    memcpy(&w, p, 4);
    v = w;
  }
  return v < 0 ? v + size : v;
}

/* *d += *s for one element of dtype `dt`: integers wrap, bool ORs,
 * float16/bfloat16/float8 add in float32 and round as a cast does
 * (kernels/cast.h), float32/float64 add natively, complex per part.
 * al: both addresses are aligned to the item size (typed accesses in device
 * code, kernels/cast.h's MN__LOAD/MN__STORE); 0: any address. */
MN__HD void mn__ix_add_al(int dt, char *d, const char *s, int al) {
  switch (dt) {
    case MN_DTYPE_BOOL: {
      uint8_t a, b;
      MN__LOAD(uint8_t, a, d, al);
      MN__LOAD(uint8_t, b, s, al);
      a = (uint8_t)((a != 0) | (b != 0));
      MN__STORE(uint8_t, d, a, al);
      return;
    }
#define MN__IX_ADD_INT(DT, T)   \
  case DT: {                    \
    T a, b;                     \
    MN__LOAD(T, a, d, al);      \
    MN__LOAD(T, b, s, al);      \
    a = (T)(a + b);             \
    MN__STORE(T, d, a, al);     \
    return;                     \
  }
      MN__IX_ADD_INT(MN_DTYPE_UINT8, uint8_t)
      MN__IX_ADD_INT(MN_DTYPE_INT8, uint8_t)
      MN__IX_ADD_INT(MN_DTYPE_UINT16, uint16_t)
      MN__IX_ADD_INT(MN_DTYPE_INT16, uint16_t)
      MN__IX_ADD_INT(MN_DTYPE_UINT32, uint32_t)
      MN__IX_ADD_INT(MN_DTYPE_INT32, uint32_t)
      MN__IX_ADD_INT(MN_DTYPE_UINT64, uint64_t)
      MN__IX_ADD_INT(MN_DTYPE_INT64, uint64_t)
#undef MN__IX_ADD_INT
/* the narrow floats: each dtype row whose format is one (runtime/narrow_float.h) */
#define MN__IX_ADD_NARROW(A, SFX, VAL, NAME, SIZE, KIND, FMT, ...) MN__CAST_NF_CASE(MN__IX_ADD_NARROW_ROW, SFX, FMT)
#define MN__IX_ADD_NARROW_ROW(SFX, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) \
  case MN_DTYPE_##SFX: {                                                         \
    T a, b;                                                                      \
    MN__LOAD(T, a, d, al);                                                       \
    MN__LOAD(T, b, s, al);                                                       \
    a = (T)FROM_F32(MN__FADD(TO_F32(a), TO_F32(b)));                             \
    MN__STORE(T, d, a, al);                                                      \
    return;                                                                      \
  }
      MN_DTYPE_TABLE_PLAIN(MN__IX_ADD_NARROW, ~)
#undef MN__IX_ADD_NARROW_ROW
#undef MN__IX_ADD_NARROW
    case MN_DTYPE_FLOAT32: {
      float a, b;
      MN__LOAD(float, a, d, al);
      MN__LOAD(float, b, s, al);
      a = MN__FADD(a, b);
      MN__STORE(float, d, a, al);
      return;
    }
    case MN_DTYPE_FLOAT64: {
      double a, b;
      MN__LOAD(double, a, d, al);
      MN__LOAD(double, b, s, al);
      a = MN__DADD(a, b);
      MN__STORE(double, d, a, al);
      return;
    }
    case MN_DTYPE_COMPLEX64: {
      mn__c64_t a, b;
      MN__LOAD(mn__c64_t, a, d, al);
      MN__LOAD(mn__c64_t, b, s, al);
      a.v[0] = MN__FADD(a.v[0], b.v[0]);
      a.v[1] = MN__FADD(a.v[1], b.v[1]);
      MN__STORE(mn__c64_t, d, a, al);
      return;
    }
    case MN_DTYPE_COMPLEX128: {
      mn__c128_t a, b;
      MN__LOAD(mn__c128_t, a, d, al);
      MN__LOAD(mn__c128_t, b, s, al);
      a.v[0] = MN__DADD(a.v[0], b.v[0]);
      a.v[1] = MN__DADD(a.v[1], b.v[1]);
      MN__STORE(mn__c128_t, d, a, al);
      return;
    }
    default: return; /* refused before any kernel runs (mn__ix_can_add) */
  }
}
MN__HD void mn__ix_add(int dt, char *d, const char *s) { mn__ix_add_al(dt, d, s, 0); }

/* Whether mn__ix_add knows the dtype. */
MN__HD int mn__ix_can_add(int dt) {
  switch (dt) {
    case MN_DTYPE_BOOL: case MN_DTYPE_UINT8: case MN_DTYPE_INT8: case MN_DTYPE_UINT16: case MN_DTYPE_INT16:
    case MN_DTYPE_UINT32: case MN_DTYPE_INT32: case MN_DTYPE_UINT64: case MN_DTYPE_INT64: case MN_DTYPE_FLOAT16:
    case MN_DTYPE_BFLOAT16: case MN_DTYPE_FLOAT8_E4M3FN: case MN_DTYPE_FLOAT8_E5M2: case MN_DTYPE_FLOAT32:
    case MN_DTYPE_COMPLEX64: case MN_DTYPE_FLOAT64: case MN_DTYPE_COMPLEX128: return 1;
    default: return 0;
  }
}

#endif /* MNEMO_KERNELS_INDEX_KERN_H */
