/* kernels/divmod.h: division by a fixed divisor with one multiply-high, an
 * add and a shift (Granlund-Montgomery), and the element -> byte offsets walk
 * of the CUDA kernels' 32-bit index variants built on it. Host+device (MN__HD),
 * so the CPU tests check exactly the arithmetic the kernels run. The offsets
 * setup of a plan is kernels/plan.c's mn__offcalc_of_plan. Pure inline
 * functions: thread-safe. */
#ifndef MNEMO_KERNELS_DIVMOD_H
#define MNEMO_KERNELS_DIVMOD_H

#include <stdint.h>

#include "mnemo/dtype.h"
#include "runtime/hd.h"

/* n / d for every d in [1, 2^31) and n in [0, 2^31): with s = ceil(log2 d)
 * and m = floor(2^32 (2^s - d) / d) + 1 (< 2^32), q = (mulhi(n, m) + n) >> s.
 * d = 2^31 and above does not fit (m would need 33 bits): such a size only
 * occurs in plans with index64 set, which never divide in 32 bits. */
typedef struct mn__div32_s {
  uint32_t d, m, s;
} mn__div32_t;

/* Largest divisor (and dividend) the 32-bit division takes. */
#define MN__DIV32_MAX UINT32_C(0x7FFFFFFF)

/* pre: 1 <= d <= MN__DIV32_MAX. */
MN__HD mn__div32_t mn__div32_make(uint32_t d) {
  mn__div32_t v;
  v.d = d;
  v.s = 0;
  while ((UINT64_C(1) << v.s) < d) v.s++;
  v.m = (uint32_t)(((UINT64_C(1) << 32) * ((UINT64_C(1) << v.s) - d)) / d + 1);
  return v;
}

/* pre: n <= MN__DIV32_MAX. */
MN__HD uint32_t mn__div32(mn__div32_t v, uint32_t n) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(n, v.m);
#else
  const uint32_t hi = (uint32_t)(((uint64_t)n * v.m) >> 32);
#endif
  return (uint32_t)(((uint64_t)hi + n) >> v.s);
}

/* The divisor of a dim of `size` elements: exact for every size the 32-bit
 * division takes (1 .. 2^31-1); 1 for the others (sizes of index64 plans,
 * whose kernels divide in 64 bits). */
MN__HD mn__div32_t mn__div32_of_size(int64_t size) {
  return mn__div32_make(size >= 1 && size <= (int64_t)MN__DIV32_MAX ? (uint32_t)size : 1u);
}

/* Byte offsets of element e (row-major over the dims, innermost first) in
 * dst (ds) and src (ss). */
typedef struct mn__offcalc_s {
  int ndim;
  mn__div32_t div[MN_MAX_DIMS];
  int64_t size[MN_MAX_DIMS];
  int64_t ds[MN_MAX_DIMS], ss[MN_MAX_DIMS]; /* bytes */
} mn__offcalc_t;

/* The 32-bit walk. pre: every size <= MN__DIV32_MAX, e < the product of the
 * sizes, and every offset < 2^32 (the plan has no index64). */
MN__HD void mn__offcalc_offsets32(const mn__offcalc_t *c, uint32_t e, uint32_t *od, uint32_t *os) {
  uint32_t d = 0, s = 0;
  for (int k = 0; k < c->ndim; k++) {
    const uint32_t q = mn__div32(c->div[k], e), r = e - q * c->div[k].d;
    d += r * (uint32_t)c->ds[k];
    s += r * (uint32_t)c->ss[k];
    e = q;
  }
  *od = d;
  *os = s;
}

#endif /* MNEMO_KERNELS_DIVMOD_H */
