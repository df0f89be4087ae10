/* tests/test_kernels.c: the copy, cast and fill kernels on CPU memory (run at
 * once) and SIM memory (queued host work): tests/test_kernels_cases.h; plus
 * runtime/narrow_float.h: its format rows against the dtype table's, and the
 * fast conversions the kernels use against the exact rounding and dtype.h's. */
#include <math.h>

#include "kernels/cast.h"
#include "runtime/narrow_float.h"
#include "test_kernels_cases.h"

/* The dtype table's facts a narrow format must agree with, by dtype value. */
typedef struct {
  int fmt, kind, has_inf;
  size_t size;
  double fmax;
} dt_facts;
#define DT_FACTS(A, SFX, VAL, NAME, SIZE, KIND, FMT, REAL, DLC, DLB, DLL, ST, FMAX, HAS_INF) \
  [VAL] = {FMT, KIND, HAS_INF, SIZE, FMAX},
static const dt_facts dt_rows[] = {MN_DTYPE_TABLE(DT_FACTS, ~)};
#undef DT_FACTS

/* narrow_float.h's rows. */
typedef struct {
  int fmt, ebits, mbits, inf;
  uint32_t nan;
  size_t bytes;
} nf_facts;
#define NF_FACTS(A, FMT, EB, MB, INF, NANV, T, TO_F32, FROM_F32) {FMT, EB, MB, INF, NANV, sizeof(T)},
static const nf_facts nf_rows[] = {MN__NF_FORMATS(NF_FACTS, ~)};
#undef NF_FACTS
#define NF_ROWS ((int)(sizeof nf_rows / sizeof nf_rows[0]))

/* Each dtype row whose format column names a narrow float agrees with that
 * format's row (width, storage size, infinities, largest finite value, NaN);
 * the rows are keyed right (MN__NF_ROW(n) is format n); every narrow format
 * is some dtype's; the other formats have no row. */
MN_TEST(narrow_float_rows_match_dtype_table) {
  int bad = 0;
  /* the key: the row MN__NF_ROW(FMT) finds names format FMT */
#define NF_KEY(A, FMT, ...) bad += (A) != (FMT);
#define DT_KEY(A, SFX, VAL, NAME, SIZE, KIND, FMT, ...) MN__NF_ROW(FMT, NF_KEY, FMT)
  MN_DTYPE_TABLE(DT_KEY, ~)
#undef DT_KEY
#undef NF_KEY
  int used[16] = {0};
  for (int d = 0; d < (int)(sizeof dt_rows / sizeof dt_rows[0]); d++) {
    const dt_facts *t = &dt_rows[d];
    mn__nf_fmt_t f = mn__nf_fmt(t->fmt);
    const nf_facts *r = NULL;
    for (int k = 0; k < NF_ROWS; k++)
      if (nf_rows[k].fmt == t->fmt) {
        MN_CHECK(r == NULL); /* one row per format */
        r = &nf_rows[k];
        used[k] = 1;
      }
    if (r == NULL) {
      MN_CHECK(f.bytes == 0);
      continue;
    }
    int parts = t->kind == MN_KIND_COMPLEX ? 2 : 1;
    MN_CHECK(t->kind == MN_KIND_FLOAT || t->kind == MN_KIND_COMPLEX);
    MN_CHECK((size_t)parts * r->bytes == t->size && 8 * r->bytes == (size_t)(1 + r->ebits + r->mbits));
    MN_CHECK(f.bytes == (int)r->bytes && f.mbits == r->mbits && f.sign == 1u << (r->ebits + r->mbits));
    MN_CHECK(r->inf == t->has_inf);
    float maxf = mn__nf_to_f32(t->fmt, f.maxf), ovf = mn__nf_to_f32(t->fmt, f.ovf);
    MN_CHECK((double)maxf == t->fmax && (double)mn__nf_to_f32(t->fmt, f.sign | f.maxf) == -t->fmax);
    MN_CHECK(t->has_inf ? isinf(ovf) && ovf > 0 : ovf == maxf);
    MN_CHECK(isnan(mn__nf_to_f32(t->fmt, f.nan)) && isnan(mn__nf_to_f32(t->fmt, f.sign | f.nan)));
    /* the largest finite rounds to itself, twice it overflows, a NaN stays one */
    MN_CHECK(mn__nf_from_f64(f, t->fmax) == f.maxf && mn__nf_from_f64(f, 2 * t->fmax) == f.ovf);
    MN_CHECK(mn__nf_from_f64(f, NAN) == f.nan);
    MN_CHECK(mn__nf_from_f32(t->fmt, (float)t->fmax) == f.maxf);
  }
  for (int k = 0; k < NF_ROWS; k++) MN_CHECK(used[k]);
  MN_CHECK(bad == 0);
}

/* The fast float path of each format equals the exact rounding bit for bit. */
static int64_t fast_vs_exact(float f) {
  int64_t bad = 0;
#define NF_FAST(A, FMT, ...) bad += mn__nf_from_f32(FMT, A) != mn__nf_from_f64(mn__nf_fmt(FMT), (double)A);
  MN__NF_FORMATS(NF_FAST, f)
#undef NF_FAST
  return bad;
}

/* Every 251st float bit pattern and the patterns near the format edges: the
 * branch-free conversions equal the exact ones of mnemo/dtype.h and of
 * runtime/narrow_float.h's rounding, bit for bit. */
MN_TEST(fast_narrow_conversions_match_dtype_h) {
  static const uint32_t edges[] = {0x00000000u, 0x33000000u, 0x33000001u, 0x387FE000u, 0x387FF000u, 0x38800000u,
                                   0x3A800000u, 0x3B000000u, 0x3C7FFFFFu, 0x3C800000u, 0x43E00000u, 0x43E80000u,
                                   0x43F00000u, 0x47600000u, 0x476FFFFFu, 0x47700000u, 0x477FE000u, 0x477FF000u,
                                   0x47800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu};
  int64_t bad = 0;
  for (uint64_t x = 0; x <= 0xFFFFFFFFull; x += 251) {
    float f = mn__f32_of((uint32_t)x);
    bad += mn__f32_to_f16(f) != mn_float_to_half(f);
    bad += mn__f32_to_e4m3(f) != mn_float_to_e4m3fn(f);
    bad += mn__f32_to_e5m2(f) != mn_float_to_e5m2(f);
    bad += mn__f32_to_bf16(f) != mn_float_to_bfloat16(f);
    bad += fast_vs_exact(f);
  }
  /* 4096 patterns around each edge, both signs */
  for (int e = 0; e < (int)(sizeof edges / sizeof edges[0]); e++)
    for (uint32_t k = 0; k < 4096; k++) {
      float f = mn__f32_of((edges[e] - 2048u + k) ^ (k & 1u ? 0x80000000u : 0u));
      bad += mn__f32_to_f16(f) != mn_float_to_half(f);
      bad += mn__f32_to_e4m3(f) != mn_float_to_e4m3fn(f);
      bad += mn__f32_to_e5m2(f) != mn_float_to_e5m2(f);
      bad += fast_vs_exact(f);
    }
  for (uint32_t h = 0; h < 65536; h++) {
    float a = mn__f16_to_f32((uint16_t)h), b = mn_half_to_float((uint16_t)h);
    bad += memcmp(&a, &b, 4) != 0;
    a = mn__bf16_to_f32((uint16_t)h), b = mn_bfloat16_to_float((uint16_t)h);
    bad += memcmp(&a, &b, 4) != 0;
  }
  for (uint32_t v = 0; v < 256; v++) {
    float a = mn__e4m3_to_f32((uint8_t)v), b = mn_e4m3fn_to_float((uint8_t)v);
    bad += memcmp(&a, &b, 4) != 0;
    a = mn__e5m2_to_f32((uint8_t)v), b = mn_e5m2_to_float((uint8_t)v);
    bad += memcmp(&a, &b, 4) != 0;
  }
  MN_CHECK(bad == 0);
}

int main(void) {
  MN_RUN(narrow_float_rows_match_dtype_table);
  MN_RUN(fast_narrow_conversions_match_dtype_h);
  mn_test_configure_sim(1, (size_t)1 << 30);
  const mn_device_t devs[2] = {mn_device_cpu(), mn_device_sim(0)};
  for (int k = 0; k < 2; k++) {
    kc_dev = devs[k];
    printf("== %s\n", k == 0 ? "cpu" : "sim:0");
    MN_CHECK_OK(mn_stream_create(kc_dev, &kc_stream));
    kc_run_all();
    MN_CHECK_OK(mn_stream_synchronize(kc_stream));
    MN_CHECK_OK(mn_stream_destroy(kc_stream));
  }
  mn_test_release_sim_caches();
  return mn_test_finish();
}
