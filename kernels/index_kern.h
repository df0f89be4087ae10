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
#include "kernels/hd.h"
#include "kernels/index.h"
#include "mnemo/dtype.h"

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

/* *d += *s for one element of dtype `dt` (d and s may be unaligned): integers
 * wrap, bool ORs, float16/bfloat16/float8 add in float32 and round as a cast
 * does (kernels/cast.h), float32/float64 add natively, complex per part. */
MN__HD void mn__ix_add(int dt, char *d, const char *s) {
  switch (dt) {
    case MN_DTYPE_BOOL: {
      uint8_t a, b;
      memcpy(&a, d, 1);
      memcpy(&b, s, 1);
      a = (uint8_t)((a != 0) | (b != 0));
      memcpy(d, &a, 1);
      return;
    }
#define MN__IX_ADD_INT(DT, T)   \
  case DT: {                    \
    T a, b;                     \
    memcpy(&a, d, sizeof a);    \
    memcpy(&b, s, sizeof b);    \
    a = (T)(a + b);             \
    memcpy(d, &a, sizeof a);    \
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
    case MN_DTYPE_FLOAT16: {
      uint16_t a, b;
      memcpy(&a, d, 2);
      memcpy(&b, s, 2);
      a = mn__f32_to_f16(MN__FADD(mn__f16_to_f32(a), mn__f16_to_f32(b)));
      memcpy(d, &a, 2);
      return;
    }
    case MN_DTYPE_BFLOAT16: {
      uint16_t a, b;
      memcpy(&a, d, 2);
      memcpy(&b, s, 2);
      a = mn__f32_to_bf16(MN__FADD(mn__bf16_to_f32(a), mn__bf16_to_f32(b)));
      memcpy(d, &a, 2);
      return;
    }
    case MN_DTYPE_FLOAT8_E4M3FN: {
      uint8_t a, b;
      memcpy(&a, d, 1);
      memcpy(&b, s, 1);
      a = mn__f32_to_e4m3(MN__FADD(mn__e4m3_to_f32(a), mn__e4m3_to_f32(b)));
      memcpy(d, &a, 1);
      return;
    }
    case MN_DTYPE_FLOAT8_E5M2: {
      uint8_t a, b;
      memcpy(&a, d, 1);
      memcpy(&b, s, 1);
      a = mn__f32_to_e5m2(MN__FADD(mn__e5m2_to_f32(a), mn__e5m2_to_f32(b)));
      memcpy(d, &a, 1);
      return;
    }
    case MN_DTYPE_FLOAT32:
    case MN_DTYPE_COMPLEX64: {
      float a[2], b[2];
      const int parts = dt == MN_DTYPE_FLOAT32 ? 1 : 2;
      memcpy(a, d, 4 * (size_t)parts);
      memcpy(b, s, 4 * (size_t)parts);
      for (int k = 0; k < parts; k++) a[k] = MN__FADD(a[k], b[k]);
      memcpy(d, a, 4 * (size_t)parts);
      return;
    }
    case MN_DTYPE_FLOAT64:
    case MN_DTYPE_COMPLEX128: {
      double a[2], b[2];
      const int parts = dt == MN_DTYPE_FLOAT64 ? 1 : 2;
      memcpy(a, d, 8 * (size_t)parts);
      memcpy(b, s, 8 * (size_t)parts);
      for (int k = 0; k < parts; k++) a[k] = MN__DADD(a[k], b[k]);
      memcpy(d, a, 8 * (size_t)parts);
      return;
    }
    default: return; /* refused before any kernel runs (mn__ix_can_add) */
  }
}

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
