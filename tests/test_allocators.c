/* tests/test_allocators.c: one conformance battery run against every allocator
 * and stack (naive, async, each adaptor, a stack, caching, sharded caching,
 * the pinned host pool, the CPU default), then
 * per-adaptor, stream-ordered pool, stream-hold, CPU bad-free, entry-point and
 * user-vtable (size and version) tests. On SIM by default;
 * test_allocators_gpu.c includes this file with MN_ALLOC_TEST_GPU for cuda:0. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/ptrmap.h"
#include "mn_test.h"

static mn_device_t DEV; /* the device under test: sim:0 or cuda:0 */
static mn_device_t ADEV; /* the battery's allocator's device: DEV, or the CPU for the CPU default */
static bool ON_SIM;

/* ---- helpers ------------------------------------------------------------------- */

static void pattern(unsigned char *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 31u + seed * 7u + (i >> 8));
}

/* Writes a pattern into memory p of ADEV on s, reads it back, compares. */
static bool roundtrip(void *p, size_t n, mn_stream_t *s, unsigned seed) {
  unsigned char *src = malloc(n), *dst = calloc(1, n);
  bool ok = src && dst;
  if (ok) {
    pattern(src, n, seed);
    ok = mn_memcpy_async(ADEV, p, mn_device_cpu(), src, n, s) == MN_OK &&
         mn_memcpy_async(mn_device_cpu(), dst, ADEV, p, n, s) == MN_OK &&
         (s ? mn_stream_synchronize(s) : mn_device_synchronize(ADEV)) == MN_OK && memcmp(src, dst, n) == 0;
  }
  free(src);
  free(dst);
  return ok;
}

static uint64_t lcg(uint64_t *state) {
  *state = *state * 6364136223846793005u + 1442695040888963407u;
  return *state >> 33;
}

typedef struct span {
  uintptr_t p;
  size_t n;
} span;

static int span_cmp(const void *x, const void *y) {
  uintptr_t a = ((const span *)x)->p, b = ((const span *)y)->p;
  return (a > b) - (a < b);
}

/* True when no two spans overlap. Sorts them. */
static bool disjoint(span *v, size_t n) {
  qsort(v, n, sizeof *v, span_cmp);
  for (size_t i = 1; i < n; i++)
    if (v[i - 1].p + v[i - 1].n > v[i].p) return false;
  return true;
}

/* ---- fixtures: the allocators the battery runs against ------------------------------ */

static atomic_long g_fixture_events;
static void count_sink(void *user, const mn_trace_event_t *ev) {
  (void)user, (void)ev;
  atomic_fetch_add(&g_fixture_events, 1);
}

static mn_status make_naive(mn_allocator_t **out) { return mn_naive_allocator_create(DEV, out); }
static mn_status make_async(mn_allocator_t **out) { return mn_async_allocator_create(DEV, out); }

/* An adaptor of kind k over `up`, owning it; destroys `up` on failure. */
static mn_status wrap(int k, mn_allocator_t *up, mn_allocator_t **out) {
  mn_status st = MN_ERR_INVALID_ARGUMENT;
  switch (k) {
    case 0: st = mn_statistics_adaptor_create(up, MN_ADAPTOR_OWNS_UPSTREAM, out); break;
    case 1: st = mn_limiting_adaptor_create(up, (size_t)4 << 30, MN_ADAPTOR_OWNS_UPSTREAM, out); break;
    case 2: st = mn_tracing_adaptor_create(up, count_sink, NULL, MN_ADAPTOR_OWNS_UPSTREAM, out); break;
    case 3: st = mn_tracking_adaptor_create(up, MN_ADAPTOR_OWNS_UPSTREAM, out); break;
  }
  if (st != MN_OK) mn_allocator_destroy(up);
  return st;
}

static mn_status make_over_naive(int k, mn_allocator_t **out) {
  mn_allocator_t *n = NULL;
  mn_status st = make_naive(&n);
  return st == MN_OK ? wrap(k, n, out) : st;
}
static mn_status make_statistics(mn_allocator_t **out) { return make_over_naive(0, out); }
static mn_status make_limiting(mn_allocator_t **out) { return make_over_naive(1, out); }
static mn_status make_tracing(mn_allocator_t **out) { return make_over_naive(2, out); }
static mn_status make_tracking(mn_allocator_t **out) { return make_over_naive(3, out); }

/* tracking over limiting over statistics over `bottom`. */
static mn_status make_stack_over(mn_status (*bottom)(mn_allocator_t **), mn_allocator_t **out) {
  mn_allocator_t *a = NULL, *b = NULL, *c = NULL;
  mn_status st = bottom(&a);
  if (st == MN_OK) st = wrap(0, a, &b);
  if (st == MN_OK) st = wrap(1, b, &c);
  if (st == MN_OK) st = wrap(3, c, out);
  return st;
}
static mn_status make_stack(mn_allocator_t **out) { return make_stack_over(make_naive, out); }
static mn_status make_stack_async(mn_allocator_t **out) { return make_stack_over(make_async, out); }

static mn_status make_caching(mn_allocator_t **out) { return mn_caching_allocator_create(DEV, NULL, out); }
static mn_status make_stack_caching(mn_allocator_t **out) { return make_stack_over(make_caching, out); }
static mn_status make_sharded(mn_allocator_t **out) { return mn_caching_allocator_create_sharded(DEV, NULL, out); }
/* A pinned host pool whose reuse is ordered by DEV's events; its device (ADEV)
 * is the CPU. */
static mn_status make_pinned(mn_allocator_t **out) { return mn_pinned_allocator_create(DEV, NULL, out); }
/* What mn_allocator_get_default(cpu) makes (a fresh one: the battery destroys it). */
static mn_status make_cpu_default(mn_allocator_t **out) { return mn_naive_allocator_create(mn_device_cpu(), out); }

/* Which streams an allocator keeps the pointer of, and so holds against
 * mn_stream_destroy (runtime/stream_hold.h). */
enum { HOLDS_RECORDED = 1, HOLDS_ALLOCATING = 2 };

typedef struct fixture {
  const char *name;
  mn_status (*make)(mn_allocator_t **out);
  unsigned holds;
  /* What the battery does not reach on this allocator, and why (printed with
   * its results); NULL: every case applies as written. */
  const char *note;
} fixture;

static const fixture FIXTURES[] = {
    {"naive", make_naive, 0, NULL},
    {"async", make_async, HOLDS_RECORDED | HOLDS_ALLOCATING, NULL},
    {"statistics(naive)", make_statistics, 0, NULL},
    {"limiting(naive)", make_limiting, 0, NULL},
    {"tracing(naive)", make_tracing, 0, NULL},
    {"tracking(naive)", make_tracking, 0, NULL},
    {"tracking(limiting(statistics(naive)))", make_stack, 0, NULL},
    {"tracking(limiting(statistics(async)))", make_stack_async, HOLDS_RECORDED | HOLDS_ALLOCATING, NULL},
    {"caching", make_caching, HOLDS_RECORDED, NULL},
    {"tracking(limiting(statistics(caching)))", make_stack_caching, HOLDS_RECORDED, NULL},
    {"naive(cpu): the CPU default", make_cpu_default, 0, NULL},
    {"caching, sharded by stream", make_sharded, HOLDS_RECORDED, NULL},
    {"pinned host pool", make_pinned, 0,
     "its device is the CPU, so the battery's streams are CPU streams, which the pool neither orders "
     "reuse on nor holds (mnemo/pinned.h rule 2): record_stream and stream_destroy_while_used check that "
     "path; reuse ordered by device streams and their holds are test_pinned's cases"},
};
static const fixture *g_fixture; /* the one the battery runs */

/* ---- the battery ---------------------------------------------------------------------- */

static void case_sizes_roundtrip(mn_allocator_t *a) {
  static const size_t sizes[] = {1, 7, 512, 513, 4096, 65536, (size_t)1 << 20, ((size_t)3 << 20) + 5};
  enum { N = sizeof sizes / sizeof sizes[0] };
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(ADEV, &s));
  void *p[N] = {0};
  span sp[N];
  for (size_t i = 0; i < N; i++) {
    MN_CHECK_OK(mn_allocator_alloc(a, sizes[i], i % 2 ? s : NULL, &p[i]));
    MN_CHECK(p[i] != NULL && (uintptr_t)p[i] % 256 == 0);
    sp[i] = (span){(uintptr_t)p[i], sizes[i]};
  }
  for (size_t i = 0; i < N; i++)
    if (p[i]) MN_CHECK(roundtrip(p[i], sizes[i], i % 2 ? s : NULL, (unsigned)i));
  MN_CHECK(disjoint(sp, N));
  for (size_t i = 0; i < N; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  MN_CHECK_OK(mn_stream_destroy(s));
}

static void case_zero_size_and_bad_args(mn_allocator_t *a) {
  void *p = (void *)&p;
  MN_CHECK_OK(mn_allocator_alloc(a, 0, NULL, &p));
  MN_CHECK(p == NULL);
  MN_CHECK_OK(mn_allocator_free(a, NULL));
  MN_CHECK_ERR(mn_allocator_alloc(a, 16, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "out");
  mn_stream_t *cpu = NULL;
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &cpu));
  p = NULL;
  if (ADEV.type != MN_DEVICE_CPU) {
    MN_CHECK_ERR(mn_allocator_alloc(a, 16, cpu, &p), MN_ERR_INVALID_ARGUMENT, "stream of cpu");
    MN_CHECK(p == NULL);
  } else { /* a host allocator takes any device's stream */
    mn_stream_t *dev = NULL;
    MN_CHECK_OK(mn_stream_default(DEV, &dev));
    MN_CHECK_OK(mn_allocator_alloc(a, 16, dev, &p));
    MN_CHECK_OK(mn_allocator_free(a, p));
  }
  MN_CHECK_OK(mn_stream_destroy(cpu));
  MN_CHECK(mn_device_equal(mn_allocator_device(a), ADEV));
}

static void case_double_free_is_error(mn_allocator_t *a) {
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 1000, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_clear_error();
  MN_CHECK(mn_allocator_free(a, p) != MN_OK && mn_last_error()[0] != '\0');
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_alloc(a, 1000, NULL, &q)); /* still works */
  if (q) MN_CHECK(roundtrip(q, 1000, NULL, 3));
  MN_CHECK_OK(mn_allocator_free(a, q));
}

static void case_foreign_pointer_is_error(mn_allocator_t *a) {
  mn_alloc_stats_t before, after;
  bool stats = mn_allocator_get_stats(a, &before) == MN_OK;
  void *p = NULL;
  int local = 0;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  if (stats) MN_CHECK_OK(mn_allocator_get_stats(a, &before));
  mn_clear_error();
  MN_CHECK(mn_allocator_free(a, (char *)p + 256) != MN_OK && mn_last_error()[0] != '\0');
  mn_clear_error();
  MN_CHECK(mn_allocator_free(a, &local) != MN_OK && mn_last_error()[0] != '\0');
  if (stats) {
    MN_CHECK_OK(mn_allocator_get_stats(a, &after));
    MN_CHECK(after.allocation[MN_POOL_ALL].current == before.allocation[MN_POOL_ALL].current);
    MN_CHECK(after.allocated_bytes[MN_POOL_ALL].current == before.allocated_bytes[MN_POOL_ALL].current);
  }
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  if (p) MN_CHECK(roundtrip(p, 4096, NULL, 5)); /* the real allocation is intact */
  MN_CHECK_OK(mn_allocator_free(a, p));
}

/* Memory used on s2 (record_stream) must not be handed out and overwritten on
 * s1 before s2's work has read it. On SIM, s2's read is still queued when the
 * block is freed and a new one is written on s1. */
static void case_record_stream(mn_allocator_t *a) {
  enum { N = 4096 };
  mn_stream_t *s1 = NULL, *s2 = NULL;
  MN_CHECK_OK(mn_stream_create(ADEV, &s1));
  MN_CHECK_OK(mn_stream_create(ADEV, &s2));
  unsigned char *want = malloc(N), *other = malloc(N), *got = calloc(1, N);
  pattern(want, N, 11);
  pattern(other, N, 12);
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, N, s1, &p));
  if (p) {
    MN_CHECK_OK(mn_memcpy_async(ADEV, p, mn_device_cpu(), want, N, s1));
    MN_CHECK_OK(mn_stream_synchronize(s1));
    MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
    MN_CHECK_ERR(mn_allocator_record_stream(a, p, NULL), MN_ERR_INVALID_ARGUMENT, "stream");
    MN_CHECK_OK(mn_memcpy_async(mn_device_cpu(), got, ADEV, p, N, s2)); /* queued on s2 */
    MN_CHECK_OK(mn_allocator_free(a, p));
    MN_CHECK_OK(mn_allocator_alloc(a, N, s1, &q));
    if (q) MN_CHECK_OK(mn_memcpy_async(ADEV, q, mn_device_cpu(), other, N, s1));
    MN_CHECK_OK(mn_stream_synchronize(s1));
    MN_CHECK_OK(mn_stream_synchronize(s2));
    MN_CHECK(memcmp(got, want, N) == 0);
    MN_CHECK_OK(mn_allocator_free(a, q));
  }
  free(want);
  free(other);
  free(got);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

static void case_empty_cache_returns_memory(mn_allocator_t *a) {
  mn_sim_stats_t before, after;
  if (ON_SIM) MN_CHECK_OK(mn_sim_get_stats(DEV, &before));
  void *p[5] = {0};
  for (int i = 0; i < 5; i++) MN_CHECK_OK(mn_allocator_alloc(a, (size_t)1 << 20, NULL, &p[i]));
  for (int i = 0; i < 5; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_allocator_empty_cache(a)); /* twice is fine */
  if (ON_SIM) {
    MN_CHECK_OK(mn_sim_get_stats(DEV, &after));
    MN_CHECK(after.mapped_bytes == before.mapped_bytes);
  }
}

static void case_stats_consistency(mn_allocator_t *a) {
  mn_alloc_stats_t s0, s1, s2;
  mn_status st = mn_allocator_get_stats(a, &s0);
  if (st == MN_ERR_NOT_SUPPORTED) return; /* keeps none: nothing to check */
  MN_CHECK_OK(st);
  MN_CHECK(s0.size == sizeof s0 && s0.version == MN_ALLOC_STATS_VERSION);
  void *p[3] = {0};
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_allocator_alloc(a, (size_t)(i + 1) * 1000, NULL, &p[i]));
  MN_CHECK_OK(mn_allocator_get_stats(a, &s1));
  const mn_stat_t *n = &s1.allocation[MN_POOL_ALL], *b = &s1.allocated_bytes[MN_POOL_ALL];
  MN_CHECK(n->current == s0.allocation[MN_POOL_ALL].current + 3);
  MN_CHECK(b->current >= s0.allocated_bytes[MN_POOL_ALL].current + 6000);
  MN_CHECK(s1.requested_bytes[MN_POOL_ALL].current == s0.requested_bytes[MN_POOL_ALL].current + 6000);
  MN_CHECK(n->peak >= n->current && b->peak >= b->current);
  MN_CHECK(n->allocated - n->freed == n->current && b->allocated - b->freed == b->current);
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  MN_CHECK_OK(mn_allocator_get_stats(a, &s2));
  MN_CHECK(s2.allocation[MN_POOL_ALL].current == s0.allocation[MN_POOL_ALL].current);
  MN_CHECK(s2.allocated_bytes[MN_POOL_ALL].current == s0.allocated_bytes[MN_POOL_ALL].current);
  MN_CHECK(s2.allocated_bytes[MN_POOL_ALL].peak >= s1.allocated_bytes[MN_POOL_ALL].current);
  if (mn_allocator_reset_peak(a) == MN_OK) {
    MN_CHECK_OK(mn_allocator_get_stats(a, &s2));
    MN_CHECK(s2.allocation[MN_POOL_ALL].peak == s2.allocation[MN_POOL_ALL].current);
    MN_CHECK(s2.allocated_bytes[MN_POOL_ALL].peak == s2.allocated_bytes[MN_POOL_ALL].current);
  }
}

static void case_many_small(mn_allocator_t *a) {
  enum { N = 1000 };
  void **p = calloc(N, sizeof *p);
  span *sp = calloc(N, sizeof *sp);
  size_t *order = calloc(N, sizeof *order);
  uint64_t rng = 42;
  size_t got = 0;
  for (size_t i = 0; i < N; i++) {
    size_t n = 1 + (size_t)(lcg(&rng) % 2048);
    if (mn_allocator_alloc(a, n, NULL, &p[i]) == MN_OK && p[i]) sp[got++] = (span){(uintptr_t)p[i], n};
    order[i] = i;
  }
  MN_CHECK(got == N);
  MN_CHECK(disjoint(sp, got));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  for (size_t i = N - 1; i > 0; i--) { /* free in a shuffled order */
    size_t j = (size_t)(lcg(&rng) % (i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  int bad = 0;
  for (size_t i = 0; i < N; i++) bad += mn_allocator_free(a, p[order[i]]) != MN_OK;
  MN_CHECK(bad == 0);
  free(p);
  free(sp);
  free(order);
}

typedef struct hammer_arg {
  mn_allocator_t *a;
  unsigned seed;
  int failures;
} hammer_arg;

static void *hammer(void *arg) {
  hammer_arg *h = arg;
  void *live[8] = {0};
  uint64_t rng = h->seed;
  for (int i = 0; i < 300; i++) {
    int k = (int)(lcg(&rng) % 8);
    if (live[k]) {
      h->failures += mn_allocator_free(h->a, live[k]) != MN_OK;
      live[k] = NULL;
    } else {
      h->failures += mn_allocator_alloc(h->a, 1 + (size_t)(lcg(&rng) % 65536), NULL, &live[k]) != MN_OK;
    }
  }
  for (int k = 0; k < 8; k++) h->failures += mn_allocator_free(h->a, live[k]) != MN_OK;
  return NULL;
}

static void case_threads(mn_allocator_t *a) {
  enum { T = 4 };
  pthread_t th[T];
  hammer_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (hammer_arg){a, (unsigned)(i + 1), 0};
    MN_CHECK(pthread_create(&th[i], NULL, hammer, &args[i]) == 0);
  }
  int failures = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    failures += args[i].failures;
  }
  MN_CHECK(failures == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
}

/* A stream whose pointer the allocator keeps (a record_stream use of a live
 * block; the stream-ordered allocator's allocating stream) cannot be
 * destroyed under it: MN_ERR_BUSY, the stream intact, until the block is
 * freed. A stream it keeps no pointer of may go at once; the free after it is
 * safe either way (the destroy-then-free order used to be a use-after-free). */
static void case_stream_destroy_while_used(mn_allocator_t *a) {
  enum { N = 4096 };
  mn_stream_t *s1 = NULL, *s2 = NULL;
  MN_CHECK_OK(mn_stream_create(ADEV, &s1));
  MN_CHECK_OK(mn_stream_create(ADEV, &s2));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, N, s1, &p));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  mn_stream_t **ss[2] = {&s2, &s1};
  const unsigned held[2] = {HOLDS_RECORDED, HOLDS_ALLOCATING};
  for (int k = 0; k < 2; k++) {
    mn_clear_error();
    mn_status st = mn_stream_destroy(*ss[k]);
    if (g_fixture->holds & held[k]) {
      MN_CHECK(st == MN_ERR_BUSY && strstr(mn_last_error(), "is still used by 1 allocator block") != NULL);
      MN_CHECK_OK(mn_stream_synchronize(*ss[k])); /* still a working stream */
    } else {
      MN_CHECK_OK(st);
      *ss[k] = NULL;
    }
  }
  if (p) MN_CHECK(roundtrip(p, N, NULL, 9));
  MN_CHECK_OK(mn_allocator_free(a, p)); /* every hold ends here */
  if (s2) MN_CHECK_OK(mn_stream_destroy(s2));
  if (s1) MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
}

typedef struct battery_case {
  const char *name;
  void (*fn)(mn_allocator_t *a);
} battery_case;

static const battery_case CASES[] = {
    {"sizes_roundtrip", case_sizes_roundtrip},
    {"zero_size_and_bad_args", case_zero_size_and_bad_args},
    {"double_free_is_error", case_double_free_is_error},
    {"foreign_pointer_is_error", case_foreign_pointer_is_error},
    {"record_stream", case_record_stream},
    {"stream_destroy_while_used", case_stream_destroy_while_used},
    {"empty_cache_returns_memory", case_empty_cache_returns_memory},
    {"stats_consistency", case_stats_consistency},
    {"many_small", case_many_small},
    {"threads", case_threads},
};

/* Every case on a fresh allocator; afterwards nothing may be outstanding. */
static void run_battery(const fixture *f) {
  static char label[160];
  if (f->note) printf("%s: note: %s\n", f->name, f->note);
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    snprintf(label, sizeof label, "%s/%s", f->name, CASES[c].name);
    mn_test_case = label;
    int before = mn_test_failures;
    mn_sim_stats_t s0, s1;
    if (ON_SIM) MN_CHECK_OK(mn_sim_get_stats(DEV, &s0));
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(f->make(&a));
    if (a) {
      g_fixture = f;
      ADEV = mn_allocator_device(a);
      CASES[c].fn(a);
      ADEV = DEV;
      MN_CHECK_OK(mn_allocator_check_invariants(a));
      MN_CHECK_OK(mn_allocator_empty_cache(a));
      mn_allocator_destroy(a);
    }
    MN_CHECK_OK(mn_device_synchronize(DEV));
    if (ON_SIM) {
      MN_CHECK_OK(mn_sim_get_stats(DEV, &s1));
      MN_CHECK(s1.mapped_bytes == s0.mapped_bytes);
      MN_CHECK(s1.live_streams == s0.live_streams && s1.live_events == s0.live_events);
      MN_CHECK(s1.illegal_accesses == s0.illegal_accesses);
      MN_CHECK_OK(mn_sim_check_invariants(DEV));
    }
    printf("%-64s %s\n", label, mn_test_failures == before ? "ok" : "FAILED");
  }
}

/* ---- entry points (PyTorch / CuPy) ---------------------------------------------- */

typedef struct collector {
  pthread_mutex_t lock;
  size_t n;
  mn_trace_event_t ev[64];
} collector;

static void collect_sink(void *user, const mn_trace_event_t *ev) {
  collector *c = user;
  pthread_mutex_lock(&c->lock);
  if (c->n < 64) c->ev[c->n++] = *ev;
  pthread_mutex_unlock(&c->lock);
}

/* `s1` is what the framework passes: a native handle on CUDA, an mn_stream_t *
 * on SIM; `w1` is the mn_stream_t behind it, used here for copies. On SIM the
 * entry points use w1 itself; on CUDA they wrap s1 once, under another id. */
static void check_entry_points(void *s1, mn_stream_t *w1) {
  void *p = mnemo_torch_alloc(4096, 0, NULL);
  MN_CHECK(p != NULL);
  if (p) MN_CHECK(roundtrip(p, 4096, NULL, 21));
  mnemo_torch_free(p, 4096, 0, NULL);
  p = mnemo_torch_alloc(1 << 20, 0, s1);
  MN_CHECK(p != NULL);
  if (p) MN_CHECK(roundtrip(p, 1 << 20, w1, 22));
  mnemo_torch_free(p, 1 << 20, 0, s1);
  MN_CHECK(mnemo_torch_alloc(0, 0, NULL) == NULL);

  /* The same native stream maps to one mn_stream_t: the same id twice. */
  collector c = {.lock = PTHREAD_MUTEX_INITIALIZER};
  mn_allocator_t *n = NULL, *t = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_tracing_adaptor_create(n, collect_sink, &c, MN_ADAPTOR_OWNS_UPSTREAM, &t));
  MN_CHECK_OK(mn_allocator_set_default(DEV, t));
  void *a = mnemo_torch_alloc(100, 0, s1), *b = mnemo_torch_alloc(100, 0, s1);
  mnemo_torch_free(a, 100, 0, s1);
  mnemo_torch_free(b, 100, 0, s1);
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  MN_CHECK(c.n == 4 && c.ev[0].stream_id == c.ev[1].stream_id && c.ev[0].stream_id != mn_stream_id(def));
  MN_CHECK(c.n == 4 && c.ev[2].stream_id == c.ev[0].stream_id);
  if (ON_SIM) MN_CHECK(c.ev[0].stream_id == mn_stream_id(w1));
  MN_CHECK_OK(mn_allocator_set_default(DEV, NULL));
  mn_allocator_destroy(t);

  /* CuPy: default allocator, or the allocator passed as param. */
  p = mnemo_cupy_malloc(NULL, 100, 0);
  MN_CHECK(p != NULL);
  mnemo_cupy_free(NULL, p, 0);
  mn_allocator_t *st = NULL, *cpu = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_statistics_adaptor_create(n, MN_ADAPTOR_OWNS_UPSTREAM, &st));
  p = mnemo_cupy_malloc(st, 100, 0);
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_get_stats(st, &s));
  MN_CHECK(p != NULL && s.allocation[MN_POOL_ALL].current == 1);
  mnemo_cupy_free(st, p, 0);
  MN_CHECK_OK(mn_allocator_get_stats(st, &s));
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 0);
  mn_allocator_destroy(st);
  MN_CHECK_OK(mn_naive_allocator_create(mn_device_cpu(), &cpu));
  mn_clear_error();
  MN_CHECK(mnemo_cupy_malloc(cpu, 100, 0) == NULL && strstr(mn_last_error(), "given for") != NULL);
  mn_allocator_destroy(cpu);

  /* Errors: NULL / nothing, with the reason left in mn_last_error. */
  mn_clear_error();
  MN_CHECK(mnemo_torch_alloc(16, 63, NULL) == NULL);
  MN_CHECK(strstr(mn_last_error(), "mnemo_torch_alloc") != NULL && strstr(mn_last_error(), ":63") != NULL);
  int local = 0;
  mn_clear_error();
  mnemo_torch_free(&local, 4, 0, NULL);
  MN_CHECK(strstr(mn_last_error(), "mnemo_torch_free") != NULL);
  MN_CHECK(mnemo_empty_cache(0) == 0);
  MN_CHECK(mnemo_empty_cache(63) == MN_ERR_NO_DEVICE);
}

#ifndef MN_ALLOC_TEST_GPU

static size_t sim_pending(mn_stream_t *s) {
  size_t n = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &n));
  return n;
}

/* ---- the pointer map ---------------------------------------------------------------- */

MN_TEST(addrmap_matches_a_reference) {
  enum { K = 4096 };
  mn__addrmap_t m;
  mn__addrmap_init(&m);
  static bool in[K];
  memset(in, 0, sizeof in);
  uint64_t rng = 7;
  int bad = 0;
  for (int i = 0; i < 100000; i++) {
    size_t k = (size_t)(lcg(&rng) % K);
    uintptr_t key = (k + 1) * 512; /* aligned like allocations, clustered */
    if (in[k]) {
      mn__addrmap_entry_t e;
      bad += !mn__addrmap_remove(&m, key, &e) || e.size != k;
      in[k] = false;
    } else {
      bad += mn__addrmap_insert(&m, key, k, NULL) != MN_OK;
      in[k] = true;
    }
    if (i % 9973 == 0) {
      size_t count = 0;
      for (size_t j = 0; j < K; j++) {
        mn__addrmap_entry_t *e = mn__addrmap_find(&m, (j + 1) * 512);
        bad += (e != NULL) != in[j] || (e && e->size != j);
        count += in[j];
      }
      bad += count != m.count;
    }
  }
  MN_CHECK(bad == 0);
  MN_CHECK_ERR(mn__addrmap_insert(&m, 0, 1, NULL), MN_ERR_INVALID_ARGUMENT, "0");
  MN_CHECK(mn__addrmap_insert(&m, 1, 1, NULL) == MN_OK);
  MN_CHECK_ERR(mn__addrmap_insert(&m, 1, 1, NULL), MN_ERR_INVALID_ARGUMENT, "already");
  MN_CHECK(!mn__addrmap_remove(&m, 3, NULL) && mn__addrmap_find(&m, 0) == NULL);
  mn__addrmap_fini(&m);
  MN_CHECK(m.count == 0 && mn__addrmap_find(&m, 1) == NULL);
}

/* ---- statistics ------------------------------------------------------------------- */

static mn_alloc_stats_t stats_of(mn_allocator_t *a) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  return s;
}

static bool stat_is(mn_stat_t s, int64_t cur, int64_t peak, int64_t alloc, int64_t freed) {
  return s.current == cur && s.peak == peak && s.allocated == alloc && s.freed == freed;
}

MN_TEST(statistics_counts_exactly) {
  mn_allocator_t *n = NULL, *s = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_statistics_adaptor_create(n, 0, &s));
  MN_CHECK(strcmp(mn_allocator_name(s), "statistics") == 0);
  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  MN_CHECK_OK(mn_allocator_alloc(s, 100, NULL, &p1));
  MN_CHECK_OK(mn_allocator_alloc(s, 200, NULL, &p2));
  mn_alloc_stats_t st = stats_of(s);
  MN_CHECK(stat_is(st.allocation[MN_POOL_ALL], 2, 2, 2, 0));
  MN_CHECK(stat_is(st.allocated_bytes[MN_POOL_ALL], 300, 300, 300, 0));
  MN_CHECK(stat_is(st.requested_bytes[MN_POOL_ALL], 300, 300, 300, 0));
  MN_CHECK(st.reserved_bytes[MN_POOL_ALL].current == 0 && st.allocation[MN_POOL_SMALL].current == 0);
  MN_CHECK_OK(mn_allocator_free(s, p1));
  st = stats_of(s);
  MN_CHECK(stat_is(st.allocation[MN_POOL_ALL], 1, 2, 2, 1));
  MN_CHECK(stat_is(st.allocated_bytes[MN_POOL_ALL], 200, 300, 300, 100));
  MN_CHECK_OK(mn_allocator_reset_peak(s));
  st = stats_of(s);
  MN_CHECK(stat_is(st.allocation[MN_POOL_ALL], 1, 1, 2, 1));
  MN_CHECK(stat_is(st.allocated_bytes[MN_POOL_ALL], 200, 200, 300, 100));
  /* Foreign and double frees change nothing. */
  MN_CHECK_ERR(mn_allocator_free(s, (char *)p2 + 8), MN_ERR_INVALID_ARGUMENT, "statistics adaptor");
  MN_CHECK_ERR(mn_allocator_free(s, p1), MN_ERR_INVALID_ARGUMENT, "freed already");
  MN_CHECK_ERR(mn_allocator_record_stream(s, p1, NULL), MN_ERR_INVALID_ARGUMENT, "stream");
  mn_stream_t *def = NULL;
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  MN_CHECK_ERR(mn_allocator_record_stream(s, p1, def), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  MN_CHECK_OK(mn_allocator_record_stream(s, p2, def));
  st = stats_of(s);
  MN_CHECK(stat_is(st.allocation[MN_POOL_ALL], 1, 1, 2, 1));
  /* An upstream OOM is counted and changes nothing else. */
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  MN_CHECK_ERR(mn_allocator_alloc(s, 50, NULL, &p3), MN_ERR_OUT_OF_MEMORY, "injected");
  MN_CHECK(p3 == NULL);
  st = stats_of(s);
  MN_CHECK(st.num_ooms == 1 && stat_is(st.allocated_bytes[MN_POOL_ALL], 200, 200, 300, 100));
  MN_CHECK_OK(mn_allocator_check_invariants(s));
  MN_CHECK_OK(mn_allocator_free(s, p2));
  /* Not owning: the naive allocator outlives the adaptor. */
  mn_allocator_destroy(s);
  MN_CHECK_OK(mn_allocator_alloc(n, 10, NULL, &p3));
  MN_CHECK_OK(mn_allocator_free(n, p3));
  mn_allocator_destroy(n);
}

MN_TEST(adaptor_arguments_are_checked) {
  mn_allocator_t *n = NULL, *x = (mn_allocator_t *)&n;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_ERR(mn_statistics_adaptor_create(NULL, 0, &x), MN_ERR_INVALID_ARGUMENT, "upstream");
  MN_CHECK_ERR(mn_statistics_adaptor_create(n, 0x80, &x), MN_ERR_INVALID_ARGUMENT, "flags=0x80");
  MN_CHECK_ERR(mn_limiting_adaptor_create(n, 1, MN_ADAPTOR_CAPTURE_BACKTRACES, &x), MN_ERR_INVALID_ARGUMENT, "flags");
  MN_CHECK_ERR(mn_tracing_adaptor_create(n, NULL, NULL, 0, &x), MN_ERR_INVALID_ARGUMENT, "sink");
  MN_CHECK_ERR(mn_tracking_adaptor_create(n, 0x4, &x), MN_ERR_INVALID_ARGUMENT, "flags=0x4");
  MN_CHECK(x == (mn_allocator_t *)&n); /* untouched */
  size_t u = 0, l = 0, c = 0, b = 0;
  MN_CHECK_ERR(mn_limiting_adaptor_usage(n, &u, &l), MN_ERR_INVALID_ARGUMENT, "not a limiting adaptor");
  MN_CHECK_ERR(mn_tracking_adaptor_live(n, &c, &b), MN_ERR_INVALID_ARGUMENT, "not a tracking adaptor");
  MN_CHECK_ERR(mn_tracking_adaptor_report(n, stdout), MN_ERR_INVALID_ARGUMENT, "not a tracking adaptor");
  MN_CHECK_ERR(mn_async_allocator_create(mn_device_cpu(), &x), MN_ERR_NOT_SUPPORTED, "stream-ordered");
  MN_CHECK_ERR(mn_async_allocator_create(mn_device_sim(9), &x), MN_ERR_NO_DEVICE, "sim:9");
  MN_CHECK(x == (mn_allocator_t *)&n);
  mn_allocator_destroy(n);
}

/* A pointer allocated below the stack is foreign to it: refused, nothing changes. */
MN_TEST(stack_refuses_pointers_from_below) {
  mn_allocator_t *n = NULL, *s = NULL, *l = NULL, *t = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_statistics_adaptor_create(n, 0, &s));
  MN_CHECK_OK(mn_limiting_adaptor_create(s, (size_t)1 << 30, MN_ADAPTOR_OWNS_UPSTREAM, &l));
  MN_CHECK_OK(mn_tracking_adaptor_create(l, MN_ADAPTOR_OWNS_UPSTREAM, &t));
  void *mine = NULL, *below = NULL;
  MN_CHECK_OK(mn_allocator_alloc(t, 1000, NULL, &mine));
  MN_CHECK_OK(mn_allocator_alloc(n, 1000, NULL, &below));
  MN_CHECK_ERR(mn_allocator_free(t, below), MN_ERR_INVALID_ARGUMENT, "tracking adaptor");
  size_t c = 0, b = 0, used = 0, lim = 0;
  MN_CHECK_OK(mn_tracking_adaptor_live(t, &c, &b));
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(c == 1 && b == 1000 && used == 1000 && lim == (size_t)1 << 30);
  MN_CHECK(stats_of(s).allocation[MN_POOL_ALL].current == 1);
  MN_CHECK(stats_of(t).allocation[MN_POOL_ALL].current == 1); /* forwarded down to statistics */
  MN_CHECK_OK(mn_allocator_free(t, mine));
  MN_CHECK_OK(mn_allocator_free(n, below));
  MN_CHECK_OK(mn_allocator_check_invariants(t));
  mn_allocator_destroy(t); /* destroys l and s, not n */
  MN_CHECK_OK(mn_allocator_alloc(n, 10, NULL, &mine));
  MN_CHECK_OK(mn_allocator_free(n, mine));
  mn_allocator_destroy(n);
}

/* ---- limiting ---------------------------------------------------------------------- */

MN_TEST(limiting_caps_and_rolls_back) {
  const size_t MiB = (size_t)1 << 20;
  mn_allocator_t *l = NULL;
  mn_allocator_t *n = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_limiting_adaptor_create(n, 5 * MiB, MN_ADAPTOR_OWNS_UPSTREAM, &l));
  size_t used = 0, lim = 0;
  void *a = NULL, *b = NULL, *c = NULL;
  MN_CHECK_OK(mn_allocator_alloc(l, 3 * MiB, NULL, &a));
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(used == 3 * MiB && lim == 5 * MiB);
  /* Over the cap: the message names the cap, the bytes in use and the bytes asked. */
  MN_CHECK_ERR(mn_allocator_alloc(l, 3 * MiB, NULL, &c), MN_ERR_OUT_OF_MEMORY, "limit of 5242880 bytes");
  MN_CHECK(strstr(mn_last_error(), "3145728 bytes in use") && strstr(mn_last_error(), "3145728 bytes asked"));
  /* Upstream fails: the reservation is rolled back. */
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  MN_CHECK_ERR(mn_allocator_alloc(l, 1 * MiB, NULL, &c), MN_ERR_OUT_OF_MEMORY, "injected");
  MN_CHECK(c == NULL);
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(used == 3 * MiB);
  MN_CHECK_OK(mn_allocator_alloc(l, 2 * MiB, NULL, &b)); /* exactly at the cap */
  MN_CHECK_ERR(mn_allocator_alloc(l, 1, NULL, &c), MN_ERR_OUT_OF_MEMORY, "1 bytes asked");
  MN_CHECK_OK(mn_allocator_free(l, b));
  MN_CHECK_ERR(mn_allocator_free(l, b), MN_ERR_INVALID_ARGUMENT, "limiting adaptor");
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(used == 3 * MiB);
  MN_CHECK_OK(mn_allocator_free(l, a));
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(used == 0);
  MN_CHECK_ERR(mn_allocator_get_stats(l, &(mn_alloc_stats_t){0}), MN_ERR_NOT_SUPPORTED, "naive");
  mn_allocator_destroy(l);
}

typedef struct cap_arg {
  mn_allocator_t *l;
  size_t cap;
  int ok, oom, other, over;
} cap_arg;

static void *cap_worker(void *arg) {
  cap_arg *c = arg;
  for (int i = 0; i < 100; i++) {
    void *p = NULL;
    mn_status st = mn_allocator_alloc(c->l, (size_t)1 << 20, NULL, &p);
    if (st == MN_OK) {
      size_t used = 0, lim = 0;
      c->other += mn_limiting_adaptor_usage(c->l, &used, &lim) != MN_OK; /* counted; checked by the main thread */
      c->over += used > c->cap;
      c->ok++;
      c->other += mn_allocator_free(c->l, p) != MN_OK;
    } else {
      c->oom += st == MN_ERR_OUT_OF_MEMORY;
      c->other += st != MN_ERR_OUT_OF_MEMORY;
    }
  }
  return NULL;
}

MN_TEST(limiting_holds_under_threads) {
  enum { T = 8 };
  const size_t cap = (size_t)3 << 20;
  mn_allocator_t *n = NULL, *l = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_limiting_adaptor_create(n, cap, MN_ADAPTOR_OWNS_UPSTREAM, &l));
  pthread_t th[T];
  cap_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (cap_arg){.l = l, .cap = cap};
    pthread_create(&th[i], NULL, cap_worker, &args[i]);
  }
  int ok = 0, over = 0, other = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    ok += args[i].ok, over += args[i].over, other += args[i].other;
  }
  MN_CHECK(ok > 0 && over == 0 && other == 0);
  size_t used = 1, lim = 0;
  MN_CHECK_OK(mn_limiting_adaptor_usage(l, &used, &lim));
  MN_CHECK(used == 0);
  mn_allocator_destroy(l);
}

/* ---- tracing ------------------------------------------------------------------------- */

MN_TEST(tracing_reports_the_sequence) {
  collector c = {.lock = PTHREAD_MUTEX_INITIALIZER};
  mn_allocator_t *n = NULL, *t = NULL;
  mn_stream_t *s1 = NULL, *def = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_default(DEV, &def));
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_tracing_adaptor_create(n, collect_sink, &c, MN_ADAPTOR_OWNS_UPSTREAM, &t));
  void *p = NULL, *q = NULL, *r = NULL;
  MN_CHECK_OK(mn_allocator_alloc(t, 100, s1, &p));
  MN_CHECK_OK(mn_allocator_alloc(t, 200, NULL, &q));
  MN_CHECK_OK(mn_allocator_free(t, p));
  MN_CHECK_OK(mn_allocator_free(t, q));
  MN_CHECK_ERR(mn_allocator_free(t, q), MN_ERR_INVALID_ARGUMENT, "tracing adaptor"); /* no event */
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  MN_CHECK_ERR(mn_allocator_alloc(t, 300, NULL, &r), MN_ERR_OUT_OF_MEMORY, "injected");
  MN_CHECK_OK(mn_allocator_empty_cache(t));
  const struct {
    mn_trace_action action;
    void *address;
    size_t size;
    uint64_t stream;
  } want[] = {
      {MN_TRACE_ALLOC, p, 100, mn_stream_id(s1)},
      {MN_TRACE_ALLOC, q, 200, mn_stream_id(def)},
      {MN_TRACE_FREE_REQUESTED, p, 100, mn_stream_id(s1)},
      {MN_TRACE_FREE_REQUESTED, q, 200, mn_stream_id(def)},
      {MN_TRACE_OOM, NULL, 300, mn_stream_id(def)},
      {MN_TRACE_EMPTY_CACHE, NULL, 0, 0},
  };
  MN_CHECK(c.n == sizeof want / sizeof want[0]);
  for (size_t i = 0; i < c.n && i < sizeof want / sizeof want[0]; i++) {
    const mn_trace_event_t *e = &c.ev[i];
    bool ok = e->action == want[i].action && e->address == (uintptr_t)want[i].address && e->size == want[i].size &&
              e->stream_id == want[i].stream && mn_device_equal(e->device, DEV) &&
              e->requested_size == (e->action == MN_TRACE_ALLOC ? e->size : 0) &&
              (i == 0 || e->time_ns >= c.ev[i - 1].time_ns) && e->time_ns > 0;
    MN_CHECK(ok);
    if (!ok) fprintf(stderr, "  event %zu: %s %#lx %zu\n", i, mn_trace_action_name(e->action),
                     (unsigned long)e->address, e->size);
  }
  MN_CHECK(strcmp(mn_trace_action_name(c.ev[2].action), "free_requested") == 0);
  mn_allocator_destroy(t);
  MN_CHECK_OK(mn_stream_destroy(s1));
}

/* ---- tracking -------------------------------------------------------------------------- */

/* The report as a string (caller frees). */
static char *report_of(mn_allocator_t *t) {
  FILE *f = tmpfile();
  if (!f) return NULL;
  MN_CHECK_OK(mn_tracking_adaptor_report(t, f));
  long n = ftell(f);
  rewind(f);
  char *buf = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
  if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
  fclose(f);
  return buf;
}

MN_TEST(tracking_reports_leaks_with_tags) {
  mn_allocator_t *n = NULL, *t = NULL;
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_tracking_adaptor_create(n, MN_ADAPTOR_OWNS_UPSTREAM, &t));
  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  mn_tracking_set_tag("layer1");
  MN_CHECK(strcmp(mn_tracking_get_tag(), "layer1") == 0);
  MN_CHECK_OK(mn_allocator_alloc(t, 1024, NULL, &p1));
  mn_tracking_set_tag("layer2");
  MN_CHECK_OK(mn_allocator_alloc(t, 2048, s1, &p2));
  mn_tracking_set_tag(NULL);
  MN_CHECK_OK(mn_allocator_alloc(t, 3072, NULL, &p3));
  size_t c = 0, b = 0;
  MN_CHECK_OK(mn_tracking_adaptor_live(t, &c, &b));
  MN_CHECK(c == 3 && b == 6144);
  MN_CHECK_OK(mn_allocator_free(t, p1));
  char *r = report_of(t), p2s[32], p3s[32], sid[48];
  snprintf(p2s, sizeof p2s, "%p 2048 bytes", p2);
  snprintf(p3s, sizeof p3s, "%p 3072 bytes", p3);
  snprintf(sid, sizeof sid, "stream %llu tag \"layer2\"", (unsigned long long)mn_stream_id(s1));
  MN_CHECK(r && strstr(r, "mnemo tracking sim:0: 2 live allocations, 5120 bytes\n") == r);
  MN_CHECK(r && strstr(r, p2s) && strstr(r, sid) && strstr(r, p3s) && strstr(r, "tag \"\"\n"));
  MN_CHECK(r && !strstr(r, "layer1"));
  MN_CHECK(r && strstr(r, "#2 ") && strstr(r, "#3 ") && strstr(r, "#2 ") < strstr(r, "#3 ")); /* oldest first */
  free(r);
  /* Long tags are cut to MN_TRACKING_TAG_MAX - 1 bytes. */
  char longtag[200];
  memset(longtag, 'x', sizeof longtag - 1);
  longtag[sizeof longtag - 1] = '\0';
  mn_tracking_set_tag(longtag);
  MN_CHECK(strlen(mn_tracking_get_tag()) == MN_TRACKING_TAG_MAX - 1);
  mn_tracking_set_tag("");
  MN_CHECK_OK(mn_allocator_free(t, p2));
  MN_CHECK_OK(mn_allocator_free(t, p3));
  MN_CHECK_ERR(mn_allocator_free(t, p3), MN_ERR_INVALID_ARGUMENT, "tracking adaptor");
  MN_CHECK_OK(mn_tracking_adaptor_live(t, &c, &b));
  MN_CHECK(c == 0 && b == 0);
  r = report_of(t);
  MN_CHECK(r && strcmp(r, "mnemo tracking sim:0: 0 live allocations, 0 bytes\n") == 0);
  free(r);
  mn_allocator_destroy(t);
  MN_CHECK_OK(mn_stream_destroy(s1));
}

typedef struct tag_arg {
  mn_allocator_t *t;
  void *p;
} tag_arg;

static void *tagged_worker(void *arg) {
  tag_arg *a = arg;
  mn_tracking_set_tag("worker");
  if (mn_allocator_alloc(a->t, 64, NULL, &a->p) != MN_OK) a->p = NULL; /* the main thread checks a->p */
  return NULL;
}

MN_TEST(tracking_tags_are_per_thread_and_backtraces_print) {
  mn_allocator_t *n = NULL, *t = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &n));
  MN_CHECK_OK(mn_tracking_adaptor_create(n, MN_ADAPTOR_OWNS_UPSTREAM | MN_ADAPTOR_CAPTURE_BACKTRACES, &t));
  mn_tracking_set_tag("main");
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(t, 32, NULL, &p));
  tag_arg arg = {t, NULL};
  pthread_t th;
  pthread_create(&th, NULL, tagged_worker, &arg);
  pthread_join(th, NULL);
  MN_CHECK(arg.p != NULL && strcmp(mn_tracking_get_tag(), "main") == 0);
  char *r = report_of(t);
  MN_CHECK(r && strstr(r, "tag \"main\"") && strstr(r, "tag \"worker\""));
  MN_CHECK(r && strstr(r, "\n       0 ") && strstr(r, "\n       1 ")); /* frames 0 and 1 */
  MN_CHECK(r && strstr(r, "[0x")); /* backtrace_symbols: "binary(+off) [0xaddr]" */
  free(r);
  mn_tracking_set_tag(NULL);
  MN_CHECK_OK(mn_allocator_free(t, p));
  MN_CHECK_OK(mn_allocator_free(t, arg.p));
  mn_allocator_destroy(t);
}

/* ---- the stream-ordered pool on SIM ------------------------------------------------------- */

static mn_device_pool_stats_t pool_stats(void) {
  mn_device_pool_stats_t s = {0};
  MN_CHECK_OK(mn_device_pool_stats(DEV, &s));
  return s;
}

MN_TEST(pool_reuse_follows_stream_order) {
  const size_t G = (size_t)2 << 20;
  mn_stream_t *s1 = NULL, *s2 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, SIZE_MAX));
  MN_CHECK_OK(mn_device_pool_reset_peak(DEV)); /* the battery ran before */
  void *p = NULL, *q = NULL, *r = NULL, *t = NULL;
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s1, &p));
  mn_device_pool_stats_t ps = pool_stats();
  MN_CHECK(ps.reserved_current == G && ps.used_current == 1024 && ps.used_high == 1024);
  MN_CHECK(p && roundtrip(p, 1000, s1, 1));
  MN_CHECK_OK(mn_device_free_async(DEV, p, s1));
  MN_CHECK(sim_pending(s1) == 1); /* the free is an operation on s1 */
  MN_CHECK(pool_stats().used_current == 1024); /* not back until s1 reaches it */
  /* The same stream may reuse it at once... */
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s1, &q));
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_device_free_async(DEV, q, s1));
  /* ...another stream only once s1 has reached the free. */
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s2, &r));
  MN_CHECK(r != p && r != NULL);
  MN_CHECK_OK(mn_stream_synchronize(s1));
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s2, &t));
  MN_CHECK(t == p);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK_OK(mn_device_free_async(DEV, r, s2));
  MN_CHECK_OK(mn_device_free_async(DEV, t, NULL));
  MN_CHECK_OK(mn_device_synchronize(DEV));
  ps = pool_stats();
  MN_CHECK(ps.used_current == 0 && ps.reserved_current == G && ps.used_high == 2048);
  MN_CHECK_OK(mn_device_pool_reset_peak(DEV));
  ps = pool_stats();
  MN_CHECK(ps.used_high == 0 && ps.reserved_high == G);
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  ps = pool_stats();
  MN_CHECK(ps.reserved_current == 0);
  /* Destroying a stream runs its queued free: the memory is everyone's again. */
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s1, &p));
  MN_CHECK_OK(mn_device_free_async(DEV, p, s1));
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1000, s2, &q));
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK_OK(mn_device_free_async(DEV, q, s2));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK(pool_stats().reserved_current == 0);
}

MN_TEST(pool_splits_coalesces_grows_and_releases) {
  const size_t G = (size_t)2 << 20, K = 512 << 10;
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, SIZE_MAX));
  void *a = NULL, *b = NULL, *c = NULL, *big = NULL, *m = NULL;
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s1, &a));
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s1, &b));
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s1, &c));
  MN_CHECK((char *)b == (char *)a + K && (char *)c == (char *)b + K); /* carved from one chunk */
  MN_CHECK_OK(mn_device_alloc_async(DEV, 6 << 20, NULL, &big)); /* a new chunk, all used */
  MN_CHECK(pool_stats().reserved_current == G + 3 * G);
  MN_CHECK_OK(mn_device_free_async(DEV, a, s1));
  MN_CHECK_OK(mn_device_free_async(DEV, b, s1));
  MN_CHECK_OK(mn_stream_synchronize(s1));
  MN_CHECK_OK(mn_device_alloc_async(DEV, 2 * K, NULL, &m)); /* a and b merged */
  MN_CHECK(m == a);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  /* Trim keeps chunks in use; threshold 0 releases unused ones at the next pool call. */
  MN_CHECK_OK(mn_device_free_async(DEV, big, NULL));
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK(pool_stats().reserved_current == G);
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, 0));
  MN_CHECK_OK(mn_device_free_async(DEV, m, NULL));
  MN_CHECK_OK(mn_device_free_async(DEV, c, s1));
  MN_CHECK(pool_stats().reserved_current == G); /* frees not reached yet */
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK(pool_stats().reserved_current == 0);
  mn_sim_stats_t ss;
  MN_CHECK_OK(mn_sim_get_stats(DEV, &ss));
  MN_CHECK(ss.mapped_bytes == 0);
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, SIZE_MAX));
  MN_CHECK_OK(mn_stream_destroy(s1));
}

MN_TEST(pool_errors) {
  void *p = NULL, *q = (void *)&p;
  int local = 0;
  mn_stream_t *cpu = NULL;
  MN_CHECK_ERR(mn_device_alloc_async(mn_device_cpu(), 16, NULL, &q), MN_ERR_NOT_SUPPORTED, "no stream-ordered memory pool");
  MN_CHECK_ERR(mn_device_pool_trim(mn_device_cpu(), 0), MN_ERR_NOT_SUPPORTED, "cpu");
  MN_CHECK_ERR(mn_device_alloc_async(DEV, 0, NULL, &q), MN_ERR_INVALID_ARGUMENT, "nbytes");
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &cpu));
  MN_CHECK_ERR(mn_device_alloc_async(DEV, 16, cpu, &q), MN_ERR_INVALID_ARGUMENT, "stream of cpu");
  MN_CHECK_OK(mn_stream_destroy(cpu));
  MN_CHECK_ERR(mn_device_free_async(DEV, &local, NULL), MN_ERR_INVALID_ARGUMENT, "not a live stream-ordered");
  MN_CHECK_OK(mn_device_alloc_async(DEV, 100, NULL, &p));
  MN_CHECK_ERR(mn_device_raw_free(DEV, p), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK_ERR(mn_device_free_async(DEV, (char *)p + 512, NULL), MN_ERR_INVALID_ARGUMENT, "stream-ordered");
  MN_CHECK_OK(mn_device_free_async(DEV, p, NULL));
  MN_CHECK_ERR(mn_device_free_async(DEV, p, NULL), MN_ERR_INVALID_ARGUMENT, "not a live"); /* double */
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  MN_CHECK_ERR(mn_device_alloc_async(DEV, 100, NULL, &q), MN_ERR_OUT_OF_MEMORY, "injected");
  mn_sim_config_t cfg;
  MN_CHECK_OK(mn_sim_get_config(&cfg));
  MN_CHECK_ERR(mn_device_alloc_async(DEV, cfg.capacity + 1, NULL, &q), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK_ERR(mn_device_alloc_async(DEV, SIZE_MAX, NULL, &q), MN_ERR_OUT_OF_MEMORY, "sim:0");
  MN_CHECK(q == (void *)&p);
  MN_CHECK(pool_stats().reserved_current == 0);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
}

static uint64_t synchronizes(void) {
  mn_sim_stats_t st = {0};
  MN_CHECK_OK(mn_sim_get_stats(DEV, &st));
  return st.synchronizes;
}

/* A stream-ordered free is reusable at once by its own stream and by another
 * only once its stream has run it; nothing needs a synchronize: advancing
 * the stream (as a GPU would on its own) is enough. Adjacent frees of one
 * stream merge before they run. */
MN_TEST(pool_reuse_needs_no_synchronize) {
  const size_t K = 64 << 10;
  mn_stream_t *s1 = NULL, *s2 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, SIZE_MAX));
  uint64_t syncs = synchronizes();
  void *a = NULL, *b = NULL, *c1 = NULL, *c2 = NULL, *c3 = NULL, *x = NULL, *y = NULL;
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s1, &a));
  MN_CHECK_OK(mn_memset_async(DEV, a, 1, K, s1));
  MN_CHECK_OK(mn_device_free_async(DEV, a, s1));
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s1, &b)); /* s1's own free: at once */
  MN_CHECK(b == a);
  MN_CHECK_OK(mn_device_free_async(DEV, b, s1));
  MN_CHECK(sim_pending(s1) == 3);
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s2, &c1)); /* not s2's: the frees have not run */
  MN_CHECK(c1 != a);
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s1, 2, &ran)); /* the memset and the first free: b's free still queued */
  MN_CHECK(ran == 2);
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s2, &c2));
  MN_CHECK(c2 != a);
  MN_CHECK_OK(mn_sim_stream_advance(s1, 1, &ran)); /* b's free has run: anyone may reuse it */
  MN_CHECK_OK(mn_device_alloc_async(DEV, K, s2, &c3));
  MN_CHECK(c3 == a);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  /* Two adjacent frees on s1 merge: an allocation on s1 of both sizes takes them, unrun. */
  MN_CHECK_OK(mn_device_alloc_async(DEV, 4 * K, s1, &x));
  MN_CHECK_OK(mn_device_alloc_async(DEV, 4 * K, s1, &y));
  MN_CHECK((char *)y == (char *)x + 4 * K);
  MN_CHECK_OK(mn_device_free_async(DEV, y, s1));
  MN_CHECK_OK(mn_device_free_async(DEV, x, s1));
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK_OK(mn_device_alloc_async(DEV, 8 * K, s1, &b));
  MN_CHECK(b == x);
  MN_CHECK(synchronizes() == syncs); /* not one synchronize */
  MN_CHECK_OK(mn_device_free_async(DEV, b, s1));
  MN_CHECK_OK(mn_device_free_async(DEV, c1, s2));
  MN_CHECK_OK(mn_device_free_async(DEV, c2, s2));
  MN_CHECK_OK(mn_device_free_async(DEV, c3, s2));
  MN_CHECK_OK(mn_stream_destroy(s1)); /* runs its frees */
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK(pool_stats().used_current == 0);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK(pool_stats().reserved_current == 0);
}

static uint64_t pool_rng_state = 88172645463325252u;
static uint64_t pool_rng(void) {
  pool_rng_state ^= pool_rng_state << 13;
  pool_rng_state ^= pool_rng_state >> 7;
  pool_rng_state ^= pool_rng_state << 17;
  return pool_rng_state;
}

typedef struct pool_model_block {
  char *p;
  size_t asked, size; /* size: rounded to 512 */
  int stream;         /* index into the test's streams */
  uint64_t pos;       /* frees: the op count of its stream once it runs */
  bool ran;           /* frees: its stream has run it */
  unsigned char fill;
} pool_model_block;

static bool overlaps(const pool_model_block *m, const char *p, size_t n) {
  return p < m->p + m->size && m->p < p + n;
}

/* Random stream-ordered allocations and frees on three streams, advanced
 * and synchronized at random, against a model of what is legal: no block
 * overlaps a live one or one freed on another stream whose free has not run;
 * live bytes are never touched by the pool; used bytes lie between the live
 * bytes and the live plus freed bytes of streams with frees still queued
 * (exactly the live ones once everything ran); the device's invariants hold
 * after every step. */
MN_TEST(pool_random_against_a_model) {
  enum { NS = 3, MAXLIVE = 64, MAXFREED = 4096, STEPS = 4000 };
  mn_stream_t *s[NS] = {NULL};
  MN_CHECK_OK(mn_stream_default(DEV, &s[0]));
  for (int i = 1; i < NS; i++) MN_CHECK_OK(mn_stream_create(DEV, &s[i]));
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, SIZE_MAX));
  static pool_model_block live[MAXLIVE], freed[MAXFREED];
  size_t nlive = 0, nfreed = 0;
  uint64_t queued[NS] = {0}, base_done[NS];
  for (int i = 0; i < NS; i++) base_done[i] = (uint64_t)sim_pending(s[i]); /* 0: nothing queued before */
  int bad = 0;
  for (int step = 0; step < STEPS && !bad; step++) {
    uint64_t r = pool_rng() % 100;
    int si = (int)(pool_rng() % NS);
    if (r < 45 && nlive < MAXLIVE) {
      size_t asked = (size_t)(1 + pool_rng() % 64) * 512 - (size_t)(pool_rng() % 512);
      char *p = NULL;
      MN_CHECK_OK(mn_device_alloc_async(DEV, asked, s[si], (void **)&p));
      if (!p) {
        bad = 1;
        break;
      }
      size_t size = (asked + 511) / 512 * 512;
      for (size_t i = 0; i < nlive; i++) bad |= overlaps(&live[i], p, size) ? 2 : 0;
      for (size_t i = 0; i < nfreed; i++)
        bad |= !freed[i].ran && freed[i].stream != si && overlaps(&freed[i], p, size) ? 4 : 0;
      /* what it takes of si's own unrun frees is no longer theirs: keep the rest of each */
      for (size_t i = 0, n = nfreed; i < n && nfreed < MAXFREED - 1; i++) {
        pool_model_block f = freed[i];
        if (f.stream != si || !overlaps(&f, p, size)) continue;
        freed[i].size = 0; /* dropped below unless a remainder takes the slot */
        if (f.p < p) freed[i].size = (size_t)(p - f.p);
        if (f.p + f.size > p + size) {
          pool_model_block rest = f;
          rest.p = p + size;
          rest.size = (size_t)(f.p + f.size - rest.p);
          if (freed[i].size) freed[nfreed++] = rest;
          else freed[i] = rest;
        }
      }
      unsigned char fill = (unsigned char)(1 + step % 250);
      memset(p, fill, asked);
      live[nlive++] = (pool_model_block){.p = p, .asked = asked, .size = size, .stream = si, .fill = fill};
    } else if (r < 85 && nlive > 0 && nfreed < MAXFREED) {
      size_t i = (size_t)(pool_rng() % nlive);
      pool_model_block m = live[i];
      for (size_t k = 0; k < m.asked; k += 97) bad |= (unsigned char)m.p[k] != m.fill ? 8 : 0;
      bad |= (unsigned char)m.p[m.asked - 1] != m.fill ? 8 : 0;
      MN_CHECK_OK(mn_device_free_async(DEV, m.p, s[si]));
      m.stream = si;
      m.pos = ++queued[si];
      freed[nfreed++] = m;
      live[i] = live[--nlive];
    } else if (r < 97) {
      size_t ran = 0;
      MN_CHECK_OK(mn_sim_stream_advance(s[si], (size_t)(pool_rng() % 4), &ran));
    } else {
      MN_CHECK_OK(mn_stream_synchronize(s[si]));
    }
    /* Frees their stream ran are everyone's; they leave the model once every
     * free of their stream ran (until then the pool may hold them PENDING,
     * merged with a later free of that stream). */
    uint64_t done[NS];
    for (int i = 0; i < NS; i++) done[i] = queued[i] - ((uint64_t)sim_pending(s[i]) - base_done[i]);
    size_t live_bytes = 0, freed_bytes = 0, k = 0;
    for (size_t i = 0; i < nfreed; i++) {
      freed[i].ran = freed[i].pos <= done[freed[i].stream];
      if (freed[i].size && (!freed[i].ran || done[freed[i].stream] < queued[freed[i].stream])) freed[k++] = freed[i];
    }
    nfreed = k;
    for (size_t i = 0; i < nlive; i++) live_bytes += live[i].size;
    for (size_t i = 0; i < nfreed; i++) freed_bytes += freed[i].size;
    mn_device_pool_stats_t ps = pool_stats();
    bad |= ps.used_current < live_bytes || ps.used_current > live_bytes + freed_bytes ? 16 : 0;
    bad |= nfreed == 0 && ps.used_current != live_bytes ? 32 : 0;
    if (mn_sim_check_invariants(DEV) != MN_OK) {
      fprintf(stderr, "step %d: %s\n", step, mn_last_error());
      bad |= 64;
    }
  }
  if (bad) fprintf(stderr, "pool model: fault bits %d\n", bad);
  MN_CHECK(bad == 0);
  for (size_t i = 0; i < nlive; i++) MN_CHECK_OK(mn_device_free_async(DEV, live[i].p, s[live[i].stream]));
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK(pool_stats().used_current == 0);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  for (int i = 1; i < NS; i++) MN_CHECK_OK(mn_stream_destroy(s[i]));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK(pool_stats().reserved_current == 0);
}

/* The stream-ordered allocator reuses its own stream's frees at once and
 * another stream's once they ran (an event on the freeing stream says when:
 * query it, do not wait); repeated passes of allocations freed without a
 * synchronize reuse the same memory: the pool does not grow. */
MN_TEST(async_allocator_reuses_frees_without_synchronize) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s1 = NULL, *s2 = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_async_allocator_create(DEV, &a));
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_event_create(DEV, &e));
  if (!a || !e) return;
  uint64_t syncs = synchronizes();
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s1, &p));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s1, &q));
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_event_record(e, s1)); /* after the free */
  bool done = true;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(!done);
  void *r = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s2, &r));
  MN_CHECK(r != p);
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s1, 16, &ran));
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s2, &q));
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_free(a, r));
  /* Passes of mixed sizes (the same sizes in a new order each time), freed
   * without a synchronize, stay in the memory of the first pass. */
  enum { N = 192, PASSES = 10 };
  static void *l[N];
  mn_alloc_stats_t st;
  int64_t first = 0;
  for (int pass = 0; pass < PASSES; pass++) {
    for (int i = 0; i < N; i++) MN_CHECK_OK(mn_allocator_alloc(a, (size_t)(1 + (i * 7 + pass) % 64) * 512, s1, &l[i]));
    for (int i = 0; i < N; i++) MN_CHECK_OK(mn_allocator_free(a, l[i]));
    MN_CHECK_OK(mn_allocator_get_stats(a, &st));
    if (pass == 0) first = st.reserved_bytes[MN_POOL_ALL].current;
  }
  MN_CHECK(first > 0 && st.reserved_bytes[MN_POOL_ALL].current == first);
  MN_CHECK(synchronizes() == syncs); /* not one synchronize */
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_event_destroy(e));
  mn_allocator_destroy(a); /* synchronizes: the queued frees run */
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
}

/* record_stream: the free waits for the recorded stream, as PyTorch's
 * cudaMallocAsync backend does it. */
MN_TEST(async_allocator_frees_after_recorded_streams) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s1 = NULL, *s2 = NULL, *s3 = NULL;
  MN_CHECK_OK(mn_async_allocator_create(DEV, &a));
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_stream_create(DEV, &s3));
  MN_CHECK(strcmp(mn_allocator_name(a), "async") == 0);
  void *p = NULL, *q = NULL, *r = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s1, &p));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2)); /* once is enough */
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s1)); /* its own stream: nothing to do */
  MN_CHECK_OK(mn_memset_async(DEV, p, 1, 4096, s2));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK(sim_pending(s1) == 2 && sim_pending(s2) == 1); /* a wait for s2, then the free */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s3, &q));
  MN_CHECK(q != p);
  MN_CHECK_OK(mn_stream_synchronize(s1)); /* runs s2's memset first */
  MN_CHECK(sim_pending(s2) == 0);
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s3, &r));
  MN_CHECK(r == p);
  MN_CHECK_ERR(mn_allocator_record_stream(a, (char *)r + 512, s2), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  mn_alloc_stats_t st;
  MN_CHECK_OK(mn_allocator_get_stats(a, &st));
  MN_CHECK(st.allocation[MN_POOL_ALL].current == 2 && st.allocated_bytes[MN_POOL_ALL].current == 8192);
  MN_CHECK(st.reserved_bytes[MN_POOL_ALL].current == (2 << 20) && st.num_device_alloc == 3 && st.num_device_free == 1);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_free(a, r));
  /* A recorded stream's failing event record makes the free fail and keeps the block. */
  MN_CHECK_OK(mn_allocator_alloc(a, 100, s1, &p));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_EVENT_RECORD, 1, 1));
  MN_CHECK_ERR(mn_allocator_free(a, p), MN_ERR_DEVICE, "injected");
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(pool_stats().reserved_current == 0);
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_stream_destroy(s3));
}

/* The stream-ordered allocator orders a free on the allocating stream, after
 * the recorded ones: it holds them all until the free (or its own destroy). */
/* The async allocator allocates from a pool of its own and sets the release
 * threshold on that pool only: the device's default pool (shared with other
 * libraries) keeps its threshold, here 0 (release at the next pool call). */
MN_TEST(async_allocator_leaves_the_default_pool_alone) {
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK_OK(mn_device_pool_trim(DEV, 0));
  MN_CHECK_OK(mn_device_pool_set_release_threshold(DEV, 0));
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_async_allocator_create(DEV, &a));
  if (!a) return;
  void *p = NULL;
  mn_alloc_stats_t s;
  MN_CHECK_OK(mn_allocator_alloc(a, 1 << 20, NULL, &p));
  MN_CHECK(pool_stats().reserved_current == 0); /* not from the default pool */
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current >= (1 << 20));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current >= (1 << 20)); /* its own pool keeps it (threshold SIZE_MAX) */
  void *q = NULL;
  MN_CHECK_OK(mn_device_alloc_async(DEV, 1 << 20, NULL, &q));
  MN_CHECK(pool_stats().reserved_current > 0);
  MN_CHECK_OK(mn_device_free_async(DEV, q, NULL));
  MN_CHECK_OK(mn_device_synchronize(DEV));
  MN_CHECK(pool_stats().reserved_current == 0); /* the default pool's threshold is still 0 */
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == 0);
  mn_allocator_destroy(a);
}

MN_TEST(async_allocator_holds_its_streams) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s1 = NULL, *s2 = NULL;
  MN_CHECK_OK(mn_async_allocator_create(DEV, &a));
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s1, &p));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, s1, &q));
  MN_CHECK_ERR(mn_stream_destroy(s1), MN_ERR_BUSY, "still used by 2 allocator blocks");
  MN_CHECK(strstr(mn_last_error(), "free them first") != NULL);
  MN_CHECK_OK(mn_stream_destroy(s2)); /* nothing kept of it yet */
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_ERR(mn_stream_destroy(s2), MN_ERR_BUSY, "still used by 1 allocator block ");
  MN_CHECK_OK(mn_memset_async(DEV, p, 7, 4096, s2)); /* s2 still works */
  MN_CHECK_OK(mn_allocator_free(a, p)); /* s1 waits for s2, then frees */
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_ERR(mn_stream_destroy(s1), MN_ERR_BUSY, "1 allocator block");
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_stream_destroy(s1)); /* its queued frees complete */
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  /* A failed free keeps the allocation and its holds. */
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  MN_CHECK_OK(mn_stream_create(DEV, &s2));
  MN_CHECK_OK(mn_allocator_alloc(a, 100, s1, &p));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_sim_fault_inject(DEV, MN_SIM_FAULT_EVENT_RECORD, 1, 1));
  MN_CHECK_ERR(mn_allocator_free(a, p), MN_ERR_DEVICE, "injected");
  MN_CHECK_ERR(mn_stream_destroy(s2), MN_ERR_BUSY, "allocator block");
  MN_CHECK_ERR(mn_stream_destroy(s1), MN_ERR_BUSY, "allocator block");
  /* The allocator's destroy frees what is still live (after its recorded
   * streams), drops its uses and destroys its own pool: nothing is left, and
   * the device's default pool was never used. */
  mn_sim_stats_t before;
  MN_CHECK_OK(mn_sim_get_stats(DEV, &before));
  mn_allocator_destroy(a);
  mn_sim_stats_t after;
  MN_CHECK_OK(mn_sim_get_stats(DEV, &after));
  MN_CHECK(after.mapped_bytes < before.mapped_bytes);
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK(pool_stats().reserved_current == 0);
}

/* ---- the CPU: the backend's raw and host memory, the default allocator -------------- */

/* The CPU backend knows its live allocations: a double, interior or foreign
 * free is refused, as on SIM and CUDA, instead of reaching free(). */
MN_TEST(cpu_backend_refuses_bad_frees) {
  const mn_device_t cpu = mn_device_cpu();
  for (int host = 0; host < 2; host++) {
    mn_status (*alloc_fn)(mn_device_t, size_t, void **) = host ? mn_device_host_alloc : mn_device_raw_alloc;
    mn_status (*free_fn)(mn_device_t, void *) = host ? mn_device_host_free : mn_device_raw_free;
    const char *call = host ? "mn_device_host_free: " : "mn_device_raw_free: ";
    char *p = NULL, *q = NULL;
    MN_CHECK_OK(alloc_fn(cpu, 1000, (void **)&p));
    MN_CHECK_OK(alloc_fn(cpu, (size_t)5 << 20, (void **)&q)); /* the huge-page path */
    if (!p || !q) return;
    memset(p, 0x61, 1000);
    MN_CHECK_ERR(free_fn(cpu, p + 256), MN_ERR_INVALID_ARGUMENT, "not a live allocation of the CPU device");
    MN_CHECK(strstr(mn_last_error(), call) == mn_last_error());
    void *m = malloc(64);
    int local = 0;
    MN_CHECK_ERR(free_fn(cpu, m), MN_ERR_INVALID_ARGUMENT, "memory it did not allocate");
    MN_CHECK_ERR(free_fn(cpu, &local), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
    free(m);
    MN_CHECK_OK(free_fn(cpu, NULL)); /* as free(NULL) */
    MN_CHECK(p[999] == 0x61); /* untouched by the refusals */
    MN_CHECK_OK(free_fn(cpu, p));
    MN_CHECK_ERR(free_fn(cpu, p), MN_ERR_INVALID_ARGUMENT, "freed already");
    MN_CHECK_OK(free_fn(cpu, q));
    MN_CHECK_ERR(free_fn(cpu, q), MN_ERR_INVALID_ARGUMENT, "freed already");
    /* still works, and raw and host memory are the same plain memory here */
    MN_CHECK_OK(alloc_fn(cpu, 64, (void **)&p));
    MN_CHECK_OK((host ? mn_device_raw_free : mn_device_host_free)(cpu, p));
  }
}

/* What mn_allocator_get_default(cpu) hands out refuses the same frees. */
MN_TEST(cpu_default_allocator_refuses_bad_frees) {
  mn_allocator_t *d = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_cpu(), &d));
  char *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(d, 300, NULL, (void **)&p));
  if (!p) return;
  memset(p, 0x62, 300);
  MN_CHECK_ERR(mn_allocator_free(d, p + 16), MN_ERR_INVALID_ARGUMENT, "not allocated by this allocator");
  void *m = malloc(32);
  MN_CHECK_ERR(mn_allocator_free(d, m), MN_ERR_INVALID_ARGUMENT, "not allocated by this allocator");
  free(m);
  MN_CHECK_OK(mn_allocator_free(d, NULL));
  MN_CHECK(p[299] == 0x62);
  MN_CHECK_OK(mn_allocator_free(d, p));
  MN_CHECK_ERR(mn_allocator_free(d, p), MN_ERR_INVALID_ARGUMENT, "freed already");
  /* A pointer of another allocator on the same device is foreign too. */
  mn_allocator_t *other = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(mn_device_cpu(), &other));
  MN_CHECK_OK(mn_allocator_alloc(other, 300, NULL, (void **)&q));
  MN_CHECK_ERR(mn_allocator_free(d, q), MN_ERR_INVALID_ARGUMENT, "not allocated by this allocator");
  MN_CHECK_OK(mn_allocator_free(other, q));
  mn_allocator_destroy(other);
  MN_CHECK_OK(mn_allocator_alloc(d, 300, NULL, (void **)&p)); /* still works */
  MN_CHECK_OK(mn_allocator_free(d, p));
}

/* ---- user-implemented allocators: the vtable's size and version -------------------- */

/* A user allocator over a naive upstream that counts the calls of every slot. */
enum { U_ALLOC, U_FREE, U_RECORD, U_EMPTY, U_STATS, U_RESET, U_SNAP, U_CHECK, U_DESTROY, U_SIZE_OF, U_COUNT };

typedef struct user_alloc {
  mn_allocator_t base; /* first: the header mn_allocator_init fills */
  mn_allocator_t *up;
  int calls[U_COUNT];
} user_alloc;

static user_alloc *user_of(mn_allocator_t *a) { return (user_alloc *)a; }

static mn_status user_alloc_fn(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  user_of(a)->calls[U_ALLOC]++;
  return mn_allocator_alloc(user_of(a)->up, nbytes, stream, out);
}
static mn_status user_free_fn(mn_allocator_t *a, void *ptr) {
  user_of(a)->calls[U_FREE]++;
  return mn_allocator_free(user_of(a)->up, ptr);
}
static mn_status user_record_fn(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  (void)ptr, (void)stream;
  user_of(a)->calls[U_RECORD]++;
  return MN_OK;
}
static mn_status user_empty_fn(mn_allocator_t *a) {
  user_of(a)->calls[U_EMPTY]++;
  return MN_OK;
}
static mn_status user_stats_fn(mn_allocator_t *a, mn_alloc_stats_t *out) {
  user_of(a)->calls[U_STATS]++;
  out->num_ooms = 7;
  return MN_OK;
}
static mn_status user_reset_fn(mn_allocator_t *a) {
  user_of(a)->calls[U_RESET]++;
  return MN_OK;
}
static mn_status user_snapshot_fn(mn_allocator_t *a, mn_snapshot_t **out) {
  user_of(a)->calls[U_SNAP]++;
  *out = calloc(1, sizeof **out); /* no segments; mn_snapshot_free frees it */
  return *out ? MN_OK : MN_ERR_OUT_OF_MEMORY;
}
static mn_status user_check_fn(mn_allocator_t *a) {
  user_of(a)->calls[U_CHECK]++;
  return MN_OK;
}
static void user_destroy_fn(mn_allocator_t *a) { user_of(a)->calls[U_DESTROY]++; }
static size_t user_size_of_fn(mn_allocator_t *a, const void *ptr) {
  user_of(a)->calls[U_SIZE_OF]++;
  return mn_allocator_size_of(user_of(a)->up, ptr);
}

static const mn_allocator_vtable_t USER_VTABLE = {
    MN_ALLOCATOR_VTABLE_HEADER,
    .name = "user",
    .alloc = user_alloc_fn,
    .free = user_free_fn,
    .record_stream = user_record_fn,
    .empty_cache = user_empty_fn,
    .get_stats = user_stats_fn,
    .reset_peak = user_reset_fn,
    .snapshot = user_snapshot_fn,
    .check_invariants = user_check_fn,
    .destroy = user_destroy_fn,
    .size_of = user_size_of_fn,
};

/* Whether a vtable of `size` bytes holds the slot at [off, off + len). */
#define USER_HAS(size, slot) \
  ((size) >= offsetof(mn_allocator_vtable_t, slot) + sizeof(((mn_allocator_vtable_t *)0)->slot))

/* A vtable written against an older, shorter layout: every slot past its size
 * is absent, even though the memory after it holds working functions here. */
MN_TEST(user_vtable_of_an_older_shorter_layout_works) {
  const uint32_t sizes[] = {
      (uint32_t)MN_ALLOCATOR_VTABLE_MIN_SIZE,                  /* the required slots only */
      (uint32_t)offsetof(mn_allocator_vtable_t, size_of),      /* the layout before size_of */
      (uint32_t)sizeof(mn_allocator_vtable_t),                 /* this header's */
      (uint32_t)sizeof(mn_allocator_vtable_t) + 64,            /* bigger: the slots this library knows */
  };
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s));
  const bool nvtx_was_on = mn_nvtx_enabled();
  mn_nvtx_set_enabled(false); /* size_of is asked only while ranges are on: counted below */
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    mn_allocator_vtable_t vt = USER_VTABLE;
    vt.size = sizes[k];
    size_t size = sizes[k];
    user_alloc u = {0};
    MN_CHECK_OK(mn_naive_allocator_create(DEV, &u.up));
    MN_CHECK_OK(mn_allocator_init(&u.base, &vt, DEV));
    MN_CHECK(u.base.vtable == &vt && mn_device_equal(mn_allocator_device(&u.base), DEV));
    MN_CHECK(strcmp(mn_allocator_name(&u.base), "user") == 0);

    void *p = NULL;
    MN_CHECK_OK(mn_allocator_alloc(&u.base, 1000, s, &p));
    MN_CHECK(p != NULL && u.calls[U_ALLOC] == 1);
    if (p) MN_CHECK(roundtrip(p, 1000, s, 31));
    MN_CHECK_OK(mn_allocator_record_stream(&u.base, p, s));
    MN_CHECK(u.calls[U_RECORD] == (int)USER_HAS(size, record_stream));
    MN_CHECK_OK(mn_allocator_empty_cache(&u.base));
    MN_CHECK(u.calls[U_EMPTY] == (int)USER_HAS(size, empty_cache));
    mn_alloc_stats_t st;
    mn_snapshot_t *snap = NULL;
    /* debug tier 2 reads the statistics after every operation too */
    int stats_before = u.calls[U_STATS];
    MN_CHECK(MNEMO_DEBUG >= 2 || stats_before == 0);
    if (USER_HAS(size, get_stats)) {
      MN_CHECK_OK(mn_allocator_get_stats(&u.base, &st));
      MN_CHECK(st.num_ooms == 7 && st.size == sizeof st && st.version == MN_ALLOC_STATS_VERSION);
      MN_CHECK_OK(mn_allocator_reset_peak(&u.base));
      MN_CHECK_OK(mn_allocator_snapshot(&u.base, &snap));
      MN_CHECK(snap != NULL && snap->nsegments == 0);
      mn_snapshot_free(snap);
    } else {
      MN_CHECK_ERR(mn_allocator_get_stats(&u.base, &st), MN_ERR_NOT_SUPPORTED, "user allocator keeps no statistics");
      MN_CHECK_ERR(mn_allocator_reset_peak(&u.base), MN_ERR_NOT_SUPPORTED, "keeps no statistics");
      MN_CHECK_ERR(mn_allocator_snapshot(&u.base, &snap), MN_ERR_NOT_SUPPORTED, "has no snapshots");
      MN_CHECK(snap == NULL);
    }
    MN_CHECK(u.calls[U_STATS] - stats_before == (int)USER_HAS(size, get_stats) && u.calls[U_RESET] == (int)USER_HAS(size, reset_peak));
    MN_CHECK(u.calls[U_SNAP] == (int)USER_HAS(size, snapshot));
    int checks_before = u.calls[U_CHECK]; /* debug tier 2 runs the checker after every operation too */
    MN_CHECK_OK(mn_allocator_check_invariants(&u.base));
    MN_CHECK(u.calls[U_CHECK] - checks_before == (int)USER_HAS(size, check_invariants));
    MN_CHECK(MNEMO_DEBUG >= 2 || checks_before == 0);
    /* size_of directly, and through an adaptor above it as the payload of the
     * NVTX free range (asked once, for the outermost call). */
    MN_CHECK(mn_allocator_size_of(&u.base, p) == (USER_HAS(size, size_of) ? 1000u : 0u));
    mn_allocator_t *ad = NULL;
    void *q = NULL;
    MN_CHECK_OK(mn_statistics_adaptor_create(&u.base, 0, &ad));
    MN_CHECK_OK(mn_allocator_alloc(ad, 500, NULL, &q));
    mn_nvtx_set_enabled(true);
    MN_CHECK_OK(mn_allocator_free(ad, q));
    mn_nvtx_set_enabled(false);
    mn_nvtx_counters_t nc;
    mn_nvtx_get_counters(&nc);
    MN_CHECK(nc.thread_last_name && strcmp(nc.thread_last_name, "mnemo.free") == 0);
    MN_CHECK(nc.thread_last_nbytes == (USER_HAS(size, size_of) ? 500u : 0u));
    mn_allocator_destroy(ad);
    MN_CHECK(u.calls[U_SIZE_OF] == (USER_HAS(size, size_of) ? 2 : 0));
    /* As a device's default and as CuPy's param, through the entry points. */
    MN_CHECK_OK(mn_allocator_set_default(DEV, &u.base));
    MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_SIM));
    void *t = mnemo_torch_alloc(256, 0, NULL), *c = mnemo_cupy_malloc(&u.base, 128, 0);
    MN_CHECK(t != NULL && c != NULL && u.calls[U_ALLOC] == 4);
    mnemo_torch_free(t, 256, 0, NULL);
    mnemo_cupy_free(&u.base, c, 0);
    MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_CUDA));
    MN_CHECK_OK(mn_allocator_set_default(DEV, NULL));

    MN_CHECK_OK(mn_allocator_free(&u.base, p));
    MN_CHECK(u.calls[U_FREE] == 4);
    mn_allocator_destroy(&u.base);
    MN_CHECK(u.calls[U_DESTROY] == (int)USER_HAS(size, destroy));
    mn_allocator_destroy(u.up);
  }
  mn_nvtx_set_enabled(nvtx_was_on);
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* A vtable too short for the required slots, of an unknown version or without
 * a required slot is refused where the allocator is made or registered, and
 * every dispatch refuses an allocator whose header was filled by hand with one. */
MN_TEST(user_vtable_bad_size_or_version_is_refused) {
  user_alloc u = {0};
  MN_CHECK_OK(mn_naive_allocator_create(DEV, &u.up));
  mn_allocator_vtable_t vt = USER_VTABLE;
  vt.size = 0;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "vtable size 0 is smaller");
  vt.size = (uint32_t)MN_ALLOCATOR_VTABLE_MIN_SIZE - 1;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "sizeof(mn_allocator_vtable_t)");
  vt.size = (uint32_t)(offsetof(mn_allocator_vtable_t, alloc) + sizeof vt.alloc); /* ends before free */
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "required part");
  vt = USER_VTABLE;
  vt.version = 0;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "vtable version 0");
  vt.version = MN_ALLOCATOR_VTABLE_VERSION + 1;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "not one this library knows");
  vt = USER_VTABLE;
  vt.free = NULL;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "lacks the required free slot");
  vt = USER_VTABLE;
  vt.name = NULL;
  MN_CHECK_ERR(mn_allocator_init(&u.base, &vt, DEV), MN_ERR_INVALID_ARGUMENT, "required name slot");
  MN_CHECK_ERR(mn_allocator_init(&u.base, NULL, DEV), MN_ERR_INVALID_ARGUMENT, "must not be NULL");
  MN_CHECK_ERR(mn_allocator_init(NULL, &USER_VTABLE, DEV), MN_ERR_INVALID_ARGUMENT, "must not be NULL");
  MN_CHECK_ERR(mn_allocator_init(&u.base, &USER_VTABLE, mn_device_sim(9)), MN_ERR_NO_DEVICE, "sim:9");
  MN_CHECK(u.base.vtable == NULL); /* untouched on failure */

  /* A header filled by hand with a size-0 vtable (never through mn_allocator_init). */
  vt = USER_VTABLE;
  vt.size = 0;
  u.base.vtable = &vt;
  u.base.device = DEV;
  mn_allocator_t *def = NULL, *before = NULL;
  MN_CHECK_OK(mn_allocator_get_default(DEV, &before));
  MN_CHECK_ERR(mn_allocator_set_default(DEV, &u.base), MN_ERR_INVALID_ARGUMENT, "vtable size 0");
  MN_CHECK_OK(mn_allocator_get_default(DEV, &def));
  MN_CHECK(def == before);
  void *p = (void *)&u;
  int local = 0;
  mn_alloc_stats_t st;
  MN_CHECK_ERR(mn_allocator_alloc(&u.base, 16, NULL, &p), MN_ERR_INVALID_ARGUMENT, "mn_allocator_alloc");
  MN_CHECK(p == (void *)&u);
  MN_CHECK_ERR(mn_allocator_free(&u.base, &local), MN_ERR_INVALID_ARGUMENT, "vtable size 0");
  MN_CHECK_ERR(mn_allocator_empty_cache(&u.base), MN_ERR_INVALID_ARGUMENT, "vtable size 0");
  MN_CHECK_ERR(mn_allocator_get_stats(&u.base, &st), MN_ERR_INVALID_ARGUMENT, "vtable size 0");
  MN_CHECK_ERR(mn_allocator_check_invariants(&u.base), MN_ERR_INVALID_ARGUMENT, "vtable size 0");
  MN_CHECK(strcmp(mn_allocator_name(&u.base), "invalid") == 0 && mn_allocator_size_of(&u.base, &local) == 0);
  MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_SIM));
  mn_clear_error();
  MN_CHECK(mnemo_cupy_malloc(&u.base, 16, 0) == NULL && strstr(mn_last_error(), "vtable size 0") != NULL);
  MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_CUDA));
  mn_allocator_destroy(&u.base); /* refused quietly: destroy is not called */
  vt.size = (uint32_t)sizeof vt;
  vt.version = MN_ALLOCATOR_VTABLE_VERSION + 1;
  MN_CHECK_ERR(mn_allocator_alloc(&u.base, 16, NULL, &p), MN_ERR_INVALID_ARGUMENT, "not one this library knows");
  for (int i = 0; i < U_COUNT; i++) MN_CHECK(u.calls[i] == 0);
  mn_allocator_destroy(u.up);
}

MN_TEST(entry_points_on_sim) {
  MN_CHECK_ERR(mn_pluggable_set_device_type(MN_DEVICE_CPU), MN_ERR_INVALID_ARGUMENT, "type=0");
  MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_SIM));
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  check_entry_points(s1, s1);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_pluggable_set_device_type(MN_DEVICE_CUDA));
  mn_clear_error();
  MN_CHECK(mnemo_cupy_malloc(NULL, 16, 0) == NULL && strstr(mn_last_error(), "cuda:0") != NULL);
  MN_CHECK_OK(mn_device_synchronize(DEV));
}

int main(void) {
  mn_sim_config_t cfg = mn_sim_config_default();
  cfg.capacity = (size_t)8 << 30;
  if (mn_sim_configure(&cfg) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  DEV = ADEV = mn_device_sim(0);
  ON_SIM = true;
  for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) run_battery(&FIXTURES[i]);
  MN_RUN(addrmap_matches_a_reference);
  MN_RUN(statistics_counts_exactly);
  MN_RUN(adaptor_arguments_are_checked);
  MN_RUN(stack_refuses_pointers_from_below);
  MN_RUN(limiting_caps_and_rolls_back);
  MN_RUN(limiting_holds_under_threads);
  MN_RUN(tracing_reports_the_sequence);
  MN_RUN(tracking_reports_leaks_with_tags);
  MN_RUN(tracking_tags_are_per_thread_and_backtraces_print);
  MN_RUN(pool_reuse_follows_stream_order);
  MN_RUN(pool_splits_coalesces_grows_and_releases);
  MN_RUN(pool_errors);
  MN_RUN(pool_reuse_needs_no_synchronize);
  MN_RUN(pool_random_against_a_model);
  MN_RUN(async_allocator_frees_after_recorded_streams);
  MN_RUN(async_allocator_holds_its_streams);
  MN_RUN(async_allocator_leaves_the_default_pool_alone);
  MN_RUN(async_allocator_reuses_frees_without_synchronize);
  MN_RUN(cpu_backend_refuses_bad_frees);
  MN_RUN(cpu_default_allocator_refuses_bad_frees);
  MN_RUN(entry_points_on_sim);
  MN_RUN(user_vtable_of_an_older_shorter_layout_works);
  MN_RUN(user_vtable_bad_size_or_version_is_refused);
  /* Nothing outstanding on the device at the end. */
  mn_test_case = "end";
  mn_sim_stats_t ss;
  MN_CHECK_OK(mn_sim_get_stats(DEV, &ss));
  MN_CHECK(ss.mapped_bytes == 0 && ss.live_streams == 0 && ss.live_events == 0 && ss.illegal_accesses == 0);
  MN_CHECK_OK(mn_sim_check_invariants(DEV));
  return mn_test_finish();
}

#else /* MN_ALLOC_TEST_GPU */

MN_TEST(gpu_pool_stats_and_trim) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_async_allocator_create(DEV, &a));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, (size_t)64 << 20, NULL, &p));
  mn_device_pool_stats_t ps = {0};
  MN_CHECK_OK(mn_device_pool_stats(DEV, &ps));
  MN_CHECK(ps.reserved_current >= ((size_t)64 << 20) && ps.used_current >= ((size_t)64 << 20));
  MN_CHECK(ps.reserved_high >= ps.reserved_current && ps.used_high >= ps.used_current);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_device_pool_stats(DEV, &ps));
  MN_CHECK(ps.reserved_current == 0 && ps.used_current == 0);
  MN_CHECK_OK(mn_device_pool_reset_peak(DEV));
  MN_CHECK_OK(mn_device_pool_stats(DEV, &ps));
  MN_CHECK(ps.reserved_high == 0);
  int local = 0;
  MN_CHECK_ERR(mn_allocator_free(a, &local), MN_ERR_INVALID_ARGUMENT, "stream-ordered");
  void *q = (void *)&p;
  if (!mn_test_under_sanitizer()) { /* a failing cudaMallocAsync on purpose */
    MN_CHECK_ERR(mn_allocator_alloc(a, (size_t)1 << 50, NULL, &q), MN_ERR_OUT_OF_MEMORY, "cudaMallocAsync");
    MN_CHECK(q == (void *)&p);
  }
  mn_allocator_destroy(a);
}

MN_TEST(gpu_entry_points) {
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_create(DEV, &s1));
  check_entry_points(mn_stream_native(s1), s1);
  MN_CHECK_OK(mn_stream_destroy(s1));
}

int main(void) {
  mn_test_require_cuda();
  DEV = ADEV = mn_device_cuda(0);
  ON_SIM = false;
  for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) run_battery(&FIXTURES[i]);
  MN_RUN(gpu_pool_stats_and_trim);
  MN_RUN(gpu_entry_points);
  MN_CHECK_OK(mn_device_synchronize(DEV));
  mn_test_release_cuda_caches();
  return mn_test_finish();
}

#endif /* MN_ALLOC_TEST_GPU */
