/* tests/test_pinned.c: the pinned host pool on SIM: size classes, reuse only
 * after the streams that used a block passed its free, stats, empty_cache,
 * faults, threads, streams destroyed while a block records them; and the
 * backend's raw pinned memory and pointer query. */
#include <pthread.h>
#include <stdint.h>

#include "mn_test.h"

static mn_device_t SIM0;

static void nothing_fn(void *arg) { (void)arg; }

static mn_alloc_stats_t stats_of(mn_allocator_t *a) {
  mn_alloc_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_allocator_get_stats(a, &s));
  return s;
}

#define CUR(s, name) ((s).name[MN_POOL_ALL].current)

static size_t sim_live_events(void) {
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  return st.live_events;
}

MN_TEST(size_classes) {
  mn_pinned_config_t pow2 = mn_pinned_config_default(), quarter = mn_pinned_config_default();
  pow2.size_class_divisions = 1;
  MN_CHECK(quarter.size_class_divisions == 4);
  MN_CHECK(mn_pinned_size_class(NULL, 1) == 4096);
  MN_CHECK(mn_pinned_size_class(NULL, 4096) == 4096);
  MN_CHECK(mn_pinned_size_class(NULL, 4097) == 8192);
  MN_CHECK(mn_pinned_size_class(NULL, 8193) == 12288);
  MN_CHECK(mn_pinned_size_class(NULL, 16385) == 20480);
  MN_CHECK(mn_pinned_size_class(NULL, 600000) == 655360);
  MN_CHECK(mn_pinned_size_class(&pow2, 600000) == 1048576);
  MN_CHECK(mn_pinned_size_class(&pow2, (size_t)1 << 30) == (size_t)1 << 30);
  MN_CHECK(mn_pinned_size_class(&pow2, ((size_t)1 << 30) + 1) == (size_t)2 << 30);
  MN_CHECK(mn_pinned_size_class(NULL, SIZE_MAX) == 0);
  /* Waste: under 25% with 4 divisions above 16 KiB (page rounding below);
   * powers of two reach almost 100%. Classes grow with the request. */
  double worst4 = 0, worst1 = 0;
  size_t prev = 0;
  bool monotone = true;
  for (size_t n = 16 << 10; n < ((size_t)64 << 20); n += n / 7 + 4093) {
    size_t c4 = mn_pinned_size_class(NULL, n), c1 = mn_pinned_size_class(&pow2, n);
    double w4 = (double)(c4 - n) / (double)n, w1 = (double)(c1 - n) / (double)n;
    if (w4 > worst4) worst4 = w4;
    if (w1 > worst1) worst1 = w1;
    monotone = monotone && c4 >= prev && c4 >= n && c4 % 4096 == 0;
    prev = c4;
  }
  MN_CHECK(worst4 < 0.25 && worst1 > 0.5 && monotone);
  mn_pinned_config_t bad = mn_pinned_config_default();
  bad.size_class_divisions = 3;
  MN_CHECK(mn_pinned_size_class(&bad, 100) == 0);
  mn_allocator_t *a = NULL;
  MN_CHECK_ERR(mn_pinned_allocator_create(SIM0, &bad, &a), MN_ERR_INVALID_ARGUMENT, "size_class_divisions=3");
  MN_CHECK_ERR(mn_pinned_allocator_create(mn_device_sim(7), NULL, &a), MN_ERR_NO_DEVICE, "sim:7");
  MN_CHECK_ERR(mn_pinned_allocator_create(SIM0, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "out");
  MN_CHECK(a == NULL);
}

MN_TEST(backend_pinned_memory_and_query) {
  void *p = NULL;
  bool pinned = false;
  MN_CHECK_OK(mn_device_host_alloc(SIM0, 10000, &p));
  MN_CHECK(p != NULL);
  memset(p, 1, 10000); /* ordinary host memory */
  MN_CHECK_OK(mn_device_host_is_pinned(SIM0, p, &pinned));
  MN_CHECK(pinned);
  MN_CHECK_OK(mn_device_host_is_pinned(mn_device_sim(1), (char *)p + 9999, &pinned));
  MN_CHECK(pinned); /* portable: every SIM device sees it */
  MN_CHECK(mn_is_pinned((char *)p + 5000));
  MN_CHECK_ERR(mn_device_host_free(SIM0, (char *)p + 8), MN_ERR_INVALID_ARGUMENT, "not pinned memory");
  MN_CHECK_OK(mn_device_host_free(SIM0, p));
  MN_CHECK_ERR(mn_device_host_free(SIM0, p), MN_ERR_INVALID_ARGUMENT, "not pinned memory");
  MN_CHECK_OK(mn_device_host_free(SIM0, NULL));

  /* Registering ordinary pages. */
  size_t n = 3 * 4096;
  char *buf = aligned_alloc(4096, n);
  MN_CHECK(!mn_is_pinned(buf));
  MN_CHECK_OK(mn_device_host_register(SIM0, buf, n));
  MN_CHECK(mn_is_pinned(buf) && mn_is_pinned(buf + n - 1) && !mn_is_pinned(buf + n));
  MN_CHECK_ERR(mn_device_host_register(SIM0, buf + 4096, 10), MN_ERR_INVALID_ARGUMENT, "overlaps");
  MN_CHECK_ERR(mn_device_host_unregister(SIM0, buf + 4096), MN_ERR_INVALID_ARGUMENT, "registered");
  MN_CHECK_ERR(mn_device_host_free(SIM0, buf), MN_ERR_INVALID_ARGUMENT, "not pinned memory");
  MN_CHECK_OK(mn_device_host_unregister(SIM0, buf));
  MN_CHECK(!mn_is_pinned(buf));
  free(buf);

  /* CPU "pinned" memory is plain memory and never reported pinned. */
  MN_CHECK_OK(mn_device_host_alloc(mn_device_cpu(), 64, &p));
  MN_CHECK_OK(mn_device_host_is_pinned(mn_device_cpu(), p, &pinned));
  MN_CHECK(!pinned && !mn_is_pinned(p));
  MN_CHECK_OK(mn_device_host_free(mn_device_cpu(), p));
  MN_CHECK(!mn_is_pinned(NULL));
  MN_CHECK_ERR(mn_device_host_alloc(SIM0, 0, &p), MN_ERR_INVALID_ARGUMENT, "nbytes");
  MN_CHECK_ERR(mn_device_host_alloc(mn_device_sim(9), 10, &p), MN_ERR_NO_DEVICE, "sim:9");
  MN_CHECK_ERR(mn_device_host_register(SIM0, NULL, 10), MN_ERR_INVALID_ARGUMENT, "ptr");
  MN_CHECK_ERR(mn_device_host_is_pinned(SIM0, p, NULL), MN_ERR_INVALID_ARGUMENT, "pinned");
}

MN_TEST(cached_reuse_and_stats) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK(strcmp(mn_allocator_name(a), "pinned") == 0);
  MN_CHECK(mn_device_equal(mn_allocator_device(a), mn_device_cpu()));
  void *p = NULL, *q = NULL, *r = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 5000, NULL, &p));
  MN_CHECK(mn_is_pinned(p) && mn_is_pinned((char *)p + 8191) && ((uintptr_t)p % 4096) == 0);
  mn_allocator_t *owner = NULL;
  MN_CHECK_OK(mn_pinned_allocator_lookup((char *)p + 100, &owner));
  MN_CHECK(owner == a);
  mn_alloc_stats_t s = stats_of(a);
  MN_CHECK(CUR(s, allocation) == 1 && CUR(s, allocated_bytes) == 8192 && CUR(s, requested_bytes) == 5000);
  MN_CHECK(CUR(s, segment) == 1 && CUR(s, reserved_bytes) == 8192 && s.num_device_alloc == 1);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_alloc(a, 6000, NULL, &q)); /* same class: the cached block */
  MN_CHECK(q == p);
  MN_CHECK_OK(mn_allocator_alloc(a, 100, NULL, &r)); /* another class: a new block */
  MN_CHECK(r != p);
  s = stats_of(a);
  MN_CHECK(CUR(s, segment) == 2 && s.num_device_alloc == 2 && s.allocation[MN_POOL_ALL].allocated == 3);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_ERR(mn_allocator_free(a, (char *)q + 1), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_ERR(mn_allocator_free(a, q), MN_ERR_INVALID_ARGUMENT, "not a live allocation");
  MN_CHECK_OK(mn_allocator_free(a, r));
  s = stats_of(a);
  MN_CHECK(CUR(s, allocation) == 0 && CUR(s, active) == 0 && CUR(s, reserved_bytes) == 8192 + 4096);
  MN_CHECK(s.allocated_bytes[MN_POOL_ALL].peak == 8192 + 4096);
  MN_CHECK_OK(mn_allocator_reset_peak(a));
  s = stats_of(a);
  MN_CHECK(s.allocated_bytes[MN_POOL_ALL].peak == 0);
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  s = stats_of(a);
  MN_CHECK(CUR(s, segment) == 0 && CUR(s, reserved_bytes) == 0 && s.num_device_free == 2);
  MN_CHECK(!mn_is_pinned(p));
  MN_CHECK_ERR(mn_pinned_allocator_lookup(p, &owner), MN_ERR_NOT_FOUND, "not in any pinned pool");
  void *z = (void *)1;
  MN_CHECK_OK(mn_allocator_alloc(a, 0, NULL, &z));
  MN_CHECK(z == NULL);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
}

/* The heart of the pool: a block freed while a stream still has work that
 * uses it is not handed out again until that work has run. */
MN_TEST(block_used_by_unfinished_copy_is_never_reused) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s = NULL;
  void *dev = NULL, *p = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 65536, &dev));
  MN_CHECK_OK(mn_allocator_alloc(a, 65536, NULL, &p));
  memset(p, 0x3c, 65536);
  MN_CHECK_OK(mn_memcpy_async(SIM0, dev, mn_device_cpu(), p, 65536, s)); /* queued, not run */
  MN_CHECK_OK(mn_allocator_record_stream(a, (char *)p + 4096, s));      /* any address inside */
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));                     /* twice: one use */
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, allocation) == 0 && CUR(st, active) == 1 && CUR(st, active_bytes) == 65536);
  mn_snapshot_t *snap = NULL;
  MN_CHECK_OK(mn_allocator_snapshot(a, &snap));
  MN_CHECK(snap && snap->nsegments == 1 && snap->segments[0].blocks[0].state == MN_BLOCK_ACTIVE_PENDING_FREE);
  mn_snapshot_free(snap);
  MN_CHECK_OK(mn_allocator_check_invariants(a)); /* with a pending block */
  void *others[8];
  bool reused = false;
  for (int i = 0; i < 8; i++) {
    MN_CHECK_OK(mn_allocator_alloc(a, 65536, NULL, &others[i]));
    reused = reused || others[i] == p;
  }
  MN_CHECK(!reused);
  for (int i = 0; i < 8; i++) MN_CHECK_OK(mn_allocator_free(a, others[i]));
  MN_CHECK_OK(mn_stream_synchronize(s)); /* the copy ran: the block is reusable */
  MN_CHECK(((unsigned char *)dev)[65535] == 0x3c);
  st = stats_of(a);
  MN_CHECK(CUR(st, active) == 0);
  bool got_back = false;
  for (int i = 0; i < 9; i++) {
    MN_CHECK_OK(mn_allocator_alloc(a, 65536, NULL, &others[i % 8]));
    got_back = got_back || others[i % 8] == p;
    MN_CHECK_OK(mn_allocator_free(a, others[i % 8]));
  }
  MN_CHECK(got_back);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_allocator_destroy(a);
}

MN_TEST(every_stream_must_pass) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s1 = NULL, *s2 = NULL, *cpu = NULL;
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &s1));
  MN_CHECK_OK(mn_stream_create(mn_device_sim(1), &s2)); /* another SIM device: fine */
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &cpu));
  MN_CHECK_OK(mn_allocator_alloc(a, 100, NULL, &p));
  MN_CHECK_OK(mn_stream_launch_host(s1, nothing_fn, NULL));
  MN_CHECK_OK(mn_stream_launch_host(s2, nothing_fn, NULL));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s1));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s2));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, cpu)); /* ignored: CPU work is done */
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_sim_stream_advance(s1, 1, NULL));
  MN_CHECK_OK(mn_allocator_alloc(a, 100, NULL, &q));
  MN_CHECK(q != p); /* s2 has not passed the free yet */
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_OK(mn_sim_stream_advance(s2, 1, NULL));
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, active) == 0);
  /* Blocks are LIFO per class: the newest free block comes first. */
  MN_CHECK_OK(mn_allocator_alloc(a, 100, NULL, &q));
  MN_CHECK(q == p);
  /* Many streams on one block (more than are kept inline). */
  mn_stream_t *many[6];
  MN_CHECK_OK(mn_allocator_alloc(a, 100, NULL, &p));
  for (int i = 0; i < 6; i++) {
    MN_CHECK_OK(mn_stream_create(SIM0, &many[i]));
    MN_CHECK_OK(mn_stream_launch_host(many[i], nothing_fn, NULL));
    MN_CHECK_OK(mn_allocator_record_stream(a, p, many[i]));
  }
  MN_CHECK_OK(mn_allocator_free(a, p));
  for (int i = 0; i < 5; i++) MN_CHECK_OK(mn_stream_synchronize(many[i]));
  st = stats_of(a);
  MN_CHECK(CUR(st, active) == 2); /* q, and p waiting for the sixth stream */
  MN_CHECK_OK(mn_stream_synchronize(many[5]));
  st = stats_of(a);
  MN_CHECK(CUR(st, active) == 1);
  for (int i = 0; i < 6; i++) MN_CHECK_OK(mn_stream_destroy(many[i]));
  /* Too large to round: a clean out-of-memory error. */
  void *huge = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, SIZE_MAX - 4, NULL, &huge), MN_ERR_OUT_OF_MEMORY, "too large");
  MN_CHECK(huge == NULL);
  /* Errors: a stream of another device type, an address outside any live block. */
  mn_allocator_t *cpu_pool = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(mn_device_cpu(), NULL, &cpu_pool));
  void *c = NULL;
  MN_CHECK_OK(mn_allocator_alloc(cpu_pool, 10, NULL, &c));
  MN_CHECK(mn_is_pinned(c)); /* a pool block, though plain memory */
  MN_CHECK_ERR(mn_allocator_record_stream(cpu_pool, c, s1), MN_ERR_INVALID_ARGUMENT, "cannot order");
  MN_CHECK_ERR(mn_allocator_record_stream(a, c, s1), MN_ERR_INVALID_ARGUMENT, "not inside a live allocation");
  MN_CHECK_OK(mn_allocator_free(a, q));
  MN_CHECK_ERR(mn_allocator_record_stream(a, q, s1), MN_ERR_INVALID_ARGUMENT, "not inside a live allocation");
  MN_CHECK_OK(mn_allocator_free(cpu_pool, c));
  mn_allocator_destroy(cpu_pool);
  MN_CHECK_OK(mn_stream_destroy(s1));
  MN_CHECK_OK(mn_stream_destroy(s2));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
}

/* A recorded stream's pointer is kept until free records its event there:
 * destroying it meanwhile is refused (it used to be freed, and free then
 * recorded an event on freed memory); after the free it may go, with its
 * queued work completing, and the pending block becomes reusable. */
MN_TEST(stream_destroy_while_recorded_is_busy) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s = NULL, *t = NULL;
  void *dev = NULL, *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_stream_create(SIM0, &t));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 4096, &dev));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, t, &p)); /* the pool keeps no allocating stream */
  MN_CHECK_OK(mn_stream_destroy(t));
  memset(p, 0x5a, 4096);
  MN_CHECK_OK(mn_memcpy_async(SIM0, dev, mn_device_cpu(), p, 4096, s)); /* queued, not run */
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_OK(mn_allocator_record_stream(a, (char *)p + 100, s)); /* twice: one hold */
  MN_CHECK_ERR(mn_stream_destroy(s), MN_ERR_BUSY, "still used by 1 allocator block ");
  MN_CHECK(strstr(mn_last_error(), "free it first") != NULL);
  size_t pending = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  MN_CHECK(pending == 1); /* intact */
  MN_CHECK_OK(mn_stream_launch_host(s, nothing_fn, NULL)); /* and usable */
  MN_CHECK_OK(mn_allocator_free(a, p));
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, active) == 1);
  MN_CHECK_OK(mn_stream_destroy(s)); /* the copy runs now, as CUDA finishes a destroyed stream's work */
  MN_CHECK(((unsigned char *)dev)[4095] == 0x5a);
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &q));
  MN_CHECK(q == p); /* the event's stream is gone: reached */
  MN_CHECK_OK(mn_allocator_free(a, q));
  /* A block still live at the pool's destroy gives its holds back. */
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_ERR(mn_stream_destroy(s), MN_ERR_BUSY, "allocator block");
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
}

MN_TEST(events_are_pooled_and_released_by_empty_cache) {
  size_t base = sim_live_events();
  mn_allocator_t *a = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  for (int round = 0; round < 5; round++) {
    void *p = NULL;
    MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
    MN_CHECK_OK(mn_stream_launch_host(s, nothing_fn, NULL));
    MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
    MN_CHECK_OK(mn_allocator_free(a, p));
    MN_CHECK_OK(mn_stream_synchronize(s));
  }
  MN_CHECK(sim_live_events() == base + 1); /* one event, recycled */
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK(sim_live_events() == base);
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, reserved_bytes) == 0);
  /* A pending block survives empty_cache, and destroy waits for it. */
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_stream_launch_host(s, nothing_fn, NULL));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  st = stats_of(a);
  MN_CHECK(CUR(st, reserved_bytes) == 4096 && CUR(st, active) == 1);
  void *live = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 50000, NULL, &live)); /* destroy frees live blocks too */
  mn_allocator_destroy(a);
  size_t pending = 99;
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  MN_CHECK(pending == 0 && sim_live_events() == base);
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(faults) {
  mn_allocator_t *a = NULL;
  mn_stream_t *s = NULL;
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  /* Pinning fails once: the pool empties its cache and retries. */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 1, 1));
  MN_CHECK_OK(mn_allocator_alloc(a, 9000, NULL, &q));
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(st.num_alloc_retries == 1 && st.num_ooms == 0 && CUR(st, segment) == 1);
  MN_CHECK_OK(mn_allocator_free(a, q));
  /* Twice in a row: a clean out-of-memory error, nothing leaked. */
  q = (void *)1;
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 1, 2));
  MN_CHECK_ERR(mn_allocator_alloc(a, 20000, NULL, &q), MN_ERR_OUT_OF_MEMORY, "injected fault");
  MN_CHECK(q == (void *)1);
  st = stats_of(a);
  MN_CHECK(st.num_ooms == 1 && CUR(st, allocation) == 0);
  /* Event record fails at free: the pool synchronizes the stream instead. */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_stream_launch_host(s, nothing_fn, NULL));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_RECORD, 1, 1));
  MN_CHECK_OK(mn_allocator_free(a, p));
  size_t pending = 9;
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  st = stats_of(a);
  MN_CHECK(pending == 0 && CUR(st, active) == 0);
  /* Event query fails: the block stays pending until a later poll succeeds. */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_stream_launch_host(s, nothing_fn, NULL));
  MN_CHECK_OK(mn_allocator_record_stream(a, p, s));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_QUERY, 1, 1));
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &q));
  MN_CHECK(q != p);
  MN_CHECK_OK(mn_allocator_free(a, q));
  st = stats_of(a);
  MN_CHECK(CUR(st, active) == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_allocator_destroy(a);
}

MN_TEST(host_register_mode_and_storages) {
  mn_pinned_config_t c = mn_pinned_config_default();
  c.use_host_register = true;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, &c, &a));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 12345, NULL, &p));
  bool pinned = false;
  MN_CHECK_OK(mn_device_host_is_pinned(SIM0, p, &pinned));
  MN_CHECK(pinned);
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_device_host_is_pinned(SIM0, p, &pinned));
  MN_CHECK(!pinned);
  /* CPU storages can live in pinned memory. */
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_create(mn_device_cpu(), 1000, a, NULL, &s));
  MN_CHECK(mn_is_pinned(mn_storage_data(s)));
  mn_storage_release(s);
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, allocation) == 0);
  mn_allocator_destroy(a);
  /* The default pool of a device is one per device. */
  mn_allocator_t *d1 = NULL, *d2 = NULL, *d3 = NULL;
  MN_CHECK_OK(mn_pinned_allocator_get_default(SIM0, &d1));
  MN_CHECK_OK(mn_pinned_allocator_get_default(SIM0, &d2));
  MN_CHECK_OK(mn_pinned_allocator_get_default(mn_device_sim(1), &d3));
  MN_CHECK(d1 == d2 && d1 != d3);
  MN_CHECK_ERR(mn_pinned_allocator_get_default(mn_device_cuda(3), &d3), MN_ERR_NO_DEVICE, "cuda:3");
}

typedef struct worker_arg {
  mn_allocator_t *a;
  mn_stream_t *s;
  int bad;
} worker_arg;

static void *worker(void *arg) {
  worker_arg *w = arg;
  void *held[16] = {0};
  for (int i = 0; i < 2000; i++) {
    int k = i % 16;
    if (held[k]) {
      if (i % 3 == 0 && mn_allocator_record_stream(w->a, held[k], w->s) != MN_OK) w->bad++;
      if (mn_allocator_free(w->a, held[k]) != MN_OK) w->bad++;
      held[k] = NULL;
    }
    size_t n = (size_t)(1 + (i * 7919) % 70000);
    if (mn_allocator_alloc(w->a, n, NULL, &held[k]) != MN_OK) w->bad++;
    else memset(held[k], k, n < 64 ? n : 64);
    if (i % 100 == 0 && mn_sim_stream_advance(w->s, 1000, NULL) != MN_OK) w->bad++;
  }
  for (int k = 0; k < 16; k++)
    if (held[k] && mn_allocator_free(w->a, held[k]) != MN_OK) w->bad++;
  return NULL;
}

MN_TEST(threads) {
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_pinned_allocator_create(SIM0, NULL, &a));
  enum { T = 4 };
  pthread_t th[T];
  worker_arg args[T];
  for (int t = 0; t < T; t++) {
    args[t] = (worker_arg){.a = a};
    MN_CHECK_OK(mn_stream_create(SIM0, &args[t].s));
    pthread_create(&th[t], NULL, worker, &args[t]);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    MN_CHECK(args[t].bad == 0);
  }
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  mn_alloc_stats_t st = stats_of(a);
  MN_CHECK(CUR(st, allocation) == 0 && CUR(st, active) == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  for (int t = 0; t < T; t++) MN_CHECK_OK(mn_stream_destroy(args[t].s));
  mn_allocator_destroy(a);
}

int main(void) {
  SIM0 = mn_device_sim(0);
  mn_test_configure_sim(2, (size_t)1 << 30);
  MN_RUN(size_classes);
  MN_RUN(backend_pinned_memory_and_query);
  MN_RUN(cached_reuse_and_stats);
  MN_RUN(block_used_by_unfinished_copy_is_never_reused);
  MN_RUN(every_stream_must_pass);
  MN_RUN(stream_destroy_while_recorded_is_busy);
  MN_RUN(events_are_pooled_and_released_by_empty_cache);
  MN_RUN(faults);
  MN_RUN(host_register_mode_and_storages);
  MN_RUN(threads);
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.illegal_accesses == 0 && st.live_streams == 0 && st.mapped_bytes == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  return mn_test_finish();
}
