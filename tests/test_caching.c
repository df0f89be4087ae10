/* tests/test_caching.c: the caching allocator on the SIM device: size rules, split and
 * merge, best fit per stream, oversize rules, stream safety, OOM recovery and message,
 * faults, memory fraction, expandable segments, stats, snapshots, config, bad input,
 * streams destroyed while the allocator holds them (label sim; the randomized runs
 * are in test_caching_random.c). */
#include <stdint.h>
#include <stdlib.h>

#include "allocators/caching_internal.h"
#include "caching_test_util.h"
#include "runtime/hostmem.h"

static uint64_t g_seed = 20240611;

/* ---- size rules ---------------------------------------------------------------------- */

MN_TEST(size_rules) {
  mn_caching_config_t c = mn_caching_config_default();
  const struct { size_t in, rounded, segment; } rows[] = {
      {1, 512, 2 * MB},           {512, 512, 2 * MB},           {513, 1024, 2 * MB},
      {MB, MB, 2 * MB},           {MB + 1, MB + 512, 20 * MB},  {5 * MB, 5 * MB, 20 * MB},
      {10 * MB - 1, 10 * MB, 10 * MB}, {10 * MB, 10 * MB, 10 * MB}, {11 * MB + 1, 11 * MB + 512, 12 * MB},
      {100 * MB + 3, 100 * MB + 512, 102 * MB}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    MN_CHECK(mn__round_size(&c, rows[i].in) == rows[i].rounded);
    MN_CHECK(mn__allocation_size(rows[i].rounded) == rows[i].segment);
  }
  /* PyTorch's example for the division helper; round_size uses it only above 512 * divisions. */
  MN_CHECK(mn__roundup_power2_next_division(1200, 4) == 1280);
  MN_CHECK(mn__roundup_power2_next_division(1024, 4) == 1024);
  MN_CHECK(mn__roundup_power2_next_division(1537, 2) == 2048);
  MN_CHECK_OK(mn_caching_config_parse("roundup_power2_divisions:4", &c));
  MN_CHECK(mn__round_size(&c, 1200) == 1536);
  MN_CHECK(mn__round_size(&c, 3000) == 3072);
  MN_CHECK(mn__round_size(&c, 5000) == 5120);
  MN_CHECK(mn__round_size(&c, 1258291) == 1310720);
  MN_CHECK(mn__round_size(&c, 300 * MB + 1) == 320 * MB);
  MN_CHECK(mn__round_size(&c, 256 * MB) == 256 * MB);
  char b[32];
  MN_CHECK(!strcmp(mn__format_size(20 * MB, b, sizeof b), "20.00 MiB"));
  MN_CHECK(!strcmp(mn__format_size(1000, b, sizeof b), "1000 bytes"));
  MN_CHECK(!strcmp(mn__format_size(1536, b, sizeof b), "1.50 KiB"));
  MN_CHECK(!strcmp(mn__format_size(3 * GB, b, sizeof b), "3.00 GiB"));
}

/* The same table through the API: pool, block and segment sizes. */
MN_TEST(pool_choice_and_segments) {
  const struct { size_t in, block, segment; } rows[] = {
      {1, 512, 2 * MB},          {513, 1024, 2 * MB},         {MB, MB, 2 * MB},
      {MB + 1, MB + 512, 20 * MB}, {5 * MB, 5 * MB, 20 * MB},   {10 * MB - 1, 10 * MB, 10 * MB},
      {11 * MB + 1, 12 * MB, 12 * MB} /* remainder <= 1 MiB: not split */, {100 * MB + 3, 100 * MB + 512, 102 * MB}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    mn_allocator_t *a = mk(NULL);
    void *p = alloc_on(a, rows[i].in, NULL);
    mn_alloc_stats_t s = stats_of(a);
    int pool = rows[i].in <= MB ? MN_POOL_SMALL : MN_POOL_LARGE, other = MN_POOL_SMALL + MN_POOL_LARGE - pool;
    MN_CHECK(s.allocated_bytes[MN_POOL_ALL].current == (int64_t)rows[i].block);
    MN_CHECK(s.reserved_bytes[pool].current == (int64_t)rows[i].segment && s.reserved_bytes[other].current == 0);
    MN_CHECK(s.allocation[pool].current == 1 && s.allocation[other].current == 0);
    MN_CHECK(s.requested_bytes[MN_POOL_ALL].current == (int64_t)rows[i].in);
    MN_CHECK(s.num_device_alloc == 1 && s.segment[pool].current == 1);
    MN_CHECK_OK(mn_allocator_free(a, p));
    done(a);
  }
}

/* ---- split, merge, best fit --------------------------------------------------------- */

MN_TEST(split_and_merge) {
  mn_allocator_t *a = mk(NULL);
  char *p1 = alloc_on(a, 1000, NULL), *p2 = alloc_on(a, 1000, NULL);
  MN_CHECK(p2 == p1 + 1024);
  mn_snapshot_t *s = snap(a);
  MN_CHECK(s->nsegments == 1 && s->segments[0].nblocks == 3 && !s->segments[0].is_large);
  mn_snapshot_segment_t *g = &s->segments[0];
  MN_CHECK(g->address == (uintptr_t)p1 && g->total_size == 2 * MB && g->allocated_size == 2048);
  MN_CHECK(g->requested_size == 2000 && g->blocks[0].requested_size == 1000);
  MN_CHECK(g->blocks[0].state == MN_BLOCK_ACTIVE && g->blocks[2].state == MN_BLOCK_INACTIVE);
  MN_CHECK(g->blocks[2].size == 2 * MB - 2048 && g->blocks[2].requested_size == 0);
  mn_snapshot_free(s);
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(st.inactive_split[MN_POOL_SMALL].current == 1);
  MN_CHECK(st.inactive_split_bytes[MN_POOL_SMALL].current == (int64_t)(2 * MB - 2048));
  MN_CHECK_OK(mn_allocator_free(a, p1));
  s = snap(a);
  MN_CHECK(s->segments[0].nblocks == 3 && s->segments[0].blocks[0].state == MN_BLOCK_INACTIVE);
  mn_snapshot_free(s);
  MN_CHECK(stats_of(a).inactive_split[MN_POOL_SMALL].current == 2);
  MN_CHECK_OK(mn_allocator_free(a, p2)); /* merges with both neighbours */
  s = snap(a);
  MN_CHECK(s->segments[0].nblocks == 1 && s->segments[0].blocks[0].size == 2 * MB);
  mn_snapshot_free(s);
  MN_CHECK(stats_of(a).inactive_split[MN_POOL_SMALL].current == 0);
  inv(a);
  /* Large pool: 5 MiB splits a 20 MiB segment; 14.5 MiB then takes the 15 MiB rest
   * whole (a remainder of 1 MiB or less is not split off). */
  char *q1 = alloc_on(a, 5 * MB, NULL), *q2 = alloc_on(a, 14 * MB + 512 * KB, NULL);
  MN_CHECK(q2 == q1 + 5 * MB);
  st = stats_of(a);
  MN_CHECK(st.allocated_bytes[MN_POOL_LARGE].current == (int64_t)(20 * MB));
  MN_CHECK(st.reserved_bytes[MN_POOL_LARGE].current == (int64_t)(20 * MB));
  MN_CHECK(st.inactive_split[MN_POOL_LARGE].current == 0);
  MN_CHECK_OK(mn_allocator_free(a, q1));
  MN_CHECK_OK(mn_allocator_free(a, q2));
  char *q3 = alloc_on(a, 18 * MB, NULL); /* 2 MiB left: split */
  MN_CHECK(q3 == q1 && stats_of(a).allocated_bytes[MN_POOL_LARGE].current == (int64_t)(18 * MB));
  MN_CHECK_OK(mn_allocator_free(a, q3));
  done(a);
}

MN_TEST(best_fit_per_stream) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  char *a64 = alloc_on(a, 64 * KB, s1), *sep1 = alloc_on(a, 512, s1);
  char *b32 = alloc_on(a, 32 * KB, s1), *sep2 = alloc_on(a, 512, s1);
  char *c48 = alloc_on(a, 48 * KB, s1), *sep3 = alloc_on(a, 512, s1);
  MN_CHECK_OK(mn_allocator_free(a, a64));
  MN_CHECK_OK(mn_allocator_free(a, b32));
  MN_CHECK_OK(mn_allocator_free(a, c48));
  char *x = alloc_on(a, 40 * KB, s1), *y = alloc_on(a, 30 * KB, s1), *z = alloc_on(a, 60 * KB, s1);
  MN_CHECK(x == c48 && y == b32 && z == a64); /* the smallest block that fits, each time */
  MN_CHECK_OK(mn_allocator_free(a, x));
  /* Another stream never takes s1's blocks: a new segment. */
  char *w = alloc_on(a, 40 * KB, s2);
  MN_CHECK(w != x && (w < a64 || w >= a64 + 2 * MB));
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_SMALL].current == (int64_t)(4 * MB));
  mn_snapshot_t *s = snap(a);
  MN_CHECK(s->nsegments == 2 && s->segments[0].address < s->segments[1].address);
  for (size_t i = 0; i < s->nsegments; i++)
    MN_CHECK(s->segments[i].stream_id == mn_stream_id(s->segments[i].address == (uintptr_t)a64 ? s1 : s2));
  mn_snapshot_free(s);
  inv(a);
  void *all[] = {sep1, sep2, sep3, y, z, w};
  for (size_t i = 0; i < 6; i++) MN_CHECK_OK(mn_allocator_free(a, all[i]));
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

MN_TEST(oversize_rules) {
  mn_allocator_t *a = mk("max_split_size_mb:40");
  MN_CHECK(stats_of(a).max_split_size == (int64_t)(40 * MB));
  char *big = alloc_on(a, 70 * MB, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.oversize_allocations.current == 1 && s.oversize_segments.current == 1);
  MN_CHECK_OK(mn_allocator_free(a, big));
  char *p = alloc_on(a, 30 * MB, NULL); /* a smaller request never takes an oversize block */
  MN_CHECK(p != big && stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(100 * MB));
  char *q = alloc_on(a, 45 * MB, NULL); /* 70 - 45 >= 20 MiB: too wasteful, new segment */
  MN_CHECK(q != big && stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(146 * MB));
  MN_CHECK_OK(mn_allocator_free(a, q));
  char *r = alloc_on(a, 44 * MB, NULL); /* the 46 MiB block, whole: oversize blocks never split */
  MN_CHECK(r == q && stats_of(a).allocated_bytes[MN_POOL_ALL].current == (int64_t)(30 * MB + 46 * MB));
  MN_CHECK(stats_of(a).oversize_allocations.current == 1);
  MN_CHECK_OK(mn_allocator_free(a, r));
  MN_CHECK_OK(mn_allocator_free(a, p));
  done(a);
  /* When a new segment does not fit, cached oversize blocks of the stream are freed first. */
  a = mk("max_split_size_mb:40,per_process_memory_fraction:0.25");
  big = alloc_on(a, 200 * MB, NULL);
  MN_CHECK_OK(mn_allocator_free(a, big));
  p = alloc_on(a, 100 * MB, NULL);
  s = stats_of(a);
  MN_CHECK(s.num_alloc_retries == 0 && s.num_device_free == 1 && s.num_ooms == 0);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == (int64_t)(100 * MB));
  MN_CHECK_OK(mn_allocator_free(a, p));
  done(a);
}

MN_TEST(roundup_divisions_through_api) {
  /* [1:4,>:8]: ">" starts at the last listed interval (PyTorch's rule), so every
   * interval, the 1 MiB one included, uses 8 divisions. */
  mn_allocator_t *a = mk("roundup_power2_divisions:[1:4,>:8]");
  void *p = alloc_on(a, 4400, NULL), *q = alloc_on(a, 270 * MB + 1, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.allocated_bytes[MN_POOL_SMALL].current == 4608);             /* 4 divisions: 5120 */
  MN_CHECK(s.allocated_bytes[MN_POOL_LARGE].current == (int64_t)(288 * MB)); /* 4 divisions: 320 MiB */
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, q));
  done(a);
}

/* ---- streams --------------------------------------------------------------------------- */

MN_TEST(cross_stream_safety) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  char *p = alloc_on(a, 4096, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, p, 0x11, 4096, s2)); /* queued on s2, not run */
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2)); /* twice: one use */
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_snapshot_t *s = snap(a);
  MN_CHECK(s->segments[0].blocks[0].state == MN_BLOCK_ACTIVE_PENDING_FREE && s->segments[0].active_size == 4096);
  mn_snapshot_free(s);
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1 && stats_of(a).allocation[MN_POOL_ALL].current == 0);
  for (int i = 0; i < 3; i++) { /* never handed out while s2 has not reached the free */
    char *q = alloc_on(a, 4096, s1);
    MN_CHECK(q != p);
    MN_CHECK_OK(mn_allocator_free(a, q));
  }
  char *r = alloc_on(a, 4096, s1);
  inv(a);
  MN_CHECK_OK(mn_sim_stream_advance(s2, 1, NULL));
  MN_CHECK((unsigned char)p[0] == 0x11);
  char *t = alloc_on(a, 4096, s1); /* the event completed: reused */
  MN_CHECK(t == p);
  /* A use on the allocating stream needs nothing: reused at once. */
  MN_CHECK_OK(mn_allocator_record_stream(a, t, s1));
  MN_CHECK_OK(mn_allocator_free(a, t));
  char *u = alloc_on(a, 4096, s1);
  MN_CHECK(u == p);
  MN_CHECK_OK(mn_allocator_free(a, u));
  MN_CHECK_OK(mn_allocator_free(a, r));
  MN_CHECK(sim_stats().illegal_accesses == 0);
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK(sim_stats().live_events == 0);
}

/* ---- OOM ---------------------------------------------------------------------------------- */

static int g_oom_calls;
static size_t g_oom_requested;
static int64_t g_oom_seen;
static void on_oom(void *user, mn_device_t dev, size_t requested, const mn_alloc_stats_t *st) {
  (void)user;
  MN_CHECK(mn_device_equal(dev, SIM0));
  g_oom_calls++;
  g_oom_requested = requested;
  g_oom_seen = st->num_ooms;
}

static int g_trace_counts[MN_TRACE_ACTION_COUNT];
static mn_trace_event_t g_trace_log[64];
static size_t g_trace_n;
static uint64_t g_trace_last_ns;
static void on_trace(void *user, const mn_trace_event_t *e) {
  (void)user;
  MN_CHECK((unsigned)e->action < MN_TRACE_ACTION_COUNT && e->time_ns >= g_trace_last_ns);
  g_trace_last_ns = e->time_ns;
  g_trace_counts[e->action]++;
  if (g_trace_n < 64) g_trace_log[g_trace_n++] = *e;
}

MN_TEST(oom_recovery_and_message) {
  mn_allocator_t *a = mk(NULL);
  MN_CHECK_OK(mn_caching_allocator_set_oom_observer(a, on_oom, NULL));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, on_trace, NULL));
  memset(g_trace_counts, 0, sizeof g_trace_counts);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = alloc_on(a, 200 * MB, s1);
  for (int i = 0; i < 4; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  /* s1's cache cannot serve s2: the device is full, so the cache is released and the allocation retried. */
  void *q = alloc_on(a, 600 * MB, s2);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.num_alloc_retries == 1 && s.num_sync_all_streams >= 1 && s.num_device_free == 4 && s.num_ooms == 0);
  void *r = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 600 * MB, s2, &r), MN_ERR_OUT_OF_MEMORY, "Tried to allocate 600.00 MiB");
  const char *msg = mn_last_error();
  printf("  OOM message: %s\n", msg);
  MN_CHECK(strstr(msg, "sim:0 out of memory") != NULL);
  MN_CHECK(strstr(msg, "total capacity of 1024.00 MiB of which") != NULL && strstr(msg, "is free") != NULL);
  MN_CHECK(strstr(msg, "600.00 MiB is allocated by mnemo") != NULL);
  MN_CHECK(strstr(msg, "0 bytes is reserved by mnemo but unallocated (600.00 MiB reserved in all)") != NULL);
  MN_CHECK(strstr(msg, "expandable_segments") == NULL); /* nothing fragmented */
  MN_CHECK(r == NULL);
  s = stats_of(a);
  MN_CHECK(s.num_ooms == 1 && g_oom_calls == 1 && g_oom_requested == 600 * MB && g_oom_seen == 1);
  MN_CHECK(g_trace_counts[MN_TRACE_OOM] == 1 && g_trace_counts[MN_TRACE_SEGMENT_FREE] == 4);
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, q));
  /* Fragmentation: 20 MiB segments each holding 8 + 8 + 4 MiB; freeing one 8 MiB of
   * each leaves 12 MiB holes that no 100 MiB request can use. */
  void *blk[256];
  size_t n = 0;
  mn_status st = MN_OK;
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  while (n < 256 && (st = mn_allocator_alloc(a, 8 * MB, s1, &blk[n])) == MN_OK) n++;
  MN_CHECK(st == MN_ERR_OUT_OF_MEMORY && n > 90);
  for (size_t i = 1; i < n; i += 2) MN_CHECK_OK(mn_allocator_free(a, blk[i]));
  MN_CHECK_ERR(mn_allocator_alloc(a, 100 * MB, s1, &r), MN_ERR_OUT_OF_MEMORY, "expandable_segments:True");
  MN_CHECK(strstr(mn_last_error(), "the largest free cached block is 12.00 MiB") != NULL);
  MN_CHECK(g_oom_calls == 3);
  inv(a);
  for (size_t i = 0; i < n; i += 2) MN_CHECK_OK(mn_allocator_free(a, blk[i]));
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

MN_TEST(memory_fraction_cap) {
  mn_allocator_t *a = mk("per_process_memory_fraction:0.25");
  void *p = alloc_on(a, 200 * MB, NULL), *q = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 100 * MB, NULL, &q), MN_ERR_OUT_OF_MEMORY, "256.00 MiB allowed");
  MN_CHECK(sim_stats().mapped_bytes <= 256 * MB);
  void *small = alloc_on(a, 40 * MB, NULL); /* still under the cap */
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, small));
  done(a);
}

/* ---- faults --------------------------------------------------------------------------------- */

MN_TEST(fault_raw_alloc) {
  mn_allocator_t *a = mk(NULL);
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  void *p = alloc_on(a, 5 * MB, NULL); /* fails once, the retry works */
  MN_CHECK(stats_of(a).num_alloc_retries == 1);
  mn_alloc_stats_t before = stats_of(a);
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 1, 10));
  void *q = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 30 * MB, NULL, &q), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  mn_alloc_stats_t after = stats_of(a);
  MN_CHECK(after.allocation[MN_POOL_ALL].current == before.allocation[MN_POOL_ALL].current && q == NULL);
  MN_CHECK(after.reserved_bytes[MN_POOL_ALL].current == (int64_t)(20 * MB)); /* p's segment, not released */
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, p));
  done(a);
  /* Sweep: the nth raw allocation (or page map) of a fixed sequence fails for good. */
  const size_t sizes[] = {1000, 5 * MB, 64 * KB, 30 * MB, 2 * MB, 700, 12 * MB};
  const char *confs[] = {NULL, "expandable_segments:True"};
  for (int c = 0; c < 2; c++)
    for (uint64_t nth = 1; nth <= 6; nth++) {
      a = mk(confs[c]);
      void *ptrs[7] = {0};
      MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, nth, 1000));
      for (int i = 0; i < 7; i++) {
        mn_status st = mn_allocator_alloc(a, sizes[i], NULL, &ptrs[i]);
        MN_CHECK(st == MN_OK || st == MN_ERR_OUT_OF_MEMORY);
        inv(a);
      }
      MN_CHECK_OK(mn_sim_fault_clear(SIM0));
      for (int i = 0; i < 7; i++) MN_CHECK_OK(mn_allocator_free(a, ptrs[i]));
      done(a);
    }
}

MN_TEST(fault_events) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  char *p = alloc_on(a, 4096, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, p, 0x22, 64, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  /* The event cannot be recorded: free waits for s2 instead, and the block is free at once. */
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_RECORD, 1, 1));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK(pending_ops(s2) == 0 && (unsigned char)p[0] == 0x22);
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 0);
  char *q = alloc_on(a, 4096, s1);
  MN_CHECK(q == p);
  inv(a);
  /* A failing query counts as "not yet": the block stays pending until a query works. */
  MN_CHECK_OK(mn_memset_async(SIM0, q, 0x33, 64, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, q, s2));
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_stream_synchronize(s2));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_QUERY, 1, 1));
  char *r = alloc_on(a, 4096, s1);
  MN_CHECK(r != q);
  inv(a);
  char *t = alloc_on(a, 4096, s1);
  MN_CHECK(t == q);
  MN_CHECK_OK(mn_allocator_free(a, r));
  MN_CHECK_OK(mn_allocator_free(a, t));
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
}

/* ---- expandable segments ----------------------------------------------------------------- */

MN_TEST(expandable_grow_and_shrink) {
  mn_allocator_t *a = mk("expandable_segments:True");
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, on_trace, NULL));
  memset(g_trace_counts, 0, sizeof g_trace_counts);
  char *x = alloc_on(a, 20 * MB, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.reserved_bytes[MN_POOL_LARGE].current == (int64_t)(20 * MB) && s.num_device_alloc == 1);
  MN_CHECK(s.segment[MN_POOL_ALL].current == 0); /* as PyTorch: mapped bytes count, segments do not */
  char *y = alloc_on(a, 40 * MB, NULL), *z = alloc_on(a, 20 * MB, NULL);
  MN_CHECK(y == x + 20 * MB && z == x + 60 * MB); /* one growing range */
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(80 * MB));
  mn_snapshot_t *sn = snap(a);
  MN_CHECK(sn->nsegments == 1 && sn->segments[0].is_expandable && sn->segments[0].total_size == 80 * MB);
  MN_CHECK(sn->segments[0].nblocks == 3);
  mn_snapshot_free(sn);
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_allocator_empty_cache(a)); /* the hole's two pages are unmapped */
  s = stats_of(a);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == (int64_t)(40 * MB) && s.num_device_free == 1);
  MN_CHECK(g_trace_counts[MN_TRACE_SEGMENT_UNMAP] == 1 && g_trace_counts[MN_TRACE_SEGMENT_MAP] == 3);
  MN_CHECK(sim_stats().mapped_bytes == 40 * MB);
  sn = snap(a);
  MN_CHECK(sn->nsegments == 2 && sn->segments[0].address == (uintptr_t)x && sn->segments[1].address == (uintptr_t)z);
  mn_snapshot_free(sn);
  inv(a);
  char *w = alloc_on(a, 30 * MB, NULL); /* lowest address first: back into the hole */
  MN_CHECK(w == y && stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(80 * MB));
  char *sm = alloc_on(a, 1000, NULL); /* small pool: its own range, 2 MiB pages */
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_SMALL].current == (int64_t)(2 * MB));
  inv(a);
  void *all[] = {x, z, w, sm};
  for (int i = 0; i < 4; i++) MN_CHECK_OK(mn_allocator_free(a, all[i]));
  done(a);
}

/* Giving back many pages synchronizes the device once, not once per page
 * (the pages are unmapped after the allocator's own synchronize), and so does
 * destroying an allocator with pages still mapped. */
MN_TEST(expandable_release_synchronizes_once) {
  mn_allocator_t *a = mk("expandable_segments:True");
  char *x = alloc_on(a, 200 * MB, NULL); /* 10 pages of 20 MiB */
  char *y = alloc_on(a, 20 * MB, NULL);
  mn_sim_stats_t s0 = sim_stats();
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_sim_stats_t s1 = sim_stats();
  MN_CHECK(s1.unmaps - s0.unmaps == 10);
  MN_CHECK(s1.synchronizes - s0.synchronizes == 1);
  MN_CHECK(s1.mapped_bytes == 20 * MB);
  inv(a);
  /* destroy with y still live: one synchronize for every page it unmaps */
  char *z = alloc_on(a, 60 * MB, NULL);
  MN_CHECK(z != NULL);
  s0 = sim_stats();
  mn_allocator_destroy(a);
  s1 = sim_stats();
  MN_CHECK(s1.unmaps - s0.unmaps == 4 && s1.synchronizes - s0.synchronizes == 1);
  MN_CHECK(s1.mapped_bytes == 0 && s1.live_reservations == 0);
  (void)y;
}

/* ---- statistics, snapshots, trace --------------------------------------------------------- */

MN_TEST(stats_and_peaks) {
  mn_allocator_t *a = mk(NULL);
  void *p = alloc_on(a, 3 * MB, NULL), *q = alloc_on(a, 1000, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.size == sizeof s && s.version == MN_ALLOC_STATS_VERSION && s.max_split_size == -1);
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 2 && s.allocation[MN_POOL_ALL].peak == 2);
  MN_CHECK(s.allocation[MN_POOL_SMALL].current == 1 && s.allocation[MN_POOL_LARGE].current == 1);
  MN_CHECK(s.requested_bytes[MN_POOL_ALL].current == (int64_t)(3 * MB + 1000));
  MN_CHECK(s.allocated_bytes[MN_POOL_ALL].current == (int64_t)(3 * MB + 1024));
  MN_CHECK(s.active[MN_POOL_ALL].current == 2 && s.segment[MN_POOL_ALL].current == 2);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == (int64_t)(22 * MB) && s.num_device_alloc == 2);
  MN_CHECK_OK(mn_allocator_free(a, p));
  s = stats_of(a);
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 1 && s.allocation[MN_POOL_ALL].peak == 2);
  MN_CHECK(s.allocation[MN_POOL_ALL].allocated == 2 && s.allocation[MN_POOL_ALL].freed == 1);
  MN_CHECK_OK(mn_allocator_reset_peak(a));
  s = stats_of(a);
  MN_CHECK(s.allocation[MN_POOL_ALL].peak == 1 && s.reserved_bytes[MN_POOL_ALL].peak == (int64_t)(22 * MB));
  MN_CHECK(s.allocated_bytes[MN_POOL_LARGE].peak == 0);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  s = stats_of(a);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].freed == (int64_t)(22 * MB) && s.num_device_free == 2);
  done(a);
}

MN_TEST(trace_events) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream();
  g_trace_n = 0;
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, on_trace, NULL));
  void *p = alloc_on(a, 1000, s1);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
  void *q = alloc_on(a, 1000, s1); /* not traced */
  MN_CHECK_OK(mn_allocator_free(a, q));
  const mn_trace_action want[] = {MN_TRACE_SEGMENT_ALLOC, MN_TRACE_ALLOC, MN_TRACE_FREE_REQUESTED,
                                  MN_TRACE_FREE_COMPLETED, MN_TRACE_EMPTY_CACHE, MN_TRACE_SEGMENT_FREE};
  MN_CHECK(g_trace_n == 6);
  for (size_t i = 0; i < 6 && i < g_trace_n; i++) {
    MN_CHECK(g_trace_log[i].action == want[i] && mn_device_equal(g_trace_log[i].device, SIM0));
    if (want[i] != MN_TRACE_EMPTY_CACHE) MN_CHECK(g_trace_log[i].stream_id == mn_stream_id(s1));
  }
  MN_CHECK(g_trace_log[1].address == (uintptr_t)p && g_trace_log[1].size == 1024 && g_trace_log[1].requested_size == 1000);
  MN_CHECK(g_trace_log[0].size == 2 * MB && g_trace_log[5].address == g_trace_log[0].address);
  MN_CHECK(!strcmp(mn_trace_action_name(MN_TRACE_SEGMENT_UNMAP), "segment_unmap"));
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
}

/* ---- configuration, bad input, defaults, lifecycle ----------------------------------------- */

static bool config_equal(const mn_caching_config_t *x, const mn_caching_config_t *y) {
  return x->max_split_size == y->max_split_size && x->max_non_split_rounding == y->max_non_split_rounding &&
         x->garbage_collection_threshold == y->garbage_collection_threshold &&
         !memcmp(x->roundup_power2_divisions, y->roundup_power2_divisions, sizeof x->roundup_power2_divisions) &&
         x->expandable_segments == y->expandable_segments &&
         x->per_process_memory_fraction == y->per_process_memory_fraction && !strcmp(x->backend, y->backend);
}

MN_TEST(config_parse_and_format) {
  mn_caching_config_t c = mn_caching_config_default();
  MN_CHECK(c.max_split_size == SIZE_MAX && c.max_non_split_rounding == 20 * MB && !c.expandable_segments);
  MN_CHECK(c.per_process_memory_fraction == 1.0 && !strcmp(c.backend, "native"));
  MN_CHECK_OK(mn_caching_config_parse(
      "max_split_size_mb:512, expandable_segments : True,roundup_power2_divisions:[256:1,512:2,>:8],"
      "garbage_collection_threshold:0.6,per_process_memory_fraction:0.5,max_non_split_rounding_mb:40,"
      "backend:native,release_lock_on_cudamalloc:True,",
      &c));
  MN_CHECK(c.max_split_size == 512 * MB && c.expandable_segments && c.max_non_split_rounding == 40 * MB);
  MN_CHECK(c.garbage_collection_threshold == 0.6 && c.per_process_memory_fraction == 0.5);
  /* [256:1,512:2,>:8]: 1 below 512 MiB; ">" starts at the last listed interval (PyTorch). */
  MN_CHECK(c.roundup_power2_divisions[0] == 1 && c.roundup_power2_divisions[28] == 1);
  MN_CHECK(c.roundup_power2_divisions[29] == 8 && c.roundup_power2_divisions[63] == 8);
  char buf[512];
  MN_CHECK_OK(mn_caching_config_format(&c, buf, sizeof buf));
  mn_caching_config_t back = mn_caching_config_default();
  MN_CHECK_OK(mn_caching_config_parse(buf, &back));
  MN_CHECK(config_equal(&back, &c));
  MN_CHECK(strstr(buf, "max_split_size_mb:512") && strstr(buf, "expandable_segments:True"));
  mn_caching_config_t d = mn_caching_config_default();
  MN_CHECK_OK(mn_caching_config_format(&d, buf, sizeof buf));
  MN_CHECK(buf[0] == '\0');
  MN_CHECK_OK(mn_caching_config_parse("expandable_segments:1", &d));
  MN_CHECK(d.expandable_segments);
  MN_CHECK_OK(mn_caching_config_parse("", &d));
  MN_CHECK_ERR(mn_caching_config_format(&c, buf, 8), MN_ERR_INVALID_ARGUMENT, "too small");
  /* Errors name the key and the value; the config is left as it was. */
  const struct { const char *text, *needle; } bad[] = {
      {"foo:1", "unknown key \"foo\""},
      {"max_split_size_mb:10", "max_split_size_mb=10"},
      {"max_split_size_mb:abc", "max_split_size_mb=abc"},
      {"max_split_size_mb:", "max_split_size_mb=(missing)"},
      {"garbage_collection_threshold:1.5", "garbage_collection_threshold=1.5"},
      {"per_process_memory_fraction:0", "per_process_memory_fraction=0"},
      {"expandable_segments:maybe", "expandable_segments=maybe"},
      {"roundup_power2_divisions:3", "roundup_power2_divisions=3"},
      {"roundup_power2_divisions:[256:3]", "roundup_power2_divisions=3"},
      {"roundup_power2_divisions:[300:2]", "roundup_power2_divisions=300"},
      {"backend:magic", "backend=magic"},
      {"max_split_size_mb:100 expandable_segments:True", "max_split_size_mb=100expandable_segments"},
      {"expandable_segments:True;max_split_size_mb:100", "expandable_segments=True;max_split_size_mb"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mn_caching_config_t e = d;
    MN_CHECK_ERR(mn_caching_config_parse(bad[i].text, &e), MN_ERR_INVALID_ARGUMENT, bad[i].needle);
    MN_CHECK(config_equal(&e, &d));
  }
  mn_caching_config_t v = mn_caching_config_default();
  v.max_split_size = MB;
  mn_allocator_t *a = NULL;
  MN_CHECK_ERR(mn_caching_allocator_create(SIM0, &v, &a), MN_ERR_INVALID_ARGUMENT, "max_split_size=");
  v = mn_caching_config_default();
  v.roundup_power2_divisions[3] = 3;
  MN_CHECK_ERR(mn_caching_allocator_create(SIM0, &v, &a), MN_ERR_INVALID_ARGUMENT, "roundup_power2_divisions[3]=3");
  MN_CHECK(a == NULL);
}

MN_TEST(bad_input) {
  mn_allocator_t *a = mk(NULL), *naive = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(SIM0, &naive));
  char host[64];
  char *p = alloc_on(a, 4096, NULL);
  MN_CHECK_ERR(mn_allocator_free(a, host), MN_ERR_INVALID_ARGUMENT, "not allocated by this allocator");
  MN_CHECK_ERR(mn_allocator_free(a, p + 512), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  MN_CHECK_ERR(mn_allocator_record_stream(a, host, NULL), MN_ERR_INVALID_ARGUMENT, "must not be NULL");
  mn_stream_t *def = NULL, *other = NULL;
  MN_CHECK_OK(mn_stream_default(SIM0, &def));
  MN_CHECK_ERR(mn_allocator_record_stream(a, host, def), MN_ERR_INVALID_ARGUMENT, "not allocated by this allocator");
  MN_CHECK_OK(mn_stream_default(mn_device_sim(1), &other));
  void *q = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 16, other, &q), MN_ERR_INVALID_ARGUMENT, "stream of sim:1");
  MN_CHECK_ERR(mn_allocator_record_stream(a, p, other), MN_ERR_INVALID_ARGUMENT, "another device");
  MN_CHECK_ERR(mn_allocator_alloc(a, 2 * GB, NULL, &q), MN_ERR_OUT_OF_MEMORY, "Tried to allocate 2.00 GiB");
  MN_CHECK_ERR(mn_allocator_alloc(a, SIZE_MAX, NULL, &q), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK(q == NULL);
  MN_CHECK_OK(mn_allocator_alloc(a, 0, NULL, &q));
  MN_CHECK(q == NULL);
  MN_CHECK_ERR(mn_caching_allocator_set_oom_observer(naive, on_oom, NULL), MN_ERR_INVALID_ARGUMENT, "naive");
  MN_CHECK_ERR(mn_caching_allocator_set_trace_sink(NULL, on_trace, NULL), MN_ERR_INVALID_ARGUMENT, "not a caching");
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_ERR(mn_allocator_free(a, p), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  MN_CHECK_OK(mn_allocator_free(a, NULL));
  inv(a);
  mn_allocator_destroy(naive);
  done(a);
}

MN_TEST(default_allocator) {
  mn_allocator_t *d = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_cpu(), &d));
  MN_CHECK(!strcmp(mn_allocator_name(d), "naive"));
  setenv("MNEMO_ALLOC_CONF", "bogus:1", 1);
  MN_CHECK_ERR(mn_allocator_get_default(mn_device_sim(1), &d), MN_ERR_INVALID_ARGUMENT, "MNEMO_ALLOC_CONF");
  MN_CHECK(strstr(mn_last_error(), "bogus") != NULL);
  /* backend:cudaMallocAsync makes the default the stream-ordered pool allocator. */
  setenv("MNEMO_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(2), &d));
  MN_CHECK(!strcmp(mn_allocator_name(d), "async"));
  void *q = alloc_on(d, 100, NULL);
  MN_CHECK_OK(mn_allocator_free(d, q));
  MN_CHECK_OK(mn_allocator_empty_cache(d));
  setenv("MNEMO_ALLOC_CONF", "max_split_size_mb:64", 1);
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(1), &d));
  unsetenv("MNEMO_ALLOC_CONF");
  MN_CHECK(!strcmp(mn_allocator_name(d), "caching") && stats_of(d).max_split_size == (int64_t)(64 * MB));
  mn_allocator_t *again = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(1), &again));
  MN_CHECK(again == d);
  void *p = alloc_on(d, 100, NULL);
  MN_CHECK_OK(mn_allocator_free(d, p));
  MN_CHECK_OK(mn_allocator_empty_cache(d));
}

/* The same code on the CPU: host memory, events that complete at once, no VMM. */
MN_TEST(cpu_device) {
  mn_caching_config_t c = mn_caching_config_default();
  c.expandable_segments = true; /* no VMM on the CPU: plain segments, silently */
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(mn_device_cpu(), &c, &a));
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &s));
  char *p = alloc_on(a, 3000, NULL);
  memset(p, 7, 3000);
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_OK(mn_allocator_free(a, p));
  char *q = alloc_on(a, 3000, NULL);
  MN_CHECK(q == p && stats_of(a).segment[MN_POOL_ALL].current == 1);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == 0);
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* Destroy frees everything, live and pending blocks included (nothing leaks under ASan). */
MN_TEST(destroy_with_live_allocations) {
  const char *confs[] = {NULL, "expandable_segments:True"};
  for (int c = 0; c < 2; c++) {
    mn_allocator_t *a = mk(confs[c]);
    mn_stream_t *s1 = new_stream(), *s2 = new_stream();
    void *p = alloc_on(a, 1000, s1), *q = alloc_on(a, 30 * MB, s1);
    (void)alloc_on(a, 5 * MB, s2);
    MN_CHECK_OK(mn_memset_async(SIM0, p, 1, 16, s2));
    MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
    MN_CHECK_OK(mn_allocator_free(a, p)); /* pending on s2 */
    MN_CHECK_OK(mn_allocator_free(a, q)); /* cached */
    mn_allocator_destroy(a);
    MN_CHECK_OK(mn_stream_destroy(s1));
    MN_CHECK_OK(mn_stream_destroy(s2));
    mn_sim_stats_t ss = sim_stats();
    MN_CHECK(ss.mapped_bytes == 0 && ss.live_events == 0 && ss.live_reservations == 0 && ss.illegal_accesses == 0);
    MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  }
}

/* ---- streams and their lifetime (docs/ALLOCATOR.md) ------------------------------------------ */

/* A record_stream use keeps the stream's pointer until free records its event
 * there: destroying the stream meanwhile is refused (it used to be freed, and
 * the free then recorded an event on freed memory). */
MN_TEST(stream_destroy_while_recorded_is_busy) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  char *p = alloc_on(a, 4096, s1), *q = alloc_on(a, 4096, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, p, 0x44, 64, s2)); /* queued on s2, not run */
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2)); /* twice: one use, one hold */
  MN_CHECK_ERR(mn_stream_destroy(s2), MN_ERR_BUSY, "still used by 1 allocator block ");
  MN_CHECK(strstr(mn_last_error(), "mn_stream_destroy: ") == mn_last_error());
  MN_CHECK(strstr(mn_last_error(), "record_stream") != NULL && strstr(mn_last_error(), "free it first") != NULL);
  MN_CHECK_OK(mn_allocator_record_stream(a, q, s2));
  MN_CHECK_ERR(mn_stream_destroy(s2), MN_ERR_BUSY, "still used by 2 allocator blocks");
  /* refused, and intact: its queued work is there and more can be queued */
  MN_CHECK(pending_ops(s2) == 1);
  MN_CHECK_OK(mn_memset_async(SIM0, p + 64, 0x45, 64, s2));
  MN_CHECK(pending_ops(s2) == 2);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_ERR(mn_stream_destroy(s2), MN_ERR_BUSY, "still used by 1 allocator block ");
  MN_CHECK_OK(mn_allocator_free(a, p)); /* its event on s2 stands for the use: the hold ends */
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 2); /* both pending on s2 */
  MN_CHECK_OK(mn_stream_destroy(s2)); /* as CUDA: its queued work completes */
  MN_CHECK((unsigned char)p[0] == 0x44 && (unsigned char)p[64] == 0x45);
  /* The pending events' stream is gone: they count as reached, the blocks are reused. */
  char *r = alloc_on(a, 4096, s1);
  MN_CHECK(r == p || r == q);
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1);
  MN_CHECK_OK(mn_allocator_free(a, r));
  MN_CHECK(sim_stats().illegal_accesses == 0);
  done(a);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK(sim_stats().live_events == 0 && sim_stats().live_streams == 0);
}

/* The allocating stream is kept as an id only (free lists are keyed by it, ids
 * are never reused): it may be destroyed while its blocks live. Their memory
 * then serves no other stream and goes back with empty_cache. */
MN_TEST(allocating_stream_destroyed_before_free) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream();
  char *p = alloc_on(a, 4096, s1), *big = alloc_on(a, 30 * MB, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, p, 0x55, 64, s1));
  MN_CHECK_OK(mn_stream_destroy(s1)); /* nothing keeps its pointer; its work completes */
  MN_CHECK((unsigned char)p[0] == 0x55);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, big));
  inv(a);
  mn_stream_t *s3 = new_stream();
  char *q = alloc_on(a, 4096, s3); /* another stream: the old block is not its to take */
  MN_CHECK(q != p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK(stats_of(a).segment[MN_POOL_ALL].current == 3);
  MN_CHECK(sim_stats().illegal_accesses == 0);
  done(a); /* empty_cache gives every segment back, the dead stream's too */
  MN_CHECK_OK(mn_stream_destroy(s3));
}

/* The normal order needs nothing special: alloc, record, free, synchronize,
 * empty_cache, destroy; and the allocator's destroy drops the holds of blocks
 * still live (and recorded) at that point. */
MN_TEST(stream_lifetime_normal_flow_and_allocator_destroy) {
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  void *p = alloc_on(a, 1 * MB, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, p, 1, MB, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_stream_synchronize(s2));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_stream_destroy(s1));
  done(a);

  a = mk("expandable_segments:True");
  s1 = new_stream();
  s2 = new_stream();
  (void)alloc_on(a, 4096, s1); /* live at destroy */
  void *q = alloc_on(a, 4096, NULL);
  MN_CHECK_OK(mn_allocator_record_stream(a, q, s1));
  MN_CHECK_OK(mn_allocator_record_stream(a, q, s2));
  MN_CHECK_ERR(mn_stream_destroy(s1), MN_ERR_BUSY, "1 allocator block");
  mn_allocator_destroy(a); /* frees everything, drops every hold */
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  mn_sim_stats_t ss = sim_stats();
  MN_CHECK(ss.mapped_bytes == 0 && ss.live_reservations == 0 && ss.live_streams == 0 && ss.live_events == 0);
}

/* A free that fails changes nothing: the block stays live with its uses, so
 * its streams stay held; the retry releases them. */
MN_TEST(failed_free_keeps_stream_holds) {
  enum { NS = 9 }; /* more uses than free's on-stack array: it needs a host allocation */
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s[NS];
  void *p = alloc_on(a, 4096, NULL);
  for (int i = 0; i < NS; i++) {
    s[i] = new_stream();
    MN_CHECK_OK(mn_allocator_record_stream(a, p, s[i]));
  }
  mn__hostmem_fail_nth(1);
  MN_CHECK_ERR(mn_allocator_free(a, p), MN_ERR_OUT_OF_MEMORY, "stream events");
  mn__hostmem_fail_nth(0);
  inv(a);
  MN_CHECK(stats_of(a).allocation[MN_POOL_ALL].current == 1);
  MN_CHECK_ERR(mn_stream_destroy(s[4]), MN_ERR_BUSY, "1 allocator block");
  MN_CHECK_OK(mn_allocator_free(a, p));
  for (int i = 0; i < NS; i++) MN_CHECK_OK(mn_stream_destroy(s[i]));
  void *q = alloc_on(a, 4096, NULL); /* the events on the destroyed streams count as reached */
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  done(a);
}

/* ---- many streams holding pending frees ---------------------------------------------- */

enum { PF_STREAMS = 100, PF_BLOCKS = 512 }; /* 512 x 4 KiB: one whole 2 MiB small segment */

static bool pf_is_pending_block(char *const *blk, const void *p) {
  for (int i = 0; i < PF_BLOCKS; i++)
    if (blk[i] == p) return true;
  return false;
}

/* Frees pending on more streams than every allocation polls (MN__POLL_ALL_MAX):
 * record_stream fails cleanly without host memory for the queue map's room;
 * a cached pair makes a bounded number of event queries whatever the streams
 * (it made one per stream: 100 per allocation); a block comes back exactly
 * when its stream passes its free, never before; an allocation that needs
 * memory first reclaims every completed pending free (no new segment while
 * one is reusable); and with no allocation missing the cache, every completed
 * free is still reclaimed within MN__POLL_EVERY_MAX allocations per stream. */
MN_TEST(pending_frees_many_streams) {
  MN_CHECK(PF_STREAMS > MN__POLL_ALL_MAX);
  mn_allocator_t *a = mk(NULL);
  mn_stream_t *s[PF_STREAMS];
  char *blk[PF_BLOCKS];
  for (int i = 0; i < PF_STREAMS; i++) s[i] = new_stream();
  /* A record_stream that cannot have the host memory for its queue's room
   * changes nothing: the free that follows needs no event. */
  void *h = alloc_on(a, 4 * KB, NULL);
  mn__hostmem_fail_nth(1);
  MN_CHECK_ERR(mn_allocator_record_stream(a, h, s[0]), MN_ERR_OUT_OF_MEMORY, "stream use");
  mn__hostmem_fail_nth(0);
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, h));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 0);
  for (int i = 0; i < PF_BLOCKS; i++) blk[i] = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(stats_of(a).num_device_alloc == 1); /* one segment, full */
  /* Block i: work queued on stream i % PF_STREAMS (not run), its use recorded, freed. */
  for (int i = 0; i < PF_BLOCKS; i++) {
    mn_stream_t *u = s[i % PF_STREAMS];
    MN_CHECK_OK(mn_memset_async(SIM0, blk[i], 1 + i % 200, 64, u));
    MN_CHECK_OK(mn_allocator_record_stream(a, blk[i], u));
    MN_CHECK_OK(mn_allocator_free(a, blk[i]));
  }
  inv(a);
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == PF_BLOCKS);

  /* 1. Nothing completes: the first allocation misses (every stream polled,
   * none passed: a new segment); then cached pairs, each querying less than
   * one event on average (the query after PAIRS would fail: it never comes). */
  void *warm = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(!pf_is_pending_block(blk, warm) && stats_of(a).num_device_alloc == 2);
  MN_CHECK_OK(mn_allocator_free(a, warm));
  enum { PAIRS = 2000 };
  uint64_t fired = sim_stats().faults_fired;
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_QUERY, PAIRS + 1, 1));
  for (int k = 0; k < PAIRS; k++) {
    void *q = alloc_on(a, 4 * KB, NULL);
    MN_CHECK(q == warm);
    MN_CHECK_OK(mn_allocator_free(a, q));
  }
  MN_CHECK(sim_stats().faults_fired == fired);
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == PF_BLOCKS);
  inv(a);

  /* 2. The second segment filled: from here on an allocation misses the cache
   * unless a pending free is reclaimed. */
  void *fill[PF_BLOCKS];
  for (int i = 0; i < PF_BLOCKS; i++) fill[i] = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(stats_of(a).num_device_alloc == 2);

  /* 3. Stream 37 passes its first free only (blocks 37, 137, ... wait behind
   * their own work): block 37, and only it, comes back, its work done, and no
   * memory is asked for. */
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s[37], 1, &ran));
  MN_CHECK(ran == 1);
  char *q = alloc_on(a, 4 * KB, NULL);
  MN_CHECK(q == blk[37] && (unsigned char)q[0] == 1 + 37);
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(st.num_device_alloc == 2 && st.active[MN_POOL_ALL].current == 2 * PF_BLOCKS);
  inv(a);

  /* 4. Every stream passes: the next allocation, which needs memory, reclaims
   * all of them first (they merge: a 64 KiB block fits where they lay). */
  for (int i = 0; i < PF_STREAMS; i++) MN_CHECK_OK(mn_stream_synchronize(s[i]));
  char *big = alloc_on(a, 64 * KB, NULL);
  st = stats_of(a);
  MN_CHECK(pf_is_pending_block(blk, big));
  MN_CHECK(st.num_device_alloc == 2 && st.active[MN_POOL_ALL].current == PF_BLOCKS + 2);
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, big));
  MN_CHECK_OK(mn_allocator_free(a, q));
  for (int i = 0; i < PF_BLOCKS; i++) MN_CHECK_OK(mn_allocator_free(a, fill[i]));

  /* 5. One pending free per stream, all passed, and only cached pairs after:
   * each is reclaimed within MN__POLL_EVERY_MAX allocations per stream. */
  char *one[PF_STREAMS];
  for (int i = 0; i < PF_STREAMS; i++) one[i] = alloc_on(a, 4 * KB, NULL);
  void *keep = alloc_on(a, 4 * KB, NULL); /* the pairs' block lies apart from them */
  for (int i = 0; i < PF_STREAMS; i++) {
    MN_CHECK_OK(mn_memset_async(SIM0, one[i], 0x5a, 64, s[i]));
    MN_CHECK_OK(mn_allocator_record_stream(a, one[i], s[i]));
    MN_CHECK_OK(mn_allocator_free(a, one[i]));
  }
  for (int i = 0; i < PF_STREAMS; i++) MN_CHECK_OK(mn_stream_synchronize(s[i]));
  long pairs = 0;
  while (stats_of(a).active[MN_POOL_ALL].current > 1 && pairs < (long)PF_STREAMS * MN__POLL_EVERY_MAX) {
    void *p = alloc_on(a, 512, NULL);
    MN_CHECK_OK(mn_allocator_free(a, p));
    pairs++;
  }
  MN_CHECK(stats_of(a).active[MN_POOL_ALL].current == 1);
  MN_CHECK(stats_of(a).num_device_alloc == 2);
  inv(a);
  MN_CHECK_OK(mn_allocator_free(a, keep));
  done(a);
  for (int i = 0; i < PF_STREAMS; i++) MN_CHECK_OK(mn_stream_destroy(s[i]));
}

MN_TEST(garbage_collection) {
  mn_allocator_t *a = mk("garbage_collection_threshold:0.5,per_process_memory_fraction:0.5");
  void *p[3];
  for (int i = 0; i < 3; i++) p[i] = alloc_on(a, (size_t)(100 + i) * MB, NULL);
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_allocator_free(a, p[i]));
  /* 306 MiB cached > 0.5 * 512 MiB: whole cached segments go before a new one is made. */
  void *q = alloc_on(a, 150 * MB, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.num_device_free >= 1 && s.num_alloc_retries == 0);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current < (int64_t)(306 * MB + 150 * MB));
  MN_CHECK_OK(mn_allocator_free(a, q));
  done(a);
}

int main(void) {
  const char *seed = getenv("MNEMO_TEST_SEED");
  if (seed && *seed) g_seed = strtoull(seed, NULL, 0);
  printf("seed=%llu (set MNEMO_TEST_SEED to change)\n", (unsigned long long)g_seed);
  mn_sim_config_t c = mn_sim_config_default();
  c.device_count = 3;
  c.capacity = GB;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(size_rules);
  MN_RUN(pool_choice_and_segments);
  MN_RUN(split_and_merge);
  MN_RUN(best_fit_per_stream);
  MN_RUN(oversize_rules);
  MN_RUN(roundup_divisions_through_api);
  MN_RUN(cross_stream_safety);
  MN_RUN(oom_recovery_and_message);
  MN_RUN(memory_fraction_cap);
  MN_RUN(fault_raw_alloc);
  MN_RUN(fault_events);
  MN_RUN(expandable_grow_and_shrink);
  MN_RUN(expandable_release_synchronizes_once);
  MN_RUN(stats_and_peaks);
  MN_RUN(trace_events);
  MN_RUN(config_parse_and_format);
  MN_RUN(bad_input);
  MN_RUN(default_allocator);
  MN_RUN(cpu_device);
  MN_RUN(destroy_with_live_allocations);
  MN_RUN(stream_destroy_while_recorded_is_busy);
  MN_RUN(allocating_stream_destroyed_before_free);
  MN_RUN(stream_lifetime_normal_flow_and_allocator_destroy);
  MN_RUN(failed_free_keeps_stream_holds);
  MN_RUN(garbage_collection);
  MN_RUN(pending_frees_many_streams);
  return mn_test_finish();
}
