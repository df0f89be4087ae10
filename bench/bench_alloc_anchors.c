/* bench/bench_alloc_anchors.c: the host-cost anchors of the caching allocator,
 * timed side by side in one run (Google Benchmark; instruction counts of the
 * same cases: bench/alloc_ir.sh):
 *  - trace/...: a real trace's alloc/free sequence (bench/alloc_anchors.h; by
 *    default data/traces/gpt2_infer_var.trace, `--trace PATH` for another)
 *    through mnemo's caching allocator on SIM (scaled sizes, as the heaps get,
 *    and mnemo_raw: the recorded sizes) and through glibc, jemalloc and
 *    mimalloc (sizes divided by a power of two so that at most 256 MiB is
 *    live); ns_per_pair = ns per alloc+free pair;
 *  - fixed_pair/...: one 3072 B alloc+free pair, the same four;
 *  - threads/...: 1, 2, 4, 16 threads each doing cached pairs on its own stream
 *    (mnemo: one SIM stream per thread, one shared caching allocator: each
 *    stream's lane); pairs_per_s over all threads and x_1thread, its ratio to
 *    the 1-thread run;
 *  - pending_pair/K: the cached pair on the default stream with K frees
 *    pending on another stream's events (work the SIM device never runs);
 *  - recorder_pair/{off,on,stacks16}: the cached pair without and with the
 *    ring recorder;
 *  - cached_pair/N: the cached pair with N cached blocks (bench_caching's warm()).
 * A missing jemalloc or mimalloc skips its rows with a message. Everything is
 * single-threaded but the threads/... bodies. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/alloc_anchors.h"
#include "bench/harness.h"

#define DEFAULT_TRACE MN_SOURCE_DIR "/data/traces/gpt2_infer_var.trace"
#define MAX_PEAK ((uint64_t)256 << 20)
#define MAX_THREADS 16

static mn_anchor_seq_t g_seq;

/* A target: mnemo's caching allocator on SIM (heap NULL) or a heap. */
typedef struct {
  const char *name;
  const mn_anchor_heap_t *heap;
  bool scaled; /* trace: mnemo with the scaled sizes */
  int index;   /* threads: which 1-thread rate is its reference */
  mn_allocator_t **shared; /* threads, mnemo: the allocator every thread uses */
} target;

/* ---- trace ---------------------------------------------------------------------- */

static void bench_trace(mn_bench_t *b, void *arg) {
  const target *t = arg;
  mn_allocator_t *a = NULL;
  void **keep = NULL, **slots = calloc(g_seq.nslots, sizeof *slots);
  if (!slots) mn_anchor_die("calloc");
  if (!t->heap && mn_caching_allocator_create(mn_device_sim(0), NULL, &a) != MN_OK) mn_anchor_die("create");
  bool ok = t->heap ? mn_anchor_seq_keep_heap(&g_seq, t->heap, &keep) : mn_anchor_seq_keep_mnemo(&g_seq, a, t->scaled, &keep);
  if (!ok) mn_anchor_die("the trace's kept allocations");
  /* One run first, untimed: the steady state (mnemo's segments made, heaps grown). */
#define RUN() (t->heap ? mn_anchor_seq_run_heap(&g_seq, t->heap, slots) : mn_anchor_seq_run_mnemo(&g_seq, a, t->scaled, slots))
  if (!RUN()) mn_anchor_die("a run of the trace");
  long long it = 0;
  double t0 = 0;
  while (mn_bench_next(b)) {
    if (it++ == 0) t0 = mn_bench_now_s();
    if (!RUN()) {
      mn_bench_error(b, "an allocation failed");
      break;
    }
  }
#undef RUN
  double dt = mn_bench_now_s() - t0;
  mn_bench_counter(b, "ns_per_pair", it ? dt * 1e9 / ((double)it * (double)g_seq.npairs) : 0);
  mn_bench_counter(b, "pairs_per_run", (double)g_seq.npairs);
  mn_bench_counter(b, "divisor", t->heap || t->scaled ? (double)g_seq.divisor : 1.0);
  mn_bench_set_items(b, (int64_t)g_seq.npairs);
  if (t->heap) {
    mn_anchor_seq_release_heap(&g_seq, t->heap, keep);
  } else {
    mn_anchor_seq_release_mnemo(&g_seq, a, keep);
    mn_allocator_destroy(a);
  }
  free(slots);
}

/* ---- fixed pair ------------------------------------------------------------------ */

static void bench_fixed(mn_bench_t *b, void *arg) {
  const target *t = arg;
  mn_allocator_t *a = NULL;
  void *p = NULL;
  if (!t->heap && mn_caching_allocator_create(mn_device_sim(0), NULL, &a) != MN_OK) mn_anchor_die("create");
  if (!t->heap) { /* the first pair makes the segment */
    MN_BENCH_OK(mn_allocator_alloc(a, MN_ANCHOR_FIXED_SIZE, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(a, p));
  }
  while (mn_bench_next(b)) {
    if (t->heap) {
      p = t->heap->malloc_fn(MN_ANCHOR_FIXED_SIZE);
      if (!p) mn_anchor_die("malloc");
      t->heap->free_fn(p);
    } else {
      MN_BENCH_OK(mn_allocator_alloc(a, MN_ANCHOR_FIXED_SIZE, NULL, &p));
      MN_BENCH_OK(mn_allocator_free(a, p));
    }
  }
  mn_bench_set_items(b, 1);
  if (a) mn_allocator_destroy(a);
}

/* ---- threads ---------------------------------------------------------------------- */

static mn_allocator_t *g_thr_alloc;          /* shared by the mnemo threads */
static mn_stream_t *g_thr_streams[MAX_THREADS]; /* slot i: thread index i's own stream, kept across runs */
static double g_rate1[1 + MN_ANCHOR_HEAPS];  /* pairs/s of each target's 1-thread run */
static struct {
  pthread_mutex_t mu;
  double start, end;
  long long pairs;
  int left;
} g_thr = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0};

/* Each thread does cached pairs of 3072 B on its own stream. The rate is all
 * threads' pairs over the span from the first thread's start to the last one's
 * end; the thread that ends last reports it (Google Benchmark sums counters
 * over threads; items_per_second is its own real-time figure). */
static void bench_threads(mn_bench_t *b, void *arg) {
  const target *t = arg;
  int ti = mn_bench_thread_index(b), nt = mn_bench_threads(b);
  mn_stream_t *s = NULL;
  if (!t->heap) {
    /* Slot ti is only ever touched by the thread of index ti, one run at a time. */
    if (!g_thr_streams[ti] && mn_stream_create(mn_device_sim(0), &g_thr_streams[ti]) != MN_OK)
      mn_anchor_die("mn_stream_create");
    s = g_thr_streams[ti];
  }
  if (ti == 0) { /* before the start barrier (the first mn_bench_next): no other thread reads it yet */
    pthread_mutex_lock(&g_thr.mu);
    g_thr.start = INFINITY;
    g_thr.end = 0;
    g_thr.pairs = 0;
    g_thr.left = nt;
    pthread_mutex_unlock(&g_thr.mu);
  }
  long long it = 0;
  double t0 = 0;
  void *p = NULL;
  while (mn_bench_next(b)) {
    if (it++ == 0) t0 = mn_bench_now_s();
    if (t->heap) {
      p = t->heap->malloc_fn(MN_ANCHOR_FIXED_SIZE);
      if (!p) mn_anchor_die("malloc");
      t->heap->free_fn(p);
    } else {
      MN_BENCH_OK(mn_allocator_alloc(*t->shared, MN_ANCHOR_FIXED_SIZE, s, &p));
      MN_BENCH_OK(mn_allocator_free(*t->shared, p));
    }
  }
  double t1 = mn_bench_now_s();
  pthread_mutex_lock(&g_thr.mu);
  if (it && t0 < g_thr.start) g_thr.start = t0;
  if (t1 > g_thr.end) g_thr.end = t1;
  g_thr.pairs += it;
  bool last = --g_thr.left == 0;
  double rate = last && g_thr.end > g_thr.start ? (double)g_thr.pairs / (g_thr.end - g_thr.start) : 0;
  pthread_mutex_unlock(&g_thr.mu);
  if (last) {
    if (nt == 1) g_rate1[t->index] = rate;
    mn_bench_counter(b, "pairs_per_s", rate);
    mn_bench_counter(b, "x_1thread", g_rate1[t->index] > 0 ? rate / g_rate1[t->index] : 0);
  }
  mn_bench_set_items(b, 1);
}

/* ---- the caching allocator's cached pair in its setups --------------------------------- */

static void pair_loop(mn_bench_t *b, mn_anchor_caching_t *w) {
  void *p = NULL;
  while (mn_bench_next(b)) {
    MN_BENCH_OK(mn_allocator_alloc(w->a, w->want, NULL, &p));
    MN_BENCH_OK(mn_allocator_free(w->a, p));
  }
  mn_bench_set_items(b, 1);
}

/* arg 0: frees pending on the other stream. */
static void bench_pending(mn_bench_t *b, void *arg) {
  mn_anchor_caching_t w;
  mn_anchor_caching_create(mn_device_sim(0), 10, mn_bench_arg(b, 0), &w);
  pair_loop(b, &w);
  /* active = live blocks + frees still pending: shows they stayed pending. */
  mn_alloc_stats_t st;
  MN_BENCH_OK(mn_allocator_get_stats(w.a, &st));
  mn_bench_counter(b, "still_pending", (double)(st.active[MN_POOL_ALL].current - (w.cached + 1)));
  mn_anchor_caching_destroy(&w);
}

/* arg: max frames (-1: no recorder; 0: the recorder without stacks, as MNEMO_TRACE). */
static void bench_recorder(mn_bench_t *b, void *arg) {
  int frames = *(const int *)arg;
  mn_anchor_caching_t w;
  mn_anchor_caching_create(mn_device_sim(0), 10, 0, &w);
  mn_trace_recorder_t *r = NULL;
  if (frames >= 0) {
    MN_BENCH_OK(mn_trace_recorder_create((size_t)1 << 16, &r));
    MN_BENCH_OK(mn_trace_recorder_set_stacks(r, (unsigned)frames));
    MN_BENCH_OK(mn_caching_allocator_set_trace_sink(w.a, mn_trace_recorder_sink_fn, r));
  }
  pair_loop(b, &w);
  if (r) {
    MN_BENCH_OK(mn_caching_allocator_set_trace_sink(w.a, NULL, NULL));
    mn_trace_recorder_destroy(r);
  }
  mn_anchor_caching_destroy(&w);
}

/* arg 0: cached blocks. */
static void bench_cached(mn_bench_t *b, void *arg) {
  mn_anchor_caching_t w;
  mn_anchor_caching_create(mn_device_sim(0), mn_bench_arg(b, 0), 0, &w);
  pair_loop(b, &w);
  mn_anchor_caching_destroy(&w);
}

int main(int argc, char **argv) {
  mn_anchor_reexec_for_tls(argv);
  const char *trace = DEFAULT_TRACE;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--trace")) {
      trace = argv[i + 1];
      memmove(&argv[i], &argv[i + 2], sizeof *argv * (size_t)(argc - i - 1)); /* argv[argc] (NULL) too */
      argc -= 2;
      break;
    }
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = (size_t)64 << 30;
  c.eager = false; /* pending_pair: work queued on a stream waits until it is advanced */
  if (mn_sim_configure(&c) != MN_OK) mn_anchor_die("mn_sim_configure");

  char why[512];
  if (!mn_anchor_seq_load(trace, MAX_PEAK, &g_seq, why, sizeof why)) {
    fprintf(stderr, "bench_alloc_anchors: %s\n", why);
    return 1;
  }
  fprintf(stderr,
          "trace %s: %zu pairs per run, %zu kept allocations; peak live %.1f MiB as recorded, "
          "%.1f MiB scaled (sizes / %zu)\n",
          g_seq.path, g_seq.npairs, g_seq.nkeep, (double)g_seq.peak_raw / 1048576.0, (double)g_seq.peak / 1048576.0,
          g_seq.divisor);

  static mn_anchor_heap_t heaps[MN_ANCHOR_HEAPS];
  static bool have[MN_ANCHOR_HEAPS];
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++) {
    have[k] = mn_anchor_heap_open((mn_anchor_heap_kind)k, &heaps[k], why, sizeof why);
    if (!have[k]) fprintf(stderr, "skipping the %s anchors: %s\n", heaps[k].name ? heaps[k].name : "?", why);
  }
  static const char *const heap_names[MN_ANCHOR_HEAPS] = {"glibc", "jemalloc", "mimalloc"};
  static target mnemo = {"mnemo_sim", NULL, true, 0, &g_thr_alloc}, mnemo_raw = {"mnemo_sim_raw", NULL, false, 0, NULL};
  static target ht[MN_ANCHOR_HEAPS];
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++) ht[k] = (target){heap_names[k], &heaps[k], true, 1 + k, NULL};

  char name[128];
  mn_bench_register("anchors/trace/mnemo_sim", bench_trace, &mnemo, 0, NULL);
  mn_bench_register("anchors/trace/mnemo_sim_raw", bench_trace, &mnemo_raw, 0, NULL);
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++)
    if (have[k]) {
      snprintf(name, sizeof name, "anchors/trace/%s", heap_names[k]);
      mn_bench_register(name, bench_trace, &ht[k], 0, NULL);
    }
  mn_bench_register("anchors/fixed_pair/mnemo_sim", bench_fixed, &mnemo, 0, NULL);
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++)
    if (have[k]) {
      snprintf(name, sizeof name, "anchors/fixed_pair/%s", heap_names[k]);
      mn_bench_register(name, bench_fixed, &ht[k], 0, NULL);
    }
  static const int threads[] = {1, 2, 4, 16};
  if (mn_caching_allocator_create(mn_device_sim(0), NULL, &g_thr_alloc) != MN_OK) mn_anchor_die("create");
  for (int i = 0; i < 4; i++) mn_bench_register_threads("anchors/threads/mnemo_sim", bench_threads, &mnemo, threads[i]);
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++)
    if (have[k]) {
      snprintf(name, sizeof name, "anchors/threads/%s", heap_names[k]);
      for (int i = 0; i < 4; i++) mn_bench_register_threads(name, bench_threads, &ht[k], threads[i]);
    }
  static const int64_t pending[] = {0, 10, 10000};
  for (int i = 0; i < 3; i++) mn_bench_register("anchors/pending_pair", bench_pending, NULL, 1, &pending[i]);
  static const int frames[] = {-1, 0, 16};
  static const char *const rec_names[] = {"off", "on", "stacks16"};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "anchors/recorder_pair/%s", rec_names[i]);
    mn_bench_register(name, bench_recorder, (void *)&frames[i], 0, NULL);
  }
  static const int64_t cached[] = {10, 1000, 10000, 100000};
  for (int i = 0; i < 4; i++) mn_bench_register("anchors/cached_pair", bench_cached, NULL, 1, &cached[i]);

  int rc = mn_bench_main(argc, argv);
  for (int i = 0; i < MAX_THREADS; i++)
    if (g_thr_streams[i] && mn_stream_destroy(g_thr_streams[i]) != MN_OK) mn_anchor_die("mn_stream_destroy");
  mn_allocator_destroy(g_thr_alloc);
  mn_anchor_seq_free(&g_seq);
  return rc;
}
