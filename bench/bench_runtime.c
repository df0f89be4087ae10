/* bench/bench_runtime.c: runtime and skeleton benchmarks: fill and copy GB/s
 * on CPU (against memset/memcpy) and host cost of stream/event calls on SIM. */
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"

static void bench_cpu_fill(mn_bench_t *b, void *arg) {
  size_t n = (size_t)mn_bench_arg(b, 0);
  float *buf = aligned_alloc(256, n * sizeof(float));
  float v = 1.5f;
  mn_stream_t *s = NULL;
  MN_BENCH_OK(mn_stream_default(mn_device_cpu(), &s));
  while (mn_bench_next(b)) MN_BENCH_OK(mn_kernel_fill(s, buf, n, sizeof v, &v));
  mn_bench_set_bytes(b, (int64_t)(n * sizeof(float)));
  free(buf);
}

static void bench_cpu_memset_ceiling(mn_bench_t *b, void *arg) {
  size_t n = (size_t)mn_bench_arg(b, 0) * sizeof(float);
  void *buf = aligned_alloc(256, n);
  while (mn_bench_next(b)) {
    memset(buf, 1, n);
    __asm__ volatile("" : : "r"(buf) : "memory");
  }
  mn_bench_set_bytes(b, (int64_t)n);
  free(buf);
}

static void bench_cpu_copy(mn_bench_t *b, void *arg) {
  size_t n = (size_t)mn_bench_arg(b, 0);
  void *src = aligned_alloc(256, n), *dst = aligned_alloc(256, n);
  memset(src, 3, n);
  mn_stream_t *s = NULL;
  MN_BENCH_OK(mn_stream_default(mn_device_cpu(), &s));
  while (mn_bench_next(b)) MN_BENCH_OK(mn_kernel_copy(s, dst, src, n));
  mn_bench_set_bytes(b, (int64_t)(2 * n)); /* read + written */
  free(src);
  free(dst);
}

static void bench_sim_event_record_query(mn_bench_t *b, void *arg) {
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  MN_BENCH_OK(mn_stream_create(mn_device_sim(0), &s));
  MN_BENCH_OK(mn_event_create(mn_device_sim(0), &e));
  bool done = false;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_event_record(e, s));
    MN_BENCH_OK(mn_event_query(e, &done));
  }
  MN_BENCH_OK(mn_event_destroy(e));
  MN_BENCH_OK(mn_stream_destroy(s));
}

int main(int argc, char **argv) {
  static const int64_t sizes[] = {1 << 10, 1 << 20, 1 << 24};
  for (int i = 0; i < 3; i++) {
    mn_bench_register("cpu/fill_f32", bench_cpu_fill, NULL, 1, &sizes[i]);
    mn_bench_register("cpu/memset_ceiling", bench_cpu_memset_ceiling, NULL, 1, &sizes[i]);
    int64_t bytes = sizes[i] * 4;
    mn_bench_register("cpu/copy_bytes", bench_cpu_copy, NULL, 1, &bytes);
  }
  mn_bench_register("sim/event_record_query", bench_sim_event_record_query, NULL, 0, NULL);
  return mn_bench_main(argc, argv);
}
