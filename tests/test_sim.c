/* tests/test_sim.c: the SIM device's semantics: memory and capacity, lazy
 * streams that run only when advanced, events, waits, VMM, fault injection,
 * destroying a stream that is held or that events and waits refer to; the
 * AVL tree (runtime/avl.h) and the SIM range placement (first fit) against
 * naive models. */
#include <stdint.h>

#include "mn_test.h"
#include "runtime/avl.h"
#include "runtime/stream_hold.h"

static mn_device_t SIM0;

static size_t pending(mn_stream_t *s) {
  size_t n = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &n));
  return n;
}

static bool event_done(mn_event_t *e) {
  bool d = false;
  MN_CHECK_OK(mn_event_query(e, &d));
  return d;
}

static void counter_fn(void *arg) { (*(int *)arg)++; }

MN_TEST(config_and_properties) {
  mn_sim_config_t c;
  MN_CHECK_OK(mn_sim_get_config(&c));
  MN_CHECK(c.capacity == ((size_t)1 << 30) && c.device_count == 2 && !c.eager);
  mn_device_props_t p;
  MN_CHECK_OK(mn_device_get_properties(SIM0, &p));
  MN_CHECK(p.total_memory == c.capacity && p.alloc_granularity == c.granularity && p.supports_vmm);
  MN_CHECK(p.is_host_accessible);
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_SIM, &n));
  MN_CHECK(n == 2);
  MN_CHECK_ERR(mn_device_check(mn_device_sim(2)), MN_ERR_NO_DEVICE, "sim:2");
  /* Bad configurations are refused with the value named. */
  mn_sim_config_t bad = c;
  bad.granularity = 3000;
  MN_CHECK_ERR(mn_sim_configure(&bad), MN_ERR_INVALID_ARGUMENT, "granularity=3000");
  bad = c;
  bad.device_count = 0;
  MN_CHECK_ERR(mn_sim_configure(&bad), MN_ERR_INVALID_ARGUMENT, "device_count=0");
  bad = c;
  bad.capacity = c.granularity + 1;
  MN_CHECK_ERR(mn_sim_configure(&bad), MN_ERR_INVALID_ARGUMENT, "capacity=");
}

MN_TEST(raw_memory_and_capacity) {
  void *a = NULL, *b = NULL, *c = NULL;
  size_t freeb = 0, total = 0;
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 1000, &a));
  MN_CHECK(a != NULL && (uintptr_t)a % (2u << 20) == 0);
  MN_CHECK_OK(mn_device_mem_info(SIM0, &freeb, &total));
  MN_CHECK(total - freeb == (2u << 20)); /* rounded to the granularity */
  ((char *)a)[999] = 7;                  /* real, writable host memory */
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, (size_t)512 << 20, &b));
  /* 2 MiB + 512 MiB in use of 1 GiB: 600 MiB does not fit. */
  MN_CHECK_ERR(mn_device_raw_alloc(SIM0, (size_t)600 << 20, &c), MN_ERR_OUT_OF_MEMORY, "out of memory");
  MN_CHECK(c == NULL);
  MN_CHECK_ERR(mn_device_raw_alloc(SIM0, SIZE_MAX - 5, &c), MN_ERR_OUT_OF_MEMORY, "sim:0");
  MN_CHECK_ERR(mn_device_raw_alloc(SIM0, 0, &c), MN_ERR_INVALID_ARGUMENT, "nbytes");
  MN_CHECK_ERR(mn_device_raw_free(SIM0, (char *)a + 64), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  MN_CHECK_OK(mn_device_raw_free(SIM0, a));
  MN_CHECK_ERR(mn_device_raw_free(SIM0, a), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK_OK(mn_device_raw_free(SIM0, b));
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.mapped_bytes == 0 && st.peak_mapped_bytes >= (size_t)514 << 20);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

MN_TEST(streams_run_only_when_advanced) {
  mn_stream_t *s = NULL;
  char *dev = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 4096, (void **)&dev));
  char host[64] = {0}, back[64] = {0};
  memset(host, 0x5a, sizeof host);
  MN_CHECK_OK(mn_memset_async(SIM0, dev, 0x11, 64, s));
  MN_CHECK_OK(mn_memcpy_async(SIM0, dev, mn_device_cpu(), host, 32, s));
  MN_CHECK_OK(mn_memcpy_async(mn_device_cpu(), back, SIM0, dev, 64, s));
  MN_CHECK(pending(s) == 3);
  bool done = true;
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(!done);
  MN_CHECK(back[0] == 0 && dev[0] == 0); /* nothing ran yet */
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s, 1, &ran));
  MN_CHECK(ran == 1 && dev[0] == 0x11 && dev[40] == 0x11);
  MN_CHECK_OK(mn_sim_stream_advance(s, 1, &ran));
  MN_CHECK(dev[0] == 0x5a && dev[40] == 0x11 && back[0] == 0);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(back[0] == 0x5a && back[31] == 0x5a && back[32] == 0x11 && pending(s) == 0);
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_sim_stream_advance(s, 5, &ran));
  MN_CHECK(ran == 0);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev));
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(default_stream_and_host_functions) {
  mn_stream_t *d = NULL, *d2 = NULL;
  MN_CHECK_OK(mn_stream_default(SIM0, &d));
  MN_CHECK_OK(mn_stream_default(SIM0, &d2));
  MN_CHECK(d == d2 && mn_stream_id(d) == mn_stream_id(d2));
  mn_stream_t *d1 = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_sim(1), &d1));
  MN_CHECK(mn_stream_id(d1) != mn_stream_id(d));
  MN_CHECK_ERR(mn_stream_destroy(d), MN_ERR_INVALID_ARGUMENT, "default stream");
  int count = 0;
  MN_CHECK_OK(mn_stream_launch_host(d, counter_fn, &count));
  MN_CHECK_OK(mn_stream_launch_host(d, counter_fn, &count));
  MN_CHECK(count == 0);
  MN_CHECK_OK(mn_sim_stream_advance(d, 1, NULL));
  MN_CHECK(count == 1);
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK(count == 2);
}

MN_TEST(events_complete_when_reached) {
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  MN_CHECK(event_done(e)); /* never recorded: complete */
  int count = 0;
  MN_CHECK_OK(mn_stream_launch_host(s, counter_fn, &count));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_stream_launch_host(s, counter_fn, &count));
  MN_CHECK(!event_done(e));
  MN_CHECK_OK(mn_sim_stream_advance(s, 1, NULL));
  MN_CHECK(event_done(e));  /* the stream reached the recorded point */
  MN_CHECK(count == 1);
  MN_CHECK_OK(mn_event_record(e, s)); /* re-record: now after op 2 */
  MN_CHECK(!event_done(e));
  MN_CHECK_OK(mn_event_synchronize(e));
  MN_CHECK(event_done(e) && count == 2);
  MN_CHECK_OK(mn_event_record(e, s)); /* recorded on an idle stream: complete */
  MN_CHECK(event_done(e));
  /* An event of one device cannot be recorded on another's stream. */
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_sim(1), &s1));
  MN_CHECK_ERR(mn_event_record(e, s1), MN_ERR_INVALID_ARGUMENT, "sim:1");
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(stream_waits_on_event) {
  mn_stream_t *a = NULL, *b = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &a));
  MN_CHECK_OK(mn_stream_create(SIM0, &b));
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  int ca = 0, cb = 0;
  MN_CHECK_OK(mn_stream_launch_host(a, counter_fn, &ca));
  MN_CHECK_OK(mn_event_record(e, a));
  MN_CHECK_OK(mn_stream_wait_event(b, e));
  MN_CHECK_OK(mn_stream_launch_host(b, counter_fn, &cb));
  size_t ran = 99;
  MN_CHECK_OK(mn_sim_stream_advance(b, 10, &ran));
  MN_CHECK(ran == 0 && cb == 0); /* blocked behind a's point */
  MN_CHECK_OK(mn_sim_stream_advance(a, 1, NULL));
  MN_CHECK_OK(mn_sim_stream_advance(b, 10, &ran));
  MN_CHECK(ran == 2 && cb == 1);
  /* Synchronizing a waiting stream runs what it waits for first. */
  MN_CHECK_OK(mn_stream_launch_host(a, counter_fn, &ca));
  MN_CHECK_OK(mn_event_record(e, a));
  MN_CHECK_OK(mn_stream_wait_event(b, e));
  MN_CHECK_OK(mn_stream_launch_host(b, counter_fn, &cb));
  MN_CHECK_OK(mn_stream_synchronize(b));
  MN_CHECK(ca == 2 && cb == 2);
  /* A later re-record does not change an earlier wait (CUDA semantics). */
  MN_CHECK_OK(mn_event_record(e, a));
  MN_CHECK_OK(mn_stream_wait_event(b, e));
  MN_CHECK_OK(mn_stream_launch_host(a, counter_fn, &ca));
  MN_CHECK_OK(mn_event_record(e, a));
  MN_CHECK_OK(mn_stream_launch_host(b, counter_fn, &cb));
  MN_CHECK_OK(mn_sim_stream_advance(b, 10, &ran));
  MN_CHECK(ran == 2 && cb == 3 && ca == 2);
  /* Destroying a stream runs its queue and releases waiters. */
  MN_CHECK_OK(mn_stream_launch_host(a, counter_fn, &ca));
  MN_CHECK_OK(mn_event_record(e, a));
  MN_CHECK_OK(mn_stream_wait_event(b, e));
  MN_CHECK_OK(mn_stream_destroy(a));
  MN_CHECK(ca == 4 && event_done(e));
  MN_CHECK_OK(mn_sim_stream_advance(b, 10, &ran));
  MN_CHECK(ran == 1 && pending(b) == 0);
  /* Cross-device waits are not supported on SIM. */
  mn_event_t *e1 = NULL;
  mn_stream_t *s1 = NULL;
  MN_CHECK_OK(mn_event_create(mn_device_sim(1), &e1));
  MN_CHECK_OK(mn_stream_default(mn_device_sim(1), &s1));
  MN_CHECK_OK(mn_event_record(e1, s1));
  MN_CHECK_ERR(mn_stream_wait_event(b, e1), MN_ERR_NOT_SUPPORTED, "sim:1");
  MN_CHECK_OK(mn_event_destroy(e1));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(b));
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

MN_TEST(raw_free_synchronizes_and_illegal_access_is_caught) {
  mn_stream_t *s = NULL;
  char *dev = NULL;
  char host[16];
  memset(host, 1, sizeof host);
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 4096, (void **)&dev));
  MN_CHECK_OK(mn_memcpy_async(SIM0, dev, mn_device_cpu(), host, sizeof host, s));
  MN_CHECK(pending(s) == 1);
  MN_CHECK_OK(mn_device_raw_free(SIM0, dev)); /* as cudaFree: waits for the device */
  MN_CHECK(pending(s) == 0);
  mn_sim_stats_t before, after;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &before));
  /* A copy into memory that is no longer mapped is skipped and counted. */
  MN_CHECK_OK(mn_memcpy_async(SIM0, dev, mn_device_cpu(), host, sizeof host, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &after));
  MN_CHECK(after.illegal_accesses == before.illegal_accesses + 1);
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(virtual_memory) {
  const size_t g = (size_t)2 << 20;
  char *base = NULL;
  MN_CHECK_OK(mn_device_va_reserve(SIM0, 8 * g, (void **)&base));
  size_t f0 = 0, f1 = 0, t = 0;
  MN_CHECK_OK(mn_device_mem_info(SIM0, &f0, &t));
  MN_CHECK(f0 == t); /* a reservation holds no memory */
  MN_CHECK_OK(mn_device_mem_map(SIM0, base, 2 * g));
  MN_CHECK_OK(mn_device_mem_info(SIM0, &f1, &t));
  MN_CHECK(f0 - f1 == 2 * g);
  base[0] = 1;
  base[2 * g - 1] = 2;
  MN_CHECK_OK(mn_device_mem_map(SIM0, base + 2 * g, g)); /* grow in place */
  base[3 * g - 1] = 3;
  MN_CHECK_ERR(mn_device_mem_map(SIM0, base + g, g), MN_ERR_INVALID_STATE, "already mapped");
  MN_CHECK_ERR(mn_device_mem_map(SIM0, base + 100, g), MN_ERR_INVALID_ARGUMENT, "multiples");
  MN_CHECK_ERR(mn_device_mem_map(SIM0, base + 7 * g, 2 * g), MN_ERR_INVALID_ARGUMENT, "reserved range");
  MN_CHECK_ERR(mn_device_mem_unmap(SIM0, base + 5 * g, g), MN_ERR_INVALID_ARGUMENT, "not mapped");
  MN_CHECK_ERR(mn_device_va_release(SIM0, base, 8 * g), MN_ERR_INVALID_STATE, "mapped pages");
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  /* Copies into mapped pages work; into unmapped pages of the range they are illegal. */
  mn_sim_stats_t st0, st1;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st0));
  char host[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  MN_CHECK_OK(mn_memcpy_async(SIM0, base + 8, mn_device_cpu(), host, 8, NULL));
  MN_CHECK_OK(mn_memcpy_async(SIM0, base + 3 * g - 4, mn_device_cpu(), host, 8, NULL));
  MN_CHECK_OK(mn_device_synchronize(SIM0));
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st1));
  MN_CHECK(base[8] == 9 && st1.illegal_accesses == st0.illegal_accesses + 1);
  /* Unmapping waits for the device first (as cudaFree): queued work on the
   * range runs, and the synchronization is counted. */
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_memset_async(SIM0, base + 2 * g, 5, 16, s));
  MN_CHECK(pending(s) == 1);
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st0));
  MN_CHECK_OK(mn_device_mem_unmap(SIM0, base + 2 * g, g)); /* shrink */
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st1));
  MN_CHECK(pending(s) == 0 && st1.synchronizes == st0.synchronizes + 1);
  MN_CHECK(st1.illegal_accesses == st0.illegal_accesses && st1.unmaps == st0.unmaps + 1);
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_device_mem_unmap(SIM0, base, 2 * g));
  MN_CHECK_OK(mn_device_mem_info(SIM0, &f1, &t));
  MN_CHECK(f1 == f0);
  MN_CHECK_OK(mn_device_va_release(SIM0, base, 8 * g));
  MN_CHECK_ERR(mn_device_va_release(SIM0, base, 8 * g), MN_ERR_INVALID_ARGUMENT, "not a live reservation");
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  /* The CPU has no VMM. */
  void *p = NULL;
  MN_CHECK_ERR(mn_device_va_reserve(mn_device_cpu(), g, &p), MN_ERR_NOT_SUPPORTED, "virtual memory");
}

MN_TEST(fault_injection) {
  void *p[4] = {0};
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 2, 2));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 100, &p[0]));
  MN_CHECK_ERR(mn_device_raw_alloc(SIM0, 100, &p[1]), MN_ERR_OUT_OF_MEMORY, "injected fault");
  MN_CHECK_ERR(mn_device_raw_alloc(SIM0, 100, &p[1]), MN_ERR_OUT_OF_MEMORY, "injected fault");
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 100, &p[2]));
  MN_CHECK(p[1] == NULL);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  MN_CHECK_OK(mn_device_raw_free(SIM0, p[0]));
  MN_CHECK_OK(mn_device_raw_free(SIM0, p[2]));

  mn_event_t *e = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_default(SIM0, &s));
  MN_CHECK_OK(mn_event_create(SIM0, &e));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_QUERY, 1, 1));
  bool done = false;
  MN_CHECK_ERR(mn_event_query(e, &done), MN_ERR_DEVICE, "event query");
  MN_CHECK(event_done(e));
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_EVENT_RECORD, 1, 1));
  MN_CHECK_ERR(mn_event_record(e, s), MN_ERR_DEVICE, "event record");
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_MEMCPY, 1, 1));
  char a[4], b[4] = {1, 2, 3, 4};
  MN_CHECK_ERR(mn_memcpy_async(mn_device_cpu(), a, mn_device_cpu(), b, 4, s), MN_ERR_DEVICE, "injected");
  MN_CHECK(pending(s) == 0);
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 1, 5));
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 100, &p[3]));
  MN_CHECK_OK(mn_device_raw_free(SIM0, p[3]));
  MN_CHECK_ERR(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_COUNT, 1, 1), MN_ERR_INVALID_ARGUMENT, "fault=");
  MN_CHECK_ERR(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 0, 1), MN_ERR_INVALID_ARGUMENT, "nth=0");
  MN_CHECK_ERR(mn_sim_fault_inject(mn_device_cpu(), MN_SIM_FAULT_RAW_ALLOC, 1, 1), MN_ERR_INVALID_ARGUMENT,
               "not sim");
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.faults_fired == 5);
  MN_CHECK_OK(mn_event_destroy(e));
}

/* mn_sim_configure and the built-in default allocators: an idle one gives back
 * its cache and follows the new size (the same object: pointers stay valid);
 * one with a live allocation makes the call fail and nothing changes. sim:1's
 * default uses expandable segments (MNEMO_ALLOC_CONF), whose reservations go too. */
MN_TEST(configure_refreshes_idle_default_allocators) {
  const size_t MiB = (size_t)1 << 20;
  mn_allocator_t *a = NULL, *b = NULL, *again = NULL;
  MN_CHECK_OK(mn_allocator_get_default(SIM0, &a));
  setenv("MNEMO_ALLOC_CONF", "expandable_segments:True", 1);
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(1), &b));
  unsetenv("MNEMO_ALLOC_CONF");
  void *p = NULL, *q = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 600 * MiB, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p)); /* cached: 600 MiB still mapped on sim:0 */
  MN_CHECK_OK(mn_allocator_alloc(b, 300 * MiB, NULL, &q));
  MN_CHECK_OK(mn_allocator_free(b, q));
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.mapped_bytes >= 600 * MiB);

  mn_sim_config_t c;
  MN_CHECK_OK(mn_sim_get_config(&c));
  c.capacity = (size_t)4 << 30;
  MN_CHECK_OK(mn_sim_configure(&c));
  for (int i = 0; i < 2; i++) {
    MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(i), &st));
    MN_CHECK(st.mapped_bytes == 0 && st.live_reservations == 0 && st.live_events == 0);
  }
  MN_CHECK_OK(mn_allocator_get_default(SIM0, &again));
  MN_CHECK(again == a);
  mn_alloc_stats_t as;
  MN_CHECK_OK(mn_allocator_get_stats(a, &as));
  MN_CHECK(as.reserved_bytes[MN_POOL_ALL].current == 0);
  /* 3 GiB: more than the old 1 GiB device, so only the refreshed size allows it. */
  MN_CHECK_OK(mn_allocator_alloc(a, (size_t)3 << 30, NULL, &p));
  MN_CHECK_OK(mn_allocator_alloc(b, (size_t)3 << 30, NULL, &q));
  MN_CHECK_OK(mn_allocator_free(b, q));

  /* A live allocation in a default: refused, naming it; configuration and memory untouched. */
  c.capacity = (size_t)1 << 30;
  MN_CHECK_ERR(mn_sim_configure(&c), MN_ERR_INVALID_STATE, "default allocator of sim:0");
  mn_sim_config_t now;
  MN_CHECK_OK(mn_sim_get_config(&now));
  MN_CHECK(now.capacity == (size_t)4 << 30);
  MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(1), &st));
  MN_CHECK(st.mapped_bytes > 0); /* sim:1's cache was not emptied by the refused call */
  MN_CHECK_OK(mn_allocator_free(a, p));

  /* Back to 1 GiB: the defaults follow it down too. */
  MN_CHECK_OK(mn_sim_configure(&c));
  MN_CHECK_ERR(mn_allocator_alloc(a, (size_t)2 << 30, NULL, &p), MN_ERR_OUT_OF_MEMORY, "");
  MN_CHECK_OK(mn_allocator_alloc(a, 8 * MiB, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_empty_cache(a));

  /* Another kind of built-in default (the async allocator) gives back its pool too. */
  c.device_count = 3;
  MN_CHECK_OK(mn_sim_configure(&c));
  mn_allocator_t *as2 = NULL;
  setenv("MNEMO_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(2), &as2));
  unsetenv("MNEMO_ALLOC_CONF");
  MN_CHECK(strcmp(mn_allocator_name(as2), "caching") != 0);
  MN_CHECK_OK(mn_allocator_alloc(as2, 100 * MiB, NULL, &p));
  MN_CHECK_ERR(mn_sim_configure(&c), MN_ERR_INVALID_STATE, "default allocator of sim:2");
  MN_CHECK_OK(mn_allocator_free(as2, p));
  c.device_count = 2;
  MN_CHECK_OK(mn_sim_configure(&c));
  MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(1), &st));
  MN_CHECK(st.mapped_bytes == 0 && st.live_reservations == 0);
}

MN_TEST(configure_refused_while_busy_then_eager) {
  void *p = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(SIM0, 100, &p));
  mn_sim_config_t c = mn_sim_config_default();
  MN_CHECK_ERR(mn_sim_configure(&c), MN_ERR_INVALID_STATE, "sim:0");
  MN_CHECK_OK(mn_device_raw_free(SIM0, p));
  c.eager = true;
  c.capacity = (size_t)64 << 20;
  MN_CHECK_OK(mn_sim_configure(&c));
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  int count = 0;
  MN_CHECK_OK(mn_stream_launch_host(s, counter_fn, &count));
  MN_CHECK(count == 1 && pending(s) == 0); /* eager: ran at once */
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.live_streams == 0 && st.live_events == 0 && st.mapped_bytes == 0);
}

/* The runtime side of stream holds (runtime/stream_hold.h): a held stream's
 * destroy is refused and changes nothing; the last unhold lets it go, its
 * queued work completing first; default streams are never counted. */
MN_TEST(held_stream_destroy_is_busy) {
  int ran = 0;
  mn_stream_t *s = NULL, *def = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &s));
  MN_CHECK_OK(mn_stream_launch_host(s, counter_fn, &ran));
  mn__stream_hold(s);
  mn__stream_hold(s);
  MN_CHECK(mn__stream_holds(s) == 2);
  MN_CHECK_ERR(mn_stream_destroy(s), MN_ERR_BUSY, "still used by 2 allocator blocks");
  MN_CHECK(mn_last_status() == MN_ERR_BUSY && ran == 0 && pending(s) == 1);
  mn__stream_unhold(s);
  MN_CHECK_ERR(mn_stream_destroy(s), MN_ERR_BUSY, "still used by 1 allocator block ");
  mn__stream_unhold(s);
  MN_CHECK(mn__stream_holds(s) == 0);
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK(ran == 1); /* as CUDA: a destroyed stream's work completes */
  MN_CHECK_OK(mn_stream_default(SIM0, &def));
  mn__stream_hold(def);
  MN_CHECK(mn__stream_holds(def) == 0);
  mn__stream_unhold(def);
  MN_CHECK_ERR(mn_stream_destroy(def), MN_ERR_INVALID_ARGUMENT, "default stream");
}

/* ---- runtime/avl.h against a sorted array ---------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void) { /* xorshift64*: a fixed sequence */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717u;
}

typedef struct tnode {
  mn__avl_node node;
  uint64_t key, val, max; /* max: the largest val of the subtree (the augmentation) */
} tnode;

static int tcmp(const mn__avl_node *a, const mn__avl_node *b) {
  uint64_t x = ((const tnode *)a)->key, y = ((const tnode *)b)->key;
  return x < y ? -1 : x > y;
}
static int tkey(const void *k, const mn__avl_node *n) {
  uint64_t x = *(const uint64_t *)k, y = ((const tnode *)n)->key;
  return x < y ? -1 : x > y;
}
static uint64_t tmax(const mn__avl_node *n) { return n ? ((const tnode *)n)->max : 0; }
static bool tupdate(mn__avl_node *n) {
  tnode *t = (tnode *)n;
  uint64_t l = tmax(n->left), r = tmax(n->right), m = t->val > l ? t->val : l;
  if (r > m) m = r;
  bool changed = m != t->max;
  t->max = m;
  return changed;
}
static bool tok(const mn__avl_node *n) {
  const tnode *t = (const tnode *)n;
  uint64_t m = t->val, l = tmax(n->left), r = tmax(n->right);
  if (l > m) m = l;
  if (r > m) m = r;
  return t->max == m;
}

/* Random inserts, removes, value changes and searches, each checked against
 * a sorted array of the same keys; the structure and the augmentation
 * checked after every step. */
MN_TEST(avl_tree_matches_a_sorted_array) {
  enum { KEYS = 512, STEPS = 20000 };
  static tnode nodes[KEYS];
  static bool in[KEYS];
  mn__avl t;
  mn__avl_init(&t, tcmp, tupdate);
  size_t count = 0;
  int bad = 0;
  memset(in, 0, sizeof in);
  for (int i = 0; i < KEYS; i++) nodes[i].key = (uint64_t)i * 3 + 1;
  for (int step = 0; step < STEPS && !bad; step++) {
    int i = (int)(rng() % KEYS);
    uint64_t r = rng() % 10;
    if (!in[i] && r < 6) {
      nodes[i].val = rng() % 1000;
      mn__avl_insert(&t, &nodes[i].node);
      in[i] = true;
      count++;
    } else if (in[i] && r < 9) {
      mn__avl_remove(&t, &nodes[i].node);
      in[i] = false;
      count--;
    } else if (in[i]) {
      nodes[i].val = rng() % 1000;
      mn__avl_update_path(&t, &nodes[i].node);
    }
    if (!mn__avl_check(&t, tok) || t.count != count) bad |= 1;
    /* in-order walk, both ways, and the largest value */
    const mn__avl_node *n = mn__avl_first(&t);
    uint64_t want_max = 0;
    for (int k = 0; k < KEYS; k++) {
      if (!in[k]) continue;
      if (n != &nodes[k].node) bad |= 2;
      if (nodes[k].val > want_max) want_max = nodes[k].val;
      n = n ? mn__avl_next(n) : NULL;
    }
    if (n || tmax(t.root) != want_max) bad |= 4;
    n = mn__avl_last(&t);
    for (int k = KEYS - 1; k >= 0; k--) {
      if (!in[k]) continue;
      if (n != &nodes[k].node) bad |= 8;
      n = n ? mn__avl_prev(n) : NULL;
    }
    /* searches for keys present and absent */
    uint64_t q = rng() % (KEYS * 3 + 2);
    const mn__avl_node *lb = NULL, *fl = NULL;
    for (int k = 0; k < KEYS; k++)
      if (in[k] && nodes[k].key >= q) {
        lb = &nodes[k].node;
        break;
      }
    for (int k = KEYS - 1; k >= 0; k--)
      if (in[k] && nodes[k].key <= q) {
        fl = &nodes[k].node;
        break;
      }
    if (mn__avl_lower_bound(&t, &q, tkey) != lb || mn__avl_floor(&t, &q, tkey) != fl) bad |= 16;
  }
  if (bad) fprintf(stderr, "avl: fault bits %d\n", bad);
  MN_CHECK(bad == 0);
  MN_CHECK(mn__avl_check(&t, tok));
}

/* ---- SIM placement against the first-fit scan it replaced ------------------- */

typedef struct model_range {
  uintptr_t off;
  size_t size;
  bool reserved;
  void *ptr;
} model_range;

/* Offset where a scan of the sorted ranges finds the first gap of n bytes. */
static uintptr_t model_first_fit(const model_range *r, size_t count, size_t n, size_t *pos) {
  uintptr_t cursor = 0;
  size_t i = 0;
  for (; i < count; i++) {
    if (r[i].off - cursor >= n) break;
    cursor = r[i].off + r[i].size;
  }
  *pos = i;
  return cursor;
}

/* Random raw allocations, reservations and their frees land exactly where
 * the former linear first-fit scan put them (replays and snapshots keep
 * their addresses); the device's invariants (range tree, gaps) hold after
 * every step. Runs on freshly configured devices. */
MN_TEST(range_placement_is_first_fit) {
  mn_sim_config_t c;
  MN_CHECK_OK(mn_sim_get_config(&c));
  MN_CHECK_OK(mn_sim_configure(&c)); /* fresh devices: the first range lands at the base */
  enum { MAXLIVE = 48, STEPS = 3000 };
  model_range live[MAXLIVE];
  size_t count = 0;
  const size_t g = c.granularity;
  uintptr_t base = 0;
  int bad = 0;
  for (int step = 0; step < STEPS && !bad; step++) {
    bool alloc = count == 0 || (count < MAXLIVE && rng() % 100 < 55);
    if (alloc) {
      bool reserved = rng() % 4 == 0;
      size_t n = (1 + rng() % 8) * g, pos = 0;
      void *p = NULL;
      if (reserved) MN_CHECK_OK(mn_device_va_reserve(SIM0, n, &p));
      else MN_CHECK_OK(mn_device_raw_alloc(SIM0, n - (rng() % g), &p)); /* rounded up to n */
      if (!p) {
        bad = 1;
        break;
      }
      if (!base) base = (uintptr_t)p;
      uintptr_t want = model_first_fit(live, count, n, &pos);
      if ((uintptr_t)p - base != want) bad = 2;
      memmove(&live[pos + 1], &live[pos], (count - pos) * sizeof *live);
      live[pos] = (model_range){.off = want, .size = n, .reserved = reserved, .ptr = p};
      count++;
    } else {
      size_t i = (size_t)(rng() % count);
      if (live[i].reserved) MN_CHECK_OK(mn_device_va_release(SIM0, live[i].ptr, live[i].size));
      else MN_CHECK_OK(mn_device_raw_free(SIM0, live[i].ptr));
      memmove(&live[i], &live[i + 1], (count - i - 1) * sizeof *live);
      count--;
    }
    if (mn_sim_check_invariants(SIM0) != MN_OK) {
      fprintf(stderr, "step %d: %s\n", step, mn_last_error());
      bad = 3;
    }
  }
  if (bad) fprintf(stderr, "range placement: fault %d\n", bad);
  MN_CHECK(bad == 0);
  for (size_t i = 0; i < count; i++) {
    if (live[i].reserved) MN_CHECK_OK(mn_device_va_release(SIM0, live[i].ptr, live[i].size));
    else MN_CHECK_OK(mn_device_raw_free(SIM0, live[i].ptr));
  }
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.mapped_bytes == 0 && st.live_reservations == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

/* Destroying a stream costs its own queue only: events recorded on it and
 * waits queued for it elsewhere stay valid (complete), whether they go
 * before or after the stream. */
MN_TEST(destroyed_stream_leaves_events_and_waits_complete) {
  mn_stream_t *s1 = NULL, *s2 = NULL;
  mn_event_t *e1 = NULL, *e2 = NULL;
  int ran = 0;
  MN_CHECK_OK(mn_stream_create(SIM0, &s1));
  MN_CHECK_OK(mn_stream_create(SIM0, &s2));
  MN_CHECK_OK(mn_event_create(SIM0, &e1));
  MN_CHECK_OK(mn_event_create(SIM0, &e2));
  MN_CHECK_OK(mn_stream_launch_host(s1, counter_fn, &ran));
  MN_CHECK_OK(mn_event_record(e1, s1));
  MN_CHECK_OK(mn_event_record(e2, s1));
  MN_CHECK_OK(mn_stream_wait_event(s2, e1)); /* s2 waits for s1's host function */
  MN_CHECK_OK(mn_stream_launch_host(s2, counter_fn, &ran));
  MN_CHECK(!event_done(e1) && pending(s2) == 2);
  MN_CHECK_OK(mn_stream_destroy(s1)); /* runs s1's work */
  MN_CHECK(ran == 1 && event_done(e1) && event_done(e2));
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
  MN_CHECK_OK(mn_event_synchronize(e1));
  MN_CHECK_OK(mn_event_destroy(e1));
  size_t k = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s2, 8, &k)); /* the wait is satisfied */
  MN_CHECK(k == 2 && ran == 2);
  /* waiting for an event of a destroyed stream queues nothing (it is complete) */
  MN_CHECK_OK(mn_stream_wait_event(s2, e2));
  MN_CHECK(pending(s2) == 0);
  MN_CHECK_OK(mn_event_destroy(e2)); /* the last reference: s1's memory goes */
  MN_CHECK_OK(mn_stream_destroy(s2));
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.live_streams == 0 && st.live_events == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

MN_TEST(api_argument_errors) {
  MN_CHECK_ERR(mn_sim_stream_advance(NULL, 1, NULL), MN_ERR_INVALID_ARGUMENT, "stream");
  mn_stream_t *cpu = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &cpu));
  MN_CHECK_ERR(mn_sim_stream_advance(cpu, 1, NULL), MN_ERR_INVALID_ARGUMENT, "not sim");
  MN_CHECK_ERR(mn_sim_get_stats(SIM0, NULL), MN_ERR_INVALID_ARGUMENT, "out");
  MN_CHECK_ERR(mn_sim_configure(NULL), MN_ERR_INVALID_ARGUMENT, "config");
}

/* VMM memory reaches exactly the devices granted with mn_device_mem_set_access
 * since it was mapped (as cuMemMap + cuMemSetAccess); enabling peer access
 * reaches raw memory only (as cudaDeviceEnablePeerAccess). Restores the
 * configuration main() set. (The caching allocator's grants: test_peer.) */
MN_TEST(vmm_memory_reaches_granted_peers) {
  mn_sim_config_t keep, c = mn_sim_config_default();
  MN_CHECK_OK(mn_sim_get_config(&keep));
  c.device_count = 3;
  c.capacity = (size_t)1 << 30;
  MN_CHECK_OK(mn_sim_configure(&c));
  const mn_device_t d0 = mn_device_sim(0), d1 = mn_device_sim(1), d2 = mn_device_sim(2);
  const size_t g = c.granularity;
  char *base = NULL;
  void *raw = NULL;
  MN_CHECK_OK(mn_device_va_reserve(d0, 4 * g, (void **)&base));
  MN_CHECK_OK(mn_device_raw_alloc(d0, g, &raw));
  if (!base || !raw) return;
  MN_CHECK_OK(mn_device_mem_map(d0, base, g)); /* mapped before sim:1 enables */
  MN_CHECK_OK(mn_sim_check_access(d0, d0, base, g));
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:1");
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, raw, g), MN_ERR_INVALID_ARGUMENT, "no peer access enabled");
  MN_CHECK_OK(mn_device_enable_peer_access(d1, d0));
  MN_CHECK_OK(mn_device_mem_map(d0, base + g, g)); /* mapped after */
  MN_CHECK_OK(mn_sim_check_access(d1, d0, raw, g));  /* raw memory: enabled */
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base + g, g), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_OK(mn_device_mem_set_access(d0, base, 2 * g, d1)); /* two maps in one grant */
  MN_CHECK_OK(mn_device_mem_set_access(d0, base, g, d1));     /* again: no change */
  MN_CHECK_OK(mn_sim_check_access(d1, d0, base, 2 * g));
  MN_CHECK_ERR(mn_sim_check_access(d2, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:2");
  MN_CHECK_ERR(mn_sim_check_access(d2, d0, raw, g), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:2");
  MN_CHECK_ERR(mn_sim_check_access(d0, d1, base, g), MN_ERR_INVALID_ARGUMENT, "not mapped memory of sim:1");
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base + g, 2 * g), MN_ERR_INVALID_ARGUMENT, "not mapped");
  /* bad grants change nothing */
  MN_CHECK_ERR(mn_device_mem_set_access(d0, base, g, d0), MN_ERR_INVALID_ARGUMENT, "not a peer");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, base, g, mn_device_cpu()), MN_ERR_INVALID_ARGUMENT, "not a peer");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, base, g, mn_device_sim(3)), MN_ERR_NO_DEVICE, "sim:3");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, base + g, 2 * g, d2), MN_ERR_INVALID_ARGUMENT, "not mapped");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, base + 100, g, d2), MN_ERR_INVALID_ARGUMENT, "multiples");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, raw, g, d2), MN_ERR_INVALID_ARGUMENT, "reserved range");
  MN_CHECK_ERR(mn_device_mem_set_access(d0, NULL, g, d2), MN_ERR_INVALID_ARGUMENT, "addr");
  MN_CHECK_ERR(mn_device_mem_set_access(mn_device_cpu(), base, g, d2), MN_ERR_NOT_SUPPORTED, "virtual memory");
  MN_CHECK_ERR(mn_sim_check_access(d2, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:2");
  /* unmapping forgets the grants: a new map reaches its own device only */
  MN_CHECK_OK(mn_device_mem_unmap(d0, base, 2 * g));
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not mapped");
  MN_CHECK_OK(mn_device_mem_map(d0, base, g));
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, base, g), MN_ERR_INVALID_ARGUMENT, "not granted");
  MN_CHECK_OK(mn_sim_check_access(d0, d0, base, g));
  MN_CHECK_OK(mn_device_mem_unmap(d0, base, g));
  MN_CHECK_OK(mn_device_va_release(d0, base, 4 * g));
  MN_CHECK_OK(mn_device_raw_free(d0, raw));
  MN_CHECK_OK(mn_sim_check_invariants(d0));
  MN_CHECK_OK(mn_sim_configure(&keep)); /* forgets the peers */
  MN_CHECK_OK(mn_device_raw_alloc(d0, g, &raw));
  MN_CHECK_ERR(mn_sim_check_access(d1, d0, raw, g), MN_ERR_INVALID_ARGUMENT, "not accessible from sim:1");
  MN_CHECK_OK(mn_device_raw_free(d0, raw));
}

int main(void) {
  SIM0 = mn_device_sim(0);
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = (size_t)1 << 30;
  c.device_count = 2;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "configure failed: %s\n", mn_last_error());
    return 1;
  }
  MN_RUN(config_and_properties);
  MN_RUN(raw_memory_and_capacity);
  MN_RUN(streams_run_only_when_advanced);
  MN_RUN(default_stream_and_host_functions);
  MN_RUN(events_complete_when_reached);
  MN_RUN(stream_waits_on_event);
  MN_RUN(raw_free_synchronizes_and_illegal_access_is_caught);
  MN_RUN(virtual_memory);
  MN_RUN(fault_injection);
  MN_RUN(held_stream_destroy_is_busy);
  MN_RUN(destroyed_stream_leaves_events_and_waits_complete);
  MN_RUN(avl_tree_matches_a_sorted_array);
  MN_RUN(range_placement_is_first_fit);
  MN_RUN(api_argument_errors);
  MN_RUN(vmm_memory_reaches_granted_peers);
  MN_RUN(configure_refreshes_idle_default_allocators);
  MN_RUN(configure_refused_while_busy_then_eager);
  return mn_test_finish();
}
