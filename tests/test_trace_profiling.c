/* tests/test_trace_profiling.c: the recording side: the NVTX switch and
 * range balance, the ring recorder (bound, threads, round trip to replay, C
 * stacks and MNEMO_TRACE_STACKS with --stacks-env), trace
 * version 2 (devices), a trace's devices as replayed (mn_trace_devices), the RMM
 * CSV importer and the text summaries. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "mn_test.h"
#include "runtime/hostmem.h"

#define MiB ((uint64_t)1 << 20)
#define KiB ((uint64_t)1 << 10)

static mn_device_t SIM0;

static const char *tmp_path(const char *tag) {
  static char buf[256];
  snprintf(buf, sizeof buf, "/tmp/mnemo_test_prof_%d_%s.trace", (int)getpid(), tag);
  return buf;
}

/* ---- NVTX ---------------------------------------------------------------------- */

MN_TEST(nvtx_switch_and_balance) {
  mn_nvtx_counters_t c0, c1;
  mn_nvtx_set_enabled(false);
  MN_CHECK(!mn_nvtx_enabled());
  mn_nvtx_get_counters(&c0);
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.pushes == c0.pushes && c1.pops == c0.pops); /* off: nothing counted */

  mn_nvtx_set_enabled(true);
  MN_CHECK(mn_nvtx_enabled());
  mn_nvtx_get_counters(&c0);
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.pushes == c0.pushes + 1 && c1.pops == c0.pops + 1 && c1.thread_depth == 0);
  MN_CHECK(c1.thread_last_name && strcmp(c1.thread_last_name, "mnemo.alloc") == 0 && c1.thread_last_nbytes == 4096);
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_nvtx_get_counters(&c1); /* the free's payload is the block's size, through the size_of slot */
  MN_CHECK(strcmp(c1.thread_last_name, "mnemo.free") == 0 && c1.thread_last_nbytes == 4096);
  void *odd = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 1000, NULL, &odd));
  MN_CHECK_OK(mn_allocator_free(a, odd));
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.thread_last_nbytes == 1024); /* rounded to the 512-byte block multiple */
  mn_nvtx_get_counters(&c0);
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  /* A failed free (not ours) opens and closes its range too; copies open one each. */
  MN_CHECK_ERR(mn_allocator_free(a, (void *)0x10), MN_ERR_INVALID_ARGUMENT, "");
  char src[64] = "abc", dst[64];
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &s));
  MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), dst, mn_device_cpu(), src, sizeof src, s, 0));
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.pushes == c0.pushes + 3); /* empty_cache, failed free, copy */
  MN_CHECK(c1.pushes - c1.pops == c0.pushes - c0.pops && c1.thread_depth == 0);

  /* OOM recovery (free the cache, retry) opens its own range inside the alloc's:
   * 600 MiB cached, then 700 MiB asked of a 1 GiB device. */
  void *big = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 600 * MiB, NULL, &big));
  MN_CHECK_OK(mn_allocator_free(a, big));
  mn_nvtx_get_counters(&c0);
  MN_CHECK_OK(mn_allocator_alloc(a, 700 * MiB, NULL, &big));
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.pushes == c0.pushes + 2 && c1.pops == c0.pops + 2 && c1.thread_depth == 0);
  MN_CHECK_OK(mn_allocator_free(a, big));
  mn_allocator_destroy(a);
  mn_nvtx_set_enabled(false);
  /* A pop without an open range (switched on between push and pop) changes nothing. */
  mn_nvtx_get_counters(&c0);
  MN_CHECK(c0.thread_depth == 0);
}

/* Ranges come from the dispatch: every allocator has them, and a stack of
 * adaptors over an allocator opens one range per call, not one per layer. */
MN_TEST(nvtx_every_allocator) {
  mn_nvtx_counters_t c0, c1;
  mn_allocator_t *naive = NULL, *stats = NULL, *limit = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(SIM0, &naive));
  MN_CHECK_OK(mn_statistics_adaptor_create(naive, 0, &stats));
  MN_CHECK_OK(mn_limiting_adaptor_create(stats, 1 * MiB, 0, &limit));
  mn_allocator_t *each[] = {naive, stats, limit};
  const uint64_t ranges[] = {2, 3, 3}; /* the naive allocator has no cache, so no empty_cache range */
  mn_nvtx_set_enabled(true);
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
    mn_test_case = mn_allocator_name(each[i]);
    void *p = NULL;
    mn_nvtx_get_counters(&c0);
    MN_CHECK_OK(mn_allocator_alloc(each[i], 4096, NULL, &p));
    mn_nvtx_get_counters(&c1);
    MN_CHECK(c1.pushes == c0.pushes + 1 && c1.pops == c0.pops + 1 && c1.thread_depth == 0);
    MN_CHECK_OK(mn_allocator_free(each[i], p));
    MN_CHECK_OK(mn_allocator_empty_cache(each[i]));
    mn_nvtx_get_counters(&c1);
    MN_CHECK(c1.pushes == c0.pushes + ranges[i] && c1.pops == c0.pops + ranges[i] && c1.thread_depth == 0);
  }
  /* A refused allocation (over the limit) still closes its range; nbytes == 0 opens none. */
  void *p = NULL;
  mn_nvtx_get_counters(&c0);
  MN_CHECK_ERR(mn_allocator_alloc(limit, 2 * MiB, NULL, &p), MN_ERR_OUT_OF_MEMORY, "");
  MN_CHECK_OK(mn_allocator_alloc(limit, 0, NULL, &p));
  MN_CHECK(p == NULL);
  mn_nvtx_get_counters(&c1);
  MN_CHECK(c1.pushes == c0.pushes + 1 && c1.pops == c0.pops + 1 && c1.thread_depth == 0);
  mn_nvtx_set_enabled(false);
  mn_allocator_destroy(limit);
  mn_allocator_destroy(stats);
  mn_allocator_destroy(naive);
}

/* ---- ring recorder ---------------------------------------------------------------- */

static mn_trace_event_t mk(mn_trace_action act, uint64_t t_us, uintptr_t addr, size_t size, size_t req) {
  mn_trace_event_t e = {.action = act, .time_ns = t_us * 1000, .device = SIM0, .stream_id = 0,
                        .address = addr, .size = size, .requested_size = req};
  return e;
}

MN_TEST(recorder_ring_bound_and_pre) {
  mn_trace_recorder_t *r = NULL;
  MN_CHECK_ERR(mn_trace_recorder_create(0, &r), MN_ERR_INVALID_ARGUMENT, "capacity");
  MN_CHECK_OK(mn_trace_recorder_create(4, &r));
  if (!r) return;
  /* A (0x1000) and B (0x2000) allocated; A freed; C (0x3000) allocated; B freed. */
  mn_trace_event_t ev[] = {mk(MN_TRACE_ALLOC, 10, 0x1000, 1024, 1000), mk(MN_TRACE_ALLOC, 11, 0x2000, 2048, 2000),
                           mk(MN_TRACE_FREE_REQUESTED, 12, 0x1000, 1024, 1000),
                           mk(MN_TRACE_FREE_COMPLETED, 13, 0x1000, 1024, 1000),
                           mk(MN_TRACE_ALLOC, 14, 0x3000, 512, 500), mk(MN_TRACE_FREE_REQUESTED, 15, 0x2000, 2048, 2000)};
  for (size_t i = 0; i < 6; i++) mn_trace_recorder_sink_fn(r, &ev[i]);
  mn_trace_recorder_stats_t st;
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &st));
  MN_CHECK(st.recorded == 6 && st.overwritten == 2 && st.held == 4 && st.capacity == 4);
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(r, &t));
  if (t) {
    /* The window: free A, completed A, alloc C, free B; A and B were made before it. */
    MN_CHECK(t->nentries == 6);
    MN_CHECK(t->entries[0].pre && t->entries[0].address == 0x1000 && t->entries[0].size == 1000 &&
             t->entries[0].block_size == 1024);
    MN_CHECK(t->entries[1].pre && t->entries[1].address == 0x2000 && t->entries[1].size == 2000);
    MN_CHECK(!t->entries[2].pre && t->entries[2].action == MN_TRACE_FREE_REQUESTED && t->entries[2].time_us == 0);
    MN_CHECK(t->entries[4].action == MN_TRACE_ALLOC && t->entries[4].size == 500 && t->entries[4].block_size == 512 &&
             t->entries[4].time_us == 2);
    MN_CHECK(!strcmp(mn_trace_meta_get(t, "recorder_overwritten"), "2"));
    MN_CHECK(t->version == 1);
    MN_CHECK_OK(mn_trace_validate(t));
    mn_trace_destroy(t);
  }
  const char *p = tmp_path("ring");
  MN_CHECK_OK(mn_trace_recorder_write(r, p));
  mn_trace_t *back = NULL;
  MN_CHECK_OK(mn_trace_read(p, &back));
  MN_CHECK(back && back->nentries == 6);
  mn_trace_destroy(back);
  remove(p);
  mn_trace_recorder_clear(r);
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &st));
  MN_CHECK(st.recorded == 0 && st.held == 0);
  mn_trace_recorder_destroy(r);
}

typedef struct worker_s {
  mn_allocator_t *a;
  int n;
  int failures;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  void *p[8] = {0};
  for (int i = 0; i < w->n; i++) {
    int k = i % 8;
    if (p[k] && mn_allocator_free(w->a, p[k]) != MN_OK) w->failures++;
    p[k] = NULL;
    if (mn_allocator_alloc(w->a, (size_t)(1 + (i * 7919) % 300000), NULL, &p[k]) != MN_OK) w->failures++;
  }
  for (int k = 0; k < 8; k++)
    if (p[k] && mn_allocator_free(w->a, p[k]) != MN_OK) w->failures++;
  return NULL;
}

typedef struct dev_check_s {
  const mn_trace_t *t;
  uint32_t device;
  size_t steps, wrong;
} dev_check_t;

/* Step indices name entries of the original trace, on the replayed device. */
static void check_step_device(void *user, const mn_replay_step_t *s) {
  dev_check_t *c = user;
  c->steps++;
  if (s->entry >= c->t->nentries || c->t->entries[s->entry].device != c->device) c->wrong++;
}

/* Four threads on two allocators (two SIM devices) feed one recorder. */
MN_TEST(recorder_threads_two_devices) {
  mn_trace_recorder_t *r = NULL;
  MN_CHECK_OK(mn_trace_recorder_create(1 << 16, &r));
  mn_allocator_t *a[2] = {NULL, NULL};
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a[0]));
  MN_CHECK_OK(mn_caching_allocator_create(mn_device_sim(1), NULL, &a[1]));
  if (!r || !a[0] || !a[1]) return;
  for (int d = 0; d < 2; d++) MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a[d], mn_trace_recorder_sink_fn, r));
  pthread_t th[4];
  worker_t w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker_t){a[i % 2], 500, 0};
    pthread_create(&th[i], NULL, worker, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    MN_CHECK(w[i].failures == 0);
  }
  for (int d = 0; d < 2; d++) MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a[d], NULL, NULL));
  mn_alloc_stats_t s[2];
  for (int d = 0; d < 2; d++) MN_CHECK_OK(mn_allocator_get_stats(a[d], &s[d]));
  mn_trace_recorder_stats_t st;
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &st));
  MN_CHECK(st.overwritten == 0 && st.recorded > 4000);
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(r, &t));
  if (t) {
    size_t allocs[2] = {0, 0};
    for (size_t i = 0; i < t->nentries; i++)
      if (t->entries[i].action == MN_TRACE_ALLOC && t->entries[i].device < 2) allocs[t->entries[i].device]++;
    MN_CHECK(allocs[0] == 1000 && allocs[1] == 1000);
    /* Indices go by first appearance, which the threads decide. */
    const char *names = mn_trace_meta_get(t, "device_names");
    MN_CHECK(names && (!strcmp(names, "sim:0 sim:1") || !strcmp(names, "sim:1 sim:0")));
    int sim1 = names && !strcmp(names, "sim:1 sim:0") ? 0 : 1;
    /* Version 2 on disk, read back; replaying device 1 alone gives its live peak. */
    const char *p = tmp_path("twodev");
    MN_CHECK_OK(mn_trace_write(t, p));
    mn_trace_t *back = NULL;
    MN_CHECK_OK(mn_trace_read(p, &back));
    remove(p);
    if (back) {
      MN_CHECK(back->version == 2 && back->nentries == t->nentries);
      mn_allocator_t *fresh = NULL;
      MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &fresh));
      mn_replay_options_t o = mn_replay_options_default();
      o.trace_device = sim1;
      dev_check_t dc = {back, (uint32_t)sim1, 0, 0};
      o.on_step = check_step_device;
      o.on_step_user = &dc;
      mn_replay_result_t res;
      MN_CHECK_OK(mn_trace_replay(back, fresh, &o, &res));
      MN_CHECK(dc.steps == 2000 && dc.wrong == 0); /* 1000 allocs + 1000 frees */
      MN_CHECK(res.trace_device == (uint32_t)sim1 && res.trace_devices == 2 && res.allocs == 1000);
      /* Two threads interleave differently from a serial replay: the peak of
       * bytes asked for is what must agree (the trace's order is the order the
       * allocator saw). */
      MN_CHECK(res.peak_requested == s[1].requested_bytes[MN_POOL_ALL].peak);
      mn_allocator_destroy(fresh);
      o.trace_device = 5;
      MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &fresh));
      MN_CHECK_ERR(mn_trace_replay(back, fresh, &o, &res), MN_ERR_INVALID_ARGUMENT, "no entries on device 5");
      mn_allocator_destroy(fresh);
      mn_trace_destroy(back);
    }
    mn_trace_destroy(t);
  }
  for (int d = 0; d < 2; d++) mn_allocator_destroy(a[d]);
  mn_trace_recorder_destroy(r);
}

/* Writes the recorder to a file (then destroys it) and reads the file back;
 * NULL (a check failed) when either step fails. */
static mn_trace_t *written_and_read(mn_trace_recorder_t *r, const char *tag) {
  const char *path = tmp_path(tag);
  MN_CHECK_OK(mn_trace_recorder_write(r, path));
  mn_trace_recorder_destroy(r);
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_read(path, &t));
  remove(path);
  return t;
}

/* Round trip: a live run on SIM recorded by the ring, written, read, replayed
 * on a fresh allocator with the same config: the same peaks. */
MN_TEST(round_trip_live_equals_replay) {
  static const char *configs[] = {"", "expandable_segments:True", "max_split_size_mb:40,roundup_power2_divisions:4"};
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    MN_CHECK_OK(mn_caching_config_parse(configs[c], &cfg));
    mn_trace_recorder_t *r = NULL;
    MN_CHECK_OK(mn_trace_recorder_create(100000, &r));
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, &cfg, &a));
    if (!r || !a) return;
    MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r));
    mn_stream_t *s2 = NULL;
    MN_CHECK_OK(mn_stream_create(SIM0, &s2));
    void *p[64] = {0};
    unsigned long long x = 12345;
    for (int i = 0; i < 3000; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      int k = (int)(x % 64);
      if (p[k]) {
        MN_CHECK_OK(mn_allocator_free(a, p[k]));
        p[k] = NULL;
      } else {
        size_t sz = (x >> 8) % 4 == 0 ? (size_t)((x >> 16) % (24 * MiB)) + 1 : (size_t)((x >> 16) % (900 * KiB)) + 1;
        MN_CHECK_OK(mn_allocator_alloc(a, sz, (x >> 40) & 1 ? s2 : NULL, &p[k]));
      }
      if (i == 1500) MN_CHECK_OK(mn_allocator_empty_cache(a));
    }
    for (int k = 0; k < 64; k++)
      if (p[k]) MN_CHECK_OK(mn_allocator_free(a, p[k]));
    mn_alloc_stats_t live;
    MN_CHECK_OK(mn_allocator_get_stats(a, &live));
    MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
    mn_allocator_destroy(a);
    MN_CHECK_OK(mn_stream_destroy(s2));
    mn_trace_t *t = written_and_read(r, "live");
    if (!t) return;
    size_t segs = 0, empties = 0;
    for (size_t i = 0; i < t->nentries; i++) {
      segs += t->entries[i].action == MN_TRACE_SEGMENT_ALLOC || t->entries[i].action == MN_TRACE_SEGMENT_MAP;
      empties += t->entries[i].action == MN_TRACE_EMPTY_CACHE;
    }
    MN_CHECK(segs > 0 && empties == 1);
    mn_allocator_t *b = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, &cfg, &b));
    mn_replay_result_t res;
    MN_CHECK_OK(mn_trace_replay(t, b, NULL, &res));
    mn_allocator_destroy(b);
    /* The trace's empty_cache line is replayed too: every figure agrees. */
    MN_CHECK(res.empty_caches == 1);
    MN_CHECK(res.peak_allocated == live.allocated_bytes[MN_POOL_ALL].peak);
    MN_CHECK(res.peak_requested == live.requested_bytes[MN_POOL_ALL].peak);
    MN_CHECK(res.peak_reserved == live.reserved_bytes[MN_POOL_ALL].peak);
    MN_CHECK(res.device_allocs == live.num_device_alloc && res.device_frees == live.num_device_free);
    if (res.peak_allocated != live.allocated_bytes[MN_POOL_ALL].peak)
      printf("  config \"%s\": live peak allocated %lld, replay %lld\n", configs[c],
             (long long)live.allocated_bytes[MN_POOL_ALL].peak, (long long)res.peak_allocated);
    mn_trace_destroy(t);
  }
}

/* Same, without empty_cache: every peak equal, reserved included. */
MN_TEST(round_trip_peaks_exact) {
  mn_trace_recorder_t *r = NULL;
  MN_CHECK_OK(mn_trace_recorder_create(100000, &r));
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  if (!r || !a) return;
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r));
  void *p[32] = {0};
  for (int i = 0; i < 2000; i++) {
    int k = (i * 17) % 32;
    if (p[k]) MN_CHECK_OK(mn_allocator_free(a, p[k]));
    p[k] = NULL;
    MN_CHECK_OK(mn_allocator_alloc(a, (size_t)((i * 104729) % (30 * MiB)) + 1, NULL, &p[k]));
  }
  for (int k = 0; k < 32; k++)
    if (p[k]) MN_CHECK_OK(mn_allocator_free(a, p[k]));
  mn_alloc_stats_t live;
  MN_CHECK_OK(mn_allocator_get_stats(a, &live));
  mn_allocator_destroy(a);
  mn_trace_t *t = written_and_read(r, "exact");
  if (!t) return;
  mn_allocator_t *b = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &b));
  mn_replay_result_t res;
  MN_CHECK_OK(mn_trace_replay(t, b, NULL, &res));
  mn_allocator_destroy(b);
  MN_CHECK(res.peak_allocated == live.allocated_bytes[MN_POOL_ALL].peak);
  MN_CHECK(res.peak_reserved == live.reserved_bytes[MN_POOL_ALL].peak);
  MN_CHECK(res.device_allocs == live.num_device_alloc);
  mn_trace_destroy(t);
}

/* ---- C stacks (mn_trace_recorder_set_stacks) --------------------------------------
 * The call sites the stacks must name: exported (this test links with
 * ENABLE_EXPORTS, -rdynamic, so dladdr finds them) and never inlined. */
__attribute__((noinline)) mn_status prof_site_alloc(mn_allocator_t *a, size_t n, void **p);
__attribute__((noinline)) mn_status prof_site_free(mn_allocator_t *a, void *p);
__attribute__((noinline)) mn_status prof_site_alloc(mn_allocator_t *a, size_t n, void **p) {
  mn_status st = mn_allocator_alloc(a, n, NULL, p);
  __asm__ volatile("" ::: "memory"); /* keeps the call from being a tail call */
  return st;
}
__attribute__((noinline)) mn_status prof_site_free(mn_allocator_t *a, void *p) {
  mn_status st = mn_allocator_free(a, p);
  __asm__ volatile("" ::: "memory");
  return st;
}

/* round_trip_peaks_exact's workload through the two sites; *live gets the stats. */
static void stacks_workload(mn_trace_recorder_t *r, mn_alloc_stats_t *live) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  if (!a) return;
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r));
  void *p[32] = {0};
  for (int i = 0; i < 2000; i++) {
    int k = (i * 17) % 32;
    if (p[k]) MN_CHECK_OK(prof_site_free(a, p[k]));
    p[k] = NULL;
    MN_CHECK_OK(prof_site_alloc(a, (size_t)((i * 104729) % (30 * MiB)) + 1, &p[k]));
  }
  for (int k = 0; k < 32; k++)
    if (p[k]) MN_CHECK_OK(prof_site_free(a, p[k]));
  MN_CHECK_OK(mn_allocator_get_stats(a, live));
  mn_allocator_destroy(a);
}

/* Whether every alloc and free_requested of t has a stack whose innermost
 * frame is this test's site, in this executable. */
static bool stacks_name_sites(const mn_trace_t *t) {
  size_t checked = 0;
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->pre || (e->action != MN_TRACE_ALLOC && e->action != MN_TRACE_FREE_REQUESTED &&
                   e->action != MN_TRACE_SEGMENT_ALLOC))
      continue;
    const uint32_t *ids = NULL;
    size_t n = mn_trace_stack_get(t, e->stack, &ids);
    const mn_trace_frame_t *f = n ? mn_trace_frame_get(t, ids[0]) : NULL;
    const char *want = e->action == MN_TRACE_FREE_REQUESTED ? "prof_site_free" : "prof_site_alloc";
    if (!f || strcmp(f->name, want) != 0 || !strstr(f->file, "test_trace_profiling") || f->line != 0) {
      printf("  entry %zu (%s): stack %u, innermost frame %s in %s\n", i, mn_trace_action_name(e->action),
             (unsigned)e->stack, f ? f->name : "(none)", f ? f->file : "");
      return false;
    }
    /* the caller of the site is this file's workload (static: a name near it, or an offset) */
    if (n < 2) return false;
    checked++;
  }
  return checked > 0;
}

/* A live run on SIM recorded with stacks: written and read back it is a
 * version 3 trace whose stacks start at this test's call sites, and it
 * replays to the same peaks as the run (and as the same run without stacks). */
MN_TEST(recorder_stacks) {
  mn_trace_recorder_t *r = NULL, *plain = NULL;
  MN_CHECK_OK(mn_trace_recorder_create(100000, &r));
  MN_CHECK_OK(mn_trace_recorder_create(100000, &plain));
  if (!r || !plain) return;
  MN_CHECK_ERR(mn_trace_recorder_set_stacks(r, MN_TRACE_RECORDER_STACK_MAX + 1), MN_ERR_INVALID_ARGUMENT, "65");
  MN_CHECK_OK(mn_trace_recorder_set_stacks(r, 8));
  mn_trace_recorder_stats_t rs;
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &rs));
  MN_CHECK(rs.max_frames == 8 && rs.stacks == 0 && rs.stackless == 0);
  mn_alloc_stats_t live, live_plain;
  stacks_workload(r, &live);
  stacks_workload(plain, &live_plain);
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &rs));
  MN_CHECK(rs.stacks > 0 && rs.stacks < 100 && rs.stack_pcs > rs.stacks && rs.stackless == 0);
  MN_CHECK(live.allocated_bytes[MN_POOL_ALL].peak == live_plain.allocated_bytes[MN_POOL_ALL].peak &&
           live.reserved_bytes[MN_POOL_ALL].peak == live_plain.reserved_bytes[MN_POOL_ALL].peak);
  mn_trace_t *t = written_and_read(r, "stacks"), *tp = written_and_read(plain, "plain");
  if (t && tp) {
    MN_CHECK(t->version == 3 && tp->version == 1 && tp->nframes == 0);
    MN_CHECK(t->nentries == tp->nentries && t->nstacks >= 2 && t->nframes >= 3);
    MN_CHECK(stacks_name_sites(t));
    for (uint32_t s = 1; s <= t->nstacks; s++) MN_CHECK(mn_trace_stack_get(t, s, NULL) <= 8);
    mn_replay_result_t res[2];
    for (int k = 0; k < 2; k++) {
      mn_allocator_t *b = NULL;
      MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &b));
      MN_CHECK_OK(mn_trace_replay(k ? tp : t, b, NULL, &res[k]));
      mn_allocator_destroy(b);
    }
    MN_CHECK(res[0].peak_allocated == live.allocated_bytes[MN_POOL_ALL].peak &&
             res[0].peak_reserved == live.reserved_bytes[MN_POOL_ALL].peak);
    MN_CHECK(res[0].peak_allocated == res[1].peak_allocated && res[0].peak_reserved == res[1].peak_reserved &&
             res[0].peak_requested == res[1].peak_requested && res[0].device_allocs == res[1].device_allocs);
  }
  mn_trace_destroy(t);
  mn_trace_destroy(tp); /* written_and_read destroyed both recorders */
  /* On, then off again: new events get no stack; clear drops the table. */
  MN_CHECK_OK(mn_trace_recorder_create(100000, &r));
  if (!r) return;
  MN_CHECK_OK(mn_trace_recorder_set_stacks(r, 2));
  mn_alloc_stats_t again;
  stacks_workload(r, &again);
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &rs));
  MN_CHECK(rs.stacks > 0 && rs.held > 0);
  MN_CHECK_OK(mn_trace_recorder_set_stacks(r, 0));
  mn_trace_recorder_clear(r);
  MN_CHECK_OK(mn_trace_recorder_get_stats(r, &rs));
  MN_CHECK(rs.max_frames == 0 && rs.stacks == 0 && rs.stack_pcs == 0 && rs.held == 0);
  stacks_workload(r, &again);
  t = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(r, &t));
  if (t) MN_CHECK(t->nframes == 0 && t->nstacks == 0 && t->nentries > 0);
  mn_trace_destroy(t);
  mn_trace_recorder_destroy(r);
}

typedef struct stack_thread_s {
  mn_allocator_t *a;
  int seed, failures; /* the thread's own count: the check macros are not thread-safe */
} stack_thread_t;

static void *stack_thread(void *arg) {
  stack_thread_t *st = arg;
  for (int i = 0; i < 300; i++) {
    void *p = NULL;
    st->failures += prof_site_alloc(st->a, (size_t)(1 + (i * 7919 + st->seed) % 100000), &p) != MN_OK;
    if (p) st->failures += prof_site_free(st->a, p) != MN_OK;
  }
  return NULL;
}

/* Four threads, four allocators, one recorder with stacks: every event is kept
 * with the right stack. */
MN_TEST(recorder_stacks_threads) {
  mn_trace_recorder_t *r = NULL;
  MN_CHECK_OK(mn_trace_recorder_create(10000, &r));
  if (!r) return;
  MN_CHECK_OK(mn_trace_recorder_set_stacks(r, MN_TRACE_RECORDER_STACK_MAX));
  stack_thread_t args[4];
  pthread_t th[4];
  for (int k = 0; k < 4; k++) {
    args[k].seed = k;
    args[k].failures = 0;
    args[k].a = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &args[k].a));
    if (args[k].a) MN_CHECK_OK(mn_caching_allocator_set_trace_sink(args[k].a, mn_trace_recorder_sink_fn, r));
  }
  for (int k = 0; k < 4; k++) MN_CHECK(pthread_create(&th[k], NULL, stack_thread, &args[k]) == 0);
  for (int k = 0; k < 4; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < 4; k++) MN_CHECK(args[k].failures == 0);
  for (int k = 0; k < 4; k++) {
    MN_CHECK_OK(mn_caching_allocator_set_trace_sink(args[k].a, NULL, NULL));
    mn_allocator_destroy(args[k].a);
  }
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(r, &t));
  if (t) {
    size_t allocs = 0;
    for (size_t i = 0; i < t->nentries; i++) allocs += t->entries[i].action == MN_TRACE_ALLOC;
    MN_CHECK(allocs == 1200 && stacks_name_sites(t));
  }
  mn_trace_destroy(t);
  mn_trace_recorder_destroy(r);
}

/* The recorder with stacks, every host allocation failing in turn: a failed
 * intern in the sink leaves the event without a stack (absorbed, counted in
 * stackless); anything else fails with MN_ERR_OUT_OF_MEMORY; nothing leaks
 * (LSan in the ASan build). */
static mn_status stacks_fault_workload(uint64_t *stackless) {
  mn_trace_recorder_t *r = NULL;
  mn_allocator_t *a = NULL;
  mn_trace_t *t = NULL;
  char *text = NULL;
  mn_status st = mn_trace_recorder_create(64, &r);
  if (st == MN_OK) st = mn_trace_recorder_set_stacks(r, 4);
  if (st == MN_OK) st = mn_caching_allocator_create(SIM0, NULL, &a);
  if (st == MN_OK) st = mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink_fn, r);
  for (int i = 0; i < 8 && st == MN_OK; i++) {
    void *p = NULL;
    st = mn_allocator_alloc(a, (size_t)(i + 1) * 1000, NULL, &p);
    if (st == MN_OK) st = mn_allocator_free(a, p);
  }
  if (a) mn_allocator_destroy(a);
  if (st == MN_OK) st = mn_trace_recorder_to_trace(r, &t);
  if (st == MN_OK) st = mn_trace_format(t, &text, NULL);
  mn_trace_recorder_stats_t rs;
  if (st == MN_OK) st = mn_trace_recorder_get_stats(r, &rs);
  if (st == MN_OK) *stackless = rs.stackless;
  if (st == MN_OK && (t->nstacks == 0) != (rs.stackless == rs.recorded)) st = MN_ERR_INTERNAL;
  free(text);
  mn_trace_destroy(t);
  mn_trace_recorder_destroy(r);
  return st;
}

MN_TEST(recorder_stacks_host_faults) {
  uint64_t stackless = 0;
  mn__hostmem_fail_nth(INT64_MAX);
  MN_CHECK_OK(stacks_fault_workload(&stackless));
  int64_t calls = mn__hostmem_calls();
  mn__hostmem_fail_nth(0);
  MN_CHECK(calls > 10 && stackless == 0);
  int absorbed = 0;
  for (int64_t k = 1; k <= calls; k++) {
    stackless = 0;
    mn__hostmem_fail_nth(k);
    mn_status st = stacks_fault_workload(&stackless);
    mn__hostmem_fail_nth(0);
    absorbed += st == MN_OK && stackless > 0;
    MN_CHECK(st == MN_OK || (st == MN_ERR_OUT_OF_MEMORY && mn_last_error()[0]));
    if (st != MN_OK && st != MN_ERR_OUT_OF_MEMORY) printf("  fault %lld: %s\n", (long long)k, mn_last_error());
  }
  MN_CHECK(absorbed > 0); /* the sink's own allocations were among them */
  MN_CHECK_OK(stacks_fault_workload(&stackless));
}

/* --stacks-env: MNEMO_TRACE and MNEMO_TRACE_STACKS=4 set before the
 * process-wide recorder is made; the file written at exit is checked (and
 * removed) by an exit handler that runs after the recorder's. */
static char g_env_path[256];

static void check_env_trace_at_exit(void) {
  mn_trace_t *t = NULL;
  bool ok = mn_trace_read(g_env_path, &t) == MN_OK && t->version == 3 && stacks_name_sites(t);
  if (!ok) fprintf(stderr, "stacks_env: the trace written at exit: %s\n", t ? "no stacks" : mn_last_error());
  else printf("stacks_env: the trace written at exit has %zu stacks\n", t->nstacks);
  mn_trace_destroy(t);
  remove(g_env_path);
  if (!ok) _exit(1);
}

static int stacks_env(void) {
  mn_test_case = "stacks_env";
  snprintf(g_env_path, sizeof g_env_path, "%s", tmp_path("env"));
  setenv("MNEMO_TRACE", g_env_path, 1);
  setenv("MNEMO_TRACE_STACKS", "4", 1);
  atexit(check_env_trace_at_exit); /* before the recorder's own handler: runs after it */
  mn_trace_recorder_t *g = mn_trace_recorder_global();
  MN_CHECK(g != NULL);
  if (!g) return mn_test_finish();
  mn_trace_recorder_stats_t rs;
  MN_CHECK_OK(mn_trace_recorder_get_stats(g, &rs));
  MN_CHECK(rs.max_frames == 4);
  mn_alloc_stats_t live;
  stacks_workload(g, &live);
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(g, &t));
  if (t) MN_CHECK(stacks_name_sites(t));
  for (uint32_t s = 1; t && s <= t->nstacks; s++) MN_CHECK(mn_trace_stack_get(t, s, NULL) <= 4);
  mn_trace_destroy(t);
  return mn_test_finish();
}

/* Replay options: stop_after + at_stop, on_step, oom_retries. */
static void count_step(void *user, const mn_replay_step_t *s) {
  int64_t *peak = user;
  if (s->reserved > peak[0]) peak[0] = s->reserved;
  peak[1]++;
}
static void take_snapshot(void *user, mn_allocator_t *a) {
  mn_snapshot_t **snap = user;
  if (mn_allocator_snapshot(a, snap) != MN_OK) *snap = NULL;
}

MN_TEST(replay_options) {
  static const char T[] =
      "mnemo-trace 1\n"
      "0 alloc 0 0x1000 3145728\n"
      "1 alloc 0 0x2000 5242880\n"
      "2 free_requested 0 0x1000 3145728\n"
      "3 alloc 0 0x3000 1000\n"
      "4 free_requested 0 0x2000 5242880\n"
      "5 free_requested 0 0x3000 1000\n"
      "end 6\n";
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_parse(T, strlen(T), "opt.trace", &t));
  if (!t) return;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  mn_replay_options_t o = mn_replay_options_default();
  int64_t peak[2] = {0, 0};
  mn_snapshot_t *snap = NULL;
  o.on_step = count_step;
  o.on_step_user = peak;
  o.stop_after = 3;
  o.at_stop = take_snapshot;
  o.at_stop_user = &snap;
  mn_replay_result_t res;
  MN_CHECK_OK(mn_trace_replay(t, a, &o, &res));
  MN_CHECK(peak[1] == 4 && res.allocs == 3 && res.frees == 1);
  MN_CHECK(peak[0] == res.peak_reserved);
  MN_CHECK(snap != NULL);
  if (snap) {
    size_t active = 0;
    for (size_t i = 0; i < snap->nsegments; i++)
      for (size_t k = 0; k < snap->segments[i].nblocks; k++)
        active += snap->segments[i].blocks[k].state == MN_BLOCK_ACTIVE;
    MN_CHECK(active == 2); /* 5 MiB and 1000 B live after entry 3 */
    FILE *f = tmpfile();
    MN_CHECK_OK(mn_snapshot_print(snap, true, f));
    rewind(f);
    char text[4096] = {0};
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    MN_CHECK(got > 0 && strstr(text, "largest free") && strstr(text, "active") && strstr(text, "segments,"));
    mn_snapshot_free(snap);
  }
  mn_allocator_destroy(a);
  /* Stopping inside the pre allocations: the events are not replayed. */
  static const char P[] =
      "mnemo-trace 1\n"
      "pre alloc 0 0x1000 1048576\n"
      "pre alloc 0 0x2000 2097152\n"
      "0 alloc 0 0x3000 4096\n"
      "end 3\n";
  mn_trace_t *pt = NULL;
  MN_CHECK_OK(mn_trace_parse(P, strlen(P), "pre.trace", &pt));
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  o = mn_replay_options_default();
  o.stop_after = 0;
  snap = NULL;
  o.at_stop = take_snapshot;
  o.at_stop_user = &snap;
  MN_CHECK_OK(mn_trace_replay(pt, a, &o, &res));
  MN_CHECK(res.pre_allocs == 1 && res.allocs == 0 && snap != NULL);
  if (snap) mn_snapshot_free(snap);
  mn_allocator_destroy(a);
  mn_trace_destroy(pt);
  /* oom_retries: a limiting cap makes the second alloc fail; retries are counted. */
  mn_allocator_t *base = NULL, *lim = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &base));
  MN_CHECK_OK(mn_limiting_adaptor_create(base, 6 * MiB, MN_ADAPTOR_OWNS_UPSTREAM, &lim));
  o = mn_replay_options_default();
  o.oom_retries = 2;
  MN_CHECK_OK(mn_trace_replay(t, lim, &o, &res));
  MN_CHECK(res.ooms == 1 && res.retries == 2 && res.skipped_frees == 1);
  mn_allocator_destroy(lim);
  mn_trace_destroy(t);
}

/* ---- RMM importer ------------------------------------------------------------------ */

static mn_status rmm_str(const char *text, mn_trace_t **out) {
  return mn_trace_import_rmm_csv(text, strlen(text), "log.csv", out);
}

MN_TEST(rmm_import_samples) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_import_rmm_csv_file(MN_SOURCE_DIR "/tests/data/rmm/small.csv", &t));
  if (t) {
    /* The free of 0x7f8a50000000 (never allocated in the log) is a pre alloc. */
    MN_CHECK(t->nentries == 7);
    MN_CHECK(t->entries[0].pre && t->entries[0].address == 0x7f8a50000000 && t->entries[0].size == 4096);
    MN_CHECK(t->entries[1].action == MN_TRACE_ALLOC && t->entries[1].time_us == 0 && t->entries[1].line == 2);
    MN_CHECK(t->entries[2].stream == 0x7f8a38001020 && t->entries[2].time_us == 111111);
    MN_CHECK(t->entries[5].action == MN_TRACE_OOM && t->entries[5].size == 1099511627776ull);
    MN_CHECK(t->entries[6].action == MN_TRACE_FREE_REQUESTED && t->entries[6].line == 7);
    MN_CHECK(!strcmp(mn_trace_meta_get(t, "recorded_by"), "rmm"));
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
    mn_replay_result_t r;
    MN_CHECK_OK(mn_trace_replay(t, a, NULL, &r));
    MN_CHECK(r.allocs == 2 && r.frees == 3 && r.pre_allocs == 1 && r.streams == 2);
    MN_CHECK(r.peak_requested == 4096 + 1024 + 2048);
    mn_allocator_destroy(a);
    mn_trace_destroy(t);
  }
  t = NULL;
  MN_CHECK_OK(mn_trace_import_rmm_csv_file(MN_SOURCE_DIR "/tests/data/rmm/timeofday.csv", &t));
  if (t) {
    MN_CHECK(t->nentries == 3 && t->entries[1].time_us == 200 && t->entries[2].time_us == 1499900);
    mn_trace_destroy(t);
  }
  /* Extra columns (newer RMM) are ignored, CRLF accepted, blank lines skipped. */
  t = NULL;
  MN_CHECK_OK(rmm_str("Thread,Time,Action,Pointer,Size,Stream,Extra\r\n\r\n1,0.5,allocate,0x10,8,0x0,zz\r\n", &t));
  MN_CHECK(t && t->nentries == 1);
  mn_trace_destroy(t);
}

MN_TEST(rmm_import_errors) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"", "log.csv:1: empty file"},
      {"a,b,c\n", "log.csv:1: not an RMM log header"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,8\n", "log.csv:2: 5 fields, the header has 6"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,8,0\n1,1.0,alocate,0x10,8,0\n",
       "log.csv:3: unknown action \"alocate\""},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0xZZ,8,0\n", "log.csv:2: pointer \"0xZZ\""},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,-8,0\n", "log.csv:2: size \"-8\""},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,0,0\n", "log.csv:2: allocate of 0 bytes"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,yesterday,allocate,0x10,8,0\n", "log.csv:2: time \"yesterday\""},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,8,0\n1,1.0,allocate,0x10,8,0\n",
       "log.csv:3: allocate of 0x10, which is already live (allocated at line 2)"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,free,0x10,8,0\n1,1.0,free,0x10,8,0\n",
       "log.csv:3: free of 0x10, which is not live"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,8,0", "log.csv:2: truncated file"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,1.0,allocate,0x10,8,\x01\n", "log.csv:2: byte 0x01"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mn_trace_t *t = (mn_trace_t *)0x1;
    MN_CHECK_ERR(rmm_str(cases[i].text, &t), MN_ERR_FORMAT, cases[i].msg);
    MN_CHECK(t == (mn_trace_t *)0x1);
  }
  mn_trace_t *t = NULL;
  MN_CHECK_ERR(mn_trace_import_rmm_csv_file(MN_SOURCE_DIR "/tests/data/rmm/truncated.csv", &t), MN_ERR_FORMAT,
               "truncated.csv:3: truncated file");
  MN_CHECK_ERR(mn_trace_import_rmm_csv_file(MN_SOURCE_DIR "/tests/data/rmm/bad_action.csv", &t), MN_ERR_FORMAT,
               "bad_action.csv:3: unknown action");
  MN_CHECK_ERR(mn_trace_import_rmm_csv_file("/nonexistent/x.csv", &t), MN_ERR_IO, "cannot open");
  MN_CHECK(t == NULL);
  /* Every prefix of a good log is an error or a trace, never a crash. */
  char buf[512];
  FILE *f = fopen(MN_SOURCE_DIR "/tests/data/rmm/small.csv", "rb");
  size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  MN_CHECK(n > 100);
  for (size_t k = 0; k <= n; k++) {
    mn_trace_t *x = NULL;
    mn_status st = mn_trace_import_rmm_csv(buf, k, "prefix.csv", &x);
    MN_CHECK(st == MN_OK || st == MN_ERR_FORMAT);
    mn_trace_destroy(x);
  }
}

/* ---- summaries ------------------------------------------------------------------------ */

MN_TEST(memory_summary_table) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 3 * MiB, NULL, &p));
  MN_CHECK_OK(mn_allocator_alloc(a, 1000, NULL, &q));
  char buf[8192];
  size_t need = 0;
  MN_CHECK_OK(mn_allocator_memory_summary(a, buf, sizeof buf, &need));
  MN_CHECK(need == strlen(buf) + 1);
  MN_CHECK(strstr(buf, "mnemo memory summary, device sim:0") != NULL);
  MN_CHECK(strstr(buf, "allocated_bytes") && strstr(buf, "from large pool") && strstr(buf, "from small pool"));
  /* allocated_bytes: 3 MiB in the large pool, 1000 B (rounded to 1024) in the small one. */
  const char *row = strstr(buf, "| allocated_bytes");
  const char *large = row ? strstr(row, "from large pool") : NULL;
  const char *small_row = row ? strstr(row, "from small pool") : NULL;
  MN_CHECK(large && strncmp(strchr(large, '|') + 1, "   3.00 MiB", 11) == 0);
  MN_CHECK(small_row && strncmp(strchr(small_row, '|') + 1, "   1.00 KiB", 11) == 0);
  const char *res = strstr(buf, "| reserved_bytes");
  MN_CHECK(res && strstr(res, "22.00 MiB") != NULL); /* a 20 MiB large segment and a 2 MiB small one */
  char small[64];
  MN_CHECK_ERR(mn_allocator_memory_summary(a, small, sizeof small, &need), MN_ERR_OVERFLOW, "needs");
  MN_CHECK(strlen(small) == sizeof small - 1);
  MN_CHECK_ERR(mn_memory_summary(NULL, NULL, buf, sizeof buf, NULL), MN_ERR_INVALID_ARGUMENT, "stats");
  mn_allocator_t *naive = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(SIM0, &naive));
  MN_CHECK_ERR(mn_allocator_memory_summary(naive, buf, sizeof buf, NULL), MN_ERR_NOT_SUPPORTED, "statistics");
  mn_allocator_destroy(naive);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, q));
  mn_allocator_destroy(a);
}

/* ---- a trace's devices (mn_trace_devices) ---------------------------------------- */

static void add(mn_trace_t *t, mn_trace_action a, bool pre, uint32_t dev, uint64_t addr, uint64_t size) {
  mn_trace_entry_t e = {.action = a, .pre = pre, .device = dev, .address = addr, .size = size,
                        .block_size = a == MN_TRACE_ALLOC ? size : 0};
  MN_CHECK_OK(mn_trace_append(t, &e));
}

MN_TEST(trace_devices) {
  /* devices in index order whatever their first use; labels; the pinned host
   * memory flagged; the size as recorded from a first OOM (reserved then + the
   * free bytes the line reports) and from a partial cache release */
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  MN_CHECK_OK(mn_trace_meta_set(t, "recorded_by", "pytorch"));
  MN_CHECK_OK(mn_trace_meta_set(t, "devices", "0 1 2"));
  MN_CHECK_OK(mn_trace_meta_set(t, "host_device", "2"));
  add(t, MN_TRACE_SEGMENT_ALLOC, true, 1, 0x1000000, 4 * MiB);
  add(t, MN_TRACE_ALLOC, true, 1, 0x1000000, 1 * MiB);
  add(t, MN_TRACE_OOM, false, 1, 2 * MiB, 8 * MiB);              /* reserved 4 MiB + 2 MiB free */
  add(t, MN_TRACE_OOM, false, 1, 9 * MiB, 8 * MiB);              /* only the first counts */
  add(t, MN_TRACE_SEGMENT_ALLOC, false, 0, 0x9000000, 20 * MiB); /* device 0: 20 + 10 MiB */
  add(t, MN_TRACE_SEGMENT_ALLOC, false, 0, 0xa000000, 10 * MiB);
  add(t, MN_TRACE_ALLOC, false, 2, 0x7000, 512);                 /* the pinned host memory */
  add(t, MN_TRACE_SEGMENT_FREE, false, 0, 0x9000000, 20 * MiB); /* no empty_cache before: a partial release */
  add(t, MN_TRACE_SEGMENT_ALLOC, false, 0, 0xb000000, 24 * MiB); /* then 24 MiB: 30 + 24 > capacity >= 10 + 24 */
  mn_trace_device_t *d = NULL;
  size_t n = 0;
  MN_CHECK_OK(mn_trace_devices(t, &d, &n));
  MN_CHECK(n == 3);
  if (n == 3) {
    MN_CHECK(d[0].index == 0 && d[0].label == 0 && !d[0].host && d[0].entries == 4 && d[0].pre_allocs == 0);
    MN_CHECK(d[0].oom_lines == 0 && d[0].oom_capacity == 0 && d[0].partial_releases == 1);
    /* reserved before the run + 24 MiB > capacity >= reserved after it + 24 MiB, and >= the peak 34 MiB */
    MN_CHECK(d[0].release_capacity == 34 * MiB);
    MN_CHECK(d[1].index == 1 && d[1].label == 1 && !d[1].host && d[1].entries == 4 && d[1].pre_allocs == 1);
    MN_CHECK(d[1].oom_lines == 2 && d[1].oom_capacity == 6 * MiB && d[1].release_capacity == 0);
    MN_CHECK(d[2].index == 2 && d[2].host && d[2].entries == 1);
  }
  mn_trace_devices_free(d);
  /* a one-device import of CUDA device 3 keeps its entries on index 0 (meta device) */
  mn_trace_t *u = NULL;
  MN_CHECK_OK(mn_trace_create(&u));
  MN_CHECK_OK(mn_trace_meta_set(u, "device", "3"));
  add(u, MN_TRACE_ALLOC, false, 0, 0x10, 16);
  MN_CHECK_OK(mn_trace_devices(u, &d, &n));
  MN_CHECK(n == 1 && d[0].index == 0 && d[0].label == 3 && d[0].oom_capacity == 0);
  mn_trace_devices_free(d);
  /* with the garbage collector on, a release is no sign of a failure */
  MN_CHECK_OK(mn_trace_meta_set(t, "config", "garbage_collection_threshold:0.8"));
  MN_CHECK_OK(mn_trace_devices(t, &d, &n));
  MN_CHECK(n == 3 && d[0].partial_releases == 1 && d[0].release_capacity == 0);
  mn_trace_devices_free(d);
  /* no entries: no devices; bad arguments refused, outputs untouched */
  mn_trace_t *e = NULL;
  MN_CHECK_OK(mn_trace_create(&e));
  d = (mn_trace_device_t *)&n;
  MN_CHECK_OK(mn_trace_devices(e, &d, &n));
  MN_CHECK(n == 0 && d == NULL);
  size_t keep = 7;
  MN_CHECK(mn_trace_devices(NULL, &d, &keep) == MN_ERR_INVALID_ARGUMENT && keep == 7);
  MN_CHECK(strstr(mn_last_error(), "mn_trace_devices") != NULL);
  mn_trace_destroy(e);
  mn_trace_destroy(u);
  mn_trace_destroy(t);
}

/* mn_diff_build (profiling/diff.c): bad inputs refused with a message, the
 * output untouched and the SIM configuration as it was; a comparison built
 * while the caller holds SIM memory; mn_report_write refuses a comparison
 * built without a page. */
MN_TEST(diff_build_errors) {
  mn_trace_t *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_trace_read(MN_SOURCE_DIR "/tests/data/traces/stack_rule.trace", &a));
  MN_CHECK_OK(mn_trace_read(MN_SOURCE_DIR "/tests/corpus/trace/v3_stacks.trace", &b));
  if (!a || !b) {
    mn_trace_destroy(a);
    mn_trace_destroy(b);
    return;
  }
  mn_sim_config_t before, after;
  MN_CHECK_OK(mn_sim_get_config(&before));
  mn_report_t *keep = (mn_report_t *)&before, *r = keep;
  mn_diff_options_t o = mn_diff_options_default();
  MN_CHECK_ERR(mn_diff_build(NULL, b, &o, &r), MN_ERR_INVALID_ARGUMENT, "mn_diff_build: NULL");
  MN_CHECK_ERR(mn_diff_build(a, NULL, &o, &r), MN_ERR_INVALID_ARGUMENT, "mn_diff_build: NULL");
  MN_CHECK_ERR(mn_diff_build(a, b, &o, NULL), MN_ERR_INVALID_ARGUMENT, "mn_diff_build: NULL");
  o.config = "nonsense:1";
  MN_CHECK_ERR(mn_diff_build(a, b, &o, &r), MN_ERR_INVALID_ARGUMENT, "bad config \"nonsense:1\"");
  o = mn_diff_options_default();
  o.trace_device = 5000;
  MN_CHECK_ERR(mn_diff_build(a, b, &o, &r), MN_ERR_INVALID_ARGUMENT, "trace_device 5000");
  o.trace_device = 1;
  o.name_a = "first";
  MN_CHECK_ERR(mn_diff_build(a, b, &o, &r), MN_ERR_INVALID_ARGUMENT, "first has no device 1");
  o = mn_diff_options_default();
  o.trace_device = 1;
  o.page = true;
  MN_CHECK_ERR(mn_diff_build(b, a, &o, &r), MN_ERR_INVALID_ARGUMENT, "A has no device 1");
  MN_CHECK(r == keep);
  MN_CHECK_OK(mn_sim_get_config(&after));
  MN_CHECK(after.capacity == before.capacity && after.device_count == before.device_count &&
           after.granularity == before.granularity && after.eager == before.eager &&
           after.no_peer_access == before.no_peer_access);
  /* with SIM memory held (the configuration is left alone: no reconfiguration to refuse) */
  mn_allocator_t *da = NULL;
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_get_default(SIM0, &da));
  if (da) MN_CHECK_OK(mn_allocator_alloc(da, 4096, NULL, &p));
  r = NULL;
  o = mn_diff_options_default();
  MN_CHECK_OK(mn_diff_build(a, b, &o, &r));
  if (p) MN_CHECK_OK(mn_allocator_free(da, p));
  MN_CHECK(r && !r->page && r->page_size == 0 && r->notes && !r->notes[0]);
  MN_CHECK(r && strstr(r->summary, "mnemo diff:\n  A       A: ") == r->summary);
  MN_CHECK(r && r->json[0] == '{' && strstr(r->json, "\"groups\": [") != NULL);
  char path[256];
  snprintf(path, sizeof path, "/tmp/mnemo_test_prof_%d_diff.html", (int)getpid());
  MN_CHECK_ERR(mn_report_write(r, path), MN_ERR_INVALID_ARGUMENT, "has no page");
  MN_CHECK(access(path, F_OK) != 0);
  mn_report_free(r);
  MN_CHECK_OK(mn_sim_get_config(&after));
  MN_CHECK(after.capacity == before.capacity && after.device_count == before.device_count);
  mn_trace_destroy(a);
  mn_trace_destroy(b);
}

int main(int argc, char **argv) {
  /* CTest runs this once more with MNEMO_NVTX=1 and --nvtx-env: the switch
   * starts on, from the environment. */
  if (argc > 1 && !strcmp(argv[1], "--nvtx-env")) {
    mn_test_case = "nvtx_env";
    MN_CHECK(mn_nvtx_enabled());
    mn_nvtx_counters_t c;
    mn_nvtx_get_counters(&c);
    char a[8] = "x", b[8];
    mn_stream_t *s = NULL;
    MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &s));
    MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), b, mn_device_cpu(), a, sizeof a, s, 0));
    mn_nvtx_counters_t d;
    mn_nvtx_get_counters(&d);
    MN_CHECK(d.pushes == c.pushes + 1 && d.pops == c.pops + 1);
    return mn_test_finish();
  }
  mn_test_configure_sim(2, (size_t)1 << 30);
  SIM0 = mn_device_sim(0);
  if (argc > 1 && !strcmp(argv[1], "--stacks-env")) return stacks_env();
  MN_RUN(nvtx_switch_and_balance);
  MN_RUN(nvtx_every_allocator);
  MN_RUN(recorder_ring_bound_and_pre);
  MN_RUN(recorder_threads_two_devices);
  MN_RUN(round_trip_live_equals_replay);
  MN_RUN(round_trip_peaks_exact);
  MN_RUN(recorder_stacks);
  MN_RUN(recorder_stacks_threads);
  MN_RUN(recorder_stacks_host_faults);
  MN_RUN(replay_options);
  MN_RUN(rmm_import_samples);
  MN_RUN(rmm_import_errors);
  MN_RUN(memory_summary_table);
  MN_RUN(trace_devices);
  MN_RUN(diff_build_errors);
  return mn_test_finish();
}
