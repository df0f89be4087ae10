/* bench/bench_storage.c: storage and file-format costs on the CPU (and cuda:0
 * when present): save/load buffers in both formats, loads of 100k-entry files
 * of each format and of a trace with 100k meta keys (the name checks are
 * linear: target < 100 ms each), share_memory, clone. Single-threaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"

#define NTENSORS 16

/* NTENSORS float32 views over one storage of `total` bytes (contiguous slices). */
static mn_status make_set(mn_device_t dev, size_t total, mn_view_t **v, mn_storage_t **out) {
  mn_storage_t *s = NULL;
  mn_status st = mn_storage_create(dev, total, NULL, NULL, &s);
  if (st != MN_OK) return st;
  st = mn_storage_fill(s, 0x3c, NULL);
  int64_t n = (int64_t)(total / 4 / NTENSORS);
  for (int i = 0; i < NTENSORS && st == MN_OK; i++) st = mn_view_create(s, MN_DTYPE_FLOAT32, 1, &n, NULL, n * i, &v[i]);
  *out = s;
  return st;
}

static const char *NAMES[NTENSORS] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7",
                                      "t8", "t9", "t10", "t11", "t12", "t13", "t14", "t15"};

/* arg: 0 mnemo format, 1 safetensors; bench arg 0: total bytes. */
static void bench_save_load(mn_bench_t *b, void *arg) {
  int safetensors = *(const int *)arg;
  size_t total = (size_t)mn_bench_arg(b, 0);
  mn_view_t *v[NTENSORS] = {0};
  mn_storage_t *s = NULL;
  if (make_set(mn_device_cpu(), total, v, &s) != MN_OK) {
    mn_bench_error(b, mn_last_error());
    return;
  }
  while (mn_bench_next(b)) {
    void *data = NULL;
    size_t size = 0;
    mn_named_views_t *nv = NULL;
    mn_status st = safetensors ? mn_safetensors_save_buffer(NTENSORS, NAMES, (const mn_view_t *const *)v, 0, NULL,
                                                            NULL, &data, &size)
                               : mn_save_buffer(NTENSORS, NAMES, (const mn_view_t *const *)v, &data, &size);
    if (st == MN_OK)
      st = safetensors ? mn_safetensors_load_buffer(data, size, mn_device_cpu(), &nv)
                       : mn_load_buffer(data, size, mn_device_cpu(), &nv);
    if (st != MN_OK) mn_bench_error(b, mn_last_error());
    mn_named_views_free(nv);
    free(data);
  }
  mn_bench_set_bytes(b, (int64_t)total);
  for (int i = 0; i < NTENSORS; i++) mn_view_destroy(v[i]);
  mn_storage_release(s);
}

/* ---- many entries: a load is linear in the file's size ---------------------------- */

#define MANY_MAX 100000

/* n one-element float32 views of one storage, named "v000000"...; the file
 * bytes of both formats. */
typedef struct many_s {
  mn_storage_t *s;
  mn_view_t *v[MANY_MAX];
  char *names[MANY_MAX];
} many_t;

static mn_status many_make(many_t *m, size_t n) {
  mn_status st = mn_storage_create(mn_device_cpu(), n * 4, NULL, NULL, &m->s);
  if (st == MN_OK) st = mn_storage_fill(m->s, 0, NULL);
  int64_t one = 1;
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    m->names[i] = malloc(24);
    if (!m->names[i]) return MN_ERR_OUT_OF_MEMORY;
    snprintf(m->names[i], 24, "v%06zu", i);
    st = mn_view_create(m->s, MN_DTYPE_FLOAT32, 1, &one, NULL, (int64_t)i, &m->v[i]);
  }
  return st;
}

static void many_free(many_t *m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    mn_view_destroy(m->v[i]);
    free(m->names[i]);
  }
  mn_storage_release(m->s);
}

/* arg: 0 mnemo format, 1 safetensors; bench arg 0: entries. Times the load
 * of a file of that many views (tensors) from memory: the mnemo file's views
 * share one storage, the safetensors file's each get their own (its format's
 * rule), so the latter also times n storage creations. */
static void bench_load_many(mn_bench_t *b, void *arg) {
  int safetensors = *(const int *)arg;
  size_t n = (size_t)mn_bench_arg(b, 0);
  many_t *m = calloc(1, sizeof *m);
  void *data = NULL;
  size_t size = 0;
  mn_status st = m ? many_make(m, n) : MN_ERR_OUT_OF_MEMORY;
  const char *const *names = (const char *const *)m->names;
  const mn_view_t *const *views = (const mn_view_t *const *)m->v;
  if (st == MN_OK)
    st = safetensors ? mn_safetensors_save_buffer(n, names, views, 0, NULL, NULL, &data, &size)
                     : mn_save_buffer(n, names, views, &data, &size);
  if (st != MN_OK) {
    mn_bench_error(b, mn_last_error());
  } else {
    while (mn_bench_next(b)) {
      mn_named_views_t *nv = NULL;
      st = safetensors ? mn_safetensors_load_buffer(data, size, mn_device_cpu(), &nv)
                       : mn_load_buffer(data, size, mn_device_cpu(), &nv);
      if (st != MN_OK) mn_bench_error(b, mn_last_error());
      mn_bench_pause(b); /* the load is timed, not freeing what it made */
      mn_named_views_free(nv);
      mn_bench_resume(b);
    }
    mn_bench_set_items(b, (int64_t)n);
    mn_bench_set_bytes(b, (int64_t)size);
  }
  free(data);
  if (m) many_free(m, n);
  free(m);
}

/* A trace of `n` meta keys (bench arg 0) parsed from memory. */
static void bench_trace_parse_meta(mn_bench_t *b, void *arg) {
  (void)arg;
  size_t n = (size_t)mn_bench_arg(b, 0), cap = 32 + n * 22, len = 0;
  char *text = malloc(cap);
  if (!text) {
    mn_bench_error(b, "out of memory");
    return;
  }
  len += (size_t)snprintf(text + len, cap - len, "mnemo-trace 1\n");
  for (size_t i = 0; i < n; i++) len += (size_t)snprintf(text + len, cap - len, "meta k%06zu v%06zu\n", i, i);
  len += (size_t)snprintf(text + len, cap - len, "end 0\n");
  while (mn_bench_next(b)) {
    mn_trace_t *t = NULL;
    if (mn_trace_parse(text, len, "bench.trace", &t) != MN_OK) mn_bench_error(b, mn_last_error());
    mn_bench_pause(b);
    mn_trace_destroy(t);
    mn_bench_resume(b);
  }
  mn_bench_set_items(b, (int64_t)n);
  mn_bench_set_bytes(b, (int64_t)len);
  free(text);
}

static void bench_share_memory(mn_bench_t *b, void *arg) {
  (void)arg;
  size_t total = (size_t)mn_bench_arg(b, 0);
  while (mn_bench_next(b)) {
    mn_storage_t *s = NULL;
    if (mn_storage_create(mn_device_cpu(), total, NULL, NULL, &s) != MN_OK || mn_storage_fill(s, 1, NULL) != MN_OK ||
        mn_storage_share_memory(s) != MN_OK)
      mn_bench_error(b, mn_last_error());
    mn_storage_release(s);
  }
  mn_bench_set_bytes(b, (int64_t)total);
}

static void bench_clone(mn_bench_t *b, void *arg) {
  const mn_device_t *dev = arg;
  size_t total = (size_t)mn_bench_arg(b, 0);
  mn_storage_t *s = NULL;
  if (mn_storage_create(*dev, total, NULL, NULL, &s) != MN_OK) {
    mn_bench_error(b, mn_last_error());
    return;
  }
  while (mn_bench_next(b)) {
    mn_storage_t *c = NULL;
    if (mn_storage_clone(s, NULL, &c) != MN_OK) mn_bench_error(b, mn_last_error());
    MN_BENCH_OK(mn_device_synchronize(*dev));
    mn_storage_release(c);
  }
  mn_bench_set_bytes(b, (int64_t)total);
  mn_storage_release(s);
}

int main(int argc, char **argv) {
  static const int mnemo_fmt = 0, st_fmt = 1;
  static mn_device_t cpu, cuda;
  cpu = mn_device_cpu();
  cuda = mn_device_cuda(0);
  int ncuda = 0;
  MN_BENCH_OK(mn_device_count(MN_DEVICE_CUDA, &ncuda));
  const int64_t sizes[] = {1 << 20, 64 << 20};
  for (int i = 0; i < 2; i++) {
    mn_bench_register("save_load/mnemo/cpu", bench_save_load, (void *)&mnemo_fmt, 1, &sizes[i]);
    mn_bench_register("save_load/safetensors/cpu", bench_save_load, (void *)&st_fmt, 1, &sizes[i]);
    mn_bench_register("share_memory/cpu", bench_share_memory, NULL, 1, &sizes[i]);
    mn_bench_register("clone/cpu", bench_clone, &cpu, 1, &sizes[i]);
    if (ncuda > 0) mn_bench_register("clone/cuda", bench_clone, &cuda, 1, &sizes[i]);
  }
  const int64_t many[] = {1000, 10000, MANY_MAX};
  for (int i = 0; i < 3; i++) {
    mn_bench_register("load_many/mnemo/cpu", bench_load_many, (void *)&mnemo_fmt, 1, &many[i]);
    mn_bench_register("load_many/safetensors/cpu", bench_load_many, (void *)&st_fmt, 1, &many[i]);
    mn_bench_register("load_many/trace_meta", bench_trace_parse_meta, NULL, 1, &many[i]);
  }
  return mn_bench_main(argc, argv);
}
