/* tests/test_kernels_index_cases.h: the gather/scatter kernel cases
 * (kernels/index.h) shared by test_kernels_index.c (CPU, SIM),
 * test_kernels_emu.c (the CUDA kernels under the launch emulation) and
 * test_kernels_gpu.c (CUDA): random shapes, layouts, broadcasts, dtypes,
 * int32/int64 indices with negatives, against a naive row-major reference,
 * bit-exact (accumulate included: the order of the adds is the contract).
 * Set ki_dev and ki_stream, then call ki_run_all().
 * Threading: the main thread (and the stream's worker behind it). */
#ifndef MNEMO_TESTS_KERNELS_INDEX_CASES_H
#define MNEMO_TESTS_KERNELS_INDEX_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/index.h"
#include "kernels_reference.h"
#include "mn_test.h"
#include "mnemo/mnemo.h"

static mn_device_t ki_dev;
static mn_stream_t *ki_stream;

/* ---- deterministic randomness (own stream: the case list is reproducible) ---- */

static uint64_t ki_state = 0x9E3779B97F4A7C15ull;
static uint64_t ki_rand(void) {
  ki_state ^= ki_state << 13;
  ki_state ^= ki_state >> 7;
  ki_state ^= ki_state << 17;
  return ki_state;
}
static int64_t ki_range(int64_t lo, int64_t hi) { return lo + (int64_t)(ki_rand() % (uint64_t)(hi - lo + 1)); }

/* ---- buffers: host image + device copy -------------------------------------- */

typedef struct ki_buf {
  size_t nbytes;
  unsigned char *host;
  void *dev;
} ki_buf;

static void ki_alloc(ki_buf *b, size_t nbytes) {
  b->nbytes = nbytes ? nbytes : 1;
  b->host = calloc(1, b->nbytes);
  b->dev = NULL;
  MN_CHECK_OK(mn_device_raw_alloc(ki_dev, b->nbytes, &b->dev));
}
static void ki_upload(ki_buf *b) {
  MN_CHECK_OK(mn_copy_bytes(ki_dev, b->dev, mn_device_cpu(), b->host, b->nbytes, ki_stream, 0));
  MN_CHECK_OK(mn_stream_synchronize(ki_stream));
}
static void ki_download(const ki_buf *b, unsigned char *out) {
  MN_CHECK_OK(mn_stream_synchronize(ki_stream));
  MN_CHECK_OK(mn_copy_bytes(mn_device_cpu(), out, ki_dev, b->dev, b->nbytes, ki_stream, 0));
  MN_CHECK_OK(mn_stream_synchronize(ki_stream));
}
static void ki_free(ki_buf *b) {
  if (b->dev) MN_CHECK_OK(mn_device_raw_free(ki_dev, b->dev));
  free(b->host);
}

/* ---- the reference ------------------------------------------------------------ */

static mn_dtype_kind ki_kind(mn_dtype dt) { return mn_dtype_info(dt)->kind; }

/* *d += *s, written independently of the kernels: through the scalar
 * reference casts (tests/kernels_reference.c) into float32 / float64. */
static void ki_ref_add(mn_dtype dt, unsigned char *d, const unsigned char *s) {
  switch (ki_kind(dt)) {
    case MN_KIND_BOOL: d[0] = (unsigned char)(d[0] != 0 || s[0] != 0); return;
    case MN_KIND_INT:
    case MN_KIND_UINT: {
      uint64_t a = 0, b = 0;
      size_t n = mn_dtype_itemsize(dt);
      memcpy(&a, d, n); /* little-endian: the low bytes */
      memcpy(&b, s, n);
      a += b;
      memcpy(d, &a, n);
      return;
    }
    case MN_KIND_COMPLEX: {
      size_t half = mn_dtype_itemsize(dt) / 2;
      ki_ref_add(half == 4 ? MN_DTYPE_FLOAT32 : MN_DTYPE_FLOAT64, d, s);
      ki_ref_add(half == 4 ? MN_DTYPE_FLOAT32 : MN_DTYPE_FLOAT64, d + half, s + half);
      return;
    }
    default: break;
  }
  if (dt == MN_DTYPE_FLOAT64) {
    double a, b;
    memcpy(&a, d, 8);
    memcpy(&b, s, 8);
    a += b;
    memcpy(d, &a, 8);
    return;
  }
  float a, b; /* float32 and the narrow floats: add in float32, round as a cast */
  mn__ref_cast_element(&a, MN_DTYPE_FLOAT32, d, dt);
  mn__ref_cast_element(&b, MN_DTYPE_FLOAT32, s, dt);
  volatile float r = a + b;
  float rv = r;
  mn__ref_cast_element(d, dt, &rv, MN_DTYPE_FLOAT32);
}

/* The multi-index of position e (row-major). */
static void ki_unravel(int ndim, const int64_t *sizes, int64_t e, int64_t *p) {
  for (int d = ndim - 1; d >= 0; d--) {
    p[d] = e % sizes[d];
    e /= sizes[d];
  }
}

static int64_t ki_dot(int ndim, const int64_t *p, const int64_t *strides) {
  int64_t o = 0;
  for (int d = 0; d < ndim; d++) o += p[d] * strides[d];
  return o;
}

/* The index term (elements) at p; idx data pointers are host images. */
static int64_t ki_ref_term(const mn__index_ops_t *ix, const int64_t *p) {
  int64_t k = 0;
  for (int j = 0; j < ix->n; j++) {
    const char *q = ix->idx[j].data + ki_dot(ix->idx[j].ndim, p, ix->idx[j].strides) *
                                          (ix->idx_dtype[j] == MN_DTYPE_INT64 ? 8 : 4);
    int64_t v;
    if (ix->idx_dtype[j] == MN_DTYPE_INT64) {
      memcpy(&v, q, 8);
    } else {
      int32_t w;
      memcpy(&w, q, 4);
      v = w;
    }
    k += (v < 0 ? v + ix->size[j] : v) * ix->stride[j];
  }
  return k;
}

/* op 0: gather; 1: scatter; 2: scatter with accumulate. Host images. */
static void ki_reference(int op, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dt,
                         const mn__index_ops_t *ix) {
  const mn__strided_t *shape = op == 0 ? dst : src;
  const size_t item = mn_dtype_itemsize(dt);
  int64_t n = 1, p[MN_MAX_DIMS];
  for (int d = 0; d < shape->ndim; d++) n *= shape->sizes[d];
  for (int64_t e = 0; e < n; e++) {
    ki_unravel(shape->ndim, shape->sizes, e, p);
    const int64_t k = ki_ref_term(ix, p);
    unsigned char *dp = (unsigned char *)dst->data + (ki_dot(dst->ndim, p, dst->strides) + (op == 0 ? 0 : k)) * (int64_t)item;
    const unsigned char *sp =
        (const unsigned char *)src->data + (ki_dot(src->ndim, p, src->strides) + (op == 0 ? k : 0)) * (int64_t)item;
    if (op == 2)
      ki_ref_add(dt, dp, sp);
    else
      memcpy(dp, sp, item);
  }
}

/* ---- random cases ------------------------------------------------------------- */

/* A value for accumulate tests: +-k * 2^e, cast to dt (no infinities in any
 * sum of a few: the GPU's NaN of inf - inf has other bits). */
static void ki_value(mn_dtype dt, unsigned char *out) {
  if (ki_kind(dt) != MN_KIND_FLOAT && ki_kind(dt) != MN_KIND_COMPLEX) {
    for (size_t i = 0; i < mn_dtype_itemsize(dt); i++) out[i] = (unsigned char)ki_rand();
    if (dt == MN_DTYPE_BOOL) out[0] &= 1;
    return;
  }
  double v[2];
  for (int k = 0; k < 2; k++) v[k] = ldexp((double)ki_range(-100, 100), (int)ki_range(-6, 6));
  if (ki_kind(dt) == MN_KIND_COMPLEX) {
    size_t half = mn_dtype_itemsize(dt) / 2;
    mn_dtype part = half == 4 ? MN_DTYPE_FLOAT32 : MN_DTYPE_FLOAT64;
    mn__ref_cast_element(out, part, &v[0], MN_DTYPE_FLOAT64);
    mn__ref_cast_element(out + half, part, &v[1], MN_DTYPE_FLOAT64);
  } else {
    mn__ref_cast_element(out, dt, &v[0], MN_DTYPE_FLOAT64);
  }
}

/* A random layout of `ndim` dims of `sizes` (outermost-first permutation,
 * steps 1 or 2, an offset); bcast: dims forced to stride 0. Returns the
 * elements the buffer needs. */
static int64_t ki_layout(int ndim, const int64_t *sizes, unsigned bcast, int64_t *strides, int64_t *offset) {
  int perm[MN_MAX_DIMS];
  for (int d = 0; d < ndim; d++) perm[d] = d;
  for (int d = ndim - 1; d > 0; d--) {
    int r = (int)ki_range(0, d), t = perm[d];
    perm[d] = perm[r];
    perm[r] = t;
  }
  int64_t acc = ki_range(1, 3) == 3 ? 2 : 1;
  for (int i = ndim - 1; i >= 0; i--) {
    int d = perm[i];
    strides[d] = acc;
    acc *= sizes[d] > 0 ? sizes[d] : 1;
    if (ki_range(0, 4) == 0) acc *= 2;
  }
  for (int d = 0; d < ndim; d++)
    if (bcast & (1u << d)) strides[d] = 0;
  *offset = ki_range(0, 3);
  return acc + *offset + 1;
}

typedef struct ki_case {
  int op;         /* 0 gather, 1 scatter, 2 scatter accumulate */
  mn_dtype dtype;
  int ndim;       /* iteration dims */
  int64_t sizes[6];
  unsigned serial; /* iteration dims the data operand does not step along */
  int n;           /* index operands */
  int64_t isize[3];
  mn_dtype idt[3];
  unsigned ibcast[3]; /* dims each index does not vary on */
  unsigned sbcast;    /* scatter: src broadcast dims */
  int shift;          /* bytes every operand starts past its buffer's (aligned) start */
} ki_case;

static int ki_failures_reported;

/* Runs one case on the device and against the reference; returns whether it matched. */
static bool ki_run_case(const ki_case *c) {
  const size_t item = mn_dtype_itemsize(c->dtype);
  /* the data operand D: dims = the non-serial iteration dims, then the indexed dims */
  int dn = 0, dmap[MN_MAX_DIMS];
  int64_t dsizes[MN_MAX_DIMS], dstr[MN_MAX_DIMS], doff;
  for (int d = 0; d < c->ndim; d++)
    if (!(c->serial & (1u << d))) {
      dmap[d] = dn;
      dsizes[dn++] = c->sizes[d];
    }
  for (int j = 0; j < c->n; j++) dsizes[dn++] = c->isize[j];
  const int64_t delems = ki_layout(dn, dsizes, 0, dstr, &doff);
  /* the other operand O over the iteration shape */
  int64_t ostr[MN_MAX_DIMS], ooff;
  const int64_t oelems = ki_layout(c->ndim, c->sizes, c->op == 0 ? 0 : c->sbcast, ostr, &ooff);
  ki_buf D, O, I[3];
  const int64_t sh = c->shift;
  ki_alloc(&D, (size_t)delems * item + (size_t)sh);
  ki_alloc(&O, (size_t)oelems * item + (size_t)sh);
  for (size_t i = (size_t)sh; i + item <= D.nbytes; i += item) ki_value(c->dtype, D.host + i);
  for (size_t i = (size_t)sh; i + item <= O.nbytes; i += item) ki_value(c->dtype, O.host + i);
  mn__index_ops_t ix, hix;
  memset(&ix, 0, sizeof ix);
  ix.n = c->n;
  for (int j = 0; j < c->n; j++) {
    int64_t istr[MN_MAX_DIMS], ioff;
    const int64_t ielems = ki_layout(c->ndim, c->sizes, c->ibcast[j], istr, &ioff);
    const size_t ii = c->idt[j] == MN_DTYPE_INT64 ? 8 : 4;
    ki_alloc(&I[j], (size_t)ielems * ii + (size_t)sh);
    for (int64_t e = 0; e < ielems; e++) {
      int64_t v = ki_range(-c->isize[j], c->isize[j] - 1);
      if (ii == 8) {
        memcpy(I[j].host + sh + e * 8, &v, 8);
      } else {
        int32_t w = (int32_t)v;
        memcpy(I[j].host + sh + e * 4, &w, 4);
      }
    }
    ki_upload(&I[j]);
    ix.idx[j].ndim = c->ndim;
    for (int d = 0; d < c->ndim; d++) {
      ix.idx[j].sizes[d] = c->sizes[d];
      ix.idx[j].strides[d] = istr[d];
    }
    ix.idx[j].data = (char *)I[j].dev + sh + ioff * (int64_t)ii;
    ix.idx_dtype[j] = c->idt[j];
    ix.size[j] = c->isize[j];
    ix.stride[j] = dstr[dn - c->n + j];
  }
  ki_upload(&D);
  ki_upload(&O);
  mn__strided_t ds, os;
  memset(&ds, 0, sizeof ds);
  memset(&os, 0, sizeof os);
  ds.ndim = os.ndim = c->ndim;
  for (int d = 0; d < c->ndim; d++) {
    ds.sizes[d] = os.sizes[d] = c->sizes[d];
    ds.strides[d] = (c->serial & (1u << d)) ? 0 : dstr[dmap[d]];
    os.strides[d] = ostr[d];
  }
  ds.data = (char *)D.dev + sh + doff * (int64_t)item;
  os.data = (char *)O.dev + sh + ooff * (int64_t)item;
  mn_status st = c->op == 0 ? mn__kernel_gather(ki_stream, &os, &ds, c->dtype, &ix, "test")
                            : mn__kernel_scatter(ki_stream, &ds, &os, c->dtype, &ix, c->op == 2, "test");
  MN_CHECK_OK(st);
  /* the reference over the host images */
  hix = ix;
  for (int j = 0; j < c->n; j++)
    hix.idx[j].data = (char *)I[j].host + (ix.idx[j].data - (char *)I[j].dev);
  mn__strided_t hds = ds, hos = os;
  hds.data = (char *)D.host + sh + doff * (int64_t)item;
  hos.data = (char *)O.host + sh + ooff * (int64_t)item;
  if (c->op == 0)
    ki_reference(0, &hos, &hds, c->dtype, &hix);
  else
    ki_reference(c->op, &hds, &hos, c->dtype, &hix);
  const ki_buf *out = c->op == 0 ? &O : &D;
  unsigned char *got = malloc(out->nbytes);
  ki_download(out, got);
  bool same = memcmp(got, out->host, out->nbytes) == 0;
  MN_CHECK(same);
  if (!same && ki_failures_reported++ < 5) {
    fprintf(stderr, "  op %d %s ndim %d sizes", c->op, mn_dtype_name(c->dtype), c->ndim);
    for (int d = 0; d < c->ndim; d++) fprintf(stderr, " %lld", (long long)c->sizes[d]);
    fprintf(stderr, " serial %#x n %d shift %d\n", c->serial, c->n, c->shift);
    for (size_t i = 0; i < out->nbytes; i++)
      if (got[i] != out->host[i]) {
        fprintf(stderr, "  first difference at byte %zu: got %02x want %02x\n", i, got[i], out->host[i]);
        break;
      }
  }
  free(got);
  ki_free(&D);
  ki_free(&O);
  for (int j = 0; j < c->n; j++) ki_free(&I[j]);
  return same;
}

static const mn_dtype ki_dtypes[] = {
    MN_DTYPE_BOOL,    MN_DTYPE_UINT8,   MN_DTYPE_INT8,          MN_DTYPE_INT16,       MN_DTYPE_INT32,
    MN_DTYPE_INT64,   MN_DTYPE_FLOAT16, MN_DTYPE_BFLOAT16,      MN_DTYPE_FLOAT32,     MN_DTYPE_FLOAT64,
    MN_DTYPE_COMPLEX64, MN_DTYPE_COMPLEX128, MN_DTYPE_FLOAT8_E4M3FN, MN_DTYPE_FLOAT8_E5M2, MN_DTYPE_UINT16,
    MN_DTYPE_UINT32,  MN_DTYPE_UINT64};
#define KI_NDTYPES ((int)(sizeof ki_dtypes / sizeof ki_dtypes[0]))

/* A random case; max_size bounds each iteration dim. */
static ki_case ki_random_case(int op, mn_dtype dt, int64_t max_size) {
  ki_case c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.dtype = dt;
  c.ndim = (int)ki_range(0, 4);
  for (int d = 0; d < c.ndim; d++) {
    c.sizes[d] = ki_range(1, max_size);
    if (ki_range(0, 40) == 0) c.sizes[d] = 0;
    if (ki_range(0, 3) == 0) c.serial |= 1u << d;
  }
  c.n = (int)ki_range(1, 3);
  for (int j = 0; j < c.n; j++) {
    c.isize[j] = ki_range(1, 5);
    c.idt[j] = ki_range(0, 1) ? MN_DTYPE_INT64 : MN_DTYPE_INT32;
    for (int d = 0; d < c.ndim; d++)
      if (ki_range(0, 2) == 0) c.ibcast[j] |= 1u << d;
  }
  for (int d = 0; d < c.ndim; d++)
    if (ki_range(0, 3) == 0) c.sbcast |= 1u << d;
  if (ki_range(0, 3) == 0) c.shift = (int)ki_range(1, 7); /* misaligned operands: the byte-wise kernels */
  return c;
}

MN_TEST(ki_random_gather_scatter_every_dtype) {
  int fails = 0, runs = 0;
  for (int round = 0; round < 12; round++)
    for (int t = 0; t < KI_NDTYPES; t++)
      for (int op = 0; op < 3; op++) {
        ki_case c = ki_random_case(op, ki_dtypes[t], 7);
        fails += !ki_run_case(&c);
        runs++;
      }
  printf("  %d random cases, %d mismatched\n", runs, fails);
}

/* index_select-like (rows picked by one index), take_along_axis-like (the
 * index varies over every position), and scatters of them; large enough
 * for the CPU pool to split the work. */
MN_TEST(ki_large_shapes) {
  const mn_dtype dts[] = {MN_DTYPE_FLOAT32, MN_DTYPE_BFLOAT16, MN_DTYPE_INT64, MN_DTYPE_COMPLEX128};
  for (int t = 0; t < 4; t++)
    for (int op = 0; op < 3; op++) {
      /* rows: iteration [k rows (serial), 700 cols], index over dim 0 only */
      ki_case c;
      memset(&c, 0, sizeof c);
      c.op = op;
      c.dtype = dts[t];
      c.ndim = 2;
      c.sizes[0] = 300;
      c.sizes[1] = 700;
      c.serial = 1u;
      c.n = 1;
      c.isize[0] = op == 0 ? 500 : 40; /* scatters: many rows onto few */
      c.idt[0] = t % 2 ? MN_DTYPE_INT32 : MN_DTYPE_INT64;
      c.ibcast[0] = 2u;
      MN_CHECK(ki_run_case(&c));
      /* along the inner axis: iteration [400, 350], dim 1 serial, index everywhere */
      c.sizes[0] = 400;
      c.sizes[1] = 350;
      c.serial = 2u;
      c.isize[0] = op == 0 ? 600 : 30;
      c.ibcast[0] = 0;
      MN_CHECK(ki_run_case(&c));
      /* index_select along the last axis, the same index for every row (the
       * CPU's 8-row blocks; 37 rows leave a partial block) */
      c.ndim = 3;
      c.sizes[0] = 3;
      c.sizes[1] = 37;
      c.sizes[2] = 150;
      c.serial = 4u;
      c.isize[0] = op == 0 ? 400 : 20;
      c.ibcast[0] = 3u;
      MN_CHECK(ki_run_case(&c));
    }
}

/* Many positions onto a few destinations, float32 values of wide range:
 * the sums depend on the order of the adds; the device must give the
 * row-major order's bits. */
MN_TEST(ki_accumulate_order_is_row_major) {
  const int64_t n = 4000, m = 3;
  ki_buf D, O, I;
  ki_alloc(&D, (size_t)m * 4);
  ki_alloc(&O, (size_t)n * 4);
  ki_alloc(&I, (size_t)n * 8);
  for (int64_t e = 0; e < n; e++) {
    float v = (float)ldexp((double)ki_range(1, 1 << 20), (int)ki_range(-20, 20)) * (ki_range(0, 1) ? 1.0f : -1.0f);
    memcpy(O.host + e * 4, &v, 4);
    int64_t i = ki_range(-m, m - 1);
    memcpy(I.host + e * 8, &i, 8);
  }
  ki_upload(&D);
  ki_upload(&O);
  ki_upload(&I);
  mn__index_ops_t ix;
  memset(&ix, 0, sizeof ix);
  ix.n = 1;
  ix.idx[0] = (mn__strided_t){.data = I.dev, .ndim = 1, .sizes = {n}, .strides = {1}};
  ix.idx_dtype[0] = MN_DTYPE_INT64;
  ix.size[0] = m;
  ix.stride[0] = 1;
  mn__strided_t ds = {.data = D.dev, .ndim = 1, .sizes = {n}, .strides = {0}};
  mn__strided_t os = {.data = O.dev, .ndim = 1, .sizes = {n}, .strides = {1}};
  MN_CHECK_OK(mn__kernel_scatter(ki_stream, &ds, &os, MN_DTYPE_FLOAT32, &ix, true, "test"));
  float got[3], fwd[3] = {0, 0, 0}, rev[3] = {0, 0, 0};
  unsigned char buf[12];
  ki_download(&D, buf);
  memcpy(got, buf, 12);
  for (int64_t e = 0; e < n; e++) {
    int64_t i;
    float v;
    memcpy(&i, I.host + e * 8, 8);
    memcpy(&v, O.host + e * 4, 4);
    fwd[i < 0 ? i + m : i] += v;
    memcpy(&i, I.host + (n - 1 - e) * 8, 8);
    memcpy(&v, O.host + (n - 1 - e) * 4, 4);
    rev[i < 0 ? i + m : i] += v;
  }
  MN_CHECK(memcmp(got, fwd, sizeof got) == 0);
  MN_CHECK(memcmp(fwd, rev, sizeof fwd) != 0); /* the order matters for these values */
  /* without accumulate the last position of each destination wins */
  MN_CHECK_OK(mn__kernel_scatter(ki_stream, &ds, &os, MN_DTYPE_FLOAT32, &ix, false, "test"));
  ki_download(&D, buf);
  memcpy(got, buf, 12);
  for (int64_t r = 0; r < m; r++) {
    float want = 0;
    for (int64_t e = 0; e < n; e++) {
      int64_t i;
      memcpy(&i, I.host + e * 8, 8);
      if ((i < 0 ? i + m : i) == r) memcpy(&want, O.host + e * 4, 4);
    }
    MN_CHECK(memcmp(&got[r], &want, 4) == 0);
  }
  ki_free(&D);
  ki_free(&O);
  ki_free(&I);
}

MN_TEST(ki_bad_input_is_refused) {
  char buf[64] = {0};
  mn__index_ops_t ix;
  memset(&ix, 0, sizeof ix);
  ix.n = 1;
  ix.idx[0] = (mn__strided_t){.data = buf, .ndim = 1, .sizes = {4}, .strides = {1}};
  ix.idx_dtype[0] = MN_DTYPE_FLOAT32;
  ix.size[0] = 4;
  ix.stride[0] = 1;
  mn__strided_t a = {.data = buf, .ndim = 1, .sizes = {4}, .strides = {1}};
  mn__strided_t b = {.data = buf + 32, .ndim = 1, .sizes = {4}, .strides = {0}};
  mn_stream_t *cpu = NULL;
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &cpu));
  MN_CHECK_ERR(mn__kernel_gather(cpu, &b, &a, MN_DTYPE_UINT8, &ix, "gather"), MN_ERR_INVALID_ARGUMENT, "int32 or int64");
  ix.idx_dtype[0] = MN_DTYPE_INT32;
  MN_CHECK_ERR(mn__kernel_gather(cpu, &b, &a, MN_DTYPE_UINT8, &ix, "gather"), MN_ERR_INVALID_ARGUMENT,
               "single memory location");
  ix.idx[0].ndim = 2;
  ix.idx[0].sizes[1] = 1;
  MN_CHECK_ERR(mn__kernel_scatter(cpu, &a, &b, MN_DTYPE_UINT8, &ix, true, "scatter"), MN_ERR_INVALID_ARGUMENT,
               "dims");
  ix.idx[0].ndim = 1;
  ix.n = 0;
  MN_CHECK_ERR(mn__kernel_scatter(cpu, &a, &b, MN_DTYPE_UINT8, &ix, false, "scatter"), MN_ERR_INVALID_ARGUMENT,
               "index operands");
  ix.n = 1;
  ix.idx[0].sizes[0] = 3;
  MN_CHECK_ERR(mn__kernel_scatter(cpu, &a, &b, MN_DTYPE_UINT8, &ix, false, "scatter"), MN_ERR_INVALID_ARGUMENT,
               "size 3");
  /* nothing was written */
  for (int i = 0; i < 64; i++) MN_CHECK(buf[i] == 0);
  MN_CHECK_OK(mn_stream_destroy(cpu));
}

static void ki_run_all(void) {
  MN_RUN(ki_random_gather_scatter_every_dtype);
  MN_RUN(ki_large_shapes);
  MN_RUN(ki_accumulate_order_is_row_major);
  MN_RUN(ki_bad_input_is_refused);
}

#endif /* MNEMO_TESTS_KERNELS_INDEX_CASES_H */
