/* bench/bench_storage.c: storage and file-format costs on the CPU (and cuda:0
 * when present): save/load buffers in both formats, loads of 100k-entry files
 * of each format and of a trace with 100k meta keys (the name checks are
 * linear: target < 100 ms each), share_memory, clone. Single-threaded.
 *
 * bench_storage --files [MIB [DIR]] instead times whole files (default 1024
 * MiB in /tmp) next to their anchors in one run: raw write() of the same
 * bytes, raw read() into a fresh buffer, raw mmap; mn_save and
 * mn_safetensors_save; mn_load and mn_safetensors_load mapped (with and
 * without checksums) and copied; CRC32 (the dispatched implementation and
 * each one) against a plain read of the same memory; copying loads (read
 * on the kernels' pool) also against pread() on as many threads. Fastest of 7 runs
 * after a warm-up (page cache warm), each right after a run of its anchor;
 * GB/s = 1e9 bytes/s of the data. Saves are timed against write() + fsync()
 * (mn_save and mn_safetensors_save fsync the file before renaming it into
 * place: a save is on disk when it returns); write() alone, which leaves the
 * bytes in the page cache, has its own row. Loads read files the warm-up
 * left in the page cache, as their anchors do. BENCH_FILES_ROWS=A,B runs
 * only the rows whose name contains A or B. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"
#if __has_include("storage/crc32.h")
#include "storage/crc32.h"
#define HAVE_NEW_IO 1 /* streamed saves, mapped loads, mn_load_ex, storage/crc32.h */
#endif

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

/* ---- --files: whole files next to their anchors ----------------------------------- */

#define FILE_REPS 7

typedef struct files_s {
  size_t total;
  mn_view_t *v[NTENSORS];
  mn_storage_t *s;
  unsigned char *bytes; /* the storage's bytes */
  char raw[512], mnemo[512], st[512];
  volatile uint64_t sink;
} files_t;

typedef int (*files_op)(files_t *f);

static int fail(const char *what) {
  fprintf(stderr, "bench_storage --files: %s: %s\n", what, mn_last_error());
  return -1;
}

/* The raw anchors: f's bytes written to f->raw with write(), and with
 * `sync` made durable (fsync) before it returns. */
static int raw_write(files_t *f, bool sync) {
  int fd = open(f->raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < f->total) {
    ssize_t w = write(fd, f->bytes + done, f->total - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  int synced = sync ? fsync(fd) : 0;
  return close(fd) == 0 && synced == 0 && done == f->total ? 0 : -1;
}

static int op_raw_write(files_t *f) { return raw_write(f, false); }

/* A save's anchor: the same bytes on disk when it returns, as mn_save's
 * atomic write (fsync before the rename) guarantees. */
static int op_raw_write_fsync(files_t *f) { return raw_write(f, true); }

/* Like a copy load: read() into new memory from the CPU allocator, freed. */
static int op_raw_read(files_t *f) {
  mn_storage_t *s = NULL;
  if (mn_storage_create(mn_device_cpu(), f->total, NULL, NULL, &s) != MN_OK) return fail("mn_storage_create");
  unsigned char *b = mn_storage_data(s);
  int fd = open(f->raw, O_RDONLY);
  size_t done = 0;
  while (fd >= 0 && done < f->total) {
    ssize_t r = read(fd, b + done, f->total - done);
    if (r <= 0) break;
    done += (size_t)r;
  }
  if (fd >= 0) close(fd);
  f->sink += b[f->total / 2];
  mn_storage_release(s);
  return done == f->total ? 0 : -1;
}

/* The same with the file cut into as many ranges as the kernels' pool has
 * threads (MNEMO_KERNEL_THREADS, else the online CPUs, at most 16), each
 * pread() 1 MiB at a time on a thread of its own: what copying loads, which
 * read on that pool, can reach. */
typedef struct par_range {
  int fd;
  unsigned char *dst;
  size_t lo, hi, done;
} par_range_t;

static void *raw_read_range(void *arg) {
  par_range_t *r = arg;
  for (size_t k = r->lo; k < r->hi;) {
    size_t want = r->hi - k < ((size_t)1 << 20) ? r->hi - k : ((size_t)1 << 20);
    ssize_t got = pread(r->fd, r->dst + k, want, (off_t)k);
    if (got <= 0) break;
    k += (size_t)got;
    r->done += (size_t)got;
  }
  return NULL;
}

static int read_threads(void) {
  const char *env = getenv("MNEMO_KERNEL_THREADS");
  long n = env && *env ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

static int op_raw_read_threads(files_t *f) {
  mn_storage_t *s = NULL;
  if (mn_storage_create(mn_device_cpu(), f->total, NULL, NULL, &s) != MN_OK) return fail("mn_storage_create");
  int fd = open(f->raw, O_RDONLY), nt = read_threads();
  par_range_t r[16];
  pthread_t th[16];
  size_t per = (f->total + (size_t)nt - 1) / (size_t)nt, done = 0;
  int started = 0;
  for (int t = 0; t < nt && fd >= 0; t++) {
    size_t lo = per * (size_t)t < f->total ? per * (size_t)t : f->total;
    r[t] = (par_range_t){fd, mn_storage_data(s), lo, lo + per < f->total ? lo + per : f->total, 0};
    if (t > 0 && pthread_create(&th[t], NULL, raw_read_range, &r[t]) != 0) break;
    started = t + 1;
  }
  if (started > 0) raw_read_range(&r[0]);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < started; t++) done += r[t].done;
  if (fd >= 0) close(fd);
  f->sink += ((unsigned char *)mn_storage_data(s))[f->total / 2];
  mn_storage_release(s);
  return done == f->total ? 0 : -1;
}

static int op_raw_mmap(files_t *f) {
  int fd = open(f->raw, O_RDONLY);
  void *p = fd >= 0 ? mmap(NULL, f->total, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) return -1;
  return munmap(p, f->total);
}

/* Reads every 8-byte word: the memory bandwidth a checksum could reach. */
static int op_mem_read(files_t *f) {
  const uint64_t *w = (const uint64_t *)f->bytes;
  uint64_t acc = 0;
  for (size_t i = 0; i < f->total / 8; i++) acc += w[i];
  f->sink += acc;
  return 0;
}

static int op_mn_save(files_t *f) {
  return mn_save(f->mnemo, NTENSORS, NAMES, (const mn_view_t *const *)f->v) == MN_OK ? 0 : fail("mn_save");
}

static int op_st_save(files_t *f) {
  return mn_safetensors_save(f->st, NTENSORS, NAMES, (const mn_view_t *const *)f->v, 0, NULL, NULL) == MN_OK
             ? 0
             : fail("mn_safetensors_save");
}

/* A load, its result freed (munmap or free) inside the timing as raw read's. */
static int load_one(files_t *f, int safetensors, unsigned flags, int touch) {
  mn_named_views_t *nv = NULL;
  mn_status st;
#ifdef HAVE_NEW_IO
  st = safetensors ? mn_safetensors_load_ex(f->st, mn_device_cpu(), flags, &nv)
                   : mn_load_ex(f->mnemo, mn_device_cpu(), flags, &nv);
#else
  (void)flags;
  st = safetensors ? mn_safetensors_load(f->st, mn_device_cpu(), &nv) : mn_load(f->mnemo, mn_device_cpu(), &nv);
#endif
  if (st != MN_OK) return fail("load");
  for (size_t i = 0; touch && i < nv->count; i++) {
    const unsigned char *p = mn_view_data(nv->views[i]);
    size_t n = (size_t)mn_view_numel(nv->views[i]) * 4;
    for (size_t o = 0; o < n; o += 4096) f->sink += p[o];
  }
  mn_named_views_free(nv);
  return 0;
}

#ifndef HAVE_NEW_IO
enum { MN_LOAD_MAP = 1, MN_LOAD_COPY = 2, MN_LOAD_NO_VERIFY = 4 };
#endif
static int op_load_map(files_t *f) { return load_one(f, 0, 0, 0); }
static int op_load_map_nv(files_t *f) { return load_one(f, 0, MN_LOAD_NO_VERIFY, 0); }
static int op_load_copy(files_t *f) { return load_one(f, 0, MN_LOAD_COPY, 0); }
static int op_st_load_map(files_t *f) { return load_one(f, 1, 0, 0); }
static int op_st_load_map_touch(files_t *f) { return load_one(f, 1, 0, 1); }
static int op_st_load_copy(files_t *f) { return load_one(f, 1, MN_LOAD_COPY, 0); }

#ifdef HAVE_NEW_IO
static uint32_t (*crc_fn)(uint32_t, const void *, size_t);
static int op_crc(files_t *f) {
  f->sink += crc_fn(0, f->bytes, f->total);
  return 0;
}
#endif

/* One row: `op` timed FILE_REPS times after a warm-up, each run right after
 * one of `anchor` (when not NULL) so both see the same machine; the fastest
 * run of each is kept (the machine is shared: the slow runs are other
 * work). `out` (may be NULL) is removed, untimed, before each run of op. */
typedef struct row_s {
  const char *name;
  files_op op;
  files_op anchor;
  const char *anchor_name;
  const char *out;
} row_t;

static double run_once(files_t *f, files_op op, const char *out) {
  if (out) unlink(out);
  double t0 = mn_bench_now_s();
  if (op(f) != 0) return -1;
  return mn_bench_now_s() - t0;
}

static void run_row(files_t *f, const row_t *r) {
  double best = 1e30, best_anchor = 1e30;
  for (int k = -1; k < FILE_REPS; k++) {
    double a = r->anchor ? run_once(f, r->anchor, r->anchor == op_raw_write || r->anchor == op_raw_write_fsync ? f->raw : NULL) : 0;
    double t = run_once(f, r->op, r->out);
    if (t < 0 || a < 0) {
      printf("%-46s failed\n", r->name);
      return;
    }
    if (k < 0) continue; /* warm-up: page cache, allocator, CPU features */
    if (t < best) best = t;
    if (a < best_anchor) best_anchor = a;
  }
  printf("%-46s %9.2f ms %9.2f GB/s", r->name, best * 1e3, (double)f->total / best / 1e9);
  if (r->anchor) printf("   %6.2fx %s (%.2f ms)", best / best_anchor, r->anchor_name, best_anchor * 1e3);
  printf("\n");
}

/* Whether a row runs: `only` NULL (all), or one of its comma-separated
 * words is part of the row's name. */
static int row_selected(const char *only, const char *name) {
  if (!only) return 1;
  char words[256];
  snprintf(words, sizeof words, "%s", only);
  for (char *save = NULL, *w = strtok_r(words, ",", &save); w; w = strtok_r(NULL, ",", &save))
    if (strstr(name, w)) return 1;
  return 0;
}

static int files_table(size_t mib, const char *dir) {
  files_t *f = calloc(1, sizeof *f);
  if (!f) return 1;
  f->total = mib << 20;
  snprintf(f->raw, sizeof f->raw, "%s/bench_storage.raw", dir);
  snprintf(f->mnemo, sizeof f->mnemo, "%s/bench_storage.mnemo", dir);
  snprintf(f->st, sizeof f->st, "%s/bench_storage.safetensors", dir);
  if (make_set(mn_device_cpu(), f->total, f->v, &f->s) != MN_OK) {
    free(f);
    fail("make_set");
    return 1;
  }
  f->bytes = mn_storage_data(f->s);
  for (size_t i = 0; i < f->total / 8; i++) ((uint64_t *)f->bytes)[i] = i * 0x9E3779B97F4A7C15ull;
  printf("bench_storage --files: %zu MiB, %d float32 tensors over one CPU storage, files in %s;\n", mib, NTENSORS,
         dir);
  printf("fastest of %d runs after a warm-up, each after a run of its anchor; loads include freeing the result\n",
         FILE_REPS);
  if (op_raw_write(f) != 0 || op_mn_save(f) != 0 || op_st_save(f) != 0) {
    free(f);
    fail("writing the files");
    return 1;
  }
  const row_t rows[] = {
      {"raw write() of the same bytes", op_raw_write, NULL, NULL, f->raw},
      {"raw write() + fsync() of the same bytes", op_raw_write_fsync, op_raw_write, "raw write", f->raw},
      {"mn_save", op_mn_save, op_raw_write_fsync, "raw write+fsync", f->mnemo},
      {"mn_safetensors_save", op_st_save, op_raw_write_fsync, "raw write+fsync", f->st},
      {"raw read() into a new CPU storage", op_raw_read, NULL, NULL, NULL},
      {"raw pread() on the pool's threads (threaded read)", op_raw_read_threads, op_raw_read, "raw read", NULL},
      {"raw mmap (MAP_PRIVATE, untouched)", op_raw_mmap, NULL, NULL, NULL},
      {"mn_load (default: mapped, verified)", op_load_map, op_raw_read, "raw read", NULL},
      {"mn_load MN_LOAD_NO_VERIFY (mapped)", op_load_map_nv, op_raw_mmap, "raw mmap", NULL},
      {"mn_load MN_LOAD_COPY (verified)", op_load_copy, op_raw_read, "raw read", NULL},
      {"mn_load MN_LOAD_COPY (verified), vs threaded read", op_load_copy, op_raw_read_threads, "threaded read", NULL},
      {"mn_safetensors_load (default: mapped)", op_st_load_map, op_raw_mmap, "raw mmap", NULL},
      {"mn_safetensors_load mapped, each page read", op_st_load_map_touch, op_raw_read, "raw read", NULL},
      {"mn_safetensors_load MN_LOAD_COPY", op_st_load_copy, op_raw_read, "raw read", NULL},
      {"mn_safetensors_load MN_LOAD_COPY, vs threaded read", op_st_load_copy, op_raw_read_threads, "threaded read",
       NULL},
      {"memory read (sum of 8-byte words)", op_mem_read, NULL, NULL, NULL},
  };
  const char *only = getenv("BENCH_FILES_ROWS");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (row_selected(only, rows[i].name)) run_row(f, &rows[i]);
#ifdef HAVE_NEW_IO
  const mn__crc32_impl_t *im = NULL;
  size_t n = mn__crc32_impls(&im);
  for (size_t k = 0; k < n; k++) {
    char name[96];
    snprintf(name, sizeof name, "crc32 %s%s", im[k].name, k == 0 ? " (used)" : "");
    crc_fn = im[k].fn;
    if (row_selected(only, name)) run_row(f, &(row_t){name, op_crc, op_mem_read, "memory read", NULL});
  }
#endif
  unlink(f->raw);
  unlink(f->mnemo);
  unlink(f->st);
  for (int i = 0; i < NTENSORS; i++) mn_view_destroy(f->v[i]);
  mn_storage_release(f->s);
  free(f);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--files") == 0)
    return files_table(argc >= 3 ? (size_t)atoll(argv[2]) : 1024, argc >= 4 ? argv[3] : "/tmp");
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
