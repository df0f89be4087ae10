/* tests/test_hostfault.c: the host-memory fault sweep. Each workload (storage,
 * views and copies on CPU and SIM; the caching allocator with two streams and
 * expandable segments; save/load; safetensors; trace import; replay; graphs
 * and private pools on SIM; blocks used on many streams, the sharded, pinned
 * and stream-ordered allocators, pinned host memory, the meta device; the
 * recorder with stacks; SIM data, indexing and sharing) runs once to count
 * its host allocations (runtime/hostmem.h), then again with the 1st, 2nd,
 * ... Nth of them failing. After every faulted run: the call failed with
 * MN_ERR_OUT_OF_MEMORY and a message (or absorbed the fault and succeeded),
 * the allocator and SIM invariant checkers pass, nothing leaked (LSan's leak
 * check under ASan, else glibc's heap in use), and the same workload then
 * runs clean. The MNEMO_TRACE recorder, made once per process, is swept a
 * process per fault point. Then the sites reached are counted against the
 * sites present, read from the library's sources (hostfault_sites.c): the
 * test fails below 100%, listing every site not reached, and on any direct
 * libc allocation in the library. Single-threaded driver (faults fire on it
 * only). */
#include <malloc.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostfault_sites.h"
#include "mn_test.h"
#include "profiling/analysis.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

#if defined(__SANITIZE_ADDRESS__)
#define MN_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MN_HAVE_LSAN 1
#endif
#endif
#ifdef MN_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* The message of a workload's first failed call, kept before its cleanup
 * calls can replace it. */
static char g_fail_msg[512];

#define TRY(call)                                                        \
  do {                                                                   \
    if ((st = (call)) != MN_OK) {                                        \
      snprintf(g_fail_msg, sizeof g_fail_msg, "%s", mn_last_error());    \
      goto done;                                                         \
    }                                                                    \
  } while (0)

static char g_dir[256];

/* A workload's own result check failed (not a fault path). */
static mn_status wrong(const char *what) {
  fprintf(stderr, "  wrong result: %s\n", what);
  return MN_ERR_INTERNAL;
}
static char g_source[512];

/* ---- workloads: each frees all it made, on success and on failure ---- */

static mn_status views_on(mn_device_t dev) {
  mn_status st = MN_OK;
  const int64_t sizes[3] = {4, 6, 5}, shape2[2] = {24, 5}, big[3] = {2, 2, 6 * 5};
  const int perm[3] = {2, 0, 1};
  mn_view_t *a = NULL, *p = NULL, *c = NULL, *r = NULL, *d = NULL, *s = NULL, *e = NULL, *x = NULL, *h = NULL;
  mn_view_t *one = NULL;
  TRY(mn_view_empty(dev, MN_DTYPE_FLOAT32, 3, sizes, &a));
  TRY(mn_view_fill(a, mn_scalar_float(1.5), NULL));
  TRY(mn_view_permute(a, 3, perm, &p));
  TRY(mn_view_contiguous(p, NULL, &c));     /* a copy: a strided kernel */
  TRY(mn_view_reshape(p, 2, shape2, NULL, &r)); /* not viewable: copies */
  TRY(mn_view_to(c, dev, MN_DTYPE_FLOAT64, false, NULL, &d)); /* cast */
  TRY(mn_view_slice(a, 1, 1, 5, 2, &s));
  TRY(mn_view_clone(s, NULL, &x));
  const int64_t one_size[3] = {1, 1, 5};
  TRY(mn_view_empty(dev, MN_DTYPE_INT64, 3, one_size, &one));
  TRY(mn_view_fill(one, mn_scalar_int(3), NULL));
  TRY(mn_view_expand(one, 3, sizes, &e));
  TRY(mn_view_copy(a, e, NULL)); /* broadcast + cast */
  TRY(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 3, big, &h));
  mn_view_destroy(r);
  r = NULL;
  TRY(mn_view_reshape(a, 3, big, NULL, &r)); /* a view */
  TRY(mn_view_copy(h, r, NULL));            /* to the host */
  TRY(mn_device_synchronize(dev));
  if (((float *)mn_view_data(h))[17] != 3.0f) st = wrong("wrong value after the copies");
done:
  /* queued work (a copy that failed part way may have queued its first
   * ranges) drains before the memory goes */
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(dev));
  mn_view_destroy(a);
  mn_view_destroy(p);
  mn_view_destroy(c);
  mn_view_destroy(r);
  mn_view_destroy(d);
  mn_view_destroy(s);
  mn_view_destroy(e);
  mn_view_destroy(x);
  mn_view_destroy(h);
  mn_view_destroy(one);
  return st;
}

static mn_status w_views_cpu(void) { return views_on(mn_device_cpu()); }
static mn_status w_views_sim(void) { return views_on(mn_device_sim(0)); }

static mn_status w_caching(void) {
  mn_status st = MN_OK;
  mn_allocator_t *a = NULL;
  mn_stream_t *s1 = NULL, *s2 = NULL;
  void *p[8] = {0};
  mn_caching_config_t cfg = mn_caching_config_default();
  TRY(mn_caching_config_parse("expandable_segments:True,garbage_collection_threshold:0.8", &cfg));
  TRY(mn_caching_allocator_create(mn_device_sim(0), &cfg, &a));
  TRY(mn_stream_create(mn_device_sim(0), &s1));
  TRY(mn_stream_create(mn_device_sim(0), &s2));
  const size_t sizes[8] = {512, 1 << 20, 3 << 20, 100, 25 << 20, 4096, 2 << 20, 700};
  for (int i = 0; i < 8; i++) TRY(mn_allocator_alloc(a, sizes[i], i % 2 ? s2 : s1, &p[i]));
  TRY(mn_allocator_record_stream(a, p[1], s1));
  for (int i = 0; i < 8; i += 2) {
    TRY(mn_allocator_free(a, p[i]));
    p[i] = NULL;
  }
  char buf[4096];
  size_t need = 0;
  TRY(mn_allocator_memory_summary(a, buf, sizeof buf, &need));
  mn_snapshot_t *snap = NULL;
  TRY(mn_allocator_snapshot(a, &snap));
  mn_snapshot_free(snap);
  TRY(mn_allocator_empty_cache(a));
  TRY(mn_allocator_check_invariants(a));
done:
  for (int i = 0; i < 8; i++)
    if (p[i] && a) mn_test_ignore(mn_allocator_free(a, p[i]));
  if (s1) mn_test_ignore(mn_stream_synchronize(s1));
  if (s2) mn_test_ignore(mn_stream_synchronize(s2));
  if (a) {
    mn_status ci = mn_allocator_check_invariants(a);
    if (ci != MN_OK && st == MN_OK) st = ci;
    mn_allocator_destroy(a);
  }
  if (s1) mn_test_ignore(mn_stream_destroy(s1));
  if (s2) mn_test_ignore(mn_stream_destroy(s2));
  return st;
}

/* Three views, two sharing a storage, on dev. */
static mn_status make_views(mn_device_t dev, mn_view_t **v) {
  const int64_t sizes[2] = {3, 4};
  mn_status st = mn_view_empty(dev, MN_DTYPE_FLOAT32, 2, sizes, &v[0]);
  if (st == MN_OK) st = mn_view_fill(v[0], mn_scalar_float(2.0), NULL);
  if (st == MN_OK) st = mn_view_transpose(v[0], 0, 1, &v[1]);
  if (st == MN_OK) st = mn_view_empty(dev, MN_DTYPE_INT16, 1, sizes, &v[2]);
  if (st == MN_OK) st = mn_view_fill(v[2], mn_scalar_int(-3), NULL);
  if (st == MN_OK) st = mn_device_synchronize(dev);
  return st;
}

/* What a save/load round trip made: the views, the buffer, the two loads. */
static void free_round_trip(mn_view_t **v, void *buf, mn_named_views_t *got, mn_named_views_t *got2) {
  for (int i = 0; i < 3; i++) mn_view_destroy(v[i]);
  free(buf);
  mn_named_views_free(got);
  mn_named_views_free(got2);
}

static mn_status w_save_load(void) {
  mn_status st = MN_OK;
  mn_view_t *v[3] = {0};
  const char *names[3] = {"a", "a_t", "b"};
  void *buf = NULL;
  size_t n = 0;
  mn_named_views_t *got = NULL, *got2 = NULL;
  char path[400];
  snprintf(path, sizeof path, "%s/fault.mnemo", g_dir);
  TRY(make_views(mn_device_sim(0), v));
  TRY(mn_save_buffer(3, names, (const mn_view_t *const *)v, &buf, &n));
  TRY(mn_load_buffer(buf, n, mn_device_cpu(), &got));
  TRY(mn_save(path, 3, names, (const mn_view_t *const *)v));
  TRY(mn_load(path, mn_device_sim(0), &got2));
  TRY(mn_device_synchronize(mn_device_sim(0)));
  if (got->count != 3 || ((float *)mn_view_data(mn_named_views_find(got, "a_t")))[5] != 2.0f)
    st = wrong("loaded views differ");
done:
  free_round_trip(v, buf, got, got2);
  return st;
}

static mn_status w_safetensors(void) {
  mn_status st = MN_OK;
  mn_view_t *v[3] = {0};
  const mn_view_t *pick[2];
  const char *names[2] = {"weight", "bias"};
  void *buf = NULL;
  size_t n = 0;
  mn_named_views_t *got = NULL, *got2 = NULL;
  char path[400];
  snprintf(path, sizeof path, "%s/fault.safetensors", g_dir);
  TRY(make_views(mn_device_cpu(), v));
  pick[0] = v[0];
  pick[1] = v[2];
  const char *keys[1] = {"format"}, *vals[1] = {"pt"};
  TRY(mn_safetensors_save_buffer(2, names, pick, 1, keys, vals, &buf, &n));
  TRY(mn_safetensors_load_buffer(buf, n, mn_device_sim(0), &got));
  TRY(mn_safetensors_save(path, 2, names, pick, 1, keys, vals));
  TRY(mn_safetensors_load(path, mn_device_cpu(), &got2));
  if (got2->count != 2 || ((int16_t *)mn_view_data(mn_named_views_find(got2, "bias")))[2] != -3)
    st = wrong("loaded tensors differ");
done:
  free_round_trip(v, buf, got, got2);
  return st;
}

static mn_status w_trace_import(void) {
  mn_status st = MN_OK;
  mn_trace_t *t = NULL, *r = NULL, *u = NULL;
  char *text = NULL;
  size_t len = 0;
  char path[700];
  snprintf(path, sizeof path, "%s/tests/corpus/trace/small.trace", g_source);
  TRY(mn_trace_read(path, &t));
  TRY(mn_trace_format(t, &text, &len));
  TRY(mn_trace_parse(text, len, "again", &r));
  snprintf(path, sizeof path, "%s/tests/corpus/trace/rmm_small.csv", g_source);
  TRY(mn_trace_import_rmm_csv_file(path, &u));
  TRY(mn_trace_meta_set(u, "note", "fault sweep"));
  TRY(mn_trace_validate(u));
  /* version 4: annotations read, added and written */
  mn_trace_destroy(t);
  t = NULL;
  free(text);
  text = NULL;
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v4_annotations.trace", g_source);
  TRY(mn_trace_read(path, &t));
  mn_trace_annotation_t a = {.time_us = 1, .stage = MN_TRACE_ANNOTATION_MARK, .name = "fault sweep"};
  TRY(mn_trace_annotation_add(t, &a));
  TRY(mn_trace_format(t, &text, &len));
done:
  mn_trace_destroy(t);
  mn_trace_destroy(r);
  mn_trace_destroy(u);
  free(text);
  return st;
}

static mn_status w_replay(void) {
  mn_status st = MN_OK;
  mn_trace_t *t = NULL;
  mn_allocator_t *a = NULL;
  char path[700];
  snprintf(path, sizeof path, "%s/tests/corpus/trace/small.trace", g_source);
  TRY(mn_trace_read(path, &t));
  TRY(mn_caching_allocator_create(mn_device_sim(0), NULL, &a));
  mn_replay_result_t res;
  TRY(mn_trace_replay(t, a, NULL, &res));
  TRY(mn_allocator_check_invariants(a));
done:
  mn_trace_destroy(t);
  if (a) mn_allocator_destroy(a);
  return st;
}

static void destroy_allocator(mn_allocator_t *a) {
  if (a) mn_allocator_destroy(a);
}

/* The pinned pool, the stream-ordered pool, and a stack of adaptors
 * (tracking, statistics, limiting, tracing into a recorder) over naive. */
static mn_status w_allocators(void) {
  mn_status st = MN_OK;
  mn_device_t sim = mn_device_sim(0);
  mn_stream_t *s = NULL;
  mn_allocator_t *pin = NULL, *as = NULL, *nv = NULL, *tr = NULL, *stt = NULL, *lim = NULL, *trc = NULL;
  mn_trace_recorder_t *rec = NULL;
  mn_trace_t *t = NULL;
  void *p[6] = {0};
  FILE *null = NULL;
  char path[400];
  snprintf(path, sizeof path, "%s/fault.trace", g_dir);
  TRY(mn_stream_create(sim, &s));
  mn_pinned_config_t pc = mn_pinned_config_default();
  pc.use_host_register = true;
  TRY(mn_pinned_allocator_create(sim, &pc, &pin));
  for (int i = 0; i < 3; i++) TRY(mn_allocator_alloc(pin, (size_t)1000 << (3 * i), s, &p[i]));
  TRY(mn_allocator_record_stream(pin, p[0], s));
  for (int i = 0; i < 3; i++) {
    TRY(mn_allocator_free(pin, p[i]));
    p[i] = NULL;
  }
  TRY(mn_stream_synchronize(s));
  TRY(mn_allocator_empty_cache(pin));
  TRY(mn_async_allocator_create(sim, &as));
  for (int i = 3; i < 6; i++) TRY(mn_allocator_alloc(as, (size_t)4096 << i, s, &p[i]));
  for (int i = 3; i < 6; i++) {
    TRY(mn_allocator_free(as, p[i]));
    p[i] = NULL;
  }
  TRY(mn_stream_synchronize(s));
  TRY(mn_naive_allocator_create(sim, &nv));
  TRY(mn_tracking_adaptor_create(nv, MN_ADAPTOR_OWNS_UPSTREAM, &tr));
  nv = NULL;
  TRY(mn_statistics_adaptor_create(tr, MN_ADAPTOR_OWNS_UPSTREAM, &stt));
  tr = NULL;
  TRY(mn_limiting_adaptor_create(stt, (size_t)1 << 30, MN_ADAPTOR_OWNS_UPSTREAM, &lim));
  stt = NULL;
  TRY(mn_trace_recorder_create(64, &rec));
  TRY(mn_tracing_adaptor_create(lim, mn_trace_recorder_sink_fn, rec, MN_ADAPTOR_OWNS_UPSTREAM, &trc));
  lim = NULL;
  for (int i = 0; i < 3; i++) TRY(mn_allocator_alloc(trc, (size_t)512 << i, NULL, &p[i]));
  null = fopen("/dev/null", "w");
  if (!null) {
    st = wrong("cannot open /dev/null");
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    TRY(mn_allocator_free(trc, p[i]));
    p[i] = NULL;
  }
  TRY(mn_trace_recorder_to_trace(rec, &t));
  TRY(mn_trace_write(t, path));
done:
  for (int i = 0; i < 3; i++)
    if (p[i]) mn_test_ignore(mn_allocator_free(trc ? trc : pin, p[i]));
  for (int i = 3; i < 6; i++)
    if (p[i]) mn_test_ignore(mn_allocator_free(as, p[i]));
  if (s) mn_test_ignore(mn_stream_synchronize(s));
  if (null) fclose(null);
  mn_trace_destroy(t);
  destroy_allocator(trc);
  destroy_allocator(lim);
  destroy_allocator(stt);
  destroy_allocator(tr);
  destroy_allocator(nv);
  destroy_allocator(as);
  destroy_allocator(pin);
  mn_trace_recorder_destroy(rec);
  if (s) mn_test_ignore(mn_stream_destroy(s));
  return st;
}

/* DLPack out and back in, a file-backed storage, printing, byteswap on SIM, split. */
static mn_status w_storage_misc(void) {
  mn_status st = MN_OK;
  mn_view_t *v = NULL, *back = NULL, **parts = NULL, *sv = NULL;
  mn_storage_t *fs = NULL;
  DLManagedTensor *m = NULL;
  FILE *null = NULL;
  int nparts = 0;
  const int64_t sizes[2] = {6, 4};
  char path[400];
  snprintf(path, sizeof path, "%s/fault.bin", g_dir);
  TRY(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT32, 2, sizes, &v));
  TRY(mn_view_fill(v, mn_scalar_int(7), NULL));
  TRY(mn_view_to_dlpack(v, &m));
  TRY(mn_view_from_dlpack(m, &back));
  m = NULL; /* mnemo owns it now */
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(mn_view_data(v), 1, 96, f) != 96) {
    if (f) fclose(f);
    st = wrong("cannot write the test file");
    goto done;
  }
  fclose(f);
  TRY(mn_storage_from_file(path, false, 96, &fs));
  null = fopen("/dev/null", "w");
  if (!null) {
    st = wrong("cannot open /dev/null");
    goto done;
  }
  TRY(mn_storage_print(fs, MN_DTYPE_INT32, 8, null));
  TRY(mn_view_split(back, 4, 0, &parts, &nparts));
  TRY(mn_view_to(v, mn_device_sim(0), MN_DTYPE_INT32, false, NULL, &sv));
  TRY(mn_storage_byteswap(mn_view_storage(sv), 4, NULL));
  TRY(mn_device_synchronize(mn_device_sim(0)));
done:
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(mn_device_sim(0)));
  if (m && m->deleter) m->deleter(m);
  if (null) fclose(null);
  mn_view_list_destroy(parts, nparts);
  mn_view_destroy(v);
  mn_view_destroy(back);
  mn_view_destroy(sv);
  if (fs) mn_storage_release(fs);
  return st;
}

/* Ends a capture a failed workload left open on s (the graph, if any, destroyed). */
static void end_open_capture(mn_stream_t *s) {
  mn_capture_status cs = MN_CAPTURE_NONE;
  if (!s || mn_stream_capture_status(s, &cs, NULL) != MN_OK || cs == MN_CAPTURE_NONE) return;
  mn_graph_t *g = NULL;
  mn_test_ignore(mn_stream_end_capture(s, &g));
  if (g) mn_test_ignore(mn_graph_destroy(g));
}

static void on_segment(void *user, const mn_segment_info_t *info) {
  (void)info;
  (*(int *)user)++;
}
static bool on_free_memory(void *user, mn_device_t dev, size_t requested) {
  (void)user;
  (void)dev;
  (void)requested;
  return false;
}

/* Stream capture on SIM (two streams joined by events, a graph launched),
 * then a private pool of a caching allocator: used by this thread, captured
 * into, with segment and free-memory callbacks registered. */
static mn_status w_graphs(void) {
  mn_status st = MN_OK;
  mn_device_t dev = mn_device_sim(0);
  mn_stream_t *s1 = NULL, *s2 = NULL;
  mn_event_t *e = NULL;
  void *a = NULL, *b = NULL, *x = NULL, *y = NULL;
  mn_graph_t *g = NULL, *g2 = NULL;
  mn_allocator_t *c = NULL;
  mn_mempool_t *mp = NULL;
  bool used = false, cb = false, fm = false;
  int segs = 0;
  TRY(mn_stream_create(dev, &s1));
  TRY(mn_stream_create(dev, &s2));
  TRY(mn_event_create(dev, &e));
  TRY(mn_device_raw_alloc(dev, 8192, &a));
  TRY(mn_device_raw_alloc(dev, 8192, &b));
  TRY(mn_stream_begin_capture(s1));
  TRY(mn_memset_async(dev, a, 7, 8192, s1));
  TRY(mn_event_record(e, s1));
  TRY(mn_stream_wait_event(s2, e));
  TRY(mn_memcpy_async(dev, b, dev, a, 4096, s2));
  TRY(mn_memset_async(dev, (char *)b + 4096, 9, 4096, s2));
  TRY(mn_event_record(e, s2));
  TRY(mn_stream_wait_event(s1, e));
  TRY(mn_stream_end_capture(s1, &g));
  TRY(mn_graph_launch(g, s1));
  TRY(mn_graph_launch(g, s2));
  TRY(mn_stream_synchronize(s1));
  TRY(mn_stream_synchronize(s2));
  TRY(mn_graph_destroy(g));
  g = NULL;
  unsigned char check[2];
  TRY(mn_memcpy_async(mn_device_cpu(), &check[0], dev, b, 1, s1));
  TRY(mn_memcpy_async(mn_device_cpu(), &check[1], dev, (char *)b + 4096, 1, s1));
  TRY(mn_stream_synchronize(s1));
  if (check[0] != 7 || check[1] != 9) {
    st = wrong("the graph's copies");
    goto done;
  }
  TRY(mn_caching_allocator_create(dev, NULL, &c));
  TRY(mn_caching_allocator_add_segment_callback(c, on_segment, &segs));
  cb = true;
  TRY(mn_caching_allocator_add_free_memory_callback(c, on_free_memory, NULL));
  fm = true;
  TRY(mn_mempool_create(c, NULL, &mp));
  TRY(mn_mempool_use(mp));
  used = true;
  TRY(mn_allocator_alloc(c, 3 << 20, s1, &x));
  TRY(mn_allocator_free(c, x));
  x = NULL;
  TRY(mn_mempool_unuse(mp));
  used = false;
  TRY(mn_mempool_capture_begin(mp, s1));
  TRY(mn_allocator_alloc(c, 1 << 20, s1, &y));
  TRY(mn_memset_async(dev, y, 1, 1 << 20, s1));
  TRY(mn_allocator_free(c, y));
  y = NULL;
  TRY(mn_mempool_capture_end(mp, s1, &g2));
  TRY(mn_graph_launch(g2, s1));
  TRY(mn_stream_synchronize(s1));
  TRY(mn_graph_destroy(g2));
  g2 = NULL;
  mn_snapshot_t *snap = NULL;
  TRY(mn_mempool_snapshot(mp, &snap));
  mn_snapshot_free(snap);
  TRY(mn_mempool_empty_cache(mp));
  TRY(mn_mempool_destroy(mp));
  mp = NULL;
  if (segs == 0) st = wrong("no segment callback");
done:
  if (st != MN_OK && mp) {
    end_open_capture(s1);
    mn_graph_t *left = NULL;
    if (mn_mempool_capture_end(mp, s1, &left) == MN_OK && left) mn_test_ignore(mn_graph_destroy(left));
    mn_clear_error();
  }
  end_open_capture(s1);
  end_open_capture(s2);
  if (s1) mn_test_ignore(mn_stream_synchronize(s1));
  if (s2) mn_test_ignore(mn_stream_synchronize(s2));
  if (g) mn_test_ignore(mn_graph_destroy(g));
  if (g2) mn_test_ignore(mn_graph_destroy(g2));
  if (used) mn_test_ignore(mn_mempool_unuse(mp));
  if (x) mn_test_ignore(mn_allocator_free(c, x));
  if (y) mn_test_ignore(mn_allocator_free(c, y));
  if (mp) mn_test_ignore(mn_mempool_destroy(mp));
  if (cb) mn_test_ignore(mn_caching_allocator_remove_segment_callback(c, on_segment, &segs));
  if (fm) mn_test_ignore(mn_caching_allocator_remove_free_memory_callback(c, on_free_memory, NULL));
  if (c) {
    mn_status ci = mn_allocator_check_invariants(c);
    if (ci != MN_OK && st == MN_OK) st = ci;
    mn_allocator_destroy(c);
  }
  if (a) mn_test_ignore(mn_device_raw_free(dev, a));
  if (b) mn_test_ignore(mn_device_raw_free(dev, b));
  if (e) mn_test_ignore(mn_event_destroy(e));
  if (s1) mn_test_ignore(mn_stream_destroy(s1));
  if (s2) mn_test_ignore(mn_stream_destroy(s2));
  return st;
}

#define NSTREAMS 10

/* Blocks used on many streams (caching, pinned, stream-ordered), the sharded
 * caching allocator, the tracking adaptor's report, pinned and registered
 * host memory on SIM, the meta device. */
static mn_status w_streams(void) {
  mn_status st = MN_OK;
  mn_device_t sim = mn_device_sim(0);
  mn_stream_t *s[NSTREAMS] = {0};
  mn_allocator_t *c = NULL, *pin = NULL, *as = NULL, *sh = NULL, *tr = NULL;
  void *pc = NULL, *pp = NULL, *pa = NULL, *ps[3] = {0}, *pt[2] = {0}, *host = NULL;
  mn_view_t *mv = NULL;
  mn_allocator_t *mc = NULL;
  void *mp = NULL;
  FILE *null = NULL;
  static char reg[8192] __attribute__((aligned(4096)));
  bool registered = false;
  for (int i = 0; i < NSTREAMS; i++) TRY(mn_stream_create(sim, &s[i]));
  TRY(mn_caching_allocator_create(sim, NULL, &c));
  TRY(mn_allocator_alloc(c, 4096, s[0], &pc));
  for (int i = 1; i < NSTREAMS; i++) TRY(mn_allocator_record_stream(c, pc, s[i]));
  TRY(mn_allocator_free(c, pc));
  pc = NULL;
  for (int i = 0; i < NSTREAMS; i++) TRY(mn_stream_synchronize(s[i]));
  TRY(mn_allocator_empty_cache(c)); /* the uses' events done: back to the allocator's pool */
  mn_pinned_config_t cfg = mn_pinned_config_default();
  TRY(mn_pinned_allocator_create(sim, &cfg, &pin));
  TRY(mn_allocator_alloc(pin, 5000, s[0], &pp));
  for (int i = 1; i < NSTREAMS; i++) TRY(mn_allocator_record_stream(pin, pp, s[i]));
  mn_snapshot_t *snap = NULL;
  TRY(mn_allocator_snapshot(pin, &snap));
  mn_snapshot_free(snap);
  TRY(mn_allocator_free(pin, pp));
  pp = NULL;
  TRY(mn_async_allocator_create(sim, &as));
  TRY(mn_allocator_alloc(as, 8192, s[0], &pa));
  for (int i = 1; i < NSTREAMS; i++) TRY(mn_allocator_record_stream(as, pa, s[i]));
  TRY(mn_allocator_free(as, pa));
  pa = NULL;
  TRY(mn_caching_allocator_create_sharded(sim, NULL, &sh));
  for (int i = 0; i < 3; i++) TRY(mn_allocator_alloc(sh, (size_t)1024 << (4 * i), s[i], &ps[i]));
  snap = NULL;
  TRY(mn_allocator_snapshot(sh, &snap));
  mn_snapshot_free(snap);
  for (int i = 0; i < 3; i++) {
    TRY(mn_allocator_free(sh, ps[i]));
    ps[i] = NULL;
  }
  mn_allocator_t *nv = NULL;
  TRY(mn_naive_allocator_create(mn_device_cpu(), &nv));
  st = mn_tracking_adaptor_create(nv, MN_ADAPTOR_OWNS_UPSTREAM, &tr);
  if (st != MN_OK) {
    mn_allocator_destroy(nv);
    goto done;
  }
  for (int i = 0; i < 2; i++) TRY(mn_allocator_alloc(tr, 100 + 50 * (size_t)i, NULL, &pt[i]));
  null = fopen("/dev/null", "w");
  if (!null) {
    st = wrong("cannot open /dev/null");
    goto done;
  }
  TRY(mn_tracking_adaptor_report(tr, null));
  TRY(mn_device_host_alloc(sim, 3000, &host));
  TRY(mn_device_host_register(sim, reg, sizeof reg));
  registered = true;
  TRY(mn_device_host_unregister(sim, reg));
  registered = false;
  TRY(mn_device_host_free(sim, host));
  host = NULL;
  const int64_t msz[2] = {1000, 1000};
  TRY(mn_view_empty(mn_device_meta(), MN_DTYPE_FLOAT32, 2, msz, &mv));
  mn_caching_config_t mcfg = mn_caching_config_default();
  TRY(mn_caching_config_parse("expandable_segments:True", &mcfg));
  TRY(mn_caching_allocator_create(mn_device_meta(), &mcfg, &mc));
  TRY(mn_allocator_alloc(mc, 5 << 20, NULL, &mp));
  TRY(mn_allocator_free(mc, mp));
  mp = NULL;
  TRY(mn_allocator_empty_cache(mc));
done:
  for (int i = 0; i < NSTREAMS; i++)
    if (s[i]) mn_test_ignore(mn_stream_synchronize(s[i]));
  if (pc) mn_test_ignore(mn_allocator_free(c, pc));
  if (pp) mn_test_ignore(mn_allocator_free(pin, pp));
  if (pa) mn_test_ignore(mn_allocator_free(as, pa));
  for (int i = 0; i < 3; i++)
    if (ps[i]) mn_test_ignore(mn_allocator_free(sh, ps[i]));
  for (int i = 0; i < 2; i++)
    if (pt[i]) mn_test_ignore(mn_allocator_free(tr, pt[i]));
  if (mp) mn_test_ignore(mn_allocator_free(mc, mp));
  if (registered) mn_test_ignore(mn_device_host_unregister(sim, reg));
  if (host) mn_test_ignore(mn_device_host_free(sim, host));
  if (null) fclose(null);
  mn_view_destroy(mv);
  mn_allocator_t *all[] = {c, pin, as, sh, tr, mc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) {
      mn_status ci = mn_allocator_check_invariants(all[i]);
      if (ci != MN_OK && ci != MN_ERR_NOT_SUPPORTED && st == MN_OK) st = ci;
      mn_allocator_destroy(all[i]);
    }
  for (int i = 0; i < NSTREAMS; i++)
    if (s[i]) mn_test_ignore(mn_stream_destroy(s[i]));
  return st;
}

/* A recorder with stacks behind the tracing adaptor, written out; a trace
 * with frames and stacks read; a two-device trace replayed (device 1, live
 * pointers asked for) and its devices listed (mn_trace_devices); a file whose
 * size stat understates (/proc). */
static mn_status w_profiling(void) {
  mn_status st = MN_OK;
  mn_trace_recorder_t *rec = NULL;
  mn_allocator_t *c = NULL, *trc = NULL, *r = NULL;
  mn_trace_t *t = NULL, *v3 = NULL, *dv = NULL, *proc = NULL;
  void *p[4] = {0}, **live = NULL;
  mn_trace_device_t *devs = NULL;
  size_t ndevs = 0;
  char path[700];
  snprintf(path, sizeof path, "%s/stacks.trace", g_dir);
  TRY(mn_trace_recorder_create(64, &rec));
  TRY(mn_trace_recorder_set_stacks(rec, 8));
  TRY(mn_caching_allocator_create(mn_device_sim(0), NULL, &c));
  TRY(mn_tracing_adaptor_create(c, mn_trace_recorder_sink_fn, rec, MN_ADAPTOR_OWNS_UPSTREAM, &trc));
  c = NULL;
  for (int i = 0; i < 4; i++) TRY(mn_allocator_alloc(trc, (size_t)700 << i, NULL, &p[i]));
  for (int i = 0; i < 4; i += 2) {
    TRY(mn_allocator_free(trc, p[i]));
    p[i] = NULL;
  }
  TRY(mn_trace_recorder_to_trace(rec, &t));
  TRY(mn_trace_write(t, path));
  TRY(mn_trace_recorder_write(rec, path));
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v3_stacks.trace", g_source);
  TRY(mn_trace_read(path, &v3));
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v3_devices.trace", g_source);
  TRY(mn_trace_read(path, &dv));
  TRY(mn_caching_allocator_create(mn_device_sim(0), NULL, &r));
  live = calloc(dv->nentries ? dv->nentries : 1, sizeof *live);
  if (!live) {
    st = wrong("no memory for the test");
    goto done;
  }
  mn_replay_options_t opt = mn_replay_options_default();
  opt.trace_device = 1;
  opt.live_ptrs = live;
  mn_replay_result_t res;
  TRY(mn_trace_replay(dv, r, &opt, &res));
  TRY(mn_allocator_check_invariants(r));
  TRY(mn_trace_devices(dv, &devs, &ndevs)); /* its two devices, as replayed */
  if (ndevs != 2) {
    st = wrong("mn_trace_devices: not the two devices of v3_devices.trace");
    goto done;
  }
  /* stat says 0 bytes, the read finds 15 ("test_hostfault\n": the same
   * every run): read whole, growing the buffer, then refused as no trace */
  st = mn_trace_read("/proc/self/comm", &proc);
  if (st == MN_ERR_FORMAT || st == MN_ERR_INVALID_ARGUMENT) {
    mn_clear_error();
    st = MN_OK;
  }
done:
  for (int i = 0; i < 4; i++)
    if (p[i]) mn_test_ignore(mn_allocator_free(trc, p[i]));
  destroy_allocator(trc);
  destroy_allocator(c);
  destroy_allocator(r);
  mn_trace_recorder_destroy(rec);
  mn_trace_destroy(t);
  mn_trace_destroy(v3);
  mn_trace_destroy(dv);
  mn_trace_destroy(proc);
  mn_trace_devices_free(devs);
  free(live);
  return st;
}

/* The reports' shared analysis (profiling/analysis.h): who holds the memory
 * at the end of a trace with stacks, grouped by stack then by first user
 * frame; a growing array; the SIM size as recorded; a growing text. */
static mn_status w_analysis(void) {
  mn_status st = MN_OK;
  mn_trace_t *t = NULL;
  size_t *live = NULL, nlive = 0, cap = 0;
  mn__holder_t *g = NULL;
  size_t ng = 0;
  mn__sbuf_t text = {0};
  char path[700];
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v3_stacks.trace", g_source);
  TRY(mn_trace_read(path, &t));
  for (size_t i = 0; i < t->nentries; i++) {
    if (t->entries[i].action != MN_TRACE_ALLOC) continue;
    if (!mn__grow(&live, nlive, &cap, sizeof *live, 1)) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, "w_analysis", "no host memory for the live list");
      goto done;
    }
    live[nlive++] = i;
  }
  if (!mn__holders(t, live, nlive, &g, &ng)) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, "w_analysis", "no host memory for the groups");
    goto done;
  }
  mn__holders_by_key(g, &ng);
  if (!ng) {
    st = wrong("mn__holders: no group");
    goto done;
  }
  mn_sim_config_t sc = mn_sim_config_default();
  const char *from = NULL;
  TRY(mn__sim_as_recorded(t, 0, &sc, &from));
  for (int k = 0; k < 40; k++) mn__sbuf_printf(&text, "%d: a line of some length to grow the text <%s>\n", k, from);
  mn__sbuf_json_str(&text, "\"quoted\" <and> \x01");
  if (!mn__sbuf_str(&text)) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, "w_analysis", "no host memory for the text");
    goto done;
  }
done:
  mn__sbuf_free(&text);
  free(g);
  free(live);
  mn_trace_destroy(t);
  return st;
}

/* The report page of one trace (mn_report_build): a trace of two devices and
 * pinned host memory (`meta host_device`) with stacks, annotations and pre
 * lines, replayed with two settings on a SIM device of a given size; a state
 * dump (`meta state_only 1`) of a device and of pinned host memory with
 * segments and mapped ranges, as recorded. The SIM device's configuration is
 * the same afterwards, on success and on failure. */
static const char report_dump[] = "mnemo-trace 3\n"
                                  "meta state_only 1\n"
                                  "meta host_device 1\n"
                                  "frame 1 3 /src/a.py f\n"
                                  "stack 1 1\n"
                                  "pre segment_alloc 0 0x200000 2097152 0 0 1\n"
                                  "pre alloc 0 0x200000 4096 4096 0 1\n"
                                  "pre alloc 0 0x201000 8192 8192 0 0\n"
                                  "pre segment_alloc 0 0x10000000 2097152 0 1 0\n"
                                  "pre alloc 0 0x10000000 1000 1024 1 1\n"
                                  "pre segment_map 0 0x20000000 2097152 0 1 0\n"
                                  "pre segment_map 0 0x20200000 2097152 0 1 0\n"
                                  "pre alloc 0 0x20000000 512 512 1 0\n"
                                  "end 8\n";

static mn_status w_report(void) {
  mn_status st = MN_OK;
  mn_trace_t *t = NULL, *dump = NULL;
  mn_report_t *r = NULL;
  mn_sim_config_t before = mn_sim_config_default(), after = mn_sim_config_default();
  char path[700];
  TRY(mn_sim_get_config(&before));
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v4_annotations.trace", g_source);
  TRY(mn_trace_read(path, &t));
  const char *configs[2] = {"", "expandable_segments:True"};
  mn_report_options_t o = mn_report_options_default();
  o.configs = configs;
  o.nconfigs = 2;
  o.capacity = (size_t)64 << 20;
  o.name = "v4_annotations.trace";
  o.output = "out.html";
  TRY(mn_report_build(t, &o, &r));
  if (!r->page || !r->page_size || !strstr(r->json, "\"devices\"") || !strstr(r->summary, "pinned host memory")) {
    st = wrong("mn_report_build: no page, or no devices in its summary");
    goto done;
  }
  mn_report_free(r);
  r = NULL;
  TRY(mn_trace_parse(report_dump, sizeof report_dump - 1, "dump.trace", &dump));
  TRY(mn_report_build(dump, NULL, &r));
  if (!strstr(r->summary, "a state dump")) {
    st = wrong("mn_report_build: the state dump not told");
    goto done;
  }
done:
  mn_report_free(r);
  mn_trace_destroy(t);
  mn_trace_destroy(dump);
  if (mn_sim_get_config(&after) != MN_OK || after.capacity != before.capacity ||
      after.device_count != before.device_count || after.granularity != before.granularity)
    st = wrong("mn_report_build: the SIM device's configuration not restored");
  return st;
}

/* Two traces with stacks compared (mn_diff_build, profiling/diff.c): the
 * text and JSON of `mnemo diff` (names holding ranks), then the page of
 * `mnemo report A B` with its default title and its summary. The SIM
 * device's configuration is the same afterwards, on success and on failure. */
static mn_status w_diff(void) {
  mn_status st = MN_OK;
  mn_trace_t *a = NULL, *b = NULL;
  mn_report_t *r = NULL, *pg = NULL;
  mn_sim_config_t before = mn_sim_config_default(), after = mn_sim_config_default();
  char path[700];
  TRY(mn_sim_get_config(&before));
  snprintf(path, sizeof path, "%s/tests/data/traces/stack_rule.trace", g_source);
  TRY(mn_trace_read(path, &a));
  snprintf(path, sizeof path, "%s/tests/corpus/trace/v3_stacks.trace", g_source);
  TRY(mn_trace_read(path, &b));
  mn_diff_options_t o = mn_diff_options_default();
  o.name_a = "run/rank0.trace";
  o.name_b = "run/rank_1.trace";
  o.top = 2;
  TRY(mn_diff_build(a, b, &o, &r));
  if (!strstr(r->summary, "rank 1") || !r->json[0] || r->page) {
    st = wrong("mn_diff_build: not the text of two ranks");
    goto done;
  }
  o = mn_diff_options_default();
  o.page = true;
  o.output = "diff.html";
  TRY(mn_diff_build(b, a, &o, &pg));
  if (!pg->page || !strstr(pg->summary, "report diff.html: A (A) vs B (B)") || !strstr(pg->json, "\"path\"")) {
    st = wrong("mn_diff_build: not the page and its summary");
    goto done;
  }
done:
  mn_report_free(r);
  mn_report_free(pg);
  mn_trace_destroy(a);
  mn_trace_destroy(b);
  if (mn_sim_get_config(&after) != MN_OK || after.capacity != before.capacity ||
      after.device_count != before.device_count || after.granularity != before.granularity)
    st = wrong("mn_diff_build: the SIM device's configuration not restored");
  return st;
}

/* On SIM: tolist, a strided view saved as safetensors, gather and
 * index_select, a block shared and opened in this same process. */
static mn_status w_sim_data(void) {
  mn_status st = MN_OK;
  mn_device_t sim = mn_device_sim(0);
  mn_view_t *v = NULL, *t = NULL, *idx = NULL, *g = NULL, *sel = NULL;
  mn_allocator_t *c = NULL;
  void *blk = NULL, *buf = NULL;
  size_t n = 0;
  mn_storage_t *imp = NULL;
  mn_share_handle_t h;
  bool have_h = false;
  const int64_t sizes[2] = {4, 6}, isz[2] = {2, 6};
  TRY(mn_view_empty(sim, MN_DTYPE_INT32, 2, sizes, &v));
  TRY(mn_view_fill(v, mn_scalar_int(5), NULL));
  mn_scalar_t items[8];
  size_t count = 0;
  TRY(mn_storage_tolist(mn_view_storage(v), MN_DTYPE_INT32, items, 8, &count));
  if (count != 8) {
    st = wrong("tolist count");
    goto done;
  }
  TRY(mn_view_transpose(v, 0, 1, &t));
  const char *names[1] = {"t"};
  const mn_view_t *pick[1] = {t};
  TRY(mn_safetensors_save_buffer(1, names, pick, 0, NULL, NULL, &buf, &n));
  TRY(mn_view_empty(sim, MN_DTYPE_INT64, 2, isz, &idx));
  TRY(mn_view_fill(idx, mn_scalar_int(1), NULL));
  TRY(mn_view_gather(v, 0, idx, NULL, &g));
  const int64_t one = 3;
  mn_view_t *i1 = NULL;
  TRY(mn_view_empty(sim, MN_DTYPE_INT64, 1, &one, &i1));
  st = mn_view_fill(i1, mn_scalar_int(2), NULL);
  if (st == MN_OK) st = mn_view_index_select(v, 1, i1, NULL, &sel);
  mn_view_destroy(i1);
  if (st != MN_OK) goto done;
  TRY(mn_device_synchronize(sim));
  TRY(mn_caching_allocator_create(sim, NULL, &c));
  TRY(mn_allocator_alloc(c, 1 << 16, NULL, &blk));
  TRY(mn_caching_share_export(c, blk, &h));
  have_h = true;
  TRY(mn_storage_from_share_handle(sim, &h, &imp));
done:
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(sim));
  if (imp) mn_storage_release(imp);
  if (have_h) mn_share_handle_close(&h);
  if (blk) mn_test_ignore(mn_allocator_free(c, blk));
  if (c) {
    mn_status ci = mn_allocator_empty_cache(c);
    if (ci == MN_OK) ci = mn_allocator_check_invariants(c);
    if (ci != MN_OK && st == MN_OK) st = ci;
    mn_allocator_destroy(c);
  }
  free(buf);
  mn_view_destroy(v);
  mn_view_destroy(t);
  mn_view_destroy(idx);
  mn_view_destroy(g);
  mn_view_destroy(sel);
  return st;
}

/* Advanced indexing (take, masked_select, index with a mask and split
 * integer indices, index_put with and without accumulate, scatter_add) and
 * quantization (per-tensor, packed, dequantize, int_repr) on dev. */
static mn_status index_quant_on(mn_device_t dev) {
  mn_status st = MN_OK;
  mn_view_t *v = NULL, *i0 = NULL, *i2 = NULL, *mask = NULL, *vals = NULL, *r[8] = {0}, *q = NULL, *q4 = NULL;
  mn_view_t *dq = NULL, *ir = NULL, *ix = NULL, *src = NULL;
  const int64_t vs[3] = {4, 3, 5}, is[1] = {2}, ms[2] = {4, 3}, xs[3] = {2, 3, 5};
  TRY(mn_view_empty(dev, MN_DTYPE_FLOAT32, 3, vs, &v));
  TRY(mn_view_fill(v, mn_scalar_float(2.5), NULL));
  TRY(mn_view_empty(dev, MN_DTYPE_INT64, 1, is, &i0));
  TRY(mn_view_fill(i0, mn_scalar_int(1), NULL));
  TRY(mn_view_empty(dev, MN_DTYPE_INT64, 1, is, &i2));
  TRY(mn_view_fill(i2, mn_scalar_int(-1), NULL));
  TRY(mn_view_empty(dev, MN_DTYPE_BOOL, 2, ms, &mask));
  TRY(mn_view_fill(mask, mn_scalar_int(1), NULL));
  TRY(mn_view_take(v, i2, NULL, &r[0]));
  mn_view_t *tail = NULL; /* broadcast against v's last two dims */
  const int64_t ts[2] = {3, 5};
  TRY(mn_view_empty(dev, MN_DTYPE_BOOL, 2, ts, &tail));
  st = mn_view_fill(tail, mn_scalar_int(1), NULL);
  if (st == MN_OK) st = mn_view_masked_select(v, tail, NULL, &r[1]);
  mn_view_destroy(tail);
  TRY(st);
  const mn_view_t *split[3] = {i0, NULL, i2}; /* not adjacent: the index shape comes first */
  TRY(mn_view_index(v, 3, split, NULL, &r[2]));
  const mn_view_t *bym[1] = {mask};
  TRY(mn_view_index(v, 1, bym, NULL, &r[3]));
  const int64_t one = 1;
  TRY(mn_view_empty(dev, MN_DTYPE_FLOAT32, 1, &one, &vals));
  TRY(mn_view_fill(vals, mn_scalar_float(1.0), NULL));
  TRY(mn_view_index_put(v, 3, split, vals, true, NULL));
  TRY(mn_view_index_put(v, 1, bym, vals, false, NULL));
  TRY(mn_view_empty(dev, MN_DTYPE_INT64, 3, xs, &ix));
  TRY(mn_view_fill(ix, mn_scalar_int(3), NULL));
  TRY(mn_view_empty(dev, MN_DTYPE_FLOAT32, 3, xs, &src));
  TRY(mn_view_fill(src, mn_scalar_float(0.5), NULL));
  TRY(mn_view_scatter_add(v, 0, ix, src, NULL));
  TRY(mn_view_quantize_per_tensor(v, 0.25, 3, MN_DTYPE_QUINT8, NULL, &q));
  TRY(mn_view_quantize_per_tensor(v, 0.5, 1, MN_DTYPE_QUINT4X2, NULL, &q4));
  TRY(mn_view_dequantize(q, NULL, &dq));
  TRY(mn_view_int_repr(q4, NULL, &ir));
  TRY(mn_device_synchronize(dev));
done:
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(dev));
  mn_view_t *all[] = {v, i0, i2, mask, vals, q, q4, dq, ir, ix, src};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mn_view_destroy(all[i]);
  for (int i = 0; i < 8; i++) mn_view_destroy(r[i]);
  return st;
}

static mn_status w_index_cpu(void) { return index_quant_on(mn_device_cpu()); }
static mn_status w_index_sim(void) { return index_quant_on(mn_device_sim(0)); }

static void free_buffer(void *ctx, void *data) {
  (void)ctx;
  free(data);
}

/* Storages of every kind a CPU build makes: created (default and own
 * allocator), wrapping caller memory, copied from it, resized, filled,
 * copied across devices, cloned, moved, pinned, converted, shared through
 * shared memory (fd and handle), formatted; snapshots and summaries printed. */
static mn_status w_storages(void) {
  mn_status st = MN_OK;
  mn_device_t sim = mn_device_sim(0), cpu = mn_device_cpu();
  mn_storage_t *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL, *g = NULL, *h = NULL, *k = NULL;
  mn_storage_t *m = NULL, *n = NULL;
  mn_allocator_t *ca = NULL;
  FILE *null = NULL;
  void *mem = NULL;
  int fd = -1; /* b's own */
  const float init[6] = {1, 2, 3, 4, 5, 6};
  TRY(mn_caching_allocator_create(sim, NULL, &ca));
  TRY(mn_storage_create(sim, 4096, ca, NULL, &a));
  TRY(mn_storage_create(cpu, 24, NULL, NULL, &b));
  mem = malloc(64);
  if (!mem) {
    st = wrong("no memory for the test");
    goto done;
  }
  TRY(mn_storage_from_buffer(cpu, mem, 64, free_buffer, NULL, &c));
  mem = NULL; /* the storage owns it */
  TRY(mn_storage_from_buffer_copy(sim, init, sizeof init, &d));
  TRY(mn_storage_resize(a, 8192, NULL));
  TRY(mn_storage_resize(a, 1024, NULL));
  TRY(mn_storage_fill(a, 0, NULL));
  TRY(mn_storage_fill_typed(b, MN_DTYPE_FLOAT32, mn_scalar_float(0.5), NULL));
  TRY(mn_storage_copy(b, d, false, NULL));
  TRY(mn_storage_clone(d, NULL, &e));
  TRY(mn_storage_to(d, cpu, false, NULL, &f));
  TRY(mn_storage_to(b, sim, true, NULL, &g));
  TRY(mn_storage_pin_memory(b, sim, &h));
  TRY(mn_storage_byteswap_dtype(e, MN_DTYPE_FLOAT32, NULL));
  TRY(mn_storage_convert(d, MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT16, NULL, &k));
  TRY(mn_storage_share_memory(b));
  TRY(mn_storage_shm_fd(b, &fd));
  TRY(mn_storage_from_shm_fd(fd, 24, &m));
  char handle[MN_SHM_HANDLE_MAX];
  TRY(mn_storage_shm_handle(b, handle, sizeof handle));
  TRY(mn_storage_from_shm_handle(handle, &n));
  TRY(mn_device_synchronize(sim));
  if (((const float *)mn_storage_data(m))[5] != 6.0f || ((const float *)mn_storage_data(f))[0] != 1.0f) {
    st = wrong("storage contents");
    goto done;
  }
  null = fopen("/dev/null", "w");
  if (!null) {
    st = wrong("cannot open /dev/null");
    goto done;
  }
  char text[256];
  TRY(mn_storage_format(k, MN_DTYPE_FLOAT16, 4, text, sizeof text, NULL));
  mn_snapshot_t *snap = NULL;
  TRY(mn_allocator_snapshot(ca, &snap));
  st = mn_snapshot_print(snap, true, null);
  mn_snapshot_free(snap);
  if (st != MN_OK) goto done;
  char sum[8192];
  size_t need = 0;
  TRY(mn_allocator_memory_summary(ca, sum, sizeof sum, &need));
done:
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(sim));
  free(mem); /* fd is b's */
  if (null) fclose(null);
  mn_storage_t *all[] = {a, b, c, d, e, f, g, h, k, m, n};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) mn_storage_release(all[i]);
  if (ca) {
    mn_status ci = mn_allocator_check_invariants(ca);
    if (ci != MN_OK && st == MN_OK) st = ci;
    mn_allocator_destroy(ca);
  }
  return st;
}

/* Saves holding quantized (packed too), strided and shared views; loaded
 * with each flag (copies, maps, unverified) on CPU and SIM; a strided view
 * saved as safetensors, loaded as copies. */
static mn_status w_files(void) {
  mn_status st = MN_OK;
  mn_device_t sim = mn_device_sim(0);
  mn_view_t *f = NULL, *q = NULL, *q4 = NULL, *t = NULL, *s = NULL;
  mn_named_views_t *got[5] = {0};
  char path[400], spath[400];
  snprintf(path, sizeof path, "%s/files.mnemo", g_dir);
  snprintf(spath, sizeof spath, "%s/files.safetensors", g_dir);
  const int64_t sizes[2] = {6, 4};
  TRY(mn_view_empty(sim, MN_DTYPE_FLOAT32, 2, sizes, &f));
  TRY(mn_view_fill(f, mn_scalar_float(1.25), NULL));
  TRY(mn_view_quantize_per_tensor(f, 0.125, 2, MN_DTYPE_QINT8, NULL, &q));
  TRY(mn_view_quantize_per_tensor(f, 0.5, 0, MN_DTYPE_QUINT2X4, NULL, &q4));
  TRY(mn_view_transpose(f, 0, 1, &t));
  TRY(mn_view_slice(f, 0, 1, 5, 2, &s));
  const char *names[5] = {"f", "q", "q4", "t", "s"};
  const mn_view_t *views[5] = {f, q, q4, t, s};
  TRY(mn_save(path, 5, names, views));
  TRY(mn_load_ex(path, mn_device_cpu(), MN_LOAD_COPY, &got[0]));
  TRY(mn_load_ex(path, mn_device_cpu(), MN_LOAD_MAP | MN_LOAD_NO_VERIFY, &got[1]));
  TRY(mn_load_ex(path, sim, MN_LOAD_COPY, &got[2]));
  const char *snames[1] = {"t"}; /* safetensors keeps no aliasing, has no quantized dtypes */
  const mn_view_t *sviews[1] = {t};
  TRY(mn_safetensors_save(spath, 1, snames, sviews, 0, NULL, NULL));
  TRY(mn_safetensors_load_ex(spath, mn_device_cpu(), MN_LOAD_COPY, &got[3]));
  TRY(mn_safetensors_load_ex(spath, sim, MN_LOAD_COPY, &got[4]));
  TRY(mn_device_synchronize(sim));
  if (mn_view_q_zero_point(mn_named_views_find(got[0], "q")) != 2) st = wrong("loaded quantization parameters");
done:
  if (st != MN_OK) mn_test_ignore(mn_device_synchronize(sim));
  for (int i = 0; i < 5; i++) mn_named_views_free(got[i]);
  mn_view_t *all[] = {f, q, q4, t, s};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mn_view_destroy(all[i]);
  return st;
}

/* A copying load of several parts (read by the kernels' pool): its table of
 * parts' results is one more allocation. */
static mn_status w_large_load(void) {
  mn_status st = MN_OK;
  mn_view_t *v = NULL;
  mn_named_views_t *got = NULL;
  char path[400];
  snprintf(path, sizeof path, "%s/large.mnemo", g_dir);
  const int64_t n = ((int64_t)9 << 20) + 3;
  TRY(mn_view_empty(mn_device_cpu(), MN_DTYPE_UINT8, 1, &n, &v));
  memset(mn_view_data(v), 0x5a, (size_t)n);
  const char *names[1] = {"x"};
  const mn_view_t *views[1] = {v};
  TRY(mn_save(path, 1, names, views));
  TRY(mn_load_ex(path, mn_device_cpu(), MN_LOAD_COPY, &got));
  if (((const unsigned char *)mn_view_data(got->views[0]))[n - 1] != 0x5a) st = wrong("the loaded bytes");
done:
  mn_named_views_free(got);
  mn_view_destroy(v);
  return st;
}

/* ---- the sweep ---- */

typedef struct workload {
  const char *name;
  mn_status (*run)(void);
} workload;

#define MAX_SITES 512
static char g_sites[MAX_SITES][160];
static int g_nsites;

static void note_site(const char *site) {
  for (int i = 0; i < g_nsites; i++)
    if (strcmp(g_sites[i], site) == 0) return;
  if (g_nsites < MAX_SITES) snprintf(g_sites[g_nsites++], sizeof g_sites[0], "%s", site);
}

/* Gives back what caches keep, so heap use compares across runs. */
static void settle(void) {
  mn_test_ignore(mn_device_synchronize(mn_device_sim(0)));
  mn_test_release_sim_caches();
  mn_test_ignore(mn_copy_engine_reset());
}

#ifndef MN_HAVE_LSAN
static size_t heap_in_use(void) {
  settle();
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks;
}
#endif

static bool checkers_pass(void) {
  mn_allocator_t *def = NULL;
  bool ok = mn_sim_check_invariants(mn_device_sim(0)) == MN_OK;
  if (mn_allocator_get_default(mn_device_sim(0), &def) == MN_OK) ok = ok && mn_allocator_check_invariants(def) == MN_OK;
  if (!ok) fprintf(stderr, "  invariants: %s\n", mn_last_error());
  return ok;
}

static int64_t g_points, g_absorbed;

#ifdef MN_HAVE_LSAN
/* LSan's leak check now, with caches emptied first; `what` says which run. */
static void leak_check(const workload *w, int64_t n, const char *site, const char *what) {
  settle();
  if (__lsan_do_recoverable_leak_check()) {
    MN_CHECK(false);
    fprintf(stderr, "  %s: %sfault %lld at %s leaked\n", w->name, what, (long long)n, site);
  }
}
#endif
#define HEAP_SLACK 256

static void sweep(const workload *w) {
  mn_test_case = w->name;
  mn_status warm = w->run(); /* lazily made state (pools, registries) exists from here on */
  MN_CHECK_OK(warm);
  if (warm != MN_OK) return;
  settle();
  mn__hostmem_fail_nth(INT64_MAX);
  MN_CHECK_OK(w->run());
  int64_t calls = mn__hostmem_calls();
  mn__hostmem_fail_nth(0);
  MN_CHECK(calls > 0);
#ifndef MN_HAVE_LSAN
  size_t base = heap_in_use();
#endif
  int64_t n = 1;
  for (;; n++) {
    settle(); /* caches empty, as in the counting run */
    mn__hostmem_fail_nth(n);
    g_fail_msg[0] = 0;
    mn_status st = w->run();
    bool fired = mn__hostmem_fault_fired();
    char site[160];
    snprintf(site, sizeof site, "%s", mn__hostmem_fault_site());
    mn__hostmem_fail_nth(0);
    if (!fired) { /* the workload makes fewer than n allocations: swept */
      MN_CHECK_OK(st);
      break;
    }
    g_points++;
    note_site(site);
    if (st == MN_OK) {
      g_absorbed++;
      if (getenv("MNEMO_HOSTFAULT_SITES")) printf("absorbed %s %s\n", w->name, site);
    } else {
      const char *msg = g_fail_msg[0] ? g_fail_msg : mn_last_error();
      if (st != MN_ERR_OUT_OF_MEMORY || strlen(msg) == 0) {
        MN_CHECK(st == MN_ERR_OUT_OF_MEMORY && strlen(msg) > 0);
        fprintf(stderr, "  %s: fault %lld at %s gave %s: \"%s\"\n", w->name, (long long)n, site, mn_status_name(st),
                msg);
      }
    }
    if (!checkers_pass()) {
      MN_CHECK(false);
      fprintf(stderr, "  %s: fault %lld at %s broke an invariant\n", w->name, (long long)n, site);
    }
#ifdef MN_HAVE_LSAN
    leak_check(w, n, site, "");
#else
    /* glibc's figure moves by a few bytes with its own bookkeeping; a leak
     * grows it point after point (ASan builds check each point exactly) */
    size_t now = heap_in_use();
    if (now > base + HEAP_SLACK) {
      MN_CHECK(now <= base + HEAP_SLACK);
      fprintf(stderr, "  %s: fault %lld at %s: heap in use %zu bytes, %zu before the sweep\n", w->name,
              (long long)n, site, now, base);
      base = now;
    }
#endif
    mn_status again = w->run(); /* the next call works */
    if (again != MN_OK) {
      MN_CHECK_OK(again);
      fprintf(stderr, "  %s: after fault %lld at %s\n", w->name, (long long)n, site);
    }
#ifdef MN_HAVE_LSAN
    leak_check(w, n, site, "the clean run after ");
#endif
  }
  MN_CHECK(n > calls); /* every allocation of the clean run was failed once */
  printf("  %-14s %5lld host allocations, all failed in turn\n", w->name, (long long)calls);
}

/* The recorder MNEMO_TRACE makes (mn_trace_recorder_global) is made once per
 * process, so each of its fault points runs in a new process: this program
 * again, with --global-recorder N. The child fails its Nth allocation in
 * making the recorder, prints "fired F site S recorder R", then records a few
 * allocations (which, with a recorder, are written to MNEMO_TRACE at exit);
 * under ASan its exit is leak-checked. */
static int global_recorder_child(int64_t n) {
  mn__hostmem_fail_nth(n);
  mn_trace_recorder_t *rec = mn_trace_recorder_global();
  bool fired = mn__hostmem_fault_fired();
  char site[160];
  snprintf(site, sizeof site, "%s", fired ? mn__hostmem_fault_site() : "-");
  mn__hostmem_fail_nth(0);
  printf("fired %d site %s recorder %d\n", fired, site, rec != NULL);
  fflush(stdout);
  mn_allocator_t *a = NULL;
  void *p = NULL;
  if (mn_caching_allocator_create(mn_device_sim(0), NULL, &a) != MN_OK ||
      mn_allocator_alloc(a, 4096, NULL, &p) != MN_OK || mn_allocator_free(a, p) != MN_OK) {
    fprintf(stderr, "child: %s\n", mn_last_error());
    return 1;
  }
  mn_allocator_destroy(a);
  return 0;
}

static void sweep_global_recorder(void) {
  mn_test_case = "global_recorder";
  char self[512], trace[400], cmd[1400], out[512];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  MN_CHECK(k > 0);
  if (k <= 0) return;
  self[k] = 0;
  snprintf(trace, sizeof trace, "%s/global.trace", g_dir);
  int64_t n = 1;
  for (;; n++) {
    unlink(trace);
    snprintf(cmd, sizeof cmd, "MNEMO_TRACE='%s' MNEMO_TRACE_STACKS=4 '%s' --global-recorder %lld 2>&1", trace, self,
             (long long)n);
    FILE *f = popen(cmd, "r");
    MN_CHECK(f != NULL);
    if (!f) return;
    int fired = -1, has_rec = -1;
    char site[160] = "", all[4096] = "";
    size_t used = 0;
    while (fgets(out, sizeof out, f)) {
      sscanf(out, "fired %d site %159s recorder %d", &fired, site, &has_rec);
      used += (size_t)snprintf(all + used, used < sizeof all ? sizeof all - used : 0, "%s", out);
      if (used >= sizeof all) used = sizeof all - 1;
    }
    int rc = pclose(f);
    if (rc != 0 || fired < 0) {
      MN_CHECK(rc == 0 && fired >= 0);
      fprintf(stderr, "  global_recorder: fault %lld: the child exited with %d:\n%s", (long long)n, rc, all);
      return;
    }
    if (!fired) {
      /* no fault left: the recorder was made and wrote the trace at exit */
      MN_CHECK(has_rec == 1 && access(trace, R_OK) == 0);
      break;
    }
    g_points++;
    note_site(site);
    if (has_rec) g_absorbed++;
    else if (!strstr(all, "mnemo: MNEMO_TRACE")) { /* no recorder: said so */
      MN_CHECK(false);
      fprintf(stderr, "  global_recorder: fault %lld at %s: no recorder and no message:\n%s", (long long)n, site, all);
    }
  }
  MN_CHECK(n > 1);
  printf("  %-14s %5lld host allocations, all failed in turn (a process each)\n", "global_recorder",
         (long long)n - 1);
}

/* Every host allocation site compiled into libmnemo was failed by the sweep:
 * the sites present are read from the sources (tests/hostfault_sites.c), the
 * reached ones are those the faults fired at. Lists every site not reached,
 * every site not counted and why, and every direct libc allocation. */
static void check_coverage(void) {
  mn_test_case = "coverage";
  hf_scan scan;
  bool read = hf_scan_sources(MN_SOURCE_DIR, MN_LIBRARY_LAYERS, MN_OPTIONAL_MODULES, MN_BUILD_SOURCES,
                              MN_BUILD_CUDA, MN_BUILD_KERNEL_EMU, &scan);
  MN_CHECK(read);
  if (!read) return;
  for (int i = 0; i < g_nsites; i++)
    if (!hf_scan_mark(&scan, g_sites[i])) {
      MN_CHECK(false);
      fprintf(stderr, "  the sweep failed an allocation at %s, where the scan of the sources found no site\n",
              g_sites[i]);
    }
  int present = 0, reached = 0, not_counted = 0;
  for (int i = 0; i < scan.nsites; i++) {
    const hf_site *t = &scan.sites[i];
    if (!t->counted) {
      not_counted++;
      printf("  not counted: %s:%d: %s\n", t->file, t->line, t->why);
      continue;
    }
    present++;
    reached += t->reached;
  }
  for (int i = 0; i < scan.nsites; i++) {
    const hf_site *t = &scan.sites[i];
    if (t->counted && !t->reached) fprintf(stderr, "  not reached: %s:%d\n", t->file, t->line);
  }
  /* a site is named by its file and line: two calls on one line would pass
   * for one, however many of them the sweep failed */
  int shared_lines = 0;
  for (int i = 0; i + 1 < scan.nsites; i++) {
    const hf_site *t = &scan.sites[i], *u = &scan.sites[i + 1];
    if (t->counted && u->counted && t->line == u->line && strcmp(t->file, u->file) == 0) {
      shared_lines++;
      fprintf(stderr, "  two host allocations on one line (put them on lines of their own): %s:%d\n", t->file,
              t->line);
    }
  }
  MN_CHECK(shared_lines == 0);
  for (int i = 0; i < scan.nlibc; i++)
    fprintf(stderr, "  calls libc directly (use runtime/hostmem.h): %s\n", scan.libc[i]);
  printf("host allocation sites in %d library files: %d present in this build, %d reached (%.1f%%); %d not "
         "counted\n",
         scan.nfiles, present, reached, present ? 100.0 * reached / present : 100.0, not_counted);
  MN_CHECK(present > 0);
  MN_CHECK(reached == present);
  MN_CHECK(scan.nlibc == 0);
  hf_scan_free(&scan);
}

/* Sweeps workload `name` in a process of its own (this program, given the
 * name): each leak check then scans that workload's heap only (one process
 * for all of them took 2.5 times as long under ASan). The child's fault
 * points and sites come back through a file; its checks print their own
 * failures and make it exit nonzero. */
static void sweep_in_child(const char *self, const char *name) {
  char out[400];
  snprintf(out, sizeof out, "%s/%s.sites", g_dir, name);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MNEMO_HOSTFAULT_SITES_OUT", out, 1);
    execl(self, self, name, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  bool ok = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  mn_test_case = name;
  if (!ok) {
    MN_CHECK(ok);
    fprintf(stderr, "  %s: its process failed (status %d; its output is above)\n", name, status);
  }
  FILE *f = fopen(out, "r");
  MN_CHECK(f != NULL);
  if (!f) return;
  char line[200];
  long long points = 0, absorbed = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "site ", 5) == 0) note_site(line + 5);
    else if (sscanf(line, "points %lld absorbed %lld", &points, &absorbed) == 2) {
      g_points += points;
      g_absorbed += absorbed;
    }
  }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--global-recorder") == 0) return global_recorder_child(atoll(argv[2]));
#ifndef MN_HAVE_LSAN
  /* glibc's per-thread cache would hide freed bytes from the heap check:
   * run again without it */
  const char *tun = getenv("GLIBC_TUNABLES");
  if (!tun || !strstr(tun, "glibc.malloc.tcache_count=0")) {
    setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
  }
#endif
  snprintf(g_source, sizeof g_source, "%s", MN_SOURCE_DIR);
  snprintf(g_dir, sizeof g_dir, "/tmp/mnemo_hostfault_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  /* a meta device of 1 GiB: an expandable segment reserves the device's
   * whole memory, page flags and all (unlimited: 2^50 bytes) */
  if (mn_device_meta_set_capacity((size_t)1 << 30) != MN_OK) {
    fprintf(stderr, "mn_device_meta_set_capacity: %s\n", mn_last_error());
    return 1;
  }
  static const workload all[] = {
      {"views_cpu", w_views_cpu}, {"views_sim", w_views_sim},     {"caching", w_caching},
      {"save_load", w_save_load}, {"safetensors", w_safetensors}, {"trace_import", w_trace_import},
      {"replay", w_replay},       {"allocators", w_allocators}, {"storage_misc", w_storage_misc},
      {"graphs", w_graphs},       {"streams", w_streams},         {"profiling", w_profiling},
      {"sim_data", w_sim_data},   {"index_cpu", w_index_cpu},     {"index_sim", w_index_sim},
      {"storages", w_storages},   {"files", w_files},             {"analysis", w_analysis},
      {"large_load", w_large_load},
      {"report", w_report},
      {"diff", w_diff},
  };
  char self[512];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[len] = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (argc == 1) sweep_in_child(self, all[i].name);
    else if (strcmp(argv[1], all[i].name) == 0) sweep(&all[i]);
  }
  if (argc == 1 || strcmp(argv[1], "global_recorder") == 0) sweep_global_recorder();
  printf("fault points swept: %lld (%lld absorbed without an error), distinct allocation sites failed: %d\n",
         (long long)g_points, (long long)g_absorbed, g_nsites);
  if (getenv("MNEMO_HOSTFAULT_SITES"))
    for (int i = 0; i < g_nsites; i++) printf("site %s\n", g_sites[i]);
  const char *sites_out = getenv("MNEMO_HOSTFAULT_SITES_OUT"); /* a child of the whole sweep */
  if (sites_out && argc > 1) {
    FILE *f = fopen(sites_out, "w");
    MN_CHECK(f != NULL);
    if (f) {
      fprintf(f, "points %lld absorbed %lld\n", (long long)g_points, (long long)g_absorbed);
      for (int i = 0; i < g_nsites; i++) fprintf(f, "site %s\n", g_sites[i]);
      MN_CHECK(fclose(f) == 0);
    }
  }
  if (argc == 1) check_coverage();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return mn_test_finish();
}
