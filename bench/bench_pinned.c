/* bench/bench_pinned.c: host cost of a cached alloc+free pair of the pinned
 * pool (SIM, CPU or CUDA pool), with its median over batches as a counter;
 * malloc+free of the same size for scale. Single-threaded bodies. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"

#define BATCHES 301
#define PAIRS_PER_BATCH 1000

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Median over BATCHES of the mean ns of one pair within a batch. */
static double pair_median_ns(mn_allocator_t *a, size_t n) {
  static double per[BATCHES];
  void *p = NULL;
  for (int b = 0; b < BATCHES; b++) {
    double t0 = now_ns();
    for (int i = 0; i < PAIRS_PER_BATCH; i++) {
      MN_BENCH_OK(mn_allocator_alloc(a, n, NULL, &p));
      MN_BENCH_OK(mn_allocator_free(a, p));
    }
    per[b] = (now_ns() - t0) / PAIRS_PER_BATCH;
  }
  return mn_bench_median(per, BATCHES);
}

/* arg: the device whose pinned pool is measured. */
static void bench_pair(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  size_t n = (size_t)mn_bench_arg(b, 0);
  mn_allocator_t *a = NULL;
  if (mn_pinned_allocator_create(*dev, NULL, &a) != MN_OK) {
    mn_bench_error(b, mn_last_error());
    return;
  }
  void *p = NULL;
  MN_BENCH_OK(mn_allocator_alloc(a, n, NULL, &p)); /* warm: the block is cached from here on */
  MN_BENCH_OK(mn_allocator_free(a, p));
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_allocator_alloc(a, n, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  mn_bench_counter(b, "pair_median_ns", pair_median_ns(a, n));
  mn_alloc_stats_t st;
  if (mn_allocator_get_stats(a, &st) == MN_OK && st.num_device_alloc != 1)
    mn_bench_error(b, "the pool pinned more than one block: the pair was not cached");
  mn_allocator_destroy(a);
}

static void bench_malloc_pair(mn_bench_t *b, void *arg) {
  size_t n = (size_t)mn_bench_arg(b, 0);
  while (mn_bench_next(b)) {
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
}

int main(int argc, char **argv) {
  static mn_device_t sim, cpu, cuda;
  sim = mn_device_sim(0);
  cpu = mn_device_cpu();
  cuda = mn_device_cuda(0);
  int ncuda = 0;
  MN_BENCH_OK(mn_device_count(MN_DEVICE_CUDA, &ncuda));
  static const int64_t sizes[] = {4096, 1 << 20, 64 << 20};
  for (int i = 0; i < 3; i++) {
    mn_bench_register("pinned/sim/alloc_free_pair", bench_pair, &sim, 1, &sizes[i]);
    mn_bench_register("pinned/cpu/alloc_free_pair", bench_pair, &cpu, 1, &sizes[i]);
    if (ncuda > 0) mn_bench_register("pinned/cuda/alloc_free_pair", bench_pair, &cuda, 1, &sizes[i]);
    mn_bench_register("libc/malloc_free_pair", bench_malloc_pair, NULL, 1, &sizes[i]);
  }
  return mn_bench_main(argc, argv);
}
