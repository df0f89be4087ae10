/* tests/test_kernels_cases.h: the kernel cases shared by test_kernels.c (CPU,
 * SIM) and test_kernels_gpu.c (CUDA): every dtype pair x layouts against the
 * scalar reference, bit-exact, on a poisoned dst; fills; casts; random fill. */
#ifndef MNEMO_TESTS_KERNELS_CASES_H
#define MNEMO_TESTS_KERNELS_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/philox.h"
#include "kernels_reference.h"
#include "mn_test.h"
#include "mnemo/mnemo.h"

static mn_device_t kc_dev;
static mn_stream_t *kc_stream;

/* A layout: `perm` orders dims outermost to innermost in memory, `step`
 * spaces each dim, `bcast` (bit mask) gives stride 0, `offset` in elements. */
typedef struct kc_layout {
  int perm[4];
  int64_t step[4];
  unsigned bcast;
  int64_t offset;
} kc_layout;

typedef struct kc_case {
  const char *name;
  int ndim;
  int64_t sizes[4];
  kc_layout dst, src;
} kc_case;

static const kc_case kc_cases[] = {
    {"0-d", 0, {0}, {{0}, {1}, 0, 0}, {{0}, {1}, 0, 3}},
    {"empty", 2, {3, 0}, {{0, 1}, {1, 1}, 0, 0}, {{1, 0}, {1, 1}, 0, 0}},
    {"contiguous", 1, {203}, {{0}, {1}, 0, 0}, {{0}, {1}, 0, 0}},
    {"misaligned", 2, {5, 41}, {{0, 1}, {1, 1}, 0, 3}, {{0, 1}, {1, 1}, 0, 1}},
    {"transposed", 2, {37, 53}, {{0, 1}, {1, 1}, 0, 0}, {{1, 0}, {1, 1}, 0, 1}},
    {"transposed_dst", 2, {70, 9}, {{1, 0}, {1, 1}, 0, 2}, {{0, 1}, {1, 1}, 0, 0}},
    {"permuted_3d", 3, {5, 7, 9}, {{0, 1, 2}, {1, 1, 1}, 0, 0}, {{2, 0, 1}, {1, 1, 1}, 0, 0}},
    {"nchw_to_nhwc", 4, {2, 3, 5, 7}, {{0, 2, 3, 1}, {1, 1, 1, 1}, 0, 0}, {{0, 1, 2, 3}, {1, 1, 1, 1}, 0, 0}},
    {"permuted_4d", 4, {3, 4, 2, 5}, {{3, 1, 0, 2}, {1, 1, 1, 1}, 0, 1}, {{2, 0, 3, 1}, {1, 1, 1, 1}, 0, 0}},
    {"stepped", 2, {6, 10}, {{0, 1}, {1, 2}, 0, 0}, {{0, 1}, {2, 3}, 0, 5}},
    {"stepped_transposed", 3, {4, 6, 5}, {{0, 1, 2}, {1, 1, 3}, 0, 0}, {{2, 1, 0}, {2, 1, 1}, 0, 0}},
    {"broadcast", 3, {4, 5, 6}, {{0, 1, 2}, {1, 1, 1}, 0, 0}, {{0, 1, 2}, {1, 1, 1}, 2u, 0}},
    {"broadcast_scalar", 2, {7, 9}, {{1, 0}, {1, 1}, 0, 0}, {{0, 1}, {1, 1}, 3u, 2}},
};

/* Strides of a layout; returns the storage size in elements. */
static int64_t kc_strides(int ndim, const int64_t *sizes, const kc_layout *l, int64_t *strides) {
  int64_t acc = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    int d = l->perm[i];
    strides[d] = acc * l->step[d];
    acc = strides[d] * (sizes[d] > 0 ? sizes[d] : 1);
  }
  for (int d = 0; d < ndim; d++)
    if (l->bcast & (1u << d)) strides[d] = 0;
  return acc + l->offset + 1;
}

typedef struct kc_buf {
  mn_storage_t *st;
  mn_view_t *view;
  size_t nbytes;
  unsigned char *host; /* the storage's bytes on the host */
  mn__strided_t ref;   /* the view's geometry over `host` */
  void *raw;           /* a foreign storage's device block (kc_make_at) */
} kc_buf;

static void kc_upload(kc_buf *b) {
  MN_CHECK_OK(mn_copy_bytes(kc_dev, mn_storage_data(b->st), mn_device_cpu(), b->host, b->nbytes, kc_stream, 0));
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
}

static void kc_download(const kc_buf *b, unsigned char *out) {
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), out, kc_dev, mn_storage_data(b->st), b->nbytes, kc_stream, 0));
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
}

/* A storage of the layout's size with a view of it. shift < 0: from the
 * device's allocator; else a foreign buffer (mn_storage_from_buffer) at
 * `shift` bytes past a raw device block, so the view's address may be
 * misaligned for its items (as DLPack imports and caller buffers may be). */
static bool kc_make_at(kc_buf *b, mn_dtype dt, int ndim, const int64_t *sizes, const kc_layout *l, int shift) {
  memset(b, 0, sizeof *b);
  int64_t strides[4] = {0};
  int64_t elems = kc_strides(ndim, sizes, l, strides);
  size_t item = mn_dtype_itemsize(dt);
  b->nbytes = (size_t)elems * item;
  b->host = malloc(b->nbytes);
  if (shift < 0) {
    MN_CHECK_OK(mn_storage_create(kc_dev, b->nbytes, NULL, kc_stream, &b->st));
  } else {
    MN_CHECK_OK(mn_device_raw_alloc(kc_dev, b->nbytes + (size_t)shift, &b->raw));
    if (b->raw)
      MN_CHECK_OK(mn_storage_from_buffer(kc_dev, (char *)b->raw + shift, b->nbytes, NULL, NULL, &b->st));
  }
  if (!b->st || !b->host) return false;
  MN_CHECK_OK(mn_view_create(b->st, dt, ndim, sizes, strides, l->offset, &b->view));
  if (!b->view) return false;
  memset(&b->ref, 0, sizeof b->ref);
  b->ref.data = (char *)b->host + l->offset * (int64_t)item;
  b->ref.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    b->ref.sizes[d] = sizes[d];
    b->ref.strides[d] = strides[d];
  }
  return true;
}

static bool kc_make(kc_buf *b, mn_dtype dt, int ndim, const int64_t *sizes, const kc_layout *l) {
  return kc_make_at(b, dt, ndim, sizes, l, -1);
}

static void kc_free(kc_buf *b) {
  mn_view_destroy(b->view);
  mn_storage_release(b->st);
  if (b->raw) MN_CHECK_OK(mn_device_raw_free(kc_dev, b->raw));
  free(b->host);
}

static int64_t kc_numel(const mn__strided_t *s) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) n *= s->sizes[d];
  return n;
}

/* The same-dtype reference: bytes of each element, by multi-index. */
static void kc_ref_copy(const mn__strided_t *dst, const mn__strided_t *src, size_t item) {
  int64_t n = kc_numel(dst), idx[4] = {0};
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, od = 0, os = 0;
    for (int d = dst->ndim - 1; d >= 0; d--) {
      idx[d] = rest % dst->sizes[d];
      rest /= dst->sizes[d];
      od += idx[d] * dst->strides[d];
      os += idx[d] * src->strides[d];
    }
    memcpy(dst->data + od * (int64_t)item, src->data + os * (int64_t)item, item);
  }
}

static int kc_failures_reported;

/* Copies src (random bytes) into a poisoned dst; checks the whole dst storage
 * against the reference, for two poisons (unwritten elements cannot hide).
 * dshift, sshift: kc_make_at's shift of each operand (-1: an allocation). */
static void kc_check_copy_at(const kc_case *c, mn_dtype dt, mn_dtype st, int dshift, int sshift) {
  kc_buf d, s;
  bool ok = kc_make_at(&d, dt, c->ndim, c->sizes, &c->dst, dshift) &
            kc_make_at(&s, st, c->ndim, c->sizes, &c->src, sshift);
  unsigned char *want = ok ? malloc(d.nbytes) : NULL, *got = ok ? malloc(d.nbytes) : NULL;
  if (ok && want && got) {
    mn_test_fill_random(s.host, s.nbytes);
    kc_upload(&s);
    for (int pass = 0; pass < 2; pass++) {
      memset(d.host, pass ? 0x5A : 0xA5, d.nbytes);
      kc_upload(&d);
      MN_CHECK_OK(mn_kernel_copy_view(kc_stream, d.view, s.view));
      kc_download(&d, got);
      if (dt == st)
        kc_ref_copy(&d.ref, &s.ref, mn_dtype_itemsize(dt));
      else
        mn__ref_copy_cast(&d.ref, dt, &s.ref, st, 0, kc_numel(&d.ref));
      memcpy(want, d.host, d.nbytes);
      bool same = memcmp(want, got, d.nbytes) == 0;
      MN_CHECK(same);
      if (!same && kc_failures_reported++ < 10) {
        size_t k = 0;
        while (want[k] == got[k]) k++;
        fprintf(stderr, "  %s %s <- %s (shifts %d, %d): byte %zu: want 0x%02x got 0x%02x\n", c->name,
                mn_dtype_name(dt), mn_dtype_name(st), dshift, sshift, k, want[k], got[k]);
      }
    }
  }
  free(want);
  free(got);
  kc_free(&d);
  kc_free(&s);
}

static void kc_check_copy(const kc_case *c, mn_dtype dt, mn_dtype st) { kc_check_copy_at(c, dt, st, -1, -1); }

/* MNEMO_TEST_QUICK=1 (set by bench/gpu/run.sh under compute-sanitizer): every
 * 5th dtype pair only, same-dtype pairs always. */
/* The dtypes with casts, copies and fills: the quantized ones (written by
 * quantize only) are tested in test_quant and test_kernels_emu. */
#define KC_DTYPES MN_DTYPE_TABLE_PLAIN_ROWS

static bool kc_quick_skip(int dt, int st) {
  const char *q = getenv("MNEMO_TEST_QUICK");
  return q && *q == '1' && dt != st && (dt * MN_DTYPE_COUNT + st) % 5 != 0;
}

MN_TEST(every_pair_every_layout) {
  for (size_t k = 0; k < sizeof kc_cases / sizeof kc_cases[0]; k++)
    for (int dt = 0; dt < KC_DTYPES; dt++)
      for (int st = 0; st < KC_DTYPES; st++)
        if (!kc_quick_skip(dt, st)) kc_check_copy(&kc_cases[k], (mn_dtype)dt, (mn_dtype)st);
}

/* Large enough for the thread pool and several tiles with ragged edges. */
MN_TEST(large_views_on_the_pool) {
  static const kc_case big[] = {
      {"big_transpose", 2, {301, 700}, {{0, 1}, {1, 1}, 0, 0}, {{1, 0}, {1, 1}, 0, 0}},
      {"big_contiguous", 1, {400001}, {{0}, {1}, 0, 1}, {{0}, {1}, 0, 0}},
      {"big_permute", 4, {3, 33, 65, 30}, {{0, 2, 3, 1}, {1, 1, 1, 1}, 0, 0}, {{0, 1, 2, 3}, {1, 1, 1, 1}, 0, 0}},
      {"big_stepped", 2, {500, 400}, {{0, 1}, {1, 1}, 0, 0}, {{0, 1}, {1, 2}, 0, 0}},
      /* dst rows of 384 bytes: the CPU's streaming-store tiles (4-byte items) */
      {"stream_transpose", 2, {1030, 96}, {{0, 1}, {1, 1}, 0, 0}, {{1, 0}, {1, 1}, 0, 0}},
  };
  static const mn_dtype pairs[][2] = {{MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT32}, {MN_DTYPE_BFLOAT16, MN_DTYPE_FLOAT32},
                                      {MN_DTYPE_INT8, MN_DTYPE_INT8},       {MN_DTYPE_FLOAT16, MN_DTYPE_FLOAT64},
                                      {MN_DTYPE_COMPLEX128, MN_DTYPE_COMPLEX128}, {MN_DTYPE_INT64, MN_DTYPE_FLOAT32},
                                      /* 1-byte sources: the CPU's 256-entry table path */
                                      {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT8_E4M3FN}, {MN_DTYPE_BFLOAT16, MN_DTYPE_INT8},
                                      {MN_DTYPE_COMPLEX128, MN_DTYPE_BOOL}, {MN_DTYPE_FLOAT8_E5M2, MN_DTYPE_UINT8}};
  for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) kc_check_copy(&big[k], pairs[p][0], pairs[p][1]);
}

MN_TEST(contiguous_casts_every_pair) {
  /* misaligned starts and a tail: offsets 0..3 elements */
  for (int dt = 0; dt < KC_DTYPES; dt++)
    for (int st = 0; st < KC_DTYPES; st++)
      for (int64_t off = 0; off < 4 && !kc_quick_skip(dt, st); off += 3) {
        size_t n = 1000 + (size_t)off, di = mn_dtype_itemsize((mn_dtype)dt), si = mn_dtype_itemsize((mn_dtype)st);
        size_t dbytes = (n + 8) * di, sbytes = (n + 8) * si;
        void *dd = NULL, *sd = NULL;
        unsigned char *sh = malloc(sbytes), *dh = malloc(dbytes), *want = malloc(dbytes);
        MN_CHECK_OK(mn_device_raw_alloc(kc_dev, dbytes, &dd));
        MN_CHECK_OK(mn_device_raw_alloc(kc_dev, sbytes, &sd));
        mn_test_fill_random(sh, sbytes);
        memset(want, 0xA5, dbytes);
        MN_CHECK_OK(mn_copy_bytes(kc_dev, sd, mn_device_cpu(), sh, sbytes, kc_stream, 0));
        MN_CHECK_OK(mn_copy_bytes(kc_dev, dd, mn_device_cpu(), want, dbytes, kc_stream, 0));
        MN_CHECK_OK(mn_kernel_cast(kc_stream, (char *)dd + off * (int64_t)di, (mn_dtype)dt,
                                   (char *)sd + (3 - off) * (int64_t)si, (mn_dtype)st, n));
        MN_CHECK_OK(mn_stream_synchronize(kc_stream));
        MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), dh, kc_dev, dd, dbytes, kc_stream, 0));
        MN_CHECK_OK(mn_stream_synchronize(kc_stream));
        for (size_t i = 0; i < n; i++) {
          if (dt == st)
            memcpy(want + (i + (size_t)off) * di, sh + (i + 3 - (size_t)off) * si, di);
          else
            mn__ref_cast_element(want + (i + (size_t)off) * di, (mn_dtype)dt, sh + (i + 3 - (size_t)off) * si,
                                 (mn_dtype)st);
        }
        bool same = memcmp(want, dh, dbytes) == 0;
        MN_CHECK(same);
        if (!same && kc_failures_reported++ < 10)
          fprintf(stderr, "  cast %s <- %s off %lld differs\n", mn_dtype_name((mn_dtype)dt),
                  mn_dtype_name((mn_dtype)st), (long long)off);
        MN_CHECK_OK(mn_device_raw_free(kc_dev, dd));
        MN_CHECK_OK(mn_device_raw_free(kc_dev, sd));
        free(sh);
        free(dh);
        free(want);
      }
}

/* Special values through every conversion, against the reference. */
MN_TEST(special_values_every_pair) {
  static const double vals[] = {0.0, -0.0, 1.0, -1.5, 0.5, 2.5, 3.5, 255.0, 256.0, 300.0, -300.0, 65504.0,
                                65520.0, 70000.0, 448.0, 464.0, 1e-8, 6e-8, 1e-40, 3.0e38, 1e300, -1e300,
                                9.3e18, 1.8e19, 2e19, INFINITY, -INFINITY, NAN, -NAN, 0x1p-24, 0x1.8p-25, 0x1p-149};
  enum { N = sizeof vals / sizeof vals[0] };
  for (int st = 0; st < KC_DTYPES; st++) {
    size_t si = mn_dtype_itemsize((mn_dtype)st);
    unsigned char src[N * 16];
    for (int i = 0; i < N; i++) MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(vals[i], vals[N - 1 - i]), (mn_dtype)st, src + i * si));
    for (int dt = 0; dt < KC_DTYPES; dt++) {
      size_t di = mn_dtype_itemsize((mn_dtype)dt);
      unsigned char want[N * 16], got[N * 16];
      void *dd = NULL, *sd = NULL;
      MN_CHECK_OK(mn_device_raw_alloc(kc_dev, N * di, &dd));
      MN_CHECK_OK(mn_device_raw_alloc(kc_dev, N * si, &sd));
      MN_CHECK_OK(mn_copy_bytes(kc_dev, sd, mn_device_cpu(), src, N * si, kc_stream, 0));
      MN_CHECK_OK(mn_kernel_cast(kc_stream, dd, (mn_dtype)dt, sd, (mn_dtype)st, N));
      MN_CHECK_OK(mn_stream_synchronize(kc_stream));
      MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), got, kc_dev, dd, N * di, kc_stream, 0));
      MN_CHECK_OK(mn_stream_synchronize(kc_stream));
      for (int i = 0; i < N; i++) {
        if (dt == st)
          memcpy(want + i * di, src + i * si, di);
        else
          mn__ref_cast_element(want + i * di, (mn_dtype)dt, src + i * si, (mn_dtype)st);
      }
      bool same = memcmp(want, got, N * di) == 0;
      MN_CHECK(same);
      if (!same && kc_failures_reported++ < 10)
        fprintf(stderr, "  special %s <- %s differs\n", mn_dtype_name((mn_dtype)dt), mn_dtype_name((mn_dtype)st));
      MN_CHECK_OK(mn_device_raw_free(kc_dev, dd));
      MN_CHECK_OK(mn_device_raw_free(kc_dev, sd));
    }
  }
}

MN_TEST(fills_every_dtype_and_layout) {
  static const kc_layout layouts[] = {
      {{0, 1, 2}, {1, 1, 1}, 0, 0}, {{2, 0, 1}, {1, 1, 1}, 0, 1}, {{0, 1, 2}, {2, 1, 3}, 0, 2}};
  const int64_t sizes[3] = {3, 5, 7};
  const mn_scalar_t vals[] = {mn_scalar_float(-2.75), mn_scalar_int(-129), mn_scalar_bool(true),
                              mn_scalar_complex(1.5, -2.0), mn_scalar_float(NAN), mn_scalar_uint(UINT64_MAX)};
  for (int dt = 0; dt < KC_DTYPES; dt++)
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
      for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
        kc_buf d;
        if (kc_make(&d, (mn_dtype)dt, 3, sizes, &layouts[l])) {
          unsigned char *got = malloc(d.nbytes), pattern[16];
          memset(d.host, 0xA5, d.nbytes);
          kc_upload(&d);
          MN_CHECK_OK(mn_kernel_fill_view(kc_stream, d.view, vals[v]));
          kc_download(&d, got);
          MN_CHECK_OK(mn_scalar_to_bytes(vals[v], (mn_dtype)dt, pattern));
          mn__ref_fill(&d.ref, mn_dtype_itemsize((mn_dtype)dt), pattern);
          bool same = memcmp(d.host, got, d.nbytes) == 0;
          MN_CHECK(same);
          if (!same && kc_failures_reported++ < 10)
            fprintf(stderr, "  fill %s layout %zu value %zu differs\n", mn_dtype_name((mn_dtype)dt), l, v);
          free(got);
        }
        kc_free(&d);
      }
}

/* Fills large enough for the pool and the dense 4 KiB-block path. */
MN_TEST(large_fills) {
  static const kc_layout layouts[] = {{{0, 1}, {1, 1}, 0, 1}, {{1, 0}, {1, 1}, 0, 0}, {{0, 1}, {1, 2}, 0, 3}};
  static const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_BFLOAT16, MN_DTYPE_COMPLEX128, MN_DTYPE_INT8};
  const int64_t sizes[2] = {1001, 337};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
      kc_buf d;
      if (kc_make(&d, dts[k], 2, sizes, &layouts[l])) {
        unsigned char *got = malloc(d.nbytes), pattern[16];
        memset(d.host, 0xA5, d.nbytes);
        kc_upload(&d);
        MN_CHECK_OK(mn_kernel_fill_view(kc_stream, d.view, mn_scalar_complex(-3.25, 0.5)));
        kc_download(&d, got);
        MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(-3.25, 0.5), dts[k], pattern));
        mn__ref_fill(&d.ref, mn_dtype_itemsize(dts[k]), pattern);
        MN_CHECK(memcmp(d.host, got, d.nbytes) == 0);
        free(got);
      }
      kc_free(&d);
    }
}

MN_TEST(bad_input_is_refused) {
  kc_buf a, b;
  const int64_t sizes[2] = {4, 5}, other[2] = {5, 4};
  const kc_layout l = {{0, 1}, {1, 1}, 0, 0}, bl = {{0, 1}, {1, 1}, 1u, 0};
  kc_make(&a, MN_DTYPE_FLOAT32, 2, sizes, &l);
  kc_make(&b, MN_DTYPE_INT32, 2, other, &l);
  MN_CHECK_ERR(mn_kernel_copy_view(kc_stream, a.view, b.view), MN_ERR_INVALID_ARGUMENT, "size at dim 0");
  kc_buf c;
  kc_make(&c, MN_DTYPE_FLOAT32, 2, sizes, &bl);
  MN_CHECK_ERR(mn_kernel_copy_view(kc_stream, c.view, a.view), MN_ERR_INVALID_ARGUMENT, "stride 0");
  MN_CHECK_ERR(mn_kernel_random_uniform(kc_stream, b.view, 1, 0, 0.0, 1.0), MN_ERR_INVALID_ARGUMENT, "float16");
  MN_CHECK_ERR(mn_kernel_random_uniform(kc_stream, a.view, 1, 0, 2.0, 1.0), MN_ERR_INVALID_ARGUMENT, "low");
  MN_CHECK_ERR(mn_kernel_random_normal(kc_stream, a.view, 1, 0, 0.0, -1.0), MN_ERR_INVALID_ARGUMENT, "std");
  MN_CHECK_ERR(mn_kernel_random_normal(kc_stream, a.view, 1, 0, INFINITY, 1.0), MN_ERR_INVALID_ARGUMENT, "finite");
  MN_CHECK_ERR(mn_kernel_cast(kc_stream, mn_view_data(a.view), MN_DTYPE_FLOAT32, mn_view_data(a.view), MN_DTYPE_INT16, 20),
               MN_ERR_INVALID_ARGUMENT, "overlap");
  kc_free(&a);
  kc_free(&b);
  kc_free(&c);
}

/* ATen's partial-overlap rule: dense operands whose bytes meet are refused
 * unless they cover the same range (an in-place cast, done element by element). */
MN_TEST(partial_overlap_refused_full_overlap_casts_in_place) {
  mn_storage_t *st = NULL;
  MN_CHECK_OK(mn_storage_create(kc_dev, 24 * 4, NULL, kc_stream, &st));
  const int64_t sizes[2] = {4, 5};
  mn_view_t *lo = NULL, *hi = NULL, *as_int = NULL, *as_float = NULL;
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_FLOAT32, 2, sizes, NULL, 0, &lo));
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_FLOAT32, 2, sizes, NULL, 4, &hi));
  MN_CHECK_ERR(mn_kernel_copy_view(kc_stream, lo, hi), MN_ERR_INVALID_ARGUMENT, "single memory location");
  MN_CHECK_ERR(mn_kernel_copy_view(kc_stream, hi, lo), MN_ERR_INVALID_ARGUMENT, "single memory location");
  int32_t ints[20], back_bits[20];
  for (int i = 0; i < 20; i++) ints[i] = i * 7 - 50;
  MN_CHECK_OK(mn_copy_bytes(kc_dev, mn_storage_data(st), mn_device_cpu(), ints, sizeof ints, kc_stream, 0));
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_INT32, 2, sizes, NULL, 0, &as_int));
  MN_CHECK_OK(mn_view_create(st, MN_DTYPE_FLOAT32, 2, sizes, NULL, 0, &as_float));
  MN_CHECK_OK(mn_kernel_copy_view(kc_stream, as_float, as_int));
  MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), back_bits, kc_dev, mn_storage_data(st), sizeof back_bits, kc_stream, 0));
  for (int i = 0; i < 20; i++) {
    float f;
    memcpy(&f, &back_bits[i], 4);
    MN_CHECK(f == (float)(i * 7 - 50));
  }
  mn_view_destroy(lo);
  mn_view_destroy(hi);
  mn_view_destroy(as_int);
  mn_view_destroy(as_float);
  mn_storage_release(st);
}

/* ---- foreign buffers, misaligned addresses, in-place casts ------------------- */

/* Storages over foreign buffers 1, 2, 4 and 8 bytes past an allocation, as
 * dst and as src: operands misaligned for their items take the byte-wise
 * kernels, aligned ones the typed kernels (tiles for the transpose); every
 * item size, contiguous, strided and transposed, copies and casts. */
MN_TEST(foreign_buffers_at_odd_addresses) {
  static const kc_case shapes[] = {
      {"foreign_contiguous", 1, {203}, {{0}, {1}, 0, 0}, {{0}, {1}, 0, 0}},
      {"foreign_stepped", 2, {6, 10}, {{0, 1}, {1, 2}, 0, 1}, {{0, 1}, {2, 3}, 0, 5}},
      {"foreign_transposed", 2, {40, 36}, {{0, 1}, {1, 1}, 0, 0}, {{1, 0}, {1, 1}, 0, 1}},
  };
  static const mn_dtype dts[] = {MN_DTYPE_UINT8, MN_DTYPE_BFLOAT16,  MN_DTYPE_FLOAT32,
                                 MN_DTYPE_INT64, MN_DTYPE_COMPLEX64, MN_DTYPE_COMPLEX128};
  static const int shifts[][2] = {{1, 0}, {0, 1}, {0, 2}, {4, 1}, {8, 8}, {2, 8}, {8, 4}};
  enum { ND = sizeof dts / sizeof dts[0] };
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    for (size_t sh = 0; sh < sizeof shifts / sizeof shifts[0]; sh++)
      for (int i = 0; i < ND; i++)
        for (int j = 0; j < ND; j++)
          if (!kc_quick_skip(i, j)) kc_check_copy_at(&shapes[k], dts[i], dts[j], shifts[sh][0], shifts[sh][1]);
}

/* Fills `value` into a poisoned view; the whole storage against the reference. */
static void kc_check_fill_at(mn_dtype dt, int ndim, const int64_t *sizes, const kc_layout *l, mn_scalar_t value,
                             int shift) {
  kc_buf d;
  if (kc_make_at(&d, dt, ndim, sizes, l, shift)) {
    unsigned char *got = malloc(d.nbytes), pattern[16];
    memset(d.host, 0xA5, d.nbytes);
    kc_upload(&d);
    MN_CHECK_OK(mn_kernel_fill_view(kc_stream, d.view, value));
    kc_download(&d, got);
    MN_CHECK_OK(mn_scalar_to_bytes(value, dt, pattern));
    mn__ref_fill(&d.ref, mn_dtype_itemsize(dt), pattern);
    bool same = got && memcmp(d.host, got, d.nbytes) == 0;
    MN_CHECK(same);
    if (!same && kc_failures_reported++ < 10)
      fprintf(stderr, "  fill %s ndim %d shift %d differs\n", mn_dtype_name(dt), ndim, shift);
    free(got);
  }
  kc_free(&d);
}

MN_TEST(foreign_buffer_fills) {
  static const kc_layout layouts[] = {{{0, 1}, {1, 1}, 0, 0}, {{0, 1}, {1, 2}, 0, 1}, {{1, 0}, {1, 1}, 0, 3}};
  static const mn_dtype dts[] = {MN_DTYPE_BOOL, MN_DTYPE_FLOAT16, MN_DTYPE_INT32, MN_DTYPE_FLOAT64,
                                 MN_DTYPE_COMPLEX128};
  static const int shifts[] = {1, 2, 4, 8};
  const int64_t sizes[2] = {13, 21};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
      for (size_t sh = 0; sh < sizeof shifts / sizeof shifts[0]; sh++)
        kc_check_fill_at(dts[k], 2, sizes, &layouts[l], mn_scalar_complex(1.5, -2.0), shifts[sh]);
}

/* In-place casts: a view cast onto another view of the same elements (same
 * storage, same geometry, another dtype of the same item size), contiguous,
 * strided and transposed, in an allocation and in a misaligned foreign
 * buffer. The kernels must read each element before writing it and may not
 * assume the operands disjoint. */
MN_TEST(in_place_casts) {
  static const kc_case shapes[] = {
      {"in_place_contiguous", 1, {1001}, {{0}, {1}, 0, 1}, {{0}, {1}, 0, 1}},
      {"in_place_stepped", 2, {20, 30}, {{0, 1}, {1, 2}, 0, 3}, {{0, 1}, {1, 2}, 0, 3}},
      {"in_place_stepped_transposed", 2, {40, 36}, {{1, 0}, {2, 1}, 0, 0}, {{1, 0}, {2, 1}, 0, 0}},
  };
  static const mn_dtype pairs[][2] = {{MN_DTYPE_FLOAT32, MN_DTYPE_INT32},        {MN_DTYPE_INT32, MN_DTYPE_FLOAT32},
                                      {MN_DTYPE_FLOAT16, MN_DTYPE_INT16},        {MN_DTYPE_BFLOAT16, MN_DTYPE_FLOAT16},
                                      {MN_DTYPE_FLOAT64, MN_DTYPE_INT64},        {MN_DTYPE_COMPLEX64, MN_DTYPE_UINT64},
                                      {MN_DTYPE_FLOAT8_E4M3FN, MN_DTYPE_UINT8}, {MN_DTYPE_BOOL, MN_DTYPE_FLOAT8_E5M2}};
  static const int shifts[] = {-1, 1, 8};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
      for (size_t sh = 0; sh < sizeof shifts / sizeof shifts[0]; sh++) {
        const kc_case *c = &shapes[k];
        const mn_dtype dt = pairs[p][0], st = pairs[p][1];
        kc_buf s;
        mn_view_t *dv = NULL;
        unsigned char *want = NULL, *got = NULL;
        if (kc_make_at(&s, st, c->ndim, c->sizes, &c->src, shifts[sh])) {
          int64_t strides[4] = {0};
          kc_strides(c->ndim, c->sizes, &c->src, strides);
          MN_CHECK_OK(mn_view_create(s.st, dt, c->ndim, c->sizes, strides, c->src.offset, &dv));
          want = malloc(s.nbytes);
          got = malloc(s.nbytes);
        }
        if (dv && want && got) {
          mn_test_fill_random(s.host, s.nbytes);
          kc_upload(&s);
          MN_CHECK_OK(mn_kernel_copy_view(kc_stream, dv, s.view));
          kc_download(&s, got);
          memcpy(want, s.host, s.nbytes);
          mn__strided_t wref = s.ref;
          wref.data = (char *)want + (s.ref.data - (char *)s.host);
          mn__ref_copy_cast(&wref, dt, &s.ref, st, 0, kc_numel(&s.ref));
          bool same = memcmp(want, got, s.nbytes) == 0;
          MN_CHECK(same);
          if (!same && kc_failures_reported++ < 10)
            fprintf(stderr, "  %s %s <- %s shift %d differs\n", c->name, mn_dtype_name(dt), mn_dtype_name(st),
                    shifts[sh]);
        }
        free(want);
        free(got);
        mn_view_destroy(dv);
        kc_free(&s);
      }
}

/* ---- random fill ------------------------------------------------------------ */

MN_TEST(philox_known_answers) {
  /* Random123's kat_vectors for philox4x32_10 */
  mn__philox_out_t o = mn__philox4x32_10(0, 0, 0, 0, 0, 0);
  MN_CHECK(o.v[0] == 0x6627e8d5u && o.v[1] == 0xe169c58du && o.v[2] == 0xbc57ac4cu && o.v[3] == 0x9b00dbd8u);
  o = mn__philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  MN_CHECK(o.v[0] == 0x408f276du && o.v[1] == 0x41c83b0eu && o.v[2] == 0xa20bc7c6u && o.v[3] == 0x6d5451fdu);
  o = mn__philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  MN_CHECK(o.v[0] == 0xd16cfe09u && o.v[1] == 0x94fdccebu && o.v[2] == 0x5001e420u && o.v[3] == 0x24126ea1u);
}

/* Fills a view of `n` x `m` (transposed when asked; shift as kc_make_at's)
 * and reads the logical row-major values back as float64 on the host. */
static void kc_random_at(mn_dtype dt, bool transposed, bool normal, uint64_t seed, uint64_t offset, int64_t n,
                         int64_t m, int shift, double *out) {
  const int64_t sizes[2] = {n, m};
  const kc_layout l = {{transposed ? 1 : 0, transposed ? 0 : 1}, {1, 1}, 0, 1};
  kc_buf d;
  if (kc_make_at(&d, dt, 2, sizes, &l, shift)) {
    if (normal)
      MN_CHECK_OK(mn_kernel_random_normal(kc_stream, d.view, seed, offset, 1.0, 2.0));
    else
      MN_CHECK_OK(mn_kernel_random_uniform(kc_stream, d.view, seed, offset, -1.0, 3.0));
    kc_download(&d, d.host);
    size_t item = mn_dtype_itemsize(dt);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < m; j++) {
        mn_scalar_t v;
        const char *p = d.ref.data + (i * d.ref.strides[0] + j * d.ref.strides[1]) * (int64_t)item;
        MN_CHECK_OK(mn_scalar_from_bytes(dt, p, &v));
        out[i * m + j] = v.v.f;
      }
  }
  kc_free(&d);
}

static void kc_random(mn_dtype dt, bool transposed, bool normal, uint64_t seed, uint64_t offset, int64_t n, int64_t m,
                      double *out) {
  kc_random_at(dt, transposed, normal, seed, offset, n, m, -1, out);
}

/* The values the host computes for element i: the oracle for every device. */
static double kc_random_host(mn_dtype dt, bool normal, uint64_t seed, uint64_t offset, uint64_t i) {
  mn__rand_params_t rp = {.seed = seed, .offset = offset, .normal = normal, .a = normal ? 1.0 : -1.0,
                          .b = normal ? 2.0 : 4.0, .af = normal ? 1.0f : -1.0f, .bf = normal ? 2.0f : 4.0f};
  unsigned char buf[8];
  mn__rand_elem(&rp, (int)dt, i, buf);
  mn_scalar_t v;
  MN_CHECK_OK(mn_scalar_from_bytes(dt, buf, &v));
  return v.v.f;
}

MN_TEST(random_fill_reproducible_any_layout) {
  enum { R = 37, C = 29, N = R * C };
  static const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_FLOAT16, MN_DTYPE_BFLOAT16};
  double a[N], b[N];
  for (size_t k = 0; k < 4; k++)
    for (int normal = 0; normal < 2; normal++) {
      kc_random(dts[k], false, normal, 42, 7, R, C, a);
      kc_random(dts[k], true, normal, 42, 7, R, C, b);
      MN_CHECK(memcmp(a, b, sizeof a) == 0);
      int64_t bad = 0;
      for (int64_t i = 0; i < N; i++) {
        double want = kc_random_host(dts[k], normal, 42, 7, (uint64_t)i);
        bad += memcmp(&want, &a[i], sizeof want) != 0;
      }
      MN_CHECK(bad == 0);
      if (bad) fprintf(stderr, "  random %s normal=%d: %lld elements differ from the host\n", mn_dtype_name(dts[k]),
                       normal, (long long)bad);
      /* offset + 1 block shifts the sequence by 4 (2 for uniform float64) */
      uint64_t shift = dts[k] == MN_DTYPE_FLOAT64 && !normal ? 2 : 4;
      kc_random(dts[k], false, normal, 42, 8, R, C, b);
      MN_CHECK(memcmp(a + shift, b, sizeof(double) * (N - shift)) == 0);
      kc_random(dts[k], false, normal, 43, 7, R, C, b);
      MN_CHECK(memcmp(a, b, sizeof a) != 0);
    }
  MN_CHECK(mn_kernel_random_blocks(MN_DTYPE_FLOAT32, 9, false) == 3);
  MN_CHECK(mn_kernel_random_blocks(MN_DTYPE_FLOAT64, 9, false) == 5);
  MN_CHECK(mn_kernel_random_blocks(MN_DTYPE_FLOAT64, 9, true) == 3);
}

/* A float32/float64 fill at an address misaligned for the item (a foreign
 * buffer, mn_storage_from_buffer at base + 1 and + 4): the same bits as the
 * host's, and the bytes around it untouched. */
MN_TEST(random_fill_misaligned_buffer) {
  enum { N = 1001, PAD = 64 };
  static const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_BFLOAT16};
  static const size_t shifts[] = {1, 4};
  for (size_t k = 0; k < 3; k++)
    for (size_t sh = 0; sh < 2; sh++)
      for (int normal = 0; normal < 2; normal++) {
        const size_t item = mn_dtype_itemsize(dts[k]), total = N * item + 2 * PAD;
        void *raw = NULL;
        unsigned char *host = malloc(total);
        if (!host || mn_device_raw_alloc(kc_dev, total, &raw) != MN_OK) {
          MN_CHECK(false);
          free(host);
          return;
        }
        memset(host, 0x5A, total);
        MN_CHECK_OK(mn_copy_bytes(kc_dev, raw, mn_device_cpu(), host, total, kc_stream, 0));
        mn_storage_t *st = NULL;
        mn_view_t *v = NULL;
        const int64_t n = N;
        MN_CHECK_OK(mn_storage_from_buffer(kc_dev, (char *)raw + PAD + shifts[sh], N * item, NULL, NULL, &st));
        MN_CHECK_OK(mn_view_create(st, dts[k], 1, &n, NULL, 0, &v));
        if (v) {
          if (normal)
            MN_CHECK_OK(mn_kernel_random_normal(kc_stream, v, 9, 3, 1.0, 2.0));
          else
            MN_CHECK_OK(mn_kernel_random_uniform(kc_stream, v, 9, 3, -1.0, 3.0));
        }
        MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), host, kc_dev, raw, total, kc_stream, 0));
        int64_t bad = 0, around = 0;
        for (size_t i = 0; i < total; i++) {
          size_t at = i - PAD - shifts[sh];
          if (i < PAD + shifts[sh] || at >= N * item) around += host[i] != 0x5A;
        }
        for (int64_t i = 0; i < N; i++) {
          double want = kc_random_host(dts[k], normal, 9, 3, (uint64_t)i);
          mn_scalar_t got;
          MN_CHECK_OK(mn_scalar_from_bytes(dts[k], host + PAD + shifts[sh] + (size_t)i * item, &got));
          bad += memcmp(&want, &got.v.f, sizeof want) != 0;
        }
        MN_CHECK(bad == 0 && around == 0);
        if (bad || around)
          fprintf(stderr, "  misaligned random %s +%zu normal=%d: %lld differ, %lld bytes around written\n",
                  mn_dtype_name(dts[k]), shifts[sh], normal, (long long)bad, (long long)around);
        mn_view_destroy(v);
        mn_storage_release(st);
        MN_CHECK_OK(mn_device_raw_free(kc_dev, raw));
        free(host);
      }
}

/* Random fills of row-major and transposed views in foreign buffers at odd
 * addresses: the host's values, element for element. */
MN_TEST(random_fill_foreign_strided) {
  enum { R = 13, C = 11, N = R * C };
  static const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_FLOAT64, MN_DTYPE_FLOAT16, MN_DTYPE_BFLOAT16};
  static const int shifts[] = {1, 2, 8};
  double got[N];
  for (size_t k = 0; k < 4; k++)
    for (size_t sh = 0; sh < 3; sh++)
      for (int t = 0; t < 2; t++)
        for (int normal = 0; normal < 2; normal++) {
          kc_random_at(dts[k], t, normal, 5, 11, R, C, shifts[sh], got);
          int64_t bad = 0;
          for (int64_t i = 0; i < N; i++) {
            double want = kc_random_host(dts[k], normal, 5, 11, (uint64_t)i);
            bad += memcmp(&want, &got[i], sizeof want) != 0;
          }
          MN_CHECK(bad == 0);
          if (bad)
            fprintf(stderr, "  random %s shift %d transposed=%d normal=%d: %lld differ\n", mn_dtype_name(dts[k]),
                    shifts[sh], t, normal, (long long)bad);
        }
}

MN_TEST(random_fill_statistics) {
  enum { R = 256, C = 256, N = R * C };
  double *a = malloc(sizeof(double) * N);
  if (!a) return;
  for (int normal = 0; normal < 2; normal++) {
    kc_random(MN_DTYPE_FLOAT32, false, normal, 2024, 0, R, C, a);
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < N; i++) {
      sum += a[i];
      sq += a[i] * a[i];
      lo = a[i] < lo ? a[i] : lo;
      hi = a[i] > hi ? a[i] : hi;
    }
    double mean = sum / N, var = sq / N - mean * mean;
    if (normal) { /* mean 1, std 2 */
      MN_CHECK(fabs(mean - 1.0) < 0.03 && fabs(sqrt(var) - 2.0) < 0.03);
    } else { /* uniform [-1, 3): mean 1, variance 16/12 */
      MN_CHECK(lo >= -1.0 && hi <= 3.0 && fabs(mean - 1.0) < 0.02 && fabs(var - 16.0 / 12.0) < 0.03);
    }
  }
  free(a);
}

/* mn_copy_view sends same-device casts (and strided CUDA copies) to the kernels. */
MN_TEST(copy_view_uses_the_kernels) {
  const kc_case c = {"copy_view", 2, {33, 17}, {{1, 0}, {1, 1}, 0, 0}, {{0, 1}, {1, 2}, 0, 1}};
  static const mn_dtype pairs[][2] = {{MN_DTYPE_FLOAT32, MN_DTYPE_INT32}, {MN_DTYPE_BFLOAT16, MN_DTYPE_BFLOAT16}};
  for (int k = 0; k < 2; k++) {
    kc_buf d, s;
    bool ok = kc_make(&d, pairs[k][0], 2, c.sizes, &c.dst) & kc_make(&s, pairs[k][1], 2, c.sizes, &c.src);
    unsigned char *got = ok ? malloc(d.nbytes) : NULL;
    if (got) {
      mn_test_fill_random(s.host, s.nbytes);
      kc_upload(&s);
      memset(d.host, 0xA5, d.nbytes);
      kc_upload(&d);
      MN_CHECK_OK(mn_copy_view(d.view, s.view, kc_stream, false)); /* blocking */
      MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), got, kc_dev, mn_storage_data(d.st), d.nbytes, kc_stream, 0));
      MN_CHECK_OK(mn_stream_synchronize(kc_stream));
      if (pairs[k][0] == pairs[k][1])
        kc_ref_copy(&d.ref, &s.ref, mn_dtype_itemsize(pairs[k][0]));
      else
        mn__ref_copy_cast(&d.ref, pairs[k][0], &s.ref, pairs[k][1], 0, kc_numel(&d.ref));
      MN_CHECK(memcmp(d.host, got, d.nbytes) == 0);
    }
    free(got);
    kc_free(&d);
    kc_free(&s);
  }
}

/* Runs every case on kc_dev. */
static void kc_run_all(void) {
  MN_RUN(every_pair_every_layout);
  MN_RUN(large_views_on_the_pool);
  MN_RUN(contiguous_casts_every_pair);
  MN_RUN(special_values_every_pair);
  MN_RUN(fills_every_dtype_and_layout);
  MN_RUN(large_fills);
  MN_RUN(bad_input_is_refused);
  MN_RUN(partial_overlap_refused_full_overlap_casts_in_place);
  MN_RUN(foreign_buffers_at_odd_addresses);
  MN_RUN(foreign_buffer_fills);
  MN_RUN(in_place_casts);
  MN_RUN(copy_view_uses_the_kernels);
  MN_RUN(philox_known_answers);
  MN_RUN(random_fill_reproducible_any_layout);
  MN_RUN(random_fill_misaligned_buffer);
  MN_RUN(random_fill_foreign_strided);
  MN_RUN(random_fill_statistics);
}

#endif /* MNEMO_TESTS_KERNELS_CASES_H */
