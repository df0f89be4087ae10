/* tests/test_kernels.c: the copy, cast and fill kernels on CPU memory (run at
 * once) and SIM memory (queued host work): tests/test_kernels_cases.h; plus
 * the fast narrow-float conversions of kernels/cast.h against dtype.h's. */
#include "kernels/cast.h"
#include "test_kernels_cases.h"

/* Every 251st float bit pattern and the patterns near the format edges: the
 * branch-free conversions equal the exact ones of mnemo/dtype.h bit for bit. */
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
  }
  /* 4096 patterns around each edge, both signs */
  for (int e = 0; e < (int)(sizeof edges / sizeof edges[0]); e++)
    for (uint32_t k = 0; k < 4096; k++) {
      float f = mn__f32_of((edges[e] - 2048u + k) ^ (k & 1u ? 0x80000000u : 0u));
      bad += mn__f32_to_f16(f) != mn_float_to_half(f);
      bad += mn__f32_to_e4m3(f) != mn_float_to_e4m3fn(f);
      bad += mn__f32_to_e5m2(f) != mn_float_to_e5m2(f);
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
