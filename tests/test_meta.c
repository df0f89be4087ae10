/* tests/test_meta.c: the meta device (docs/STORAGE.md, "The meta device"):
 * its runtime backend (addresses never mapped, capacity, VMM, streams), every
 * view op on meta against the CPU's metadata (the chain interpreter), byte
 * counts, refusals that change nothing, checked no-op writes, the caching
 * allocator's dry run against SIM, empty_like both ways, loading to meta.
 * Single thread. */
#include <stdlib.h>
#include <string.h>

#include "mn_test.h"
#include "view_chain_cases.h"
#include "mnemo/dlpack.h"
#include "view_chain.h"

static mn_device_t CPU, SIM, META;

#define MiB ((size_t)1 << 20)

MN_TEST(device_basics) {
  mn_device_t d;
  char buf[32];
  MN_CHECK_OK(mn_device_parse("meta", &d));
  MN_CHECK(mn_device_equal(d, META) && mn_device_equal(mn_device_meta(), META));
  MN_CHECK_OK(mn_device_parse("META", &d));
  MN_CHECK_ERR(mn_device_parse("meta:1", &d), MN_ERR_INVALID_ARGUMENT, "meta");
  MN_CHECK(strcmp(mn_device_format(META, buf, sizeof buf), "meta") == 0);
  MN_CHECK(strcmp(mn_device_type_name(MN_DEVICE_META), "meta") == 0);
  int n = 0;
  MN_CHECK_OK(mn_device_count(MN_DEVICE_META, &n));
  MN_CHECK(n == 1);
  MN_CHECK_ERR(mn_device_check((mn_device_t){MN_DEVICE_META, 1}), MN_ERR_NO_DEVICE, "meta:1");
  mn_device_props_t p;
  MN_CHECK_OK(mn_device_get_properties(META, &p));
  MN_CHECK(strcmp(p.name, "meta") == 0 && !p.is_host_accessible && p.supports_vmm && p.alloc_granularity == 2 * MiB);
  MN_CHECK(p.total_memory == (size_t)1 << 50);
  /* streams and events: always complete */
  mn_stream_t *s = NULL;
  mn_event_t *e = NULL;
  bool done = false;
  MN_CHECK_OK(mn_stream_create(META, &s));
  MN_CHECK_OK(mn_event_create(META, &e));
  MN_CHECK_OK(mn_event_record(e, s));
  MN_CHECK_OK(mn_event_query(e, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_stream_query(s, &done));
  MN_CHECK(done);
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK_OK(mn_device_synchronize(META));
  MN_CHECK_OK(mn_event_destroy(e));
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(raw_memory_is_never_mapped) {
  size_t free0 = 0, total = 0, free1 = 0;
  MN_CHECK_OK(mn_device_mem_info(META, &free0, &total));
  void *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(META, 100, &a));
  MN_CHECK_OK(mn_device_raw_alloc(META, 3 * MiB, &b));
  MN_CHECK(a != NULL && b != NULL && a != b);
  MN_CHECK(((uintptr_t)a >> 62) == 1); /* outside every user address space */
  MN_CHECK_OK(mn_device_mem_info(META, &free1, &total));
  MN_CHECK(free0 - free1 == 2 * MiB + 4 * MiB); /* granules, as SIM */
  char host[8] = {0};
  MN_CHECK_ERR(mn_memcpy_async(mn_device_cpu(), host, META, a, 8, NULL), MN_ERR_NOT_SUPPORTED, "no bytes");
  MN_CHECK_ERR(mn_memset_async(META, a, 0, 8, NULL), MN_ERR_NOT_SUPPORTED, "no bytes");
  MN_CHECK_ERR(mn_device_raw_free(META, (char *)a + 8), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK_OK(mn_device_raw_free(META, a));
  MN_CHECK_ERR(mn_device_raw_free(META, a), MN_ERR_INVALID_ARGUMENT, "not a live raw allocation");
  MN_CHECK_OK(mn_device_raw_free(META, b));
  MN_CHECK_OK(mn_device_mem_info(META, &free1, &total));
  MN_CHECK(free1 == free0);
  /* VMM: reserve, map, unmap, release */
  void *base = NULL;
  MN_CHECK_OK(mn_device_va_reserve(META, 8 * MiB, &base));
  MN_CHECK_OK(mn_device_mem_map(META, (char *)base + 2 * MiB, 4 * MiB));
  MN_CHECK_ERR(mn_device_mem_map(META, (char *)base + 4 * MiB, 2 * MiB), MN_ERR_INVALID_STATE, "already mapped");
  MN_CHECK_OK(mn_device_mem_info(META, &free1, &total));
  MN_CHECK(free0 - free1 == 4 * MiB);
  MN_CHECK_ERR(mn_device_va_release(META, base, 8 * MiB), MN_ERR_INVALID_STATE, "mapped pages");
  MN_CHECK_ERR(mn_device_mem_unmap(META, base, 2 * MiB), MN_ERR_INVALID_ARGUMENT, "not mapped");
  MN_CHECK_OK(mn_device_mem_unmap(META, (char *)base + 2 * MiB, 4 * MiB));
  MN_CHECK_OK(mn_device_va_release(META, base, 8 * MiB));
  /* capacity: OOM beyond it, BUSY when more is held */
  MN_CHECK_OK(mn_device_meta_set_capacity(4 * MiB));
  MN_CHECK_OK(mn_device_raw_alloc(META, 3 * MiB, &a));
  MN_CHECK_ERR(mn_device_raw_alloc(META, 1, &b), MN_ERR_OUT_OF_MEMORY, "meta out of memory");
  MN_CHECK_ERR(mn_device_meta_set_capacity(2 * MiB), MN_ERR_BUSY, "held");
  mn_device_props_t p;
  MN_CHECK_OK(mn_device_get_properties(META, &p));
  MN_CHECK(p.total_memory == 4 * MiB);
  MN_CHECK_OK(mn_device_raw_free(META, a));
  MN_CHECK_OK(mn_device_meta_set_capacity(0));
}

/* Chains covering every view op: test_views' and more. */
static const char *const CHAINS[] = {
    MN_VIEW_CHAINS_EVERY_OP,
    "arange 12 | as_strided 3,3 3,1 5",
    "arange 12 | view 3 4 | t | flatten",
    "arange 12 float32 | view 3 4 | copy 5 float64",
    "full 300 2 3 int8",
    "ones 2 3 bfloat16 | unsqueeze 1 | expand 2 4 3 | t",
    "arange 4 | unsqueeze 0 | copy_self",
    "arange 6 | fill 300 | to int8",
    "arange 6 int8 | fill 300",
    "arange 12 | view 3 4 | view 5 2",
    "arange 24 | view 1 2 3 4 | permute 0 2 3 1 | contiguous | permute 0 3 1 2",
    "arange 48 | view 1 2 2 3 4 | permute 0 2 3 4 1 | contiguous | permute 0 4 1 2 3 | clone",
    "arange 24 | view 2 3 4 | select 3 0",
    "arange 24 | view 2 3 4 | transpose 0 5",
    "arange 24 | view 2 3 4 | unfold 2 2 1 | diagonal 0 0 3",
};

/* The JSON of a chain without its "values" (metadata only). */
static void strip_values(char *json) {
  char *v = strstr(json, ", \"values\": ");
  if (v) strcpy(v, "}");
}

MN_TEST(every_view_op_meta_equals_cpu_metadata) {
  int n = (int)(sizeof CHAINS / sizeof *CHAINS);
  for (int i = 0; i < n; i++) {
    char *a = NULL, *b = NULL, *c = NULL;
    mn_status sa = mn_chain_run(CHAINS[i], CPU, &a);
    mn_status sb = mn_chain_run(CHAINS[i], META, &b);
    /* the same chain created on the CPU and moved to meta first */
    char line[512];
    const char *bar = strchr(CHAINS[i], '|');
    if (bar)
      snprintf(line, sizeof line, "%.*s| to meta %s", (int)(bar - CHAINS[i]), CHAINS[i], bar);
    else
      snprintf(line, sizeof line, "%s | to meta", CHAINS[i]);
    mn_status sc = mn_chain_run(line, CPU, &c);
    if (strstr(line, "copy_self")) { /* its root stays on the CPU there: no overlap with the meta view */
      sc = sb;
      free(c);
      c = strdup(b);
    }
    MN_CHECK(sa != MN_ERR_INTERNAL && sa != MN_ERR_FORMAT && sa == sb && sb == sc);
    if (sb == MN_OK) MN_CHECK(strstr(b, "\"values\": null}") != NULL);
    strip_values(a);
    strip_values(b);
    strip_values(c);
    bool same = sa == MN_OK ? strcmp(a, b) == 0 && strcmp(b, c) == 0 : true;
    MN_CHECK(same);
    if (sa != sb || sb != sc || !same)
      fprintf(stderr, "chain %s\n  cpu:  %s\n  meta: %s\n  to meta: %s\n", CHAINS[i], a, b, c);
    free(a);
    free(b);
    free(c);
  }
}

MN_TEST(byte_counts_equal_the_cpu) {
  static const struct {
    int ndim;
    int64_t sizes[4], strides[4];
    mn_dtype dt;
  } cases[] = {
      {2, {3, 4}, {4, 1}, MN_DTYPE_FLOAT32},   {2, {3, 4}, {1, 3}, MN_DTYPE_FLOAT64},
      {3, {2, 3, 5}, {30, 10, 2}, MN_DTYPE_INT16}, {1, {0}, {1}, MN_DTYPE_COMPLEX128},
      {0, {0}, {0}, MN_DTYPE_BOOL},            {2, {7, 9}, {0, 1}, MN_DTYPE_BFLOAT16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mn_view_t *c = NULL, *m = NULL;
    MN_CHECK_OK(mn_view_empty_strided(CPU, cases[i].dt, cases[i].ndim, cases[i].sizes, cases[i].strides, &c));
    MN_CHECK_OK(mn_view_empty_strided(META, cases[i].dt, cases[i].ndim, cases[i].sizes, cases[i].strides, &m));
    if (!c || !m) continue;
    MN_CHECK(mn_storage_nbytes(mn_view_storage(c)) == mn_storage_nbytes(mn_view_storage(m)));
    MN_CHECK(mn_storage_data(mn_view_storage(m)) == NULL && mn_view_data(m) == NULL);
    MN_CHECK(mn_view_nbytes(c) == mn_view_nbytes(m));
    MN_CHECK(mn_device_equal(mn_view_device(m), META) && mn_storage_is_resizable(mn_view_storage(m)));
    mn_view_destroy(c);
    mn_view_destroy(m);
  }
  /* the default allocator of meta counts bytes */
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_allocator_get_default(META, &a));
  mn_storage_t *s = NULL;
  size_t f0 = 0, f1 = 0, t = 0;
  MN_CHECK_OK(mn_device_mem_info(META, &f0, &t));
  MN_CHECK_OK(mn_storage_create(META, 5 * MiB, NULL, NULL, &s));
  MN_CHECK_OK(mn_device_mem_info(META, &f1, &t));
  MN_CHECK(f0 - f1 == 6 * MiB);
  MN_CHECK(s && mn_storage_allocator(s) == a && mn_storage_data(s) == NULL && mn_storage_nbytes(s) == 5 * MiB);
  /* resize, clone, to(meta), fill: sizes only */
  MN_CHECK_OK(mn_storage_resize(s, 9 * MiB, NULL));
  MN_CHECK(mn_storage_nbytes(s) == 9 * MiB && mn_storage_data(s) == NULL);
  MN_CHECK_OK(mn_device_mem_info(META, &f1, &t));
  MN_CHECK(f0 - f1 == 10 * MiB);
  mn_storage_t *c = NULL, *same = NULL;
  MN_CHECK_OK(mn_storage_clone(s, NULL, &c));
  MN_CHECK(c && mn_storage_nbytes(c) == 9 * MiB && mn_storage_data(c) == NULL);
  MN_CHECK_OK(mn_storage_to(s, META, false, NULL, &same));
  MN_CHECK(same == s);
  mn_storage_release(same);
  MN_CHECK_OK(mn_storage_fill(s, 7, NULL));
  MN_CHECK_OK(mn_storage_fill_typed(s, MN_DTYPE_FLOAT32, mn_scalar_float(1.5), NULL));
  MN_CHECK_OK(mn_storage_copy(c, s, false, NULL));
  char text[256];
  MN_CHECK_OK(mn_storage_format(s, MN_DTYPE_FLOAT32, 10, text, sizeof text, NULL));
  MN_CHECK(strstr(text, "storage(meta, 9437184 bytes") == text && strstr(text, "2359296 items, no data") != NULL);
  mn_storage_release(c);
  mn_storage_release(s);
  MN_CHECK_OK(mn_device_mem_info(META, &f1, &t));
  MN_CHECK(f1 == f0);
}

MN_TEST(refusals_change_nothing) {
  mn_view_t *m = NULL, *c = NULL, *r = NULL;
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_INT32, 2, (int64_t[]){2, 3}, &m));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT32, 2, (int64_t[]){2, 3}, &c));
  if (!m || !c) return;
  for (int i = 0; i < 6; i++) ((int32_t *)mn_view_data(c))[i] = i;
  mn_storage_t *s = mn_view_storage(m);
  long refs = mn_storage_refcount(s);
  /* out of meta */
  MN_CHECK_ERR(mn_view_to(m, CPU, MN_DTYPE_INT32, false, NULL, &r), MN_ERR_NOT_SUPPORTED,
               "Cannot copy out of meta tensor; no data!");
  MN_CHECK_ERR(mn_view_to(m, SIM, MN_DTYPE_FLOAT32, false, NULL, &r), MN_ERR_NOT_SUPPORTED, "no data");
  MN_CHECK(r == NULL);
  MN_CHECK_ERR(mn_view_copy(c, m, NULL), MN_ERR_NOT_SUPPORTED, "Cannot copy out of meta tensor");
  MN_CHECK_ERR(mn_copy_view(c, m, NULL, false), MN_ERR_NOT_SUPPORTED, "Cannot copy out of meta tensor");
  MN_CHECK_ERR(mn_copy_view(m, c, NULL, false), MN_ERR_NOT_SUPPORTED, "no bytes to copy into");
  mn_storage_t *out = NULL;
  MN_CHECK_ERR(mn_storage_to(s, CPU, false, NULL, &out), MN_ERR_NOT_SUPPORTED, "Cannot copy out of meta tensor");
  MN_CHECK_ERR(mn_storage_copy(mn_view_storage(c), s, false, NULL), MN_ERR_NOT_SUPPORTED, "no data");
  for (int i = 0; i < 6; i++) MN_CHECK(((int32_t *)mn_view_data(c))[i] == i);
  /* reads of bytes */
  mn_scalar_t vals[6];
  size_t count = 99;
  MN_CHECK_ERR(mn_storage_tolist(s, MN_DTYPE_INT32, vals, 6, &count), MN_ERR_NOT_SUPPORTED, "no data");
  MN_CHECK(count == 99);
  MN_CHECK_ERR(mn_storage_byteswap(s, 4, NULL), MN_ERR_NOT_SUPPORTED, "meta device");
  MN_CHECK_ERR(mn_storage_convert(s, MN_DTYPE_INT32, MN_DTYPE_FLOAT64, NULL, &out), MN_ERR_NOT_SUPPORTED, "meta");
  MN_CHECK_ERR(mn_storage_share_memory(s), MN_ERR_NOT_SUPPORTED, "meta device");
  mn_ipc_handle_t h;
  MN_CHECK_ERR(mn_storage_ipc_export(s, &h), MN_ERR_NOT_SUPPORTED, "meta device");
  const char *names[] = {"m"};
  const mn_view_t *views[] = {m};
  void *data = NULL;
  size_t size = 0;
  MN_CHECK_ERR(mn_save_buffer(1, names, views, &data, &size), MN_ERR_NOT_SUPPORTED, "meta device");
  MN_CHECK_ERR(mn_safetensors_save_buffer(1, names, views, 0, NULL, NULL, &data, &size), MN_ERR_NOT_SUPPORTED, "meta device");
  MN_CHECK(data == NULL);
  DLManagedTensor *dl = NULL;
  MN_CHECK_ERR(mn_view_to_dlpack(m, &dl), MN_ERR_NOT_SUPPORTED, "Cannot pack tensors on meta");
  MN_CHECK(dl == NULL);
  MN_CHECK_ERR(mn_storage_from_buffer(META, mn_view_data(c), 24, NULL, NULL, &out), MN_ERR_INVALID_ARGUMENT,
               "no data");
  /* nothing changed */
  MN_CHECK(mn_storage_refcount(s) == refs && mn_storage_nbytes(s) == 24 && mn_storage_data(s) == NULL &&
           mn_storage_get_kind(s) == MN_STORAGE_ALLOCATOR && !mn_storage_is_shared(s));
  mn_view_destroy(m);
  mn_view_destroy(c);
}

MN_TEST(writes_into_meta_are_checked_then_nothing) {
  mn_view_t *m = NULL, *c = NULL, *e = NULL, *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_FLOAT32, 2, (int64_t[]){2, 3}, &m));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT64, 1, (int64_t[]){3}, &c));
  if (!m || !c) return;
  MN_CHECK_OK(mn_view_copy(m, c, NULL)); /* broadcast from the CPU, cast: fine, nothing read */
  MN_CHECK_OK(mn_view_fill(m, mn_scalar_float(2.5), NULL));
  MN_CHECK_OK(mn_view_zero(m, NULL));
  mn_view_t *bad = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT64, 1, (int64_t[]){4}, &bad));
  MN_CHECK_ERR(mn_view_copy(m, bad, NULL), MN_ERR_INVALID_ARGUMENT, "cannot be broadcast");
  mn_view_destroy(bad);
  /* internal overlap */
  MN_CHECK_OK(mn_view_slice(m, 1, 0, 1, 1, &a));
  MN_CHECK_OK(mn_view_expand(a, 2, (int64_t[]){2, 3}, &e));
  MN_CHECK_ERR(mn_view_fill(e, mn_scalar_int(1), NULL), MN_ERR_INVALID_ARGUMENT, "more than one element");
  MN_CHECK_ERR(mn_view_copy(e, c, NULL), MN_ERR_INVALID_ARGUMENT, "more than one element");
  mn_view_destroy(a);
  /* partial overlap inside one meta storage (the offsets tell, no address) */
  mn_view_t *flat = NULL;
  MN_CHECK_OK(mn_view_view(m, 1, (int64_t[]){6}, &flat));
  MN_CHECK_OK(mn_view_slice(flat, 0, 1, 5, 1, &a));
  MN_CHECK_OK(mn_view_slice(flat, 0, 0, 4, 1, &b));
  mn_view_destroy(flat);
  MN_CHECK_ERR(mn_view_copy(a, b, NULL), MN_ERR_INVALID_ARGUMENT, "some elements of the input tensor");
  MN_CHECK_OK(mn_view_copy(a, a, NULL));
  mn_view_t *row0 = NULL, *row1 = NULL;
  MN_CHECK_OK(mn_view_select(m, 0, 0, &row0));
  MN_CHECK_OK(mn_view_select(m, 0, 1, &row1));
  MN_CHECK_OK(mn_view_copy(row0, row1, NULL)); /* disjoint */
  /* an out-of-range value */
  mn_view_t *i8 = NULL;
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_INT8, 1, (int64_t[]){3}, &i8));
  MN_CHECK_ERR(mn_view_fill(i8, mn_scalar_int(300), NULL), MN_ERR_INVALID_ARGUMENT, "overflow");
  mn_view_t *vs[] = {m, c, e, a, b, row0, row1, i8};
  for (int k = 0; k < 8; k++) mn_view_destroy(vs[k]);
}

/* A sequence of storages through a caching allocator on `dev` (cfg); the
 * reserved and allocated bytes after it and after emptying the cache. */
static void caching_sequence(mn_device_t dev, const mn_caching_config_t *cfg, int64_t out[5]) {
  static const size_t sizes[] = {512, 1000, 1 << 20, 3 << 20, 100, 12 << 20, 7 << 20, 25 << 20, 4096, 2 << 20};
  enum { N = sizeof sizes / sizeof *sizes };
  mn_allocator_t *a = NULL;
  mn_storage_t *s[N] = {0};
  memset(out, 0, 5 * sizeof *out);
  MN_CHECK_OK(mn_caching_allocator_create(dev, cfg, &a));
  if (!a) return;
  for (int i = 0; i < N; i++) {
    MN_CHECK_OK(mn_storage_create(dev, sizes[i], a, NULL, &s[i]));
    if (i % 3 == 2) { /* free some along the way: their blocks are reused */
      mn_storage_release(s[i - 1]);
      s[i - 1] = NULL;
    }
  }
  MN_CHECK_OK(mn_storage_resize(s[0], 5 << 20, NULL));
  mn_alloc_stats_t st;
  MN_CHECK_OK(mn_allocator_get_stats(a, &st));
  out[0] = st.reserved_bytes[MN_POOL_ALL].current;
  out[1] = st.reserved_bytes[MN_POOL_ALL].peak;
  out[2] = st.allocated_bytes[MN_POOL_ALL].current;
  for (int i = 0; i < N; i++) mn_storage_release(s[i]);
  MN_CHECK_OK(mn_allocator_empty_cache(a));
  MN_CHECK_OK(mn_allocator_get_stats(a, &st));
  out[3] = st.reserved_bytes[MN_POOL_ALL].current;
  out[4] = st.num_device_alloc;
  mn_allocator_destroy(a);
}

MN_TEST(caching_dry_run_reserves_what_sim_does) {
  for (int expandable = 0; expandable < 2; expandable++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    cfg.expandable_segments = expandable;
    int64_t meta[5], sim[5];
    caching_sequence(META, &cfg, meta);
    caching_sequence(SIM, &cfg, sim);
    MN_CHECK(meta[0] > 0 && meta[2] > 0 && meta[3] == 0 && meta[4] > 0);
    MN_CHECK(memcmp(meta, sim, sizeof meta) == 0);
    if (memcmp(meta, sim, sizeof meta) != 0)
      fprintf(stderr, "expandable=%d meta %lld %lld %lld %lld %lld, sim %lld %lld %lld %lld %lld\n", expandable,
              (long long)meta[0], (long long)meta[1], (long long)meta[2], (long long)meta[3], (long long)meta[4],
              (long long)sim[0], (long long)sim[1], (long long)sim[2], (long long)sim[3], (long long)sim[4]);
  }
  /* OOM at the capacity, as a full device: the allocator frees its cache and retries, then fails */
  for (int expandable = 0; expandable < 2; expandable++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    cfg.expandable_segments = expandable;
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(mn_device_meta_set_capacity(64 * MiB));
    MN_CHECK_OK(mn_caching_allocator_create(META, &cfg, &a));
    if (!a) continue;
    mn_storage_t *x = NULL, *y = NULL, *z = NULL;
    MN_CHECK_OK(mn_storage_create(META, 40 * MiB, a, NULL, &x));
    MN_CHECK_ERR(mn_storage_create(META, 30 * MiB, a, NULL, &y), MN_ERR_OUT_OF_MEMORY, "out of memory");
    MN_CHECK(y == NULL);
    mn_storage_release(x); /* cached */
    MN_CHECK_OK(mn_storage_create(META, 50 * MiB, a, NULL, &z)); /* frees the cache and retries */
    mn_alloc_stats_t st;
    MN_CHECK_OK(mn_allocator_get_stats(a, &st));
    MN_CHECK(st.num_ooms == 1 && st.reserved_bytes[MN_POOL_ALL].current <= (int64_t)(64 * MiB));
    mn_storage_release(z);
    mn_allocator_destroy(a);
    MN_CHECK_OK(mn_device_meta_set_capacity(0));
  }
}

MN_TEST(empty_like_both_ways) {
  mn_view_t *c = NULL, *t = NULL, *m = NULL, *back = NULL, *sim = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT64, 3, (int64_t[]){2, 3, 4}, &c));
  MN_CHECK_OK(mn_view_permute(c, 3, (int[]){2, 0, 1}, &t));
  if (!t) return;
  MN_CHECK_OK(mn_view_empty_like(t, META, &m));
  MN_CHECK(m && mn_device_equal(mn_view_device(m), META) && mn_view_data(m) == NULL);
  MN_CHECK(m && mn_view_stride(m, 0) == 1 && mn_view_stride(m, 1) == 12 && mn_view_stride(m, 2) == 4);
  MN_CHECK_OK(mn_view_empty_like(m, CPU, &back)); /* the way off meta */
  MN_CHECK(back && mn_view_data(back) != NULL && mn_view_stride(back, 0) == 1 && mn_view_stride(back, 1) == 12);
  MN_CHECK(back && mn_storage_nbytes(mn_view_storage(back)) == 24 * 8);
  MN_CHECK_OK(mn_view_empty_like(m, SIM, &sim));
  MN_CHECK(sim && mn_device_equal(mn_view_device(sim), SIM) && mn_view_ndim(sim) == 3);
  MN_CHECK_ERR(mn_view_empty_like(m, (mn_device_t){MN_DEVICE_META, 3}, &c), MN_ERR_NO_DEVICE, "meta");
  /* an expanded view: dense strides, as clone */
  mn_view_t *e = NULL, *el = NULL;
  MN_CHECK_OK(mn_view_expand(m, 4, (int64_t[]){5, 4, 2, 3}, &e));
  MN_CHECK_OK(mn_view_empty_like(e, META, &el));
  MN_CHECK(el && mn_storage_nbytes(mn_view_storage(el)) == 5 * 24 * 8);
  mn_view_t *vs[] = {c, t, m, back, sim, e, el};
  for (int k = 0; k < 7; k++) mn_view_destroy(vs[k]);
}

MN_TEST(load_to_meta) {
  mn_view_t *c = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT16, 2, (int64_t[]){3, 5}, &c));
  if (!c) return;
  memset(mn_view_data(c), 1, 30);
  const char *names[] = {"w"};
  const mn_view_t *views[] = {c};
  void *data = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(1, names, views, &data, &size));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load_buffer(data, size, META, &nv));
  mn_view_t *w = nv ? mn_named_views_find(nv, "w") : NULL;
  MN_CHECK(w && mn_device_equal(mn_view_device(w), META) && mn_view_size(w, 1) == 5 && mn_view_data(w) == NULL);
  MN_CHECK(w && mn_view_dtype(w) == MN_DTYPE_INT16);
  mn_named_views_free(nv);
  free(data);
  mn_view_destroy(c);
}

int main(void) {
  CPU = mn_device_cpu();
  SIM = mn_device_sim(0);
  META = mn_device_meta();
  mn_test_configure_sim(1, (size_t)1 << 30);
  MN_RUN(device_basics);
  MN_RUN(raw_memory_is_never_mapped);
  MN_RUN(every_view_op_meta_equals_cpu_metadata);
  MN_RUN(byte_counts_equal_the_cpu);
  MN_RUN(refusals_change_nothing);
  MN_RUN(writes_into_meta_are_checked_then_nothing);
  MN_RUN(caching_dry_run_reserves_what_sim_does);
  MN_RUN(empty_like_both_ways);
  MN_RUN(load_to_meta);
  return mn_test_finish();
}
