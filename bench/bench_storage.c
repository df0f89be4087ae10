/* bench/bench_storage.c: storage and save-format costs on the CPU (and cuda:0
 * when present): save/load buffers in both formats, share_memory, clone. Single-threaded. */
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
  return mn_bench_main(argc, argv);
}
