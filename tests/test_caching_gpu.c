/* tests/test_caching_gpu.c: the caching allocator on cuda:0: reuse, stats, OOM recovery,
 * expandable segments (when the GPU has VMM) and stream safety with real kernels (label gpu). */
#include <stdint.h>
#include <stdlib.h>

#include "mn_test.h"

#define MB ((size_t)1 << 20)

static mn_device_t DEV;

static mn_allocator_t *mk(const char *conf) {
  mn_caching_config_t c = mn_caching_config_default();
  if (conf) MN_CHECK_OK(mn_caching_config_parse(conf, &c));
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(DEV, &c, &a));
  return a;
}

static mn_alloc_stats_t stats_of(mn_allocator_t *a) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  return s;
}

static void *alloc_on(mn_allocator_t *a, size_t n, mn_stream_t *s) {
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, n, s, &p));
  MN_CHECK(p != NULL);
  return p;
}

static void done(mn_allocator_t *a) {
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == 0 && s.allocation[MN_POOL_ALL].current == 0);
  MN_CHECK(s.active[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
}

/* Every 32-bit word of n bytes at dptr equals want (copied back on s). */
static bool all_equal(const void *dptr, size_t n, uint32_t want, mn_stream_t *s) {
  uint32_t *host = malloc(n);
  if (!host) return false;
  bool ok = mn_memcpy_async(mn_device_cpu(), host, DEV, dptr, n, s) == MN_OK && mn_stream_synchronize(s) == MN_OK;
  for (size_t i = 0; ok && i < n / 4; i++) ok = host[i] == want;
  free(host);
  return ok;
}

MN_TEST(reuse_stats_and_oom_recovery) {
  mn_allocator_t *a = mk(NULL);
  void *p = alloc_on(a, 1000, NULL);
  MN_CHECK_OK(mn_allocator_free(a, p));
  void *q = alloc_on(a, 1000, NULL);
  MN_CHECK(q == p); /* cached, same stream */
  void *big = alloc_on(a, 100 * MB, NULL);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(s.allocation[MN_POOL_ALL].current == 2 && s.segment[MN_POOL_ALL].current == 2);
  MN_CHECK(s.reserved_bytes[MN_POOL_ALL].current == (int64_t)(2 * MB + 100 * MB));
  MN_CHECK_OK(mn_allocator_free(a, big));
  /* More than the GPU has: a clean OOM with PyTorch's kind of message, state intact. */
  size_t free_b = 0, total = 0;
  MN_CHECK_OK(mn_device_mem_info(DEV, &free_b, &total));
  void *huge = NULL;
  if (!mn_test_under_sanitizer()) { /* failing cudaMallocs on purpose */
    MN_CHECK_ERR(mn_allocator_alloc(a, total - 64 * MB, NULL, &huge), MN_ERR_OUT_OF_MEMORY, "Tried to allocate");
    MN_CHECK(strstr(mn_last_error(), "total capacity of") != NULL && huge == NULL);
    MN_CHECK(stats_of(a).num_ooms == 1);
  }
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  /* Half the free memory: fits once the cache is released. */
  void *half = alloc_on(a, free_b / 2, NULL);
  MN_CHECK_OK(mn_allocator_free(a, half));
  MN_CHECK_OK(mn_allocator_free(a, q));
  done(a);
  mn_allocator_t *def = NULL;
  MN_CHECK_OK(mn_allocator_get_default(DEV, &def));
  MN_CHECK(!strcmp(mn_allocator_name(def), "caching"));
}

MN_TEST(expandable_segments_on_gpu) {
  mn_device_props_t props;
  MN_CHECK_OK(mn_device_get_properties(DEV, &props));
  if (!props.supports_vmm) {
    printf("  (no VMM on this GPU: expandable_segments falls back to plain segments)\n");
    return;
  }
  mn_allocator_t *a = mk("expandable_segments:True");
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_default(DEV, &s));
  char *x = alloc_on(a, 20 * MB, s), *y = alloc_on(a, 40 * MB, s), *z = alloc_on(a, 20 * MB, s);
  MN_CHECK(y == x + 20 * MB && z == x + 60 * MB);
  uint32_t pat = 0xC0FFEE01u;
  MN_CHECK_OK(mn_kernel_fill(s, y, 40 * MB / 4, 4, &pat)); /* the mapped pages are real memory */
  MN_CHECK(all_equal(y, 40 * MB, pat, s));
  MN_CHECK_OK(mn_allocator_free(a, y));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(stats_of(a).reserved_bytes[MN_POOL_ALL].current == (int64_t)(40 * MB));
  char *w = alloc_on(a, 30 * MB, s);
  MN_CHECK(w == y);
  pat = 0x0BADF00Du;
  MN_CHECK_OK(mn_kernel_fill(s, w, 30 * MB / 4, 4, &pat));
  MN_CHECK(all_equal(w, 30 * MB, pat, s));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_allocator_free(a, x));
  MN_CHECK_OK(mn_allocator_free(a, z));
  MN_CHECK_OK(mn_allocator_free(a, w));
  done(a);
}

/* Stream A keeps writing a buffer that was allocated on B, recorded as used on A and
 * freed; B then allocates and writes. B's data must survive A's queued work. */
MN_TEST(cross_stream_reuse_is_safe) {
  const char *confs[] = {NULL, "expandable_segments:True"};
  for (int c = 0; c < 2; c++) {
    mn_allocator_t *a = mk(confs[c]);
    mn_stream_t *sa = NULL, *sb = NULL;
    MN_CHECK_OK(mn_stream_create(DEV, &sa));
    MN_CHECK_OK(mn_stream_create(DEV, &sb));
    const size_t n = 64 * MB;
    const uint32_t pat_a = 0xAAAAAAAAu, pat_b = 0x55555555u;
    void *p = alloc_on(a, n, sb);
    for (int i = 0; i < 200; i++) MN_CHECK_OK(mn_kernel_fill(sa, p, n / 4, 4, &pat_a));
    MN_CHECK_OK(mn_allocator_record_stream(a, p, sa));
    MN_CHECK_OK(mn_allocator_free(a, p));
    void *q = alloc_on(a, n, sb);
    bool a_done = true;
    MN_CHECK_OK(mn_stream_query(sa, &a_done));
    if (!a_done) MN_CHECK(q != p); /* A still busy after the alloc: it was busy during it */
    printf("  %s: A %s when B allocated; %s block\n", confs[c] ? confs[c] : "default", a_done ? "done" : "busy",
           q == p ? "the same" : "another");
    MN_CHECK_OK(mn_kernel_fill(sb, q, n / 4, 4, &pat_b));
    MN_CHECK_OK(mn_stream_synchronize(sa));
    MN_CHECK_OK(mn_stream_synchronize(sb));
    MN_CHECK(all_equal(q, n, pat_b, sb));
    MN_CHECK_OK(mn_allocator_free(a, q));
    void *r = alloc_on(a, n, sb); /* A has finished: p's block is back */
    MN_CHECK(r == p || r == q);
    MN_CHECK_OK(mn_allocator_free(a, r));
    done(a);
    MN_CHECK_OK(mn_stream_destroy(sa));
    MN_CHECK_OK(mn_stream_destroy(sb));
  }
}

int main(void) {
  mn_test_require_cuda();
  DEV = mn_device_cuda(0);
  MN_RUN(reuse_stats_and_oom_recovery);
  MN_RUN(expandable_segments_on_gpu);
  MN_RUN(cross_stream_reuse_is_safe);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
