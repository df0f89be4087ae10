/* tests/test_caching_threads.c: the caching allocator under concurrent use on SIM (its lanes:
 * one lock per stream for cached pairs, the full lock for the rest):
 * threads allocate and free on their streams, hand pointers to each other (freed
 * on another thread), record uses on other threads' streams, empty the cache, read
 * stats and check invariants, for a bounded number of operations (label sim; run
 * under TSan in CI). A stress test, not a benchmark. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
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

static void run(const char *conf, int nstreams) {
  g_nstreams = nstreams;
  mn_caching_config_t c = mn_caching_config_default();
  if (conf) MN_CHECK_OK(mn_caching_config_parse(conf, &c));
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, &c, &g_alloc));
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
  printf("  %s: %lld allocations, %lld OOMs, %lld syncs, peak %.1f MiB reserved\n", conf ? conf : "default", (long long)s.allocation[MN_POOL_ALL].allocated, (long long)s.num_ooms, (long long)s.num_sync_all_streams,
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


MN_TEST(threads_default) { run(NULL, THREADS); }
/* Three streams shared by the eight threads: each stream's ranges take 1 1/4 of the
 * device in address space, and SIM has 4x its capacity. */
MN_TEST(threads_expandable) { run("expandable_segments:True", 3); }
MN_TEST(threads_oversize_gc) {
  run("max_split_size_mb:20,garbage_collection_threshold:0.3,per_process_memory_fraction:0.5", THREADS);
}

/* mn_caching_allocator_create_sharded is the caching allocator itself now
 * (its lanes split it by stream): every setting, memory pools, exact peaks;
 * bad input and bad pointers refused as ever. */
MN_TEST(sharded_is_the_caching_allocator) {
  mn_caching_config_t c = mn_caching_config_default();
  mn_allocator_t *a = NULL;
  c.per_process_memory_fraction = 0.5;
  c.garbage_collection_threshold = 0.5;
  MN_CHECK_OK(mn_caching_allocator_create_sharded(SIM0, &c, &a));
  MN_CHECK(strcmp(mn_allocator_name(a), "caching") == 0);
  mn_mempool_t *pool = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &pool));
  MN_CHECK_OK(mn_mempool_destroy(pool));
  mn_allocator_destroy(a);
  a = NULL;
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
  MN_CHECK(mn_allocator_free(a, p) == MN_ERR_INVALID_ARGUMENT); /* double free: the lane's map no longer has it */
  MN_CHECK(mn_allocator_alloc(a, (size_t)64 << 30, NULL, &q) == MN_ERR_OUT_OF_MEMORY && q == NULL);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 0 && s.allocation[MN_POOL_ALL].allocated == 1);
  mn_allocator_destroy(a);
}

/* Streams made and dropped by the hundred: each stream's lane is given back
 * once the stream holds nothing, and taken by the next one, so the lanes do
 * not grow with the streams ever made. */
MN_TEST(lanes_recycled) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  for (int i = 0; i < 300; i++) {
    mn_stream_t *st = NULL;
    MN_CHECK_OK(mn_stream_create(SIM0, &st));
    void *p = NULL;
    MN_CHECK_OK(mn_allocator_alloc(a, 1000 + (size_t)i, st, &p));
    MN_CHECK_OK(mn_allocator_free(a, p));
    MN_CHECK_OK(mn_allocator_alloc(a, 1000 + (size_t)i, st, &p)); /* the lane's cached pair */
    MN_CHECK_OK(mn_allocator_free(a, p));
    MN_CHECK_OK(mn_allocator_empty_cache(a)); /* the stream holds nothing: its lane is retired */
    MN_CHECK_OK(mn_stream_destroy(st));
    if (i % 50 == 0) MN_CHECK_OK(mn_allocator_check_invariants(a));
  }
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn__caching_t *c = (mn__caching_t *)a;
  size_t retired = 0;
  for (mn__lane_t *l = c->retired; l; l = l->retired_next) retired++;
  MN_CHECK(c->nlanes == 0 && retired == 1); /* one lane, taken by each stream in turn, retired now */
  mn_allocator_destroy(a);
}

/* ---- lanes: the pairs of each stream under its own lock, peaks exact ----------------- */

/* What the test knows of the counters it can model: live allocations, their
 * block bytes and requested bytes, per pool (1 small, 2 large) and their sum. */
typedef struct model_s {
  int64_t cur[3][3], peak[3][3]; /* [counter: count, bytes, requested][pool] */
} model_t;

static void model_add(model_t *m, int pool, int64_t count, int64_t bytes, int64_t req) {
  int64_t d[3] = {count, bytes, req};
  for (int c = 0; c < 3; c++) {
    m->cur[c][pool] += d[c];
    m->cur[c][0] = m->cur[c][1] + m->cur[c][2];
    for (int k = 0; k < 3; k++)
      if (m->cur[c][k] > m->peak[c][k]) m->peak[c][k] = m->cur[c][k];
  }
}

static int pool_of(size_t nbytes) { return ((nbytes + 511) / 512 * 512) <= MB ? MN_POOL_SMALL : MN_POOL_LARGE; }

/* The allocator's figures against the model's, current and peak. */
static bool model_matches(mn_allocator_t *a, const model_t *m) {
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  bool ok = true;
  for (int k = 0; k < 3; k++) {
    const mn_stat_t *got[3][2] = {{&s.allocation[k], &s.active[k]},
                                  {&s.allocated_bytes[k], &s.active_bytes[k]},
                                  {&s.requested_bytes[k], &s.requested_bytes[k]}};
    for (int c = 0; c < 3; c++)
      for (int j = 0; j < 2; j++)
        if (got[c][j]->current != m->cur[c][k] || got[c][j]->peak != m->peak[c][k]) {
          fprintf(stderr, "  counter %d/%d pool %d: current %lld peak %lld, the model says %lld and %lld\n", c, j, k,
                  (long long)got[c][j]->current, (long long)got[c][j]->peak, (long long)m->cur[c][k],
                  (long long)m->peak[c][k]);
          ok = false;
        }
  }
  return ok;
}

/* One thread on one stream, then four taken in turn at random: the lanes
 * hand counts back and forth through the full lock (rooms dealt, ops past
 * their room left to the full path); after every operation the statistics
 * are exactly the model's, peaks included. */
static void exact_peaks(int NS) {
  enum { N = 4000, LIVE = 96 };
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  mn_stream_t *st[4];
  for (int i = 0; i < NS; i++) MN_CHECK_OK(mn_stream_create(SIM0, &st[i]));
  model_t m;
  memset(&m, 0, sizeof m);
  void *live[LIVE];
  size_t req[LIVE];
  int nlive = 0, bad = 0;
  uint64_t r = g_seed | 1;
  for (int i = 0; i < N && !bad; i++) {
    if (nlive < LIVE && (nlive == 0 || rnd(&r) % 100 < 52)) {
      size_t n = rnd(&r) % 8 ? 1 + rnd(&r) % (64 << 10) : pick_size(&r);
      MN_CHECK_OK(mn_allocator_alloc(a, n, st[rnd(&r) % NS], &live[nlive]));
      req[nlive] = n;
      model_add(&m, pool_of(n), 1, (int64_t)mn_allocator_size_of(a, live[nlive]), (int64_t)n);
      nlive++;
    } else {
      int k = (int)(rnd(&r) % (uint64_t)nlive);
      int64_t bytes = (int64_t)mn_allocator_size_of(a, live[k]);
      MN_CHECK_OK(mn_allocator_free(a, live[k]));
      model_add(&m, pool_of(req[k]), -1, -bytes, -(int64_t)req[k]);
      live[k] = live[nlive - 1];
      req[k] = req[--nlive];
    }
    if (!model_matches(a, &m)) {
      fprintf(stderr, "  after operation %d\n", i);
      bad = 1;
    }
    if (i % 500 == 0) MN_CHECK_OK(mn_allocator_check_invariants(a));
  }
  MN_CHECK(!bad);
  /* a reset peak: the lanes are dealt no room, and climb back through the full path */
  MN_CHECK_OK(mn_allocator_reset_peak(a));
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 3; k++) m.peak[c][k] = m.cur[c][k];
  MN_CHECK(model_matches(a, &m));
  for (int i = 0; i < 200 && nlive < LIVE; i++) {
    size_t n = 1 + rnd(&r) % 4096;
    MN_CHECK_OK(mn_allocator_alloc(a, n, st[rnd(&r) % NS], &live[nlive]));
    req[nlive] = n;
    model_add(&m, pool_of(n), 1, (int64_t)mn_allocator_size_of(a, live[nlive]), (int64_t)n);
    nlive++;
  }
  MN_CHECK(model_matches(a, &m));
  for (int i = 0; i < nlive; i++) MN_CHECK_OK(mn_allocator_free(a, live[i]));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_allocator_destroy(a);
  for (int i = 0; i < NS; i++) MN_CHECK_OK(mn_stream_destroy(st[i]));
}

MN_TEST(lanes_exact_peaks_streams) {
  exact_peaks(1); /* one lane: all the room */
  exact_peaks(4);
}

/* Threads on their own streams in phases, only allocations or only frees in
 * each, a barrier between: the sum of a phase is highest at its end, so the
 * exact peaks are the model's at the barriers whatever the interleaving. */
enum { PT = 4, PHASES = 12, PER = 40 };
static pthread_barrier_t g_bar;
static mn_allocator_t *g_pa;
static mn_stream_t *g_pst[PT];
static void *g_plive[PT][PHASES * PER];
static size_t g_preq[PT][PHASES * PER];
static int g_pn[PT];

static void *phase_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (g_seed * 31 + (uint64_t)id) | 1;
  for (int ph = 0; ph < PHASES; ph++) {
    if (ph % 3 != 2) { /* two phases of allocations, then one of frees */
      for (int i = 0; i < PER; i++) {
        size_t n = 1 + rnd(&r) % (ph % 2 ? (256 << 10) : 8192);
        mn_status st = mn_allocator_alloc(g_pa, n, g_pst[id], &g_plive[id][g_pn[id]]);
        if (st != MN_OK) fail(id, "phase alloc", st);
        else g_preq[id][g_pn[id]++] = n;
      }
    } else {
      for (int i = 0; i < PER * 3 / 2 && g_pn[id]; i++) {
        int k = (int)(rnd(&r) % (uint64_t)g_pn[id]);
        mn_status st = mn_allocator_free(g_pa, g_plive[id][k]);
        if (st != MN_OK) fail(id, "phase free", st);
        g_plive[id][k] = g_plive[id][g_pn[id] - 1];
        g_preq[id][k] = g_preq[id][--g_pn[id]];
      }
    }
    pthread_barrier_wait(&g_bar); /* the phase is done */
    pthread_barrier_wait(&g_bar); /* main has checked */
  }
  return NULL;
}

MN_TEST(lanes_exact_peaks_threads) {
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &g_pa));
  for (int i = 0; i < PT; i++) {
    MN_CHECK_OK(mn_stream_create(SIM0, &g_pst[i]));
    g_pn[i] = 0;
  }
  MN_CHECK(pthread_barrier_init(&g_bar, NULL, PT + 1) == 0);
  pthread_t t[PT];
  for (int i = 0; i < PT; i++) MN_CHECK(pthread_create(&t[i], NULL, phase_worker, (void *)(intptr_t)i) == 0);
  model_t m;
  memset(&m, 0, sizeof m);
  int bad = 0;
  for (int ph = 0; ph < PHASES; ph++) {
    pthread_barrier_wait(&g_bar);
    model_t now;
    memset(&now, 0, sizeof now);
    for (int i = 0; i < PT; i++)
      for (int k = 0; k < g_pn[i]; k++)
        model_add(&now, pool_of(g_preq[i][k]), 1, (int64_t)mn_allocator_size_of(g_pa, g_plive[i][k]),
                  (int64_t)g_preq[i][k]);
    for (int c = 0; c < 3; c++)
      for (int k = 0; k < 3; k++) {
        m.cur[c][k] = now.cur[c][k];
        if (ph % 3 != 2 && now.cur[c][k] > m.peak[c][k]) m.peak[c][k] = now.cur[c][k]; /* a phase of allocations ends at its highest */
      }
    if (!bad && !model_matches(g_pa, &m)) {
      fprintf(stderr, "  after phase %d\n", ph);
      bad = 1;
    }
    if (ph % 4 == 3) MN_CHECK_OK(mn_allocator_check_invariants(g_pa));
    pthread_barrier_wait(&g_bar);
  }
  for (int i = 0; i < PT; i++) pthread_join(t[i], NULL);
  MN_CHECK(!bad && atomic_load(&g_errors) == 0);
  for (int i = 0; i < PT; i++)
    for (int k = 0; k < g_pn[i]; k++) MN_CHECK_OK(mn_allocator_free(g_pa, g_plive[i][k]));
  MN_CHECK_OK(mn_allocator_check_invariants(g_pa));
  MN_CHECK_OK(mn_allocator_empty_cache(g_pa));
  pthread_barrier_destroy(&g_bar);
  mn_allocator_destroy(g_pa);
  for (int i = 0; i < PT; i++) MN_CHECK_OK(mn_stream_destroy(g_pst[i]));
}

/* The ring recorder may be called by several lanes at once (its own lock):
 * lanes keep their pairs with it on, and the events it keeps, in its order,
 * are a valid history of every address (alloc, free_requested,
 * free_completed, in turn), whatever the threads' interleaving. */
static mn_allocator_t *g_ra;
static mn_stream_t *g_rst[PT];
static void *rec_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (g_seed * 7 + (uint64_t)id) | 1;
  void *live[32];
  int n = 0;
  for (int op = 0; op < 3000; op++) {
    mn_status st = MN_OK;
    if (n < 32 && (n == 0 || rnd(&r) % 100 < 50)) {
      if ((st = mn_allocator_alloc(g_ra, 1 + rnd(&r) % 20000, g_rst[id], &live[n])) == MN_OK) n++;
      else fail(id, "recorded alloc", st);
    } else {
      int k = (int)(rnd(&r) % (uint64_t)n);
      if ((st = mn_allocator_free(g_ra, live[k])) != MN_OK) fail(id, "recorded free", st);
      live[k] = live[--n];
    }
  }
  for (int k = 0; k < n; k++) {
    mn_status st = mn_allocator_free(g_ra, live[k]);
    if (st != MN_OK) fail(id, "recorded final free", st);
  }
  return NULL;
}

MN_TEST(lanes_recorder_threads) {
  mn_trace_recorder_t *rec = NULL;
  MN_CHECK_OK(mn_trace_recorder_create((size_t)1 << 16, &rec));
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &g_ra));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(g_ra, mn_trace_recorder_sink_fn, rec));
  MN_CHECK(((mn__caching_t *)g_ra)->sink_concurrent); /* declared by the profiling layer */
  for (int i = 0; i < PT; i++) MN_CHECK_OK(mn_stream_create(SIM0, &g_rst[i]));
  pthread_t t[PT];
  for (int i = 0; i < PT; i++) MN_CHECK(pthread_create(&t[i], NULL, rec_worker, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < PT; i++) pthread_join(t[i], NULL);
  MN_CHECK(atomic_load(&g_errors) == 0);
  mn_trace_recorder_stats_t rs;
  MN_CHECK_OK(mn_trace_recorder_get_stats(rec, &rs));
  MN_CHECK(rs.overwritten == 0);
  mn_trace_t *tr = NULL;
  MN_CHECK_OK(mn_trace_recorder_to_trace(rec, &tr));
  /* each address: 0 free, 1 allocated, 2 free requested */
  mn__addrmap_t state;
  mn__addrmap_init(&state);
  size_t allocs = 0, bad = 0;
  for (size_t i = 0; tr && i < tr->nentries && !bad; i++) {
    const mn_trace_entry_t *e = &tr->entries[i];
    if (e->action != MN_TRACE_ALLOC && e->action != MN_TRACE_FREE_REQUESTED && e->action != MN_TRACE_FREE_COMPLETED)
      continue;
    mn__addrmap_entry_t *x = mn__addrmap_find(&state, e->address);
    size_t now = x ? x->size : 0, want = e->action == MN_TRACE_ALLOC ? 0 : e->action == MN_TRACE_FREE_REQUESTED ? 1 : 2;
    if (now != want) {
      fprintf(stderr, "  entry %zu: %s of %#llx in state %zu\n", i, mn_trace_action_name(e->action),
              (unsigned long long)e->address, now);
      bad++;
      break;
    }
    if (!x) {
      MN_CHECK_OK(mn__addrmap_insert(&state, e->address, 1, NULL));
      allocs++;
    } else if (want == 2) {
      mn__addrmap_remove(&state, e->address, NULL);
    } else {
      x->size = 2;
    }
  }
  MN_CHECK(bad == 0 && allocs > 1000 && state.count == 0);
  mn__addrmap_fini(&state);
  mn_trace_destroy(tr);
  MN_CHECK_OK(mn_allocator_check_invariants(g_ra));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(g_ra, NULL, NULL));
  mn_allocator_destroy(g_ra);
  mn_trace_recorder_destroy(rec);
  for (int i = 0; i < PT; i++) MN_CHECK_OK(mn_stream_destroy(g_rst[i]));
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
  MN_RUN(sharded_is_the_caching_allocator);
  MN_RUN(lanes_recycled);
  MN_RUN(lanes_exact_peaks_streams);
  MN_RUN(lanes_exact_peaks_threads);
  MN_RUN(lanes_recorder_threads);
  return mn_test_finish();
}
