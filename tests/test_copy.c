/* tests/test_copy.c: the copy engine on CPU and SIM: every path (direct,
 * staged, peer, host-staged between devices), completion points, chunk
 * boundaries, strided views of every layout, faults and bad input. */
#include <pthread.h>
#include <stdint.h>

#include "mn_test.h"

static mn_device_t SIM0, SIM1, CPU;
static const size_t CHUNK = 4096;

static mn_allocator_t *staging_pool(mn_device_t dev) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_pinned_allocator_get_default(dev, &a));
  return a;
}

static mn_alloc_stats_t pool_stats(mn_device_t dev) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_allocator_get_stats(staging_pool(dev), &s));
  return s;
}

#define LIVE(s) ((s).allocation[MN_POOL_ALL].current)
#define ACTIVE(s) ((s).active[MN_POOL_ALL].current)

static size_t pending(mn_stream_t *s) {
  size_t n = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &n));
  return n;
}

/* ---- bytes -------------------------------------------------------------------- */

typedef enum { PAGEABLE_BLOCKING, PAGEABLE_NON_BLOCKING, PINNED_NON_BLOCKING } mode;

/* Host -> SIM -> host round trip of n random bytes in one mode. */
static void roundtrip_bytes(size_t n, mode m, mn_stream_t *s) {
  mn_allocator_t *pool = staging_pool(SIM0);
  unsigned char *src = NULL, *back = NULL, *dev = NULL;
  if (m == PINNED_NON_BLOCKING) {
    MN_CHECK_OK(mn_allocator_alloc(pool, n + 1, NULL, (void **)&src));
    MN_CHECK_OK(mn_allocator_alloc(pool, n + 1, NULL, (void **)&back));
  } else {
    src = malloc(n + 1);
    back = malloc(n + 1);
  }
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n + 1, (void **)&dev));
  mn_test_fill_random(src, n + 1);
  memset(back, 0xee, n + 1);
  unsigned flags = m == PAGEABLE_BLOCKING ? 0 : MN_COPY_NON_BLOCKING;
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, CPU, src, n, s, flags));
  MN_CHECK_OK(mn_copy_bytes(CPU, back, SIM0, dev, n, s, flags));
  if (m != PAGEABLE_BLOCKING) MN_CHECK_OK(s ? mn_stream_synchronize(s) : mn_device_synchronize(SIM0));
  MN_CHECK(memcmp(back, src, n) == 0);
  MN_CHECK(back[n] == 0xee); /* not one byte more */
  if (memcmp(back, src, n) != 0) fprintf(stderr, "  n=%zu mode=%d differs\n", n, (int)m);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  if (m == PINNED_NON_BLOCKING) {
    MN_CHECK_OK(mn_allocator_free(pool, src));
    MN_CHECK_OK(mn_allocator_free(pool, back));
  } else {
    free(src);
    free(back);
  }
}

MN_TEST(bytes_every_mode_and_size) {
  mn_test_set_copy_staging(CHUNK, 2, 1);
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  const size_t sizes[] = {1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 5, 5 * CHUNK - 3, 100000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (int m = 0; m < 3; m++) roundtrip_bytes(sizes[i], (mode)m, s);
  /* The default stream, too. */
  roundtrip_bytes(3 * CHUNK + 1, PAGEABLE_NON_BLOCKING, NULL);
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0 && ACTIVE(st) == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_test_set_copy_staging(CHUNK, 4, 1);
}

MN_TEST(zero_bytes) {
  char a = 1, b = 2;
  MN_CHECK_OK(mn_copy_bytes(SIM0, NULL, CPU, NULL, 0, NULL, MN_COPY_NON_BLOCKING));
  MN_CHECK_OK(mn_copy_bytes(CPU, &a, CPU, &b, 0, NULL, 0));
  MN_CHECK(a == 1);
  MN_CHECK_ERR(mn_copy_bytes(SIM0, NULL, mn_device_sim(5), NULL, 0, NULL, 0), MN_ERR_NO_DEVICE, "sim:5");
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0);
}

/* Pageable host -> device, non_blocking: the source is read by the time the
 * call returns; the destination is written when the stream gets there. */
MN_TEST(staged_h2d_completion_point) {
  mn_test_set_copy_staging(CHUNK, 4, 1);
  mn_stream_t *s = NULL;
  unsigned char *dev = NULL;
  size_t n = 3 * CHUNK + 100; /* 4 chunks, 4 staging blocks: the host never waits */
  unsigned char *src = malloc(n), *want = malloc(n);
  mn_test_fill_random(src, n);
  memcpy(want, src, n);
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&dev));
  memset(dev, 0, n);
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, CPU, src, n, s, MN_COPY_NON_BLOCKING));
  memset(src, 0x55, n); /* reuse the source at once */
  free(src);
  MN_CHECK(dev[0] == 0 && dev[n - 1] == 0 && pending(s) > 0); /* queued, not run */
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0 && ACTIVE(st) == 4); /* handed back, pending the stream */
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(memcmp(dev, want, n) == 0);
  st = pool_stats(SIM0);
  MN_CHECK(ACTIVE(st) == 0);
  /* More chunks than staging blocks: the host waits for the device to free
   * one, so the stream has run part of the copy when the call returns. */
  mn_test_set_copy_staging(CHUNK, 2, 1);
  src = malloc(n);
  mn_test_fill_random(src, n);
  memcpy(want, src, n);
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, CPU, src, n, s, MN_COPY_NON_BLOCKING));
  free(src);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(memcmp(dev, want, n) == 0);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_stream_destroy(s));
  free(want);
  mn_test_set_copy_staging(CHUNK, 4, 1);
}

/* Device -> pageable host, non_blocking: nothing is written before the stream
 * runs; synchronizing the stream covers the helper stream's host copies. */
MN_TEST(staged_d2h_completion_point) {
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  unsigned char *dev = NULL;
  size_t n = 5 * CHUNK + 17;
  unsigned char *dst = malloc(n), *want = malloc(n);
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&dev));
  mn_test_fill_random(dev, n);
  memcpy(want, dev, n);
  memset(dst, 0, n);
  MN_CHECK_OK(mn_copy_bytes(CPU, dst, SIM0, dev, n, s, MN_COPY_NON_BLOCKING));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK(dst[0] == 0 && dst[n - 1] == 0);
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0 && ACTIVE(st) == 4);
  bool done = true;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(!done);
  MN_CHECK_OK(mn_event_synchronize(e)); /* an event after the call marks the copy's end */
  MN_CHECK(memcmp(dst, want, n) == 0);
  st = pool_stats(SIM0);
  MN_CHECK(ACTIVE(st) == 0);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  free(dst);
  free(want);
}

/* A pinned pool block given to a non_blocking copy and freed at once is not
 * reused before the copy ran (the engine records the stream on it). */
MN_TEST(pinned_copy_protects_its_block) {
  mn_allocator_t *pool = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &pool));
  mn_stream_t *s = NULL;
  unsigned char *dev = NULL, *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 8192, (void **)&dev));
  MN_CHECK_OK(mn_allocator_alloc(pool, 8192, NULL, (void **)&p));
  memset(p, 0x42, 8192);
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, CPU, p + 10, 8000, s, MN_COPY_NON_BLOCKING | MN_COPY_SRC_PINNED));
  MN_CHECK(pending(s) == 1); /* a true async copy: one queued operation, no staging */
  MN_CHECK_OK(mn_allocator_free(pool, p));
  MN_CHECK_OK(mn_allocator_alloc(pool, 8192, NULL, (void **)&q));
  MN_CHECK(q != p);
  memset(q, 0, 8192);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(dev[0] == 0x42 && dev[7999] == 0x42);
  MN_CHECK_OK(mn_allocator_free(pool, q));
  /* Registered (not pooled) memory is pinned too: the caller keeps it alive. */
  unsigned char *reg = aligned_alloc(4096, 8192);
  memset(reg, 7, 8192);
  MN_CHECK_OK(mn_device_host_register(SIM0, reg, 8192));
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, CPU, reg, 8192, s, MN_COPY_NON_BLOCKING | MN_COPY_SRC_PINNED));
  MN_CHECK_OK(mn_copy_bytes(CPU, reg, SIM0, dev, 4, s, MN_COPY_NON_BLOCKING | MN_COPY_DST_PINNED));
  MN_CHECK(pending(s) == 2);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(dev[8191] == 7);
  MN_CHECK_OK(mn_device_host_unregister(SIM0, reg));
  free(reg);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_allocator_destroy(pool);
}

MN_TEST(device_to_device) {
  mn_test_set_copy_staging(CHUNK, 2, 1);
  size_t n = 4 * CHUNK + 3;
  unsigned char *a = NULL, *b = NULL, *c = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&a));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&b));
  MN_CHECK_OK(mn_device_raw_alloc(SIM1, n, (void **)&c));
  mn_test_fill_random(a, n);
  /* One device. */
  MN_CHECK_OK(mn_copy_bytes(SIM0, b, SIM0, a, n, NULL, 0));
  MN_CHECK(memcmp(a, b, n) == 0);
  /* Two devices with peer access: one queued peer copy. */
  bool can = false;
  MN_CHECK_OK(mn_device_can_access_peer(SIM1, SIM0, &can));
  MN_CHECK(can);
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_create(SIM1, &s1));
  MN_CHECK_OK(mn_copy_bytes(SIM1, c, SIM0, a, n, s1, MN_COPY_NON_BLOCKING));
  MN_CHECK(pending(s1) == 1);
  MN_CHECK_OK(mn_stream_synchronize(s1));
  MN_CHECK(memcmp(a, c, n) == 0);
  /* Staged through the host (no peer): every chunk, both directions, either stream. */
  memset(c, 0, n);
  MN_CHECK_OK(mn_copy_bytes(SIM1, c, SIM0, a, n, s1, MN_COPY_NON_BLOCKING | MN_COPY_NO_PEER));
  MN_CHECK_OK(mn_stream_synchronize(s1));
  MN_CHECK(memcmp(a, c, n) == 0);
  mn_test_fill_random(c, n);
  mn_stream_t *s0 = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s0));
  MN_CHECK_OK(mn_copy_bytes(SIM0, b, SIM1, c, n, s0, MN_COPY_NO_PEER)); /* blocking, stream on the source */
  MN_CHECK(memcmp(b, c, n) == 0);
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0);
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK_OK(mn_device_synchronize(SIM1));
  MN_CHECK_OK(mn_memcpy_peer_async(SIM0, b, SIM1, c, 0, NULL));
  MN_CHECK_ERR(mn_memcpy_peer_async(SIM0, b, CPU, c, 8, NULL), MN_ERR_INVALID_ARGUMENT, "peer copy");
  MN_CHECK_ERR(mn_memcpy_peer_async(SIM0, b, SIM1, (char *)c + n + (8u << 20), 8, NULL), MN_ERR_INVALID_ARGUMENT,
               "not mapped memory of sim:1");
  MN_CHECK_OK(mn_device_raw_free(SIM0, a));
  MN_CHECK_OK(mn_device_raw_free(SIM0, b));
  MN_CHECK_OK(mn_device_raw_free(SIM1, c));
  MN_CHECK_OK(mn_stream_destroy(s0));
  MN_CHECK_OK(mn_stream_destroy(s1));
  mn_test_set_copy_staging(CHUNK, 4, 1);
}

/* A fault in the k-th chunk's copy: a clear error naming the chunk, every
 * staging block back in the pool, nothing leaked. */
static void fault_in_chunk(int dir, uint64_t k) {
  size_t n = 5 * CHUNK - 9; /* 5 chunks */
  unsigned char *dev = NULL, *dev1 = NULL, *host = malloc(n);
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&dev));
  MN_CHECK_OK(mn_device_raw_alloc(SIM1, n, (void **)&dev1));
  mn_test_fill_random(host, n);
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_MEMCPY, k, 1));
  char needle[64];
  snprintf(needle, sizeof needle, "chunk %llu of 5", (unsigned long long)k);
  mn_status want = MN_ERR_DEVICE;
  if (dir == 0) MN_CHECK_ERR(mn_copy_bytes(SIM0, dev, CPU, host, n, s, MN_COPY_NON_BLOCKING), want, needle);
  if (dir == 1) MN_CHECK_ERR(mn_copy_bytes(CPU, host, SIM0, dev, n, s, MN_COPY_NON_BLOCKING), want, needle);
  if (dir == 2)
    MN_CHECK_ERR(mn_copy_bytes(SIM1, dev1, SIM0, dev, n, s, MN_COPY_NON_BLOCKING | MN_COPY_NO_PEER), want, needle);
  MN_CHECK(strstr(mn_last_error(), "injected fault") != NULL);
  mn_alloc_stats_t st = pool_stats(dir == 2 ? SIM1 : SIM0);
  MN_CHECK(LIVE(st) == 0); /* every staging block handed back */
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK_OK(mn_device_synchronize(SIM1));
  st = pool_stats(dir == 2 ? SIM1 : SIM0);
  MN_CHECK(ACTIVE(st) == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(staging_pool(SIM0)));
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_device_raw_free(SIM1, dev1));
  MN_CHECK_OK(mn_stream_destroy(s));
  free(host);
}

MN_TEST(faults_release_every_staging_block) {
  mn_test_set_copy_staging(CHUNK, 2, 1);
  for (int dir = 0; dir < 3; dir++)
    for (uint64_t k = 1; k <= 5; k++) fault_in_chunk(dir, k);
  /* An event record fails: also a clean error. */
  size_t n = 3 * CHUNK;
  unsigned char *dev = NULL, *host = calloc(1, n);
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&dev));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_RECORD, 2, 1));
  MN_CHECK_ERR(mn_copy_bytes(SIM0, dev, CPU, host, n, NULL, MN_COPY_NON_BLOCKING), MN_ERR_DEVICE, "chunk 2 of 3");
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0 && ACTIVE(st) == 0);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  free(host);
  mn_test_set_copy_staging(CHUNK, 4, 1);
}

MN_TEST(bad_input) {
  unsigned char *dev = NULL, host[64];
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 4096, (void **)&dev));
  MN_CHECK_ERR(mn_copy_bytes(SIM0, dev, CPU, host, 64, NULL, MN_COPY_NON_BLOCKING | MN_COPY_SRC_PINNED),
               MN_ERR_INVALID_ARGUMENT, "declared pinned");
  MN_CHECK_ERR(mn_copy_bytes(CPU, host, SIM0, dev, 64, NULL, MN_COPY_SRC_PINNED), MN_ERR_INVALID_ARGUMENT,
               "not host memory");
  MN_CHECK_ERR(mn_copy_bytes(CPU, host, CPU, host + 1, 8, NULL, MN_COPY_DST_PINNED), MN_ERR_INVALID_ARGUMENT,
               "declared pinned");
  MN_CHECK_ERR(mn_copy_bytes(mn_device_cuda(0), dev, CPU, host, 64, NULL, 0), MN_ERR_NO_DEVICE, "cuda:0");
  MN_CHECK_ERR(mn_copy_bytes(mn_device_sim(3), dev, CPU, host, 64, NULL, 0), MN_ERR_NO_DEVICE, "sim:3");
  MN_CHECK_ERR(mn_copy_bytes(SIM0, dev, CPU, host, 64, NULL, 1u << 9), MN_ERR_INVALID_ARGUMENT, "unknown flags");
  MN_CHECK_ERR(mn_copy_bytes(SIM0, NULL, CPU, host, 64, NULL, 0), MN_ERR_INVALID_ARGUMENT, "NULL");
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_default(SIM1, &s1));
  MN_CHECK_ERR(mn_copy_bytes(SIM0, dev, CPU, host, 64, s1, 0), MN_ERR_INVALID_ARGUMENT, "stream of sim:1");
  MN_CHECK_ERR(mn_copy_bytes(SIM0, dev + 8, SIM0, dev, 64, NULL, 0), MN_ERR_INVALID_ARGUMENT, "overlap");
  MN_CHECK_OK(mn_copy_bytes(SIM0, dev, SIM0, dev, 64, NULL, 0)); /* the same range: nothing to do */
  memcpy(host, "abcdefgh", 8);
  MN_CHECK_OK(mn_copy_bytes(CPU, host + 2, CPU, host, 6, NULL, 0)); /* memmove on the CPU */
  MN_CHECK(memcmp(host, "ababcdef", 8) == 0);
  mn_copy_config_t c = mn_copy_config_default();
  c.staging_buffers = 1;
  MN_CHECK_ERR(mn_copy_set_config(&c), MN_ERR_INVALID_ARGUMENT, "staging_buffers=1");
  c = mn_copy_config_default();
  c.chunk_bytes = 3;
  MN_CHECK_ERR(mn_copy_set_config(&c), MN_ERR_INVALID_ARGUMENT, "chunk_bytes=3");
  c = mn_copy_config_default();
  c.host_threads = 0;
  MN_CHECK_ERR(mn_copy_set_config(&c), MN_ERR_INVALID_ARGUMENT, "host_threads=0");
  MN_CHECK_OK(mn_copy_get_config(&c));
  MN_CHECK(c.chunk_bytes == CHUNK); /* unchanged by the refused calls */
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
}

/* A CPU -> CPU copy given a device stream waits for that stream's work. */
MN_TEST(cpu_copy_ordered_on_a_device_stream) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  char a[16] = "0123456789abcde", b[16] = {0};
  MN_CHECK_OK(mn_copy_bytes(CPU, b, CPU, a, 16, s, MN_COPY_NON_BLOCKING));
  MN_CHECK(b[0] == 0 && pending(s) == 1);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(strcmp(b, a) == 0);
  memset(b, 0, sizeof b);
  MN_CHECK_OK(mn_copy_bytes(CPU, b, CPU, a, 16, s, 0)); /* blocking: done on return */
  MN_CHECK(strcmp(b, a) == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* ---- views ------------------------------------------------------------------------ */

/* Address of the element at row-major position `linear` of v. */
static unsigned char *elem(const mn_view_t *v, int64_t linear) {
  int64_t off = 0;
  for (int d = mn_view_ndim(v) - 1; d >= 0; d--) {
    int64_t size = mn_view_size(v, d);
    off += (linear % size) * mn_view_stride(v, d);
    linear /= size;
  }
  return (unsigned char *)mn_view_data(v) + off * (int64_t)mn_dtype_itemsize(mn_view_dtype(v));
}

/* A view of `storage` with the given sizes and a permutation/step layout:
 * `perm` orders the dims from outermost to innermost in memory, `step`
 * spaces the elements of every dim. The storage is made big enough. */
static mn_view_t *make_view(mn_device_t dev, mn_dtype dt, int ndim, const int64_t *sizes, const int *perm, int64_t step,
                            int64_t offset) {
  int64_t strides[MN_MAX_DIMS], acc = step;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[perm[i]] = acc;
    acc *= sizes[perm[i]] > 0 ? sizes[perm[i]] : 1;
  }
  size_t item = mn_dtype_itemsize(dt), nbytes = (size_t)(acc + offset) * item + 1;
  mn_storage_t *s = NULL;
  mn_view_t *v = NULL;
  MN_CHECK_OK(mn_storage_create(dev, nbytes, NULL, NULL, &s));
  if (s) MN_CHECK_OK(mn_view_create(s, dt, ndim, sizes, strides, offset, &v));
  mn_storage_release(s);
  return v;
}

/* Fills src with random elements, copies, checks every element of dst. */
static void check_view_copy(mn_view_t *dst, mn_view_t *src, mn_stream_t *s, bool non_blocking) {
  size_t item = mn_dtype_itemsize(mn_view_dtype(src));
  int64_t n = mn_view_numel(src);
  unsigned char *want = malloc((size_t)n * item + 1);
  for (int64_t i = 0; i < n; i++) {
    mn_test_fill_random(want + i * (int64_t)item, item);
    memcpy(elem(src, i), want + i * (int64_t)item, item);
  }
  MN_CHECK_OK(mn_copy_view(dst, src, s, non_blocking));
  if (s) MN_CHECK_OK(mn_stream_synchronize(s));
  else MN_CHECK_OK(mn_device_synchronize(mn_device_equal(mn_view_device(dst), CPU) ? mn_view_device(src)
                                                                                     : mn_view_device(dst)));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += memcmp(elem(dst, i), want + i * (int64_t)item, item) != 0;
  MN_CHECK(bad == 0);
  if (bad) fprintf(stderr, "  %lld of %lld elements wrong\n", (long long)bad, (long long)n);
  free(want);
}

typedef struct layout {
  int ndim;
  int64_t sizes[4];
  int perm[4];
  int64_t step, offset;
} layout;

static const layout LAYOUTS[] = {
    {2, {37, 53}, {0, 1}, 1, 0},        /* contiguous */
    {2, {37, 53}, {1, 0}, 1, 0},        /* transposed */
    {2, {37, 53}, {0, 1}, 3, 5},        /* every third element, offset */
    {3, {5, 7, 9}, {2, 0, 1}, 1, 0},    /* permuted */
    {3, {5, 1, 9}, {1, 2, 0}, 2, 1},    /* a size-1 dim, stepped */
    {4, {2, 3, 4, 5}, {3, 1, 2, 0}, 1, 3},
    {1, {1000}, {0}, 7, 0},
    {0, {0}, {0}, 1, 2},                /* a 0-d view */
};
#define NLAYOUTS (int)(sizeof LAYOUTS / sizeof LAYOUTS[0])

/* Every pair of layouts of one shape family between two devices. */
static void views_every_layout(mn_device_t dd, mn_device_t sd, mn_dtype dt, mn_stream_t *s, bool nb) {
  for (int i = 0; i < NLAYOUTS; i++) {
    for (int j = 0; j < NLAYOUTS; j++) {
      const layout *a = &LAYOUTS[i], *b = &LAYOUTS[j];
      if (a->ndim != b->ndim || memcmp(a->sizes, b->sizes, sizeof a->sizes) != 0) continue;
      mn_view_t *dst = make_view(dd, dt, a->ndim, a->sizes, a->perm, a->step, a->offset);
      mn_view_t *src = make_view(sd, dt, b->ndim, b->sizes, b->perm, b->step, b->offset);
      if (dst && src) check_view_copy(dst, src, s, nb);
      mn_view_destroy(dst);
      mn_view_destroy(src);
    }
  }
}

MN_TEST(cpu_views_every_layout) {
  const mn_dtype dts[] = {MN_DTYPE_UINT8, MN_DTYPE_FLOAT16, MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_COMPLEX128};
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) views_every_layout(CPU, CPU, dts[t], NULL, false);
}

/* A broadcast source (stride 0) copies; a broadcast destination is refused. */
MN_TEST(broadcast_views) {
  mn_storage_t *st = NULL;
  mn_view_t *row = NULL, *dst = NULL, *sim = NULL;
  const int64_t sizes[2] = {4, 3}, bstrides[2] = {0, 1};
  MN_CHECK_OK(mn_storage_create(CPU, 12, NULL, NULL, &st));
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_INT32, 2, sizes, bstrides, 0, &row));
  mn_storage_release(st);
  int32_t *r = mn_view_data(row);
  r[0] = 10, r[1] = 11, r[2] = 12;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT32, 2, sizes, &dst));
  MN_CHECK_OK(mn_view_empty(SIM0, MN_DTYPE_INT32, 2, sizes, &sim));
  MN_CHECK_OK(mn_copy_view(dst, row, NULL, false));
  MN_CHECK_OK(mn_copy_view(sim, row, NULL, false));
  const int32_t *d = mn_view_data(dst), *sd = mn_view_data(sim);
  bool ok = true;
  for (int i = 0; i < 12; i++) ok = ok && d[i] == 10 + i % 3 && sd[i] == d[i];
  MN_CHECK(ok);
  MN_CHECK_ERR(mn_copy_view(row, dst, NULL, false), MN_ERR_INVALID_ARGUMENT, "stride 0 at dim 0");
  mn_view_destroy(row);
  mn_view_destroy(dst);
  mn_view_destroy(sim);
}

MN_TEST(sim_views_every_layout_and_path) {
  mn_test_set_copy_staging(40, 2, 1); /* chunks end in the middle of rows and elements runs */
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  for (int nb = 0; nb < 2; nb++) {
    views_every_layout(SIM0, CPU, MN_DTYPE_FLOAT32, s, nb);   /* H2D: staged when pageable */
    views_every_layout(CPU, SIM0, MN_DTYPE_INT64, s, nb);     /* D2H */
    views_every_layout(SIM0, SIM0, MN_DTYPE_INT16, s, nb);    /* one device */
    views_every_layout(SIM1, SIM0, MN_DTYPE_FLOAT32, NULL, nb); /* two devices (peer) */
  }
  mn_test_set_copy_staging(CHUNK, 4, 1);
  mn_alloc_stats_t st = pool_stats(SIM0);
  MN_CHECK(LIVE(st) == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
}

/* Reconfigures the SIM devices (nothing may be alive on them). */
static void sim_reconfigure(bool no_peer) {
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_sim_config_t c;
  MN_CHECK_OK(mn_sim_get_config(&c));
  c.no_peer_access = no_peer;
  MN_CHECK_OK(mn_sim_configure(&c));
}

/* Two devices that cannot reach each other: chunks go through staging. */
MN_TEST(between_devices_without_peer_access) {
  sim_reconfigure(true);
  bool can = true;
  MN_CHECK_OK(mn_device_can_access_peer(SIM0, SIM1, &can));
  MN_CHECK(!can);
  mn_test_set_copy_staging(24, 3, 1);
  for (int nb = 0; nb < 2; nb++) {
    views_every_layout(SIM1, SIM0, MN_DTYPE_FLOAT64, NULL, nb);
    views_every_layout(SIM0, SIM1, MN_DTYPE_UINT8, NULL, nb);
  }
  size_t n = 1000;
  unsigned char *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, n, (void **)&a));
  MN_CHECK_OK(mn_device_raw_alloc(SIM1, n, (void **)&b));
  mn_test_fill_random(a, n);
  MN_CHECK_OK(mn_copy_bytes(SIM1, b, SIM0, a, n, NULL, 0));
  MN_CHECK(memcmp(a, b, n) == 0);
  MN_CHECK_OK(mn_device_raw_free(SIM0, a));
  MN_CHECK_OK(mn_device_raw_free(SIM1, b));
  mn_test_set_copy_staging(CHUNK, 4, 1);
  sim_reconfigure(false);
}

MN_TEST(view_errors) {
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  mn_view_t *a = NULL, *b = NULL, *c = NULL;
  MN_CHECK_OK(mn_view_empty(SIM0, MN_DTYPE_FLOAT32, 2, s23, &a));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT32, 2, s23, &b));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT32, 2, s32, &c));
  MN_CHECK_ERR(mn_copy_view(b, a, NULL, true), MN_ERR_NOT_SUPPORTED, "dtypes differ (dst int32, src float32)");
  MN_CHECK_ERR(mn_copy_view(c, a, NULL, true), MN_ERR_INVALID_ARGUMENT, "shapes differ: dst [3, 2], src [2, 3]");
  MN_CHECK_ERR(mn_copy_view(NULL, a, NULL, true), MN_ERR_INVALID_ARGUMENT, "NULL");
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_default(SIM1, &s1));
  MN_CHECK_ERR(mn_copy_view(a, a, s1, true), MN_ERR_INVALID_ARGUMENT, "stream of sim:1");
  MN_CHECK_OK(mn_copy_view(a, a, NULL, false)); /* identical: nothing to do */
  /* Overlapping but different views of one storage are refused. */
  const int64_t s5[1] = {5}, one[1] = {1};
  mn_view_t *x = NULL, *y = NULL;
  MN_CHECK_OK(mn_view_create(mn_view_storage(a), MN_DTYPE_FLOAT32, 1, s5, one, 0, &x));
  MN_CHECK_OK(mn_view_create(mn_view_storage(a), MN_DTYPE_FLOAT32, 1, s5, one, 1, &y));
  MN_CHECK_ERR(mn_copy_view(x, y, NULL, true), MN_ERR_INVALID_ARGUMENT, "overlap");
  mn_view_destroy(x);
  mn_view_destroy(y);
  mn_view_destroy(a);
  mn_view_destroy(b);
  mn_view_destroy(c);
}

/* ---- threads ------------------------------------------------------------------------ */

MN_TEST(host_threads_split_large_chunks) {
  mn_test_set_copy_staging((size_t)4 << 20, 2, 2);
  const int64_t sizes[2] = {1024, 1536};
  const int colmajor[2] = {1, 0}, rowmajor[2] = {0, 1};
  mn_view_t *dst = make_view(CPU, MN_DTYPE_FLOAT32, 2, sizes, rowmajor, 1, 0);
  mn_view_t *src = make_view(CPU, MN_DTYPE_FLOAT32, 2, sizes, colmajor, 1, 0);
  check_view_copy(dst, src, NULL, false);
  mn_view_t *dev = make_view(SIM0, MN_DTYPE_FLOAT32, 2, sizes, rowmajor, 1, 0);
  check_view_copy(dev, src, NULL, true);  /* H2D staged: split gather */
  check_view_copy(src, dev, NULL, true);  /* D2H staged: split scatter in the helper's host function */
  mn_view_destroy(dst);
  mn_view_destroy(src);
  mn_view_destroy(dev);
  mn_test_set_copy_staging(CHUNK, 4, 1);
}

typedef struct copier {
  int id, bad;
} copier;

static void *copier_main(void *arg) {
  copier *c = arg;
  mn_stream_t *s = NULL;
  size_t n = 3 * CHUNK + (size_t)c->id * 37;
  unsigned char *src = malloc(n), *back = malloc(n), *dev = NULL;
  if (mn_stream_create(SIM0, &s) != MN_OK || mn_device_raw_alloc(SIM0, n, (void **)&dev) != MN_OK) {
    c->bad++;
    free(src);
    free(back);
    return NULL;
  }
  for (int round = 0; round < 20; round++) {
    memset(src, (int)(c->id * 16 + round), n);
    if (mn_copy_bytes(SIM0, dev, CPU, src, n, s, MN_COPY_NON_BLOCKING) != MN_OK) c->bad++;
    if (mn_copy_bytes(CPU, back, SIM0, dev, n, s, MN_COPY_NON_BLOCKING) != MN_OK) c->bad++;
    if (mn_stream_synchronize(s) != MN_OK || memcmp(src, back, n) != 0) c->bad++;
  }
  if (mn_device_raw_free(SIM0, dev) != MN_OK || mn_stream_destroy(s) != MN_OK) c->bad++;
  free(src);
  free(back);
  return NULL;
}

MN_TEST(concurrent_copies_on_several_streams) {
  enum { T = 4 };
  pthread_t th[T];
  copier cs[T];
  for (int t = 0; t < T; t++) {
    cs[t] = (copier){.id = t};
    pthread_create(&th[t], NULL, copier_main, &cs[t]);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    MN_CHECK(cs[t].bad == 0);
  }
}

MN_TEST(nothing_left_behind) {
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK_OK(mn_device_synchronize(SIM1));
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_test_release_sim_caches();
  for (int i = 0; i < 2; i++) {
    mn_device_t d = mn_device_sim(i);
    mn_sim_stats_t st;
    MN_CHECK_OK(mn_sim_get_stats(d, &st));
    MN_CHECK(st.live_streams == 0 && st.live_events == 0 && st.mapped_bytes == 0 && st.illegal_accesses == 0);
    MN_CHECK_OK(mn_sim_check_invariants(d));
    mn_alloc_stats_t ps = pool_stats(d);
    MN_CHECK(ps.reserved_bytes[MN_POOL_ALL].current == 0);
  }
}

/* The three ways to copy views, and what each accepts: mn_view_copy (users:
 * broadcast, cast, any devices), mn_copy_view (the engine: same sizes, casts
 * on one device only), mn_kernel_copy_view (one stream's device, same sizes). */
MN_TEST(entry_points_and_their_rules) {
  const int64_t row_size[2] = {1, 3}, full[2] = {2, 3};
  mn_view_t *row = NULL, *cpu32 = NULL, *cpu64 = NULL, *sim_i = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT32, 2, row_size, &row));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT32, 2, full, &cpu32));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT64, 2, full, &cpu64));
  MN_CHECK_OK(mn_view_empty(SIM0, MN_DTYPE_INT32, 2, full, &sim_i));
  MN_CHECK_OK(mn_view_fill(row, mn_scalar_float(2.5), NULL));
  /* mn_view_copy: broadcast and cast, across devices */
  MN_CHECK_OK(mn_view_copy(cpu32, row, NULL));
  MN_CHECK_OK(mn_view_copy(sim_i, cpu32, NULL));
  MN_CHECK_OK(mn_view_copy(cpu64, sim_i, NULL));
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK(((double *)mn_view_data(cpu64))[5] == 2.0); /* 2.5 -> int32 2 -> 2.0 */
  /* mn_copy_view: casts on one device; no broadcasting; no cast across devices */
  MN_CHECK_OK(mn_copy_view(cpu64, cpu32, NULL, false));
  MN_CHECK(((double *)mn_view_data(cpu64))[5] == 2.5);
  MN_CHECK_ERR(mn_copy_view(cpu32, row, NULL, false), MN_ERR_INVALID_ARGUMENT, "mn_copy_view: shapes differ");
  MN_CHECK_ERR(mn_copy_view(sim_i, cpu32, NULL, false), MN_ERR_NOT_SUPPORTED, "mn_copy_view: dtypes differ");
  /* mn_kernel_copy_view: both views on the stream's device, same sizes */
  mn_stream_t *cs = NULL;
  MN_CHECK_OK(mn_stream_default(CPU, &cs));
  MN_CHECK_OK(mn_kernel_copy_view(cs, cpu32, cpu64));
  MN_CHECK_ERR(mn_kernel_copy_view(cs, cpu32, row), MN_ERR_INVALID_ARGUMENT, "mn_kernel_copy_view: size at dim 0");
  MN_CHECK_ERR(mn_kernel_copy_view(cs, sim_i, cpu32), MN_ERR_INVALID_ARGUMENT, "on another device than the stream");
  mn_view_destroy(row);
  mn_view_destroy(cpu32);
  mn_view_destroy(cpu64);
  mn_view_destroy(sim_i);
}

int main(void) {
  SIM0 = mn_device_sim(0);
  SIM1 = mn_device_sim(1);
  CPU = mn_device_cpu();
  mn_test_configure_sim(2, (size_t)1 << 30);
  MN_RUN(bytes_every_mode_and_size);
  MN_RUN(zero_bytes);
  MN_RUN(staged_h2d_completion_point);
  MN_RUN(staged_d2h_completion_point);
  MN_RUN(pinned_copy_protects_its_block);
  MN_RUN(device_to_device);
  MN_RUN(faults_release_every_staging_block);
  MN_RUN(bad_input);
  MN_RUN(cpu_copy_ordered_on_a_device_stream);
  MN_RUN(cpu_views_every_layout);
  MN_RUN(broadcast_views);
  MN_RUN(sim_views_every_layout_and_path);
  MN_RUN(between_devices_without_peer_access);
  MN_RUN(view_errors);
  MN_RUN(entry_points_and_their_rules);
  MN_RUN(host_threads_split_large_chunks);
  MN_RUN(concurrent_copies_on_several_streams);
  MN_RUN(nothing_left_behind);
  return mn_test_finish();
}
