/* tests/test_caching_random.c: the caching allocator on SIM at scale and at random: the
 * free set with 100k blocks, and seeded runs of alloc/free/record_stream/advance/empty_cache
 * over several streams (and over 40, more than every allocation polls), both invariant
 * checkers after every step (label sim). */
#include <time.h>

#include "allocators/caching_internal.h"
#include "caching_test_util.h"

static uint64_t g_seed = 20240611;

/* ---- scale: the free set at 100k blocks, against a brute-force model ---------------------- */

static size_t depth(const mn__tnode_t *n) {
  size_t l = n && n->left ? depth(n->left) : 0, r = n && n->right ? depth(n->right) : 0;
  return n ? 1 + (l > r ? l : r) : 0;
}

/* The model's best fit: the smallest (size, address) >= (size, 0) among live nodes of the stream. */
static const mn__tnode_t *model_best(const mn__tnode_t *nodes, const bool *in, size_t n, uint64_t s, size_t size) {
  const mn__tnode_t *best = NULL;
  for (size_t i = 0; i < n; i++) {
    const mn__tnode_t *x = &nodes[i];
    if (!in[i] || x->key.stream != s || x->key.size < size) continue;
    if (!best || x->key.size < best->key.size || (x->key.size == best->key.size && x->key.addr < best->key.addr))
      best = x;
  }
  return best;
}

MN_TEST(free_set_and_map_at_scale) {
  enum { N = 100000, STREAMS = 4 };
  mn__tnode_t *nodes = calloc(N, sizeof *nodes);
  bool *in = calloc(N, sizeof *in);
  mn__addrmap_t map;
  mn__addrmap_init(&map);
  mn__fset_t fs;
  mn__fset_init(&fs, (size_t)1 << 40);
  mn__sbins_t *sb[STREAMS];
  for (uint64_t s = 0; s < STREAMS; s++) MN_CHECK_OK(mn__fset_acquire(&fs, 100 + s, &sb[s]));
  uint64_t r = g_seed | 1;
  MN_CHECK_OK(mn__addrmap_reserve(&map, N));
  for (size_t i = 0; i < N; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    /* Sizes repeat (exact bins and shared power-of-two bins), addresses are unique. */
    size_t size = (r >> 20) % 3 ? 512 * (1 + (r >> 8) % 64) : 512 * (1 + (r >> 8) % 100000);
    mn__fset_insert(&fs, sb[r % STREAMS], &nodes[i], size, 4096 * (i + 1));
    in[i] = true;
    mn__addrmap_put(&map, 4096 * (i + 1), 0, &nodes[i]);
  }
  char why[256] = "";
  size_t nfree = 0, nunmapped = 0;
  mn__fset_counts(&fs, &nfree, &nunmapped);
  MN_CHECK(mn__fset_check(&fs, why, sizeof why) == MN_OK && nfree == N && nunmapped == 0);
  size_t d = 0;
  for (int s = 0; s < STREAMS; s++)
    for (unsigned b = 0; b < fs.nbins; b++) {
      size_t x = depth(sb[s]->bins[b].root);
      if (x > d) d = x;
    }
  printf("  %d blocks in %u bins per stream: deepest treap %zu\n", N, fs.nbins, d);
  MN_CHECK(d < 4 * 17);
  /* Best fit, next and prev agree with the model, on every stream and many sizes. */
  for (int probe = 0; probe < 200; probe++) {
    uint64_t s = (uint64_t)probe % STREAMS;
    size_t size = probe < 100 ? 512 * (size_t)(1 + probe % 70) : 512 * (size_t)(1 + (probe * 7919) % 110000);
    const mn__tnode_t *want = model_best(nodes, in, N, 100 + s, size);
    mn__tnode_t *got = mn__fset_lower_bound(&fs, sb[s], size);
    MN_CHECK(got == want);
    if (got) {
      mn__tnode_t *prev = mn__fset_prev(&fs, sb[s], got);
      MN_CHECK(!prev || (mn__key_cmp(&prev->key, &got->key) < 0 && prev->key.size < size &&
                         mn__fset_next(&fs, sb[s], prev) == got));
    }
  }
  for (size_t i = 0; i < N; i += 2) {
    mn__fset_remove(&fs, sb[nodes[i].key.stream - 100], &nodes[i]);
    in[i] = false;
    mn__addrmap_entry_t gone = {0};
    MN_CHECK(mn__addrmap_remove(&map, 4096 * (i + 1), &gone) && gone.data == &nodes[i]);
  }
  mn__fset_counts(&fs, &nfree, &nunmapped);
  MN_CHECK(mn__fset_check(&fs, why, sizeof why) == MN_OK && nfree == N / 2 && map.count == N / 2);
  MN_CHECK(!mn__fset_contains(&fs, sb[nodes[0].key.stream - 100], &nodes[0]) &&
           mn__fset_contains(&fs, sb[nodes[1].key.stream - 100], &nodes[1]));
  for (int s = 0; s < STREAMS; s++) { /* a full walk in key order, both ways, visits each node once */
    size_t fwd = 0, back = 0;
    for (mn__tnode_t *x = mn__fset_lower_bound(&fs, sb[s], 0); x; x = mn__fset_next(&fs, sb[s], x)) fwd++;
    for (mn__tnode_t *x = mn__fset_last(&fs, sb[s]); x; x = mn__fset_prev(&fs, sb[s], x)) back++;
    MN_CHECK(fwd == sb[s]->count && back == sb[s]->count);
  }
  size_t misses = 0;
  for (size_t i = 0; i < N; i++) {
    mn__addrmap_entry_t *e = mn__addrmap_find(&map, 4096 * (i + 1));
    misses += (e ? e->data : NULL) != (i % 2 ? &nodes[i] : NULL);
  }
  MN_CHECK(misses == 0);
  for (size_t i = 1; i < N; i += 2) mn__fset_remove(&fs, sb[nodes[i].key.stream - 100], &nodes[i]);
  for (int s = 0; s < STREAMS; s++) mn__fset_release(&fs, sb[s]);
  mn__fset_counts(&fs, &nfree, &nunmapped);
  MN_CHECK(fs.nstreams == 0 && nfree == 0 && mn__fset_check(&fs, why, sizeof why) == MN_OK);
  mn__fset_fini(&fs);
  mn__addrmap_fini(&map);
  free(in);
  free(nodes);
  /* Through the API: 50k cached 512-byte holes, then best-fit allocations among them. */
  mn_allocator_t *a = mk(NULL);
  enum { M = 100000 };
  void **p = calloc(M, sizeof *p);
  for (size_t i = 0; i < M; i++) p[i] = alloc_on(a, 512, NULL);
  for (size_t i = 0; i < M; i += 2) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  inv(a);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (size_t i = 0; i < M; i += 2) p[i] = alloc_on(a, 512, NULL); /* each fills a hole */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / (M / 2);
  printf("  %d best-fit allocations among %d cached blocks: %.3f us each\n", M / 2, M / 2, us);
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(25 * 2 * MB));
  for (size_t i = 0; i < M; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  free(p);
  done(a);
}

/* ---- randomized ------------------------------------------------------------------------------ */

#define NSTREAMS 4
#define MANY_STREAMS 40 /* more than MN__POLL_ALL_MAX: allocations poll one stream, in turn */
#define MAXLIVE 192
#define MAXFLIGHT 512

typedef struct live_s { char *p; size_t n; int stream; } live_t;
typedef struct flight_s { uintptr_t lo, hi; int stream; uint64_t seq; } flight_t;

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick_size(uint64_t *r) {
  uint64_t k = rnd(r) % 100;
  if (k < 55) return 1 + rnd(r) % (64 * KB);
  if (k < 80) return 64 * KB + rnd(r) % MB;
  if (k < 97) return MB + rnd(r) % (16 * MB);
  return 16 * MB + rnd(r) % (80 * MB);
}

/* Alloc, free, cross-stream use (a queued memset + record_stream), stream advance,
 * empty_cache; after every step both invariant checkers run, and no block handed
 * out may overlap queued work of another stream that has not run yet. */
static void random_run(const char *conf, uint64_t seed, int steps, int nstreams) {
  mn_allocator_t *a = mk(conf);
  mn_stream_t *st[MANY_STREAMS];
  uint64_t queued[MANY_STREAMS] = {0}, r = seed | 1;
  size_t max_queues = 0; /* streams holding pending frees at once */
  bool many = nstreams > NSTREAMS; /* slower streams and no empty_cache: more pending at once */
  for (int i = 0; i < nstreams; i++) st[i] = new_stream();
  live_t live[MAXLIVE];
  flight_t fl[MAXFLIGHT];
  size_t nlive = 0, nfl = 0, bad_overlaps = 0;
  int failures_before = mn_test_failures;
  for (int step = 0; step < steps; step++) {
    uint64_t k = rnd(&r) % 100;
    if (k < 40 && nlive < MAXLIVE) {
      int si = (int)(rnd(&r) % (uint64_t)nstreams);
      size_t n = pick_size(&r);
      char *p = NULL;
      mn_status rc = mn_allocator_alloc(a, n, st[si], (void **)&p);
      MN_CHECK(rc == MN_OK || rc == MN_ERR_OUT_OF_MEMORY);
      if (rc != MN_OK && getenv("MNEMO_TEST_VERBOSE")) printf("  OOM at step %d: %s\n", step, mn_last_error());
      if (rc == MN_OK) {
        uintptr_t lo = (uintptr_t)p, hi = lo + n;
        uint64_t ran[MANY_STREAMS];
        for (int i = 0; i < nstreams; i++) ran[i] = queued[i] - pending_ops(st[i]);
        for (size_t f = 0; f < nfl; f++) {
          bool running = fl[f].seq > ran[fl[f].stream];
          if (fl[f].stream != si && running && lo < fl[f].hi && fl[f].lo < hi) bad_overlaps++;
        }
        for (size_t i = 0; i < nlive; i++)
          if (lo < (uintptr_t)live[i].p + live[i].n && (uintptr_t)live[i].p < hi) bad_overlaps++;
        live[nlive++] = (live_t){p, n, si};
      }
    } else if (k < 70 && nlive) {
      size_t i = rnd(&r) % nlive;
      MN_CHECK_OK(mn_allocator_free(a, live[i].p));
      live[i] = live[--nlive];
    } else if (k < 85 && nlive) {
      live_t *l = &live[rnd(&r) % nlive];
      int sj = (int)(rnd(&r) % (uint64_t)nstreams);
      if (nfl == MAXFLIGHT) { /* forget flights that have run */
        size_t m = 0;
        for (size_t f = 0; f < nfl; f++)
          if (fl[f].seq > queued[fl[f].stream] - pending_ops(st[fl[f].stream])) fl[m++] = fl[f];
        nfl = m;
      }
      if (nfl < MAXFLIGHT) {
        MN_CHECK_OK(mn_memset_async(SIM0, l->p, step & 0xff, l->n < 256 ? l->n : 256, st[sj]));
        queued[sj]++;
        if (sj != l->stream) MN_CHECK_OK(mn_allocator_record_stream(a, l->p, st[sj]));
        fl[nfl++] = (flight_t){(uintptr_t)l->p, (uintptr_t)l->p + l->n, sj, queued[sj]};
      }
    } else if (k < 96) {
      MN_CHECK_OK(mn_sim_stream_advance(st[rnd(&r) % (uint64_t)nstreams], rnd(&r) % (many ? 2 : 4), NULL));
    } else if (k < 98) {
      if (!many) MN_CHECK_OK(mn_allocator_empty_cache(a));
    } else if (!many) {
      MN_CHECK_OK(mn_stream_synchronize(st[rnd(&r) % (uint64_t)nstreams]));
    }
    MN_CHECK_OK(mn_allocator_check_invariants(a));
    MN_CHECK_OK(mn_sim_check_invariants(SIM0));
    size_t nq = ((const mn__caching_t *)a)->qmap.count; /* streams with pending frees */
    if (nq > max_queues) max_queues = nq;
    mn_alloc_stats_t s = stats_of(a);
    MN_CHECK(s.allocation[MN_POOL_ALL].current == (int64_t)nlive);
    if (step % 97 == 0) { /* the snapshot's active blocks are exactly the live ones plus pending ones */
      mn_snapshot_t *sn = snap(a);
      int64_t allocated = 0, requested = 0, live_req = 0;
      size_t nactive = 0;
      for (size_t g = 0; g < sn->nsegments; g++) {
        allocated += (int64_t)sn->segments[g].allocated_size;
        requested += (int64_t)sn->segments[g].requested_size;
        for (size_t b = 0; b < sn->segments[g].nblocks; b++) nactive += sn->segments[g].blocks[b].state == MN_BLOCK_ACTIVE;
      }
      for (size_t i = 0; i < nlive; i++) live_req += (int64_t)live[i].n;
      MN_CHECK(nactive == nlive && allocated == s.allocated_bytes[MN_POOL_ALL].current);
      MN_CHECK(requested == s.requested_bytes[MN_POOL_ALL].current && requested >= live_req);
      mn_snapshot_free(sn);
    }
    if (mn_test_failures != failures_before) {
      fprintf(stderr, "random_run(%s): failing at step %d, seed %llu\n", conf ? conf : "default", step,
              (unsigned long long)seed);
      break;
    }
  }
  MN_CHECK(bad_overlaps == 0);
  if (nstreams > (int)MN__POLL_ALL_MAX) MN_CHECK(max_queues > MN__POLL_ALL_MAX); /* the bounded polls ran */
  mn_alloc_stats_t fin = stats_of(a);
  printf("  %s, %d streams: %lld allocations, %lld OOMs, %lld retries, %lld syncs, peak %lld live, peak %.1f MiB "
         "reserved, at most %zu streams holding pending frees\n",
         conf ? conf : "default", nstreams, (long long)fin.allocation[MN_POOL_ALL].allocated, (long long)fin.num_ooms,
         (long long)fin.num_alloc_retries, (long long)fin.num_sync_all_streams,
         (long long)fin.allocation[MN_POOL_ALL].peak, (double)fin.reserved_bytes[MN_POOL_ALL].peak / (double)MB,
         max_queues);
  for (size_t i = 0; i < nlive; i++) MN_CHECK_OK(mn_allocator_free(a, live[i].p));
  for (int i = 0; i < nstreams; i++) MN_CHECK_OK(mn_stream_synchronize(st[i]));
  done(a);
  for (int i = 0; i < nstreams; i++) MN_CHECK_OK(mn_stream_destroy(st[i]));
}

MN_TEST(randomized_default) { random_run(NULL, g_seed, 3000, NSTREAMS); }
/* Three streams: each reserves 1 1/8 + 1/8 of the device in address space, and
 * SIM has 4x its capacity (a fourth would fall back to plain segments). */
MN_TEST(randomized_expandable) { random_run("expandable_segments:True", g_seed + 1, 3000, 3); }
MN_TEST(randomized_oversize_gc) {
  random_run("max_split_size_mb:24,roundup_power2_divisions:4,garbage_collection_threshold:0.5,"
             "per_process_memory_fraction:0.75",
             g_seed + 2, 3000, NSTREAMS);
}

/* Pending frees on more streams than every allocation polls: the same safety
 * (nothing handed out under queued work of a stream that has not passed it),
 * the invariants after every step. */
MN_TEST(randomized_many_streams) { random_run(NULL, g_seed + 3, 3000, MANY_STREAMS); }

int main(void) {
  const char *seed = getenv("MNEMO_TEST_SEED");
  if (seed && *seed) g_seed = strtoull(seed, NULL, 0);
  printf("seed=%llu (set MNEMO_TEST_SEED to change)\n", (unsigned long long)g_seed);
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = GB;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(free_set_and_map_at_scale);
  MN_RUN(randomized_default);
  MN_RUN(randomized_expandable);
  MN_RUN(randomized_oversize_gc);
  MN_RUN(randomized_many_streams);
  return mn_test_finish();
}
