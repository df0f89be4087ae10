/* tests/test_storage_gpu.c: storages on a real GPU: every operation on cuda:0,
 * save/load and safetensors from and to the GPU, and CUDA IPC into a second
 * process (this executable re-run with "ipc-child"). Skipped (77) without a GPU. */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"

static mn_device_t GPU, CPU;

static void read_back(const mn_storage_t *s, void *host) {
  size_t n = mn_storage_nbytes(s);
  if (n) MN_CHECK_OK(mn_copy_bytes(CPU, host, mn_storage_device(s), mn_storage_data(s), n, NULL, 0));
}

MN_TEST(operations_on_cuda) {
  unsigned char a[4096], b[4096];
  mn_test_fill_random(a, sizeof a);
  mn_storage_t *s = NULL, *c = NULL, *t = NULL, *f = NULL, *i = NULL;
  MN_CHECK_OK(mn_storage_from_buffer_copy(GPU, a, sizeof a, &s));
  MN_CHECK(mn_storage_is_resizable(s) && !mn_storage_is_pinned(s));
  /* resize keeps the prefix */
  MN_CHECK_OK(mn_storage_resize(s, 8192, NULL));
  MN_CHECK_OK(mn_device_synchronize(GPU));
  unsigned char big[8192];
  read_back(s, big);
  MN_CHECK(memcmp(big, a, sizeof a) == 0);
  MN_CHECK_OK(mn_storage_resize(s, 4096, NULL));
  /* clone, to, copy */
  MN_CHECK_OK(mn_storage_clone(s, NULL, &c));
  MN_CHECK_OK(mn_device_synchronize(GPU));
  read_back(c, b);
  MN_CHECK(memcmp(a, b, sizeof a) == 0);
  MN_CHECK_OK(mn_storage_to(s, CPU, true, NULL, &t));
  MN_CHECK_OK(mn_device_synchronize(GPU));
  MN_CHECK(mn_storage_is_pinned(t) && memcmp(mn_storage_data(t), a, sizeof a) == 0);
  MN_CHECK_OK(mn_storage_fill(c, 0x5a, NULL));
  MN_CHECK_OK(mn_storage_copy(t, c, false, NULL));
  MN_CHECK(((unsigned char *)mn_storage_data(t))[4095] == 0x5a);
  /* typed fill and conversion through the cast kernels */
  MN_CHECK_OK(mn_storage_fill_typed(c, MN_DTYPE_FLOAT32, mn_scalar_float(-2.5), NULL));
  MN_CHECK_OK(mn_storage_convert(c, MN_DTYPE_FLOAT32, MN_DTYPE_INT32, NULL, &i));
  MN_CHECK_OK(mn_storage_convert(c, MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT16, NULL, &f));
  MN_CHECK_OK(mn_device_synchronize(GPU));
  int32_t iv[1024];
  uint16_t hv[1024];
  read_back(i, iv);
  read_back(f, hv);
  MN_CHECK(iv[0] == -2 && iv[1023] == -2 && hv[0] == 0xc100 && hv[1023] == 0xc100);
  /* byteswap goes through the host */
  MN_CHECK_OK(mn_storage_byteswap(i, 4, NULL));
  read_back(i, iv);
  MN_CHECK((uint32_t)iv[7] == 0xfeffffffu);
  MN_CHECK_ERR(mn_storage_byteswap(i, 3, NULL), MN_ERR_INVALID_ARGUMENT, "item_size=3");
  /* share_memory is a no-op on CUDA */
  MN_CHECK_OK(mn_storage_share_memory(s));
  MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_ALLOCATOR);
  char text[256];
  MN_CHECK_OK(mn_storage_format(i, MN_DTYPE_INT32, 2, text, sizeof text, NULL));
  MN_CHECK(strstr(text, "cuda:0") != NULL);
  mn_storage_release(s);
  mn_storage_release(c);
  mn_storage_release(t);
  mn_storage_release(i);
  mn_storage_release(f);
}

MN_TEST(save_load_through_the_gpu) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_from_buffer_copy(GPU, v, sizeof v, &s));
  int64_t sz[2] = {3, 2}, st[2] = {1, 3}, n6 = 6;
  mn_view_t *views[2];
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_FLOAT32, 1, &n6, NULL, 0, &views[0]));
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_FLOAT32, 2, sz, st, 0, &views[1]));
  const char *names[2] = {"flat", "t"};
  char path[128];
  snprintf(path, sizeof path, "/tmp/mnemo-gpu-%ld.mnemo", (long)getpid());
  MN_CHECK_OK(mn_save(path, 2, names, (const mn_view_t *const *)views));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load(path, GPU, &nv));
  if (nv) {
    MN_CHECK(mn_view_storage(nv->views[0]) == mn_view_storage(nv->views[1]));
    MN_CHECK(mn_device_equal(mn_view_device(nv->views[0]), GPU) && mn_view_stride(nv->views[1], 1) == 3);
    float back[6];
    read_back(mn_view_storage(nv->views[0]), back);
    MN_CHECK(memcmp(back, v, sizeof v) == 0);
  }
  mn_named_views_free(nv);
  nv = NULL;
  MN_CHECK_OK(mn_safetensors_save(path, 1, names + 1, (const mn_view_t *const *)views + 1, 0, NULL, NULL));
  MN_CHECK_OK(mn_safetensors_load(path, CPU, &nv));
  if (nv) {
    const float *t = mn_view_data(nv->views[0]);
    MN_CHECK(t[0] == 1 && t[1] == 4 && t[2] == 2 && t[5] == 6);
  }
  mn_named_views_free(nv);
  unlink(path);
  mn_view_destroy(views[0]);
  mn_view_destroy(views[1]);
  mn_storage_release(s);
}

static void hex(const void *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", ((const unsigned char *)p)[i]);
}

static int unhex(const char *s, void *p, size_t n) {
  if (strlen(s) != 2 * n) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return 0;
    ((unsigned char *)p)[i] = (unsigned char)v;
  }
  return 1;
}

/* The child: opens the handle, checks the bytes (i & 0xff), writes 0xee at
 * byte 0. "forged": the same handle claiming 1 TiB more must be refused. */
static int ipc_child(const char *text, bool forged) {
  mn_ipc_handle_t h;
  if (!unhex(text, &h, sizeof h)) return 10;
  mn_storage_t *s = NULL;
  if (forged) {
    h.nbytes += (uint64_t)1 << 40;
    mn_status st = mn_storage_from_ipc_handle(mn_device_cuda(0), &h, &s);
    if (st != MN_ERR_INVALID_ARGUMENT || s != NULL || !strstr(mn_last_error(), "exceeds")) {
      fprintf(stderr, "child: a forged range gave %s: %s\n", mn_status_name(st), mn_last_error());
      return 15;
    }
    return 0;
  }
  if (mn_storage_from_ipc_handle(mn_device_cuda(0), &h, &s) != MN_OK) {
    fprintf(stderr, "child: %s\n", mn_last_error());
    return 11;
  }
  size_t n = mn_storage_nbytes(s);
  unsigned char *b = malloc(n);
  if (mn_copy_bytes(CPU, b, mn_storage_device(s), mn_storage_data(s), n, NULL, 0) != MN_OK) return 12;
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)i) return 13;
  b[0] = 0xee;
  if (mn_copy_bytes(mn_storage_device(s), mn_storage_data(s), CPU, b, 1, NULL, 0) != MN_OK) return 14;
  free(b);
  mn_storage_release(s);
  return 0;
}

MN_TEST(ipc_into_another_process) {
  mn_caching_config_t cfg = mn_caching_config_default();
  mn_allocator_t *ca = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(GPU, &cfg, &ca));
  if (!ca) return;
  mn_storage_t *first = NULL, *s = NULL;
  MN_CHECK_OK(mn_storage_create(GPU, 1000, ca, NULL, &first)); /* s lands inside the same segment */
  MN_CHECK_OK(mn_storage_create(GPU, 3000, ca, NULL, &s));
  unsigned char b[3000];
  for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)i;
  MN_CHECK_OK(mn_copy_bytes(GPU, mn_storage_data(s), CPU, b, sizeof b, NULL, 0));
  mn_ipc_handle_t h;
  MN_CHECK_OK(mn_storage_ipc_export(s, &h));
  MN_CHECK(h.nbytes == 3000 && h.offset > 0); /* a block inside a segment: base handle + offset */
  char text[2 * sizeof h + 1];
  hex(&h, sizeof h, text);
  for (int forged = 1; forged >= 0; forged--) { /* the refusal first: the real open then writes 0xee */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", "test_storage_gpu", forged ? "ipc-forged" : "ipc-child", text, (char *)NULL);
      _exit(127);
    }
    int status = 0;
    MN_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  unsigned char x = 0;
  MN_CHECK_OK(mn_copy_bytes(CPU, &x, GPU, mn_storage_data(s), 1, NULL, 0));
  MN_CHECK(x == 0xee);
  mn_storage_release(s);
  mn_storage_release(first);
  mn_allocator_destroy(ca);
}

int main(int argc, char **argv) {
  CPU = mn_device_cpu();
  GPU = mn_device_cuda(0);
  if (argc == 3 && strcmp(argv[1], "ipc-child") == 0) return ipc_child(argv[2], false);
  if (argc == 3 && strcmp(argv[1], "ipc-forged") == 0) return ipc_child(argv[2], true);
  mn_test_require_cuda();
  MN_RUN(operations_on_cuda);
  MN_RUN(save_load_through_the_gpu);
  MN_RUN(ipc_into_another_process);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
