/* tests/test_plan.c: the copy planner (kernels/plan.h) on its own: dropped
 * and merged dims, sorting by dst strides, path, vector width, 64-bit index;
 * the one overlap check (kernels/ops.h), with ATen's answers; and the CUDA
 * kernels' magic-number division and offsets walk (kernels/divmod.h), exact
 * up to 2^31-1. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/divmod.h"
#include "kernels/ops.h"
#include "kernels/plan.h"
#include "mn_test.h"
#include "mnemo/mnemo.h"

static mn__strided_t op(void *data, int ndim, const int64_t *sizes, const int64_t *strides) {
  mn__strided_t s;
  memset(&s, 0, sizeof s);
  s.data = data;
  s.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    s.sizes[d] = sizes[d];
    s.strides[d] = strides[d];
  }
  return s;
}

static _Alignas(64) char buf[64];

MN_TEST(contiguous_merges_to_one_dim) {
  int64_t sz[4] = {2, 3, 1, 5}, st[4] = {15, 5, 5, 1};
  mn__strided_t d = op(buf, 4, sz, st), s = op(buf + 32, 4, sz, st);
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.kind == MN__PLAN_CONTIG);
  MN_CHECK(p.ndim == 1 && p.sizes[0] == 30 && p.numel == 30);
  MN_CHECK(p.vec == 4); /* 16-byte aligned both sides */
  MN_CHECK(!p.index64);
  mn__plan_make(&p, &d, MN_DTYPE_BFLOAT16, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.kind == MN__PLAN_CONTIG && p.vec == 4); /* 4 x 4 src bytes, 4 x 2 dst */
  d.data = buf + 2;                                  /* dst 2-byte aligned only */
  mn__plan_make(&p, &d, MN_DTYPE_BFLOAT16, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.vec == 1);
  d.data = buf + 4;
  s.data = buf + 36; /* 4-byte aligned only: 1 float per access */
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.vec == 1);
  d.data = buf + 8;
  s.data = buf + 40;
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.vec == 2);
}

MN_TEST(transpose_2d_and_permutes) {
  int64_t sz[2] = {64, 48}, ds[2] = {48, 1}, ss[2] = {1, 64};
  mn__strided_t d = op(buf, 2, sz, ds), s = op(buf, 2, sz, ss);
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.kind == MN__PLAN_TRANSPOSE);
  MN_CHECK(p.ndim == 2 && p.sizes[0] == 48 && p.dst_strides[0] == 1 && p.src_strides[0] == 64);
  MN_CHECK(p.tdim == 1 && p.src_strides[1] == 1 && p.dst_strides[1] == 48);
  /* NCHW (src, contiguous) -> NHWC (dst): N=2 C=3 H=4 W=5, dst strides (60, 1, 15, 3) */
  int64_t s4[4] = {2, 3, 4, 5}, dnhwc[4] = {60, 1, 15, 3}, snchw[4] = {60, 20, 5, 1};
  d = op(buf, 4, s4, dnhwc);
  s = op(buf, 4, s4, snchw);
  mn__plan_make(&p, &d, MN_DTYPE_BFLOAT16, &s, MN_DTYPE_BFLOAT16);
  MN_CHECK(p.kind == MN__PLAN_TRANSPOSE);
  /* C innermost in dst; H and W merge (contiguous in both); N outermost */
  MN_CHECK(p.ndim == 3 && p.sizes[0] == 3 && p.sizes[1] == 20 && p.sizes[2] == 2);
  MN_CHECK(p.tdim == 1 && p.src_strides[1] == 1 && p.dst_strides[1] == 3);
  /* (B, H, S, D) -> swap last two: dst contiguous, src strides of the swapped view */
  int64_t sa[4] = {2, 4, 8, 16}, da[4] = {512, 128, 16, 1}, sb[4] = {512, 128, 1, 8};
  d = op(buf, 4, sa, da);
  s = op(buf, 4, sa, sb);
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT16, &s, MN_DTYPE_FLOAT16);
  MN_CHECK(p.kind == MN__PLAN_TRANSPOSE && p.ndim == 3 && p.sizes[2] == 8); /* B and H merge */
}

MN_TEST(generic_broadcast_fill_and_single) {
  int64_t sz[2] = {6, 10}, ds[2] = {10, 1}, ss[2] = {60, 3}; /* stepped src */
  mn__strided_t d = op(buf, 2, sz, ds), s = op(buf, 2, sz, ss);
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_INT8);
  MN_CHECK(p.kind == MN__PLAN_GENERIC && p.ndim == 2 && p.sizes[0] == 10 && p.src_strides[0] == 3);
  int64_t bs[2] = {0, 1};
  s = op(buf, 2, sz, bs);
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.kind == MN__PLAN_BROADCAST && p.ndim == 2);
  int64_t zs[2] = {0, 0};
  s = op(buf, 2, sz, zs);
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_INT8);
  MN_CHECK(p.kind == MN__PLAN_BROADCAST && p.ndim == 1 && p.sizes[0] == 60 && p.src_strides[0] == 0);
  mn__plan_make(&p, &d, MN_DTYPE_INT16, NULL, MN_DTYPE_INT16);
  MN_CHECK(p.kind == MN__PLAN_FILL && p.ndim == 1 && p.sizes[0] == 60 && p.dst_strides[0] == 1);
  int64_t stepped[2] = {20, 2};
  d = op(buf, 2, sz, stepped);
  mn__plan_make(&p, &d, MN_DTYPE_INT16, NULL, MN_DTYPE_INT16);
  MN_CHECK(p.kind == MN__PLAN_FILL && p.ndim == 1 && p.dst_strides[0] == 2); /* merged: 20 == 2 * 10 */
  /* 0-d and all-size-1 shapes: one element, contiguous */
  d = op(buf, 0, NULL, NULL);
  s = op(buf + 8, 0, NULL, NULL);
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT64, &s, MN_DTYPE_INT32);
  MN_CHECK(p.kind == MN__PLAN_CONTIG && p.ndim == 1 && p.numel == 1);
  int64_t ones[3] = {1, 1, 1}, odd[3] = {7, 3, 9};
  d = op(buf, 3, ones, odd);
  s = op(buf, 3, ones, odd);
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT64, &s, MN_DTYPE_INT32);
  MN_CHECK(p.kind == MN__PLAN_CONTIG && p.numel == 1);
}

MN_TEST(dims_sorted_by_dst_strides) {
  /* dst is a (2,0,1) permutation of its storage; src contiguous */
  int64_t sz[3] = {3, 4, 5}, ds[3] = {1, 15, 3}, ss[3] = {20, 5, 1};
  mn__strided_t d = op(buf, 3, sz, ds), s = op(buf, 3, sz, ss);
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_UINT8, &s, MN_DTYPE_UINT8);
  /* sorted: (3; 1, 20), (5; 3, 1), (4; 15, 5); the last two merge */
  MN_CHECK(p.ndim == 2);
  MN_CHECK(p.dst_strides[0] == 1 && p.dst_strides[1] == 3 && p.src_strides[1] == 1);
  MN_CHECK(p.sizes[0] == 3 && p.sizes[1] == 20);
  MN_CHECK(p.kind == MN__PLAN_TRANSPOSE && p.tdim == 1);
}

MN_TEST(huge_views_need_64bit_index) {
  /* planned, never run: 2^31 + 5 elements contiguous; a 3 x 2^30 transpose */
  int64_t sz[1] = {(INT64_C(1) << 31) + 5}, st[1] = {1};
  mn__strided_t d = op((void *)(uintptr_t)0x10000, 1, sz, st), s = op((void *)(uintptr_t)0x1000000000, 1, sz, st);
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_INT8);
  MN_CHECK(p.kind == MN__PLAN_CONTIG && p.index64 && p.numel == sz[0] && p.vec == 16);
  int64_t small[1] = {INT64_C(1) << 29};
  d.sizes[0] = s.sizes[0] = small[0];
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_INT8);
  MN_CHECK(!p.index64);
  /* 2^29 float32 = 2^31 bytes: byte offsets no longer fit in 31 bits */
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  MN_CHECK(p.index64);
  int64_t tz[2] = {3, INT64_C(1) << 30}, tds[2] = {INT64_C(1) << 30, 1}, tss[2] = {1, 3};
  d = op((void *)(uintptr_t)0x10000, 2, tz, tds);
  s = op((void *)(uintptr_t)0x1000000000, 2, tz, tss);
  mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_INT8);
  MN_CHECK(p.kind == MN__PLAN_TRANSPOSE && p.index64 && p.numel == 3 * (INT64_C(1) << 30));
}

/* The planner's first step in both orders: the strided CPU copy keeps
 * row-major order (its element ranges are row-major), plans sort by dst. */
MN_TEST(dims_in_row_major_or_sorted_order) {
  /* dst (2,0,1)-permuted, src contiguous, one size-1 dim */
  int64_t sz[4] = {3, 1, 4, 5}, ds[4] = {1, 60, 15, 3}, ss[4] = {20, 20, 5, 1};
  mn__strided_t d = op(buf, 4, sz, ds), s = op(buf, 4, sz, ss);
  int64_t size[MN_MAX_DIMS], dst[MN_MAX_DIMS], src[MN_MAX_DIMS];
  int n = mn__plan_dims(&d, &s, false, size, dst, src);
  /* row-major, innermost first: dims 3 and 2 merge (both sides continue), then dim 0; dim 1 dropped */
  MN_CHECK(n == 2 && size[0] == 20 && size[1] == 3);
  MN_CHECK(dst[0] == 3 && dst[1] == 1 && src[0] == 1 && src[1] == 20);
  n = mn__plan_dims(&d, &s, true, size, dst, src);
  MN_CHECK(n == 2 && size[0] == 3 && size[1] == 20 && dst[0] == 1 && dst[1] == 3 && src[0] == 20 && src[1] == 1);
  /* contiguous on both sides merges to one dim either way; a fill has src strides 0 */
  int64_t cs[4] = {20, 20, 5, 1};
  mn__strided_t c = op(buf, 4, sz, cs);
  MN_CHECK(mn__plan_dims(&c, &c, false, size, dst, src) == 1 && size[0] == 60 && dst[0] == 1 && src[0] == 1);
  MN_CHECK(mn__plan_dims(&c, NULL, false, size, dst, src) == 1 && size[0] == 60 && src[0] == 0);
  /* a single element is one contiguous dim */
  int64_t one[2] = {1, 1}, os[2] = {7, 9};
  mn__strided_t e = op(buf, 2, one, os);
  MN_CHECK(mn__plan_dims(&e, &e, false, size, dst, src) == 1 && size[0] == 1 && dst[0] == 1 && src[0] == 1);
}

MN_TEST(overlap_status_as_aten) {
  static _Alignas(64) char mem[4096];
  int64_t sz[2] = {4, 8}, row[2] = {8, 1}, col[2] = {1, 8}, gap[2] = {16, 1};
  mn__strided_t a = op(mem, 2, sz, row), b = op(mem + 512, 2, sz, row);
  MN_CHECK(mn__strided_overlap(&a, 4, &b, 4) == MN__OVERLAP_NO);
  MN_CHECK(mn__strided_overlap(&a, 4, &a, 4) == MN__OVERLAP_FULL);
  mn__strided_t shifted = op(mem + 4, 2, sz, row);
  MN_CHECK(mn__strided_overlap(&a, 4, &shifted, 4) == MN__OVERLAP_PARTIAL);
  /* the same bytes in another order is a partial overlap in ATen */
  int64_t tsz[2] = {8, 4};
  mn__strided_t t = op(mem, 2, tsz, col);
  MN_CHECK(mn__strided_overlap(&a, 4, &t, 4) == MN__OVERLAP_PARTIAL);
  /* an in-place cast between equal item sizes: the same elements */
  MN_CHECK(mn__strided_overlap(&a, 4, &a, 4) == MN__OVERLAP_FULL);
  /* not dense and meeting: too hard to tell; but the very same operand is full */
  mn__strided_t g = op(mem, 2, sz, gap), g2 = op(mem + 4, 2, sz, gap);
  MN_CHECK(!mn__strided_is_dense(&g) && mn__strided_is_dense(&a) && mn__strided_is_dense(&t));
  MN_CHECK(mn__strided_overlap(&g, 4, &g2, 4) == MN__OVERLAP_TOO_HARD);
  MN_CHECK(mn__strided_overlap(&g, 4, &g, 4) == MN__OVERLAP_FULL);
  int64_t zero[2] = {0, 8};
  mn__strided_t empty = op(mem, 2, zero, row);
  MN_CHECK(mn__strided_overlap(&a, 4, &empty, 4) == MN__OVERLAP_NO);
}

/* ---- kernels/divmod.h ---------------------------------------------------------- */

/* Counts n in [lo, hi] (clamped to [0, 2^31-1]) whose quotient by v is wrong. */
static int64_t div32_bad(mn__div32_t v, int64_t lo, int64_t hi) {
  int64_t bad = 0;
  if (lo < 0) lo = 0;
  if (hi > (int64_t)MN__DIV32_MAX) hi = MN__DIV32_MAX;
  for (int64_t n = lo; n <= hi; n++) bad += mn__div32(v, (uint32_t)n) != (uint32_t)(n / v.d);
  return bad;
}

/* The quotient is exact for every divisor up to 2^31-1 (the size the old
 * `< INT32_MAX` guard replaced by 1) around every edge: small n, multiples of
 * d and their neighbours, and the largest n. */
MN_TEST(div32_exact_near_the_edges) {
  const int64_t top = MN__DIV32_MAX;
  static const int64_t ds[] = {1, 2, 3, 5, 7, 10, 641, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1, 0x55555555,
                               (int64_t)1 << 30, ((int64_t)1 << 30) + 1, 0x7FFFFFFD, 0x7FFFFFFE, 0x7FFFFFFF};
  int64_t bad = 0, checked = 0;
  for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
    const int64_t d = ds[k];
    mn__div32_t v = mn__div32_make((uint32_t)d);
    MN_CHECK(v.d == (uint32_t)d);
    bad += div32_bad(v, 0, 4096);
    bad += div32_bad(v, top - 4096, top);
    /* multiples of d: the first 64, the last 64 below 2^31, and some between */
    const int64_t kmax = top / d;
    for (int64_t q = 0; q <= kmax; q = q < 64 || q >= kmax - 64 ? q + 1 : q + (kmax - 128) / 61 + 1)
      bad += div32_bad(v, q * d - 3, q * d + 3);
    checked++;
  }
  /* every divisor near the small and large edges, against the n most likely to break them */
  for (int64_t d = 1; d <= 70000; d++) {
    mn__div32_t v = mn__div32_make((uint32_t)d);
    const int64_t kmax = top / d;
    bad += div32_bad(v, top - 2, top);
    bad += div32_bad(v, kmax * d - 1, kmax * d);
    bad += div32_bad(v, d - 1, d);
  }
  for (int64_t d = top - 70000; d <= top; d++) {
    mn__div32_t v = mn__div32_make((uint32_t)d);
    bad += div32_bad(v, d - 1, d);
    bad += div32_bad(v, top - 1, top);
    bad += div32_bad(v, 0, 1);
  }
  MN_CHECK(checked == (int64_t)(sizeof ds / sizeof ds[0]));
  MN_CHECK(bad == 0);
  if (bad) fprintf(stderr, "  %lld wrong quotients\n", (long long)bad);
}

/* Every size of a plan without index64 gets its exact divisor (2^31-1
 * included: a broadcast into 2^31-1 elements used to get divisor 1 and write
 * out of bounds), and the 32-bit walk gives the reference offsets. */
MN_TEST(offsets_setup_exact_divisors) {
  static const int64_t sizes[] = {1, 2, 3, 65535, 65537, (int64_t)1 << 30, 0x7FFFFFFE, 0x7FFFFFFF};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    MN_CHECK(mn__div32_of_size(sizes[k]).d == (uint32_t)sizes[k]);
  /* sizes of index64 plans are never divided in 32 bits */
  MN_CHECK(mn__div32_of_size((int64_t)1 << 31).d == 1 && mn__div32_of_size((int64_t)1 << 40).d == 1);
  MN_CHECK(mn__div32_of_size(0).d == 1);

  /* a broadcast of one byte into 2^31-1 bytes: 32-bit, one dim of 2^31-1 */
  int64_t n1[1] = {0x7FFFFFFF}, unit[1] = {1}, zero[1] = {0};
  mn__strided_t d = op(buf, 1, n1, unit), s = op(buf, 1, n1, zero);
  mn__plan_t p;
  mn__offcalc_t c;
  mn__plan_make(&p, &d, MN_DTYPE_UINT8, &s, MN_DTYPE_UINT8);
  MN_CHECK(p.kind == MN__PLAN_BROADCAST && !p.index64 && p.ndim == 1);
  mn__offcalc_of_plan(&p, &c);
  MN_CHECK(c.ndim == 1 && c.div[0].d == 0x7FFFFFFFu);
  int64_t bad = 0;
  for (uint32_t e = 0x7FFFFFFFu - 1000; e < 0x7FFFFFFFu; e++) {
    uint32_t od = 1, os = 1;
    mn__offcalc_offsets32(&c, e, &od, &os);
    bad += od != e || os != 0;
  }
  MN_CHECK(bad == 0);

  /* 2-d plans of (almost) 2^31-1 elements: transposed src, strided dst */
  static const int64_t shapes[][2] = {{3, 715827882}, {715827882, 3}, {46337, 46343}, {0x7FFFFFFF, 1}, {1, 2}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const int64_t r = shapes[k][0], m = shapes[k][1];
    int64_t sz[2] = {r, m}, row[2] = {m, 1}, col[2] = {1, r};
    d = op(buf, 2, sz, row);
    s = op(buf, 2, sz, col);
    mn__plan_make(&p, &d, MN_DTYPE_INT8, &s, MN_DTYPE_UINT8);
    MN_CHECK(!p.index64);
    mn__offcalc_of_plan(&p, &c);
    for (int j = 0; j < c.ndim; j++) MN_CHECK(c.div[j].d == (uint32_t)c.size[j] && c.size[j] == p.sizes[j]);
    /* element e of the plan (innermost first) against the obvious walk */
    const int64_t n = p.numel;
    for (int64_t e0 = 0; e0 < n; e0 += n > 4096 ? n / 1024 : 1) {
      for (int64_t e = e0; e < e0 + 3 && e < n; e++) {
        uint32_t od, os;
        mn__offcalc_offsets32(&c, (uint32_t)e, &od, &os);
        int64_t rest = e, wd = 0, ws = 0;
        for (int j = 0; j < p.ndim; j++) {
          wd += rest % p.sizes[j] * p.dst_strides[j];
          ws += rest % p.sizes[j] * p.src_strides[j];
          rest /= p.sizes[j];
        }
        bad += (int64_t)od != wd || (int64_t)os != ws;
      }
    }
    uint32_t od, os;
    mn__offcalc_offsets32(&c, (uint32_t)(n - 1), &od, &os);
    bad += (int64_t)od != (r - 1) * m + (m - 1) || (int64_t)os != (r - 1) + (m - 1) * r;
  }
  MN_CHECK(bad == 0);

  /* the random fill's row-major dims: exact divisors, merged neighbours, the end */
  int64_t rsz[3] = {2, 1, 0x3FFFFFFF}, rst[3] = {0x3FFFFFFF, 5, 1};
  mn__strided_t rd = op(buf, 3, rsz, rst);
  int64_t numel = 0, end = 0;
  mn__offcalc_of_rows(&rd, 1, &c, &numel, &end);
  MN_CHECK(c.ndim == 1 && c.size[0] == 0x7FFFFFFE && c.div[0].d == 0x7FFFFFFEu && c.ds[0] == 1);
  MN_CHECK(numel == 0x7FFFFFFE && end == 0x7FFFFFFE);
  int64_t tsz[2] = {3, 5}, tst[2] = {1, 3};
  rd = op(buf, 2, tsz, tst);
  mn__offcalc_of_rows(&rd, 4, &c, &numel, &end);
  MN_CHECK(c.ndim == 2 && c.size[0] == 5 && c.ds[0] == 12 && c.size[1] == 3 && c.ds[1] == 4);
  MN_CHECK(c.div[0].d == 5 && c.div[1].d == 3 && numel == 15 && end == 60);
}

int main(void) {
  MN_RUN(overlap_status_as_aten);
  MN_RUN(dims_in_row_major_or_sorted_order);
  MN_RUN(contiguous_merges_to_one_dim);
  MN_RUN(transpose_2d_and_permutes);
  MN_RUN(generic_broadcast_fill_and_single);
  MN_RUN(dims_sorted_by_dst_strides);
  MN_RUN(huge_views_need_64bit_index);
  MN_RUN(div32_exact_near_the_edges);
  MN_RUN(offsets_setup_exact_divisors);
  return mn_test_finish();
}
