/* tests/test_mempool.c: memory pools of the caching allocator on the SIM device (label sim):
 * per-thread current pool (nested, other threads unaffected), blocks never migrating, per-pool
 * statistics and snapshots, empty_cache and destroy rules, sources, no_split, use_on_oom, the
 * segment and free-memory callbacks, and bad input. Stream capture into pools is in
 * test_mempool_capture.c. Single-threaded except the case that starts its own thread. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "caching_test_util.h"

static mn_mempool_t *mkpool(mn_allocator_t *a, const mn_mempool_options_t *o) {
  mn_mempool_t *p = NULL;
  MN_CHECK_OK(mn_mempool_create(a, o, &p));
  MN_CHECK(p != NULL && mn_mempool_id(p) > 0 && mn_mempool_allocator(p) == a);
  return p;
}

static mn_alloc_stats_t pool_stats(mn_mempool_t *p) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_mempool_get_stats(p, &s));
  return s;
}

/* The pool id of the snapshot segment holding ptr (UINT64_MAX: none). */
static uint64_t pool_of(mn_allocator_t *a, void *ptr) {
  mn_snapshot_t *s = snap(a);
  uint64_t id = UINT64_MAX;
  for (size_t i = 0; i < s->nsegments; i++)
    if ((uintptr_t)ptr >= s->segments[i].address && (uintptr_t)ptr < s->segments[i].address + s->segments[i].total_size)
      id = s->segments[i].pool_id;
  mn_snapshot_free(s);
  return id;
}

MN_TEST(use_routes_this_thread) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a, NULL), *q = mkpool(a, NULL);
  MN_CHECK(mn_mempool_id(p) != mn_mempool_id(q));
  void *d0 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_use(p));
  void *p0 = alloc_on(a, 4 * KB, NULL), *p1 = alloc_on(a, 30 * MB, NULL);
  MN_CHECK_OK(mn_mempool_use(q)); /* nested: q wins until its unuse */
  void *q0 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_ERR(mn_mempool_unuse(p), MN_ERR_INVALID_STATE, "innermost");
  MN_CHECK_OK(mn_mempool_unuse(q));
  void *p2 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK_ERR(mn_mempool_unuse(p), MN_ERR_INVALID_STATE, "no use");
  void *d1 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(pool_of(a, d0) == 0 && pool_of(a, d1) == 0);
  MN_CHECK(pool_of(a, p0) == mn_mempool_id(p) && pool_of(a, p1) == mn_mempool_id(p) && pool_of(a, p2) == mn_mempool_id(p));
  MN_CHECK(pool_of(a, q0) == mn_mempool_id(q));
  /* p0 and p2 share p's small segment; d0/d1 the allocator's own */
  MN_CHECK((uintptr_t)p2 == (uintptr_t)p0 + 4 * KB && (uintptr_t)d1 == (uintptr_t)d0 + 4 * KB);
  mn_alloc_stats_t ps = pool_stats(p), qs = pool_stats(q), as = stats_of(a);
  MN_CHECK(ps.allocation[MN_POOL_ALL].current == 3 && ps.allocation[MN_POOL_SMALL].current == 2 &&
           ps.allocation[MN_POOL_LARGE].current == 1);
  MN_CHECK(ps.segment[MN_POOL_ALL].current == 2 && ps.reserved_bytes[MN_POOL_ALL].current == (int64_t)(32 * MB));
  MN_CHECK(ps.requested_bytes[MN_POOL_ALL].current == (int64_t)(8 * KB + 30 * MB));
  MN_CHECK(qs.allocation[MN_POOL_ALL].current == 1 && qs.reserved_bytes[MN_POOL_ALL].current == (int64_t)(2 * MB));
  MN_CHECK(as.allocation[MN_POOL_ALL].current == 6 && as.segment[MN_POOL_ALL].current == 4);
  inv(a);
  /* per-pool snapshot: only p's segments */
  mn_snapshot_t *s = NULL;
  MN_CHECK_OK(mn_mempool_snapshot(p, &s));
  MN_CHECK(s->nsegments == 2);
  for (size_t i = 0; i < s->nsegments; i++) MN_CHECK(s->segments[i].pool_id == mn_mempool_id(p));
  mn_snapshot_free(s);
  /* blocks never migrate: p's freed block is not reused outside p */
  MN_CHECK_OK(mn_allocator_free(a, p0));
  void *d2 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(d2 != p0 && pool_of(a, d2) == 0);
  MN_CHECK_OK(mn_mempool_use(p));
  void *p3 = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK(p3 == p0);
  /* the allocator's empty_cache keeps the pools' caches (as PyTorch) */
  void *all[] = {d0, d1, d2, p1, p2, p3, q0};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) MN_CHECK_OK(mn_allocator_free(a, all[i]));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(34 * MB));
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].current == (int64_t)(32 * MB));
  MN_CHECK_OK(mn_mempool_empty_cache(p));
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].peak == (int64_t)(32 * MB));
  MN_CHECK_OK(mn_allocator_reset_peak(a));
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].peak == 0);
  inv(a);
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_mempool_destroy(q)); /* gives its cache back first */
  done(a);
}

typedef struct thread_arg_s {
  mn_allocator_t *a;
  void *ptr;
} thread_arg_t;

static void *other_thread(void *arg) {
  thread_arg_t *t = arg;
  mn_test_ignore(mn_allocator_alloc(t->a, 4 * KB, NULL, &t->ptr));
  return NULL;
}

MN_TEST(other_threads_unaffected) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a, NULL);
  MN_CHECK_OK(mn_mempool_use(p));
  thread_arg_t t = {a, NULL};
  pthread_t th;
  MN_CHECK(pthread_create(&th, NULL, other_thread, &t) == 0);
  MN_CHECK(pthread_join(th, NULL) == 0);
  void *mine = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(t.ptr != NULL && pool_of(a, t.ptr) == 0 && pool_of(a, mine) == mn_mempool_id(p));
  MN_CHECK_ERR(mn_mempool_destroy(p), MN_ERR_BUSY, "current pool");
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK_ERR(mn_mempool_destroy(p), MN_ERR_BUSY, "live blocks");
  MN_CHECK(pool_stats(p).allocation[MN_POOL_ALL].current == 1); /* the refused destroy changed nothing */
  MN_CHECK_OK(mn_allocator_free(a, mine));
  MN_CHECK_OK(mn_allocator_free(a, t.ptr));
  MN_CHECK_OK(mn_mempool_destroy(p));
  done(a);
}

/* A pending free (record_stream) keeps the pool busy until its event completes. */
MN_TEST(destroy_waits_for_pending_frees) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a, NULL);
  mn_stream_t *s = new_stream();
  MN_CHECK_OK(mn_mempool_use(p));
  void *x = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK_OK(mn_memset_async(SIM0, x, 1, 4 * KB, s));
  MN_CHECK_OK(mn_allocator_record_stream(a, x, s));
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK(pool_stats(p).active[MN_POOL_ALL].current == 1);
  MN_CHECK_OK(mn_mempool_destroy(p)); /* waits for the event (the stream runs on synchronize) */
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
  done(a);
}

/* ---- sources, no_split, use_on_oom -------------------------------------------------------- */

typedef struct counting_source_s {
  int allocs, frees;
  size_t live_bytes;
  int mode; /* 0: raw memory; 1: out of memory; 2: NULL; 3: misaligned */
  void *misaligned_base;
} counting_source_t;

static mn_status src_alloc(void *user, mn_device_t dev, size_t nbytes, void **out) {
  counting_source_t *c = user;
  if (c->mode == 1) return MN_ERR_OUT_OF_MEMORY;
  if (c->mode == 2) {
    *out = NULL;
    return MN_OK;
  }
  mn_status st = mn_device_raw_alloc(dev, nbytes, out);
  if (st != MN_OK) return st;
  c->allocs++;
  c->live_bytes += nbytes;
  if (c->mode == 3) {
    c->misaligned_base = *out;
    *out = (char *)*out + 8;
  }
  return MN_OK;
}

static mn_status src_free(void *user, mn_device_t dev, void *ptr, size_t nbytes) {
  counting_source_t *c = user;
  if (c->mode == 3) ptr = c->misaligned_base;
  c->frees++;
  c->live_bytes -= nbytes;
  return mn_device_raw_free(dev, ptr);
}

MN_TEST(source_and_no_split) {
  mn_allocator_t *a = mk(NULL);
  counting_source_t c = {0};
  mn_mempool_source_t src = {src_alloc, src_free, &c};
  mn_mempool_options_t o = {.source = &src, .no_split = true};
  mn_mempool_t *p = mkpool(a, &o);
  MN_CHECK_OK(mn_mempool_use(p));
  void *x = alloc_on(a, 1000, NULL), *y = alloc_on(a, 1000, NULL), *z = alloc_on(a, 3 * MB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  /* no_split: a segment each, of the request rounded to the granularity (2 MiB on SIM) */
  MN_CHECK(c.allocs == 3 && c.live_bytes == 2 * MB + 2 * MB + 4 * MB);
  mn_alloc_stats_t ps = pool_stats(p);
  MN_CHECK(ps.segment[MN_POOL_ALL].current == 3 && ps.allocated_bytes[MN_POOL_ALL].current == (int64_t)(8 * MB));
  MN_CHECK(ps.inactive_split[MN_POOL_ALL].current == 0);
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_mempool_use(p));
  void *w = alloc_on(a, 2000, NULL); /* takes y's whole cached segment */
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK(w == y && c.allocs == 3);
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_free(a, w));
  MN_CHECK_OK(mn_allocator_free(a, z));
  MN_CHECK_OK(mn_mempool_destroy(p)); /* frees through the source */
  MN_CHECK(c.frees == 3 && c.live_bytes == 0);
  /* a failing or broken source: clear errors, nothing kept */
  mn_mempool_t *bad = NULL;
  for (int mode = 1; mode <= 3; mode++) {
    c = (counting_source_t){.mode = mode};
    bad = mkpool(a, &o);
    MN_CHECK_OK(mn_mempool_use(bad));
    void *v = NULL;
    if (mode == 1) MN_CHECK_ERR(mn_allocator_alloc(a, 4 * KB, NULL, &v), MN_ERR_OUT_OF_MEMORY, "out of memory");
    else MN_CHECK_ERR(mn_allocator_alloc(a, 4 * KB, NULL, &v), MN_ERR_INVALID_ARGUMENT, "source returned");
    MN_CHECK(v == NULL);
    MN_CHECK_OK(mn_mempool_unuse(bad));
    MN_CHECK(c.live_bytes == 0 && pool_stats(bad).segment[MN_POOL_ALL].current == 0);
    MN_CHECK_OK(mn_mempool_destroy(bad));
  }
  done(a);
}

MN_TEST(use_on_oom) {
  mn_allocator_t *a = mk(NULL); /* the device has 1 GiB */
  mn_mempool_options_t o = {.use_on_oom = true};
  mn_mempool_t *p = mkpool(a, &o), *plain = mkpool(a, NULL);
  MN_CHECK_OK(mn_mempool_use(p));
  void *big = alloc_on(a, 600 * MB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK_OK(mn_allocator_free(a, big)); /* cached in p: the device has ~424 MiB left */
  void *x = alloc_on(a, 500 * MB, NULL);  /* out of memory outside pools: p's cached block */
  MN_CHECK(x == big && pool_of(a, x) == mn_mempool_id(p));
  MN_CHECK(pool_stats(p).allocation[MN_POOL_ALL].current == 1);
  MN_CHECK(stats_of(a).num_ooms == 0);
  MN_CHECK_OK(mn_allocator_free(a, x));
  /* a pool without use_on_oom is never borrowed from */
  MN_CHECK_OK(mn_mempool_empty_cache(p));
  MN_CHECK_OK(mn_mempool_use(plain));
  big = alloc_on(a, 600 * MB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(plain));
  MN_CHECK_OK(mn_allocator_free(a, big));
  void *y = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 500 * MB, NULL, &y), MN_ERR_OUT_OF_MEMORY, "out of memory");
  inv(a);
  MN_CHECK_OK(mn_mempool_destroy(plain));
  MN_CHECK_OK(mn_mempool_destroy(p));
  done(a);
}

/* ---- callbacks ---------------------------------------------------------------------- */

#define MAX_EVENTS 64
typedef struct recorder_s {
  mn_allocator_t *a;
  mn_segment_info_t ev[MAX_EVENTS];
  int n;
  bool alloc_inside; /* allocate and free from inside the callback */
} recorder_t;

static void record_segment(void *user, const mn_segment_info_t *info) {
  recorder_t *r = user;
  if (r->n < MAX_EVENTS) r->ev[r->n++] = *info;
  if (r->alloc_inside) { /* no allocator lock is held here */
    void *p = NULL;
    if (mn_allocator_alloc(r->a, 512, NULL, &p) == MN_OK) mn_test_ignore(mn_allocator_free(r->a, p));
  }
}

MN_TEST(segment_callbacks) {
  mn_allocator_t *a = mk(NULL);
  recorder_t r = {.a = a};
  MN_CHECK_OK(mn_caching_allocator_add_segment_callback(a, record_segment, &r));
  MN_CHECK_ERR(mn_caching_allocator_add_segment_callback(a, record_segment, &r), MN_ERR_INVALID_ARGUMENT,
               "already registered");
  mn_mempool_t *p = mkpool(a, NULL);
  void *x = alloc_on(a, 30 * MB, NULL);
  MN_CHECK(r.n == 1 && r.ev[0].event == MN_SEGMENT_ALLOC && r.ev[0].address == (uintptr_t)x &&
           r.ev[0].size == 30 * MB && r.ev[0].pool_id == 0 && mn_device_equal(r.ev[0].device, SIM0));
  MN_CHECK_OK(mn_mempool_use(p));
  void *y = alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK(r.n == 2 && r.ev[1].event == MN_SEGMENT_ALLOC && r.ev[1].pool_id == mn_mempool_id(p) &&
           r.ev[1].size == 2 * MB);
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK(r.n == 2); /* cached, not freed */
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(r.n == 3 && r.ev[2].event == MN_SEGMENT_FREE && r.ev[2].address == (uintptr_t)x && r.ev[2].pool_id == 0);
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK(r.n == 4 && r.ev[3].event == MN_SEGMENT_FREE && r.ev[3].pool_id != 0);
  /* a callback may use the allocator */
  r.alloc_inside = true;
  x = alloc_on(a, 30 * MB, NULL);
  MN_CHECK(r.n >= 6 && r.ev[4].event == MN_SEGMENT_ALLOC && r.ev[4].address == (uintptr_t)x);
  MN_CHECK(r.ev[5].event == MN_SEGMENT_ALLOC && r.ev[5].size == 2 * MB); /* the callback's own small segment */
  r.alloc_inside = false;
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_caching_allocator_remove_segment_callback(a, record_segment, &r));
  MN_CHECK_ERR(mn_caching_allocator_remove_segment_callback(a, record_segment, &r), MN_ERR_INVALID_ARGUMENT,
               "not registered");
  int before = r.n;
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(r.n == before); /* removed: not told */
  done(a);
}

MN_TEST(segment_callbacks_expandable) {
  mn_allocator_t *a = mk("expandable_segments:True");
  recorder_t r = {.a = a};
  MN_CHECK_OK(mn_caching_allocator_add_segment_callback(a, record_segment, &r));
  void *x = alloc_on(a, 30 * MB, NULL);
  MN_CHECK(r.n == 1 && r.ev[0].event == MN_SEGMENT_MAP && r.ev[0].address == (uintptr_t)x &&
           r.ev[0].size == 40 * MB);
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(r.n == 2 && r.ev[1].event == MN_SEGMENT_UNMAP && r.ev[1].address == (uintptr_t)x &&
           r.ev[1].size == 40 * MB);
  MN_CHECK_OK(mn_caching_allocator_remove_segment_callback(a, record_segment, &r));
  done(a);
}

typedef struct freer_s {
  mn_allocator_t *a;
  void *held;
  int calls;
  size_t requested;
} freer_t;

static bool free_held(void *user, mn_device_t dev, size_t requested) {
  freer_t *f = user;
  (void)dev;
  f->calls++;
  f->requested = requested;
  if (!f->held) return false;
  mn_test_ignore(mn_allocator_free(f->a, f->held));
  f->held = NULL;
  return true;
}

MN_TEST(free_memory_callbacks) {
  mn_allocator_t *a = mk(NULL);
  freer_t f = {.a = a};
  f.held = alloc_on(a, 700 * MB, NULL);
  MN_CHECK_OK(mn_caching_allocator_add_free_memory_callback(a, free_held, &f));
  MN_CHECK_ERR(mn_caching_allocator_add_free_memory_callback(a, free_held, &f), MN_ERR_INVALID_ARGUMENT,
               "already");
  void *x = alloc_on(a, 500 * MB, NULL); /* out of memory: the callback frees 700 MiB, the retry fits */
  MN_CHECK(f.calls == 1 && f.requested == 500 * MB && f.held == NULL);
  MN_CHECK(stats_of(a).num_ooms == 0);
  void *y = NULL; /* nothing more to free: the callback says so and the allocation fails */
  MN_CHECK_ERR(mn_allocator_alloc(a, 900 * MB, NULL, &y), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK(f.calls == 2 && y == NULL);
  MN_CHECK_OK(mn_caching_allocator_remove_free_memory_callback(a, free_held, &f));
  MN_CHECK_ERR(mn_caching_allocator_remove_free_memory_callback(a, free_held, &f), MN_ERR_INVALID_ARGUMENT,
               "not registered");
  MN_CHECK_OK(mn_allocator_free(a, x));
  done(a);
}

/* ---- bad input ------------------------------------------------------------------------ */

MN_TEST(bad_input) {
  mn_allocator_t *a = mk(NULL), *naive = NULL;
  mn_mempool_t *p = NULL;
  MN_CHECK_ERR(mn_mempool_create(NULL, NULL, &p), MN_ERR_INVALID_ARGUMENT, "allocator");
  MN_CHECK_ERR(mn_mempool_create(a, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "out");
  MN_CHECK_OK(mn_naive_allocator_create(SIM0, &naive));
  MN_CHECK_ERR(mn_mempool_create(naive, NULL, &p), MN_ERR_NOT_SUPPORTED, "mn_caching_allocator_create");
  mn_mempool_source_t half = {src_alloc, NULL, NULL};
  mn_mempool_options_t o = {.source = &half};
  MN_CHECK_ERR(mn_mempool_create(a, &o, &p), MN_ERR_INVALID_ARGUMENT, "alloc and free");
  MN_CHECK(p == NULL);
  MN_CHECK_ERR(mn_mempool_use(NULL), MN_ERR_INVALID_ARGUMENT, "pool");
  MN_CHECK_ERR(mn_mempool_unuse(NULL), MN_ERR_INVALID_ARGUMENT, "pool");
  MN_CHECK_ERR(mn_mempool_get_stats(NULL, NULL), MN_ERR_INVALID_ARGUMENT, "pool");
  MN_CHECK_ERR(mn_mempool_snapshot(NULL, NULL), MN_ERR_INVALID_ARGUMENT, "pool");
  MN_CHECK_ERR(mn_mempool_empty_cache(NULL), MN_ERR_INVALID_ARGUMENT, "pool");
  MN_CHECK_OK(mn_mempool_destroy(NULL));
  MN_CHECK(mn_mempool_id(NULL) == 0 && mn_mempool_allocator(NULL) == NULL);
  MN_CHECK_ERR(mn_caching_allocator_add_segment_callback(naive, record_segment, NULL), MN_ERR_INVALID_ARGUMENT,
               "not a caching allocator");
  MN_CHECK_ERR(mn_caching_allocator_add_segment_callback(a, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "fn");
  MN_CHECK_ERR(mn_caching_allocator_add_free_memory_callback(naive, free_held, NULL), MN_ERR_INVALID_ARGUMENT,
               "not a caching allocator");
  /* the pool of one allocator used on another's allocations does nothing there */
  mn_allocator_t *b = mk(NULL);
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  MN_CHECK_OK(mn_mempool_use(p));
  void *x = alloc_on(b, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  MN_CHECK(pool_of(b, x) == 0 && pool_stats(p).allocation[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_free(b, x));
  MN_CHECK_OK(mn_mempool_destroy(p));
  mn_allocator_destroy(naive);
  done(b);
  done(a);
}

/* Threads allocating in a pool, outside it and emptying caches while
 * callbacks come and go (for TSan): the pool's and the allocator's books
 * add up to what each thread allocated. */
typedef struct worker_s {
  mn_allocator_t *a;
  mn_mempool_t *pool; /* NULL: no use */
} worker_t;

static void count_segment(void *user, const mn_segment_info_t *info) {
  (void)info;
  __atomic_fetch_add((int *)user, 1, __ATOMIC_RELAXED);
}

static void *worker(void *arg) {
  worker_t *w = arg;
  if (w->pool && mn_mempool_use(w->pool) != MN_OK) return NULL;
  for (int i = 0; i < 200; i++) {
    void *p[4] = {NULL};
    for (int k = 0; k < 4; k++) mn_test_ignore(mn_allocator_alloc(w->a, (size_t)(k + 1) * 700 * KB, NULL, &p[k]));
    for (int k = 0; k < 4; k++) mn_test_ignore(mn_allocator_free(w->a, p[k]));
    if (i % 50 == 0 && !w->pool) mn_test_ignore(mn_allocator_empty_cache(w->a));
  }
  if (w->pool) mn_test_ignore(mn_mempool_unuse(w->pool));
  return NULL;
}

MN_TEST(concurrent_routes_and_callbacks) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a, NULL);
  worker_t ws[2] = {{a, p}, {a, NULL}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) MN_CHECK(pthread_create(&th[i], NULL, worker, &ws[i]) == 0);
  int told = 0;
  for (int i = 0; i < 50; i++) {
    MN_CHECK_OK(mn_caching_allocator_add_segment_callback(a, count_segment, &told));
    MN_CHECK_OK(mn_caching_allocator_remove_segment_callback(a, count_segment, &told));
  }
  for (int i = 0; i < 2; i++) MN_CHECK(pthread_join(th[i], NULL) == 0);
  inv(a);
  mn_alloc_stats_t ps = pool_stats(p), as = stats_of(a);
  MN_CHECK(ps.allocation[MN_POOL_ALL].current == 0 && as.allocation[MN_POOL_ALL].current == 0);
  MN_CHECK(ps.allocation[MN_POOL_ALL].allocated == 800 && as.allocation[MN_POOL_ALL].allocated == 1600);
  MN_CHECK(ps.reserved_bytes[MN_POOL_ALL].current > 0); /* the other thread's empty_cache left the pool alone */
  MN_CHECK_OK(mn_mempool_destroy(p));
  done(a);
}

/* Destroying the allocator with pools alive frees them too. */
MN_TEST(allocator_destroy_frees_pools) {
  mn_allocator_t *a = mk(NULL);
  recorder_t r = {.a = a};
  MN_CHECK_OK(mn_caching_allocator_add_segment_callback(a, record_segment, &r));
  mn_mempool_t *p = mkpool(a, NULL);
  MN_CHECK_OK(mn_mempool_use(p));
  (void)alloc_on(a, 4 * KB, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  mn_allocator_destroy(a);
  MN_CHECK(r.n == 1); /* destroy tells no callback */
  mn_sim_stats_t ss = sim_stats();
  MN_CHECK(ss.mapped_bytes == 0);
}

int main(void) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = GB;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(use_routes_this_thread);
  MN_RUN(other_threads_unaffected);
  MN_RUN(destroy_waits_for_pending_frees);
  MN_RUN(source_and_no_split);
  MN_RUN(use_on_oom);
  MN_RUN(segment_callbacks);
  MN_RUN(segment_callbacks_expandable);
  MN_RUN(free_memory_callbacks);
  MN_RUN(bad_input);
  MN_RUN(concurrent_routes_and_callbacks);
  MN_RUN(allocator_destroy_frees_pools);
  return mn_test_finish();
}
