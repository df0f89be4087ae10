/* tests/test_skeleton.c: the walking skeleton end to end on CPU and SIM:
 * storage -> view -> fill -> copy to CPU -> read back, for every dtype (but the quantized ones: test_quant), and its errors. */
#include "mn_test.h"

static const mn_device_t *DEVS;
static int NDEVS;

/* Fills a 3x5 view of every dtype on dev with a value, copies it to the CPU
 * and checks every element's bytes equal the scalar's conversion. */
static void roundtrip_all_dtypes(mn_device_t dev) {
  const int64_t sizes[2] = {3, 5};
  for (int t = 0; t < MN_DTYPE_COUNT; t++) {
    mn_dtype dt = (mn_dtype)t;
    if (mn_dtype_is_quantized(dt)) continue; /* no fill: test_quant round-trips them */
    mn_view_t *v = NULL, *h = NULL;
    MN_CHECK_OK(mn_view_empty(dev, dt, 2, sizes, &v));
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), dt, 2, sizes, &h));
    if (!v || !h) {
      mn_view_destroy(v);
      mn_view_destroy(h);
      continue;
    }
    mn_scalar_t val = mn_dtype_is_complex(dt) ? mn_scalar_complex(1.5, -2.0) : mn_scalar_float(3.0);
    MN_CHECK_OK(mn_view_fill(v, val, NULL));
    MN_CHECK_OK(mn_view_copy(h, v, NULL));
    MN_CHECK_OK(mn_device_synchronize(dev));
    unsigned char want[16];
    MN_CHECK_OK(mn_scalar_to_bytes(val, dt, want));
    size_t item = mn_dtype_itemsize(dt);
    const unsigned char *got = mn_view_data(h);
    int bad = 0;
    for (int i = 0; i < 15; i++) bad += memcmp(got + i * item, want, item) != 0;
    MN_CHECK(bad == 0);
    if (bad) fprintf(stderr, "  dtype %s: %d wrong elements\n", mn_dtype_name(dt), bad);
    mn_view_destroy(v);
    mn_view_destroy(h);
  }
}

MN_TEST(roundtrip_every_dtype_every_device) {
  for (int i = 0; i < NDEVS; i++) roundtrip_all_dtypes(DEVS[i]);
}

MN_TEST(sim_work_is_lazy_until_synchronized) {
  mn_device_t sim = mn_device_sim(0);
  const int64_t n = 1000;
  mn_view_t *v = NULL, *h = NULL;
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(sim, &s));
  MN_CHECK_OK(mn_view_empty(sim, MN_DTYPE_INT32, 1, &n, &v));
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT32, 1, &n, &h));
  memset(mn_view_data(h), 0, 4000);
  MN_CHECK_OK(mn_view_fill(v, mn_scalar_int(-7), s));
  MN_CHECK_OK(mn_view_copy(h, v, s));
  const int32_t *out = mn_view_data(h);
  MN_CHECK(out[0] == 0 && out[999] == 0); /* queued, not run */
  size_t ran = 0;
  MN_CHECK_OK(mn_sim_stream_advance(s, 1, &ran)); /* the fill */
  MN_CHECK(ran == 1 && out[0] == 0);
  MN_CHECK_OK(mn_stream_synchronize(s)); /* the copy */
  MN_CHECK(out[0] == -7 && out[999] == -7);
  mn_view_destroy(v);
  mn_view_destroy(h);
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(storage_refcount_and_views) {
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_create(mn_device_cpu(), 64, NULL, NULL, &s));
  MN_CHECK(mn_storage_refcount(s) == 1 && mn_storage_nbytes(s) == 64 && mn_storage_data(s) != NULL);
  MN_CHECK(mn_device_equal(mn_storage_device(s), mn_device_cpu()));
  MN_CHECK(strcmp(mn_allocator_name(mn_storage_allocator(s)), "naive") == 0);
  const int64_t sizes[2] = {3, 4}, tstrides[2] = {1, 3};
  mn_view_t *a = NULL, *t = NULL;
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_INT32, 2, sizes, NULL, 0, &a));
  MN_CHECK(mn_storage_refcount(s) == 2);
  MN_CHECK(mn_view_is_contiguous(a) && mn_view_numel(a) == 12 && mn_view_stride(a, 0) == 4 &&
           mn_view_stride(a, -1) == 1 && mn_view_size(a, -2) == 3 && mn_view_size(a, 2) == -1);
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_INT32, 2, sizes, tstrides, 0, &t));
  MN_CHECK(!mn_view_is_contiguous(t));
  MN_CHECK_OK(mn_view_fill(t, mn_scalar_int(1), NULL)); /* any layout */
  MN_CHECK_OK(mn_view_fill(a, mn_scalar_int(9), NULL));
  MN_CHECK(((int32_t *)mn_view_data(t))[11] == 9); /* aliasing: one storage */
  mn_storage_release(s);                          /* views keep it alive */
  MN_CHECK(mn_storage_refcount(s) == 2);
  mn_view_destroy(a);
  MN_CHECK(mn_storage_refcount(mn_view_storage(t)) == 1);
  mn_view_destroy(t);
}

MN_TEST(view_geometry_errors) {
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_create(mn_device_sim(0), 48, NULL, NULL, &s));
  mn_view_t *v = NULL;
  const int64_t sizes[2] = {3, 4}, big[2] = {4, 4}, neg[2] = {3, -1}, negstride[2] = {-4, 1};
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 2, big, NULL, 0, &v), MN_ERR_INVALID_ARGUMENT,
               "reaches byte 64 but the storage has 48 bytes");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 2, sizes, NULL, 1, &v), MN_ERR_INVALID_ARGUMENT, "offset 1");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 2, neg, NULL, 0, &v), MN_ERR_INVALID_ARGUMENT, "negative");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 2, sizes, negstride, 0, &v), MN_ERR_INVALID_ARGUMENT,
               "stride -4 at dim 0");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 26, sizes, NULL, 0, &v), MN_ERR_INVALID_ARGUMENT, "ndim=26");
  MN_CHECK_ERR(mn_view_create(s, (mn_dtype)77, 2, sizes, NULL, 0, &v), MN_ERR_INVALID_ARGUMENT, "dtype 77");
  const int64_t huge[2] = {INT64_MAX / 2, 3};
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_INT32, 2, huge, NULL, 0, &v), MN_ERR_OVERFLOW, "overflow");
  MN_CHECK(v == NULL && mn_storage_refcount(s) == 1); /* nothing retained on failure */
  /* A 0-d view is one element; an empty view fits anywhere up to the end. */
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_INT64, 0, NULL, NULL, 5, &v));
  MN_CHECK(mn_view_numel(v) == 1 && mn_view_ndim(v) == 0 && mn_view_is_contiguous(v));
  mn_view_destroy(v);
  const int64_t empty[2] = {0, 100};
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_INT32, 2, empty, NULL, 12, &v));
  MN_CHECK(mn_view_numel(v) == 0);
  MN_CHECK_OK(mn_view_fill(v, mn_scalar_int(1), NULL));
  mn_view_destroy(v);
  /* Copies between mismatched views are refused. */
  mn_view_t *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_INT32, 2, sizes, NULL, 0, &a));
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 2, sizes, &b));
  MN_CHECK_OK(mn_view_copy(b, a, NULL)); /* casting copy_, queued on sim:0 */
  MN_CHECK_OK(mn_device_synchronize(mn_device_sim(0)));
  mn_view_destroy(b);
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT32, 2, big, &b));
  MN_CHECK_ERR(mn_view_copy(b, a, NULL), MN_ERR_INVALID_ARGUMENT, "shapes differ");
  mn_view_destroy(b);
  mn_view_destroy(a);
  mn_storage_release(s);
  mn_storage_t *none = NULL;
  MN_CHECK_ERR(mn_storage_create(mn_device_sim(0), (size_t)1 << 50, NULL, NULL, &none), MN_ERR_OUT_OF_MEMORY,
               "out of memory");
  MN_CHECK(none == NULL);
}

MN_TEST(nothing_outstanding_on_sim) {
  mn_sim_stats_t st;
  mn_allocator_t *def = NULL;
  MN_CHECK_OK(mn_allocator_get_default(mn_device_sim(0), &def));
  mn_alloc_stats_t as;
  MN_CHECK_OK(mn_allocator_get_stats(def, &as));
  MN_CHECK(as.allocation[MN_POOL_ALL].current == 0 && as.allocated_bytes[MN_POOL_ALL].current == 0);
  MN_CHECK_OK(mn_allocator_check_invariants(def));
  MN_CHECK_OK(mn_allocator_empty_cache(def)); /* the default allocator caches; give it all back */
  MN_CHECK_OK(mn_device_synchronize(mn_device_sim(0)));
  MN_CHECK_OK(mn_copy_engine_reset()); /* the copy engine's helper streams, events, staging cache */
  MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(0), &st));
  MN_CHECK(st.mapped_bytes == 0 && st.live_streams == 0 && st.live_events == 0);
  MN_CHECK(st.raw_allocs == st.raw_frees && st.illegal_accesses == 0);
  MN_CHECK_OK(mn_sim_check_invariants(mn_device_sim(0)));
}

int main(void) {
  static const mn_device_t devs[] = {{MN_DEVICE_CPU, 0}, {MN_DEVICE_SIM, 0}};
  DEVS = devs;
  NDEVS = 2;
  MN_RUN(roundtrip_every_dtype_every_device);
  MN_RUN(sim_work_is_lazy_until_synchronized);
  MN_RUN(storage_refcount_and_views);
  MN_RUN(view_geometry_errors);
  MN_RUN(nothing_outstanding_on_sim);
  return mn_test_finish();
}
