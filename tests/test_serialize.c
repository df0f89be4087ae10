/* tests/test_serialize.c: save/load (sharing, offsets, strides, devices,
 * checksums, corrupt and truncated files) and safetensors (round trips, a
 * file written by Python, strict header checks) on CPU and SIM; 100k-entry
 * files of both formats load in linear time; the path-taking calls refuse a
 * FIFO, a folder or a device at once (alarm() turns a hang into a failure);
 * file loads mapped (zero-copy, copy-on-write, unmapped with the last
 * storage) or copied under every MN_LOAD_* flag; streamed saves equal the
 * buffers byte for byte; a write cut short leaves the old file and no
 * temporary one; a save keeps the replaced file's mode, honours the umask
 * and writes through symbolic links to their target. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mn_test.h"
#include "test_bytes.h"
#include "runtime/nameset.h"

#ifndef MN_TEST_DATA_DIR
#define MN_TEST_DATA_DIR "tests/data"
#endif

static mn_device_t CPU, SIM0;
static char tmpdir[256];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

/* Element i (row-major over the view's sizes) as a double, read on the host. */
static double elem(const mn_view_t *v, int64_t i) {
  int nd = mn_view_ndim(v);
  int64_t off = mn_view_offset(v);
  for (int d = nd - 1; d >= 0; d--) {
    int64_t sz = mn_view_size(v, d);
    off += (i % sz) * mn_view_stride(v, d);
    i /= sz;
  }
  size_t item = mn_dtype_itemsize(mn_view_dtype(v));
  unsigned char buf[16];
  mn_storage_t *s = mn_view_storage(v);
  MN_CHECK_OK(mn_copy_bytes(CPU, buf, mn_storage_device(s), (unsigned char *)mn_storage_data(s) + (size_t)off * item, item, NULL, 0));
  mn_scalar_t sc;
  MN_CHECK_OK(mn_scalar_from_bytes(mn_view_dtype(v), buf, &sc));
  switch (sc.kind) {
    case MN_SCALAR_BOOL: return sc.v.b;
    case MN_SCALAR_INT: return (double)sc.v.i;
    case MN_SCALAR_UINT: return (double)sc.v.u;
    case MN_SCALAR_FLOAT: return sc.v.f;
    default: return sc.v.c[0];
  }
}

static int same_values(const mn_view_t *a, const mn_view_t *b) {
  if (mn_view_numel(a) != mn_view_numel(b) || mn_view_dtype(a) != mn_view_dtype(b)) return 0;
  for (int64_t i = 0; i < mn_view_numel(a); i++)
    if (elem(a, i) != elem(b, i)) return 0;
  return 1;
}

static int same_geometry(const mn_view_t *a, const mn_view_t *b) {
  if (mn_view_ndim(a) != mn_view_ndim(b) || mn_view_offset(a) != mn_view_offset(b) ||
      mn_view_dtype(a) != mn_view_dtype(b))
    return 0;
  for (int d = 0; d < mn_view_ndim(a); d++)
    if (mn_view_size(a, d) != mn_view_size(b, d) || mn_view_stride(a, d) != mn_view_stride(b, d)) return 0;
  return 1;
}

/* A set of views: four over storage A (float32, shared, strided, reinterpreted
 * as int32, 0-d), one over storage B on `bdev`, one empty. */
#define NV 6
static const char *const NAMES[NV] = {"a.full", "a.t", "a.bits", "a.scalar", "b", "empty"};

static void make_views(mn_device_t adev, mn_device_t bdev, mn_view_t **v) {
  float f[24];
  for (int i = 0; i < 24; i++) f[i] = (float)i * 0.5f - 3.0f;
  int64_t b16[5] = {1, -2, 3, INT64_MAX, INT64_MIN};
  mn_storage_t *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_storage_from_buffer_copy(adev, f, sizeof f, &a));
  MN_CHECK_OK(mn_storage_from_buffer_copy(bdev, b16, sizeof b16, &b));
  int64_t n24 = 24, s43[2] = {4, 3}, st43[2] = {1, 4}, n5 = 5, n0 = 0;
  MN_CHECK_OK(mn_view_create(a, MN_DTYPE_FLOAT32, 1, &n24, NULL, 0, &v[0]));
  MN_CHECK_OK(mn_view_create(a, MN_DTYPE_FLOAT32, 2, s43, st43, 2, &v[1]));
  MN_CHECK_OK(mn_view_create(a, MN_DTYPE_INT32, 1, &n5, NULL, 3, &v[2]));
  MN_CHECK_OK(mn_view_create(a, MN_DTYPE_FLOAT32, 0, NULL, NULL, 23, &v[3]));
  MN_CHECK_OK(mn_view_create(b, MN_DTYPE_INT64, 1, &n5, NULL, 0, &v[4]));
  MN_CHECK_OK(mn_view_create(b, MN_DTYPE_INT64, 1, &n0, NULL, 5, &v[5]));
  mn_storage_release(a);
  mn_storage_release(b);
}

static void destroy_views(mn_view_t **v, int n) {
  for (int i = 0; i < n; i++) mn_view_destroy(v[i]);
}

static void check_loaded(mn_view_t **orig, const mn_named_views_t *nv, mn_device_t dev) {
  MN_CHECK(nv->count == NV && nv->nmeta == 0);
  for (int i = 0; i < NV; i++) {
    mn_view_t *l = mn_named_views_find(nv, NAMES[i]);
    MN_CHECK(l != NULL);
    if (!l) return;
    MN_CHECK(same_geometry(orig[i], l));
    MN_CHECK(same_values(orig[i], l));
    MN_CHECK(mn_device_equal(mn_view_device(l), dev));
  }
  mn_view_t *a0 = mn_named_views_find(nv, "a.full");
  mn_storage_t *sa = mn_view_storage(a0);
  MN_CHECK(mn_view_storage(mn_named_views_find(nv, "a.t")) == sa);
  MN_CHECK(mn_view_storage(mn_named_views_find(nv, "a.bits")) == sa);
  MN_CHECK(mn_view_storage(mn_named_views_find(nv, "a.scalar")) == sa);
  MN_CHECK(mn_view_storage(mn_named_views_find(nv, "b")) != sa);
  MN_CHECK(mn_view_storage(mn_named_views_find(nv, "b")) == mn_view_storage(mn_named_views_find(nv, "empty")));
  MN_CHECK(mn_storage_nbytes(sa) == 96 && mn_storage_refcount(sa) == 4);
  /* a write through one view shows through its siblings */
  MN_CHECK_OK(mn_view_fill(a0, mn_scalar_float(9.0), NULL));
  MN_CHECK_OK(mn_device_synchronize(dev));
  MN_CHECK(elem(mn_named_views_find(nv, "a.t"), 5) == 9.0 && elem(mn_named_views_find(nv, "a.scalar"), 0) == 9.0);
  MN_CHECK(mn_named_views_find(nv, "nope") == NULL);
}

MN_TEST(save_load_round_trips) {
  mn_device_t devs[2] = {CPU, SIM0};
  char path[300];
  tmp_path(path, sizeof path, "round.mnemo");
  for (int from = 0; from < 2; from++)
    for (int to = 0; to < 2; to++) {
      mn_view_t *v[NV];
      make_views(devs[from], devs[1 - from], v);
      MN_CHECK_OK(mn_save(path, NV, NAMES, (const mn_view_t *const *)v));
      mn_named_views_t *nv = NULL;
      MN_CHECK_OK(mn_load(path, devs[to], &nv));
      if (nv) check_loaded(v, nv, devs[to]);
      mn_named_views_free(nv);
      destroy_views(v, NV);
    }
  /* an empty set */
  MN_CHECK_OK(mn_save(path, 0, NULL, NULL));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load(path, CPU, &nv));
  MN_CHECK(nv && nv->count == 0);
  mn_named_views_free(nv);
  mn_named_views_free(NULL);
  unlink(path);
}

MN_TEST(save_refuses_bad_input) {
  mn_view_t *v[NV];
  make_views(CPU, CPU, v);
  const char *dup[2] = {"x", "x"}, *empty[1] = {""};
  void *data = NULL;
  size_t size = 0;
  MN_CHECK_ERR(mn_save_buffer(2, dup, (const mn_view_t *const *)v, &data, &size), MN_ERR_INVALID_ARGUMENT, "used twice");
  MN_CHECK_ERR(mn_save_buffer(1, empty, (const mn_view_t *const *)v, &data, &size), MN_ERR_INVALID_ARGUMENT, "empty");
  const mn_view_t *nullv[1] = {NULL};
  MN_CHECK_ERR(mn_save_buffer(1, NAMES, nullv, &data, &size), MN_ERR_INVALID_ARGUMENT, "is NULL");
  MN_CHECK_ERR(mn_save("/nonexistent-dir/x.mnemo", NV, NAMES, (const mn_view_t *const *)v), MN_ERR_NOT_FOUND,
               "cannot create");
  MN_CHECK(data == NULL);
  destroy_views(v, NV);
}

static void expect_format(const void *data, size_t size, const char *needle) {
  mn_named_views_t *nv = NULL;
  MN_CHECK_ERR(mn_load_buffer(data, size, CPU, &nv), MN_ERR_FORMAT, needle);
  MN_CHECK(nv == NULL);
}

MN_TEST(load_refuses_corrupt_files) {
  mn_view_t *v[NV];
  make_views(CPU, CPU, v);
  unsigned char *data = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(NV, NAMES, (const mn_view_t *const *)v, (void **)&data, &size));
  destroy_views(v, NV);
  unsigned char *copy = malloc(size);
  /* every truncation */
  for (size_t n = 0; n < size; n++) {
    memcpy(copy, data, n);
    mn_named_views_t *nv = NULL;
    mn_clear_error();
    mn_status st = mn_load_buffer(n ? copy : NULL, n, CPU, &nv);
    MN_CHECK(st == MN_ERR_FORMAT && nv == NULL && mn_last_error()[0] != '\0');
  }
  /* every single-byte corruption is caught (magic, version, checksums, layout) */
  int caught = 0;
  for (size_t i = 0; i < size; i++) {
    memcpy(copy, data, size);
    copy[i] ^= 0x5a;
    mn_named_views_t *nv = NULL;
    mn_status st = mn_load_buffer(copy, size, CPU, &nv);
    caught += st == MN_ERR_FORMAT;
    mn_named_views_free(nv);
  }
  MN_CHECK(caught == (int)size);
  memcpy(copy, data, size);
  copy[0] = 'X';
  expect_format(copy, size, "bad magic");
  memcpy(copy, data, size);
  copy[8] = 3; /* 1 and 2 are read (2: quantized views) */
  expect_format(copy, size, "unsupported format version 3");
  memcpy(copy, data, size);
  copy[50] ^= 1;
  expect_format(copy, size, "header checksum mismatch");
  memcpy(copy, data, size);
  copy[size - 1] ^= 1;
  expect_format(copy, size, "checksum mismatch: the file is corrupt");
  /* a valid checksum over a view that reaches past its storage */
  memcpy(copy, data, size);
  uint64_t hs = mn_test_rd_le(copy + 16, 8);
  /* the first view record follows 2 storage records: its offset field */
  size_t view0 = 40 + 2 * 24, off_at = view0 + 4 + strlen(NAMES[0]) + 8;
  copy[off_at] = 1; /* offset 1: 24 floats from element 1 overrun 96 bytes */
  mn_test_wr_le(copy + hs - 4, mn_test_crc32(copy, (size_t)hs - 4), 4);
  expect_format(copy, size, "does not fit its storage");
  /* trailing bytes */
  unsigned char *longer = malloc(size + 1);
  memcpy(longer, data, size);
  longer[size] = 0;
  expect_format(longer, size + 1, "contents end at");
  free(longer);
  /* a missing file */
  mn_named_views_t *nv = NULL;
  MN_CHECK_ERR(mn_load("/nonexistent-dir/x.mnemo", CPU, &nv), MN_ERR_NOT_FOUND, "cannot open");
  /* the file path: corrupt on disk */
  char path[300];
  tmp_path(path, sizeof path, "corrupt.mnemo");
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, size / 2, f);
  fclose(f);
  MN_CHECK_ERR(mn_load(path, CPU, &nv), MN_ERR_FORMAT, "mn_load");
  unlink(path);
  free(copy);
  free(data);
}

/* ---- safetensors ----------------------------------------------------------------- */

MN_TEST(safetensors_round_trip) {
  mn_device_t devs[2] = {CPU, SIM0};
  for (int from = 0; from < 2; from++) {
    double d[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0};
    mn_storage_t *sd = NULL, *sh = NULL;
    MN_CHECK_OK(mn_storage_from_buffer_copy(devs[from], d, sizeof d, &sd));
    MN_CHECK_OK(mn_storage_from_buffer_copy(devs[from], h, sizeof h, &sh));
    int64_t s32[2] = {3, 2}, t32[2] = {1, 3}, n2 = 2;
    mn_view_t *v[3];
    MN_CHECK_OK(mn_view_create(sh, MN_DTYPE_FLOAT16, 1, &n2, NULL, 1, &v[0]));
    MN_CHECK_OK(mn_view_create(sd, MN_DTYPE_FLOAT64, 2, s32, t32, 0, &v[1])); /* transposed */
    MN_CHECK_OK(mn_view_create(sh, MN_DTYPE_INT16, 0, NULL, NULL, 3, &v[2]));
    const char *names[3] = {"half \"quoted\"", "t", "z"};
    const char *keys[2] = {"format", "note"}, *vals[2] = {"pt", "line\nbreak \xc3\xa9"};
    char path[300];
    tmp_path(path, sizeof path, "rt.safetensors");
    MN_CHECK_OK(mn_safetensors_save(path, 3, names, (const mn_view_t *const *)v, 2, keys, vals));
    for (int to = 0; to < 2; to++) {
      mn_named_views_t *nv = NULL;
      MN_CHECK_OK(mn_safetensors_load(path, devs[to], &nv));
      if (!nv) continue;
      MN_CHECK(nv->count == 3 && nv->nmeta == 2);
      for (int i = 0; i < 3; i++) {
        mn_view_t *l = mn_named_views_find(nv, names[i]);
        MN_CHECK(l && mn_view_is_contiguous(l) && same_values(v[i], l) && mn_view_ndim(l) == mn_view_ndim(v[i]));
        MN_CHECK(l && mn_device_equal(mn_view_device(l), devs[to]));
      }
      MN_CHECK(strcmp(nv->meta_keys[1], "note") == 0 && strcmp(nv->meta_values[1], vals[1]) == 0);
      MN_CHECK(elem(mn_named_views_find(nv, "t"), 1) == 4.0); /* t[0][1] = d[3] */
      MN_CHECK(mn_view_storage(nv->views[0]) != mn_view_storage(nv->views[1]));
      mn_named_views_free(nv);
    }
    unlink(path);
    /* aliasing, complex128 and reserved names are refused */
    const char *two[2] = {"x", "y"};
    const mn_view_t *alias[2] = {v[0], v[0]};
    void *data = NULL;
    size_t size = 0;
    MN_CHECK_ERR(mn_safetensors_save_buffer(2, two, alias, 0, NULL, NULL, &data, &size), MN_ERR_INVALID_ARGUMENT,
                 "share memory");
    mn_view_t *c = NULL;
    int64_t one = 1;
    MN_CHECK_OK(mn_view_create(sd, MN_DTYPE_COMPLEX128, 1, &one, NULL, 0, &c));
    MN_CHECK_ERR(mn_safetensors_save_buffer(1, two, (const mn_view_t *const *)&c, 0, NULL, NULL, &data, &size),
                 MN_ERR_NOT_SUPPORTED, "complex128");
    const char *meta[1] = {"__metadata__"};
    MN_CHECK_ERR(mn_safetensors_save_buffer(1, meta, (const mn_view_t *const *)v, 0, NULL, NULL, &data, &size),
                 MN_ERR_INVALID_ARGUMENT, "reserved");
    MN_CHECK(data == NULL);
    mn_view_destroy(c);
    destroy_views(v, 3);
    mn_storage_release(sd);
    mn_storage_release(sh);
  }
}

MN_TEST(safetensors_file_from_python) {
  mn_device_t devs[2] = {CPU, SIM0};
  for (int k = 0; k < 2; k++) {
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_safetensors_load(MN_TEST_DATA_DIR "/small.safetensors", devs[k], &nv));
    if (!nv) return;
    MN_CHECK(nv->count == 7 && nv->nmeta == 2);
    MN_CHECK(strcmp(nv->meta_keys[0], "format") == 0 && strcmp(nv->meta_values[0], "pt") == 0);
    mn_view_t *w = mn_named_views_find(nv, "weight"), *b = mn_named_views_find(nv, "bias"),
              *ids = mn_named_views_find(nv, "ids"), *bf = mn_named_views_find(nv, "bf"),
              *m = mn_named_views_find(nv, "mask"), *sc = mn_named_views_find(nv, "scalar"),
              *e = mn_named_views_find(nv, "empty");
    MN_CHECK(w && b && ids && bf && m && sc && e);
    if (!(w && b && ids && bf && m && sc && e)) break;
    MN_CHECK(mn_view_dtype(w) == MN_DTYPE_FLOAT32 && mn_view_ndim(w) == 2 && mn_view_size(w, 1) == 3);
    MN_CHECK(elem(w, 0) == 0.5 && elem(w, 1) == -1.25 && elem(w, 5) == (double)0.001f);
    MN_CHECK(mn_view_dtype(b) == MN_DTYPE_FLOAT16 && elem(b, 0) == 1.5 && elem(b, 1) == -2 && elem(b, 2) == 65504);
    MN_CHECK(mn_view_dtype(ids) == MN_DTYPE_INT64 && elem(ids, 1) == -2 && elem(ids, 2) == 1099511627776.0 &&
             elem(ids, 3) == -9223372036854775808.0);
    MN_CHECK(mn_view_dtype(bf) == MN_DTYPE_BFLOAT16 && elem(bf, 0) == 1.0 && elem(bf, 1) == -2.5);
    MN_CHECK(mn_view_dtype(m) == MN_DTYPE_BOOL && elem(m, 0) == 1 && elem(m, 1) == 0 && elem(m, 3) == 1);
    MN_CHECK(mn_view_dtype(sc) == MN_DTYPE_UINT8 && mn_view_ndim(sc) == 0 && elem(sc, 0) == 7);
    MN_CHECK(mn_view_dtype(e) == MN_DTYPE_FLOAT64 && mn_view_numel(e) == 0);
    /* data order: ids first */
    MN_CHECK(strcmp(nv->names[0], "ids") == 0);
    mn_named_views_free(nv);
  }
}

/* A safetensors buffer from a header text and `body` bytes of data. */
static void expect_st_format(const char *header, size_t body, const char *needle) {
  size_t hl = strlen(header), size = 8 + hl + body;
  unsigned char *buf = calloc(1, size);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  mn_named_views_t *nv = NULL;
  MN_CHECK_ERR(mn_safetensors_load_buffer(buf, size, CPU, &nv), MN_ERR_FORMAT, needle);
  if (nv) fprintf(stderr, "  accepted: %s\n", header);
  MN_CHECK(nv == NULL);
  free(buf);
}

MN_TEST(safetensors_refuses_bad_headers) {
  const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t hl = strlen(ok);
  unsigned char buf[256];
  memset(buf, 0, sizeof buf);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, ok, hl);
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_safetensors_load_buffer(buf, 8 + hl + 8, CPU, &nv));
  mn_named_views_free(nv);
  nv = NULL;
  /* header length: absurd, past the end */
  unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0};
  MN_CHECK_ERR(mn_safetensors_load_buffer(big, sizeof big, CPU, &nv), MN_ERR_FORMAT, "exceeds the limit");
  unsigned char past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  MN_CHECK_ERR(mn_safetensors_load_buffer(past, sizeof past, CPU, &nv), MN_ERR_FORMAT, "past the end");
  MN_CHECK_ERR(mn_safetensors_load_buffer(past, 5, CPU, &nv), MN_ERR_FORMAT, "truncated");
  MN_CHECK(nv == NULL);
  expect_st_format("[]", 0, "start with '{'");
  expect_st_format("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"F33\"");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "shape needs 12 bytes");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the 4-byte data");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "outside");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, "overlaps");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "a hole of 4 bytes");
  expect_st_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "follow the last tensor");
  expect_st_format("{}", 3, "no tensors");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                   "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                   2, "repeated tensor name");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "non-negative integer");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, "expected an integer");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, "leading zero");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]}}", 1,
                   "overflows");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}}",
                   1, "shape needs");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1,
                   "unknown or repeated tensor key \"extra\"");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "needs dtype, shape and data_offsets");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "two entries");
  expect_st_format("{\"__metadata__\":{\"k\":1}}", 0, "values must be strings");
  expect_st_format("{\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{}}", 0, "repeated __metadata__");
  expect_st_format("{\"a\\u0000b\":{}}", 0, "\\u0000");
  expect_st_format("{\"a\\ud800\":{}}", 0, "unpaired surrogate");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} x", 1, "trailing bytes");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, "expected");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},}", 1, "expected a string");
  expect_st_format("{\"abc", 0, "unterminated string");
  expect_st_format("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,1]}}",
                   1, "too many entries");
  /* a missing file */
  MN_CHECK_ERR(mn_safetensors_load("/nonexistent-dir/x.safetensors", CPU, &nv), MN_ERR_NOT_FOUND, "cannot open");
  /* escapes decode */
  const char *esc = "{\"\\u00e9\\n\\\"\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  hl = strlen(esc);
  memset(buf, 0, sizeof buf);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, esc, hl);
  MN_CHECK_OK(mn_safetensors_load_buffer(buf, 8 + hl + 1, CPU, &nv));
  MN_CHECK(nv && strcmp(nv->names[0], "\xc3\xa9\n\"\xf0\x9f\x98\x80") == 0);
  mn_named_views_free(nv);
}

/* ---- 100k entries: linear-time name checks ------------------------------------------ */

/* A quadratic name check took tens of seconds on files like these.
 * The tests check that they load, right; how fast is bench_storage's
 * load_many cases (< 100 ms each), never a timed test. */
#define MANY 100000

/* MANY one-element float32 views of one storage (view i holds i at element
 * i), named "v000000", "v000001", ... */
typedef struct many_s {
  mn_storage_t *storage;
  mn_view_t **views;
  char **names;
} many_t;

static bool many_make(many_t *m) {
  memset(m, 0, sizeof *m);
  float *f = malloc(MANY * sizeof *f);
  m->views = calloc(MANY, sizeof *m->views);
  m->names = calloc(MANY, sizeof *m->names);
  if (!f || !m->views || !m->names) {
    free(f);
    return false;
  }
  for (size_t i = 0; i < MANY; i++) f[i] = (float)i;
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, f, MANY * sizeof *f, &m->storage));
  free(f);
  if (!m->storage) return false;
  int64_t one = 1;
  for (size_t i = 0; i < MANY; i++) {
    m->names[i] = malloc(8);
    if (!m->names[i]) return false;
    snprintf(m->names[i], 8, "v%06zu", i);
    if (mn_view_create(m->storage, MN_DTYPE_FLOAT32, 1, &one, NULL, (int64_t)i, &m->views[i]) != MN_OK) return false;
  }
  return true;
}

static void many_free(many_t *m) {
  for (size_t i = 0; m->views && i < MANY; i++) mn_view_destroy(m->views[i]);
  for (size_t i = 0; m->names && i < MANY; i++) free(m->names[i]);
  free(m->views);
  free(m->names);
  mn_storage_release(m->storage);
}

/* Overwrites the one copy of `from` in p[0..n) with `to` (same length). */
static bool patch_once(unsigned char *p, size_t n, const char *from, const char *to) {
  size_t k = strlen(from);
  unsigned char *at = memmem(p, n, from, k);
  if (!at || memmem(at + 1, n - (size_t)(at + 1 - p), from, k)) return false;
  memcpy(at, to, k);
  return true;
}

/* The hash set the loaders check names with (runtime/nameset.h). */
MN_TEST(nameset_finds_every_repeat) {
  enum { N = 20000 };
  static char keys[N][16];
  mn__nameset_t s;
  for (int hint = 0; hint <= N; hint += N) {
    mn__nameset_init(&s, (size_t)hint);
    MN_CHECK(!mn__nameset_find(&s, "x", 1, NULL));
    size_t prev = 0, val = 0;
    int fresh = 0, repeats = 0, found = 0;
    for (int i = 0; i < N; i++) {
      /* byte strings: the same text at different lengths, a NUL inside */
      int n = snprintf(keys[i], sizeof keys[i], "k%d", i / 2);
      size_t len = (size_t)n + (size_t)(i % 2);
      fresh += mn__nameset_insert(&s, keys[i], len, (size_t)i, NULL) == MN__NAMESET_NEW;
    }
    MN_CHECK(fresh == N && s.count == N);
    for (int i = 0; i < N; i++) {
      size_t len = strlen(keys[i]) + (size_t)(i % 2);
      repeats += mn__nameset_insert(&s, keys[i], len, 0, &prev) == MN__NAMESET_DUPLICATE && prev == (size_t)i;
      found += mn__nameset_find(&s, keys[i], len, &val) && val == (size_t)i;
    }
    MN_CHECK(repeats == N && found == N && s.count == N);
    MN_CHECK(mn__nameset_find(&s, "k9999", 5, &val) && val == 19998);
    MN_CHECK(!mn__nameset_find(&s, "k10000", 6, NULL) && !mn__nameset_find(&s, "", 0, NULL));
    MN_CHECK(mn__nameset_insert(&s, "", 0, 7, NULL) == MN__NAMESET_NEW);
    MN_CHECK(mn__nameset_insert(&s, "", 0, 8, &prev) == MN__NAMESET_DUPLICATE && prev == 7);
    mn__nameset_free(&s);
    MN_CHECK(s.count == 0 && !mn__nameset_find(&s, "k1", 2, NULL));
    MN_CHECK(mn__nameset_insert(&s, "k1", 2, 1, NULL) == MN__NAMESET_NEW); /* usable again */
    mn__nameset_free(&s);
  }
}

/* Writes data to a temporary file and loads it with `load`: MANY views. */
static void load_many_from_file(const unsigned char *data, size_t size, const char *name,
                                mn_status (*load)(const char *, mn_device_t, mn_named_views_t **)) {
  char path[300];
  tmp_path(path, sizeof path, name);
  FILE *f = fopen(path, "wb");
  MN_CHECK(f && fwrite(data, 1, size, f) == size);
  if (f) fclose(f);
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(load(path, CPU, &nv));
  MN_CHECK(nv && nv->count == MANY);
  mn_named_views_free(nv);
  unlink(path);
}

MN_TEST(many_views_load) {
  many_t m;
  bool made = many_make(&m);
  MN_CHECK(made);
  if (!made) {
    many_free(&m);
    return;
  }
  const char *const *names = (const char *const *)m.names;
  const mn_view_t *const *views = (const mn_view_t *const *)m.views;
  unsigned char *data = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(MANY, names, views, (void **)&data, &size));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load_buffer(data, size, CPU, &nv));
  if (nv) {
    MN_CHECK(nv->count == MANY && strcmp(nv->names[MANY - 1], "v099999") == 0);
    MN_CHECK(elem(nv->views[MANY - 1], 0) == (double)(MANY - 1));
    MN_CHECK(mn_view_storage(nv->views[0]) == mn_view_storage(nv->views[MANY - 1])); /* one storage */
    MN_CHECK(mn_named_views_find(nv, "v054321") == nv->views[54321]);
  }
  mn_named_views_free(nv);
  nv = NULL;
  load_many_from_file(data, size, "many.mnemo", mn_load);
  /* a duplicate at the very end is still found, with a valid header checksum */
  if (data) {
    uint64_t hs = mn_test_rd_le(data + 16, 8);
    MN_CHECK(hs <= size && patch_once(data, (size_t)hs, "v099999", "v000000"));
    mn_test_wr_le(data + hs - 4, mn_test_crc32(data, (size_t)hs - 4), 4);
    MN_CHECK_ERR(mn_load_buffer(data, size, CPU, &nv), MN_ERR_FORMAT, "name 'v000000' appears twice");
    MN_CHECK(nv == NULL);
  }
  free(data);
  data = NULL;
  /* and refused on save, naming both views */
  char *last = m.names[MANY - 1];
  m.names[MANY - 1] = m.names[0];
  MN_CHECK_ERR(mn_save_buffer(MANY, names, views, (void **)&data, &size), MN_ERR_INVALID_ARGUMENT,
               "name 'v000000' is used twice (views 0 and 99999)");
  m.names[MANY - 1] = last;
  MN_CHECK(data == NULL);
  many_free(&m);
}

MN_TEST(many_tensors_load) {
  many_t m;
  bool made = many_make(&m);
  char **keys = calloc(MANY, sizeof *keys);
  const char **vals = calloc(MANY, sizeof *vals);
  MN_CHECK(made && keys && vals);
  for (size_t i = 0; keys && vals && i < MANY; i++) {
    keys[i] = malloc(8);
    if (keys[i]) snprintf(keys[i], 8, "k%06zu", i);
    vals[i] = "x";
  }
  const char *const *names = (const char *const *)m.names;
  const mn_view_t *const *views = (const mn_view_t *const *)m.views;
  const char *const *ck = (const char *const *)keys;
  unsigned char *data = NULL;
  size_t size = 0;
  if (made && keys && vals) {
    MN_CHECK_OK(mn_safetensors_save_buffer(MANY, names, views, MANY, ck, vals, (void **)&data, &size));
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_safetensors_load_buffer(data, size, CPU, &nv));
    if (nv) {
      MN_CHECK(nv->count == MANY && nv->nmeta == MANY);
      MN_CHECK(strcmp(nv->names[MANY - 1], "v099999") == 0 && elem(nv->views[MANY - 1], 0) == (double)(MANY - 1));
      MN_CHECK(strcmp(nv->meta_keys[MANY - 1], "k099999") == 0 && strcmp(nv->meta_values[MANY - 1], "x") == 0);
    }
    mn_named_views_free(nv);
    nv = NULL;
    load_many_from_file(data, size, "many.safetensors", mn_safetensors_load);
    /* a repeated name, then a repeated metadata key, at the very end */
    if (data) {
      size_t hend = 8 + (size_t)mn_test_rd_le(data, 8);
      unsigned char *copy = malloc(size);
      memcpy(copy, data, size);
      MN_CHECK(patch_once(copy, hend, "\"v099999\"", "\"v000000\""));
      MN_CHECK_ERR(mn_safetensors_load_buffer(copy, size, CPU, &nv), MN_ERR_FORMAT, "repeated tensor name");
      memcpy(copy, data, size);
      MN_CHECK(patch_once(copy, hend, "\"k099999\"", "\"k000000\""));
      MN_CHECK_ERR(mn_safetensors_load_buffer(copy, size, CPU, &nv), MN_ERR_FORMAT, "repeated __metadata__ key");
      MN_CHECK(nv == NULL);
      free(copy);
    }
    free(data);
    data = NULL;
    /* refused on save: a repeated key, two views over the same bytes */
    char *last = keys[MANY - 1];
    keys[MANY - 1] = keys[0];
    MN_CHECK_ERR(mn_safetensors_save_buffer(MANY, names, views, MANY, ck, vals, (void **)&data, &size),
                 MN_ERR_INVALID_ARGUMENT, "metadata key 'k000000' is used twice");
    keys[MANY - 1] = last;
    mn_view_t *v_last = m.views[MANY - 1];
    m.views[MANY - 1] = m.views[0];
    MN_CHECK_ERR(mn_safetensors_save_buffer(MANY, names, views, 0, NULL, NULL, (void **)&data, &size),
                 MN_ERR_INVALID_ARGUMENT, "views 'v000000' and 'v099999' share memory (bytes 0..4 and 0..4");
    m.views[MANY - 1] = v_last;
    MN_CHECK(data == NULL);
  }
  for (size_t i = 0; keys && i < MANY; i++) free(keys[i]);
  free(keys);
  free(vals);
  many_free(&m);
}

/* ---- path-taking calls: regular files only, never a blocking open ---------------- */

static bool is_fifo(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

MN_TEST(paths_refuse_fifos_folders_and_devices) {
  char fifo[300], tmpfifo[340], file[300];
  tmp_path(fifo, sizeof fifo, "fifo");
  tmp_path(file, sizeof file, "file.mnemo");
  MN_CHECK(mkfifo(fifo, 0600) == 0);
  const char *bad[3] = {fifo, tmpdir, "/dev/null"};
  mn_view_t *v[NV];
  make_views(CPU, CPU, v);
  const mn_view_t *const *cv = (const mn_view_t *const *)v;
  alarm(60); /* a blocking open() fails the test (SIGALRM) instead of hanging it */
  for (int k = 0; k < 3; k++) {
    mn_named_views_t *nv = NULL;
    mn_storage_t *s = NULL;
    MN_CHECK_ERR(mn_load(bad[k], CPU, &nv), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK_ERR(mn_safetensors_load(bad[k], CPU, &nv), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK_ERR(mn_storage_from_file(bad[k], false, 8, &s), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK_ERR(mn_storage_from_file(bad[k], true, 8, &s), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK(nv == NULL && s == NULL);
    if (k == 2) continue; /* /dev/null as a destination: not even tried */
    /* destinations: refused, never replaced by the new file */
    MN_CHECK_ERR(mn_save(bad[k], NV, NAMES, cv), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK_ERR(mn_safetensors_save(bad[k], 1, NAMES, cv, 0, NULL, NULL), MN_ERR_INVALID_ARGUMENT,
                 "is not a regular file");
  }
  MN_CHECK(is_fifo(fifo));
  /* a FIFO planted at a guessable temporary name: the writer's name is random
   * and created exclusively, so it neither blocks nor fails the save */
  snprintf(tmpfifo, sizeof tmpfifo, "%s.tmp%ld", file, (long)getpid());
  MN_CHECK(mkfifo(tmpfifo, 0600) == 0);
  MN_CHECK_OK(mn_save(file, NV, NAMES, cv));
  MN_CHECK(is_fifo(tmpfifo) && access(file, F_OK) == 0);
  unlink(file);
  alarm(0);
  unlink(tmpfifo);
  unlink(fifo);
  /* the writers still work and the loaders read what they wrote */
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_save(file, NV, NAMES, cv));
  MN_CHECK_OK(mn_load(file, CPU, &nv));
  MN_CHECK(nv && nv->count == NV);
  mn_named_views_free(nv);
  nv = NULL;
  /* a file cut short or emptied before the load: a format error, never a fault */
  MN_CHECK(truncate(file, 100) == 0);
  MN_CHECK_ERR(mn_load(file, CPU, &nv), MN_ERR_FORMAT, "mn_load");
  MN_CHECK(truncate(file, 0) == 0);
  MN_CHECK_ERR(mn_load(file, CPU, &nv), MN_ERR_FORMAT, "truncated");
  MN_CHECK_ERR(mn_safetensors_load(file, CPU, &nv), MN_ERR_FORMAT, "truncated");
  MN_CHECK_OK(mn_safetensors_save(file, 1, NAMES, cv, 0, NULL, NULL));
  MN_CHECK(truncate(file, 20) == 0);
  MN_CHECK_ERR(mn_safetensors_load(file, CPU, &nv), MN_ERR_FORMAT, "past the end");
  MN_CHECK(nv == NULL);
  unlink(file);
  destroy_views(v, NV);
}

/* ---- file loads: mapped (zero-copy, private) or copied ------------------------------ */

/* The whole file at path, malloc'd; NULL when it cannot be read. */
static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *b = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      unsigned char *nb = realloc(b, cap);
      if (!nb) break;
      b = nb;
    }
    size_t got = fread(b + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  *size = n;
  return b;
}

static bool write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(data, 1, size, f) == size;
  if (f) ok &= fclose(f) == 0;
  return ok;
}

static bool same_file(const char *path, const unsigned char *want, size_t size) {
  size_t n = 0;
  unsigned char *b = read_file(path, &n);
  bool same = b && n == size && memcmp(b, want, size) == 0;
  free(b);
  return same;
}

MN_TEST(mapped_load_is_zero_copy_and_private) {
  char path[300];
  tmp_path(path, sizeof path, "mapped.mnemo");
  mn_view_t *v[NV];
  make_views(CPU, CPU, v);
  MN_CHECK_OK(mn_save(path, NV, NAMES, (const mn_view_t *const *)v));
  size_t fsize = 0;
  unsigned char *before = read_file(path, &fsize);
  MN_CHECK(before != NULL && mn_test_count_maps(path) == 0);
  int fds = mn_test_count_fds();
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load(path, CPU, &nv));
  MN_CHECK(mn_test_count_fds() == fds); /* the mapping holds no descriptor */
  if (nv && before) {
    mn_storage_t *sa = mn_view_storage(mn_named_views_find(nv, "a.full"));
    MN_CHECK(mn_storage_get_kind(sa) == MN_STORAGE_FOREIGN && !mn_storage_is_resizable(sa));
    MN_CHECK(mn_test_count_maps(path) >= 1);
    MN_CHECK((uintptr_t)mn_storage_data(sa) % 64 == 0);
    /* the bytes are the file's: the storage's first float is at its blob offset */
    uint64_t off_a = mn_test_rd_le(before + 40 + 8, 8);
    MN_CHECK(memcmp(mn_storage_data(sa), before + off_a, 96) == 0);
    check_loaded(v, nv, CPU); /* writes 9.0 through a.full */
    MN_CHECK(same_file(path, before, fsize)); /* copy-on-write: the file is untouched */
    /* the storage outlives the result; the mapping goes with its last storage */
    mn_storage_t *keep = mn_storage_retain(sa);
    mn_named_views_free(nv);
    nv = NULL;
    MN_CHECK(mn_test_count_maps(path) >= 1);
    MN_CHECK(((const float *)mn_storage_data(keep))[5] == 9.0f);
    /* a save over the same path renames a new file in: the mapping keeps the old one */
    mn_view_t *w[NV];
    make_views(CPU, CPU, w);
    MN_CHECK_OK(mn_save(path, NV, NAMES, (const mn_view_t *const *)w));
    MN_CHECK(((const float *)mn_storage_data(keep))[5] == 9.0f);
    destroy_views(w, NV);
    mn_storage_release(keep);
    MN_CHECK(mn_test_count_maps(path) == 0);
  }
  mn_named_views_free(nv);
  free(before);
  unlink(path);
  destroy_views(v, NV);
}

/* Every flag combination on CPU and SIM: round trips, storage kinds, and
 * corrupt or truncated files refused (or, without verification, a corrupt
 * data byte let through), leaving no mapping or descriptor behind. */
MN_TEST(load_flags_and_file_errors) {
  char path[300];
  tmp_path(path, sizeof path, "flags.mnemo");
  mn_view_t *v[NV];
  make_views(CPU, SIM0, v);
  unsigned char *good = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(NV, NAMES, (const mn_view_t *const *)v, (void **)&good, &size));
  if (!good) {
    destroy_views(v, NV);
    return;
  }
  mn_named_views_t *nv = NULL;
  MN_CHECK(write_file(path, good, size));
  MN_CHECK_ERR(mn_load_ex(path, CPU, MN_LOAD_MAP | MN_LOAD_COPY, &nv), MN_ERR_INVALID_ARGUMENT, "exclude each other");
  MN_CHECK_ERR(mn_load_ex(path, CPU, 1u << 9, &nv), MN_ERR_INVALID_ARGUMENT, "unknown flags");
  MN_CHECK_ERR(mn_safetensors_load_ex(path, CPU, 1u << 9, &nv), MN_ERR_INVALID_ARGUMENT, "unknown flags");
  MN_CHECK(nv == NULL);
  uint64_t blob_a = mn_test_rd_le(good + 40 + 8, 8);
  unsigned char *bad = malloc(size);
  memcpy(bad, good, size);
  bad[blob_a + 4] ^= 0x40; /* a.full[1] changes; its checksum no longer matches */
  static const unsigned flags[] = {0, MN_LOAD_MAP, MN_LOAD_COPY, MN_LOAD_NO_VERIFY, MN_LOAD_COPY | MN_LOAD_NO_VERIFY};
  mn_device_t devs[2] = {CPU, SIM0};
  int fds = mn_test_count_fds();
  for (int d = 0; d < 2; d++)
    for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
      bool mapped = d == 0 && !(flags[f] & MN_LOAD_COPY);
      MN_CHECK(write_file(path, good, size));
      MN_CHECK_OK(mn_load_ex(path, devs[d], flags[f], &nv));
      if (nv) {
        check_loaded(v, nv, devs[d]);
        mn_storage_kind kind = mn_storage_get_kind(mn_view_storage(nv->views[0]));
        MN_CHECK(kind == (mapped ? MN_STORAGE_FOREIGN : MN_STORAGE_ALLOCATOR));
        MN_CHECK((mn_test_count_maps(path) > 0) == mapped);
      }
      mn_named_views_free(nv);
      nv = NULL;
      MN_CHECK(write_file(path, bad, size));
      if (flags[f] & MN_LOAD_NO_VERIFY) {
        MN_CHECK_OK(mn_load_ex(path, devs[d], flags[f], &nv));
        if (nv) MN_CHECK(elem(mn_named_views_find(nv, "a.full"), 1) != -2.5);
      } else {
        MN_CHECK_ERR(mn_load_ex(path, devs[d], flags[f], &nv), MN_ERR_FORMAT,
                     "mn_load_ex: storage 0 checksum mismatch: the file is corrupt");
      }
      mn_named_views_free(nv);
      nv = NULL;
      /* cut anywhere: a format error, never a fault */
      for (size_t cut = 0; cut < size; cut += 1 + cut / 3) {
        MN_CHECK(write_file(path, good, cut));
        MN_CHECK_ERR(mn_load_ex(path, devs[d], flags[f], &nv), MN_ERR_FORMAT, "mn_load_ex: ");
        MN_CHECK(nv == NULL);
      }
      MN_CHECK(mn_test_count_maps(path) == 0 && mn_test_count_fds() == fds);
    }
  /* mn_load: the default is the mapped, verified load */
  MN_CHECK(write_file(path, bad, size));
  MN_CHECK_ERR(mn_load(path, CPU, &nv), MN_ERR_FORMAT, "mn_load: storage 0 checksum mismatch");
  free(bad);
  free(good);
  unlink(path);
  destroy_views(v, NV);
}

MN_TEST(safetensors_mapped_where_aligned) {
  char path[300];
  tmp_path(path, sizeof path, "mapped.safetensors");
  float f[4] = {1, 2, 3, 4};
  unsigned char u[3] = {7, 8, 9};
  double dd[2] = {0.5, -0.25};
  mn_storage_t *s[3] = {NULL};
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, f, sizeof f, &s[0]));
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, u, sizeof u, &s[1]));
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, dd, sizeof dd, &s[2]));
  int64_t n4 = 4, n3 = 3, n2 = 2;
  mn_view_t *v[3] = {NULL};
  MN_CHECK_OK(mn_view_create(s[0], MN_DTYPE_FLOAT32, 1, &n4, NULL, 0, &v[0]));
  MN_CHECK_OK(mn_view_create(s[1], MN_DTYPE_UINT8, 1, &n3, NULL, 0, &v[1]));
  MN_CHECK_OK(mn_view_create(s[2], MN_DTYPE_FLOAT64, 1, &n2, NULL, 0, &v[2]));
  const char *names[3] = {"f", "u", "d"}; /* d's data starts at byte 19 of the data: unaligned */
  MN_CHECK_OK(mn_safetensors_save(path, 3, names, (const mn_view_t *const *)v, 0, NULL, NULL));
  size_t fsize = 0;
  unsigned char *before = read_file(path, &fsize);
  for (int copy = 0; copy < 2 && before; copy++) {
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_safetensors_load_ex(path, CPU, copy ? MN_LOAD_COPY : 0, &nv));
    if (!nv) continue;
    for (int i = 0; i < 3; i++) {
      mn_view_t *l = mn_named_views_find(nv, names[i]);
      MN_CHECK(l && same_values(l, v[i]));
      mn_storage_kind want = copy || i == 2 ? MN_STORAGE_ALLOCATOR : MN_STORAGE_FOREIGN;
      MN_CHECK(l && mn_storage_get_kind(mn_view_storage(l)) == want);
      MN_CHECK(l && (uintptr_t)mn_view_data(l) % mn_dtype_itemsize(mn_view_dtype(l)) == 0);
    }
    MN_CHECK((mn_test_count_maps(path) > 0) == !copy);
    MN_CHECK_OK(mn_view_fill(mn_named_views_find(nv, "f"), mn_scalar_float(-1.0), NULL));
    MN_CHECK(elem(mn_named_views_find(nv, "f"), 3) == -1.0);
    MN_CHECK(same_file(path, before, fsize));
    mn_named_views_free(nv);
    MN_CHECK(mn_test_count_maps(path) == 0);
  }
  /* safetensors carries no checksums: MN_LOAD_NO_VERIFY changes nothing */
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_safetensors_load_ex(path, CPU, MN_LOAD_NO_VERIFY, &nv));
  MN_CHECK(nv && nv->count == 3);
  mn_named_views_free(nv);
  nv = NULL;
  /* truncated on disk, each way */
  static const unsigned flags[] = {0, MN_LOAD_COPY};
  for (size_t k = 0; k < 2 && before; k++)
    for (size_t cut = 0; cut < fsize; cut += 1 + cut / 4) {
      MN_CHECK(write_file(path, before, cut));
      MN_CHECK_ERR(mn_safetensors_load_ex(path, k ? SIM0 : CPU, flags[k], &nv), MN_ERR_FORMAT, "mn_safetensors_load_ex: ");
      MN_CHECK(nv == NULL && mn_test_count_maps(path) == 0);
    }
  free(before);
  unlink(path);
  for (int i = 0; i < 3; i++) {
    mn_view_destroy(v[i]);
    mn_storage_release(s[i]);
  }
}

/* ---- streamed saves: the file is the buffer, byte for byte ------------------------- */

/* Storages larger than the sink's 1 MiB chunks and 4 MiB staging buffer, on
 * CPU and SIM, with contiguous and transposed views. */
MN_TEST(streamed_saves_match_buffers) {
  size_t nc = (3u << 20) + 5, ns = (9u << 20) + 12;
  unsigned char *hc = malloc(nc), *hs = malloc(ns);
  MN_CHECK(hc && hs);
  if (!hc || !hs) {
    free(hc);
    free(hs);
    return;
  }
  for (size_t i = 0; i < nc; i++) hc[i] = (unsigned char)(i * 7 + (i >> 12));
  for (size_t i = 0; i < ns; i++) hs[i] = (unsigned char)(i * 13 + (i >> 10));
  mn_storage_t *sc = NULL, *ss = NULL, *sc2 = NULL;
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, hc, nc, &sc));
  MN_CHECK_OK(mn_storage_from_buffer_copy(SIM0, hs, ns, &ss));
  MN_CHECK_OK(mn_storage_from_buffer_copy(CPU, hs, 1u << 16, &sc2));
  int64_t ncf = (int64_t)(nc / 4), nsf = (int64_t)(ns / 4), s2[2] = {64, 300}, t2[2] = {1, 64};
  mn_view_t *v[4] = {NULL};
  MN_CHECK_OK(mn_view_create(sc, MN_DTYPE_INT32, 1, &ncf, NULL, 0, &v[0])); /* no NaN to compare */
  MN_CHECK_OK(mn_view_create(ss, MN_DTYPE_INT32, 1, &nsf, NULL, 0, &v[1]));
  MN_CHECK_OK(mn_view_create(ss, MN_DTYPE_INT16, 2, s2, t2, 1001, &v[2])); /* transposed */
  MN_CHECK_OK(mn_view_create(sc2, MN_DTYPE_INT16, 2, s2, t2, 7, &v[3]));
  const char *names[4] = {"cpu", "sim", "sim.t", "cpu.t"};
  const mn_view_t *const *cv = (const mn_view_t *const *)v;
  char path[300];
  tmp_path(path, sizeof path, "streamed.mnemo");
  unsigned char *buf = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(4, names, cv, (void **)&buf, &size));
  MN_CHECK_OK(mn_save(path, 4, names, cv));
  MN_CHECK(buf && same_file(path, buf, size));
  mn_device_t devs[2] = {CPU, SIM0};
  static const unsigned flags[] = {0, MN_LOAD_COPY};
  for (int d = 0; d < 2; d++)
    for (int f = 0; f < 2; f++) {
      mn_named_views_t *nv = NULL;
      MN_CHECK_OK(mn_load_ex(path, devs[d], flags[f], &nv));
      if (!nv) continue;
      mn_storage_t *lc = mn_view_storage(mn_named_views_find(nv, "cpu"));
      mn_storage_t *ls = mn_view_storage(mn_named_views_find(nv, "sim"));
      unsigned char *back = malloc(ns);
      MN_CHECK_OK(mn_copy_bytes(CPU, back, devs[d], mn_storage_data(lc), nc, NULL, 0));
      MN_CHECK(memcmp(back, hc, nc) == 0);
      MN_CHECK_OK(mn_copy_bytes(CPU, back, devs[d], mn_storage_data(ls), ns, NULL, 0));
      MN_CHECK(memcmp(back, hs, ns) == 0);
      MN_CHECK(same_values(mn_named_views_find(nv, "sim.t"), v[2]));
      free(back);
      mn_named_views_free(nv);
    }
  free(buf);
  buf = NULL;
  /* safetensors: the transposed views gathered, the long ones streamed */
  tmp_path(path, sizeof path, "streamed.safetensors");
  const mn_view_t *pick[3] = {v[0], v[2], v[3]};
  const char *pnames[3] = {"cpu", "sim.t", "cpu.t"}, *k[1] = {"k"}, *val[1] = {"v"};
  MN_CHECK_OK(mn_safetensors_save_buffer(3, pnames, pick, 1, k, val, (void **)&buf, &size));
  MN_CHECK_OK(mn_safetensors_save(path, 3, pnames, pick, 1, k, val));
  MN_CHECK(buf && same_file(path, buf, size));
  for (int d = 0; d < 2; d++) {
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_safetensors_load(path, devs[d], &nv));
    for (int i = 1; nv && i < 3; i++) MN_CHECK(same_values(mn_named_views_find(nv, pnames[i]), pick[i]));
    mn_view_t *l = nv ? mn_named_views_find(nv, "cpu") : NULL;
    unsigned char *back = malloc(nc);
    if (l && back) MN_CHECK_OK(mn_copy_bytes(CPU, back, devs[d], mn_view_data(l), nc - 1, NULL, 0));
    MN_CHECK(l && back && memcmp(back, hc, nc - 1) == 0); /* nc / 4 whole floats */
    free(back);
    mn_named_views_free(nv);
  }
  unlink(path);
  tmp_path(path, sizeof path, "streamed.mnemo");
  unlink(path);
  free(buf);
  for (int i = 0; i < 4; i++) mn_view_destroy(v[i]);
  mn_storage_release(sc);
  mn_storage_release(ss);
  mn_storage_release(sc2);
  free(hc);
  free(hs);
}

/* Names in the test folder that look like a writer's temporary file. */
static int count_tmp_files(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp") != NULL;
  closedir(d);
  return n;
}

/* A write that stops half way (RLIMIT_FSIZE: a short write, then EFBIG, as
 * a full disk gives a short write, then ENOSPC): MN_ERR_IO, the destination
 * keeps its old bytes, no temporary file is left. */
MN_TEST(failed_writes_leave_nothing) {
  char path[300];
  tmp_path(path, sizeof path, "full.mnemo");
  MN_CHECK(write_file(path, "old", 3));
  size_t n = 3u << 20;
  mn_storage_t *s = NULL;
  MN_CHECK_OK(mn_storage_create(CPU, n, NULL, NULL, &s));
  MN_CHECK_OK(mn_storage_fill(s, 0x5a, NULL));
  int64_t nf = (int64_t)(n / 4);
  mn_view_t *v = NULL;
  MN_CHECK_OK(mn_view_create(s, MN_DTYPE_FLOAT32, 1, &nf, NULL, 0, &v));
  const char *names[1] = {"x"};
  const mn_view_t *cv[1] = {v};
  struct rlimit old;
  MN_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 1u << 20;
  MN_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  MN_CHECK_ERR(mn_save(path, 1, names, cv), MN_ERR_IO, "mn_save: writing '");
  MN_CHECK_ERR(mn_safetensors_save(path, 1, names, cv, 0, NULL, NULL), MN_ERR_IO, "mn_safetensors_save: writing '");
  MN_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, prev);
  MN_CHECK(same_file(path, (const unsigned char *)"old", 3));
  MN_CHECK(count_tmp_files() == 0);
  /* a folder where nobody may create a file, not even root (sysfs) */
  if (access("/sys", F_OK) == 0)
    MN_CHECK_ERR(mn_save("/sys/mnemo-test.mnemo", 1, names, cv), MN_ERR_IO,
                 "mn_save: cannot create '/sys/mnemo-test.mnemo': cannot open");
  /* and with room again, the same save works */
  MN_CHECK_OK(mn_save(path, 1, names, cv));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load(path, CPU, &nv));
  MN_CHECK(nv && nv->count == 1 && ((const unsigned char *)mn_view_data(nv->views[0]))[n - 1] == 0x5a);
  mn_named_views_free(nv);
  unlink(path);
  mn_view_destroy(v);
  mn_storage_release(s);
}

/* ---- saves keep the owner's intent: mode, umask, symbolic links ------------------- */

static mode_t mode_of(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? sb.st_mode & 07777 : (mode_t)-1;
}

static bool is_link(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

static bool loads_as_x(const char *path, bool safetensors) {
  mn_named_views_t *nv = NULL;
  mn_status st = safetensors ? mn_safetensors_load(path, CPU, &nv) : mn_load(path, CPU, &nv);
  bool ok = st == MN_OK && nv && nv->count == 1 && strcmp(nv->names[0], "x") == 0;
  mn_named_views_free(nv);
  return ok;
}

/* As PyTorch's torch.save (open(path, "wb")) would leave them: a file saved
 * over keeps its mode (a 0600 file stays private), a new file gets 0666 less
 * the umask, a save through a symbolic link (relative, absolute, chained or
 * dangling) writes the file it points to and leaves the link a link; a loop
 * of links is refused. Both formats, since both go through one writer. */
MN_TEST(saves_keep_mode_umask_and_links) {
  mn_view_t *v[NV];
  make_views(CPU, CPU, v);
  const mn_view_t *const *cv = (const mn_view_t *const *)v;
  const char *names[1] = {"x"};
  const mn_view_t *one[1] = {v[0]};
  mode_t old_umask = umask(027);
  for (int fmt = 0; fmt < 2; fmt++) {
    bool st_fmt = fmt == 1;
#define SAVE(p) (st_fmt ? mn_safetensors_save((p), 1, names, one, 0, NULL, NULL) : mn_save((p), 1, names, one))
    char file[300], link[300], chain[300], abs_link[300], dangling[300], target[300], loop_a[300], loop_b[300];
    tmp_path(file, sizeof file, "private.bin");
    tmp_path(link, sizeof link, "link.bin");
    tmp_path(chain, sizeof chain, "chain.bin");
    tmp_path(abs_link, sizeof abs_link, "abs-link.bin");
    tmp_path(dangling, sizeof dangling, "dangling.bin");
    tmp_path(target, sizeof target, "made-by-save.bin");
    tmp_path(loop_a, sizeof loop_a, "loop-a.bin");
    tmp_path(loop_b, sizeof loop_b, "loop-b.bin");
    /* a new file: 0666 less the umask (027) */
    MN_CHECK_OK(SAVE(file));
    MN_CHECK(mode_of(file) == 0640);
    /* an existing 0600 file stays 0600; a 0604 one keeps its odd bits */
    MN_CHECK(chmod(file, 0600) == 0);
    MN_CHECK_OK(SAVE(file));
    MN_CHECK(mode_of(file) == 0600 && loads_as_x(file, st_fmt));
    MN_CHECK(chmod(file, 0604) == 0);
    MN_CHECK_OK(SAVE(file));
    MN_CHECK(mode_of(file) == 0604);
    MN_CHECK(chmod(file, 0600) == 0);
    /* through links: the target is written, the links stay links */
    MN_CHECK(symlink("private.bin", link) == 0); /* relative to the link's folder */
    MN_CHECK(symlink("link.bin", chain) == 0);   /* a chain of two */
    MN_CHECK(symlink(file, abs_link) == 0);
    MN_CHECK(write_file(file, "old", 3));
    MN_CHECK_OK(SAVE(link));
    MN_CHECK(is_link(link) && !is_link(file) && mode_of(file) == 0600 && loads_as_x(file, st_fmt));
    MN_CHECK(write_file(file, "old", 3));
    MN_CHECK_OK(SAVE(chain));
    MN_CHECK(is_link(chain) && is_link(link) && loads_as_x(file, st_fmt));
    MN_CHECK(write_file(file, "old", 3));
    MN_CHECK_OK(SAVE(abs_link));
    MN_CHECK(is_link(abs_link) && loads_as_x(file, st_fmt) && mode_of(file) == 0600);
    /* a dangling link: the file it names is created (umask applied), as open() does */
    MN_CHECK(symlink("made-by-save.bin", dangling) == 0);
    MN_CHECK_OK(SAVE(dangling));
    MN_CHECK(is_link(dangling) && !is_link(target) && mode_of(target) == 0640 && loads_as_x(target, st_fmt));
    /* a link to a missing folder: not found, nothing created */
    unlink(dangling);
    MN_CHECK(symlink("no-such-folder/x.bin", dangling) == 0);
    MN_CHECK_ERR(SAVE(dangling), MN_ERR_NOT_FOUND, "cannot create '");
    MN_CHECK(is_link(dangling));
    /* a loop of links: refused, the links untouched */
    MN_CHECK(symlink("loop-b.bin", loop_a) == 0 && symlink("loop-a.bin", loop_b) == 0);
    MN_CHECK_ERR(SAVE(loop_a), MN_ERR_IO, "symbolic links");
    MN_CHECK(is_link(loop_a) && is_link(loop_b));
    MN_CHECK(count_tmp_files() == 0);
    const char *all[] = {file, link, chain, abs_link, dangling, target, loop_a, loop_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) unlink(all[i]);
#undef SAVE
  }
  /* A saver who cannot keep the owner and group (here root's file saved by
   * "nobody", in a child): the file becomes the saver's, and the saver's group
   * gets no more than everyone else had (0664 -> 0644). Needs root to set up. */
  if (geteuid() == 0) {
    char dir[300], shared[340];
    tmp_path(dir, sizeof dir, "shared-dir");
    snprintf(shared, sizeof shared, "%s/f.mnemo", dir);
    MN_CHECK(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
    MN_CHECK(write_file(shared, "old", 3) && chmod(shared, 0666) == 0);
    MN_CHECK(chmod(tmpdir, 0711) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      bool ok = setgid(65534) == 0 && setuid(65534) == 0 && mn_save(shared, 1, names, one) == MN_OK;
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    MN_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat sb;
    MN_CHECK(lstat(shared, &sb) == 0 && sb.st_uid == 65534 && (sb.st_mode & 07777) == 0666);
    MN_CHECK(chmod(shared, 0664) == 0 && chown(shared, 0, 0) == 0);
    pid = fork();
    if (pid == 0) {
      bool ok = setgid(65534) == 0 && setuid(65534) == 0 && mn_save(shared, 1, names, one) == MN_OK;
      _exit(ok ? 0 : 1);
    }
    MN_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    MN_CHECK(lstat(shared, &sb) == 0 && sb.st_uid == 65534 && sb.st_gid == 65534 && (sb.st_mode & 07777) == 0644);
    MN_CHECK(chmod(tmpdir, 0700) == 0);
    unlink(shared);
    rmdir(dir);
  }
  /* the whole-view save and the trace-style whole-buffer writer agree */
  char file[300];
  tmp_path(file, sizeof file, "all.mnemo");
  MN_CHECK(write_file(file, "old", 3) && chmod(file, 0600) == 0);
  MN_CHECK_OK(mn_save(file, NV, NAMES, cv));
  MN_CHECK(mode_of(file) == 0600);
  unlink(file);
  umask(old_umask);
  destroy_views(v, NV);
}

MN_TEST(nothing_left_behind) {
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_test_release_sim_caches();
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &st));
  MN_CHECK(st.live_streams == 0 && st.mapped_bytes == 0 && st.illegal_accesses == 0);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

/* --write-safetensors PATH: a file for tests/check_safetensors.py, an
 * independent reader (Python standard library) that checks every value. */
static int write_for_python(const char *path) {
  float w[6] = {1, 2, 3, 4, 5, 6}; /* stored 3x2, saved transposed as 2x3 */
  uint16_t h[3] = {0x3c00, 0xc100, 0x7bff};
  int64_t ids[2] = {-7, (int64_t)1 << 50};
  unsigned char flags[2] = {1, 0};
  mn_storage_t *s[4] = {NULL};
  mn_status st = mn_storage_from_buffer_copy(CPU, w, sizeof w, &s[0]);
  if (st == MN_OK) st = mn_storage_from_buffer_copy(CPU, h, sizeof h, &s[1]);
  if (st == MN_OK) st = mn_storage_from_buffer_copy(CPU, ids, sizeof ids, &s[2]);
  if (st == MN_OK) st = mn_storage_from_buffer_copy(CPU, flags, sizeof flags, &s[3]);
  int64_t s23[2] = {2, 3}, t23[2] = {1, 2}, n3 = 3, n2 = 2;
  mn_view_t *v[4] = {NULL};
  if (st == MN_OK) st = mn_view_create(s[0], MN_DTYPE_FLOAT32, 2, s23, t23, 0, &v[0]);
  if (st == MN_OK) st = mn_view_create(s[1], MN_DTYPE_FLOAT16, 1, &n3, NULL, 0, &v[1]);
  if (st == MN_OK) st = mn_view_create(s[2], MN_DTYPE_INT64, 1, &n2, NULL, 0, &v[2]);
  if (st == MN_OK) st = mn_view_create(s[3], MN_DTYPE_BOOL, 1, &n2, NULL, 0, &v[3]);
  const char *names[4] = {"w.T", "h", "ids", "flags"}, *k[1] = {"producer"}, *val[1] = {"mnemo"};
  if (st == MN_OK) st = mn_safetensors_save(path, 4, names, (const mn_view_t *const *)v, 1, k, val);
  if (st != MN_OK) fprintf(stderr, "%s\n", mn_last_error());
  for (int i = 0; i < 4; i++) {
    mn_view_destroy(v[i]);
    mn_storage_release(s[i]);
  }
  return st == MN_OK ? 0 : 1;
}

/* A CPU storage of n bytes, byte i = (i * mul) >> shift, and a uint8 view of
 * all of it; false (a failed check) when either cannot be made. */
static bool patterned_bytes(size_t n, uint32_t mul, int shift, mn_storage_t **s, mn_view_t **v) {
  MN_CHECK_OK(mn_storage_create(CPU, n, NULL, NULL, s));
  if (!*s) return false;
  unsigned char *b = mn_storage_data(*s);
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((uint32_t)i * mul >> shift);
  int64_t len = (int64_t)n;
  MN_CHECK_OK(mn_view_create(*s, MN_DTYPE_UINT8, 1, &len, NULL, 0, v));
  if (*v) return true;
  mn_storage_release(*s);
  *s = NULL;
  return false;
}

/* A 40 MiB storage (many 1 MiB chunks, many 8 MiB write-out starts, a
 * last chunk of 12 bytes): the file equals the buffer save byte for byte,
 * loads give the bytes back, and a byte flipped at the end, in the middle or
 * at the start of the blob is caught by every verified load (the copying
 * one checksums it chunk by chunk). */
MN_TEST(large_blobs_round_trip_and_checksums) {
  char path[300];
  tmp_path(path, sizeof path, "large.mnemo");
  const size_t big = ((size_t)40 << 20) + 12; /* not a multiple of any chunk */
  mn_storage_t *s = NULL;
  mn_view_t *v = NULL;
  if (!patterned_bytes(big, 2654435761u, 13, &s, &v)) return;
  const unsigned char *b = mn_storage_data(s);
  const char *names[1] = {"big"};
  const mn_view_t *const views[1] = {v};
  void *buf = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save(path, 1, names, views));
  MN_CHECK_OK(mn_save_buffer(1, names, views, &buf, &size));
  MN_CHECK(buf && same_file(path, buf, size));
  static const unsigned flags[] = {0, MN_LOAD_COPY};
  for (size_t f = 0; f < 2; f++) {
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_load_ex(path, CPU, flags[f], &nv));
    MN_CHECK(nv && nv->count == 1 && memcmp(mn_view_data(nv->views[0]), b, big) == 0);
    mn_named_views_free(nv);
  }
  uint64_t blob = buf ? mn_test_rd_le((unsigned char *)buf + 40 + 8, 8) : 0;
  const size_t at[3] = {big - 1, big / 2 + 7, 0};
  for (int k = 0; k < 3 && buf; k++) {
    unsigned char *bad = buf;
    bad[blob + at[k]] ^= 0x10;
    MN_CHECK(write_file(path, bad, size));
    bad[blob + at[k]] ^= 0x10;
    for (size_t f = 0; f < 2; f++) {
      mn_named_views_t *nv = NULL;
      MN_CHECK_ERR(mn_load_ex(path, CPU, flags[f], &nv), MN_ERR_FORMAT, "checksum mismatch");
      MN_CHECK(nv == NULL);
    }
  }
  /* cut short: refused before any read */
  MN_CHECK(buf && write_file(path, buf, size / 2));
  mn_named_views_t *nv = NULL;
  MN_CHECK_ERR(mn_load_ex(path, CPU, MN_LOAD_COPY, &nv), MN_ERR_FORMAT, "truncated");
  free(buf);
  unlink(path);
  mn_view_destroy(v);
  mn_storage_release(s);
}

/* Copying loads are read by the kernels' pool (3 threads here, set in main):
 * a child of fork() has none of the parent's workers and must still load
 * (it hung before the pool ran inline after fork), in parts that combine to
 * the right checksum, as the parent does. */
MN_TEST(copying_loads_in_a_forked_child) {
  char path[300];
  tmp_path(path, sizeof path, "forked.mnemo");
  const size_t big = ((size_t)33 << 20) + 5; /* whole parts and a short one */
  mn_storage_t *s = NULL;
  mn_view_t *v = NULL;
  if (!patterned_bytes(big, 40503u, 7, &s, &v)) return;
  const unsigned char *b = mn_storage_data(s);
  const char *names[1] = {"x"};
  const mn_view_t *const views[1] = {v};
  MN_CHECK_OK(mn_save(path, 1, names, views));
  mn_named_views_t *nv = NULL;
  MN_CHECK_OK(mn_load_ex(path, CPU, MN_LOAD_COPY, &nv)); /* the parent's workers start */
  MN_CHECK(nv && memcmp(mn_view_data(nv->views[0]), b, big) == 0);
  mn_named_views_free(nv);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60); /* a hang fails the test instead of the suite's timeout */
    mn_named_views_t *got = NULL;
    bool ok = mn_load_ex(path, CPU, MN_LOAD_COPY, &got) == MN_OK && memcmp(mn_view_data(got->views[0]), b, big) == 0;
    mn_named_views_free(got);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  MN_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  MN_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unlink(path);
  mn_view_destroy(v);
  mn_storage_release(s);
}

int main(int argc, char **argv) {
  setenv("MNEMO_KERNEL_THREADS", "3", 1); /* parallel copying loads, an uneven share */
  CPU = mn_device_cpu();
  SIM0 = mn_device_sim(0);
  if (argc == 3 && strcmp(argv[1], "--write-safetensors") == 0) return write_for_python(argv[2]);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/mnemo-test-serialize-%ld", (long)getpid());
  if (mkdir(tmpdir, 0700) != 0) {
    perror("mkdir");
    return 1;
  }
  mn_test_configure_sim(1, (size_t)1 << 28);
  MN_RUN(save_load_round_trips);
  MN_RUN(save_refuses_bad_input);
  MN_RUN(load_refuses_corrupt_files);
  MN_RUN(safetensors_round_trip);
  MN_RUN(safetensors_file_from_python);
  MN_RUN(safetensors_refuses_bad_headers);
  MN_RUN(nameset_finds_every_repeat);
  MN_RUN(many_views_load);
  MN_RUN(many_tensors_load);
  MN_RUN(paths_refuse_fifos_folders_and_devices);
  MN_RUN(mapped_load_is_zero_copy_and_private);
  MN_RUN(load_flags_and_file_errors);
  MN_RUN(safetensors_mapped_where_aligned);
  MN_RUN(streamed_saves_match_buffers);
  MN_RUN(large_blobs_round_trip_and_checksums);
  MN_RUN(copying_loads_in_a_forked_child);
  MN_RUN(failed_writes_leave_nothing);
  MN_RUN(saves_keep_mode_umask_and_links);
  MN_RUN(nothing_left_behind);
  rmdir(tmpdir);
  return mn_test_finish();
}
