/* tests/test_kernels_emu_cases.h: kernel cases the shared matrix
 * (tests/test_kernels_cases.h, included first) lacks, found by the line
 * coverage of the CUDA kernels under the launch emulation
 * (scripts/emu_coverage.sh):
 *   - random fills of dense views at 16-byte aligned addresses (the shared
 *     random cases all start one element in, or are strided), which take the
 *     vectorized stores of the Philox kernel: public API, any device;
 *   - quantize / dequantize / int_repr against the CPU's results, bit for
 *     bit (the quant kernel): public API, any device;
 *   - the 64-bit index kernels (an operand reaching past 2^31 bytes), the
 *     executors' refusals of plans they have no kernel for, bad arguments and
 *     failed launches/copies: these call the CUDA entry points
 *     (kernels/cuda_kernels.h) on host memory, so they run only under the
 *     emulation (tests/test_kernels_emu.c), never on a real device.
 * Threading: the test's main thread. */
#ifndef MNEMO_TESTS_KERNELS_EMU_CASES_H
#define MNEMO_TESTS_KERNELS_EMU_CASES_H

#include <sys/mman.h>

#include "cuda_emu/mn_emu.h"
#include "kernels/cuda_kernels.h"
#include "kernels/plan.h"
#include "test_kernels_cases.h"

/* ---- any device ------------------------------------------------------------ */

/* Dense random fills from the allocator (aligned): whole 16-byte vector stores
 * and the scalar tail, every dtype, uniform and normal. */
MN_TEST(random_fill_dense_aligned) {
  static const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_FLOAT16, MN_DTYPE_BFLOAT16};
  static const int64_t lens[] = {1, 3, 4, 7, 8, 1001, 4099};
  const kc_layout dense = {{0}, {1}, 0, 0};
  for (size_t k = 0; k < 4; k++)
    for (size_t n = 0; n < sizeof lens / sizeof lens[0]; n++)
      for (int normal = 0; normal < 2; normal++) {
        kc_buf d;
        if (kc_make(&d, dts[k], 1, &lens[n], &dense)) {
          if (normal)
            MN_CHECK_OK(mn_kernel_random_normal(kc_stream, d.view, 77, 5, 1.0, 2.0));
          else
            MN_CHECK_OK(mn_kernel_random_uniform(kc_stream, d.view, 77, 5, -1.0, 3.0));
          kc_download(&d, d.host);
          int64_t bad = 0;
          for (int64_t i = 0; i < lens[n]; i++) {
            double want = kc_random_host(dts[k], normal, 77, 5, (uint64_t)i);
            mn_scalar_t got;
            MN_CHECK_OK(mn_scalar_from_bytes(dts[k], d.host + (size_t)i * mn_dtype_itemsize(dts[k]), &got));
            bad += memcmp(&want, &got.v.f, sizeof want) != 0;
          }
          MN_CHECK(bad == 0);
          if (bad)
            fprintf(stderr, "  dense random %s n=%lld normal=%d: %lld differ\n", mn_dtype_name(dts[k]),
                    (long long)lens[n], normal, (long long)bad);
        }
        kc_free(&d);
      }
}

/* quantize / dequantize through the device's kernels (the emulated CUDA quant
 * kernel under the emulation) against the same calls on the CPU, bit for bit:
 * random values with halves (rounding ties), NaN, infinities and huge values,
 * lengths with packed tails, every quantized dtype. */
static mn_view_t *ke_to(const mn_view_t *v, mn_device_t dev) {
  mn_view_t *c = NULL;
  MN_CHECK_OK(mn_view_to(v, dev, mn_view_dtype(v), false, kc_stream, &c));
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  return c;
}

MN_TEST(quantize_dequantize_match_cpu) {
  static const mn_dtype dts[] = {MN_DTYPE_QINT8, MN_DTYPE_QUINT8, MN_DTYPE_QINT32, MN_DTYPE_QUINT4X2,
                                 MN_DTYPE_QUINT2X4};
  static const double scales[] = {0.5, 0.1, 1e-3, 3.0};
  static const int64_t lens[] = {1, 3, 7, 1001, 4099};
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int64_t n = lens[li];
    mn_view_t *xc = NULL;
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &n, &xc));
    if (!xc) return;
    float *x = mn_view_data(xc);
    for (int64_t i = 0; i < n; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const unsigned k = (unsigned)(r >> 59);
      const double u = (double)(r >> 11) / 9007199254740992.0;
      x[i] = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY : k == 3 ? 1e30f
             : k < 12 ? (float)(0.5 * (double)(int64_t)((u - 0.5) * 600)) /* halves: ties */
                      : (float)((u - 0.5) * 400.0);
    }
    mn_view_t *xd = ke_to(xc, kc_dev);
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
      for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
        int64_t lo = 0, hi = 0;
        MN_CHECK_OK(mn_dtype_quant_range(dts[di], &lo, &hi));
        const int64_t zp = si % 2 ? hi : lo + (hi - lo) / 3;
        mn_view_t *q[2] = {NULL, NULL}, *dq[2] = {NULL, NULL}, *ir[2] = {NULL, NULL};
        const mn_view_t *src[2] = {xc, xd};
        for (int side = 0; side < 2; side++) {
          mn_stream_t *str = side ? kc_stream : NULL; /* the CPU's runs at once */
          MN_CHECK_OK(mn_view_quantize_per_tensor(src[side], scales[si], zp, dts[di], str, &q[side]));
          if (!q[side]) continue;
          MN_CHECK_OK(mn_view_dequantize(q[side], str, &dq[side]));
          MN_CHECK_OK(mn_view_int_repr(q[side], str, &ir[side]));
        }
        MN_CHECK_OK(mn_stream_synchronize(kc_stream));
        if (q[0] && q[1] && dq[0] && dq[1] && ir[0] && ir[1]) {
          mn_view_t *dqh = ke_to(dq[1], mn_device_cpu()), *irh = ke_to(ir[1], mn_device_cpu());
          const bool same_ir = mn_view_nbytes(irh) == mn_view_nbytes(ir[0]) &&
                               memcmp(mn_view_data(irh), mn_view_data(ir[0]), mn_view_nbytes(irh)) == 0;
          const bool same_dq = mn_view_nbytes(dqh) == mn_view_nbytes(dq[0]) &&
                               memcmp(mn_view_data(dqh), mn_view_data(dq[0]), mn_view_nbytes(dqh)) == 0;
          MN_CHECK(same_ir && same_dq);
          if ((!same_ir || !same_dq) && kc_failures_reported++ < 10)
            fprintf(stderr, "  %s n %lld scale %g zp %lld: int_repr %s, dequantize %s\n", mn_dtype_name(dts[di]),
                    (long long)n, scales[si], (long long)zp, same_ir ? "same" : "DIFFERS",
                    same_dq ? "same" : "DIFFERS");
          mn_view_destroy(dqh);
          mn_view_destroy(irh);
        }
        for (int side = 0; side < 2; side++) {
          mn_view_destroy(q[side]);
          mn_view_destroy(dq[side]);
          mn_view_destroy(ir[side]);
        }
      }
    mn_view_destroy(xd);
    mn_view_destroy(xc);
  }
}

/* ---- the CUDA entry points on host memory: the emulation only ------------- */

enum { KE_ROWS = 3, KE_COLS = 5 };
#define KE_ROW_BYTES ((int64_t)1 << 30) /* rows 1 GiB apart: the last ends past 2^31 */

/* A 3 x 5 operand whose rows lie 1 GiB (+ one item) apart in `region` (at
 * `shift` bytes): its byte extent passes 2^31, the 64-bit index case. */
static mn__strided_t ke_far(char *region, size_t item, size_t shift) {
  mn__strided_t s;
  memset(&s, 0, sizeof s);
  s.data = region + shift;
  s.ndim = 2;
  s.sizes[0] = KE_ROWS;
  s.sizes[1] = KE_COLS;
  s.strides[0] = KE_ROW_BYTES / (int64_t)item + 1;
  s.strides[1] = 1;
  return s;
}

static char *ke_elem(const mn__strided_t *s, size_t item, int64_t i, int64_t j) {
  return s->data + (i * s->strides[0] + j * s->strides[1]) * (int64_t)item;
}

/* Copies, casts and fills (aligned and byte-wise) into a far operand, then
 * random fills of it: the 64-bit index variants of the generic and random
 * kernels, element for element against the reference. The region is reserved,
 * not committed: only the pages touched cost memory. */
MN_TEST(index64_kernels) {
  const size_t region_bytes = (size_t)KE_ROW_BYTES * KE_ROWS + 4096;
  char *region = mmap(NULL, region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  MN_CHECK(region != MAP_FAILED);
  if (region == MAP_FAILED) return;
  static const struct {
    mn_dtype d, s;
    size_t shift; /* dst's byte offset in the region: 1 makes it misaligned */
    bool fill;
  } ops[] = {
      {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT32, 0, true},  {MN_DTYPE_INT16, MN_DTYPE_INT16, 0, false},
      {MN_DTYPE_FLOAT16, MN_DTYPE_FLOAT32, 0, false}, {MN_DTYPE_FLOAT64, MN_DTYPE_INT8, 1, false},
      {MN_DTYPE_INT32, MN_DTYPE_INT32, 1, true},      {MN_DTYPE_UINT8, MN_DTYPE_UINT8, 0, false},
  };
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    const size_t di = mn_dtype_itemsize(ops[k].d), si = mn_dtype_itemsize(ops[k].s);
    for (int64_t r = 0; r < KE_ROWS; r++) memset(region + r * KE_ROW_BYTES, 0, 256); /* earlier ops' rows */
    mn__strided_t dst = ke_far(region, di, ops[k].shift);
    unsigned char src_bytes[KE_ROWS * KE_COLS * 8], pattern[16];
    mn_test_fill_random(src_bytes, sizeof src_bytes);
    mn_test_fill_random(pattern, sizeof pattern);
    if (ops[k].s == MN_DTYPE_FLOAT32) /* finite floats: casts of NaN payloads are not the point here */
      for (int e = 0; e < KE_ROWS * KE_COLS; e++) {
        float f = (float)(e * 3 - 20) / 7.0f;
        memcpy(src_bytes + e * 4, &f, 4);
      }
    mn__strided_t src;
    memset(&src, 0, sizeof src);
    src.data = (char *)src_bytes;
    src.ndim = 2;
    src.sizes[0] = KE_ROWS;
    src.sizes[1] = KE_COLS;
    src.strides[0] = KE_COLS;
    src.strides[1] = 1;
    mn__plan_t plan;
    mn__plan_make(&plan, &dst, ops[k].d, ops[k].fill ? NULL : &src, ops[k].fill ? ops[k].d : ops[k].s);
    MN_CHECK(plan.index64);
    MN_CHECK_OK(mn__cuda_exec(0, NULL, &plan, ops[k].fill ? pattern : NULL));
    int64_t bad = 0;
    for (int64_t i = 0; i < KE_ROWS; i++)
      for (int64_t j = 0; j < KE_COLS; j++) {
        unsigned char want[16];
        if (ops[k].fill)
          memcpy(want, pattern, di);
        else
          mn__ref_cast_element(want, ops[k].d, src_bytes + (size_t)(i * KE_COLS + j) * si, ops[k].s);
        bad += memcmp(want, ke_elem(&dst, di, i, j), di) != 0;
      }
    /* nothing past the last element of a row was written */
    for (int64_t i = 0; i < KE_ROWS; i++) bad += *(ke_elem(&dst, di, i, KE_COLS)) != 0;
    MN_CHECK(bad == 0);
    if (bad) fprintf(stderr, "  index64 op %zu (%s <- %s): %lld bad\n", k, mn_dtype_name(ops[k].d),
                     mn_dtype_name(ops[k].s), (long long)bad);
  }
  static const mn_dtype rdts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_BFLOAT16};
  for (size_t k = 0; k < 3; k++)
    for (int normal = 0; normal < 2; normal++) {
      const size_t item = mn_dtype_itemsize(rdts[k]);
      mn__strided_t dst = ke_far(region, item, 0);
      mn__rand_params_t rp = {.seed = 31, .offset = 2, .normal = normal, .a = normal ? 1.0 : -1.0,
                              .b = normal ? 2.0 : 4.0, .af = normal ? 1.0f : -1.0f, .bf = normal ? 2.0f : 4.0f};
      MN_CHECK_OK(mn__cuda_random(0, NULL, &dst, (int)rdts[k], &rp));
      int64_t bad = 0;
      for (int64_t i = 0; i < KE_ROWS; i++)
        for (int64_t j = 0; j < KE_COLS; j++) {
          double want = kc_random_host(rdts[k], normal, 31, 2, (uint64_t)(i * KE_COLS + j));
          mn_scalar_t got;
          MN_CHECK_OK(mn_scalar_from_bytes(rdts[k], ke_elem(&dst, item, i, j), &got));
          bad += memcmp(&want, &got.v.f, sizeof want) != 0;
        }
      MN_CHECK(bad == 0);
      if (bad) fprintf(stderr, "  index64 random %s normal=%d: %lld differ\n", mn_dtype_name(rdts[k]), normal,
                       (long long)bad);
    }
  munmap(region, region_bytes);
}

/* A plan over `buf` (aligned to 12 bytes) of the given kind with dtypes the
 * executor has no kernel for; it must refuse it without launching. */
static void ke_refused_plan(char *buf, mn__plan_kind kind, int dst_dtype, int src_dtype, size_t dst_item,
                            const char *needle) {
  mn__plan_t p;
  memset(&p, 0, sizeof p);
  p.kind = kind;
  p.ndim = 2;
  p.sizes[0] = 32;
  p.sizes[1] = 32;
  p.dst_strides[0] = 1;
  p.dst_strides[1] = 32;
  p.src_strides[0] = kind == MN__PLAN_TRANSPOSE ? 32 : 1;
  p.src_strides[1] = kind == MN__PLAN_TRANSPOSE ? 1 : 32;
  p.tdim = 1;
  p.dst = buf;
  p.src = buf + 48 * 1024;
  p.dst_dtype = (mn_dtype)dst_dtype;
  p.src_dtype = (mn_dtype)src_dtype;
  p.dst_item = dst_item;
  p.src_item = dst_item;
  p.numel = 32 * 32;
  p.vec = 1;
  if (kind == MN__PLAN_CONTIG) {
    p.ndim = 1;
    p.sizes[0] = 1024;
  }
  mn_emu_stats_t before, after;
  mn_emu_stats(&before);
  MN_CHECK_ERR(mn__cuda_exec(0, NULL, &p, NULL), MN_ERR_INVALID_ARGUMENT, needle);
  mn_emu_stats(&after);
  MN_CHECK(after.launches == before.launches);
}

/* The entry points refuse what they cannot run, with the reason. */
MN_TEST(cuda_entry_points_refuse_bad_input) {
  static char raw[96 * 1024 + 16] __attribute__((aligned(16)));
  char *buf = raw + (12 - (uintptr_t)raw % 12) % 12; /* items of 3 and 4 bytes aligned */
  const unsigned char pat[16] = {1, 2, 3, 4};
  MN_CHECK_ERR(mn__cuda_fill(0, NULL, buf, 4, 3, pat), MN_ERR_INVALID_ARGUMENT, "itemsize=3");
  MN_CHECK_ERR(mn__cuda_fill(0, NULL, NULL, 4, 4, pat), MN_ERR_INVALID_ARGUMENT, "non-NULL");
  MN_CHECK_ERR(mn__cuda_fill(0, NULL, buf, 4, 4, NULL), MN_ERR_INVALID_ARGUMENT, "non-NULL");
  MN_CHECK_ERR(mn__cuda_fill(0, NULL, buf, SIZE_MAX / 2, 4, pat), MN_ERR_OVERFLOW, "overflows");
  MN_CHECK_ERR(mn__cuda_fill(1, NULL, buf, 4, 4, pat), MN_ERR_NO_DEVICE, "cuda:1");
  MN_CHECK_OK(mn__cuda_fill(0, NULL, NULL, 0, 3, NULL)); /* nothing to do */
  MN_CHECK_ERR(mn__cuda_copy(0, NULL, NULL, buf, 8), MN_ERR_INVALID_ARGUMENT, "non-NULL");
  MN_CHECK_ERR(mn__cuda_copy(0, NULL, buf, NULL, 8), MN_ERR_INVALID_ARGUMENT, "non-NULL");
  mn__strided_t d;
  memset(&d, 0, sizeof d);
  d.data = buf;
  d.ndim = 1;
  d.sizes[0] = 8;
  d.strides[0] = 1;
  mn__rand_params_t rp = {.seed = 1, .a = 0.0, .b = 1.0, .af = 0.0f, .bf = 1.0f};
  MN_CHECK_ERR(mn__cuda_random(0, NULL, &d, MN_DTYPE_INT32, &rp), MN_ERR_INVALID_ARGUMENT, "random fill of int32");
  MN_CHECK_ERR(mn__cuda_random(2, NULL, &d, MN_DTYPE_FLOAT32, &rp), MN_ERR_NO_DEVICE, "cuda:2");
  /* plans with no kernel: a dtype outside the table (MN_DTYPE_COUNT) on the
   * contiguous-cast switches, an item size no transpose or generic kernel has */
  ke_refused_plan(buf, MN__PLAN_CONTIG, MN_DTYPE_COUNT, MN_DTYPE_FLOAT32, 4, "contiguous cast");
  ke_refused_plan(buf, MN__PLAN_CONTIG, MN_DTYPE_FLOAT32, MN_DTYPE_COUNT, 4, "contiguous cast");
  ke_refused_plan(buf, MN__PLAN_TRANSPOSE, MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT32, 3, "transpose");
  ke_refused_plan(buf, MN__PLAN_GENERIC, MN_DTYPE_FLOAT32, MN_DTYPE_INT32, 3, "strided cast");
  mn__plan_t p;
  mn__strided_t dd = d;
  dd.strides[0] = 2;
  mn__plan_make(&p, &dd, MN_DTYPE_FLOAT32, NULL, MN_DTYPE_FLOAT32);
  MN_CHECK_ERR(mn__cuda_exec(3, NULL, &p, pat), MN_ERR_NO_DEVICE, "cuda:3");
}

/* A launch or copy the device fails is MN_ERR_DEVICE with CUDA's error name,
 * and writes nothing. */
MN_TEST(cuda_launch_failures_are_reported) {
  static float buf[4096] __attribute__((aligned(64)));
  static float src[4096] __attribute__((aligned(64)));
  for (int i = 0; i < 4096; i++) src[i] = (float)i;
  memset(buf, 0, sizeof buf);
  const float one = 1.0f;
  mn_emu_stats_t before, after;
  mn_emu_stats(&before);
  mn_emu_inject_fault(MN_EMU_FAULT_LAUNCH, 1);
  MN_CHECK_ERR(mn__cuda_fill(0, NULL, buf, 4096, 4, &one), MN_ERR_DEVICE, "cudaErrorLaunchOutOfResources");
  mn__strided_t d, s;
  memset(&d, 0, sizeof d);
  d.data = (char *)buf;
  d.ndim = 2;
  d.sizes[0] = 64;
  d.sizes[1] = 32;
  d.strides[0] = 32;
  d.strides[1] = 1;
  s = d;
  s.data = (char *)src;
  s.strides[0] = 1;
  s.strides[1] = 64; /* a transpose */
  mn__plan_t p;
  mn__plan_make(&p, &d, MN_DTYPE_FLOAT32, &s, MN_DTYPE_FLOAT32);
  mn_emu_inject_fault(MN_EMU_FAULT_LAUNCH, 1);
  MN_CHECK_ERR(mn__cuda_exec(0, NULL, &p, NULL), MN_ERR_DEVICE, "cudaErrorLaunchOutOfResources");
  mn__rand_params_t rp = {.seed = 1, .a = 0.0, .b = 1.0, .af = 0.0f, .bf = 1.0f};
  mn_emu_inject_fault(MN_EMU_FAULT_LAUNCH, 1);
  MN_CHECK_ERR(mn__cuda_random(0, NULL, &d, MN_DTYPE_FLOAT32, &rp), MN_ERR_DEVICE, "random fill");
  mn_emu_inject_fault(MN_EMU_FAULT_MEMCPY, 1);
  MN_CHECK_ERR(mn__cuda_copy(0, NULL, buf, src, sizeof buf), MN_ERR_DEVICE, "cudaErrorInvalidValue");
  mn_emu_stats(&after);
  MN_CHECK(after.faults - before.faults == 4);
  MN_CHECK(after.launches == before.launches);
  int64_t touched = 0;
  for (int i = 0; i < 4096; i++) touched += buf[i] != 0.0f;
  MN_CHECK(touched == 0);
  /* and the next launch runs again */
  MN_CHECK_OK(mn__cuda_exec(0, NULL, &p, NULL));
  int64_t bad = 0;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 32; j++) bad += buf[i * 32 + j] != src[i + j * 64];
  MN_CHECK(bad == 0);
}

static void kc_run_emu_cases(void) {
  MN_RUN(random_fill_dense_aligned);
  MN_RUN(quantize_dequantize_match_cpu);
  MN_RUN(index64_kernels);
  MN_RUN(cuda_entry_points_refuse_bad_input);
  MN_RUN(cuda_launch_failures_are_reported);
}

#endif /* MNEMO_TESTS_KERNELS_EMU_CASES_H */
