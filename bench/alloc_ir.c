/* bench/alloc_ir.c: one host-cost anchor case run for N alloc+free pairs, for
 * instruction counts under callgrind (bench/alloc_ir.sh runs each case twice,
 * with N1 and N2 pairs, and prints (Ir(N2) - Ir(N1)) / (pairs2 - pairs1)).
 * Only the work inside mn_alloc_ir_loop is meant to be counted
 * (`--toggle-collect=mn_alloc_ir_loop`); the difference also removes the
 * first run's one-time costs. No Google Benchmark needed.
 *   alloc_ir --list
 *   alloc_ir CASE N [--trace PATH]
 * Cases: trace/{glibc,jemalloc,mimalloc,mnemo,mnemo_raw} (the trace's
 * sequence, bench/alloc_anchors.h; N rounded up to whole sequences),
 * fixed/{glibc,jemalloc,mimalloc,mnemo} (a 3072 B pair), cached/{10,1000,
 * 10000,100000} (the cached pair with that many cached blocks, as
 * bench_caching), pending/{0,10,10000} (the cached pair with that many frees
 * pending on another stream's events), recorder/{off,on,stacks16} (the cached
 * pair, 10 cached blocks, without and with the ring recorder).
 * Exit status: 0 measured, 1 failed, 3 skipped (a missing library: the line
 * says why). Single-threaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/alloc_anchors.h"

#ifndef MN_SOURCE_DIR
#define MN_SOURCE_DIR "."
#endif
#define DEFAULT_TRACE MN_SOURCE_DIR "/data/traces/gpt2_infer_var.trace"
#define MAX_PEAK ((uint64_t)256 << 20) /* general-purpose heaps: the trace scaled to <= 256 MiB live */
#define SIM_CAPACITY ((size_t)8 << 30) /* 100k cached blocks and the unscaled trace; fits valgrind */

static const char *const g_cases[] = {
    "trace/glibc",   "trace/jemalloc",  "trace/mimalloc", "trace/mnemo",    "trace/mnemo_raw",
    "fixed/glibc",   "fixed/jemalloc",  "fixed/mimalloc", "fixed/mnemo",    "cached/10",
    "cached/1000",   "cached/10000",    "cached/100000",  "pending/0",      "pending/10",
    "pending/10000", "recorder/off",    "recorder/on",    "recorder/stacks16",
};

typedef enum { K_TRACE_HEAP, K_TRACE_MNEMO, K_FIXED_HEAP, K_CACHED_PAIR } kind;

typedef struct {
  kind k;
  long long runs;            /* sequences (trace) or pairs */
  const mn_anchor_seq_t *seq;
  const mn_anchor_heap_t *heap;
  mn_allocator_t *a;
  bool scaled;
  size_t size;
  void **slots;
} loop_args;

/* The measured part; noinline and external so callgrind can toggle on its name. */
__attribute__((noinline)) int mn_alloc_ir_loop(const loop_args *l);
__attribute__((noinline)) int mn_alloc_ir_loop(const loop_args *l) {
  void *p = NULL;
  for (long long r = 0; r < l->runs; r++) {
    switch (l->k) {
    case K_TRACE_HEAP:
      if (!mn_anchor_seq_run_heap(l->seq, l->heap, l->slots)) return 1;
      break;
    case K_TRACE_MNEMO:
      if (!mn_anchor_seq_run_mnemo(l->seq, l->a, l->scaled, l->slots)) return 1;
      break;
    case K_FIXED_HEAP:
      if (!(p = l->heap->malloc_fn(l->size))) return 1;
      l->heap->free_fn(p);
      break;
    case K_CACHED_PAIR:
      if (mn_allocator_alloc(l->a, l->size, NULL, &p) != MN_OK) return 1;
      if (mn_allocator_free(l->a, p) != MN_OK) return 1;
      break;
    }
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: alloc_ir CASE N [--trace PATH] | alloc_ir --list\ncases:");
  for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) fprintf(stderr, " %s", g_cases[i]);
  fprintf(stderr, "\n");
  return 1;
}

static mn_anchor_heap_kind heap_kind(const char *name) {
  static const char *const names[MN_ANCHOR_HEAPS] = {"glibc", "jemalloc", "mimalloc"};
  for (int k = 0; k < MN_ANCHOR_HEAPS; k++)
    if (!strcmp(name, names[k])) return (mn_anchor_heap_kind)k;
  return MN_ANCHOR_HEAPS;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--list")) {
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) printf("%s\n", g_cases[i]);
    return 0;
  }
  if (argc != 3 && !(argc == 5 && !strcmp(argv[3], "--trace"))) return usage();
  const char *name = argv[1], *trace = argc == 5 ? argv[4] : DEFAULT_TRACE;
  long long n = atoll(argv[2]);
  if (n <= 0) return usage();
  const char *arg = strchr(name, '/');
  if (!arg) return usage();
  arg++;

  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = SIM_CAPACITY;
  c.eager = false; /* pending/: work queued on a stream waits until it is advanced */
  if (mn_sim_configure(&c) != MN_OK) mn_anchor_die("mn_sim_configure");
  mn_device_t sim = mn_device_sim(0);

  char why[512] = "";
  loop_args l = {0};
  mn_anchor_heap_t heap;
  mn_anchor_seq_t seq = {0};
  mn_anchor_caching_t w = {0};
  mn_trace_recorder_t *rec = NULL;
  void **keep = NULL;
  mn_allocator_t *own = NULL; /* the allocator of trace/mnemo* and fixed/mnemo */
  long long pairs = 0;
  bool is_trace = !strncmp(name, "trace/", 6), is_fixed = !strncmp(name, "fixed/", 6);

  if (is_trace && !mn_anchor_seq_load(trace, MAX_PEAK, &seq, why, sizeof why)) {
    fprintf(stderr, "alloc_ir: %s\n", why);
    return 1;
  }
  if (is_trace || is_fixed) {
    bool mnemo = !strncmp(arg, "mnemo", 5);
    if (mnemo) {
      if (strcmp(arg, "mnemo") && !(is_trace && !strcmp(arg, "mnemo_raw"))) return usage();
      if (mn_caching_allocator_create(sim, NULL, &own) != MN_OK) mn_anchor_die("mn_caching_allocator_create");
      l.a = own;
    } else {
      mn_anchor_heap_kind k = heap_kind(arg);
      if (k == MN_ANCHOR_HEAPS) return usage();
      if (!mn_anchor_heap_open(k, &heap, why, sizeof why)) {
        printf("%s: skipped: %s\n", name, why);
        return 3;
      }
      l.heap = &heap;
    }
    if (is_trace) {
      l.seq = &seq;
      l.scaled = strcmp(arg, "mnemo_raw") != 0;
      l.k = mnemo ? K_TRACE_MNEMO : K_TRACE_HEAP;
      l.runs = (n + (long long)seq.npairs - 1) / (long long)seq.npairs;
      pairs = l.runs * (long long)seq.npairs;
      l.slots = calloc(seq.nslots, sizeof *l.slots);
      if (!l.slots) mn_anchor_die("calloc");
      bool ok = mnemo ? mn_anchor_seq_keep_mnemo(&seq, l.a, l.scaled, &keep) : mn_anchor_seq_keep_heap(&seq, &heap, &keep);
      if (!ok) mn_anchor_die("the trace's kept allocations");
    } else {
      l.k = mnemo ? K_CACHED_PAIR : K_FIXED_HEAP;
      l.size = MN_ANCHOR_FIXED_SIZE;
      l.runs = pairs = n;
    }
  } else {
    long long cached = 10, pending = 0;
    int frames = -1;
    if (!strncmp(name, "cached/", 7)) cached = atoll(arg);
    else if (!strncmp(name, "pending/", 8)) pending = atoll(arg);
    else if (!strncmp(name, "recorder/", 9))
      frames = !strcmp(arg, "off") ? -1 : !strcmp(arg, "on") ? 0 : !strcmp(arg, "stacks16") ? 16 : -2;
    else return usage();
    if (cached <= 0 || pending < 0 || frames < -1) return usage();
    mn_anchor_caching_create(sim, cached, pending, &w);
    if (frames >= 0) {
      if (mn_trace_recorder_create((size_t)1 << 16, &rec) != MN_OK) mn_anchor_die("mn_trace_recorder_create");
      if (mn_trace_recorder_set_stacks(rec, (unsigned)frames) != MN_OK) mn_anchor_die("set_stacks");
      if (mn_caching_allocator_set_trace_sink(w.a, mn_trace_recorder_sink_fn, rec) != MN_OK) mn_anchor_die("set_trace_sink");
    }
    l.k = K_CACHED_PAIR;
    l.a = w.a;
    l.size = w.want;
    l.runs = pairs = n;
  }

  if (mn_alloc_ir_loop(&l) != 0) {
    fprintf(stderr, "alloc_ir: %s: an allocation failed: %s\n", name, l.heap ? "out of memory" : mn_last_error());
    return 1;
  }

  printf("%s: pairs=%lld", name, pairs);
  if (is_trace)
    printf(" trace=%s pairs_per_run=%zu kept=%zu divisor=%zu peak_bytes=%llu peak_raw_bytes=%llu", seq.path,
           seq.npairs, seq.nkeep, l.scaled ? seq.divisor : (size_t)1,
           (unsigned long long)(l.scaled ? seq.peak : seq.peak_raw), (unsigned long long)seq.peak_raw);
  printf("\n");

  if (rec) {
    if (mn_caching_allocator_set_trace_sink(w.a, NULL, NULL) != MN_OK) mn_anchor_die("set_trace_sink");
    mn_trace_recorder_destroy(rec);
  }
  if (w.a) mn_anchor_caching_destroy(&w);
  if (is_trace) {
    if (l.heap) mn_anchor_seq_release_heap(&seq, &heap, keep);
    else mn_anchor_seq_release_mnemo(&seq, l.a, keep);
  }
  if (own) mn_allocator_destroy(own);
  free(l.slots);
  mn_anchor_seq_free(&seq);
  return 0;
}
