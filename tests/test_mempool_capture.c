/* tests/test_mempool_capture.c: stream capture into memory pools on the SIM device (label
 * sim): allocations of a capture come from its pool, the graph replays several times into
 * buffers that stay valid, frees during the capture (plain, and with record_stream uses
 * reused once the stream joined them), nothing released while capturing, the graph holding
 * the pool and giving its memory back when destroyed, invalidated captures, bad input.
 * Single-threaded. */
#include <stdint.h>
#include <stdlib.h>

#include "caching_test_util.h"

static mn_mempool_t *mkpool(mn_allocator_t *a) {
  mn_mempool_t *p = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  return p;
}

static mn_alloc_stats_t pool_stats(mn_mempool_t *p) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_mempool_get_stats(p, &s));
  return s;
}

static bool all_bytes(const void *p, int v, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)v) return false;
  return true;
}

static mn_event_t *new_event(void) {
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  return e;
}

/* s2 joins s1's capture (fork), or s1 joins s2 (join): an event recorded on
 * `from`, waited on by `to`. */
static void join(mn_stream_t *to, mn_stream_t *from, mn_event_t *e) {
  MN_CHECK_OK(mn_event_record(e, from));
  MN_CHECK_OK(mn_stream_wait_event(to, e));
}

MN_TEST(capture_and_replay) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a);
  mn_stream_t *s = new_stream();
  void *before = alloc_on(a, 64 * KB, s); /* the allocator's own pool */
  MN_CHECK_OK(mn_mempool_capture_begin(p, s));
  mn_capture_status cs = MN_CAPTURE_NONE;
  uint64_t cid = 0;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, &cid));
  MN_CHECK(cs == MN_CAPTURE_ACTIVE && cid != 0);
  void *x = alloc_on(a, 64 * KB, s), *y = alloc_on(a, 64 * KB, s);
  void *other = alloc_on(a, 64 * KB, NULL); /* the default stream does not capture: not routed */
  MN_CHECK_OK(mn_memset_async(SIM0, x, 7, 64 * KB, s));
  MN_CHECK_OK(mn_memcpy_async(SIM0, y, SIM0, x, 64 * KB, s));
  MN_CHECK_OK(mn_allocator_free(a, x)); /* no uses: reusable at once, in capture order */
  void *z = alloc_on(a, 64 * KB, s);
  MN_CHECK(z == x);
  MN_CHECK_OK(mn_memset_async(SIM0, z, 9, 4 * KB, s));
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_mempool_capture_end(p, s, &g));
  MN_CHECK(g != NULL && mn_graph_node_count(g) == 3);
  mn_alloc_stats_t ps = pool_stats(p);
  MN_CHECK(ps.allocation[MN_POOL_ALL].current == 2 && ps.segment[MN_POOL_ALL].current == 1);
  MN_CHECK(stats_of(a).allocation[MN_POOL_ALL].current == 4);
  inv(a);
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK(all_bytes(y, 0, 64 * KB)); /* recorded, not run */
  for (int round = 0; round < 3; round++) {
    memset(y, 0, 64 * KB);
    memset(z, 0, 64 * KB);
    MN_CHECK_OK(mn_graph_launch(g, s));
    MN_CHECK_OK(mn_stream_synchronize(s));
    MN_CHECK(all_bytes(y, 7, 64 * KB));
    MN_CHECK(all_bytes(z, 9, 4 * KB) && all_bytes((char *)z + 4 * KB, 7, 60 * KB));
  }
  /* the graph holds the pool: no destroy, no empty_cache; freed blocks stay in the pool */
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_allocator_free(a, z));
  MN_CHECK_ERR(mn_mempool_destroy(p), MN_ERR_BUSY, "graph");
  MN_CHECK_ERR(mn_mempool_empty_cache(p), MN_ERR_BUSY, "graph");
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].current == (int64_t)(2 * MB));
  void *w = alloc_on(a, 64 * KB, s); /* outside the capture: never the graph's memory */
  MN_CHECK(w != y && w != z);
  MN_CHECK_OK(mn_graph_destroy(g)); /* the last graph: the pool's cache goes back */
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_allocator_free(a, w));
  MN_CHECK_OK(mn_allocator_free(a, before));
  MN_CHECK_OK(mn_allocator_free(a, other));
  MN_CHECK_OK(mn_stream_destroy(s));
  done(a);
}

/* record_stream during a capture: the block waits (no event can be recorded)
 * and is reused in the capture once its stream joined the use stream. */
MN_TEST(record_stream_reuse_in_capture) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a);
  mn_stream_t *s1 = new_stream(), *s2 = new_stream();
  mn_event_t *e1 = new_event(), *e2 = new_event(), *e3 = new_event();
  MN_CHECK_OK(mn_mempool_capture_begin(p, s1));
  join(s2, s1, e1); /* s2 joins the capture */
  void *x = alloc_on(a, 64 * KB, s1);
  void *s2buf = alloc_on(a, 64 * KB, s2); /* s2 captures too: routed to the pool */
  MN_CHECK(pool_stats(p).allocation[MN_POOL_ALL].current == 2);
  MN_CHECK_OK(mn_memset_async(SIM0, x, 3, 64 * KB, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, x, s2));
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK(pool_stats(p).active[MN_POOL_ALL].current == 2); /* x waits */
  inv(a);
  void *y = alloc_on(a, 64 * KB, s1);
  MN_CHECK(y != x); /* s1 has not joined s2 since the free */
  join(s1, s2, e2);
  void *z = alloc_on(a, 64 * KB, s1);
  MN_CHECK(z == x); /* joined: x is reused */
  /* a second deferred block that is never joined in the capture */
  MN_CHECK_OK(mn_memset_async(SIM0, y, 4, 64 * KB, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, y, s2));
  MN_CHECK_OK(mn_allocator_free(a, y));
  join(s1, s2, e3); /* rejoin for the end of the capture; made after y's free marker? yes: y reusable too */
  MN_CHECK_OK(mn_allocator_free(a, s2buf));
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_mempool_capture_end(p, s1, &g));
  inv(a);
  MN_CHECK_OK(mn_graph_launch(g, s1));
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK(all_bytes(z, 3, 64 * KB));
  MN_CHECK_OK(mn_allocator_free(a, z));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK(pool_stats(p).active[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_mempool_destroy(p));
  mn_event_t *evs[] = {e1, e2, e3};
  for (int i = 0; i < 3; i++) MN_CHECK_OK(mn_event_destroy(evs[i]));
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  done(a);
}

/* A use on a stream outside the capture: no marker, so the block waits for
 * the capture's end, then for an event like any pending free. */
MN_TEST(deferred_until_capture_ends) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a);
  mn_stream_t *s1 = new_stream(), *outside = new_stream();
  MN_CHECK_OK(mn_mempool_capture_begin(p, s1));
  void *x = alloc_on(a, 64 * KB, s1);
  MN_CHECK_OK(mn_memset_async(SIM0, x, 5, 64 * KB, outside)); /* queued on a stream that does not capture */
  MN_CHECK_OK(mn_allocator_record_stream(a, x, outside));
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_ERR(mn_stream_destroy(outside), MN_ERR_BUSY, ""); /* held until its event is recorded */
  void *y = alloc_on(a, 64 * KB, s1);
  MN_CHECK(y != x);
  inv(a);
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_mempool_capture_end(p, s1, &g));
  MN_CHECK(pool_stats(p).active[MN_POOL_ALL].current == 2); /* x now waits for its event */
  MN_CHECK_OK(mn_stream_synchronize(outside));
  MN_CHECK(all_bytes(x, 5, 64 * KB));
  MN_CHECK_OK(mn_stream_destroy(outside)); /* the event took the use */
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_graph_destroy(g)); /* pending frees waited for, cache released */
  MN_CHECK(pool_stats(p).reserved_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_stream_destroy(s1));
  done(a);
}

/* While capturing, running out of memory releases nothing (a free would
 * synchronize the device and break the capture): the allocation fails and
 * the capture goes on. */
MN_TEST(no_release_while_capturing) {
  mn_allocator_t *a = mk(NULL); /* 1 GiB */
  mn_mempool_t *p = mkpool(a);
  mn_stream_t *s = new_stream();
  void *cached = alloc_on(a, 600 * MB, NULL);
  MN_CHECK_OK(mn_allocator_free(a, cached)); /* cached in the allocator's own pool */
  MN_CHECK_OK(mn_mempool_capture_begin(p, s));
  void *x = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 600 * MB, s, &x), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK_OK(mn_allocator_empty_cache(a)); /* nothing to do while capturing */
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(600 * MB));
  mn_capture_status cs = MN_CAPTURE_NONE;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, NULL));
  MN_CHECK(cs == MN_CAPTURE_ACTIVE);
  mn_graph_t *g = NULL;
  MN_CHECK_OK(mn_mempool_capture_end(p, s, &g));
  MN_CHECK_OK(mn_graph_destroy(g));
  x = alloc_on(a, 600 * MB, s); /* outside the capture: the cache is released and the retry fits */
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_stream_destroy(s));
  done(a);
}

MN_TEST(invalidated_capture) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a);
  mn_stream_t *s = new_stream();
  MN_CHECK_OK(mn_mempool_capture_begin(p, s));
  void *x = alloc_on(a, 64 * KB, s);
  MN_CHECK(mn_stream_synchronize(s) == MN_ERR_INVALID_STATE); /* illegal while capturing */
  mn_graph_t *g = NULL;
  MN_CHECK(mn_mempool_capture_end(p, s, &g) == MN_ERR_INVALID_STATE);
  MN_CHECK(g == NULL);
  mn_capture_status cs = MN_CAPTURE_ACTIVE;
  MN_CHECK_OK(mn_stream_capture_status(s, &cs, NULL));
  MN_CHECK(cs == MN_CAPTURE_NONE);
  void *y = alloc_on(a, 64 * KB, s); /* routing ended */
  MN_CHECK(pool_stats(p).allocation[MN_POOL_ALL].current == 1 && stats_of(a).allocation[MN_POOL_ALL].current == 2);
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_mempool_destroy(p)); /* no graph holds it */
  MN_CHECK_OK(mn_stream_destroy(s));
  done(a);
}

MN_TEST(bad_input) {
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = mkpool(a), *q = mkpool(a);
  mn_stream_t *s = new_stream(), *def = NULL, *other = NULL;
  MN_CHECK_OK(mn_stream_default(SIM0, &def));
  MN_CHECK_OK(mn_stream_create(mn_device_sim(1), &other));
  MN_CHECK_ERR(mn_mempool_capture_begin(NULL, s), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_mempool_capture_begin(p, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_mempool_capture_begin(p, other), MN_ERR_INVALID_ARGUMENT, "sim:1");
  MN_CHECK(mn_mempool_capture_begin(p, def) == MN_ERR_INVALID_ARGUMENT); /* the runtime refuses default streams */
  mn_graph_t *g = NULL;
  MN_CHECK_ERR(mn_mempool_capture_end(p, s, &g), MN_ERR_INVALID_ARGUMENT, "not capturing");
  MN_CHECK_OK(mn_mempool_capture_begin(p, s));
  MN_CHECK(mn_mempool_capture_begin(q, s) == MN_ERR_INVALID_STATE); /* already capturing */
  MN_CHECK_ERR(mn_mempool_capture_end(q, s, &g), MN_ERR_INVALID_ARGUMENT, "not capturing into");
  MN_CHECK_ERR(mn_mempool_capture_end(p, s, NULL), MN_ERR_INVALID_ARGUMENT, "out");
  MN_CHECK_ERR(mn_mempool_destroy(p), MN_ERR_BUSY, "capture");
  MN_CHECK_ERR(mn_mempool_empty_cache(p), MN_ERR_BUSY, "capture");
  MN_CHECK_OK(mn_mempool_destroy(q)); /* the refused begin left nothing behind */
  /* ending on a joined stream is refused and the capture goes on: so does the routing */
  mn_stream_t *s2 = new_stream();
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_stream_wait_event(s2, e));
  MN_CHECK(mn_mempool_capture_end(p, s2, &g) == MN_ERR_INVALID_STATE);
  void *x = alloc_on(a, 4 * KB, s);
  MN_CHECK(pool_stats(p).allocation[MN_POOL_ALL].current == 1);
  MN_CHECK_OK(mn_event_record(e, s2)); /* s2 rejoins s */
  MN_CHECK_OK(mn_stream_wait_event(s, e));
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_mempool_capture_end(p, s, &g));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_graph_destroy(g));
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_stream_destroy(other));
  done(a);
}

int main(void) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = GB;
  c.device_count = 2;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(capture_and_replay);
  MN_RUN(record_stream_reuse_in_capture);
  MN_RUN(deferred_until_capture_ends);
  MN_RUN(no_release_while_capturing);
  MN_RUN(invalidated_capture);
  MN_RUN(bad_input);
  return mn_test_finish();
}
