/* tests/test_quant.c: quantized dtypes and views (mnemo/quantized.h): table
 * facts, parsing, parameters kept by view ops, packed offsets and byte bounds,
 * quantize / dequantize / int_repr against values taken from torch 1.13, on
 * CPU and SIM; mnemo's save format round trip; refusals (casts, dtype views,
 * safetensors, DLPack, storage conversion) change
 * nothing; indexing of quantized views, quantized views on the meta device.
 * Single-threaded. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mn_test.h"
#include "test_bytes.h"

static mn_device_t DEVS[2];
static const char *DEV_NAMES[2] = {"cpu", "sim"};

static const float X[12] = {0.5f, 1.5f, 2.5f, -0.5f, NAN, INFINITY, -INFINITY, 1e10f, 0.25f, 3.0f, -1e20f, 127.5f};
typedef struct qcase {
  mn_dtype dtype;
  double scale;
  int64_t zp;
  int64_t irepr[12]; /* torch: q.int_repr() (packed: the bytes) */
  int nrepr;
  uint32_t deq[12];  /* torch: q.dequantize(), float32 bits */
} qcase;
static const qcase CASES[] = {
    {MN_DTYPE_QINT8, 0.5, -3, {-2, 0, 2, -4, -128, -128, -128, 127, -3, 3, -128, 127}, 12,
     {0x3F000000u, 0x3FC00000u, 0x40200000u, 0xBF000000u, 0xC27A0000u, 0xC27A0000u, 0xC27A0000u, 0x42820000u,
      0x00000000u, 0x40400000u, 0xC27A0000u, 0x42820000u}},
    {MN_DTYPE_QUINT8, 0.1, 128, {133, 143, 153, 123, 0, 0, 0, 255, 130, 158, 0, 255}, 12,
     {0x3F000000u, 0x3FC00000u, 0x40200000u, 0xBF000000u, 0xC14CCCCDu, 0xC14CCCCDu, 0xC14CCCCDu, 0x414B3333u,
      0x3E4CCCCDu, 0x40400000u, 0xC14CCCCDu, 0x414B3333u}},
    {MN_DTYPE_QINT32, 0.015625, 2147483647,
     {2147483647, 2147483647, 2147483647, 2147483647, -2147483647 - 1, -2147483647 - 1, -2147483647 - 1, 2147483647,
      2147483647, 2147483647, -2147483647 - 1, 2147483647},
     12,
     {0, 0, 0, 0, 0x3C800000u, 0x3C800000u, 0x3C800000u, 0, 0, 0, 0x3C800000u, 0}},
    {MN_DTYPE_QUINT4X2, 1.0, 1, {49, 19, 0, 240, 65, 240}, 6,
     {0x00000000u, 0x40000000u, 0x40000000u, 0x00000000u, 0xBF800000u, 0xBF800000u, 0xBF800000u, 0x41600000u,
      0x00000000u, 0x40400000u, 0xBF800000u, 0x41600000u}},
    {MN_DTYPE_QUINT2X4, 1.0, 1, {125, 192, 205}, 3,
     {0x00000000u, 0x40000000u, 0x40000000u, 0x00000000u, 0xBF800000u, 0xBF800000u, 0xBF800000u, 0x40000000u,
      0x00000000u, 0x40000000u, 0xBF800000u, 0x40000000u}},
};

MN_TEST(table_facts) {
  const mn_dtype q[5] = {MN_DTYPE_QINT8, MN_DTYPE_QUINT8, MN_DTYPE_QINT32, MN_DTYPE_QUINT4X2, MN_DTYPE_QUINT2X4};
  const size_t item[5] = {1, 1, 4, 1, 1};
  const int bits[5] = {8, 8, 32, 4, 2};
  const int64_t lo[5] = {-128, 0, INT32_MIN, 0, 0}, hi[5] = {127, 255, INT32_MAX, 15, 3};
  const char *names[5] = {"qint8", "quint8", "qint32", "quint4x2", "quint2x4"};
  for (int i = 0; i < 5; i++) {
    MN_CHECK((int)q[i] == 17 + i);
    MN_CHECK(mn_dtype_itemsize(q[i]) == item[i]);
    MN_CHECK(mn_dtype_bits(q[i]) == bits[i]);
    MN_CHECK(mn_dtype_is_quantized(q[i]) && !mn_dtype_is_floating(q[i]));
    MN_CHECK(mn_dtype_info(q[i])->kind == MN_KIND_QUANTIZED);
    int64_t a = 0, b = 0;
    MN_CHECK_OK(mn_dtype_quant_range(q[i], &a, &b));
    MN_CHECK(a == lo[i] && b == hi[i]);
    MN_CHECK(strcmp(mn_dtype_name(q[i]), names[i]) == 0);
    char buf[32];
    mn_dtype d = MN_DTYPE_BOOL;
    snprintf(buf, sizeof buf, "torch.%s", names[i]);
    MN_CHECK_OK(mn_dtype_parse(buf, &d));
    MN_CHECK(d == q[i]);
  }
  MN_CHECK(mn_dtype_bits(MN_DTYPE_FLOAT32) == 32 && !mn_dtype_is_quantized(MN_DTYPE_UINT8));
  MN_CHECK(mn_dtype_quant_underlying(MN_DTYPE_QINT32) == MN_DTYPE_INT32);
  MN_CHECK_ERR(mn_dtype_quant_range(MN_DTYPE_INT8, NULL, NULL), MN_ERR_INVALID_ARGUMENT, "not quantized");
}

static mn_view_t *float_view(mn_device_t dev) {
  mn_view_t *c = NULL, *v = NULL;
  int64_t n = 12;
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &n, &c));
  memcpy(mn_view_data(c), X, sizeof X);
  MN_CHECK_OK(mn_view_to(c, dev, MN_DTYPE_FLOAT32, false, NULL, &v));
  mn_view_destroy(c);
  return v;
}

static mn_view_t *to_cpu(const mn_view_t *v) {
  mn_view_t *c = NULL;
  MN_CHECK_OK(mn_view_to(v, mn_device_cpu(), mn_view_dtype(v), false, NULL, &c));
  return c;
}

MN_TEST(quantize_dequantize_int_repr_match_torch) {
  for (int di = 0; di < 2; di++) {
    mn_view_t *x = float_view(DEVS[di]);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
      const qcase *c = &CASES[k];
      mn_view_t *q = NULL, *d = NULL, *r = NULL;
      MN_CHECK_OK(mn_view_quantize_per_tensor(x, c->scale, c->zp, c->dtype, NULL, &q));
      if (!q) continue;
      MN_CHECK(mn_view_is_quantized(q) && mn_view_q_scale(q) == c->scale && mn_view_q_zero_point(q) == c->zp);
      MN_CHECK(mn_view_nbytes(q) == (size_t)c->nrepr * mn_dtype_itemsize(mn_dtype_quant_underlying(c->dtype)));
      MN_CHECK_OK(mn_view_dequantize(q, NULL, &d));
      MN_CHECK_OK(mn_view_int_repr(q, NULL, &r));
      mn_view_t *dc = to_cpu(d), *rc = to_cpu(r);
      const float *df = mn_view_data(dc);
      for (int i = 0; i < 12; i++) {
        uint32_t bits;
        memcpy(&bits, &df[i], 4);
        if (bits != c->deq[i]) {
          fprintf(stderr, "%s %s dequantize[%d] %08x want %08x\n", DEV_NAMES[di], mn_dtype_name(c->dtype), i, bits,
                  c->deq[i]);
          MN_CHECK(bits == c->deq[i]);
        }
      }
      MN_CHECK(mn_view_numel(rc) == c->nrepr);
      for (int i = 0; i < c->nrepr; i++) {
        mn_scalar_t s;
        MN_CHECK_OK(mn_scalar_from_bytes(mn_view_dtype(rc), (char *)mn_view_data(rc) + i * mn_dtype_itemsize(mn_view_dtype(rc)), &s));
        int64_t got = s.kind == MN_SCALAR_INT ? s.v.i : (int64_t)s.v.u;
        if (got != c->irepr[i]) {
          fprintf(stderr, "%s %s int_repr[%d] %lld want %lld\n", DEV_NAMES[di], mn_dtype_name(c->dtype), i,
                  (long long)got, (long long)c->irepr[i]);
          MN_CHECK(got == c->irepr[i]);
        }
      }
      mn_view_destroy(dc);
      mn_view_destroy(rc);
      mn_view_destroy(q);
      mn_view_destroy(d);
      mn_view_destroy(r);
    }
    mn_view_destroy(x);
  }
}

MN_TEST(view_ops_keep_qparams_and_packed_rules) {
  mn_view_t *x = float_view(mn_device_cpu()), *q = NULL, *a = NULL, *b = NULL, *c = NULL;
  MN_CHECK_OK(mn_view_quantize_per_tensor(x, 0.25, 7, MN_DTYPE_QINT8, NULL, &q));
  int64_t shape[2] = {3, 4};
  MN_CHECK_OK(mn_view_view(q, 2, shape, &a));
  MN_CHECK_OK(mn_view_transpose(a, 0, 1, &b));
  MN_CHECK(mn_view_q_scale(b) == 0.25 && mn_view_q_zero_point(b) == 7 && mn_view_dtype(b) == MN_DTYPE_QINT8);
  MN_CHECK_OK(mn_view_contiguous(b, NULL, &c));
  MN_CHECK(mn_view_q_scale(c) == 0.25 && mn_view_q_zero_point(c) == 7 && mn_view_is_contiguous(c));
  mn_view_t *e = NULL;
  MN_CHECK_ERR(mn_view_view_dtype(q, MN_DTYPE_INT8, &e), MN_ERR_INVALID_ARGUMENT, "quantized");
  MN_CHECK_ERR(mn_view_view_dtype(x, MN_DTYPE_QINT32, &e), MN_ERR_INVALID_ARGUMENT, "quantized");
  MN_CHECK(e == NULL);
  /* copies between quantized and plain are refused, nothing written */
  mn_view_t *f = NULL;
  int64_t n = 12;
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &n, &f));
  memset(mn_view_data(f), 0x5A, 48);
  MN_CHECK_ERR(mn_view_copy(f, q, NULL), MN_ERR_INVALID_ARGUMENT, "use dequantize");
  MN_CHECK(((unsigned char *)mn_view_data(f))[0] == 0x5A && ((unsigned char *)mn_view_data(f))[47] == 0x5A);
  MN_CHECK_ERR(mn_view_fill(q, mn_scalar_int(1), NULL), MN_ERR_INVALID_ARGUMENT, "quantize");
  /* packed: offset must start a byte; bounds in bytes */
  mn_storage_t *st = NULL;
  MN_CHECK_OK(mn_storage_create(mn_device_cpu(), 3, NULL, NULL, &st));
  int64_t six = 6, five = 5, seven = 7;
  mn_view_t *p = NULL;
  MN_CHECK_OK(mn_view_create_quantized(st, MN_DTYPE_QUINT4X2, 1, &six, NULL, 0, 1.0, 1, &p));
  MN_CHECK(mn_view_nbytes(p) == 3);
  mn_view_destroy(p);
  p = NULL;
  MN_CHECK_ERR(mn_view_create_quantized(st, MN_DTYPE_QUINT4X2, 1, &five, NULL, 1, 1.0, 1, &p), MN_ERR_INVALID_ARGUMENT,
               "does not start a byte");
  MN_CHECK_ERR(mn_view_create_quantized(st, MN_DTYPE_QUINT4X2, 1, &seven, NULL, 0, 1.0, 1, &p), MN_ERR_INVALID_ARGUMENT,
               "reaches byte 4");
  MN_CHECK_ERR(mn_view_create_quantized(st, MN_DTYPE_QUINT2X4, 1, &six, NULL, 2, 1.0, 1, &p), MN_ERR_INVALID_ARGUMENT,
               "does not start a byte");
  MN_CHECK_ERR(mn_view_create_quantized(st, MN_DTYPE_QUINT8, 1, &five, NULL, 0, 0.0, 1, &p), MN_ERR_INVALID_ARGUMENT,
               "scale");
  MN_CHECK_ERR(mn_view_create_quantized(st, MN_DTYPE_QUINT8, 1, &five, NULL, 0, 1.0, 256, &p), MN_ERR_INVALID_ARGUMENT,
               "zero_point");
  MN_CHECK(p == NULL);
  MN_CHECK_OK(mn_view_create_quantized(st, MN_DTYPE_QUINT2X4, 1, &six, NULL, 4, 1.0, 1, &p));
  mn_view_t *s1 = NULL;
  int64_t one = 1;
  MN_CHECK_ERR(mn_view_narrow(p, 0, 1, 4, &s1), MN_ERR_INVALID_ARGUMENT, "does not start a byte");
  MN_CHECK(s1 == NULL);
  (void)one;
  /* safetensors has no quantized types (mnemo's format: mnemo_save_round_trip) */
  const char *names[1] = {"q"};
  const mn_view_t *views[1] = {q};
  MN_CHECK_ERR(mn_safetensors_save("/tmp/mn_test_quant.safetensors", 1, names, views, 0, NULL, NULL), MN_ERR_NOT_SUPPORTED, "qint8");
  mn_view_t *qs = NULL; /* a stream of another device */
  mn_stream_t *sim_stream = NULL;
  MN_CHECK_OK(mn_stream_default(mn_device_sim(0), &sim_stream));
  MN_CHECK_ERR(mn_view_quantize_per_tensor(x, 0.5, 0, MN_DTYPE_QINT8, sim_stream, &qs), MN_ERR_INVALID_ARGUMENT,
               "the stream is on sim:0");
  MN_CHECK_ERR(mn_view_dequantize(q, sim_stream, &qs), MN_ERR_INVALID_ARGUMENT, "the stream is on sim:0");
  MN_CHECK(qs == NULL);
  mn_storage_t *conv = NULL;
  MN_CHECK_ERR(mn_storage_convert(mn_view_storage(q), MN_DTYPE_QINT8, MN_DTYPE_FLOAT32, NULL, &conv),
               MN_ERR_INVALID_ARGUMENT, "quantized dtypes have no element conversion");
  MN_CHECK_ERR(mn_storage_convert(mn_view_storage(f), MN_DTYPE_UINT8, MN_DTYPE_QUINT8, NULL, &conv),
               MN_ERR_INVALID_ARGUMENT, "quint8");
  MN_CHECK(conv == NULL);
  mn_view_destroy(p);
  mn_storage_release(st);
  mn_view_destroy(f);
  mn_view_destroy(a);
  mn_view_destroy(b);
  mn_view_destroy(c);
  mn_view_destroy(q);
  mn_view_destroy(x);
}

/* int_repr's bytes of v, on the CPU (malloc'd; *n: their count) */
static unsigned char *repr_bytes(const mn_view_t *v, size_t *n) {
  mn_view_t *r = NULL, *c = NULL;
  unsigned char *out = NULL;
  *n = 0;
  MN_CHECK_OK(mn_view_int_repr(v, NULL, &r));
  if (r) c = to_cpu(r);
  if (c) {
    *n = mn_view_nbytes(c);
    out = malloc(*n ? *n : 1);
    memcpy(out, mn_view_data(c), *n);
  }
  mn_view_destroy(r);
  mn_view_destroy(c);
  return out;
}

/* mnemo's format keeps a quantized view's dtype, scale, zero point and
 * geometry (version 2, docs/SAVE_FORMAT.md); a save without one stays
 * version 1. */
MN_TEST(mnemo_save_round_trip) {
  mn_view_t *x = float_view(mn_device_cpu()), *q8 = NULL, *q32 = NULL, *q32t = NULL, *q4 = NULL, *q4v = NULL;
  MN_CHECK_OK(mn_view_quantize_per_tensor(x, 0.25, 7, MN_DTYPE_QINT8, NULL, &q8));
  MN_CHECK_OK(mn_view_quantize_per_tensor(x, 0.1, -1000, MN_DTYPE_QINT32, NULL, &q32));
  MN_CHECK_OK(mn_view_quantize_per_tensor(x, 0.5, 3, MN_DTYPE_QUINT4X2, NULL, &q4));
  const int64_t shape[2] = {3, 4};
  mn_view_t *q32v = NULL;
  MN_CHECK_OK(mn_view_view(q32, 2, shape, &q32v));
  MN_CHECK_OK(mn_view_transpose(q32v, 0, 1, &q32t)); /* shares q32's storage */
  MN_CHECK_OK(mn_view_narrow(q4, 0, 4, 4, &q4v));    /* a packed view starting at byte 2 */
  const char *names[5] = {"x", "q8", "q32", "q32.T", "q4.mid"};
  const mn_view_t *views[5] = {x, q8, q32, q32t, q4v};
  void *data = NULL;
  size_t size = 0;
  MN_CHECK_OK(mn_save_buffer(5, names, views, &data, &size));
  MN_CHECK(data != NULL && size > 40 && ((unsigned char *)data)[8] == 2); /* version 2 */
  for (int di = 0; di < 2 && data; di++) {
    mn_named_views_t *nv = NULL;
    MN_CHECK_OK(mn_load_buffer(data, size, DEVS[di], &nv));
    if (!nv) continue;
    MN_CHECK(nv->count == 5);
    for (int i = 1; i < 5; i++) {
      const mn_view_t *w = mn_named_views_find(nv, names[i]);
      MN_CHECK(w != NULL);
      if (!w) continue;
      MN_CHECK(mn_view_dtype(w) == mn_view_dtype(views[i]) && mn_view_q_scale(w) == mn_view_q_scale(views[i]) &&
               mn_view_q_zero_point(w) == mn_view_q_zero_point(views[i]));
      MN_CHECK(mn_view_ndim(w) == mn_view_ndim(views[i]) && mn_view_offset(w) == mn_view_offset(views[i]));
      for (int d = 0; d < mn_view_ndim(w); d++)
        MN_CHECK(mn_view_size(w, d) == mn_view_size(views[i], d) && mn_view_stride(w, d) == mn_view_stride(views[i], d));
      size_t na = 0, nb = 0;
      unsigned char *a = repr_bytes(w, &na), *b = repr_bytes(views[i], &nb);
      MN_CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
      free(a);
      free(b);
    }
    MN_CHECK(mn_view_storage(mn_named_views_find(nv, "q32")) == mn_view_storage(mn_named_views_find(nv, "q32.T")));
    mn_named_views_free(nv);
  }
  free(data);
  /* hostile version-2 files (checksums made valid): bad scale, zero point,
   * a quantized dtype in a version-1 file, and every single-byte flip */
  MN_CHECK_OK(mn_save_buffer(1, &names[1], &views[1], &data, &size)); /* "q8" */
  if (data) {
    unsigned char *f = malloc(size);
    const uint64_t hs = mn_test_rd_le((unsigned char *)data + 16, 8);
    const size_t scale_at = 40 + 24 + 4 + 2 + 4 + 2 + 2 + 8 + 8 + 8; /* name "q8", 1-d */
    static const struct {
      size_t at;
      uint64_t value;
      int width;
      const char *needle;
    } bad[] = {{scale_at, 0, 8, "scale"},                      /* 0.0 */
               {scale_at, 0x7FF0000000000000ull, 8, "scale"},  /* inf */
               {scale_at + 8, 128, 8, "zero_point"},           /* past qint8's 127 */
               {8, 1, 4, "bad dtype"}};                        /* version 1 */
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      memcpy(f, data, size);
      mn_test_wr_le(f + bad[k].at, bad[k].value, bad[k].width);
      mn_test_wr_le(f + hs - 4, mn_test_crc32(f, (size_t)hs - 4), 4);
      mn_named_views_t *nv = NULL;
      MN_CHECK_ERR(mn_load_buffer(f, size, mn_device_cpu(), &nv), MN_ERR_FORMAT, bad[k].needle);
      MN_CHECK(nv == NULL);
    }
    int caught = 0;
    for (size_t i = 0; i < size; i++) {
      memcpy(f, data, size);
      f[i] ^= 0x5a;
      mn_named_views_t *nv = NULL;
      caught += mn_load_buffer(f, size, mn_device_cpu(), &nv) == MN_ERR_FORMAT;
      mn_named_views_free(nv);
    }
    MN_CHECK(caught == (int)size);
    free(f);
    free(data);
  }
  /* no quantized view: version 1, as before */
  MN_CHECK_OK(mn_save_buffer(1, names, views, &data, &size));
  MN_CHECK(data != NULL && size > 40 && ((unsigned char *)data)[8] == 1);
  free(data);
  mn_view_destroy(q32v);
  mn_view_destroy(q32t);
  mn_view_destroy(q4v);
  mn_view_destroy(q4);
  mn_view_destroy(q32);
  mn_view_destroy(q8);
  mn_view_destroy(x);
}

/* Quantized views meet the other view families: advanced indexing
 * gathers keep scale and zero point (packed dtypes and writes refused, the
 * destination unchanged), the meta device computes quantize / dequantize /
 * int_repr metadata without data, empty_like keeps the parameters. */
MN_TEST(indexing_meta_and_empty_like) {
  for (int di = 0; di < 2; di++) {
    mn_test_case = DEV_NAMES[di];
    mn_device_t dev = DEVS[di];
    int64_t n = 4, two = 2;
    mn_view_t *x = NULL, *q = NULL, *q4 = NULL, *idx = NULL, *g = NULL, *ir = NULL, *src = NULL, *bad = NULL;
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &n, &x));
    const float xs[4] = {1.5f, 2.5f, -3.0f, 4.0f};
    memcpy(mn_view_data(x), xs, sizeof xs);
    mn_view_t *xd = NULL;
    MN_CHECK_OK(mn_view_to(x, dev, MN_DTYPE_FLOAT32, false, NULL, &xd));
    MN_CHECK_OK(mn_view_quantize_per_tensor(xd, 0.5, 1, MN_DTYPE_QINT8, NULL, &q));
    MN_CHECK_OK(mn_view_quantize_per_tensor(xd, 0.5, 1, MN_DTYPE_QUINT4X2, NULL, &q4));
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT64, 1, &two, &idx));
    ((int64_t *)mn_view_data(idx))[0] = 3;
    ((int64_t *)mn_view_data(idx))[1] = 0;
    MN_CHECK_OK(mn_view_index_select(q, 0, idx, NULL, &g)); /* index on the CPU, data on dev */
    if (g) {
      MN_CHECK(mn_view_dtype(g) == MN_DTYPE_QINT8 && mn_view_q_scale(g) == 0.5 && mn_view_q_zero_point(g) == 1);
      MN_CHECK_OK(mn_view_int_repr(g, NULL, &ir));
      mn_view_t *h = NULL;
      if (ir) MN_CHECK_OK(mn_view_to(ir, mn_device_cpu(), MN_DTYPE_INT8, false, NULL, &h));
      if (h) MN_CHECK(((int8_t *)mn_view_data(h))[0] == 9 && ((int8_t *)mn_view_data(h))[1] == 4); /* torch: [9, 4] */
      mn_view_destroy(h);
    }
    MN_CHECK_ERR(mn_view_index_select(q4, 0, idx, NULL, &bad), MN_ERR_NOT_SUPPORTED, "packed");
    MN_CHECK(bad == NULL);
    /* take, gather and masked_select have no quantized kernel
     * in PyTorch 1.13 (NotImplementedError): refused, as there; a mask
     * through index is PyTorch's aten::index, which has one */
    int64_t one = 1;
    mn_view_t *mask = NULL, *gi = NULL;
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_BOOL, 1, &n, &mask));
    MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT64, 1, &one, &gi));
    if (mask && gi) {
      memcpy(mn_view_data(mask), (const bool[4]){true, false, false, true}, 4);
      ((int64_t *)mn_view_data(gi))[0] = 2;
      MN_CHECK_ERR(mn_view_take(q, idx, NULL, &bad), MN_ERR_NOT_SUPPORTED,
                   "take of a qint8 view is not supported (PyTorch has no quantized kernel for it)");
      MN_CHECK_ERR(mn_view_gather(q, 0, gi, NULL, &bad), MN_ERR_NOT_SUPPORTED, "gather of a qint8 view");
      MN_CHECK_ERR(mn_view_masked_select(q, mask, NULL, &bad), MN_ERR_NOT_SUPPORTED, "masked_select of a qint8 view");
      MN_CHECK(bad == NULL);
      const mn_view_t *mi[1] = {mask};
      mn_view_t *sel = NULL;
      MN_CHECK_OK(mn_view_index(q, 1, mi, NULL, &sel));
      if (sel) MN_CHECK(mn_view_numel(sel) == 2 && mn_view_dtype(sel) == MN_DTYPE_QINT8 && mn_view_q_scale(sel) == 0.5);
      mn_view_destroy(sel);
    }
    mn_view_destroy(mask);
    mn_view_destroy(gi);
    /* a refused scatter leaves the quantized view as it was */
    MN_CHECK_OK(mn_view_index_select(q, 0, idx, NULL, &src));
    mn_view_t *before = NULL, *after = NULL;
    MN_CHECK_OK(mn_view_int_repr(q, NULL, &before));
    const mn_view_t *ixs[1] = {idx};
    MN_CHECK_ERR(mn_view_index_put(q, 1, ixs, src, false, NULL), MN_ERR_NOT_SUPPORTED, "quantized");
    MN_CHECK_ERR(mn_view_scatter(q, 0, idx, src, NULL), MN_ERR_NOT_SUPPORTED, "quantized");
    MN_CHECK_OK(mn_view_int_repr(q, NULL, &after));
    mn_view_t *hb = NULL, *ha = NULL;
    MN_CHECK_OK(mn_view_to(before, mn_device_cpu(), MN_DTYPE_INT8, false, NULL, &hb));
    MN_CHECK_OK(mn_view_to(after, mn_device_cpu(), MN_DTYPE_INT8, false, NULL, &ha));
    if (hb && ha) MN_CHECK(memcmp(mn_view_data(hb), mn_view_data(ha), 4) == 0);
    /* empty_like keeps the parameters, on any device */
    mn_view_t *e = NULL;
    MN_CHECK_OK(mn_view_empty_like(q, mn_device_meta(), &e));
    if (e) MN_CHECK(mn_view_dtype(e) == MN_DTYPE_QINT8 && mn_view_q_scale(e) == 0.5 && mn_view_q_zero_point(e) == 1);
    mn_view_destroy(e);
    mn_view_t *views[] = {x, xd, q, q4, idx, g, ir, src, before, after, hb, ha};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) mn_view_destroy(views[i]);
  }
  mn_test_case = "meta";
  int64_t sz[2] = {3, 5};
  mn_view_t *m = NULL, *mq = NULL, *md = NULL, *mi = NULL, *mp = NULL, *mpi = NULL;
  MN_CHECK_OK(mn_view_empty(mn_device_meta(), MN_DTYPE_FLOAT32, 2, sz, &m));
  MN_CHECK_OK(mn_view_quantize_per_tensor(m, 0.25, 3, MN_DTYPE_QUINT8, NULL, &mq));
  if (mq) {
    MN_CHECK(mn_view_device(mq).type == MN_DEVICE_META && mn_view_data(mq) == NULL);
    MN_CHECK(mn_view_q_scale(mq) == 0.25 && mn_view_q_zero_point(mq) == 3 && mn_view_numel(mq) == 15);
    MN_CHECK_OK(mn_view_dequantize(mq, NULL, &md));
    if (md) MN_CHECK(mn_view_dtype(md) == MN_DTYPE_FLOAT32 && mn_view_size(md, 1) == 5);
    MN_CHECK_OK(mn_view_int_repr(mq, NULL, &mi));
    if (mi) MN_CHECK(mn_view_dtype(mi) == MN_DTYPE_UINT8 && mn_view_numel(mi) == 15);
  }
  MN_CHECK_OK(mn_view_quantize_per_tensor(m, 1.0, 0, MN_DTYPE_QUINT2X4, NULL, &mp));
  if (mp) {
    MN_CHECK(mn_storage_nbytes(mn_view_storage(mp)) == 4); /* ceil(15 * 2 / 8) */
    MN_CHECK_OK(mn_view_int_repr(mp, NULL, &mpi));
    if (mpi) MN_CHECK(mn_view_numel(mpi) == 4);
  }
  mn_view_t *mviews[] = {m, mq, md, mi, mp, mpi};
  for (size_t i = 0; i < sizeof mviews / sizeof mviews[0]; i++) mn_view_destroy(mviews[i]);
}

int main(void) {
  DEVS[0] = mn_device_cpu();
  DEVS[1] = mn_device_sim(0);
  mn_test_configure_sim(1, (size_t)1 << 28);
  MN_RUN(table_facts);
  MN_RUN(quantize_dequantize_int_repr_match_torch);
  MN_RUN(view_ops_keep_qparams_and_packed_rules);
  MN_RUN(mnemo_save_round_trip);
  MN_RUN(indexing_meta_and_empty_like);
  return mn_test_finish();
}
