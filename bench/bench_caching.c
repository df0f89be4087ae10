/* bench/bench_caching.c: host cost of the caching allocator: a cached
 * alloc+free pair with 10, 1k and 100k cached blocks on the SIM device and,
 * where a GPU is present, on cuda:0 next to the stream-ordered allocator
 * (cudaMallocAsync from a pool of its own); 1-16 threads on SIM; one failed
 * (out-of-memory) allocation with 10, 1k and 100k cached blocks; the cached
 * pair on SIM fed to the ring recorder without and with C stacks
 * (recorder_pair/0, /16, /64: max frames); the cached pair on SIM with frees
 * pending on 0, 1, 16, 17, 1,000 and 10,000 other streams
 * (pending_streams_pair/S: one free after record_stream on each stream, whose
 * work never runs; up to 16 streams every allocation polls them all, beyond
 * at most one, backing off).
 * Single-threaded bodies except the threads benchmark. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"

#define MAX_BLOCKS 100000

static void die(const char *what) {
  fprintf(stderr, "bench_caching: %s: %s\n", what, mn_last_error());
  exit(1);
}

/* Block sizes cycle through 64 distinct multiples of 512 B (512 B .. 32 KiB),
 * so the free set holds many distinct (size, address) keys. */
static size_t size_of(int64_t i) { return (size_t)(1 + i % 64) * 512; }

/* A caching allocator on dev with `cached` free blocks in its free set, each
 * between two live ones so that none coalesce; the live blocks sit at the
 * even indexes of *live (cool() frees them and the allocator). */
static mn_allocator_t *warm(const mn_device_t *dev, int64_t cached, void ***live) {
  mn_allocator_t *a = NULL;
  if (mn_caching_allocator_create(*dev, NULL, &a) != MN_OK) die("create");
  void **l = malloc(sizeof(void *) * (size_t)(2 * cached + 2));
  if (!l) die("malloc");
  for (int64_t i = 0; i < 2 * cached + 1; i++)
    if (mn_allocator_alloc(a, size_of(i / 2), NULL, &l[i]) != MN_OK) die("warm alloc");
  for (int64_t i = 1; i < 2 * cached + 1; i += 2) MN_BENCH_OK(mn_allocator_free(a, l[i]));
  *live = l;
  return a;
}

static void cool(mn_allocator_t *a, int64_t cached, void **live) {
  for (int64_t i = 0; i < 2 * cached + 1; i += 2) MN_BENCH_OK(mn_allocator_free(a, live[i]));
  free(live);
  mn_allocator_destroy(a);
}

/* alloc+free of a size that a cached block fits exactly, with `cached` free
 * blocks in the allocator's free set (warm()). */
static void bench_pair(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  int64_t cached = mn_bench_arg(b, 0);
  void **live = NULL;
  mn_allocator_t *a = warm(dev, cached, &live);
  size_t want = size_of(cached / 2);
  void *p = NULL;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_allocator_alloc(a, want, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  mn_alloc_stats_t st;
  MN_BENCH_OK(mn_allocator_get_stats(a, &st));
  mn_bench_counter(b, "cached_blocks", (double)st.inactive_split[MN_POOL_ALL].current);
  mn_bench_counter(b, "device_allocs", (double)st.num_device_alloc);
  mn_bench_set_items(b, 1);
  cool(a, cached, live);
}

static void never_runs(void *arg) { (void)arg; }

/* The cached pair of bench_pair (10 cached blocks, SIM) with one free pending
 * on each of arg 0 other streams: a block allocated on the default stream,
 * recorded on the stream (whose queued host function the SIM device runs only
 * when the stream is advanced or synchronized, so its event never completes)
 * and freed, after the cached blocks are laid out. Sizes of 33..64 x 512 B:
 * never the pair's size. Reports the frees still pending at the end (all of
 * them: none completed). */
static void bench_pending_streams(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  int64_t nstreams = mn_bench_arg(b, 0);
  mn_allocator_t *a = NULL;
  if (mn_caching_allocator_create(*dev, NULL, &a) != MN_OK) die("create");
  const int64_t cached = 10; /* first, so that they lie as bench_pair's (warm()) */
  void **live = malloc(sizeof(void *) * (size_t)(2 * cached + 1));
  if (!live) die("malloc");
  for (int64_t i = 0; i < 2 * cached + 1; i++) MN_BENCH_OK(mn_allocator_alloc(a, size_of(i / 2), NULL, &live[i]));
  for (int64_t i = 1; i < 2 * cached + 1; i += 2) MN_BENCH_OK(mn_allocator_free(a, live[i]));
  mn_stream_t **streams = calloc((size_t)nstreams + 1, sizeof *streams);
  if (!streams) die("calloc");
  for (int64_t i = 0; i < nstreams; i++) {
    void *p = NULL;
    MN_BENCH_OK(mn_stream_create(*dev, &streams[i]));
    MN_BENCH_OK(mn_stream_launch_host(streams[i], never_runs, NULL));
    MN_BENCH_OK(mn_allocator_alloc(a, size_of(32 + i % 32), NULL, &p));
    MN_BENCH_OK(mn_allocator_record_stream(a, p, streams[i]));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  size_t want = size_of(cached / 2);
  void *p = NULL;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_allocator_alloc(a, want, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  mn_alloc_stats_t st; /* active = live blocks + frees still pending */
  MN_BENCH_OK(mn_allocator_get_stats(a, &st));
  mn_bench_counter(b, "still_pending", (double)(st.active[MN_POOL_ALL].current - (cached + 1)));
  mn_bench_set_items(b, 1);
  for (int64_t i = 0; i < 2 * cached + 1; i += 2) MN_BENCH_OK(mn_allocator_free(a, live[i]));
  free(live);
  for (int64_t i = 0; i < nstreams; i++) MN_BENCH_OK(mn_stream_synchronize(streams[i]));
  mn_allocator_destroy(a);
  for (int64_t i = 0; i < nstreams; i++) MN_BENCH_OK(mn_stream_destroy(streams[i]));
  free(streams);
}

/* The cached pair of bench_pair (10 cached blocks, SIM) with the allocator's
 * events going to a ring recorder (2^16 events, so it wraps: the steady state
 * of a long run) that takes C stacks of up to arg 0 frames (0: no stacks).
 * Reports the events per pair; the cost per event is (this - alloc_free_pair/10)
 * / events_per_pair. */
static void bench_recorder_pair(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  unsigned frames = (unsigned)mn_bench_arg(b, 0);
  void **live = NULL;
  mn_allocator_t *a = warm(dev, 10, &live);
  mn_trace_recorder_t *r = NULL;
  MN_BENCH_OK(mn_trace_recorder_create((size_t)1 << 16, &r));
  MN_BENCH_OK(mn_trace_recorder_set_stacks(r, frames));
  MN_BENCH_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r));
  size_t want = size_of(5);
  void *p = NULL;
  int64_t pairs = 0;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_allocator_alloc(a, want, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
    pairs++;
  }
  MN_BENCH_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
  mn_trace_recorder_stats_t rs;
  MN_BENCH_OK(mn_trace_recorder_get_stats(r, &rs));
  mn_bench_counter(b, "events_per_pair", pairs ? (double)rs.recorded / (double)pairs : 0);
  mn_bench_counter(b, "stacks", (double)rs.stacks);
  mn_bench_counter(b, "frames_unwound", rs.stacks ? (double)rs.stack_pcs / (double)rs.stacks + 1 : 0);
  if (frames && rs.stackless) mn_bench_error(b, "events without a stack");
  mn_bench_set_items(b, 1);
  mn_trace_recorder_destroy(r);
  cool(a, 10, live);
}

/* For instruction counts (callgrind), outside Google Benchmark: `bench_caching
 * --recorder-pairs N FRAMES` runs N such pairs (FRAMES -1: no recorder; 0:
 * the recorder without stacks). Two runs with different N give the
 * instructions per pair without the setup:
 *   valgrind --tool=callgrind bench_caching --recorder-pairs 20000 16  (and 10000) */
static int recorder_pairs(long long n, int frames) {
  mn_device_t sim = mn_device_sim(0);
  void **live = NULL;
  mn_allocator_t *a = warm(&sim, 10, &live);
  mn_trace_recorder_t *r = NULL;
  if (frames >= 0) {
    MN_BENCH_OK(mn_trace_recorder_create((size_t)1 << 16, &r));
    MN_BENCH_OK(mn_trace_recorder_set_stacks(r, (unsigned)frames));
    MN_BENCH_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r));
  }
  void *p = NULL;
  for (long long i = 0; i < n; i++) {
    MN_BENCH_OK(mn_allocator_alloc(a, size_of(5), NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  if (r) MN_BENCH_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
  mn_trace_recorder_stats_t rs = {0};
  if (r) MN_BENCH_OK(mn_trace_recorder_get_stats(r, &rs));
  mn_trace_recorder_destroy(r);
  cool(a, 10, live);
  printf("%lld pairs, recorder %s, %.1f frames unwound per event\n", n,
         frames < 0 ? "off" : frames ? "with stacks" : "without stacks",
         rs.stacks ? (double)rs.stack_pcs / (double)rs.stacks + 1 : 0.0);
  return 0;
}

/* A pair through the stream-ordered allocator (cudaMallocAsync and
 * cudaFreeAsync on the default stream, its own pool keeping what is freed). */
static void bench_async_pair(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  mn_allocator_t *a = NULL;
  if (mn_async_allocator_create(*dev, &a) != MN_OK) die("async create");
  void *p = NULL;
  while (mn_bench_next(b)) {
    if (mn_allocator_alloc(a, 4096, NULL, &p) != MN_OK) die("async alloc");
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  MN_BENCH_OK(mn_device_synchronize(*dev));
  mn_bench_set_items(b, 1);
  mn_allocator_destroy(a);
}

/* The same pair against the raw SIM backend (no caching), for reference. */
static void bench_raw_pair(mn_bench_t *b, void *arg) {
  void *p = NULL;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_device_raw_alloc(mn_device_sim(0), 4096, &p));
    MN_BENCH_OK(mn_device_raw_free(mn_device_sim(0), p));
  }
  mn_bench_set_items(b, 1);
}

static mn_allocator_t *g_shared;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void shared_create(void) {
  if (mn_caching_allocator_create(mn_device_sim(0), NULL, &g_shared) != MN_OK) die("create shared");
}

/* Every thread allocates and frees on its own stream through one allocator:
 * bursts of 16 live blocks of mixed sizes. Reports ops/s over all threads. */
static void bench_threads(mn_bench_t *b, void *arg) {
  pthread_once(&g_once, shared_create);
  mn_stream_t *s = NULL;
  if (mn_stream_create(mn_device_sim(0), &s) != MN_OK) die("stream");
  void *p[16];
  int64_t round = mn_bench_thread_index(b);
  while (mn_bench_next(b)) {
    for (int k = 0; k < 16; k++) MN_BENCH_OK(mn_allocator_alloc(g_shared, size_of(round + k * 7), s, &p[k]));
    for (int k = 0; k < 16; k++) MN_BENCH_OK(mn_allocator_free(g_shared, p[k]));
    round++;
  }
  mn_bench_set_items(b, 32); /* 16 allocs + 16 frees */
  MN_BENCH_OK(mn_stream_destroy(s));
}

/* One failed allocation (more than the device holds, less than its total, so
 * the whole out-of-memory path runs: release of cached segments, the message)
 * with `cached` split free blocks in the cache, none of them releasable. Each
 * used to cost a walk of every free block and every block (a crafted
 * trace replayed in O(OOMs x blocks) showed it). */
static void bench_failed_alloc(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  int64_t cached = mn_bench_arg(b, 0);
  void **live = NULL;
  mn_allocator_t *a = warm(dev, cached, &live);
  size_t free_b = 0, total = 0;
  MN_BENCH_OK(mn_device_mem_info(*dev, &free_b, &total));
  void *p = NULL;
  while (mn_bench_next(b))
    if (mn_allocator_alloc(a, total - ((size_t)1 << 20), NULL, &p) != MN_ERR_OUT_OF_MEMORY) {
      mn_bench_error(b, "the allocation did not fail with out_of_memory");
      break;
    }
  mn_bench_set_items(b, 1);
  cool(a, cached, live);
}

int main(int argc, char **argv) {
  mn_sim_config_t c = mn_sim_config_default();
  bool pairs = argc == 4 && !strcmp(argv[1], "--recorder-pairs");
  c.capacity = (size_t)(pairs ? 1 : 64) << 30; /* 1 GiB: fits valgrind's address space */
  if (mn_sim_configure(&c) != MN_OK) die("sim configure");
  if (pairs) return recorder_pairs(atoll(argv[2]), atoi(argv[3]));
  static const int64_t cached[] = {10, 1000, MAX_BLOCKS};
  static mn_device_t sim, cuda;
  sim = mn_device_sim(0);
  cuda = mn_device_cuda(0);
  for (int i = 0; i < 3; i++) mn_bench_register("caching/alloc_free_pair", bench_pair, &sim, 1, &cached[i]);
  for (int i = 0; i < 3; i++) mn_bench_register("caching/failed_alloc", bench_failed_alloc, &sim, 1, &cached[i]);
  static const int64_t frames[] = {0, 16, 64};
  for (int i = 0; i < 3; i++) mn_bench_register("caching/recorder_pair", bench_recorder_pair, &sim, 1, &frames[i]);
  static const int64_t nstreams[] = {0, 1, 16, 17, 1000, 10000};
  for (int i = 0; i < 6; i++)
    mn_bench_register("caching/pending_streams_pair", bench_pending_streams, &sim, 1, &nstreams[i]);
  int ncuda = 0;
  if (mn_device_count(MN_DEVICE_CUDA, &ncuda) == MN_OK && ncuda > 0) {
    for (int i = 0; i < 3; i++) mn_bench_register("caching/cuda/alloc_free_pair", bench_pair, &cuda, 1, &cached[i]);
    mn_bench_register("async/cuda/alloc_free_pair", bench_async_pair, &cuda, 0, NULL);
  }
  mn_bench_register("sim/raw_alloc_free_pair", bench_raw_pair, NULL, 0, NULL);
  static const int threads[] = {1, 2, 8, 16};
  for (int i = 0; i < 4; i++) mn_bench_register_threads("caching/threads_alloc_free", bench_threads, NULL, threads[i]);
  return mn_bench_main(argc, argv);
}
