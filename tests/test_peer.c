/* tests/test_peer.c: peer access to the caching allocator's memory on two SIM
 * devices (mn_caching_allocator_enable_peer_access): expandable segments'
 * pages are reachable from a peer exactly when the allocator granted them
 * (every page mapped before the enabling, and every page mapped after), raw
 * segments follow peer access as cudaMalloc memory does, bad input changes
 * nothing, and a peer copy grants the default allocators. Single-threaded; each case reconfigures the SIM devices, which
 * forgets enabled peers. */
#include <stdint.h>

#include "mn_test.h"

static const size_t MiB = (size_t)1 << 20;
static mn_device_t D0, D1;

/* Two fresh SIM devices (peer access forgotten), 1 GiB each. */
static void two_devices(bool no_peer_access) {
  mn_sim_config_t c = mn_sim_config_default();
  c.device_count = 2;
  c.capacity = (size_t)1 << 30;
  c.no_peer_access = no_peer_access;
  MN_CHECK_OK(mn_sim_configure(&c));
}

static mn_allocator_t *caching(bool expandable) {
  mn_caching_config_t cc = mn_caching_config_default();
  cc.expandable_segments = expandable;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(D0, &cc, &a));
  return a;
}

/* Whether `accessor` reaches every mapped byte of every segment of a (each
 * snapshot segment is one mapped stretch). */
static bool all_reachable(mn_allocator_t *a, mn_device_t accessor, size_t *nsegs) {
  mn_snapshot_t *snap = NULL;
  MN_CHECK_OK(mn_allocator_snapshot(a, &snap));
  if (!snap) return false;
  bool ok = snap->nsegments > 0;
  for (size_t i = 0; i < snap->nsegments; i++)
    ok = ok && mn_sim_check_access(accessor, D0, (void *)snap->segments[i].address, snap->segments[i].total_size) ==
                   MN_OK;
  if (nsegs) *nsegs = snap->nsegments;
  mn_snapshot_free(snap);
  return ok;
}

MN_TEST(expandable_pages_reach_the_peer_once_enabled) {
  two_devices(false);
  mn_allocator_t *a = caching(true);
  if (!a) return;
  void *big = NULL, *small = NULL, *later = NULL, *other = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(D0, &s));
  MN_CHECK_OK(mn_allocator_alloc(a, 30 * MiB, NULL, &big)); /* large pool: 2 pages of 20 MiB */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &small));   /* small pool: 1 page of 2 MiB */
  if (!big || !small || !s) return;
  /* Before: the pages reach their own device only; peer access enabled on
   * the device alone does not reach mapped pages (as cuMemMap memory). */
  MN_CHECK_OK(mn_sim_check_access(D0, D0, big, 30 * MiB));
  MN_CHECK_ERR(mn_sim_check_access(D1, D0, big, 30 * MiB), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_OK(mn_device_enable_peer_access(D1, D0));
  MN_CHECK_ERR(mn_sim_check_access(D1, D0, big, 30 * MiB), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_ERR(mn_sim_check_access(D1, D0, small, 4096), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK(!all_reachable(a, D1, NULL));

  MN_CHECK_OK(mn_caching_allocator_enable_peer_access(a, D1));
  MN_CHECK_OK(mn_sim_check_access(D1, D0, big, 30 * MiB));
  MN_CHECK_OK(mn_sim_check_access(D1, D0, small, 4096));
  size_t nsegs = 0;
  MN_CHECK(all_reachable(a, D1, &nsegs)); /* the mapped tails too (the free rest of the pages) */
  MN_CHECK(nsegs == 2);
  MN_CHECK_OK(mn_caching_allocator_enable_peer_access(a, D1)); /* twice: fine */

  /* Pages mapped later: growing the same range, and a new range of another stream. */
  MN_CHECK_OK(mn_allocator_alloc(a, 50 * MiB, NULL, &later));
  MN_CHECK_OK(mn_allocator_alloc(a, 12 * MiB, s, &other));
  if (later) MN_CHECK_OK(mn_sim_check_access(D1, D0, later, 50 * MiB));
  if (other) MN_CHECK_OK(mn_sim_check_access(D1, D0, other, 12 * MiB));
  MN_CHECK(all_reachable(a, D1, &nsegs));
  MN_CHECK(nsegs == 3);
  MN_CHECK_OK(mn_allocator_check_invariants(a));

  /* Unmapped by empty_cache and mapped again: granted again. */
  MN_CHECK_OK(mn_allocator_free(a, later));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  if (later) MN_CHECK_ERR(mn_sim_check_access(D1, D0, later, 50 * MiB), MN_ERR_INVALID_ARGUMENT, "not mapped");
  later = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 50 * MiB, NULL, &later));
  if (later) MN_CHECK_OK(mn_sim_check_access(D1, D0, later, 50 * MiB));
  MN_CHECK(all_reachable(a, D1, NULL));

  /* A failed map with peers set loses nothing. */
  mn_alloc_stats_t before, after;
  MN_CHECK_OK(mn_allocator_get_stats(a, &before));
  MN_CHECK_OK(mn_sim_fault_inject(D0, MN_SIM_FAULT_RAW_ALLOC, 1, 1000));
  void *none = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 100 * MiB, NULL, &none), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK_OK(mn_sim_fault_clear(D0));
  MN_CHECK(none == NULL);
  MN_CHECK_OK(mn_allocator_get_stats(a, &after));
  MN_CHECK(after.allocated_bytes[MN_POOL_ALL].current == before.allocated_bytes[MN_POOL_ALL].current);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK(all_reachable(a, D1, NULL));

  MN_CHECK_OK(mn_allocator_free(a, big));
  MN_CHECK_OK(mn_allocator_free(a, small));
  MN_CHECK_OK(mn_allocator_free(a, later));
  MN_CHECK_OK(mn_allocator_free(a, other));
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_sim_check_invariants(D0));
}

/* Another allocator of the same device keeps its own peers. */
MN_TEST(peers_are_per_allocator) {
  two_devices(false);
  mn_allocator_t *a = caching(true), *b = caching(true);
  if (!a || !b) return;
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_caching_allocator_enable_peer_access(a, D1));
  MN_CHECK_OK(mn_allocator_alloc(a, 8 * MiB, NULL, &p));
  MN_CHECK_OK(mn_allocator_alloc(b, 8 * MiB, NULL, &q));
  if (p) MN_CHECK_OK(mn_sim_check_access(D1, D0, p, 8 * MiB));
  if (q) MN_CHECK_ERR(mn_sim_check_access(D1, D0, q, 8 * MiB), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(b, q));
  mn_allocator_destroy(a);
  mn_allocator_destroy(b);
}

/* Raw (non-expandable) segments follow mn_device_enable_peer_access, which
 * the allocator's enabling calls too. */
MN_TEST(raw_segments_follow_peer_access) {
  two_devices(false);
  mn_allocator_t *a = caching(false);
  if (!a) return;
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 30 * MiB, NULL, &p));
  if (!p) return;
  MN_CHECK_ERR(mn_sim_check_access(D1, D0, p, 30 * MiB), MN_ERR_INVALID_ARGUMENT, "no peer access enabled");
  MN_CHECK_OK(mn_caching_allocator_enable_peer_access(a, D1));
  MN_CHECK_OK(mn_sim_check_access(D1, D0, p, 30 * MiB));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &q));
  if (q) MN_CHECK_OK(mn_sim_check_access(D1, D0, q, 4096));
  MN_CHECK(all_reachable(a, D1, NULL));
  /* one way only: sim:0 was not enabled to reach sim:1 */
  void *r = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(D1, 2 * MiB, &r));
  if (r) MN_CHECK_ERR(mn_sim_check_access(D0, D1, r, 2 * MiB), MN_ERR_INVALID_ARGUMENT, "no peer access enabled");
  MN_CHECK_OK(mn_device_raw_free(D1, r));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, q));
  mn_allocator_destroy(a);

  /* Without the allocator: mn_device_enable_peer_access alone reaches raw memory. */
  two_devices(false);
  a = caching(false);
  p = NULL;
  if (a) MN_CHECK_OK(mn_allocator_alloc(a, 30 * MiB, NULL, &p));
  MN_CHECK_OK(mn_device_enable_peer_access(D1, D0));
  if (p) MN_CHECK_OK(mn_sim_check_access(D1, D0, p, 30 * MiB));
  if (a) MN_CHECK_OK(mn_allocator_free(a, p));
  mn_allocator_destroy(a);
}

MN_TEST(bad_input_changes_nothing) {
  two_devices(false);
  mn_allocator_t *a = caching(true);
  if (!a) return;
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 8 * MiB, NULL, &p));
  if (!p) return;
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(a, D0), MN_ERR_INVALID_ARGUMENT, "not a peer");
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(a, mn_device_cpu()), MN_ERR_INVALID_ARGUMENT, "not a peer");
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(a, mn_device_sim(2)), MN_ERR_NO_DEVICE, "sim:2");
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(NULL, D1), MN_ERR_INVALID_ARGUMENT, "not a caching allocator");
  mn_allocator_t *naive = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_cpu(), &naive));
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(naive, D1), MN_ERR_INVALID_ARGUMENT,
               "not a caching allocator");
  MN_CHECK_ERR(mn_sim_check_access(D1, D0, p, 8 * MiB), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:1");
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_allocator_destroy(a);

  /* Devices that cannot reach each other: refused, nothing granted, later
   * maps not granted either. */
  two_devices(true);
  a = caching(true);
  if (!a) return;
  p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 8 * MiB, NULL, &p));
  MN_CHECK_ERR(mn_caching_allocator_enable_peer_access(a, D1), MN_ERR_NOT_SUPPORTED, "cannot access");
  void *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 40 * MiB, NULL, &q));
  if (p) MN_CHECK_ERR(mn_sim_check_access(D1, D0, p, 8 * MiB), MN_ERR_INVALID_ARGUMENT, "not accessible");
  if (q) MN_CHECK_ERR(mn_sim_check_access(D1, D0, q, 40 * MiB), MN_ERR_INVALID_ARGUMENT, "not accessible");
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
  two_devices(false);
}

/* A copy between two devices enables peer access through their default
 * allocators too (as PyTorch's copies do through its caching allocator), so
 * expandable pages of the default allocator reach the other device. */
MN_TEST(peer_copies_grant_the_default_allocators) {
  two_devices(false);
  mn_allocator_t *a = caching(true);
  if (!a) return;
  MN_CHECK_OK(mn_allocator_set_default(D0, a));
  const int64_t n = (int64_t)1 << 20;
  mn_view_t *src = NULL, *dst = NULL;
  MN_CHECK_OK(mn_view_empty(D0, MN_DTYPE_FLOAT32, 1, &n, &src));
  MN_CHECK_OK(mn_view_empty(D1, MN_DTYPE_FLOAT32, 1, &n, &dst));
  if (src && dst) {
    MN_CHECK_ERR(mn_sim_check_access(D1, D0, mn_view_data(src), 4 * MiB), MN_ERR_INVALID_ARGUMENT, "not accessible");
    MN_CHECK_OK(mn_view_fill(src, mn_scalar_float(1.5), NULL));
    MN_CHECK_OK(mn_view_copy(dst, src, NULL));
    MN_CHECK_OK(mn_device_synchronize(D0));
    MN_CHECK_OK(mn_device_synchronize(D1));
    MN_CHECK_OK(mn_sim_check_access(D1, D0, mn_view_data(src), 4 * MiB));
    MN_CHECK(all_reachable(a, D1, NULL));
  }
  mn_view_destroy(src);
  mn_view_destroy(dst);
  MN_CHECK_OK(mn_allocator_set_default(D0, NULL));
  mn_allocator_destroy(a);
}

int main(void) {
  D0 = mn_device_sim(0);
  D1 = mn_device_sim(1);
  MN_RUN(expandable_pages_reach_the_peer_once_enabled);
  MN_RUN(peers_are_per_allocator);
  MN_RUN(raw_segments_follow_peer_access);
  MN_RUN(bad_input_changes_nothing);
  MN_RUN(peer_copies_grant_the_default_allocators);
  return mn_test_finish();
}
