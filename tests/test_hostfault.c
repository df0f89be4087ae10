/* tests/test_hostfault.c: the host-memory fault sweep. Each workload (storage,
 * views and copies on CPU and SIM; the caching allocator with two streams and
 * expandable segments; save/load; safetensors; trace import; replay) runs
 * once to count its host allocations (runtime/hostmem.h), then again with
 * the 1st, 2nd, ... Nth of them failing. After every faulted run: the call
 * failed with MN_ERR_OUT_OF_MEMORY and a message (or absorbed the fault and
 * succeeded), the allocator and SIM invariant checkers pass, nothing leaked
 * (LSan's leak check under ASan, else glibc's heap in use), and the same
 * workload then runs clean. Prints the fault points swept and the distinct
 * allocation sites reached. Single-threaded driver (faults fire on it only). */
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "mn_test.h"
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

#define TRY(call)                 \
  do {                            \
    if ((st = (call)) != MN_OK) { \
      goto done;                  \
    }                             \
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
    } else if (st != MN_ERR_OUT_OF_MEMORY || strlen(mn_last_error()) == 0) {
      MN_CHECK(st == MN_ERR_OUT_OF_MEMORY);
      fprintf(stderr, "  %s: fault %lld at %s gave %s: \"%s\"\n", w->name, (long long)n, site, mn_status_name(st),
              mn_last_error());
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

int main(int argc, char **argv) {
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
  static const workload all[] = {
      {"views_cpu", w_views_cpu}, {"views_sim", w_views_sim},     {"caching", w_caching},
      {"save_load", w_save_load}, {"safetensors", w_safetensors}, {"trace_import", w_trace_import},
      {"replay", w_replay},       {"allocators", w_allocators}, {"storage_misc", w_storage_misc},
  };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (argc > 1 && strcmp(argv[1], all[i].name) != 0) continue;
    sweep(&all[i]);
  }
  printf("fault points swept: %lld (%lld absorbed without an error), distinct allocation sites failed: %d\n",
         (long long)g_points, (long long)g_absorbed, g_nsites);
  if (getenv("MNEMO_HOSTFAULT_SITES"))
    for (int i = 0; i < g_nsites; i++) printf("site %s\n", g_sites[i]);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return mn_test_finish();
}
