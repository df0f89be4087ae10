/* tests/test_nccl.c: the NCCL module's registration wiring on the SIM device
 * (label sim; built with the module): NCCL's register/deregister calls are
 * replaced by fakes that record them (nccl/nccl_internal.h), and a pool of a
 * caching allocator is registered with a fake communicator. Every segment of
 * the pool, made before or after the registration, is registered exactly
 * once; each is deregistered exactly once, when it is freed, when the pool
 * is destroyed or when the pool is deregistered; other pools' segments never
 * are; failures roll back. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>

#include "caching_test_util.h"
#include "nccl/nccl_internal.h"

/* ---- fake NCCL: a table of registrations ------------------------------------ */
#define MAXREG 256
typedef struct fake_reg {
  ncclComm_t comm;
  uintptr_t addr;
  size_t size;
  int registered, deregistered;
} fake_reg;
static fake_reg g_reg[MAXREG];
static size_t g_nreg;
static int g_fail_register_at; /* the nth next register call fails (0: none) */

static ncclResult_t fake_register(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  if (g_fail_register_at > 0 && --g_fail_register_at == 0) return ncclInternalError;
  if (g_nreg == MAXREG) return ncclSystemError;
  g_reg[g_nreg] = (fake_reg){comm, (uintptr_t)buff, size, 1, 0};
  *handle = &g_reg[g_nreg++];
  return ncclSuccess;
}

static ncclResult_t fake_deregister(const ncclComm_t comm, void *handle) {
  fake_reg *r = handle;
  if (r < g_reg || r >= g_reg + g_nreg || r->comm != comm) return ncclInvalidArgument;
  r->deregistered++;
  return ncclSuccess;
}

static const char *fake_error_string(ncclResult_t res) { return res == ncclInternalError ? "planted" : "fake"; }

static void fake_reset(void) {
  memset(g_reg, 0, sizeof g_reg);
  g_nreg = 0;
  g_fail_register_at = 0;
}

/* Registrations of [addr, +size) by comm still live (registered, not deregistered). */
static int live_at(ncclComm_t comm, uintptr_t addr, size_t size) {
  int n = 0;
  for (size_t i = 0; i < g_nreg; i++)
    if (g_reg[i].comm == comm && g_reg[i].addr == addr && g_reg[i].size == size)
      n += g_reg[i].registered - g_reg[i].deregistered;
  return n;
}

static size_t live_total(void) {
  size_t n = 0;
  for (size_t i = 0; i < g_nreg; i++) n += (size_t)(g_reg[i].registered - g_reg[i].deregistered);
  return n;
}

/* Every registration deregistered exactly once. */
static bool all_deregistered_once(void) {
  for (size_t i = 0; i < g_nreg; i++)
    if (g_reg[i].deregistered != 1) return false;
  return true;
}

/* Each segment of the pool is registered with comm exactly once; returns how many. */
static size_t check_pool_registered(ncclComm_t comm, mn_mempool_t *p) {
  mn_snapshot_t *s = NULL;
  MN_CHECK_OK(mn_mempool_snapshot(p, &s));
  if (!s) return 0;
  for (size_t i = 0; i < s->nsegments; i++)
    MN_CHECK(live_at(comm, s->segments[i].address, s->segments[i].total_size) == 1);
  size_t n = s->nsegments;
  mn_snapshot_free(s);
  MN_CHECK(mn_nccl_registered_count(comm, p) == n);
  return n;
}

static void *pool_alloc(mn_allocator_t *a, mn_mempool_t *p, size_t n) {
  MN_CHECK_OK(mn_mempool_use(p));
  void *ptr = alloc_on(a, n, NULL);
  MN_CHECK_OK(mn_mempool_unuse(p));
  return ptr;
}

static const mn__nccl_ops_t FAKE = {fake_register, fake_deregister, fake_error_string};
#define COMM ((ncclComm_t)(uintptr_t)0x1000)
#define COMM2 ((ncclComm_t)(uintptr_t)0x2000)

MN_TEST(existing_and_new_segments_registered_once) {
  fake_reset();
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = NULL, *other = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  MN_CHECK_OK(mn_mempool_create(a, NULL, &other));
  if (!p || !other) return;
  /* before the registration: two segments of p, one of the allocator, one of another pool */
  void *p0 = pool_alloc(a, p, 4 * KB), *p1 = pool_alloc(a, p, 30 * MB);
  void *d0 = alloc_on(a, 4 * KB, NULL), *o0 = pool_alloc(a, other, 4 * KB);
  MN_CHECK_OK(mn_nccl_register_pool(COMM, p));
  MN_CHECK(check_pool_registered(COMM, p) == 2);
  MN_CHECK(g_nreg == 2); /* nothing of the allocator's own pools or of `other` */
  MN_CHECK_ERR(mn_nccl_register_pool(COMM, p), MN_ERR_INVALID_ARGUMENT, "already");
  MN_CHECK(g_nreg == 2);

  /* after: new segments (a cached block reused adds none) */
  void *p2 = pool_alloc(a, p, 50 * MB), *p3 = pool_alloc(a, p, 4 * KB); /* p3 shares p0's segment */
  void *o1 = pool_alloc(a, other, 40 * MB), *d1 = alloc_on(a, 40 * MB, NULL);
  MN_CHECK(check_pool_registered(COMM, p) == 3);
  MN_CHECK(g_nreg == 3);

  /* freed and cached: still registered; emptied: deregistered once */
  MN_CHECK_OK(mn_allocator_free(a, p2));
  MN_CHECK(check_pool_registered(COMM, p) == 3);
  MN_CHECK_OK(mn_mempool_empty_cache(p));
  MN_CHECK(check_pool_registered(COMM, p) == 2);
  MN_CHECK(live_total() == 2 && g_reg[2].deregistered == 1);
  /* the allocator's and the other pool's segments come and go unseen */
  MN_CHECK_OK(mn_allocator_free(a, d1));
  MN_CHECK_OK(mn_allocator_free(a, o1));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_mempool_empty_cache(other));
  MN_CHECK(g_nreg == 3 && live_total() == 2);

  /* a second communicator registers the same pool on its own */
  MN_CHECK_OK(mn_nccl_register_pool(COMM2, p));
  MN_CHECK(check_pool_registered(COMM2, p) == 2 && live_total() == 4);
  MN_CHECK_OK(mn_nccl_deregister_pool(COMM2, p));
  MN_CHECK(live_total() == 2 && mn_nccl_registered_count(COMM2, p) == 0);

  /* the pool destroyed: its segments are deregistered as they go */
  MN_CHECK_OK(mn_allocator_free(a, p0));
  MN_CHECK_OK(mn_allocator_free(a, p1));
  MN_CHECK_OK(mn_allocator_free(a, p3));
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK(live_total() == 0 && all_deregistered_once());
  MN_CHECK(mn_nccl_registered_count(COMM, p) == 0);
  MN_CHECK_OK(mn_nccl_deregister_pool(COMM, p)); /* stops following; nothing left to deregister */
  MN_CHECK_ERR(mn_nccl_deregister_pool(COMM, p), MN_ERR_INVALID_ARGUMENT, "not registered");
  MN_CHECK(all_deregistered_once());
  MN_CHECK_OK(mn_allocator_free(a, d0));
  MN_CHECK_OK(mn_allocator_free(a, o0));
  MN_CHECK_OK(mn_mempool_destroy(other));
  done(a);
}

/* Deregistering a pool with live segments deregisters them all at once;
 * frees afterwards deregister nothing twice, and new segments are not registered. */
MN_TEST(deregister_with_live_segments) {
  fake_reset();
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  if (!p) return;
  void *p0 = pool_alloc(a, p, 30 * MB);
  MN_CHECK_OK(mn_nccl_register_pool(COMM, p));
  void *p1 = pool_alloc(a, p, 4 * KB);
  MN_CHECK(check_pool_registered(COMM, p) == 2);
  MN_CHECK_OK(mn_nccl_deregister_pool(COMM, p));
  MN_CHECK(live_total() == 0 && all_deregistered_once() && g_nreg == 2);
  void *p2 = pool_alloc(a, p, 50 * MB);
  MN_CHECK(g_nreg == 2);
  MN_CHECK_OK(mn_allocator_free(a, p0));
  MN_CHECK_OK(mn_allocator_free(a, p1));
  MN_CHECK_OK(mn_allocator_free(a, p2));
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK(all_deregistered_once() && g_nreg == 2);
  done(a);
}

/* Expandable segments: every mapped stretch registered once, deregistered
 * once as it is unmapped (or at the end). */
MN_TEST(expandable_pool_maps_follow) {
  fake_reset();
  mn_allocator_t *a = mk("expandable_segments:True");
  mn_mempool_t *p = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  if (!p) return;
  void *p0 = pool_alloc(a, p, 30 * MB);
  MN_CHECK_OK(mn_nccl_register_pool(COMM, p));
  void *p1 = pool_alloc(a, p, 60 * MB);
  MN_CHECK(live_total() >= 2);
  for (size_t i = 0; i < g_nreg; i++) MN_CHECK(g_reg[i].registered == 1 && g_reg[i].deregistered == 0);
  MN_CHECK_OK(mn_allocator_free(a, p1));
  MN_CHECK_OK(mn_mempool_empty_cache(p));
  MN_CHECK(live_total() >= 1);
  MN_CHECK_OK(mn_allocator_free(a, p0));
  MN_CHECK_OK(mn_mempool_destroy(p));
  MN_CHECK_OK(mn_nccl_deregister_pool(COMM, p));
  MN_CHECK(live_total() == 0 && all_deregistered_once());
  done(a);
}

/* A registration that fails part-way undoes the others and follows nothing;
 * bad arguments change nothing. */
MN_TEST(failures_roll_back) {
  fake_reset();
  mn_allocator_t *a = mk(NULL);
  mn_mempool_t *p = NULL;
  MN_CHECK_OK(mn_mempool_create(a, NULL, &p));
  if (!p) return;
  void *p0 = pool_alloc(a, p, 4 * KB), *p1 = pool_alloc(a, p, 30 * MB), *p2 = pool_alloc(a, p, 50 * MB);
  g_fail_register_at = 3;
  MN_CHECK_ERR(mn_nccl_register_pool(COMM, p), MN_ERR_DEVICE, "planted");
  MN_CHECK(g_nreg == 2 && live_total() == 0 && all_deregistered_once());
  MN_CHECK(mn_nccl_registered_count(COMM, p) == 0);
  void *p3 = pool_alloc(a, p, 40 * MB); /* no callback left behind */
  MN_CHECK(g_nreg == 2);
  MN_CHECK_ERR(mn_nccl_deregister_pool(COMM, p), MN_ERR_INVALID_ARGUMENT, "not registered");
  MN_CHECK_ERR(mn_nccl_register_pool(NULL, p), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_nccl_register_pool(COMM, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_nccl_deregister_pool(COMM, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK(g_nreg == 2);
  /* a later registration works */
  MN_CHECK_OK(mn_nccl_register_pool(COMM, p));
  MN_CHECK(check_pool_registered(COMM, p) == 4);
  /* a failure in the callback is counted and reported at the deregistration */
  g_fail_register_at = 1;
  void *p4 = pool_alloc(a, p, 60 * MB);
  MN_CHECK(mn_nccl_registered_count(COMM, p) == 4);
  MN_CHECK_ERR(mn_nccl_deregister_pool(COMM, p), MN_ERR_DEVICE, "1 segment");
  MN_CHECK(live_total() == 0 && all_deregistered_once());
  void *all[] = {p0, p1, p2, p3, p4};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) MN_CHECK_OK(mn_allocator_free(a, all[i]));
  MN_CHECK_OK(mn_mempool_destroy(p));
  done(a);
}

/* The source is for CUDA devices: on SIM it refuses, changing nothing. */
MN_TEST(source_on_sim_refuses) {
  mn_mempool_source_t src;
  memset(&src, 0, sizeof src);
  MN_CHECK_OK(mn_nccl_source(&src));
  MN_CHECK(src.alloc != NULL && src.free != NULL);
  void *out = NULL;
  MN_CHECK_ERR(src.alloc(src.user, SIM0, MB, &out), MN_ERR_NOT_SUPPORTED, "CUDA devices");
  MN_CHECK(out == NULL);
  MN_CHECK_ERR(mn_nccl_source(NULL), MN_ERR_INVALID_ARGUMENT, "out");
}

int main(void) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = GB;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  mn__nccl_set_ops(&FAKE);
  MN_RUN(existing_and_new_segments_registered_once);
  MN_RUN(deregister_with_live_segments);
  MN_RUN(expandable_pool_maps_follow);
  MN_RUN(failures_roll_back);
  MN_RUN(source_on_sim_refuses);
  mn__nccl_set_ops(NULL);
  return mn_test_finish();
}
