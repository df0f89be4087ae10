/* tests/test_storage.c: the storage API on CPU and SIM: every operation, every
 * kind (allocator, foreign, file, shared memory), cross-process sharing, bad input. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"
#include "test_bytes.h"

static mn_device_t CPU, SIM0, SIM1;
static char tmpdir[256];

/* The devices every operation is checked on. */
#define DEVICES {CPU, SIM0}
#define NDEV 2

static void read_back(const mn_storage_t *s, void *host) {
  size_t n = mn_storage_nbytes(s);
  if (n) MN_CHECK_OK(mn_copy_bytes(CPU, host, mn_storage_device(s), mn_storage_data(s), n, NULL, 0));
}

static void write_in(mn_storage_t *s, const void *host) {
  size_t n = mn_storage_nbytes(s);
  if (n) MN_CHECK_OK(mn_copy_bytes(mn_storage_device(s), mn_storage_data(s), CPU, host, n, NULL, 0));
}

static mn_storage_t *make(mn_device_t dev, size_t n) {
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_create(dev, n, NULL, NULL, &s));
  return s;
}

static void sync_dev(mn_device_t dev) { MN_CHECK_OK(mn_device_synchronize(dev)); }

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

/* ---- basics ------------------------------------------------------------------- */

MN_TEST(create_and_queries) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    mn_storage_t *s = make(devs[d], 64);
    MN_CHECK(mn_storage_nbytes(s) == 64 && mn_storage_data(s) != NULL);
    MN_CHECK(mn_device_equal(mn_storage_device(s), devs[d]));
    MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_ALLOCATOR && mn_storage_is_resizable(s));
    MN_CHECK(mn_storage_allocator(s) != NULL && !mn_storage_is_pinned(s) && !mn_storage_is_shared(s));
    MN_CHECK(mn_storage_filename(s) == NULL);
    MN_CHECK(mn_storage_retain(s) == s && mn_storage_refcount(s) == 2);
    mn_storage_release(s);
    MN_CHECK(mn_storage_refcount(s) == 1);
    mn_storage_release(s);
  }
  MN_CHECK(strcmp(mn_storage_kind_name(MN_STORAGE_SHARED), "shared") == 0);
  MN_CHECK(strcmp(mn_storage_kind_name((mn_storage_kind)42), "invalid") == 0);
  mn_storage_release(NULL);
}

MN_TEST(resize_keeps_prefix) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    unsigned char a[300], b[300];
    mn_test_fill_random(a, sizeof a);
    mn_storage_t *s = make(devs[d], 100);
    write_in(s, a);
    MN_CHECK_OK(mn_storage_resize(s, 300, NULL));
    MN_CHECK(mn_storage_nbytes(s) == 300);
    read_back(s, b);
    MN_CHECK(memcmp(a, b, 100) == 0);
    MN_CHECK_OK(mn_storage_resize(s, 40, NULL));
    read_back(s, b);
    MN_CHECK(mn_storage_nbytes(s) == 40 && memcmp(a, b, 40) == 0);
    MN_CHECK_OK(mn_storage_resize(s, 0, NULL));
    MN_CHECK(mn_storage_nbytes(s) == 0);
    MN_CHECK_OK(mn_storage_resize(s, 16, NULL));
    MN_CHECK(mn_storage_nbytes(s) == 16);
    mn_storage_release(s);
  }
  /* SIM: ordered on a side stream; nothing runs until it is advanced. */
  mn_stream_t *st = NULL;
  MN_CHECK_OK(mn_stream_create(SIM0, &st));
  unsigned char a[64], b[128];
  mn_test_fill_random(a, sizeof a);
  mn_storage_t *s = make(SIM0, 64);
  write_in(s, a);
  MN_CHECK_OK(mn_storage_resize(s, 128, st));
  size_t pend = 0;
  MN_CHECK_OK(mn_sim_stream_pending(st, &pend));
  MN_CHECK(pend >= 1);
  MN_CHECK_OK(mn_stream_synchronize(st));
  read_back(s, b);
  MN_CHECK(memcmp(a, b, 64) == 0);
  MN_CHECK_OK(mn_storage_resize(s, 8, NULL)); /* default stream */
  mn_storage_release(s);
  MN_CHECK_OK(mn_stream_destroy(st));
}

/* A resize that cannot allocate, or whose copy cannot be queued, leaves the
 * storage as it was. */
MN_TEST(resize_failure_keeps_old_bytes) {
  unsigned char a[256], b[256];
  mn_test_fill_random(a, sizeof a);
  mn_storage_t *s = make(SIM0, sizeof a);
  write_in(s, a);
  void *before = mn_storage_data(s);
  MN_CHECK_ERR(mn_storage_resize(s, (size_t)1 << 40, NULL), MN_ERR_OUT_OF_MEMORY, "mn_storage_resize");
  MN_CHECK(mn_storage_nbytes(s) == sizeof a && mn_storage_data(s) == before);
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_MEMCPY, 1, 1));
  mn_clear_error();
  mn_status st = mn_storage_resize(s, 512, NULL);
  MN_CHECK(st == MN_ERR_DEVICE && strstr(mn_last_error(), "mn_storage_resize") != NULL);
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK(mn_storage_nbytes(s) == sizeof a && mn_storage_data(s) == before);
  read_back(s, b);
  MN_CHECK(memcmp(a, b, sizeof a) == 0);
  mn_storage_release(s);
}

/* A resize moves the bytes to a new block, so it is refused
 * while a view of the storage lives (shrinking under one let later writes
 * through it run past the end); it goes through once the views are gone. */
MN_TEST(resize_refused_while_views_live) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    mn_storage_t *s = make(devs[d], 4096);
    const int64_t n = 1024;
    mn_view_t *v = NULL, *part = NULL;
    MN_CHECK_OK(mn_view_create(s, MN_DTYPE_FLOAT32, 1, &n, NULL, 0, &v));
    MN_CHECK_OK(mn_view_fill(v, mn_scalar_float(1.0), NULL));
    MN_CHECK_ERR(mn_storage_resize(s, 64, NULL), MN_ERR_INVALID_STATE, "has 1 live view(s)");
    MN_CHECK(mn_storage_nbytes(s) == 4096);
    MN_CHECK_OK(mn_view_fill(v, mn_scalar_float(2.0), NULL)); /* before the fix: 4032 bytes past a 64-byte block */
    MN_CHECK_OK(mn_view_narrow(v, 0, 2, 2, &part));
    MN_CHECK_ERR(mn_storage_resize(s, 8192, NULL), MN_ERR_INVALID_STATE, "has 2 live view(s)"); /* growing moves too */
    MN_CHECK(mn_storage_nbytes(s) == 4096);
    sync_dev(devs[d]);
    static float back[1024];
    read_back(s, back);
    bool ok = true;
    for (int i = 0; i < 1024; i++) ok &= back[i] == 2.0f;
    MN_CHECK(ok);
    MN_CHECK_OK(mn_storage_resize(s, 4096, NULL)); /* no change: nothing moves */
    mn_view_destroy(part);
    mn_view_destroy(v);
    MN_CHECK_OK(mn_storage_resize(s, 64, NULL)); /* no view left */
    MN_CHECK_OK(mn_storage_resize(s, 8192, NULL));
    MN_CHECK(mn_storage_nbytes(s) == 8192);
    mn_storage_release(s);
  }
}

static int deleter_calls;
static void count_deleter(void *ctx, void *data) {
  deleter_calls++;
  free(data);
  (void)ctx;
}

MN_TEST(resize_refused_for_fixed_kinds) {
  void *mem = malloc(32);
  mn_storage_t *f = NULL;
  MN_CHECK_OK(mn_storage_from_buffer(CPU, mem, 32, count_deleter, NULL, &f));
  MN_CHECK(!mn_storage_is_resizable(f) && mn_storage_allocator(f) == NULL);
  MN_CHECK_ERR(mn_storage_resize(f, 64, NULL), MN_ERR_INVALID_STATE, "kind 'foreign'");
  MN_CHECK(mn_storage_nbytes(f) == 32 && mn_storage_data(f) == mem);
  MN_CHECK_OK(mn_storage_share_memory(f));
  MN_CHECK_ERR(mn_storage_resize(f, 64, NULL), MN_ERR_INVALID_STATE, "kind 'shared'");
  MN_CHECK(mn_storage_nbytes(f) == 32);
  mn_storage_release(f);
  char path[300];
  tmp_path(path, sizeof path, "resize.bin");
  MN_CHECK_OK(mn_storage_from_file(path, true, 64, &f));
  MN_CHECK_ERR(mn_storage_resize(f, 128, NULL), MN_ERR_INVALID_STATE, "not resizable");
  MN_CHECK(mn_storage_nbytes(f) == 64);
  mn_storage_release(f);
  unlink(path);
}

MN_TEST(fill_bytes_and_typed) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    mn_storage_t *s = make(devs[d], 24);
    unsigned char b[24];
    MN_CHECK_OK(mn_storage_fill(s, 0x1ab, NULL));
    sync_dev(devs[d]);
    read_back(s, b);
    int ok = 1;
    for (int i = 0; i < 24; i++) ok &= b[i] == 0xab;
    MN_CHECK(ok);
    MN_CHECK_OK(mn_storage_fill_typed(s, MN_DTYPE_FLOAT32, mn_scalar_float(1.5), NULL));
    sync_dev(devs[d]);
    float f[6];
    read_back(s, f);
    ok = 1;
    for (int i = 0; i < 6; i++) ok &= f[i] == 1.5f;
    MN_CHECK(ok);
    MN_CHECK_OK(mn_storage_fill_typed(s, MN_DTYPE_COMPLEX64, mn_scalar_complex(2, -3), NULL));
    sync_dev(devs[d]);
    read_back(s, f);
    MN_CHECK(f[0] == 2 && f[1] == -3 && f[4] == 2 && f[5] == -3);
    MN_CHECK_ERR(mn_storage_fill_typed(s, MN_DTYPE_COMPLEX128, mn_scalar_int(1), NULL), MN_ERR_INVALID_ARGUMENT,
                 "not a multiple");
    MN_CHECK_ERR(mn_storage_fill_typed(s, (mn_dtype)99, mn_scalar_int(1), NULL), MN_ERR_INVALID_ARGUMENT,
                 "invalid dtype");
    mn_storage_release(s);
  }
  mn_storage_t *s = make(CPU, 8);
  mn_stream_t *sim = NULL;
  MN_CHECK_OK(mn_stream_default(SIM0, &sim));
  MN_CHECK_ERR(mn_storage_fill(s, 0, sim), MN_ERR_INVALID_ARGUMENT, "cannot order work");
  mn_storage_release(s);
}

MN_TEST(copy_between_devices) {
  mn_device_t devs[3] = {CPU, SIM0, SIM1};
  unsigned char a[1000], b[1000];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int nb = 0; nb < 2; nb++) {
        mn_test_fill_random(a, sizeof a);
        mn_storage_t *src = make(devs[i], sizeof a), *dst = make(devs[j], sizeof a);
        write_in(src, a);
        MN_CHECK_OK(mn_storage_copy(dst, src, nb, NULL));
        if (nb) {
          sync_dev(devs[i]);
          sync_dev(devs[j]);
        }
        memset(b, 0, sizeof b);
        read_back(dst, b);
        MN_CHECK(memcmp(a, b, sizeof a) == 0);
        mn_storage_release(src);
        mn_storage_release(dst);
      }
  mn_storage_t *x = make(CPU, 8), *y = make(SIM0, 9);
  MN_CHECK_ERR(mn_storage_copy(x, y, false, NULL), MN_ERR_INVALID_ARGUMENT, "sizes differ");
  MN_CHECK_OK(mn_storage_copy(x, x, false, NULL));
  mn_storage_release(x);
  mn_storage_release(y);
}

MN_TEST(clone_to_and_pin) {
  mn_device_t devs[NDEV] = DEVICES;
  unsigned char a[256], b[256];
  for (int d = 0; d < NDEV; d++) {
    mn_test_fill_random(a, sizeof a);
    mn_storage_t *s = make(devs[d], sizeof a), *c = NULL, *t = NULL;
    write_in(s, a);
    MN_CHECK_OK(mn_storage_clone(s, NULL, &c));
    sync_dev(devs[d]);
    MN_CHECK(c != s && mn_storage_data(c) != mn_storage_data(s) && mn_storage_allocator(c) == mn_storage_allocator(s));
    read_back(c, b);
    MN_CHECK(memcmp(a, b, sizeof a) == 0);
    /* to the same device: the same storage */
    MN_CHECK_OK(mn_storage_to(s, devs[d], false, NULL, &t));
    MN_CHECK(t == s && mn_storage_refcount(s) == 2);
    mn_storage_release(t);
    /* to the other device and back */
    mn_device_t other = devs[(d + 1) % NDEV];
    MN_CHECK_OK(mn_storage_to(s, other, false, NULL, &t));
    MN_CHECK(mn_device_equal(mn_storage_device(t), other));
    read_back(t, b);
    MN_CHECK(memcmp(a, b, sizeof a) == 0);
    mn_storage_release(t);
    mn_storage_release(c);
    mn_storage_release(s);
  }
  /* non_blocking SIM -> CPU lands in pinned memory */
  mn_storage_t *s = make(SIM0, 4096), *t = NULL, *p = NULL;
  MN_CHECK_OK(mn_storage_fill(s, 7, NULL));
  MN_CHECK_OK(mn_storage_to(s, CPU, true, NULL, &t));
  MN_CHECK(mn_storage_is_pinned(t));
  sync_dev(SIM0);
  MN_CHECK(((unsigned char *)mn_storage_data(t))[4095] == 7);
  MN_CHECK_ERR(mn_storage_pin_memory(s, SIM0, &p), MN_ERR_INVALID_ARGUMENT, "only CPU storages");
  mn_storage_release(s);
  /* pin_memory: a pinned copy; the original stays pageable */
  s = make(CPU, 100);
  memset(mn_storage_data(s), 3, 100);
  MN_CHECK(!mn_storage_is_pinned(s));
  MN_CHECK_OK(mn_storage_pin_memory(s, SIM0, &p));
  MN_CHECK(mn_storage_is_pinned(p) && mn_storage_nbytes(p) == 100 && ((unsigned char *)mn_storage_data(p))[99] == 3);
  mn_storage_release(p);
  mn_storage_release(s);
  mn_storage_release(t);
}

MN_TEST(byteswap_sizes) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    unsigned char a[32], b[32];
    for (int i = 0; i < 32; i++) a[i] = (unsigned char)i;
    mn_storage_t *s = make(devs[d], 32);
    size_t sizes[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < 5; k++) {
      write_in(s, a);
      MN_CHECK_OK(mn_storage_byteswap(s, sizes[k], NULL));
      sync_dev(devs[d]);
      read_back(s, b);
      int ok = 1;
      for (size_t i = 0; i < 32; i++) {
        size_t base = i / sizes[k] * sizes[k], within = i % sizes[k];
        ok &= b[i] == a[base + sizes[k] - 1 - within];
      }
      MN_CHECK(ok);
    }
    /* complex64: each float swapped on its own */
    write_in(s, a);
    MN_CHECK_OK(mn_storage_byteswap_dtype(s, MN_DTYPE_COMPLEX64, NULL));
    sync_dev(devs[d]);
    read_back(s, b);
    MN_CHECK(b[0] == 3 && b[3] == 0 && b[4] == 7 && b[7] == 4);
    write_in(s, a);
    MN_CHECK_ERR(mn_storage_byteswap(s, 3, NULL), MN_ERR_INVALID_ARGUMENT, "item_size=3");
    MN_CHECK_ERR(mn_storage_byteswap(s, 32, NULL), MN_ERR_INVALID_ARGUMENT, "item_size=32");
    MN_CHECK_OK(mn_storage_resize(s, 12, NULL));
    MN_CHECK_ERR(mn_storage_byteswap(s, 8, NULL), MN_ERR_INVALID_ARGUMENT, "not a multiple of item_size=8");
    sync_dev(devs[d]);
    read_back(s, b);
    MN_CHECK(memcmp(a, b, 12) == 0); /* untouched by the refused call */
    mn_storage_release(s);
  }
}

MN_TEST(convert_dtypes) {
  mn_device_t devs[NDEV] = DEVICES;
  for (int d = 0; d < NDEV; d++) {
    float f[4] = {1.5f, -2.0f, 3.75f, 300.0f};
    mn_storage_t *s = make(devs[d], sizeof f), *i32 = NULL, *h = NULL, *back = NULL, *u8 = NULL;
    write_in(s, f);
    MN_CHECK_OK(mn_storage_convert(s, MN_DTYPE_FLOAT32, MN_DTYPE_INT32, NULL, &i32));
    MN_CHECK_OK(mn_storage_convert(s, MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT16, NULL, &h));
    MN_CHECK_OK(mn_storage_convert(s, MN_DTYPE_FLOAT32, MN_DTYPE_UINT8, NULL, &u8));
    sync_dev(devs[d]);
    MN_CHECK(mn_storage_nbytes(h) == 8 && mn_storage_nbytes(u8) == 4);
    MN_CHECK_OK(mn_storage_convert(h, MN_DTYPE_FLOAT16, MN_DTYPE_FLOAT64, NULL, &back));
    sync_dev(devs[d]);
    int32_t iv[4];
    double dv[4];
    unsigned char uv[4];
    read_back(i32, iv);
    read_back(back, dv);
    read_back(u8, uv);
    MN_CHECK(iv[0] == 1 && iv[1] == -2 && iv[2] == 3 && iv[3] == 300);
    MN_CHECK(dv[0] == 1.5 && dv[1] == -2.0 && dv[2] == 3.75 && dv[3] == 300.0);
    MN_CHECK(uv[0] == 1 && uv[1] == 254 && uv[3] == 44);
    mn_storage_t *bad = NULL;
    MN_CHECK_ERR(mn_storage_convert(u8, MN_DTYPE_INT64, MN_DTYPE_FLOAT32, NULL, &bad), MN_ERR_INVALID_ARGUMENT,
                 "not a multiple");
    MN_CHECK(bad == NULL);
    MN_CHECK_ERR(mn_storage_convert(u8, MN_DTYPE_UINT8, (mn_dtype)77, NULL, &bad), MN_ERR_INVALID_ARGUMENT,
                 "invalid dst_dtype");
    mn_storage_release(s);
    mn_storage_release(i32);
    mn_storage_release(h);
    mn_storage_release(back);
    mn_storage_release(u8);
  }
}

static void *retain_release_loop(void *arg) {
  mn_storage_t *s = arg;
  for (int i = 0; i < 20000; i++) {
    mn_storage_retain(s);
    mn_storage_release(s);
  }
  mn_storage_release(s); /* the reference main handed over */
  return NULL;
}

MN_TEST(refcount_across_threads) {
  deleter_calls = 0;
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_from_buffer(CPU, malloc(64), 64, count_deleter, NULL, &s));
  enum { T = 4 };
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    mn_storage_retain(s);
    MN_CHECK(pthread_create(&th[i], NULL, retain_release_loop, s) == 0);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  MN_CHECK(mn_storage_refcount(s) == 1 && deleter_calls == 0);
  mn_storage_release(s);
  MN_CHECK(deleter_calls == 1);
}

MN_TEST(from_buffer_wrap_and_copy) {
  deleter_calls = 0;
  int *mem = malloc(4 * sizeof(int));
  for (int i = 0; i < 4; i++) mem[i] = i * 10;
  mn_storage_t *s = NULL, *c = NULL;
  MN_CHECK_OK(mn_storage_from_buffer(CPU, mem, 16, count_deleter, NULL, &s));
  MN_CHECK(mn_storage_data(s) == mem && mn_storage_get_kind(s) == MN_STORAGE_FOREIGN);
  mn_storage_retain(s);
  mn_storage_release(s);
  MN_CHECK(deleter_calls == 0);
  mn_storage_release(s);
  MN_CHECK(deleter_calls == 1);
  /* no deleter: the caller keeps the memory */
  int local[2] = {5, 6};
  MN_CHECK_OK(mn_storage_from_buffer(CPU, local, sizeof local, NULL, NULL, &s));
  mn_storage_release(s);
  MN_CHECK(local[1] == 6);
  /* copying variant onto both devices */
  MN_CHECK_OK(mn_storage_from_buffer_copy(SIM0, local, sizeof local, &c));
  local[0] = 0;
  int back[2];
  read_back(c, back);
  MN_CHECK(back[0] == 5 && back[1] == 6 && mn_storage_is_resizable(c));
  mn_storage_release(c);
  MN_CHECK_ERR(mn_storage_from_buffer(CPU, NULL, 8, NULL, NULL, &s), MN_ERR_INVALID_ARGUMENT, "data must not");
  MN_CHECK_ERR(mn_storage_from_buffer(mn_device_sim(9), local, 8, count_deleter, NULL, &s), MN_ERR_NO_DEVICE, "");
  MN_CHECK(deleter_calls == 1); /* a refused wrap never runs the deleter */
}

static size_t read_file(const char *path, void *data, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(data, 1, cap, f);
  fclose(f);
  return n;
}

MN_TEST(from_file_shared_and_private) {
  char path[300];
  tmp_path(path, sizeof path, "file.bin");
  unlink(path);
  mn_storage_t *s = NULL, *p = NULL;
  /* shared: created and sized */
  MN_CHECK_OK(mn_storage_from_file(path, true, 100, &s));
  MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_FILE && mn_storage_is_shared(s) && !mn_storage_is_resizable(s));
  MN_CHECK(strcmp(mn_storage_filename(s), path) == 0 && mn_storage_nbytes(s) == 100);
  memset(mn_storage_data(s), 'x', 100);
  unsigned char buf[200];
  MN_CHECK(read_file(path, buf, sizeof buf) == 100 && buf[0] == 'x' && buf[99] == 'x');
  /* private: sees the file, writes stay private */
  MN_CHECK_OK(mn_storage_from_file(path, false, 50, &p));
  MN_CHECK(!mn_storage_is_shared(p) && ((unsigned char *)mn_storage_data(p))[49] == 'x');
  memset(mn_storage_data(p), 'y', 50);
  MN_CHECK(read_file(path, buf, sizeof buf) == 100 && buf[0] == 'x');
  mn_storage_release(p);
  /* shared extends a shorter file; nbytes 0 maps the whole file */
  mn_storage_release(s);
  MN_CHECK_OK(mn_storage_from_file(path, true, 150, &s));
  MN_CHECK(((unsigned char *)mn_storage_data(s))[0] == 'x' && ((unsigned char *)mn_storage_data(s))[149] == 0);
  mn_storage_release(s);
  MN_CHECK_OK(mn_storage_from_file(path, false, 0, &p));
  MN_CHECK(mn_storage_nbytes(p) == 150);
  MN_CHECK_OK(mn_storage_share_memory(p)); /* a private mapping moves into shared memory */
  MN_CHECK(mn_storage_get_kind(p) == MN_STORAGE_SHARED && mn_storage_filename(p) == NULL);
  MN_CHECK(((unsigned char *)mn_storage_data(p))[0] == 'x');
  mn_storage_release(p);
  /* errors */
  p = NULL;
  MN_CHECK_ERR(mn_storage_from_file(path, false, 151, &p), MN_ERR_INVALID_ARGUMENT, "fewer than the 151");
  char missing[300];
  tmp_path(missing, sizeof missing, "no-such-file.bin");
  MN_CHECK_ERR(mn_storage_from_file(missing, false, 8, &p), MN_ERR_NOT_FOUND, "no-such-file.bin");
  MN_CHECK_ERR(mn_storage_from_file(tmpdir, false, 8, &p), MN_ERR_INVALID_ARGUMENT, "not a regular file");
  MN_CHECK(p == NULL);
  unlink(path);
}

MN_TEST(share_memory_in_place) {
  unsigned char a[5000];
  mn_test_fill_random(a, sizeof a);
  mn_storage_t *s = make(CPU, sizeof a);
  memcpy(mn_storage_data(s), a, sizeof a);
  MN_CHECK_OK(mn_storage_share_memory(s));
  MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_SHARED && mn_storage_is_shared(s) && !mn_storage_is_resizable(s));
  MN_CHECK(mn_storage_allocator(s) == NULL && memcmp(mn_storage_data(s), a, sizeof a) == 0);
  void *p = mn_storage_data(s);
  MN_CHECK_OK(mn_storage_share_memory(s)); /* no-op */
  MN_CHECK(mn_storage_data(s) == p);
  int fd = -1;
  MN_CHECK_OK(mn_storage_shm_fd(s, &fd));
  mn_storage_t *t = NULL;
  MN_CHECK_OK(mn_storage_from_shm_fd(fd, sizeof a, &t));
  MN_CHECK(mn_storage_data(t) != p && memcmp(mn_storage_data(t), a, sizeof a) == 0);
  ((unsigned char *)mn_storage_data(t))[7] ^= 0xff;
  MN_CHECK(((unsigned char *)p)[7] == (a[7] ^ 0xff));
  char h[MN_SHM_HANDLE_MAX], small[8];
  MN_CHECK_OK(mn_storage_shm_handle(s, h, sizeof h));
  MN_CHECK(strncmp(h, "mnemo-shm:", 10) == 0);
  MN_CHECK_ERR(mn_storage_shm_handle(s, small, sizeof small), MN_ERR_INVALID_ARGUMENT, "too small");
  mn_storage_t *u = NULL;
  MN_CHECK_OK(mn_storage_from_shm_handle(h, &u));
  MN_CHECK(memcmp(mn_storage_data(u), mn_storage_data(s), sizeof a) == 0);
  mn_storage_release(u);
  mn_storage_release(t);
  /* bad handles, wrong kinds */
  MN_CHECK_ERR(mn_storage_from_shm_handle("mnemo-shm:1:x:3", &u), MN_ERR_INVALID_ARGUMENT, "not a handle");
  MN_CHECK_ERR(mn_storage_from_shm_handle("mnemo-shm:12:3:4:5", &u), MN_ERR_INVALID_ARGUMENT, "not a handle");
  MN_CHECK_ERR(mn_storage_from_shm_handle("mnemo-shm:999999999:3:4", &u), MN_ERR_NOT_FOUND, "cannot open");
  MN_CHECK_ERR(mn_storage_from_shm_fd(fd, sizeof a + 1, &u), MN_ERR_INVALID_ARGUMENT, "fewer than");
  {
    /* a handle naming one of this process's ordinary files is refused */
    char path[300], bad[96];
    tmp_path(path, sizeof path, "regular.bin");
    FILE *f = fopen(path, "wb");
    fputs("0123456789", f);
    fflush(f);
    snprintf(bad, sizeof bad, "mnemo-shm:%ld:%d:4", (long)getpid(), fileno(f));
    MN_CHECK_ERR(mn_storage_from_shm_handle(bad, &u), MN_ERR_INVALID_ARGUMENT, "not mnemo shared memory");
    fclose(f);
    unlink(path);
  }
  MN_CHECK_ERR(mn_storage_from_shm_fd(-1, 1, &u), MN_ERR_INVALID_ARGUMENT, "not a descriptor");
  mn_storage_release(s);
  s = make(CPU, 8);
  MN_CHECK_ERR(mn_storage_shm_fd(s, &fd), MN_ERR_INVALID_STATE, "not in shared memory");
  mn_storage_release(s);
  s = make(SIM0, 8);
  MN_CHECK_ERR(mn_storage_share_memory(s), MN_ERR_NOT_SUPPORTED, "sim:0");
  MN_CHECK(mn_storage_get_kind(s) == MN_STORAGE_ALLOCATOR);
  mn_storage_release(s);
  /* empty storage */
  s = make(CPU, 0);
  MN_CHECK_OK(mn_storage_share_memory(s));
  MN_CHECK(mn_storage_is_shared(s) && mn_storage_nbytes(s) == 0);
  mn_storage_release(s);
}

MN_TEST(ipc_not_on_host_devices) {
  mn_storage_t *s = make(CPU, 8), *t = NULL;
  mn_ipc_handle_t h;
  MN_CHECK_ERR(mn_storage_ipc_export(s, &h), MN_ERR_NOT_SUPPORTED, "mn_storage_share_memory");
  mn_storage_release(s);
  s = make(SIM0, 8);
  MN_CHECK_ERR(mn_storage_ipc_export(s, &h), MN_ERR_NOT_SUPPORTED, "no CUDA IPC");
  mn_storage_release(s);
  memset(&h, 0, sizeof h);
  MN_CHECK_ERR(mn_storage_from_ipc_handle(SIM0, &h, &t), MN_ERR_NOT_SUPPORTED, "no CUDA IPC");
  h.reserved = 1;
  MN_CHECK_ERR(mn_storage_from_ipc_handle(SIM0, &h, &t), MN_ERR_INVALID_ARGUMENT, "reserved");
  MN_CHECK(t == NULL);
}

MN_TEST(format_and_tolist) {
  float f[4] = {1, 2.5f, -3, 4};
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_from_buffer_copy(SIM0, f, sizeof f, &s));
  char buf[256];
  size_t len = 0;
  MN_CHECK_OK(mn_storage_format(s, MN_DTYPE_FLOAT32, 10, buf, sizeof buf, &len));
  MN_CHECK(len == strlen(buf));
  MN_CHECK(strstr(buf, "sim:0") && strstr(buf, "16 bytes") && strstr(buf, "allocator") &&
           strstr(buf, "refcount 1") && strstr(buf, "[1, 2.5, -3, 4]"));
  MN_CHECK_OK(mn_storage_format(s, MN_DTYPE_FLOAT32, 2, buf, sizeof buf, NULL));
  MN_CHECK(strstr(buf, "[1, 2.5, ... 2 more]") != NULL);
  MN_CHECK_OK(mn_storage_format(s, MN_DTYPE_INT64, 10, buf, 10, &len));
  MN_CHECK(strlen(buf) == 9 && len > 9);
  mn_scalar_t v[8];
  size_t n = 0;
  MN_CHECK_OK(mn_storage_tolist(s, MN_DTYPE_FLOAT32, v, 8, &n));
  MN_CHECK(n == 4 && v[1].kind == MN_SCALAR_FLOAT && v[1].v.f == 2.5);
  MN_CHECK_OK(mn_storage_tolist(s, MN_DTYPE_INT16, v, 3, &n));
  MN_CHECK(n == 3);
  FILE *out = tmpfile();
  MN_CHECK_OK(mn_storage_print(s, MN_DTYPE_UINT8, 4, out));
  fclose(out);
  MN_CHECK_ERR(mn_storage_format(s, (mn_dtype)50, 1, buf, sizeof buf, NULL), MN_ERR_INVALID_ARGUMENT, "dtype");
  mn_storage_release(s);
}

/* ---- cross-process ---------------------------------------------------------------- */

static int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

MN_TEST(child_maps_shared_memory_and_file) {
  enum { N = 4096 };
  mn_storage_t *shm = make(CPU, N), *file = NULL;
  memset(mn_storage_data(shm), 1, N);
  MN_CHECK_OK(mn_storage_share_memory(shm));
  char handle[MN_SHM_HANDLE_MAX], path[300];
  MN_CHECK_OK(mn_storage_shm_handle(shm, handle, sizeof handle));
  tmp_path(path, sizeof path, "cross.bin");
  unlink(path);
  MN_CHECK_OK(mn_storage_from_file(path, true, N, &file));
  int go[2], done[2];
  MN_CHECK(pipe(go) == 0 && pipe(done) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    /* child: map both, wait for the parent's writes, check, write back */
    close(go[1]);
    close(done[0]);
    mn_storage_t *a = NULL, *b = NULL;
    if (mn_storage_from_shm_handle(handle, &a) != MN_OK) _exit(10);
    if (mn_storage_from_file(path, true, N, &b) != MN_OK) _exit(11);
    char c = 0;
    if (write(done[1], "m", 1) != 1 || read(go[0], &c, 1) != 1) _exit(12);
    unsigned char *pa = mn_storage_data(a), *pb = mn_storage_data(b);
    if (pa[0] != 42 || pa[N - 1] != 43) _exit(13);
    if (pb[0] != 'p' || pb[N - 1] != 'q') _exit(14);
    pa[1] = 99;
    pb[1] = 'c';
    mn_storage_release(a);
    mn_storage_release(b);
    _exit(0);
  }
  close(go[0]);
  close(done[1]);
  char c = 0;
  MN_CHECK(read(done[0], &c, 1) == 1 && c == 'm'); /* the child has mapped both */
  unsigned char *ps = mn_storage_data(shm), *pf = mn_storage_data(file);
  ps[0] = 42;
  ps[N - 1] = 43;
  pf[0] = 'p';
  pf[N - 1] = 'q';
  MN_CHECK(write(go[1], "g", 1) == 1);
  MN_CHECK(wait_child(pid) == 0);
  MN_CHECK(ps[1] == 99 && pf[1] == 'c');
  close(go[1]);
  close(done[0]);
  mn_storage_release(shm);
  mn_storage_release(file);
  unlink(path);
}

/* from_buffer on SIM takes only memory of that device (fresh adversarial pass:
 * a host pointer wrapped as SIM memory let the kernels write anywhere). */
MN_TEST(sim_from_buffer_refuses_foreign_pointers) {
  mn_storage_t *s = make(SIM0, 256), *w = NULL;
  char host[64];
  MN_CHECK_ERR(mn_storage_from_buffer(SIM0, host, sizeof host, NULL, NULL, &w), MN_ERR_INVALID_ARGUMENT,
               "is not mapped memory of sim:0");
  MN_CHECK_ERR(mn_storage_from_buffer(SIM0, (void *)(uintptr_t)0x1000, 16, NULL, NULL, &w), MN_ERR_INVALID_ARGUMENT,
               "not mapped memory");
  char *d = mn_storage_data(s);
  MN_CHECK_ERR(mn_storage_from_buffer(SIM0, d + 128, (size_t)1 << 30, NULL, NULL, &w), MN_ERR_INVALID_ARGUMENT,
               "not mapped memory"); /* runs past the device allocation (the cached segment) */
  MN_CHECK_ERR(mn_storage_from_buffer(SIM1, d, 16, NULL, NULL, &w), MN_ERR_INVALID_ARGUMENT, "sim:1");
  MN_CHECK(w == NULL);
  MN_CHECK_OK(mn_storage_from_buffer(SIM0, d + 128, 128, NULL, NULL, &w)); /* inside it: fine */
  if (w) MN_CHECK_OK(mn_storage_fill(w, 7, NULL));
  mn_storage_release(w);
  MN_CHECK_OK(mn_storage_from_buffer(CPU, host, sizeof host, NULL, NULL, &w)); /* any host memory on the CPU */
  mn_storage_release(w);
  mn_storage_release(s);
}

/* ---- shared-memory handles open only mnemo's memory (not any fd it is handed) ---- */
#ifdef __linux__
/* A memfd of `size` bytes named `name`, with `seals` added (0: none; -1:
 * made without MFD_ALLOW_SEALING). */
static int make_memfd(const char *name, size_t size, int seals) {
  int fd = memfd_create(name, MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
  MN_CHECK(fd >= 0);
  if (fd < 0) return -1;
  MN_CHECK(ftruncate(fd, (off_t)size) == 0);
  if (seals > 0) MN_CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
  return fd;
}

/* The handle text for descriptor fd of this process. */
static void handle_of(char *buf, size_t n, int fd, size_t nbytes) {
  snprintf(buf, n, "mnemo-shm:%ld:%d:%zu", (long)getpid(), fd, nbytes);
}

/* Checks that handle text h and descriptor fd are both refused with
 * MN_ERR_INVALID_ARGUMENT mentioning `why`, leaving *out untouched. */
static void refused(const char *h, int fd, size_t nbytes, const char *why) {
  mn_storage_t *sentinel = (mn_storage_t *)&mn_test_failures, *u = sentinel;
  if (h) MN_CHECK_ERR(mn_storage_from_shm_handle(h, &u), MN_ERR_INVALID_ARGUMENT, why);
  MN_CHECK(u == sentinel);
  if (fd >= 0) MN_CHECK_ERR(mn_storage_from_shm_fd(fd, nbytes, &u), MN_ERR_INVALID_ARGUMENT, why);
  MN_CHECK(u == sentinel);
}

MN_TEST(shm_handles_open_only_mnemo_memory) {
  enum { N = 4096 };
  int fds0 = mn_test_count_fds(), maps0 = mn_test_count_maps("memfd:"), deleted0 = mn_test_count_maps("(deleted)");
  mn_storage_t *s = make(CPU, N), *u = NULL;
  memset(mn_storage_data(s), 0x5a, N);
  MN_CHECK_OK(mn_storage_share_memory(s));
  int sfd = -1;
  MN_CHECK_OK(mn_storage_shm_fd(s, &sfd));
  char h[MN_SHM_HANDLE_MAX], bad[96];

  /* mnemo's memory is sealed: it cannot shrink (no SIGBUS) nor grow */
  MN_CHECK((fcntl(sfd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
           (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  MN_CHECK(ftruncate(sfd, 0) != 0 && errno == EPERM);
  MN_CHECK(ftruncate(sfd, 2 * N) != 0 && errno == EPERM);

  /* the real handle works, and aliases the storage */
  MN_CHECK_OK(mn_storage_shm_handle(s, h, sizeof h));
  MN_CHECK_OK(mn_storage_from_shm_handle(h, &u));
  if (u) {
    MN_CHECK(mn_storage_nbytes(u) == N && mn_storage_get_kind(u) == MN_STORAGE_SHARED);
    ((unsigned char *)mn_storage_data(u))[N - 1] = 0x33;
    MN_CHECK(((unsigned char *)mn_storage_data(s))[N - 1] == 0x33 && ((unsigned char *)mn_storage_data(u))[0] == 0x5a);
    mn_storage_release(u);
    u = NULL;
  }
  /* the wrong nbytes: a handle must name the exact size; a descriptor at least nbytes */
  handle_of(bad, sizeof bad, sfd, N + 1);
  refused(bad, -1, 0, "not the 4097 the handle names");
  handle_of(bad, sizeof bad, sfd, N - 1);
  refused(bad, -1, 0, "holds 4096 bytes");
  handle_of(bad, sizeof bad, sfd, 0);
  refused(bad, -1, 0, "not the 0 the handle names");
  refused(NULL, sfd, N + 1, "fewer than 4097");
  MN_CHECK_OK(mn_storage_from_shm_fd(sfd, N - 1, &u)); /* a prefix */
  MN_CHECK(u && mn_storage_nbytes(u) == N - 1);
  mn_storage_release(u);
  u = NULL;

  /* a read-only (or O_PATH) descriptor of mnemo's memory: a handle grants what
   * its descriptor grants, not read-write through /proc (fresh adversarial pass) */
  char sfd_path[40];
  snprintf(sfd_path, sizeof sfd_path, "/proc/self/fd/%d", sfd);
  int modes[] = {O_RDONLY, O_WRONLY, O_PATH};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    int ro = open(sfd_path, modes[i] | O_CLOEXEC);
    MN_CHECK(ro >= 0);
    handle_of(bad, sizeof bad, ro, N);
    refused(bad, -1, 0, "the owner's descriptor is not open for reading and writing");
    refused(NULL, ro, N, "not open for reading and writing");
    close(ro);
  }

  /* an unlinked regular temporary file of this process (its contents were readable before) */
  char path[300];
  tmp_path(path, sizeof path, "secret.tmp");
  int tfd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  MN_CHECK(tfd >= 0);
  MN_CHECK(ftruncate(tfd, N) == 0 && pwrite(tfd, "secret", 6, 0) == 6);
  unlink(path);
  handle_of(bad, sizeof bad, tfd, N);
  refused(bad, tfd, N, "not mnemo shared memory");
  refused(bad, -1, 0, "secret.tmp (deleted)"); /* the message says what it is */
  close(tfd);

  /* memfds: another name; mnemo's name but unsealed, or sealed only against
   * shrinking, or made without sealing; sealed against writes */
  int other = make_memfd("other", N, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  handle_of(bad, sizeof bad, other, N);
  refused(bad, other, N, "'/memfd:other (deleted)', not mnemo shared memory");
  close(other);
  int seal_cases[] = {0, F_SEAL_SHRINK, -1};
  for (size_t i = 0; i < sizeof seal_cases / sizeof seal_cases[0]; i++) {
    int m = make_memfd("mnemo-shm", N, seal_cases[i]);
    handle_of(bad, sizeof bad, m, N);
    refused(bad, m, N, "not sealed against shrinking and growing");
    close(m);
  }
  int wsealed = make_memfd("mnemo-shm", N, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  handle_of(bad, sizeof bad, wsealed, N);
  refused(bad, wsealed, N, "sealed against writes");
  close(wsealed);

  /* not files at all: refused by type, never opened for real (no FIFO wait) */
  int pp[2];
  MN_CHECK(pipe(pp) == 0);
  handle_of(bad, sizeof bad, pp[0], 0);
  refused(bad, pp[1], 0, "a pipe or FIFO");
  close(pp[0]);
  close(pp[1]);
  int dfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  handle_of(bad, sizeof bad, dfd, 0);
  refused(bad, dfd, 0, "a directory");
  close(dfd);
  int nfd = open("/dev/null", O_RDWR | O_CLOEXEC);
  handle_of(bad, sizeof bad, nfd, 0);
  refused(bad, nfd, 0, "a character device");
  close(nfd);
  /* a descriptor of mnemo's memory open read-only */
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", sfd);
  int ro = open(self, O_RDONLY | O_CLOEXEC);
  refused(NULL, ro, N, "not open for reading and writing");
  close(ro);
  /* a closed descriptor */
  refused(NULL, ro, N, "dup of fd=");

  mn_storage_release(s);
  /* the storage's descriptor is closed: its handle no longer opens */
  mn_storage_t *sentinel = (mn_storage_t *)&mn_test_failures;
  u = sentinel;
  mn_status st = mn_storage_from_shm_handle(h, &u);
  MN_CHECK(st != MN_OK && u == sentinel);
  MN_CHECK(mn_test_count_fds() == fds0);
  MN_CHECK(mn_test_count_maps("memfd:") == maps0 && mn_test_count_maps("(deleted)") == deleted0);
}

/* Another process's handles: its real one opens, one naming its unlinked
 * temporary file is refused. Forks: run before helper threads exist. */
MN_TEST(shm_handles_of_another_process) {
  enum { N = 512 };
  int up[2], down[2];
  MN_CHECK(pipe(up) == 0 && pipe(down) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    mn_storage_t *s = NULL;
    if (mn_storage_create(CPU, N, NULL, NULL, &s) != MN_OK) _exit(10);
    memset(mn_storage_data(s), 0x77, N);
    if (mn_storage_share_memory(s) != MN_OK) _exit(11);
    char path[300], msg[2 * MN_SHM_HANDLE_MAX + 2];
    tmp_path(path, sizeof path, "child-secret.tmp");
    int t = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (t < 0 || pwrite(t, "child secret", 12, 0) != 12) _exit(12);
    unlink(path);
    size_t hl;
    if (mn_storage_shm_handle(s, msg, MN_SHM_HANDLE_MAX) != MN_OK) _exit(13);
    hl = strlen(msg);
    snprintf(msg + hl, sizeof msg - hl, "\nmnemo-shm:%ld:%d:12", (long)getpid(), t);
    size_t len = strlen(msg) + 1;
    char c = 0;
    if (write(up[1], msg, len) != (ssize_t)len || read(down[0], &c, 1) != 1) _exit(14);
    _exit(((unsigned char *)mn_storage_data(s))[0] == 0x42 ? 0 : 15);
  }
  close(up[1]);
  close(down[0]);
  char msg[2 * MN_SHM_HANDLE_MAX + 2] = {0};
  size_t got = 0;
  ssize_t r;
  while (got < sizeof msg - 1 && (r = read(up[0], msg + got, sizeof msg - 1 - got)) > 0) {
    got += (size_t)r;
    if (memchr(msg, '\0', got)) break; /* the child's one write ends with its NUL */
  }
  char *nl = strchr(msg, '\n');
  MN_CHECK(nl != NULL);
  if (nl) {
    *nl = '\0';
    mn_storage_t *u = NULL;
    MN_CHECK_OK(mn_storage_from_shm_handle(msg, &u));
    if (u) {
      unsigned char *p = mn_storage_data(u);
      MN_CHECK(mn_storage_nbytes(u) == N && p[0] == 0x77 && p[N - 1] == 0x77);
      p[0] = 0x42;
      mn_storage_release(u);
    }
    refused(nl + 1, -1, 0, "child-secret.tmp (deleted)', not mnemo shared memory");
  }
  MN_CHECK(write(down[1], "d", 1) == 1);
  MN_CHECK(wait_child(pid) == 0);
  close(up[0]);
  close(down[1]);
}
#endif

/* Names in /dev/shm, sorted, joined by '\n' (the caller frees). */
static char *list_dev_shm(void) {
  size_t cap = 1 << 16, len = 0;
  char *out = calloc(1, cap);
  DIR *d = opendir("/dev/shm");
  if (!d) return out;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (len + n + 2 < cap) {
      memcpy(out + len, e->d_name, n);
      len += n;
      out[len++] = '\n';
    }
  }
  closedir(d);
  return out;
}

/* Whether every line of `after` is a line of `before`. */
static int no_new_entries(const char *before, const char *after) {
  const char *p = after;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = (size_t)(nl - p);
    int found = 0;
    for (const char *q = before; *q;) {
      const char *ql = strchr(q, '\n');
      if ((size_t)(ql - q) == n && memcmp(q, p, n) == 0) found = 1;
      q = ql + 1;
    }
    if (!found) {
      fprintf(stderr, "  new /dev/shm entry: %.*s\n", (int)n, p);
      return 0;
    }
    p = nl + 1;
  }
  return 1;
}

MN_TEST(sigkilled_process_leaves_no_dev_shm_entry) {
  char *before = list_dev_shm();
  int ready[2];
  MN_CHECK(pipe(ready) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    mn_storage_t *s[4];
    for (int i = 0; i < 4; i++) {
      if (mn_storage_create(CPU, 1 << 16, NULL, NULL, &s[i]) != MN_OK) _exit(10);
      if (mn_storage_share_memory(s[i]) != MN_OK) _exit(11);
    }
    if (write(ready[1], "r", 1) != 1) _exit(12);
    for (;;) pause(); /* killed here, holding every storage */
  }
  close(ready[1]);
  char c = 0;
  MN_CHECK(read(ready[0], &c, 1) == 1 && c == 'r');
  char *during = list_dev_shm();
  MN_CHECK(no_new_entries(before, during)); /* no name exists even while mapped */
  MN_CHECK(kill(pid, SIGKILL) == 0);
  MN_CHECK(wait_child(pid) == 128 + SIGKILL);
  char *after = list_dev_shm();
  MN_CHECK(no_new_entries(before, after));
  close(ready[0]);
  free(before);
  free(during);
  free(after);
}

MN_TEST(nothing_left_behind) {
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_test_release_sim_caches();
  for (int i = 0; i < 2; i++) {
    mn_sim_stats_t st;
    MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(i), &st));
    MN_CHECK(st.live_streams == 0 && st.live_events == 0 && st.mapped_bytes == 0 && st.illegal_accesses == 0);
    MN_CHECK_OK(mn_sim_check_invariants(mn_device_sim(i)));
  }
}

/* A sanitizer's allocator replaces the C library's: ASan's quarantines freed
 * memory (up to 256 MiB by design), so resident memory says nothing there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MN_TEST_OWN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MN_TEST_OWN_MALLOC 1
#endif
#endif

/* Resident pages of this process (Linux /proc/self/statm), -1 elsewhere or
 * under a sanitizer's allocator. */
static long resident_pages(void) {
#ifdef MN_TEST_OWN_MALLOC
  return -1;
#else
  long size = 0, res = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
  }
  return res;
#endif
}

/* A loop making one large CPU storage per call (an allocating index_select,
 * a result per batch) reuses the freed memory: its bytes were 256-aligned
 * by aligned_alloc, which asks the C library for more than the block it
 * keeps, so a freed block never fit the next request of its size: with a
 * small allocation kept between calls, the heap grew by the block each call
 * (480 MiB over 40 calls of 16 MiB here) and every page was faulted in anew.
 * Resident memory now stays within a few blocks whatever the loop's length. */
MN_TEST(large_cpu_storages_reuse_freed_memory) {
  const size_t big = (size_t)16 << 20;
  long before = resident_pages();
  void *keep[40] = {0};
  for (int r = 0; r < 40; r++) {
    mn_storage_t *s = NULL;
    MN_CHECK_OK(mn_storage_create(CPU, big, NULL, NULL, &s));
    if (!s) break;
    MN_CHECK(((uintptr_t)mn_storage_data(s) & 255) == 0); /* the CPU device's alignment */
    memset(mn_storage_data(s), r + 1, big);
    keep[r] = malloc(64); /* a small allocation that outlives the block */
    mn_storage_release(s);
  }
  long after = resident_pages(), page = sysconf(_SC_PAGESIZE);
  if (before >= 0 && after >= 0 && page > 0) {
    long grown_mib = (after - before) * page >> 20;
    if (grown_mib > 64) fprintf(stderr, "  resident memory grew by %ld MiB\n", grown_mib);
    MN_CHECK(grown_mib <= 64);
  }
  for (int r = 0; r < 40; r++) free(keep[r]);
}

int main(void) {
  CPU = mn_device_cpu();
  SIM0 = mn_device_sim(0);
  SIM1 = mn_device_sim(1);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/mnemo-test-storage-%ld", (long)getpid());
  if (mkdir(tmpdir, 0700) != 0) {
    perror("mkdir");
    return 1;
  }
  /* the fork tests first, before any helper thread exists */
  MN_RUN(child_maps_shared_memory_and_file);
  MN_RUN(sigkilled_process_leaves_no_dev_shm_entry);
#ifdef __linux__
  MN_RUN(shm_handles_of_another_process);
#endif
  mn_test_configure_sim(2, (size_t)1 << 28);
  MN_RUN(create_and_queries);
  MN_RUN(large_cpu_storages_reuse_freed_memory);
  MN_RUN(resize_keeps_prefix);
  MN_RUN(sim_from_buffer_refuses_foreign_pointers);
  MN_RUN(resize_failure_keeps_old_bytes);
  MN_RUN(resize_refused_for_fixed_kinds);
  MN_RUN(resize_refused_while_views_live);
  MN_RUN(fill_bytes_and_typed);
  MN_RUN(copy_between_devices);
  MN_RUN(clone_to_and_pin);
  MN_RUN(byteswap_sizes);
  MN_RUN(convert_dtypes);
  MN_RUN(from_buffer_wrap_and_copy);
  MN_RUN(refcount_across_threads);
  MN_RUN(from_file_shared_and_private);
  MN_RUN(share_memory_in_place);
#ifdef __linux__
  MN_RUN(shm_handles_open_only_mnemo_memory);
#endif
  MN_RUN(ipc_not_on_host_devices);
  MN_RUN(format_and_tolist);
  MN_RUN(nothing_left_behind);
  rmdir(tmpdir);
  return mn_test_finish();
}
