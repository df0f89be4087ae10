/* tests/test_caching_threads.c: the caching allocator (and its per-stream sharded form) under
 * concurrent use on SIM:
 * threads allocate and free on their streams, hand pointers to each other (freed
 * on another thread), record uses on other threads' streams, empty the cache, read
 * stats and check invariants, for a bounded number of operations (label sim; run
 * under TSan in CI). A stress test, not a benchmark. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mn_test.h"

#define MB ((size_t)1 << 20)
#define THREADS 8
#define OPS 2500
#define MAXLIVE 48

static mn_device_t SIM0;
static mn_allocator_t *g_alloc;
static mn_stream_t *g_streams[THREADS];
static int g_nstreams; /* thread i works on stream i % g_nstreams */
static _Atomic(void *) g_slot[THREADS]; /* a pointer handed to thread i, which frees it */
static atomic_int g_errors;
static uint64_t g_seed = 777;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t *r) {
  uint64_t k = rnd(r) % 100;
  if (k < 70) return 1 + rnd(r) % (128 << 10);
  if (k < 95) return (128 << 10) + rnd(r) % (2 * MB);
  return 2 * MB + rnd(r) % (24 * MB);
}

static void fail(int id, const char *what, mn_status st) {
  fprintf(stderr, "thread %d: %s -> %s: %s\n", id, what, mn_status_name(st), mn_last_error());
  atomic_fetch_add(&g_errors, 1);
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (g_seed + 0x9E37u * (uint64_t)(id + 1)) | 1;
  void *live[MAXLIVE];
  int nlive = 0;
  mn_stream_t *mine = g_streams[id % g_nstreams], *next = g_streams[(id + 1) % g_nstreams];
  for (int op = 0; op < OPS; op++) {
    uint64_t k = rnd(&r) % 100;
    mn_status st = MN_OK;
    if (k < 42 && nlive < MAXLIVE) {
      void *p = NULL;
      st = mn_allocator_alloc(g_alloc, pick_size(&r), mine, &p);
      if (st == MN_OK) live[nlive++] = p;
      else if (st != MN_ERR_OUT_OF_MEMORY) fail(id, "alloc", st);
      continue;
    }
    if (k < 72 && nlive) {
      int i = (int)(rnd(&r) % (uint64_t)nlive);
      if ((st = mn_allocator_free(g_alloc, live[i])) != MN_OK) fail(id, "free", st);
      live[i] = live[--nlive];
    } else if (k < 78 && nlive) { /* hand one over: the next thread frees it */
      void *expected = NULL;
      if (atomic_compare_exchange_strong(&g_slot[(id + 1) % THREADS], &expected, live[nlive - 1])) nlive--;
    } else if (k < 84) {
      void *p = atomic_exchange(&g_slot[id], NULL);
      if (p && (st = mn_allocator_free(g_alloc, p)) != MN_OK) fail(id, "free of a handed pointer", st);
    } else if (k < 90 && nlive) { /* used on the next thread's stream too */
      if ((st = mn_allocator_record_stream(g_alloc, live[rnd(&r) % (uint64_t)nlive], next)) != MN_OK)
        fail(id, "record_stream", st);
    } else if (k < 94) {
      if ((st = mn_sim_stream_advance(mine, 1 + rnd(&r) % 4, NULL)) != MN_OK) fail(id, "advance", st);
    } else if (k < 96) {
      if ((st = mn_allocator_check_invariants(g_alloc)) != MN_OK) fail(id, "check_invariants", st);
    } else if (k < 97) {
      if ((st = mn_allocator_empty_cache(g_alloc)) != MN_OK) fail(id, "empty_cache", st);
    } else if (k < 98) {
      mn_snapshot_t *s = NULL;
      if ((st = mn_allocator_snapshot(g_alloc, &s)) != MN_OK) fail(id, "snapshot", st);
      mn_snapshot_free(s);
    } else {
      mn_alloc_stats_t s;
      if ((st = mn_allocator_get_stats(g_alloc, &s)) != MN_OK) fail(id, "get_stats", st);
    }
  }
  for (int i = 0; i < nlive; i++) {
    mn_status st = mn_allocator_free(g_alloc, live[i]);
    if (st != MN_OK) fail(id, "final free", st);
  }
  return NULL;
}

static void run_on(const char *conf, int nstreams, bool sharded) {
  g_nstreams = nstreams;
  mn_caching_config_t c = mn_caching_config_default();
  if (conf) MN_CHECK_OK(mn_caching_config_parse(conf, &c));
  if (sharded) MN_CHECK_OK(mn_caching_allocator_create_sharded(SIM0, &c, &g_alloc));
  else MN_CHECK_OK(mn_caching_allocator_create(SIM0, &c, &g_alloc));
  for (int i = 0; i < THREADS; i++) atomic_store(&g_slot[i], NULL);
  for (int i = 0; i < nstreams; i++) MN_CHECK_OK(mn_stream_create(SIM0, &g_streams[i]));
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) MN_CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  MN_CHECK(atomic_load(&g_errors) == 0);
  for (int i = 0; i < THREADS; i++) {
    void *p = atomic_exchange(&g_slot[i], NULL);
    MN_CHECK_OK(mn_allocator_free(g_alloc, p));
  }
  MN_CHECK_OK(mn_allocator_check_invariants(g_alloc));
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_get_stats(g_alloc, &s));
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 0);
  printf("  %s%s: %lld allocations, %lld OOMs, %lld syncs, peak %.1f MiB reserved\n", conf ? conf : "default",
         sharded ? " (sharded)" : "", (long long)s.allocation[MN_POOL_ALL].allocated, (long long)s.num_ooms, (long long)s.num_sync_all_streams,
         (double)s.reserved_bytes[MN_POOL_ALL].peak / (double)MB);
  for (int i = 0; i < nstreams; i++) MN_CHECK_OK(mn_stream_synchronize(g_streams[i]));
  MN_CHECK_OK(mn_allocator_empty_cache(g_alloc));
  MN_CHECK_OK(mn_allocator_get_stats(g_alloc, &s));
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == 0 && s.active[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(g_alloc));
  mn_allocator_destroy(g_alloc);
  for (int i = 0; i < nstreams; i++) MN_CHECK_OK(mn_stream_destroy(g_streams[i]));
  mn_sim_stats_t ss;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &ss));
  MN_CHECK(ss.mapped_bytes == 0 && ss.live_events == 0 && ss.live_reservations == 0 && ss.illegal_accesses == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

static void run(const char *conf, int nstreams) { run_on(conf, nstreams, false); }

MN_TEST(threads_default) { run(NULL, THREADS); }
/* Three streams shared by the eight threads: each stream's ranges take 1 1/4 of the
 * device in address space, and SIM has 4x its capacity. */
MN_TEST(threads_expandable) { run("expandable_segments:True", 3); }
MN_TEST(threads_oversize_gc) {
  run("max_split_size_mb:20,garbage_collection_threshold:0.3,per_process_memory_fraction:0.5", THREADS);
}

/* The sharded allocator: every thread on its own stream (the case it is for),
 * then eight threads on three streams (shards shared by threads), with pointers
 * freed on other threads and used on other streams. */
MN_TEST(threads_sharded) {
  run_on(NULL, THREADS, true);
  run_on("expandable_segments:True", 3, true);
}

/* One stream, one thread: a seeded sequence gives the same addresses and the
 * same statistics through one caching allocator and through the sharded one. */
static void sequence(bool sharded, uintptr_t *addrs, int n, mn_alloc_stats_t *out) {
  mn_allocator_t *a = NULL;
  if (sharded) MN_CHECK_OK(mn_caching_allocator_create_sharded(SIM0, NULL, &a));
  else MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  uint64_t r = g_seed | 1;
  void *live[64];
  int nlive = 0;
  for (int i = 0; i < n; i++) {
    if (nlive < 64 && (nlive == 0 || rnd(&r) % 100 < 55)) {
      MN_CHECK_OK(mn_allocator_alloc(a, pick_size(&r), NULL, &live[nlive]));
      addrs[i] = (uintptr_t)live[nlive++];
    } else {
      int k = (int)(rnd(&r) % (uint64_t)nlive);
      MN_CHECK_OK(mn_allocator_free(a, live[k]));
      addrs[i] = 0;
      live[k] = live[--nlive];
    }
  }
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_get_stats(a, out));
  mn_snapshot_t *snap = NULL;
  MN_CHECK_OK(mn_allocator_snapshot(a, &snap));
  size_t active = 0;
  for (size_t i = 0; i < snap->nsegments; i++) active += snap->segments[i].active_size;
  MN_CHECK(active == (size_t)out->active_bytes[MN_POOL_ALL].current);
  mn_snapshot_free(snap);
  for (int i = 0; i < nlive; i++) MN_CHECK_OK(mn_allocator_free(a, live[i]));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_allocator_destroy(a);
}

MN_TEST(sharded_matches_one_allocator) {
  enum { N = 3000 };
  static uintptr_t one[N], sharded[N];
  mn_alloc_stats_t s1, s2;
  sequence(false, one, N, &s1);
  sequence(true, sharded, N, &s2);
  int same = 0;
  for (int i = 0; i < N; i++) same += one[i] == sharded[i];
  MN_CHECK(same == N);
  MN_CHECK(memcmp(&s1, &s2, sizeof s1) == 0);
}

/* What the shards cannot keep is refused, clearly; bad pointers are refused. */
MN_TEST(sharded_refusals) {
  mn_caching_config_t c = mn_caching_config_default();
  mn_allocator_t *a = NULL;
  c.per_process_memory_fraction = 0.5;
  MN_CHECK(mn_caching_allocator_create_sharded(SIM0, &c, &a) == MN_ERR_NOT_SUPPORTED && a == NULL);
  MN_CHECK(strstr(mn_last_error(), "per_process_memory_fraction") != NULL);
  c = mn_caching_config_default();
  c.garbage_collection_threshold = 0.5;
  MN_CHECK(mn_caching_allocator_create_sharded(SIM0, &c, &a) == MN_ERR_NOT_SUPPORTED && a == NULL);
  c = mn_caching_config_default();
  c.max_split_size = 1; /* below 20 MiB: the caching allocator's own validation */
  MN_CHECK(mn_caching_allocator_create_sharded(SIM0, &c, &a) == MN_ERR_INVALID_ARGUMENT && a == NULL);
  MN_CHECK(mn_caching_allocator_create_sharded(SIM0, NULL, NULL) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK_OK(mn_caching_allocator_create_sharded(SIM0, NULL, &a));
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK(mn_allocator_free(a, (char *)p + 512) == MN_ERR_INVALID_ARGUMENT);
  int x;
  MN_CHECK(mn_allocator_free(a, &x) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(mn_allocator_record_stream(a, &x, NULL) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK(mn_allocator_free(a, p) == MN_ERR_INVALID_ARGUMENT); /* double free */
  MN_CHECK(mn_allocator_alloc(a, (size_t)64 << 30, NULL, &q) == MN_ERR_OUT_OF_MEMORY && q == NULL);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 0 && s.allocation[MN_POOL_ALL].allocated == 1);
  MN_CHECK(strcmp(mn_allocator_name(a), "caching_sharded") == 0);
  mn_allocator_destroy(a);
}

int main(void) {
  const char *seed = getenv("MNEMO_TEST_SEED");
  if (seed && *seed) g_seed = strtoull(seed, NULL, 0);
  printf("seed=%llu (set MNEMO_TEST_SEED to change), %d threads x %d operations\n", (unsigned long long)g_seed,
         THREADS, OPS);
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = (size_t)2 << 30;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(threads_default);
  MN_RUN(threads_expandable);
  MN_RUN(threads_oversize_gc);
  MN_RUN(threads_sharded);
  MN_RUN(sharded_matches_one_allocator);
  MN_RUN(sharded_refusals);
  return mn_test_finish();
}
