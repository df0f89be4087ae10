/* tests/test_device.c: device values and parsing, the CPU backend, the CUDA
 * backend's "no device" answer, streams/events/copies on the CPU, and argument errors. */
#include "mn_test.h"

MN_TEST(parse_and_format) {
  mn_device_t d;
  char buf[32];
  MN_CHECK_OK(mn_device_parse("cpu", &d));
  MN_CHECK(d.type == MN_DEVICE_CPU && d.index == 0);
  MN_CHECK_OK(mn_device_parse("cuda", &d));
  MN_CHECK(d.type == MN_DEVICE_CUDA && d.index == 0);
  MN_CHECK_OK(mn_device_parse("CUDA:3", &d));
  MN_CHECK(d.type == MN_DEVICE_CUDA && d.index == 3);
  MN_CHECK_OK(mn_device_parse("sim:1", &d));
  MN_CHECK(mn_device_equal(d, mn_device_sim(1)));
  MN_CHECK(strcmp(mn_device_format(d, buf, sizeof buf), "sim:1") == 0);
  MN_CHECK(strcmp(mn_device_format(mn_device_cpu(), buf, sizeof buf), "cpu") == 0);
  MN_CHECK(strcmp(mn_device_format((mn_device_t){MN_DEVICE_CPU, 1}, buf, sizeof buf), "cpu:1") == 0);
  mn_device_t keep = mn_device_sim(5);
  const char *bad[] = {"", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cpu:1", "sim:99", "cudax"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = keep;
    MN_CHECK_ERR(mn_device_parse(bad[i], &d), MN_ERR_INVALID_ARGUMENT, "cannot parse device");
    MN_CHECK(mn_device_equal(d, keep)); /* output untouched on failure */
  }
  MN_CHECK_ERR(mn_device_parse(NULL, &d), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK(strcmp(mn_device_type_name((mn_device_type)9), "invalid") == 0);
}

MN_TEST(bytes_parse) {
  size_t v = 0;
  MN_CHECK_OK(mn_bytes_parse("4096", &v));
  MN_CHECK(v == 4096);
  MN_CHECK_OK(mn_bytes_parse("512M", &v));
  MN_CHECK(v == (size_t)512 << 20);
  MN_CHECK_OK(mn_bytes_parse("80GiB", &v));
  MN_CHECK(v == (size_t)80 << 30);
  MN_CHECK_OK(mn_bytes_parse("2kb", &v));
  MN_CHECK(v == 2048);
  MN_CHECK_OK(mn_bytes_parse("1T", &v));
  MN_CHECK(v == (size_t)1 << 40);
  const char *bad[] = {"", "G", "-1", " 5", "5 G", "5X", "5GiBB", "99999999999999999999", "16777216T"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = 7;
    MN_CHECK_ERR(mn_bytes_parse(bad[i], &v), MN_ERR_INVALID_ARGUMENT, "byte count");
    MN_CHECK(v == 7);
  }
}

MN_TEST(counts_and_properties) {
  int n = -1;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CPU, &n));
  MN_CHECK(n == 1);
  MN_CHECK_OK(mn_device_count(MN_DEVICE_CUDA, &n)); /* 0 here is a normal answer */
  MN_CHECK(n >= 0);
  if (!mn_build_has_cuda()) MN_CHECK(n == 0);
  if (n == 0) {
    MN_CHECK_ERR(mn_device_check(mn_device_cuda(0)), MN_ERR_NO_DEVICE, "no device cuda:0");
    MN_CHECK(mn_device_best().type == MN_DEVICE_CPU);
    void *p = NULL;
    MN_CHECK_ERR(mn_device_raw_alloc(mn_device_cuda(0), 16, &p), MN_ERR_NO_DEVICE, "cuda:0");
  }
  MN_CHECK_ERR(mn_device_count((mn_device_type)7, &n), MN_ERR_INVALID_ARGUMENT, "invalid device type 7");
  MN_CHECK_ERR(mn_device_count(MN_DEVICE_CPU, NULL), MN_ERR_INVALID_ARGUMENT, "count");
  mn_device_props_t p;
  MN_CHECK_OK(mn_device_get_properties(mn_device_cpu(), &p));
  MN_CHECK(strcmp(p.name, "cpu") == 0 && p.total_memory > 0 && p.multiprocessors >= 1 && p.is_host_accessible);
  MN_CHECK(!p.supports_vmm && mn_device_equal(p.device, mn_device_cpu()));
  size_t f = 0, t = 0;
  MN_CHECK_OK(mn_device_mem_info(mn_device_cpu(), &f, &t));
  MN_CHECK(t > 0 && f <= t);
  MN_CHECK_ERR(mn_device_get_properties(mn_device_sim(40), &p), MN_ERR_NO_DEVICE, "sim:40");
  MN_CHECK_ERR(mn_device_get_properties((mn_device_t){MN_DEVICE_CPU, 1}, &p), MN_ERR_NO_DEVICE, "cpu");
}

/* One wording of a missing device, whoever finds it missing: the device layer
 * (mn_device_check) and the SIM device's own public calls (mn_sim_*). */
MN_TEST(missing_device_one_message) {
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_SIM, &n));
  char want[128], got[256];
  snprintf(want, sizeof want, "mn_device_check: no device sim:40 (%d sim device%s present)", n, n == 1 ? "" : "s");
  MN_CHECK_ERR(mn_device_check(mn_device_sim(40)), MN_ERR_NO_DEVICE, want);
  snprintf(got, sizeof got, "%s", mn_last_error());
  MN_CHECK_ERR(mn_sim_device_drain(mn_device_sim(40)), MN_ERR_NO_DEVICE, want);
  MN_CHECK(strcmp(got, mn_last_error()) == 0);
  MN_CHECK_ERR(mn_device_check((mn_device_t){MN_DEVICE_CPU, 1}), MN_ERR_NO_DEVICE,
               "no device cpu:1 (1 cpu device present)");
  if (!mn_build_has_cuda())
    MN_CHECK_ERR(mn_device_check(mn_device_cuda(2)), MN_ERR_NO_DEVICE,
                 "no device cuda:2 (0 cuda devices present; built without CUDA)");
}

MN_TEST(cpu_streams_events_and_copies) {
  mn_device_t cpu = mn_device_cpu();
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  MN_CHECK_OK(mn_stream_create(cpu, &s));
  MN_CHECK(mn_device_equal(mn_stream_device(s), cpu) && mn_stream_id(s) >= (1u << 20));
  MN_CHECK_OK(mn_event_create(cpu, &e));
  MN_CHECK_OK(mn_event_record(e, s));
  bool done = false;
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_stream_wait_event(s, e));
  MN_CHECK_OK(mn_event_synchronize(e));
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(done);
  char *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(cpu, 1000, (void **)&a));
  MN_CHECK_OK(mn_device_raw_alloc(cpu, 1000, (void **)&b));
  MN_CHECK((uintptr_t)a % 256 == 0);
  MN_CHECK_OK(mn_memset_async(cpu, a, 0x7f, 1000, s));
  MN_CHECK_OK(mn_memcpy_async(cpu, b, cpu, a, 1000, NULL));
  MN_CHECK(b[0] == 0x7f && b[999] == 0x7f);
  MN_CHECK_OK(mn_memcpy_async(cpu, b, cpu, a, 0, NULL)); /* zero bytes: nothing, NULLs allowed */
  MN_CHECK_OK(mn_memcpy_async(cpu, NULL, cpu, NULL, 0, NULL));
  MN_CHECK_ERR(mn_memcpy_async(cpu, NULL, cpu, a, 4, NULL), MN_ERR_INVALID_ARGUMENT, "nbytes=4");
  MN_CHECK_ERR(mn_memcpy_async(mn_device_sim(0), b, mn_device_cuda(0), a, 4, NULL), MN_ERR_NO_DEVICE,
               "cuda:0");
  MN_CHECK_OK(mn_device_raw_free(cpu, a));
  MN_CHECK_OK(mn_device_raw_free(cpu, b));
  MN_CHECK_OK(mn_device_raw_free(cpu, NULL));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_ERR(mn_stream_wrap(cpu, (void *)1, &s), MN_ERR_INVALID_ARGUMENT, "only CUDA");
}

MN_TEST(copy_stream_must_match_device) {
  mn_stream_t *sim = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_sim(0), &sim));
  char a[8] = {0}, b[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  void *d = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(mn_device_sim(0), 8, &d));
  mn_stream_t *cpu = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &cpu));
  MN_CHECK_ERR(mn_memcpy_async(mn_device_sim(0), d, mn_device_cpu(), b, 8, cpu), MN_ERR_INVALID_ARGUMENT,
               "cannot order a copy");
  /* Host-to-host copies may be ordered on a SIM stream: they run when it does. */
  MN_CHECK_OK(mn_memcpy_async(mn_device_cpu(), a, mn_device_cpu(), b, 8, sim));
  MN_CHECK(a[0] == 0);
  MN_CHECK_OK(mn_stream_synchronize(sim));
  MN_CHECK(a[0] == 1);
  MN_CHECK_OK(mn_device_raw_free(mn_device_sim(0), d));
}

MN_TEST(naive_allocator_and_defaults) {
  mn_allocator_t *a = NULL, *def = NULL, *def2 = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(mn_device_sim(0), &a));
  MN_CHECK(strcmp(mn_allocator_name(a), "naive") == 0);
  void *p = (void *)1;
  MN_CHECK_OK(mn_allocator_alloc(a, 0, NULL, &p));
  MN_CHECK(p == NULL); /* zero bytes: NULL, as PyTorch */
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK(p != NULL);
  mn_stream_t *cpu = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_cpu(), &cpu));
  MN_CHECK_ERR(mn_allocator_record_stream(a, p, cpu), MN_ERR_INVALID_ARGUMENT, "another device");
  void *q = NULL;
  MN_CHECK_ERR(mn_allocator_alloc(a, 16, cpu, &q), MN_ERR_INVALID_ARGUMENT, "stream of cpu");
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_allocator_free(a, p));
  MN_CHECK_OK(mn_allocator_free(a, NULL));
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(0), &def));
  MN_CHECK(strcmp(mn_allocator_name(def), "caching") == 0); /* devices cache; the CPU does not */
  mn_allocator_t *cpu_def = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_cpu(), &cpu_def));
  MN_CHECK(strcmp(mn_allocator_name(cpu_def), "naive") == 0);
  MN_CHECK_OK(mn_allocator_set_default(mn_device_sim(0), a));
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(0), &def2));
  MN_CHECK(def2 == a);
  MN_CHECK_ERR(mn_allocator_set_default(mn_device_cpu(), a), MN_ERR_INVALID_ARGUMENT, "another device");
  MN_CHECK_OK(mn_allocator_set_default(mn_device_sim(0), NULL));
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(0), &def2));
  MN_CHECK(def2 == def);
  MN_CHECK_ERR(mn_allocator_get_default(mn_device_cuda(5), &def2), MN_ERR_NO_DEVICE, "cuda:5");
  mn_allocator_destroy(a);
}

int main(void) {
  MN_RUN(parse_and_format);
  MN_RUN(bytes_parse);
  MN_RUN(counts_and_properties);
  MN_RUN(missing_device_one_message);
  MN_RUN(cpu_streams_events_and_copies);
  MN_RUN(copy_stream_must_match_device);
  MN_RUN(naive_allocator_and_defaults);
  return mn_test_finish();
}
