/* tests/caching_test_util.h: helpers shared by the caching allocator's SIM tests (one
 * allocator per case on sim:0, stats and snapshots, "nothing left" checks). Header-only. */
#ifndef MNEMO_TESTS_CACHING_TEST_UTIL_H
#define MNEMO_TESTS_CACHING_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>

#include "mn_test.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define GB ((size_t)1 << 30)

static mn_device_t SIM0;

static MN_TEST_UNUSED mn_allocator_t *mk(const char *conf) {
  mn_caching_config_t c = mn_caching_config_default();
  if (conf) MN_CHECK_OK(mn_caching_config_parse(conf, &c));
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, &c, &a));
  return a;
}

static MN_TEST_UNUSED mn_alloc_stats_t stats_of(mn_allocator_t *a) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  return s;
}

static MN_TEST_UNUSED mn_sim_stats_t sim_stats(void) {
  mn_sim_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &s));
  return s;
}

static MN_TEST_UNUSED void *alloc_on(mn_allocator_t *a, size_t n, mn_stream_t *s) {
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, n, s, &p));
  MN_CHECK(p != NULL);
  return p;
}

static MN_TEST_UNUSED void inv(mn_allocator_t *a) {
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

static MN_TEST_UNUSED mn_stream_t *new_stream(void) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  return s;
}

static MN_TEST_UNUSED size_t pending_ops(mn_stream_t *s) {
  size_t n = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &n));
  return n;
}

/* Everything freed by the caller: empty the cache, check nothing is left anywhere. */
static MN_TEST_UNUSED void done(mn_allocator_t *a) {
  inv(a);
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == 0 && s.allocation[MN_POOL_ALL].current == 0);
  MN_CHECK(s.active[MN_POOL_ALL].current == 0 && s.segment[MN_POOL_ALL].current == 0);
  MN_CHECK(s.inactive_split[MN_POOL_ALL].current == 0 && s.requested_bytes[MN_POOL_ALL].current == 0);
  inv(a);
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  mn_sim_stats_t ss = sim_stats();
  MN_CHECK(ss.mapped_bytes == 0 && ss.live_reservations == 0 && ss.illegal_accesses == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

static MN_TEST_UNUSED mn_snapshot_t *snap(mn_allocator_t *a) {
  mn_snapshot_t *s = NULL;
  MN_CHECK_OK(mn_allocator_snapshot(a, &s));
  return s;
}

#endif /* MNEMO_TESTS_CACHING_TEST_UTIL_H */
