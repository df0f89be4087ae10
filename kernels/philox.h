/* kernels/philox.h: Philox4x32-10 and the random-fill element functions,
 * shared by the CPU executor and the CUDA kernels so that both give the same
 * bits (no FMA contraction, no libm). Pure inline functions: thread-safe. */
#ifndef MNEMO_KERNELS_PHILOX_H
#define MNEMO_KERNELS_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "kernels/cast.h"

/* Counter layout (docs/KERNELS.md): the key is the seed (low word, high word);
 * block c is the counter {lo(c), hi(c), 0, 0} with c = offset + i / 4 for the
 * 32-bit results of element i (lane i % 4): uniform float16/bfloat16/float32
 * and every normal. Uniform float64 takes two lanes: c = offset + i / 2,
 * lanes 2(i%2) and 2(i%2)+1. A fill of n elements uses ceil(n/4) blocks
 * (ceil(n/2) for uniform float64): the next fill's offset. */
typedef struct mn__philox_out_s {
  uint32_t v[4];
} mn__philox_out_t;

MN__HD void mn__mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

MN__HD mn__philox_out_t mn__philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                          uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, lo0, hi1, lo1;
    mn__mulhilo32(0xD2511F53u, c0, &hi0, &lo0);
    mn__mulhilo32(0xCD9E8D57u, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  mn__philox_out_t o;
  o.v[0] = c0;
  o.v[1] = c1;
  o.v[2] = c2;
  o.v[3] = c3;
  return o;
}

/* Block c of a fill with `seed`. */
MN__HD mn__philox_out_t mn__philox_block(uint64_t seed, uint64_t c) {
  return mn__philox4x32_10((uint32_t)c, (uint32_t)(c >> 32), 0u, 0u, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* [0, 1) with 24 bits; (0, 1] when `open_low`. */
MN__HD float mn__u01f(uint32_t x, int open_low) {
  return MN__FMUL((float)((x >> 8) + (open_low ? 1u : 0u)), 0x1p-24f);
}

/* [0, 1) with 53 bits from two words. */
MN__HD double mn__u01d(uint32_t a, uint32_t b) {
  return MN__DMUL(MN__DADD(MN__DMUL((double)(a >> 5), 67108864.0), (double)(b >> 6)), 0x1p-53);
}

/* ln(u) for u in (0, 1], float, from + * / only (a few ulp; the same bits everywhere). */
MN__HD float mn__logf_portable(float u) {
  uint32_t b = mn__f32_bits(u);
  int e = (int)((b >> 23) & 0xFFu) - 127;
  float m = mn__f32_of((b & 0x7FFFFFu) | 0x3F800000u); /* [1, 2) */
  if (m > 1.41421356f) {
    m = MN__FMUL(m, 0.5f);
    e += 1;
  }
  /* ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172 */
  float s = (m - 1.0f) / (m + 1.0f), s2 = MN__FMUL(s, s);
  float p = MN__FADD(MN__FMUL(s2, 0.11111111f), 0.14285715f);
  p = MN__FADD(MN__FMUL(s2, p), 0.2f);
  p = MN__FADD(MN__FMUL(s2, p), 0.33333334f);
  p = MN__FADD(MN__FMUL(s2, p), 1.0f);
  float lnm = MN__FMUL(MN__FMUL(2.0f, s), p);
  return MN__FADD(MN__FMUL((float)e, 0.6931472f), lnm);
}

/* cos and sin of 2*pi*u for u in [0, 1), float, from + * only. */
MN__HD void mn__sincos2pi_portable(float u, float *c, float *s) {
  float v = MN__FMUL(u, 4.0f);                /* exact */
  int q = (int)(v + 0.5f);                    /* nearest quadrant, 0..4 */
  float r = MN__FADD(v, -(float)q);           /* [-0.5, 0.5], exact */
  float x = MN__FMUL(r, 1.5707964f), x2 = MN__FMUL(x, x);
  float sp = MN__FADD(MN__FMUL(x2, 2.7557319e-6f), -1.9841270e-4f);
  sp = MN__FADD(MN__FMUL(x2, sp), 8.3333333e-3f);
  sp = MN__FADD(MN__FMUL(x2, sp), -1.6666667e-1f);
  float sn = MN__FADD(MN__FMUL(MN__FMUL(x, x2), sp), x);
  float cp = MN__FADD(MN__FMUL(x2, -2.7557319e-7f), 2.4801587e-5f);
  cp = MN__FADD(MN__FMUL(x2, cp), -1.3888889e-3f);
  cp = MN__FADD(MN__FMUL(x2, cp), 4.1666667e-2f);
  cp = MN__FADD(MN__FMUL(x2, cp), -0.5f);
  float cs = MN__FADD(MN__FMUL(x2, cp), 1.0f);
  switch (q & 3) {
    case 0: *c = cs; *s = sn; break;
    case 1: *c = -sn; *s = cs; break;
    case 2: *c = -cs; *s = -sn; break;
    default: *c = sn; *s = -cs; break;
  }
}

/* The four standard normals of one block (Box-Muller on lanes 0,1 and 2,3). */
MN__HD void mn__normal4(mn__philox_out_t o, float z[4]) {
  for (int k = 0; k < 2; k++) {
    float u1 = mn__u01f(o.v[2 * k], 1), u2 = mn__u01f(o.v[2 * k + 1], 0);
    float r = sqrtf(MN__FMUL(-2.0f, mn__logf_portable(u1)));
    float c, s;
    mn__sincos2pi_portable(u2, &c, &s);
    z[2 * k] = MN__FMUL(r, c);
    z[2 * k + 1] = MN__FMUL(r, s);
  }
}

/* z[l] with a constant index (a run-time index would put z in GPU local memory). */
MN__HD float mn__pick4(const float z[4], unsigned l) { return l == 0 ? z[0] : l == 1 ? z[1] : l == 2 ? z[2] : z[3]; }

/* Random-fill parameters: uniform [a, a + b) or normal mean a, std b. */
typedef struct mn__rand_params_s {
  uint64_t seed, offset;
  int normal;
  double a, b;  /* float64 results */
  float af, bf; /* narrower results */
} mn__rand_params_t;

/* Elements one Philox block serves: 2 for uniform float64 (two words each),
 * else 4. Element i lies in block offset + i / per, lane i % per. */
MN__HD unsigned mn__rand_per_block(int dtype, int normal) { return dtype == MN_DTYPE_FLOAT64 && !normal ? 2u : 4u; }

/* The value of lane l of block o as `dtype`'s bits (the low itemsize bytes of
 * the result: float16, bfloat16, float32 or float64). z holds o's four
 * normals (mn__normal4) when rp->normal and is not read otherwise, so that a
 * caller serving a whole block computes the Box-Muller pairs once. */
MN__HD uint64_t mn__rand_lane_bits(const mn__rand_params_t *rp, int dtype, mn__philox_out_t o, const float z[4],
                                   unsigned l) {
  if (dtype == MN_DTYPE_FLOAT64) {
    double x;
    if (rp->normal)
      x = MN__DADD(MN__DMUL(rp->b, (double)mn__pick4(z, l)), rp->a);
    else
      x = MN__DADD(MN__DMUL(rp->b, mn__u01d(l ? o.v[2] : o.v[0], l ? o.v[3] : o.v[1])), rp->a);
    return mn__f64_bits(x);
  }
  float f;
  if (rp->normal) {
    f = MN__FADD(MN__FMUL(rp->bf, mn__pick4(z, l)), rp->af);
  } else {
    uint32_t w = l == 0 ? o.v[0] : l == 1 ? o.v[1] : l == 2 ? o.v[2] : o.v[3];
    f = MN__FADD(MN__FMUL(rp->bf, mn__u01f(w, 0)), rp->af);
  }
  if (dtype == MN_DTYPE_FLOAT32) return mn__f32_bits(f);
  return dtype == MN_DTYPE_FLOAT16 ? mn__f32_to_f16(f) : mn__f32_to_bf16(f);
}

/* Element i (row-major index) of a random fill, written at p as `dtype`
 * (float16, bfloat16, float32 or float64): the one-element form of the above. */
MN__HD void mn__rand_elem(const mn__rand_params_t *rp, int dtype, uint64_t i, void *p) {
  const unsigned per = mn__rand_per_block(dtype, rp->normal);
  mn__philox_out_t o = mn__philox_block(rp->seed, rp->offset + i / per);
  float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (rp->normal) mn__normal4(o, z);
  uint64_t bits = mn__rand_lane_bits(rp, dtype, o, z, (unsigned)(i % per));
  if (dtype == MN_DTYPE_FLOAT64) {
    memcpy(p, &bits, 8);
  } else if (dtype == MN_DTYPE_FLOAT32) {
    uint32_t w = (uint32_t)bits;
    memcpy(p, &w, 4);
  } else {
    uint16_t h = (uint16_t)bits;
    memcpy(p, &h, 2);
  }
}

#endif /* MNEMO_KERNELS_PHILOX_H */
