/* bench/bench_runtime.c: runtime and skeleton benchmarks: fill and copy GB/s
 * on CPU (against memset/memcpy) and host cost of stream/event calls on SIM;
 * a SIM raw alloc+free pair with 10 and 10k live ranges, and a stream-ordered
 * (async allocator) alloc+free pair on SIM after 1 and 10 passes of mixed-size
 * allocations freed without a synchronize: both flat when per-operation work
 * does not grow with unrelated state. Single-threaded bodies. */
#include <stdio.h>
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

/* `live` raw allocations of one granule, the middle one freed again: the
 * pair's allocation lands in that hole (first fit), its free takes it out. */
static void **raw_warm(int64_t live) {
  void **l = malloc(sizeof(void *) * (size_t)live);
  if (!l) exit(1);
  for (int64_t i = 0; i < live; i++) MN_BENCH_OK(mn_device_raw_alloc(mn_device_sim(0), 4096, &l[i]));
  MN_BENCH_OK(mn_device_raw_free(mn_device_sim(0), l[live / 2]));
  return l;
}

static void raw_cool(int64_t live, void **l) {
  for (int64_t i = 0; i < live; i++)
    if (i != live / 2) MN_BENCH_OK(mn_device_raw_free(mn_device_sim(0), l[i]));
  free(l);
}

static void raw_pair(void) {
  void *p = NULL;
  MN_BENCH_OK(mn_device_raw_alloc(mn_device_sim(0), 4096, &p));
  MN_BENCH_OK(mn_device_raw_free(mn_device_sim(0), p));
}

/* A SIM raw alloc+free pair with `live` raw allocations alive around it. */
static void bench_sim_raw_pair(mn_bench_t *b, void *arg) {
  int64_t live = mn_bench_arg(b, 0);
  void **l = raw_warm(live);
  while (mn_bench_next(b)) raw_pair();
  mn_bench_set_items(b, 1);
  raw_cool(live, l);
}

#define ASYNC_PASS_BLOCKS 1000

/* Sizes cycle through 64 multiples of 512 B (512 B .. 32 KiB). */
static size_t async_size(int64_t i) { return (size_t)(1 + i % 64) * 512; }

/* An async allocator on sim:0 after `passes` passes, each allocating
 * ASYNC_PASS_BLOCKS blocks of mixed sizes on the default stream and freeing
 * them all, without any synchronize (the frees stay queued on the stream). */
static mn_allocator_t *async_warm(int64_t passes) {
  mn_allocator_t *a = NULL;
  MN_BENCH_OK(mn_async_allocator_create(mn_device_sim(0), &a));
  static void *l[ASYNC_PASS_BLOCKS];
  for (int64_t p = 0; p < passes; p++) {
    for (int64_t i = 0; i < ASYNC_PASS_BLOCKS; i++) MN_BENCH_OK(mn_allocator_alloc(a, async_size(i * 7 + p), NULL, &l[i]));
    for (int64_t i = 0; i < ASYNC_PASS_BLOCKS; i++) MN_BENCH_OK(mn_allocator_free(a, l[i]));
  }
  return a;
}

/* 64 KiB, more than any block of the passes: a first fit would look past
 * every block they freed; sizes cycling between 64 and 127 KiB. */
static void async_pair(mn_allocator_t *a, int64_t k) {
  void *p = NULL;
  MN_BENCH_OK(mn_allocator_alloc(a, (size_t)(128 + k % 128) * 512, NULL, &p));
  MN_BENCH_OK(mn_allocator_free(a, p));
}

/* A stream-ordered alloc+free pair after `passes` passes. */
static void bench_sim_async_pair(mn_bench_t *b, void *arg) {
  mn_allocator_t *a = async_warm(mn_bench_arg(b, 0));
  int64_t k = 0;
  while (mn_bench_next(b)) async_pair(a, k++);
  mn_bench_set_items(b, 1);
  mn_allocator_destroy(a); /* runs the queued frees */
}

/* For instruction counts (callgrind), outside Google Benchmark: `bench_runtime
 * --pairs raw LIVE N` or `--pairs async PASSES N` runs N pairs after the same
 * setup (on a SIM device of 64 KiB granules, so that 10k live ranges fit
 * valgrind's address space). Two runs with different N give the instructions
 * per pair without the setup:
 *   valgrind --tool=callgrind bench_runtime --pairs raw 10000 20000  (and 10000) */
static int pairs_main(const char *kind, int64_t arg, long long n) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = (size_t)2 << 30;
  c.granularity = (size_t)64 << 10;
  MN_BENCH_OK(mn_sim_configure(&c));
  if (!strcmp(kind, "raw")) {
    void **l = raw_warm(arg);
    for (long long i = 0; i < n; i++) raw_pair();
    raw_cool(arg, l);
  } else if (!strcmp(kind, "async")) {
    mn_allocator_t *a = async_warm(arg);
    for (long long i = 0; i < n; i++) async_pair(a, i);
    mn_allocator_destroy(a);
  } else {
    fprintf(stderr, "bench_runtime: --pairs raw|async ARG N\n");
    return 2;
  }
  printf("%lld %s pairs (arg %lld)\n", n, kind, (long long)arg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--pairs")) return pairs_main(argv[2], atoll(argv[3]), atoll(argv[4]));
  static const int64_t sizes[] = {1 << 10, 1 << 20, 1 << 24};
  for (int i = 0; i < 3; i++) {
    mn_bench_register("cpu/fill_f32", bench_cpu_fill, NULL, 1, &sizes[i]);
    mn_bench_register("cpu/memset_ceiling", bench_cpu_memset_ceiling, NULL, 1, &sizes[i]);
    int64_t bytes = sizes[i] * 4;
    mn_bench_register("cpu/copy_bytes", bench_cpu_copy, NULL, 1, &bytes);
  }
  mn_bench_register("sim/event_record_query", bench_sim_event_record_query, NULL, 0, NULL);
  static const int64_t live[] = {10, 10000}, passes[] = {1, 10};
  for (int i = 0; i < 2; i++) mn_bench_register("sim/raw_pair_live", bench_sim_raw_pair, NULL, 1, &live[i]);
  for (int i = 0; i < 2; i++) mn_bench_register("sim/async_pair_passes", bench_sim_async_pair, NULL, 1, &passes[i]);
  return mn_bench_main(argc, argv);
}
