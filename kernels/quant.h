/* kernels/quant.h: per-tensor affine quantization of one element, shared by
 * the CPU executor (C) and the CUDA kernels (host+device), bit-exact with
 * torch 1.13's CPU kernels: quantize q = clamp(int64(float(zp) +
 * rint(x * (1.0f / float(scale)))), qmin, qmax) all in float32 (NaN, inf and
 * values past int64 give qmin, as x86's conversion does), dequantize
 * float(int32(q - zp)) * float(scale) (the difference wraps in int32). And
 * the contiguous quantize/dequantize job (mn__quant_t) that kernels.c runs.
 * Pure functions: thread-safe. */
#ifndef MNEMO_KERNELS_QUANT_H
#define MNEMO_KERNELS_QUANT_H

#include <math.h>
#include <stdint.h>

#include "kernels/cast.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One contiguous job: quantize float32 src into dtype dst (packed: element 0
 * in the low bits of byte 0), or dequantize dtype src into float32 dst. */
typedef struct mn__quant_s {
  int dequant;   /* 0: quantize, 1: dequantize */
  int dtype;     /* the quantized mn_dtype */
  int bits;      /* its bits per element */
  int64_t numel; /* elements */
  float scale, inv_scale, zpf;
  int64_t zp, qmin, qmax;
  void *dst;
  const void *src;
} mn__quant_t;

MN__HD int64_t mn__quant_val(float x, float inv_scale, float zpf, int64_t qmin, int64_t qmax) {
#if defined(__CUDA_ARCH__)
  float y = __fadd_rn(zpf, rintf(__fmul_rn(x, inv_scale)));
#else
  float y = zpf + rintf(x * inv_scale);
#endif
  int64_t r = (y == y && y < 0x1p63f && y >= -0x1p63f) ? (int64_t)y : INT64_MIN;
  return r < qmin ? qmin : r > qmax ? qmax : r;
}

MN__HD float mn__dequant_val(int64_t q, int64_t zp, float scale) {
  int32_t d = (int32_t)(uint32_t)((uint64_t)q - (uint64_t)zp);
  return MN__FMUL((float)d, scale);
}

/* The stored integer of element i of a contiguous quantized buffer. */
MN__HD int64_t mn__quant_load(const mn__quant_t *j, const void *p, int64_t i) {
  const unsigned char *b = (const unsigned char *)p;
  switch (j->dtype) {
    case MN_DTYPE_QINT8: return (int8_t)b[i];
    case MN_DTYPE_QINT32: {
      int32_t v;
      memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case MN_DTYPE_QUINT8: return b[i];
    default: {
      int64_t bit = i * j->bits;
      return (b[bit >> 3] >> (bit & 7)) & ((1 << j->bits) - 1);
    }
  }
}

/* Quantizes the elements of output unit u (one element, or one byte of a
 * packed dtype: 8 / bits elements, the missing tail elements zero). */
MN__HD void mn__quant_unit(const mn__quant_t *j, int64_t u) {
  const float *src = (const float *)j->src;
  unsigned char *d = (unsigned char *)j->dst;
  switch (j->dtype) {
    case MN_DTYPE_QINT8:
    case MN_DTYPE_QUINT8:
      d[u] = (unsigned char)mn__quant_val(src[u], j->inv_scale, j->zpf, j->qmin, j->qmax);
      return;
    case MN_DTYPE_QINT32: {
      int32_t v = (int32_t)mn__quant_val(src[u], j->inv_scale, j->zpf, j->qmin, j->qmax);
      memcpy(d + 4 * u, &v, 4);
      return;
    }
    default: {
      int per = 8 / j->bits;
      unsigned byte = 0;
      for (int k = 0; k < per; k++) {
        int64_t i = u * per + k;
        if (i >= j->numel) break;
        byte |= (unsigned)mn__quant_val(src[i], j->inv_scale, j->zpf, j->qmin, j->qmax) << (k * j->bits);
      }
      d[u] = (unsigned char)byte;
    }
  }
}

/* Dequantizes element u. */
MN__HD void mn__dequant_unit(const mn__quant_t *j, int64_t u) {
  ((float *)j->dst)[u] = mn__dequant_val(mn__quant_load(j, j->src, u), j->zp, j->scale);
}

/* The units of a job: elements, or output bytes when quantizing a packed dtype. */
MN__HD int64_t mn__quant_units(const mn__quant_t *j) {
  if (!j->dequant && j->bits < 8) return (j->numel * j->bits + 7) / 8;
  return j->numel;
}

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_QUANT_H */
