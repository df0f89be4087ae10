/* tests/test_copy_gpu.c: the copy engine and pinned pool on a real GPU:
 * round trips of random data for every path and size class, checked byte for
 * byte; strided host sides; concurrent copies on several streams; peer copies
 * when two GPUs exist. Skipped (77) without a CUDA device. */
#include <pthread.h>
#include <stdint.h>

#include "mn_test.h"

static mn_device_t GPU, CPU;

typedef enum { PAGEABLE_BLOCKING, PAGEABLE_STAGED, POOL_PINNED, REGISTERED, NMODES } mode;
static const char *MODE_NAMES[NMODES] = {"pageable blocking", "pageable staged", "pool pinned", "registered"};

/* host -> gpu -> gpu -> host, every byte checked. */
static void roundtrip(size_t n, mode m, mn_stream_t *s) {
  mn_allocator_t *pool = NULL;
  MN_CHECK_OK(mn_pinned_allocator_get_default(GPU, &pool));
  unsigned char *src = NULL, *back = NULL;
  void *d1 = NULL, *d2 = NULL;
  if (m == POOL_PINNED) {
    MN_CHECK_OK(mn_allocator_alloc(pool, n, NULL, (void **)&src));
    MN_CHECK_OK(mn_allocator_alloc(pool, n, NULL, (void **)&back));
  } else {
    src = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    back = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  }
  if (!src || !back) return;
  if (m == REGISTERED) {
    MN_CHECK_OK(mn_device_host_register(GPU, src, n));
    MN_CHECK_OK(mn_device_host_register(GPU, back, n));
  }
  MN_CHECK_OK(mn_device_raw_alloc(GPU, n, &d1));
  MN_CHECK_OK(mn_device_raw_alloc(GPU, n, &d2));
  mn_test_fill_random(src, n);
  memset(back, 0, n);
  bool pinned = false;
  MN_CHECK_OK(mn_device_host_is_pinned(GPU, src, &pinned));
  MN_CHECK(pinned == (m == POOL_PINNED || m == REGISTERED));
  unsigned f = m == PAGEABLE_BLOCKING ? 0 : MN_COPY_NON_BLOCKING;
  unsigned fs = f | (pinned ? MN_COPY_SRC_PINNED : 0), fd = f | (pinned ? MN_COPY_DST_PINNED : 0);
  MN_CHECK_OK(mn_copy_bytes(GPU, d1, CPU, src, n, s, fs));
  MN_CHECK_OK(mn_copy_bytes(GPU, d2, GPU, d1, n, s, f));
  MN_CHECK_OK(mn_copy_bytes(CPU, back, GPU, d2, n, s, fd));
  MN_CHECK_OK(mn_stream_synchronize(s));
  bool same = memcmp(src, back, n) == 0;
  MN_CHECK(same);
  if (!same) fprintf(stderr, "  n=%zu mode=%s: data differs\n", n, MODE_NAMES[m]);
  MN_CHECK_OK(mn_device_raw_free(GPU, d1));
  MN_CHECK_OK(mn_device_raw_free(GPU, d2));
  if (m == REGISTERED) {
    MN_CHECK_OK(mn_device_host_unregister(GPU, src));
    MN_CHECK_OK(mn_device_host_unregister(GPU, back));
  }
  if (m == POOL_PINNED) {
    MN_CHECK_OK(mn_allocator_free(pool, src));
    MN_CHECK_OK(mn_allocator_free(pool, back));
  } else {
    free(src);
    free(back);
  }
}

MN_TEST(roundtrips_every_path_and_size) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(GPU, &s));
  const size_t sizes[] = {1, 4095, 4096, 4097, 65536 + 3, (1u << 20) + 7, 8u << 20, (8u << 20) + 1, (33u << 20) + 5};
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0) mn_test_set_copy_staging(8u << 20, 4, 1);
    else mn_test_set_copy_staging(64u << 10, 2, 2); /* many chunks, the host waits for staging blocks */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      for (int m = 0; m < NMODES; m++) roundtrip(sizes[i], (mode)m, s);
  }
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_test_set_copy_staging(8u << 20, 4, 1);
}

/* The source of a staged non_blocking H2D may be overwritten once the call returns. */
MN_TEST(staged_source_reusable_at_return) {
  size_t n = (20u << 20) + 11;
  unsigned char *src = malloc(n), *want = malloc(n), *back = malloc(n);
  void *d = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(GPU, &s));
  MN_CHECK_OK(mn_device_raw_alloc(GPU, n, &d));
  mn_test_fill_random(src, n);
  memcpy(want, src, n);
  MN_CHECK_OK(mn_copy_bytes(GPU, d, CPU, src, n, s, MN_COPY_NON_BLOCKING));
  memset(src, 0, n);
  MN_CHECK_OK(mn_copy_bytes(CPU, back, GPU, d, n, s, MN_COPY_NON_BLOCKING));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(memcmp(back, want, n) == 0);
  MN_CHECK_OK(mn_device_raw_free(GPU, d));
  MN_CHECK_OK(mn_stream_destroy(s));
  free(src);
  free(want);
  free(back);
}

/* Strided CPU views to and from contiguous GPU views (packed through staging). */
MN_TEST(strided_host_sides) {
  mn_test_set_copy_staging(1000, 3, 1);
  const int64_t sizes[3] = {7, 33, 10}, tstrides[3] = {1, 70, 7};
  mn_view_t *g = NULL, *h = NULL, *back = NULL;
  mn_storage_t *st = NULL;
  MN_CHECK_OK(mn_view_empty(GPU, MN_DTYPE_FLOAT64, 3, sizes, &g));
  MN_CHECK_OK(mn_storage_create(CPU, 7 * 33 * 10 * 8, NULL, NULL, &st));
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_FLOAT64, 3, sizes, tstrides, 0, &h));
  mn_storage_release(st);
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT64, 3, sizes, &back));
  if (!g || !h || !back) return;
  mn_test_fill_random(mn_storage_data(mn_view_storage(h)), 7 * 33 * 10 * 8);
  for (int nb = 0; nb < 2; nb++) {
    MN_CHECK_OK(mn_copy_view(g, h, NULL, nb));
    MN_CHECK_OK(mn_copy_view(back, g, NULL, nb));
    MN_CHECK_OK(mn_device_synchronize(GPU));
    const double *b = mn_view_data(back), *src = mn_view_data(h);
    int bad = 0;
    for (int i = 0; i < 7; i++)
      for (int j = 0; j < 33; j++)
        for (int k = 0; k < 10; k++) bad += memcmp(&b[(i * 33 + j) * 10 + k], &src[i + j * 70 + k * 7], 8) != 0;
    MN_CHECK(bad == 0);
  }
  /* A non-contiguous GPU view needs the strided CUDA kernels. */
  mn_view_t *gt = NULL;
  MN_CHECK_OK(mn_view_create(mn_view_storage(g), MN_DTYPE_FLOAT64, 3, sizes, tstrides, 0, &gt));
  MN_CHECK_ERR(mn_copy_view(gt, h, NULL, true), MN_ERR_NOT_SUPPORTED, "strided CUDA kernels");
  mn_view_destroy(gt);
  mn_view_destroy(g);
  mn_view_destroy(h);
  mn_view_destroy(back);
  mn_test_set_copy_staging(8u << 20, 4, 1);
}

typedef struct worker {
  int id, bad;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  mn_stream_t *s = NULL;
  size_t n = (3u << 20) + (size_t)w->id * 4099;
  unsigned char *src = malloc(n), *back = malloc(n);
  void *d = NULL;
  if (!src || !back || mn_stream_create(GPU, &s) != MN_OK || mn_device_raw_alloc(GPU, n, &d) != MN_OK) {
    w->bad++;
    free(src);
    free(back);
    return NULL;
  }
  for (int round = 0; round < 10; round++) {
    memset(src, w->id * 31 + round, n);
    if (mn_copy_bytes(GPU, d, CPU, src, n, s, MN_COPY_NON_BLOCKING) != MN_OK) w->bad++;
    if (mn_copy_bytes(CPU, back, GPU, d, n, s, MN_COPY_NON_BLOCKING) != MN_OK) w->bad++;
    if (mn_stream_synchronize(s) != MN_OK || memcmp(src, back, n) != 0) w->bad++;
  }
  if (mn_device_raw_free(GPU, d) != MN_OK || mn_stream_destroy(s) != MN_OK) w->bad++;
  free(src);
  free(back);
  return NULL;
}

MN_TEST(concurrent_copies_on_several_streams) {
  mn_test_set_copy_staging(1u << 20, 2, 1);
  enum { T = 4 };
  pthread_t th[T];
  worker ws[T];
  for (int t = 0; t < T; t++) {
    ws[t] = (worker){.id = t};
    pthread_create(&th[t], NULL, worker_main, &ws[t]);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    MN_CHECK(ws[t].bad == 0);
  }
  mn_test_set_copy_staging(8u << 20, 4, 1);
}

MN_TEST(pinned_pool_on_cuda) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(GPU, NULL, &a));
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 100000, NULL, &p));
  MN_CHECK(mn_is_pinned(p));
  mn_stream_t *s = NULL;
  void *d = NULL;
  MN_CHECK_OK(mn_stream_create(GPU, &s));
  MN_CHECK_OK(mn_device_raw_alloc(GPU, 100000, &d));
  MN_CHECK_OK(mn_copy_bytes(GPU, d, CPU, p, 100000, s, MN_COPY_NON_BLOCKING | MN_COPY_SRC_PINNED));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_allocator_alloc(a, 100000, NULL, &q)); /* the copy finished: reused */
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  char host[16];
  MN_CHECK_ERR(mn_copy_bytes(GPU, d, CPU, host, 16, s, MN_COPY_SRC_PINNED), MN_ERR_INVALID_ARGUMENT, "declared pinned");
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_device_raw_free(GPU, d));
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_allocator_destroy(a);
}

MN_TEST(peer_copies_when_two_gpus) {
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CUDA, &n));
  if (n < 2) {
    printf("  (one GPU: peer copies not tested)\n");
    return;
  }
  mn_device_t g1 = mn_device_cuda(1);
  size_t bytes = (17u << 20) + 3;
  unsigned char *src = malloc(bytes), *back = malloc(bytes);
  void *a = NULL, *b = NULL;
  mn_test_fill_random(src, bytes);
  MN_CHECK_OK(mn_device_raw_alloc(GPU, bytes, &a));
  MN_CHECK_OK(mn_device_raw_alloc(g1, bytes, &b));
  for (int staged = 0; staged < 2; staged++) {
    memset(back, 0, bytes);
    MN_CHECK_OK(mn_copy_bytes(GPU, a, CPU, src, bytes, NULL, 0));
    MN_CHECK_OK(mn_copy_bytes(g1, b, GPU, a, bytes, NULL, staged ? MN_COPY_NO_PEER : 0));
    MN_CHECK_OK(mn_copy_bytes(CPU, back, g1, b, bytes, NULL, 0));
    MN_CHECK(memcmp(src, back, bytes) == 0);
  }
  MN_CHECK_OK(mn_device_raw_free(GPU, a));
  MN_CHECK_OK(mn_device_raw_free(g1, b));
  free(src);
  free(back);
}

MN_TEST(nothing_left_behind) {
  MN_CHECK_OK(mn_device_synchronize(GPU));
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_allocator_t *pool = NULL;
  MN_CHECK_OK(mn_pinned_allocator_get_default(GPU, &pool));
  mn_alloc_stats_t st;
  MN_CHECK_OK(mn_allocator_get_stats(pool, &st));
  MN_CHECK(st.allocation[MN_POOL_ALL].current == 0 && st.reserved_bytes[MN_POOL_ALL].current == 0);
}

int main(void) {
  mn_test_require_cuda();
  GPU = mn_device_cuda(0);
  CPU = mn_device_cpu();
  MN_RUN(roundtrips_every_path_and_size);
  MN_RUN(staged_source_reusable_at_return);
  MN_RUN(strided_host_sides);
  MN_RUN(concurrent_copies_on_several_streams);
  MN_RUN(pinned_pool_on_cuda);
  MN_RUN(peer_copies_when_two_gpus);
  MN_RUN(nothing_left_behind);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
