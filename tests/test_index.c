/* tests/test_index.c: advanced indexing (mnemo/index.h) on CPU and SIM:
 * every op against hand-computed results (PyTorch 1.13's), int32 and int64
 * and negative indices, indices on another device than the data, duplicate
 * targets, and refusals with PyTorch's messages that write nothing. Single
 * thread. */
#include <stdlib.h>
#include <string.h>

#include "mn_test.h"
#include "mnemo/index.h"
#include "runtime/hostmem.h"

static mn_device_t CPU, SIM;

#define L(...) (int64_t[]){__VA_ARGS__}
#define N(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / 8))

/* A contiguous view of dtype dt on dev with sizes and the given values (cast). */
static mn_view_t *make(mn_device_t dev, mn_dtype dt, int nd, const int64_t *sizes, const int64_t *vals) {
  mn_view_t *h = NULL, *v = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, dt, nd, sizes, &h));
  int64_t n = mn_view_numel(h);
  size_t item = mn_dtype_itemsize(dt);
  for (int64_t i = 0; i < n; i++)
    MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_int(vals[i]), dt, (char *)mn_view_data(h) + (size_t)i * item));
  if (dev.type == MN_DEVICE_CPU) return h;
  MN_CHECK_OK(mn_view_to(h, dev, dt, false, NULL, &v));
  mn_view_destroy(h);
  return v;
}

/* arange(prod(sizes)) of dt on dev. */
static mn_view_t *arange(mn_device_t dev, mn_dtype dt, int nd, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sizes[d];
  int64_t *vals = malloc((size_t)(n ? n : 1) * sizeof *vals);
  for (int64_t i = 0; i < n; i++) vals[i] = i;
  mn_view_t *v = make(dev, dt, nd, sizes, vals);
  free(vals);
  return v;
}

/* A 1-d index of dtype dt. */
static mn_view_t *idx1(mn_device_t dev, mn_dtype dt, int n, const int64_t *vals) {
  int64_t s = n;
  return make(dev, dt, 1, &s, vals);
}

/* Whether v (any device, any dtype that casts to int64) has these sizes and
 * row-major values. */
static bool is(const mn_view_t *v, int nd, const int64_t *sizes, int64_t n, const int64_t *vals) {
  if (!v || mn_view_ndim(v) != nd) return false;
  for (int d = 0; d < nd; d++)
    if (mn_view_size(v, d) != sizes[d]) return false;
  if (mn_view_numel(v) != n) return false;
  mn_view_t *h = NULL, *c = NULL;
  if (mn_view_to(v, CPU, MN_DTYPE_INT64, false, NULL, &h) != MN_OK) return false;
  if (mn_view_contiguous(h, NULL, &c) != MN_OK) {
    mn_view_destroy(h);
    return false;
  }
  bool ok = n == 0 || memcmp(mn_view_data(c), vals, (size_t)n * 8) == 0;
  if (!ok) {
    fprintf(stderr, "  got:");
    for (int64_t i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)((int64_t *)mn_view_data(c))[i]);
    fprintf(stderr, "\n");
  }
  mn_view_destroy(c);
  mn_view_destroy(h);
  return ok;
}

#define IS(v, SIZES, VALS) is(v, (int)(sizeof(SIZES) / 8), SIZES, (int64_t)(sizeof(VALS) / 8), VALS)
#define S(...) ((int64_t[]){__VA_ARGS__})
#define SCALAR ((int64_t[]){0})

static const mn_device_t *devs(void) {
  static mn_device_t d[2];
  d[0] = CPU;
  d[1] = SIM;
  return d;
}

MN_TEST(index_select_take_gather) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *x = arange(dev, MN_DTYPE_FLOAT32, 2, L(3, 4)), *xt = NULL, *r = NULL;
    for (int w = 0; w < 2; w++) {
      mn_dtype it = w ? MN_DTYPE_INT32 : MN_DTYPE_INT64;
      mn_view_t *i = idx1(dev, it, 2, L(2, 0));
      MN_CHECK_OK(mn_view_index_select(x, 0, i, NULL, &r));
      MN_CHECK(IS(r, S(2, 4), S(8, 9, 10, 11, 0, 1, 2, 3)) && mn_view_is_contiguous(r));
      mn_view_destroy(r);
      MN_CHECK_OK(mn_view_index_select(x, -1, i, NULL, &r));
      MN_CHECK(IS(r, S(3, 2), S(2, 0, 6, 4, 10, 8)));
      mn_view_destroy(r);
      mn_view_destroy(i);
    }
    /* a 0-d index keeps the dim (size 1) */
    mn_view_t *i0 = make(dev, MN_DTYPE_INT64, 0, NULL, L(1));
    MN_CHECK_OK(mn_view_index_select(x, 1, i0, NULL, &r));
    MN_CHECK(IS(r, S(3, 1), S(1, 5, 9)));
    mn_view_destroy(r);
    mn_view_destroy(i0);
    /* take: row-major order of a transposed view, negatives wrap */
    MN_CHECK_OK(mn_view_t2d(x, &xt));
    mn_view_t *ti = make(dev, MN_DTYPE_INT64, 2, L(2, 2), L(0, -1, 1, 5));
    MN_CHECK_OK(mn_view_take(xt, ti, NULL, &r));
    MN_CHECK(IS(r, S(2, 2), S(0, 11, 4, 9)));
    mn_view_destroy(r);
    mn_view_destroy(ti);
    /* gather along 0 and 1 */
    mn_view_t *g = make(dev, MN_DTYPE_INT32, 2, L(2, 3), L(2, 0, 1, 1, 2, 0));
    MN_CHECK_OK(mn_view_gather(x, 0, g, NULL, &r));
    MN_CHECK(IS(r, S(2, 3), S(8, 1, 6, 4, 9, 2)));
    mn_view_destroy(r);
    MN_CHECK_OK(mn_view_gather(xt, 1, g, NULL, &r)); /* xt[i][g[i][j]] */
    MN_CHECK(IS(r, S(2, 3), S(8, 0, 4, 5, 9, 1)));
    mn_view_destroy(r);
    mn_view_destroy(g);
    mn_view_destroy(xt);
    mn_view_destroy(x);
  }
}

MN_TEST(masked_select_and_index) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *x = arange(dev, MN_DTYPE_INT64, 3, L(2, 3, 4)), *r = NULL;
    mn_view_t *m = make(dev, MN_DTYPE_BOOL, 1, L(4), L(1, 0, 0, 1));
    MN_CHECK_OK(mn_view_masked_select(x, m, NULL, &r)); /* broadcast over the last dim */
    MN_CHECK(IS(r, S(12), S(0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23)));
    mn_view_destroy(r);
    mn_view_t *mu = make(dev, MN_DTYPE_UINT8, 3, L(2, 1, 1), L(0, 7));
    MN_CHECK_OK(mn_view_masked_select(x, mu, NULL, &r));
    MN_CHECK(IS(r, S(12), S(12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23)));
    mn_view_destroy(r);
    mn_view_destroy(mu);
    /* x[:, [2, -3]] */
    mn_view_t *a = idx1(dev, MN_DTYPE_INT64, 2, L(2, -3));
    const mn_view_t *e1[2] = {NULL, a};
    MN_CHECK_OK(mn_view_index(x, 2, e1, NULL, &r));
    MN_CHECK(IS(r, S(2, 2, 4), S(8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15)));
    mn_view_destroy(r);
    /* x[[1, 0], :, [3, 0]]: not adjacent, B first */
    mn_view_t *b = idx1(dev, MN_DTYPE_INT32, 2, L(1, 0)), *c = idx1(dev, MN_DTYPE_INT64, 2, L(3, 0));
    const mn_view_t *e2[3] = {b, NULL, c};
    MN_CHECK_OK(mn_view_index(x, 3, e2, NULL, &r));
    MN_CHECK(IS(r, S(2, 3), S(15, 19, 23, 0, 4, 8)));
    mn_view_destroy(r);
    /* x[:, [[0], [2]], [1, 3]]: adjacent, broadcast [2,1] x [2] -> [2,2] in place */
    mn_view_t *d = make(dev, MN_DTYPE_INT64, 2, L(2, 1), L(0, 2));
    const mn_view_t *e3[3] = {NULL, d, c};
    mn_view_destroy(c);
    c = idx1(dev, MN_DTYPE_INT64, 2, L(1, 3));
    e3[2] = c;
    MN_CHECK_OK(mn_view_index(x, 3, e3, NULL, &r));
    MN_CHECK(IS(r, S(2, 2, 2), S(1, 3, 9, 11, 13, 15, 21, 23)));
    mn_view_destroy(r);
    /* x[:, mask2d]: a 2-d mask over dims 1, 2 */
    mn_view_t *m2 = make(dev, MN_DTYPE_BOOL, 2, L(3, 4), L(0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1));
    const mn_view_t *e4[2] = {NULL, m2};
    MN_CHECK_OK(mn_view_index(x, 2, e4, NULL, &r));
    MN_CHECK(IS(r, S(2, 3), S(1, 8, 11, 13, 20, 23)));
    mn_view_destroy(r);
    /* no index: a copy */
    MN_CHECK_OK(mn_view_index(x, 0, NULL, NULL, &r));
    MN_CHECK(mn_view_numel(r) == 24 && !mn_view_shares_storage(r, x));
    mn_view_destroy(r);
    mn_view_destroy(m2);
    mn_view_destroy(d);
    mn_view_destroy(b);
    mn_view_destroy(c);
    mn_view_destroy(a);
    mn_view_destroy(m);
    mn_view_destroy(x);
  }
}

MN_TEST(index_put_and_scatter) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *z = make(dev, MN_DTYPE_FLOAT32, 1, L(4), L(0, 0, 0, 0));
    mn_view_t *i = idx1(dev, MN_DTYPE_INT64, 4, L(0, 2, -4, 0));
    mn_view_t *v = make(dev, MN_DTYPE_FLOAT32, 1, L(4), L(1, 2, 3, 4));
    const mn_view_t *e[1] = {i};
    /* accumulate: every duplicate adds */
    MN_CHECK_OK(mn_view_index_put(z, 1, e, v, true, NULL));
    MN_CHECK(IS(z, S(4), S(8, 0, 2, 0)));
    /* without accumulate the last write (row-major) wins */
    MN_CHECK_OK(mn_view_index_put(z, 1, e, v, false, NULL));
    MN_CHECK(IS(z, S(4), S(4, 0, 2, 0)));
    /* a 0-d value broadcasts */
    mn_view_t *one = make(dev, MN_DTYPE_FLOAT32, 0, NULL, L(7));
    mn_view_t *j = idx1(dev, MN_DTYPE_INT32, 1, L(-1));
    const mn_view_t *ej[1] = {j};
    MN_CHECK_OK(mn_view_index_put(z, 1, ej, one, false, NULL));
    MN_CHECK(IS(z, S(4), S(4, 0, 2, 7)));
    /* bool accumulate ORs */
    mn_view_t *bz = make(dev, MN_DTYPE_BOOL, 1, L(3), L(0, 0, 0)), *bv = make(dev, MN_DTYPE_BOOL, 1, L(3), L(1, 0, 1));
    mn_view_t *bi = idx1(dev, MN_DTYPE_INT64, 3, L(0, 0, 2));
    const mn_view_t *eb[1] = {bi};
    MN_CHECK_OK(mn_view_index_put(bz, 1, eb, bv, true, NULL));
    MN_CHECK(IS(bz, S(3), S(1, 0, 1)));
    /* 2-d: x[:, [0, 2]] += [[1], [2]] (values broadcast) */
    mn_view_t *x = make(dev, MN_DTYPE_INT64, 2, L(2, 3), L(0, 0, 0, 0, 0, 0));
    mn_view_t *c = idx1(dev, MN_DTYPE_INT64, 2, L(0, 2)), *vv = make(dev, MN_DTYPE_INT64, 2, L(2, 1), L(1, 2));
    const mn_view_t *ec[2] = {NULL, c};
    MN_CHECK_OK(mn_view_index_put(x, 2, ec, vv, true, NULL));
    MN_CHECK(IS(x, S(2, 3), S(1, 0, 1, 2, 0, 2)));
    /* scatter: duplicates, the last in row-major order of index wins */
    mn_view_t *si = make(dev, MN_DTYPE_INT64, 2, L(2, 2), L(1, 0, 1, 0));
    mn_view_t *src = make(dev, MN_DTYPE_INT64, 2, L(2, 3), L(5, 6, 7, 8, 9, 10));
    MN_CHECK_OK(mn_view_scatter(x, 0, si, src, NULL));
    MN_CHECK(IS(x, S(2, 3), S(1, 9, 1, 8, 0, 2)));
    MN_CHECK_OK(mn_view_scatter_add(x, 0, si, src, NULL));
    MN_CHECK(IS(x, S(2, 3), S(1, 24, 1, 21, 0, 2)));
    mn_view_t *si32 = make(dev, MN_DTYPE_INT32, 2, L(1, 3), L(1, 1, 0));
    MN_CHECK_OK(mn_view_scatter_add(x, 0, si32, src, NULL));
    MN_CHECK(IS(x, S(2, 3), S(1, 24, 8, 26, 6, 2)));
    mn_view_t *objs[] = {z, i, v, one, j, bz, bv, bi, x, c, vv, si, src, si32};
    for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
  }
}

/* Indices made on another device than the data are copied over. */
MN_TEST(indices_on_another_device) {
  mn_view_t *xs = arange(SIM, MN_DTYPE_INT64, 2, L(3, 2)), *xc = arange(CPU, MN_DTYPE_INT64, 2, L(3, 2)), *r = NULL;
  mn_view_t *ic = idx1(CPU, MN_DTYPE_INT32, 2, L(-1, 0)), *is_ = idx1(SIM, MN_DTYPE_INT64, 2, L(-1, 0));
  MN_CHECK_OK(mn_view_take(xs, ic, NULL, &r));
  MN_CHECK(IS(r, S(2), S(5, 0)) && mn_view_device(r).type == MN_DEVICE_SIM);
  mn_view_destroy(r);
  MN_CHECK_OK(mn_view_take(xc, is_, NULL, &r));
  MN_CHECK(IS(r, S(2), S(5, 0)) && mn_view_device(r).type == MN_DEVICE_CPU);
  mn_view_destroy(r);
  const mn_view_t *e[1] = {ic};
  MN_CHECK_OK(mn_view_index(xs, 1, e, NULL, &r));
  MN_CHECK(IS(r, S(2, 2), S(4, 5, 0, 1)));
  mn_view_destroy(r);
  mn_view_t *m = make(CPU, MN_DTYPE_BOOL, 1, L(2), L(0, 1));
  MN_CHECK_OK(mn_view_masked_select(xs, m, NULL, &r));
  MN_CHECK(IS(r, S(3), S(1, 3, 5)) && mn_view_device(r).type == MN_DEVICE_SIM);
  mn_view_destroy(r);
  /* index_put on SIM with CPU indices and values, on a stream of our own */
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM, &s));
  mn_view_t *val = make(CPU, MN_DTYPE_INT64, 0, NULL, L(-1));
  MN_CHECK_OK(mn_view_index_put(xs, 1, e, val, false, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(IS(xs, S(3, 2), S(-1, -1, 2, 3, -1, -1)));
  /* scatter on SIM with a CPU index, src on SIM */
  mn_view_t *si = make(CPU, MN_DTYPE_INT64, 2, L(1, 2), L(1, 1)), *src = make(SIM, MN_DTYPE_INT64, 2, L(1, 2), L(7, 8));
  MN_CHECK_OK(mn_view_scatter(xs, 0, si, src, s));
  MN_CHECK_OK(mn_stream_synchronize(s));
  MN_CHECK(IS(xs, S(3, 2), S(-1, -1, 7, 8, -1, -1)));
  MN_CHECK_OK(mn_stream_destroy(s));
  mn_view_t *objs[] = {xs, xc, ic, is_, m, val, si, src};
  for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
}

/* Refusals: PyTorch's messages, no result, nothing written. */
MN_TEST(refusals_write_nothing) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *x = arange(dev, MN_DTYPE_FLOAT32, 2, L(3, 4)), *r = NULL;
    const int64_t orig[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    mn_view_t *bad = idx1(dev, MN_DTYPE_INT64, 2, L(0, 3)), *neg = idx1(dev, MN_DTYPE_INT64, 2, L(0, -1));
    mn_view_t *flt = make(dev, MN_DTYPE_FLOAT32, 1, L(2), L(0, 1)), *i2 = make(dev, MN_DTYPE_INT64, 2, L(1, 2), L(0, 1));
    MN_CHECK_ERR(mn_view_index_select(x, 0, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT, "index out of range in self");
    MN_CHECK(r == NULL);
    MN_CHECK_ERR(mn_view_index_select(x, 0, neg, NULL, &r), MN_ERR_INVALID_ARGUMENT, "index out of range in self");
    MN_CHECK_ERR(mn_view_index_select(x, 0, flt, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "index_select(): Expected dtype int32 or int64 for index");
    MN_CHECK_ERR(mn_view_index_select(x, 0, i2, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "index_select(): Index is supposed to be a vector");
    MN_CHECK_ERR(mn_view_index_select(x, 2, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT, "Dimension out of range");
    mn_view_t *big = idx1(dev, MN_DTYPE_INT64, 1, L(12));
    MN_CHECK_ERR(mn_view_take(x, big, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "out of range: tried to access index 12 on a tensor of 12 elements.");
    mn_view_t *g = make(dev, MN_DTYPE_INT64, 2, L(1, 2), L(0, 3));
    MN_CHECK_ERR(mn_view_gather(x, 0, g, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "index 3 is out of bounds for dimension 0 with size 3");
    MN_CHECK_ERR(mn_view_gather(x, 0, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "Index tensor must have the same number of dimensions as input tensor");
    mn_view_t *mask3 = make(dev, MN_DTYPE_BOOL, 1, L(3), L(1, 0, 1));
    MN_CHECK_ERR(mn_view_masked_select(x, mask3, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1");
    MN_CHECK_ERR(mn_view_masked_select(x, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "masked_select: expected BoolTensor or ByteTensor for mask");
    const mn_view_t *em[2] = {NULL, mask3};
    MN_CHECK_ERR(mn_view_index(x, 2, em, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "The shape of the mask [3] at index 0 does not match the shape of the indexed tensor [3, 4] at index 1");
    const mn_view_t *ef[1] = {flt};
    MN_CHECK_ERR(mn_view_index(x, 1, ef, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "tensors used as indices must be long, byte or bool tensors");
    const mn_view_t *e3[3] = {NULL, NULL, NULL};
    MN_CHECK_ERR(mn_view_index(x, 3, e3, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "too many indices for tensor of dimension 2 (got 3)");
    mn_view_t *b3 = idx1(dev, MN_DTYPE_INT64, 3, L(0, 1, 2));
    const mn_view_t *eb[2] = {bad, b3};
    MN_CHECK_ERR(mn_view_index(x, 2, eb, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]");
    const mn_view_t *ebad[1] = {bad};
    MN_CHECK_ERR(mn_view_index(x, 1, ebad, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "index 3 is out of bounds for dimension 0 with size 3");
    MN_CHECK(r == NULL);
    /* writes: refused before a byte is written (the valid index 0 comes first) */
    mn_view_t *val = make(dev, MN_DTYPE_FLOAT32, 0, NULL, L(100)), *dval = make(dev, MN_DTYPE_FLOAT64, 0, NULL, L(1));
    MN_CHECK_ERR(mn_view_index_put(x, 1, ebad, val, false, NULL), MN_ERR_INVALID_ARGUMENT,
                 "index 3 is out of bounds for dimension 0 with size 3");
    MN_CHECK_ERR(mn_view_index_put(x, 1, ebad, val, true, NULL), MN_ERR_INVALID_ARGUMENT, "out of bounds");
    MN_CHECK_ERR(mn_view_index_put(x, 1, ebad, dval, false, NULL), MN_ERR_INVALID_ARGUMENT,
                 "Index put requires the source and destination dtypes match, got float32 for the destination and "
                 "float64 for the source.");
    mn_view_t *v3 = make(dev, MN_DTYPE_FLOAT32, 1, L(3), L(1, 2, 3));
    const mn_view_t *eok[1] = {neg};
    MN_CHECK_ERR(mn_view_index_put(x, 1, eok, v3, false, NULL), MN_ERR_INVALID_ARGUMENT,
                 "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of shape [2, 4]");
    mn_view_t *src = arange(dev, MN_DTYPE_FLOAT32, 2, L(3, 4)), *srcd = arange(dev, MN_DTYPE_FLOAT64, 2, L(3, 4));
    MN_CHECK_ERR(mn_view_scatter(x, 0, g, src, NULL), MN_ERR_INVALID_ARGUMENT,
                 "index 3 is out of bounds for dimension 0 with size 3");
    MN_CHECK_ERR(mn_view_scatter_add(x, 0, g, src, NULL), MN_ERR_INVALID_ARGUMENT, "out of bounds");
    MN_CHECK_ERR(mn_view_scatter(x, 0, g, srcd, NULL), MN_ERR_INVALID_ARGUMENT,
                 "scatter(): Expected self.dtype to be equal to src.dtype");
    mn_view_t *gw = make(dev, MN_DTYPE_INT64, 2, L(1, 5), L(0, 0, 0, 0, 0));
    MN_CHECK_ERR(mn_view_scatter(x, 0, gw, src, NULL), MN_ERR_INVALID_ARGUMENT,
                 "Expected index [1, 5] to be smaller than self [3, 4] apart from dimension 0");
    MN_CHECK(IS(x, S(3, 4), orig));
    /* overlap: an expanded destination; values that are the destination */
    mn_view_t *row = NULL, *ex = NULL;
    MN_CHECK_OK(mn_view_select(x, 0, 0, &row));
    MN_CHECK_OK(mn_view_expand(row, 2, L(3, 4), &ex));
    MN_CHECK_ERR(mn_view_index_put(ex, 1, eok, val, false, NULL), MN_ERR_INVALID_ARGUMENT,
                 "more than one element of the written-to tensor refers to a single memory location");
    MN_CHECK_ERR(mn_view_scatter(ex, 0, g, src, NULL), MN_ERR_INVALID_ARGUMENT,
                 "more than one element of the written-to tensor refers to a single memory location");
    mn_view_t *g01 = make(dev, MN_DTYPE_INT64, 2, L(1, 2), L(0, 1));
    MN_CHECK_ERR(mn_view_scatter(x, 0, g01, x, NULL), MN_ERR_INVALID_ARGUMENT, "refer to a single memory location");
    const mn_view_t *e01[1] = {g01};
    MN_CHECK_ERR(mn_view_index_put(x, 1, e01, row, false, NULL), MN_ERR_INVALID_ARGUMENT,
                 "refer to a single memory location");
    mn_view_destroy(g01);
    MN_CHECK(IS(x, S(3, 4), orig));
    mn_view_t *objs[] = {x, bad, neg, flt, i2, big, g, mask3, b3, val, dval, v3, src, srcd, gw, row, ex};
    for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
  }
}

/* Empty results and empty indices: PyTorch checks nothing it does not read. */
MN_TEST(empty_cases) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *x = arange(dev, MN_DTYPE_INT64, 2, L(3, 2)), *r = NULL;
    mn_view_t *e0 = make(dev, MN_DTYPE_INT64, 2, L(0, 5), NULL);
    MN_CHECK_OK(mn_view_gather(x, 0, e0, NULL, &r));
    MN_CHECK(mn_view_numel(r) == 0 && mn_view_size(r, 1) == 5);
    mn_view_destroy(r);
    mn_view_t *src = arange(dev, MN_DTYPE_INT64, 2, L(1, 1));
    MN_CHECK_OK(mn_view_scatter(x, 0, e0, src, NULL));
    mn_view_destroy(src);
    mn_view_t *none = make(dev, MN_DTYPE_BOOL, 1, L(3), L(0, 0, 0));
    const mn_view_t *e[1] = {none};
    MN_CHECK_OK(mn_view_index(x, 1, e, NULL, &r));
    MN_CHECK(mn_view_ndim(r) == 2 && mn_view_size(r, 0) == 0 && mn_view_size(r, 1) == 2);
    mn_view_destroy(r);
    mn_view_t *empty = NULL;
    MN_CHECK_OK(mn_view_empty(dev, MN_DTYPE_INT64, 1, L(0), &empty));
    mn_view_t *i5 = idx1(dev, MN_DTYPE_INT64, 1, L(5));
    MN_CHECK_ERR(mn_view_take(empty, i5, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "take(): tried to take from an empty tensor");
    const mn_view_t *ei[1] = {i5};
    MN_CHECK_ERR(mn_view_index(empty, 1, ei, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "index is out of bounds for dimension with size 0");
    MN_CHECK(IS(x, S(3, 2), S(0, 1, 2, 3, 4, 5)));
    mn_view_t *objs[] = {x, e0, none, empty, i5};
    for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
  }
}

/* The meta device (mnemo/device.h) may come from another branch: until it is
 * linked in, this case says so and checks nothing. */
#pragma weak mn_device_meta

/* On meta the results' shapes come without reading any index (an
 * out-of-range one passes, as in PyTorch's meta kernels); masks are refused. */
MN_TEST(meta_shapes_without_reading) {
  if (!mn_device_meta) {
    printf("  meta: mn_device_meta is not linked in this build; skipped\n");
    return;
  }
  mn_device_t META = mn_device_meta();
  mn_view_t *x = NULL, *r = NULL, *val = NULL;
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_FLOAT32, 3, L(2, 3, 4), &x));
  mn_view_t *i = idx1(CPU, MN_DTYPE_INT64, 5, L(0, 9, -1, 2, 100)), *g = make(CPU, MN_DTYPE_INT64, 3, L(2, 1, 4), L(0, 1, 2, 3, 4, 5, 6, 7));
  MN_CHECK_OK(mn_view_index_select(x, 1, i, NULL, &r));
  MN_CHECK(r && mn_view_device(r).type == MN_DEVICE_META && mn_view_ndim(r) == 3 && mn_view_size(r, 1) == 5);
  mn_view_destroy(r);
  MN_CHECK_OK(mn_view_take(x, i, NULL, &r));
  MN_CHECK(r && mn_view_ndim(r) == 1 && mn_view_size(r, 0) == 5);
  mn_view_destroy(r);
  MN_CHECK_OK(mn_view_gather(x, 2, g, NULL, &r));
  MN_CHECK(r && mn_view_ndim(r) == 3 && mn_view_size(r, 0) == 2 && mn_view_size(r, 1) == 1);
  mn_view_destroy(r);
  const mn_view_t *e[3] = {i, NULL, i};
  MN_CHECK_OK(mn_view_index(x, 3, e, NULL, &r)); /* not adjacent: [5, 3] */
  MN_CHECK(r && mn_view_ndim(r) == 2 && mn_view_size(r, 0) == 5 && mn_view_size(r, 1) == 3);
  mn_view_destroy(r);
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_FLOAT32, 0, NULL, &val));
  MN_CHECK_OK(mn_view_index_put(x, 3, e, val, true, NULL));
  mn_view_t *m = make(CPU, MN_DTYPE_BOOL, 1, L(4), L(1, 0, 1, 0));
  MN_CHECK_ERR(mn_view_masked_select(x, m, NULL, &r), MN_ERR_NOT_SUPPORTED, "meta");
  const mn_view_t *em[3] = {NULL, NULL, m};
  MN_CHECK_ERR(mn_view_index(x, 3, em, NULL, &r), MN_ERR_NOT_SUPPORTED, "meta");
  /* a non-empty index into a dim of size 0 is refused by
   * every op from the shapes alone (every real device refuses it; torch
   * 1.13's meta gather / scatter / index_select / index_put_ accept it) */
  mn_view_t *z = NULL, *zsrc = NULL, *i0 = idx1(CPU, MN_DTYPE_INT64, 1, L(0));
  mn_view_t *g0 = make(CPU, MN_DTYPE_INT64, 2, L(1, 3), L(0, 0, 0));
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_FLOAT32, 2, L(0, 3), &z));
  MN_CHECK_OK(mn_view_empty(META, MN_DTYPE_FLOAT32, 2, L(1, 3), &zsrc));
  r = NULL;
  const char *empty_dim = "index is out of bounds for dimension with size 0", *empty_d0 = "for dimension 0 with size 0";
  MN_CHECK_ERR(mn_view_index_select(z, 0, i0, NULL, &r), MN_ERR_INVALID_ARGUMENT,
               "self indexing axis dim should be positive");
  const mn_view_t *ez[1] = {i0};
  MN_CHECK_ERR(mn_view_index(z, 1, ez, NULL, &r), MN_ERR_INVALID_ARGUMENT, empty_dim);
  MN_CHECK_ERR(mn_view_index_put(z, 1, ez, val, false, NULL), MN_ERR_INVALID_ARGUMENT, empty_dim);
  MN_CHECK_ERR(mn_view_gather(z, 0, g0, NULL, &r), MN_ERR_INVALID_ARGUMENT, empty_d0);
  MN_CHECK_ERR(mn_view_scatter(z, 0, g0, zsrc, NULL), MN_ERR_INVALID_ARGUMENT, empty_d0);
  MN_CHECK_ERR(mn_view_scatter_add(z, 0, g0, zsrc, NULL), MN_ERR_INVALID_ARGUMENT, empty_d0);
  MN_CHECK(r == NULL);
  mn_view_t *ge = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT64, 2, L(0, 3), &ge));
  MN_CHECK_OK(mn_view_gather(z, 0, ge, NULL, &r)); /* an empty index: nothing out of range */
  mn_view_destroy(r);
  MN_CHECK_OK(mn_view_scatter(z, 0, ge, zsrc, NULL));
  MN_CHECK_OK(mn_view_gather(z, 1, ge, NULL, &r)); /* dim 1 has size 3 */
  mn_view_destroy(r);
  mn_view_t *objs[] = {x, i, g, val, m, z, zsrc, i0, g0, ge};
  for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
}

/* A result is sized before any index is read. Each index
 * here is one out-of-range value (99) expanded (stride 0) to 2^62 or 2^30
 * positions: the call must fail on the result's size (overflow, or no
 * memory for it), not with the range error that reading it gives (before
 * the fix every call read first: the range error here, and minutes of
 * reading for a valid index of that size). */
MN_TEST(hostile_sizes_fail_before_reading) {
  const int64_t huge = (int64_t)1 << 62;
  mn_view_t *x = arange(CPU, MN_DTYPE_FLOAT32, 2, L(4, 4)), *r = NULL;
  mn_view_t *i1 = idx1(CPU, MN_DTYPE_INT64, 1, L(99)), *g1 = make(CPU, MN_DTYPE_INT64, 2, L(1, 1), L(99));
  mn_view_t *e = NULL, *ge = NULL;
  MN_CHECK_OK(mn_view_expand(i1, 1, &huge, &e));
  MN_CHECK_OK(mn_view_expand(g1, 2, L(huge, 1), &ge));
  MN_CHECK_ERR(mn_view_index_select(x, 0, e, NULL, &r), MN_ERR_OVERFLOW, "overflows");
  MN_CHECK_ERR(mn_view_take(x, e, NULL, &r), MN_ERR_OVERFLOW, "overflows");
  MN_CHECK_ERR(mn_view_gather(x, 0, ge, NULL, &r), MN_ERR_OVERFLOW, "overflows");
  const mn_view_t *ix[1] = {e};
  MN_CHECK_ERR(mn_view_index(x, 1, ix, NULL, &r), MN_ERR_OVERFLOW, "overflows");
  mn_view_t *val = make(CPU, MN_DTYPE_FLOAT32, 0, NULL, L(1));
  MN_CHECK_ERR(mn_view_index_put(x, 1, ix, val, false, NULL), MN_ERR_OVERFLOW, "overflows");
  MN_CHECK(r == NULL);
  MN_CHECK(IS(x, S(4, 4), S(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
  /* sizes that fit but that no memory holds (SIM has 256 MiB): no memory */
  const int64_t big = (int64_t)1 << 30;
  mn_view_t *xs = arange(SIM, MN_DTYPE_FLOAT32, 2, L(4, 4)), *eb = NULL;
  MN_CHECK_OK(mn_view_expand(i1, 1, &big, &eb));
  MN_CHECK_ERR(mn_view_index_select(xs, 0, eb, NULL, &r), MN_ERR_OUT_OF_MEMORY, "");
  MN_CHECK_ERR(mn_view_take(xs, eb, NULL, &r), MN_ERR_OUT_OF_MEMORY, "");
  const mn_view_t *ixb[1] = {eb};
  MN_CHECK_ERR(mn_view_index(xs, 1, ixb, NULL, &r), MN_ERR_OUT_OF_MEMORY, "");
  MN_CHECK(r == NULL);
  mn_view_t *objs[] = {x, i1, g1, e, ge, val, xs, eb};
  for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
}

/* Every host allocation of every index op failing in turn
 * (runtime/hostmem.h's per-thread seam): the call reports
 * MN_ERR_OUT_OF_MEMORY (index_put's values broadcast used to report it as
 * invalid_argument "shape mismatch") and writes nothing. */
static int64_t g_fault_nth;
static bool g_fault_fired;

static mn_status run_index_op(int op, mn_device_t dev, mn_view_t *x, mn_view_t **r) {
  mn_view_t *i = idx1(dev, MN_DTYPE_INT64, 2, L(2, 0)), *g = make(dev, MN_DTYPE_INT64, 2, L(1, 2), L(1, 2));
  mn_view_t *m = make(dev, MN_DTYPE_BOOL, 1, L(3), L(1, 0, 1)), *vals = make(dev, MN_DTYPE_FLOAT32, 1, L(1), L(7));
  mn_view_t *src = make(dev, MN_DTYPE_FLOAT32, 2, L(1, 2), L(5, 6));
  mn_view_t *m4 = make(dev, MN_DTYPE_BOOL, 1, L(4), L(1, 0, 1, 1));
  const mn_view_t *ix[2] = {i, NULL}, *im[1] = {m};
  mn_status st = MN_OK;
  MN_CHECK_OK(mn_device_synchronize(dev));
  mn__hostmem_fail_nth(g_fault_nth); /* armed for the index call only */
  switch (op) {
    case 0: st = mn_view_index_select(x, 0, i, NULL, r); break;
    case 1: st = mn_view_take(x, i, NULL, r); break;
    case 2: st = mn_view_gather(x, 0, g, NULL, r); break;
    case 3: st = mn_view_masked_select(x, m4, NULL, r); break;
    case 4: st = mn_view_index(x, 2, ix, NULL, r); break;
    case 5: st = mn_view_index(x, 1, im, NULL, r); break;
    case 6: st = mn_view_index_put(x, 1, ix, vals, false, NULL); break;
    case 7: st = mn_view_index_put(x, 1, im, vals, true, NULL); break;
    case 8: st = mn_view_scatter(x, 0, g, src, NULL); break;
    default: st = mn_view_scatter_add(x, 0, g, src, NULL); break;
  }
  g_fault_fired = mn__hostmem_fault_fired();
  mn__hostmem_fail_nth(0);
  MN_CHECK_OK(mn_device_synchronize(dev));
  mn_view_t *objs[] = {i, g, m, vals, src, m4};
  for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
  return st;
}

MN_TEST(host_oom_is_out_of_memory) {
  const int64_t orig[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  int faulted = 0;
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    for (int op = 0; op < 10; op++) {
      for (int64_t nth = 1;; nth++) {
        mn_view_t *x = arange(dev, MN_DTYPE_FLOAT32, 2, L(3, 4)), *r = NULL;
        g_fault_nth = nth;
        mn_status st = run_index_op(op, dev, x, &r);
        bool fired = g_fault_fired;
        if (fired && st != MN_OK) {
          faulted++;
          if (st != MN_ERR_OUT_OF_MEMORY)
            fprintf(stderr, "  op %d on %s, fault %lld: %s: %s\n", op, k ? "sim" : "cpu", (long long)nth,
                    mn_status_name(st), mn_last_error());
          MN_CHECK(st == MN_ERR_OUT_OF_MEMORY);
          MN_CHECK(r == NULL);
          MN_CHECK(IS(x, S(3, 4), orig));
        } else {
          MN_CHECK_OK(st);
        }
        mn_view_destroy(r);
        mn_view_destroy(x);
        if (!fired || nth > 400) break;
      }
    }
  }
  MN_CHECK(faulted > 20); /* the sweep reached the calls' own allocations */
}

/* Gather's and scatter's shape rules as PyTorch 1.13's: a
 * 0-d src counts as size 1 (several indices into it are refused, as
 * mnemo/index.h states), an empty index is not checked at all (its number
 * of dims nor its dtype); a refused scatter writes nothing. */
MN_TEST(gather_scatter_shape_rules) {
  for (int k = 0; k < 2; k++) {
    mn_device_t dev = devs()[k];
    mn_view_t *x = arange(dev, MN_DTYPE_FLOAT32, 1, L(5)), *r = NULL;
    mn_view_t *s0 = make(dev, MN_DTYPE_FLOAT32, 0, NULL, L(7)), *i3 = idx1(dev, MN_DTYPE_INT64, 3, L(0, 1, 2));
    mn_view_t *i1 = idx1(dev, MN_DTYPE_INT64, 1, L(4));
    MN_CHECK_ERR(mn_view_scatter(x, 0, i3, s0, NULL), MN_ERR_INVALID_ARGUMENT,
                 "Expected index [3] to be smaller than self [5] apart from dimension 0 and to be smaller size than "
                 "src []");
    MN_CHECK_ERR(mn_view_scatter_add(x, 0, i3, s0, NULL), MN_ERR_INVALID_ARGUMENT, "smaller size than src []");
    MN_CHECK(IS(x, S(5), S(0, 1, 2, 3, 4)));
    MN_CHECK_OK(mn_view_scatter(x, 0, i1, s0, NULL)); /* one index: fine */
    MN_CHECK(IS(x, S(5), S(0, 1, 2, 3, 7)));
    /* empty indices of another number of dims (and of a float dtype) */
    mn_view_t *y = arange(dev, MN_DTYPE_FLOAT32, 2, L(2, 3)), *e1 = NULL, *e3 = NULL, *ef = NULL;
    MN_CHECK_OK(mn_view_empty(dev, MN_DTYPE_INT64, 1, L(0), &e1));
    MN_CHECK_OK(mn_view_empty(dev, MN_DTYPE_INT64, 3, L(0, 2, 2), &e3));
    MN_CHECK_OK(mn_view_empty(dev, MN_DTYPE_FLOAT32, 1, L(0), &ef));
    MN_CHECK_OK(mn_view_gather(y, 0, e1, NULL, &r));
    MN_CHECK(r && mn_view_ndim(r) == 1 && mn_view_numel(r) == 0);
    mn_view_destroy(r);
    r = NULL;
    MN_CHECK_OK(mn_view_gather(y, 1, e3, NULL, &r));
    MN_CHECK(r && mn_view_ndim(r) == 3 && mn_view_size(r, 1) == 2 && mn_view_dtype(r) == MN_DTYPE_FLOAT32);
    mn_view_destroy(r);
    r = NULL;
    MN_CHECK_OK(mn_view_gather(y, 0, ef, NULL, &r));
    mn_view_destroy(r);
    r = NULL;
    MN_CHECK_OK(mn_view_scatter(y, 0, e1, s0, NULL));
    MN_CHECK_ERR(mn_view_scatter_add(y, 0, e3, y, NULL), MN_ERR_INVALID_ARGUMENT,
                 "refer to a single memory location"); /* self as src: refused all the same, as PyTorch */
    MN_CHECK_OK(mn_view_scatter(y, 0, ef, x, NULL));
    mn_view_t *yd = make(dev, MN_DTYPE_FLOAT64, 2, L(2, 3), L(0, 0, 0, 0, 0, 0));
    MN_CHECK_ERR(mn_view_scatter(y, 0, e1, yd, NULL), MN_ERR_INVALID_ARGUMENT,
                 "Expected self.dtype to be equal to src.dtype");
    MN_CHECK(IS(y, S(2, 3), S(0, 1, 2, 3, 4, 5)));
    /* a non-empty index keeps every check */
    mn_view_t *g1 = idx1(dev, MN_DTYPE_INT64, 1, L(0));
    MN_CHECK_ERR(mn_view_gather(y, 0, g1, NULL, &r), MN_ERR_INVALID_ARGUMENT,
                 "Index tensor must have the same number of dimensions as input tensor");
    MN_CHECK(r == NULL);
    mn_view_t *objs[] = {x, s0, i3, i1, y, e1, e3, ef, yd, g1};
    for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
  }
}

/* The README's rule: a failed call leaves its outputs untouched (the calls
 * of mnemo/index.h used to set *out = NULL on entry). */
MN_TEST(failed_calls_leave_out_untouched) {
  mn_view_t *x = arange(CPU, MN_DTYPE_FLOAT32, 2, L(3, 4)), *bad = idx1(CPU, MN_DTYPE_INT64, 1, L(3));
  mn_view_t *flt = make(CPU, MN_DTYPE_FLOAT32, 1, L(1), L(0));
  mn_view_t *const sentinel = (mn_view_t *)(uintptr_t)0x5a5a;
  mn_view_t *r = sentinel;
  MN_CHECK_ERR(mn_view_index_select(x, 0, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT, "index out of range in self");
  MN_CHECK(r == sentinel);
  MN_CHECK_ERR(mn_view_take(x, flt, NULL, &r), MN_ERR_INVALID_ARGUMENT, "take()");
  MN_CHECK(r == sentinel);
  MN_CHECK_ERR(mn_view_gather(x, 0, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT, "same number of dimensions");
  MN_CHECK(r == sentinel);
  MN_CHECK_ERR(mn_view_masked_select(x, bad, NULL, &r), MN_ERR_INVALID_ARGUMENT, "masked_select");
  MN_CHECK(r == sentinel);
  const mn_view_t *ix[1] = {bad};
  MN_CHECK_ERR(mn_view_index(x, 1, ix, NULL, &r), MN_ERR_INVALID_ARGUMENT, "out of bounds");
  MN_CHECK(r == sentinel);
  mn_view_t *objs[] = {x, bad, flt};
  for (size_t q = 0; q < sizeof objs / sizeof *objs; q++) mn_view_destroy(objs[q]);
}

MN_TEST(nothing_left_on_sim) {
  MN_CHECK_OK(mn_device_synchronize(SIM));
  mn_allocator_t *def = NULL;
  MN_CHECK_OK(mn_allocator_get_default(SIM, &def));
  mn_alloc_stats_t as;
  MN_CHECK_OK(mn_allocator_get_stats(def, &as));
  MN_CHECK(as.allocation[MN_POOL_ALL].current == 0);
  mn_test_release_sim_caches();
  MN_CHECK_OK(mn_copy_engine_reset());
  mn_sim_stats_t st;
  MN_CHECK_OK(mn_sim_get_stats(SIM, &st));
  MN_CHECK(st.mapped_bytes == 0 && st.illegal_accesses == 0);
}

int main(void) {
  CPU = mn_device_cpu();
  SIM = mn_device_sim(0);
  mn_test_configure_sim(1, (size_t)1 << 28);
  MN_RUN(index_select_take_gather);
  MN_RUN(masked_select_and_index);
  MN_RUN(index_put_and_scatter);
  MN_RUN(indices_on_another_device);
  MN_RUN(refusals_write_nothing);
  MN_RUN(empty_cases);
  MN_RUN(meta_shapes_without_reading);
  MN_RUN(hostile_sizes_fail_before_reading);
  MN_RUN(host_oom_is_out_of_memory);
  MN_RUN(gather_scatter_shape_rules);
  MN_RUN(failed_calls_leave_out_untouched);
  MN_RUN(nothing_left_on_sim);
  return mn_test_finish();
}
