/* tests/test_views.c: strided views on CPU and SIM: every view op, chains,
 * aliasing, PyTorch's classic examples, overlap refusals, copies, DLPack, leaks. */
#include <stdlib.h>
#include <string.h>

#include "mn_test.h"
#include "view_chain_cases.h"
#include "test_bytes.h"
#include "mnemo/dlpack.h"
#include "view_chain.h"

static mn_device_t CPU, SIM;

static bool sizes_are(const mn_view_t *v, int n, const int64_t *want) {
  if (mn_view_ndim(v) != n) return false;
  for (int d = 0; d < n; d++)
    if (mn_view_size(v, d) != want[d]) return false;
  return true;
}

static bool strides_are(const mn_view_t *v, int n, const int64_t *want) {
  if (mn_view_ndim(v) != n) return false;
  for (int d = 0; d < n; d++)
    if (mn_view_stride(v, d) != want[d]) return false;
  return true;
}

#define SIZES(v, ...) sizes_are(v, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__})
#define STRIDES(v, ...) strides_are(v, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), (int64_t[]){__VA_ARGS__})

/* arange(n) int64 on dev. */
static mn_view_t *arange(mn_device_t dev, int64_t n) {
  mn_view_t *h = NULL, *v = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT64, 1, &n, &h));
  for (int64_t i = 0; i < n; i++) ((int64_t *)mn_view_data(h))[i] = i;
  if (dev.type == MN_DEVICE_CPU) return h;
  MN_CHECK_OK(mn_view_to(h, dev, MN_DTYPE_INT64, false, NULL, &v));
  mn_view_destroy(h);
  return v;
}

/* Values of v (int64) after contiguous, on the host, into out[]. */
static void values(const mn_view_t *v, int64_t *out) {
  mn_view_t *h = NULL, *c = NULL;
  MN_CHECK_OK(mn_view_to(v, CPU, MN_DTYPE_INT64, false, NULL, &h));
  MN_CHECK_OK(mn_view_contiguous(h, NULL, &c));
  memcpy(out, mn_view_data(c), (size_t)mn_view_numel(c) * 8);
  mn_view_destroy(c);
  mn_view_destroy(h);
}

MN_TEST(classic_examples) {
  mn_device_t devs[2] = {CPU, SIM};
  for (int i = 0; i < 2; i++) {
    mn_view_t *a = arange(devs[i], 12), *m = NULL, *t = NULL, *bad = NULL, *c = NULL, *cv = NULL, *r = NULL, *s = NULL;
    MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){3, 4}, &m));
    MN_CHECK(SIZES(m, 3, 4) && STRIDES(m, 4, 1) && mn_view_is_contiguous(m));
    MN_CHECK_OK(mn_view_t2d(m, &t));
    MN_CHECK(SIZES(t, 4, 3) && STRIDES(t, 1, 4) && !mn_view_is_contiguous(t));
    MN_CHECK_ERR(mn_view_view(t, 2, (int64_t[]){1, 12}, &bad), MN_ERR_INVALID_ARGUMENT, "Use .reshape(...) instead");
    MN_CHECK(bad == NULL);
    MN_CHECK_OK(mn_view_contiguous(t, NULL, &c));
    MN_CHECK(!mn_view_shares_storage(c, t) && mn_view_is_contiguous(c));
    MN_CHECK_OK(mn_view_view(c, 2, (int64_t[]){1, 12}, &cv));
    int64_t got[12];
    values(cv, got);
    MN_CHECK(got[0] == 0 && got[1] == 4 && got[2] == 8 && got[3] == 1 && got[11] == 11);
    /* a[1:3, 0:2] has offset 4. */
    MN_CHECK_OK(mn_view_slice(m, 0, 1, 3, 1, &r));
    MN_CHECK_OK(mn_view_slice(r, 1, 0, 2, 1, &s));
    MN_CHECK(mn_view_offset(s) == 4 && SIZES(s, 2, 2) && STRIDES(s, 4, 1));
    values(s, got);
    MN_CHECK(got[0] == 4 && got[1] == 5 && got[2] == 8 && got[3] == 9);
    /* contiguous() of a contiguous view: same storage and layout, new handle. */
    mn_view_t *same = NULL;
    MN_CHECK_OK(mn_view_contiguous(m, NULL, &same));
    MN_CHECK(same != m && mn_view_same_storage_and_layout(same, m));
    mn_view_t *vs[] = {a, m, t, c, cv, r, s, same};
    for (int k = 0; k < 8; k++) {
      MN_CHECK_OK(mn_view_check(vs[k]));
      mn_view_destroy(vs[k]);
    }
  }
}

/* Chains covering every operation; the CPU and SIM results must be equal. */
static const char *const CHAINS[] = {MN_VIEW_CHAINS_EVERY_OP};

MN_TEST(every_op_cpu_equals_sim) {
  int n = (int)(sizeof CHAINS / sizeof *CHAINS);
  for (int i = 0; i < n; i++) {
    char *a = NULL, *b = NULL;
    mn_status sa = mn_chain_run(CHAINS[i], CPU, &a);
    mn_status sb = mn_chain_run(CHAINS[i], SIM, &b);
    MN_CHECK(sa != MN_ERR_INTERNAL && sa != MN_ERR_FORMAT && sa == sb);
    MN_CHECK(strcmp(a, b) == 0);
    if (sa != sb || strcmp(a, b) != 0) fprintf(stderr, "chain %s\n  cpu: %s\n  sim: %s\n", CHAINS[i], a, b);
    free(a);
    free(b);
  }
}

/* Fixed expected results (checked against PyTorch 1.13). */
MN_TEST(chain_results) {
  static const struct {
    const char *chain, *want;
  } cases[] = {
      {"arange 12 int64 | view 3 4 | t | contiguous | to float16",
       "{\"dtype\": \"float16\", \"sizes\": [4, 3], \"strides\": [3, 1], \"offset\": 0, \"contiguous\": true, "
       "\"channels_last\": false, "
       "\"values\": [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]}"},
      {"arange 12 | view 3 4 | slice 1 0 none 2 | fill 7 | base",
       "{\"dtype\": \"int64\", \"sizes\": [12], \"strides\": [1], \"offset\": 0, \"contiguous\": true, "
       "\"channels_last\": false, "
       "\"values\": [7, 1, 7, 3, 7, 5, 7, 7, 7, 9, 7, 11]}"},
      {"arange 25 | view 5 5 | diagonal 1 0 1",
       "{\"dtype\": \"int64\", \"sizes\": [4], \"strides\": [6], \"offset\": 1, \"contiguous\": false, "
       "\"channels_last\": false, "
       "\"values\": [1, 7, 13, 19]}"},
      {"arange 4 | unsqueeze 0 | copy_self", NULL}, /* same bytes, other strides: partial */
      {"arange 6 | expand 2 6 | fill 1", NULL},     /* internal overlap: refused */
      {"arange 12 | view 3 4 | view 1 12",
       "{\"dtype\": \"int64\", \"sizes\": [1, 12], \"strides\": [12, 1], \"offset\": 0, \"contiguous\": true, "
       "\"channels_last\": false, "
       "\"values\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *j = NULL;
    mn_status st = mn_chain_run(cases[i].chain, CPU, &j);
    if (cases[i].want) {
      MN_CHECK(st == MN_OK && strcmp(j, cases[i].want) == 0);
      if (st != MN_OK || strcmp(j, cases[i].want) != 0) fprintf(stderr, "%s\n  got  %s\n", cases[i].chain, j);
    } else {
      MN_CHECK(st == MN_ERR_INVALID_ARGUMENT && strstr(j, "unsupported operation") != NULL);
    }
    free(j);
  }
  /* Found by fuzz_views: a view op (no copy) past the driver's element limit is
   * the driver's own refusal with its message, not a message-less error. */
  char *j = NULL;
  mn_status st = mn_chain_run(
      "arange 33 float8_e5m2 | to int64 | view_dtype uint8 | to int64 | view_dtype uint8 | to int64 | "
      "view_dtype uint8 | to int64 | view_dtype uint8 | to int64 | view_dtype uint8",
      CPU, &j);
  MN_CHECK(st == MN_ERR_NOT_SUPPORTED && strstr(j, "more than the driver materializes") != NULL);
  free(j);
}

MN_TEST(aliasing) {
  for (int i = 0; i < 2; i++) {
    mn_device_t dev = i ? SIM : CPU;
    mn_view_t *a = arange(dev, 12), *m = NULL, *t = NULL, *col = NULL, *e = NULL;
    MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){3, 4}, &m));
    MN_CHECK_OK(mn_view_t2d(m, &t));
    MN_CHECK_OK(mn_view_select(t, 0, 2, &col)); /* m[:, 2] */
    MN_CHECK_OK(mn_view_fill(col, mn_scalar_int(-1), NULL));
    MN_CHECK_OK(mn_device_synchronize(dev));
    int64_t got[12];
    values(a, got);
    MN_CHECK(got[2] == -1 && got[6] == -1 && got[10] == -1 && got[3] == 3);
    /* A read-only broadcast view of a row sees later writes to the row. */
    mn_view_t *row = NULL;
    MN_CHECK_OK(mn_view_select(m, 0, 1, &row));
    MN_CHECK_OK(mn_view_expand(row, 2, (int64_t[]){5, 4}, &e));
    MN_CHECK(STRIDES(e, 0, 1) && mn_view_shares_storage(e, a));
    MN_CHECK_OK(mn_view_fill(row, mn_scalar_int(42), NULL));
    MN_CHECK_OK(mn_device_synchronize(dev));
    int64_t ev[20];
    values(e, ev);
    MN_CHECK(ev[0] == 42 && ev[19] == 42);
    mn_view_t *vs[] = {a, m, t, col, e, row};
    for (int k = 0; k < 6; k++) mn_view_destroy(vs[k]);
  }
}

/* Copies and fills are queued on the given stream and run when it does. */
MN_TEST(work_is_ordered_on_the_given_stream) {
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(SIM, &s));
  mn_view_t *a = arange(SIM, 6), *m = NULL, *t = NULL, *c = NULL, *r = NULL;
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){2, 3}, &m));
  MN_CHECK_OK(mn_view_t2d(m, &t));
  MN_CHECK_OK(mn_view_contiguous(t, s, &c)); /* queued: nothing ran yet */
  MN_CHECK_OK(mn_view_fill(m, mn_scalar_int(9), s)); /* after the copy on s */
  MN_CHECK_OK(mn_view_reshape(t, 1, (int64_t[]){6}, s, &r)); /* a copy too: sees the 9s */
  size_t pending = 0;
  MN_CHECK_OK(mn_sim_stream_pending(s, &pending));
  MN_CHECK(pending >= 3);
  MN_CHECK_OK(mn_stream_synchronize(s));
  int64_t got[6];
  values(c, got);
  MN_CHECK(got[0] == 0 && got[1] == 3 && got[2] == 1 && got[5] == 5);
  values(r, got);
  MN_CHECK(got[0] == 9 && got[5] == 9);
  mn_view_t *vs[] = {a, m, t, c, r};
  for (int k = 0; k < 5; k++) mn_view_destroy(vs[k]);
  MN_CHECK_OK(mn_stream_destroy(s));
}

MN_TEST(overlap_refusals) {
  mn_view_t *a = arange(CPU, 12), *e = NULL, *m = NULL, *t = NULL, *x = NULL, *y = NULL;
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){3, 4}, &m));
  MN_CHECK_OK(mn_view_slice(m, 1, 0, 1, 1, &x)); /* 3x1 */
  MN_CHECK_OK(mn_view_expand(x, 2, (int64_t[]){3, 4}, &e));
  MN_CHECK_ERR(mn_view_fill(e, mn_scalar_int(1), NULL), MN_ERR_INVALID_ARGUMENT,
               "more than one element of the written-to tensor refers to a single memory location");
  MN_CHECK_ERR(mn_view_zero(e, NULL), MN_ERR_INVALID_ARGUMENT, "more than one element");
  MN_CHECK_ERR(mn_view_copy(e, m, NULL), MN_ERR_INVALID_ARGUMENT, "more than one element");
  /* Partial overlap: a[0:8] <- a[4:12] is refused as PyTorch does. */
  MN_CHECK_OK(mn_view_slice(a, 0, 0, 8, 1, &t));
  MN_CHECK_OK(mn_view_slice(a, 0, 4, 12, 1, &y));
  MN_CHECK_ERR(mn_view_copy(t, y, NULL), MN_ERR_INVALID_ARGUMENT,
               "some elements of the input tensor and the written-to tensor refer to a single memory location");
  /* Identical views: a no-op. Full overlap with other strides goes through a temporary. */
  MN_CHECK_OK(mn_view_copy(m, m, NULL));
  int64_t got[12];
  values(a, got);
  for (int i = 0; i < 12; i++) MN_CHECK(got[i] == i);
  mn_view_t *vs[] = {a, e, m, t, x, y};
  for (int k = 0; k < 6; k++) mn_view_destroy(vs[k]);
}

MN_TEST(copies_between_devices_cast_and_broadcast) {
  mn_view_t *src = arange(CPU, 4), *dst = NULL, *back = NULL;
  /* CPU int64 [4] -> SIM float32 [3, 4]: broadcast and cast in one copy_. */
  MN_CHECK_OK(mn_view_empty(SIM, MN_DTYPE_FLOAT32, 2, (int64_t[]){3, 4}, &dst));
  MN_CHECK_OK(mn_view_copy(dst, src, NULL));
  MN_CHECK_OK(mn_device_synchronize(SIM));
  MN_CHECK_OK(mn_view_to(dst, CPU, MN_DTYPE_FLOAT32, false, NULL, &back));
  const float *f = mn_view_data(back);
  MN_CHECK(f[0] == 0 && f[3] == 3 && f[4] == 0 && f[11] == 3);
  mn_view_destroy(back);
  /* SIM (transposed) -> CPU int16, non-contiguous source. */
  mn_view_t *t = NULL, *h = NULL;
  MN_CHECK_OK(mn_view_t2d(dst, &t));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT16, 2, (int64_t[]){4, 3}, &h));
  MN_CHECK_OK(mn_view_copy(h, t, NULL));
  MN_CHECK_OK(mn_device_synchronize(SIM));
  const int16_t *s = mn_view_data(h);
  MN_CHECK(s[0] == 0 && s[1] == 0 && s[3] == 1 && s[11] == 3);
  /* to(): same device and dtype gives the same storage; clone keeps strides. */
  mn_view_t *same = NULL, *cl = NULL;
  MN_CHECK_OK(mn_view_to(t, SIM, MN_DTYPE_FLOAT32, false, NULL, &same));
  MN_CHECK(mn_view_same_storage_and_layout(same, t));
  MN_CHECK_OK(mn_view_clone(t, NULL, &cl));
  MN_CHECK(!mn_view_shares_storage(cl, t) && STRIDES(cl, 1, 4));
  /* Shapes that do not broadcast are refused. */
  mn_view_t *bad = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT64, 1, (int64_t[]){5}, &bad));
  MN_CHECK_ERR(mn_view_copy(h, bad, NULL), MN_ERR_INVALID_ARGUMENT, "shapes differ");
  mn_view_t *vs[] = {src, dst, t, h, same, cl, bad};
  for (int k = 0; k < 7; k++) mn_view_destroy(vs[k]);
  MN_CHECK_OK(mn_device_synchronize(SIM));
}

MN_TEST(copies_between_two_sim_devices) {
  mn_device_t sim1 = mn_device_sim(1);
  mn_view_t *a = arange(SIM, 6), *m = NULL, *t = NULL, *d = NULL, *h = NULL, *b = NULL;
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){2, 3}, &m));
  MN_CHECK_OK(mn_view_t2d(m, &t));
  /* Transposed int64 on sim:0 -> float32 on sim:1 (moved, then cast there). */
  MN_CHECK_OK(mn_view_empty(sim1, MN_DTYPE_FLOAT32, 2, (int64_t[]){3, 2}, &d));
  MN_CHECK_OK(mn_view_copy(d, t, NULL));
  MN_CHECK_OK(mn_device_synchronize(sim1));
  MN_CHECK_OK(mn_view_to(d, CPU, MN_DTYPE_FLOAT32, false, NULL, &h));
  const float *f = mn_view_data(h);
  MN_CHECK(f[0] == 0 && f[1] == 3 && f[2] == 1 && f[5] == 5);
  /* A broadcast source between devices: row 1 of m to every row on sim:1. */
  mn_view_t *row = NULL, *d2 = NULL, *h2 = NULL;
  MN_CHECK_OK(mn_view_select(m, 0, 1, &row));
  MN_CHECK_OK(mn_view_empty(sim1, MN_DTYPE_INT64, 2, (int64_t[]){4, 3}, &d2));
  MN_CHECK_OK(mn_view_copy(d2, row, NULL));
  MN_CHECK_OK(mn_device_synchronize(sim1));
  MN_CHECK_OK(mn_view_to(d2, CPU, MN_DTYPE_INT64, false, NULL, &h2));
  const int64_t *g = mn_view_data(h2);
  MN_CHECK(g[0] == 3 && g[2] == 5 && g[9] == 3 && g[11] == 5);
  /* Same dtype, dense transposed layout: one byte range moves, strides kept. */
  mn_view_t *tc = NULL;
  MN_CHECK_OK(mn_view_to(t, CPU, MN_DTYPE_INT64, false, NULL, &tc));
  MN_CHECK(STRIDES(tc, 1, 3));
  int64_t tv[6];
  values(tc, tv);
  MN_CHECK(tv[0] == 0 && tv[1] == 3 && tv[2] == 1 && tv[5] == 5);
  mn_view_destroy(tc);
  MN_CHECK_OK(mn_view_to(t, sim1, MN_DTYPE_INT16, false, NULL, &b));
  MN_CHECK(mn_device_equal(mn_view_device(b), sim1) && STRIDES(b, 1, 3)); /* clone's layout */
  mn_view_t *vs[] = {a, m, t, d, h, b, row, d2, h2};
  for (int k = 0; k < 9; k++) mn_view_destroy(vs[k]);
}

MN_TEST(queries) {
  mn_view_t *a = NULL, *p = NULL, *v5 = NULL, *p5 = NULL, *t = NULL, *sl = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT32, 4, (int64_t[]){2, 3, 4, 5}, &a));
  MN_CHECK(!mn_view_is_contiguous_channels_last(a) && mn_view_is_non_overlapping_and_dense(a));
  /* NHWC memory seen as NCHW: channels_last contiguous, dense, not contiguous. */
  MN_CHECK_OK(mn_view_as_strided(a, 4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){60, 1, 15, 3}, 0, &p));
  MN_CHECK(mn_view_is_contiguous_channels_last(p) && !mn_view_is_contiguous(p) &&
           mn_view_is_non_overlapping_and_dense(p));
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_FLOAT32, 5, (int64_t[]){2, 3, 2, 4, 5}, &v5));
  MN_CHECK_OK(mn_view_as_strided(v5, 5, (int64_t[]){2, 3, 2, 4, 5}, (int64_t[]){120, 1, 60, 15, 3}, 0, &p5));
  MN_CHECK(mn_view_is_contiguous_channels_last_3d(p5) && !mn_view_is_contiguous_channels_last(p5));
  MN_CHECK_OK(mn_view_permute(a, 4, (int[]){3, 1, 2, 0}, &t));
  MN_CHECK(!mn_view_is_contiguous(t) && mn_view_is_non_overlapping_and_dense(t));
  MN_CHECK_OK(mn_view_slice(a, 3, 0, 5, 2, &sl));
  MN_CHECK(!mn_view_is_non_overlapping_and_dense(sl) && mn_view_shares_storage(sl, a) &&
           !mn_view_same_storage_and_layout(sl, a) && mn_view_nbytes(sl) == 2 * 3 * 4 * 3 * 4);
  /* clone of a non-dense view: dense strides in the same dim order. */
  mn_view_t *c = NULL, *tc = NULL, *ts = NULL;
  MN_CHECK_OK(mn_view_permute(sl, 4, (int[]){3, 1, 2, 0}, &ts));
  MN_CHECK_OK(mn_view_clone(ts, NULL, &tc));
  MN_CHECK(STRIDES(tc, 1, 12, 3, 36));
  MN_CHECK_OK(mn_view_clone(t, NULL, &c));
  MN_CHECK(STRIDES(c, 1, 20, 5, 60)); /* dense: strides kept */
  mn_view_t *vs[] = {a, p, v5, p5, t, sl, c, tc, ts};
  for (int k = 0; k < 9; k++) mn_view_destroy(vs[k]);
}

MN_TEST(split_chunk_dtype_views_and_dims) {
  mn_view_t *a = arange(CPU, 10), **parts = NULL;
  int n = 0;
  MN_CHECK_OK(mn_view_split(a, 4, 0, &parts, &n));
  MN_CHECK(n == 3 && mn_view_size(parts[2], 0) == 2 && mn_view_offset(parts[2]) == 8);
  mn_view_list_destroy(parts, n);
  MN_CHECK_OK(mn_view_chunk(a, 3, 0, &parts, &n));
  MN_CHECK(n == 3 && mn_view_size(parts[0], 0) == 4 && mn_view_size(parts[2], 0) == 2);
  mn_view_list_destroy(parts, n);
  parts = NULL;
  MN_CHECK_ERR(mn_view_chunk(a, 0, 0, &parts, &n), MN_ERR_INVALID_ARGUMENT, "greater than 0");
  MN_CHECK(parts == NULL);
  /* int64 -> int32 doubles the last dim; back needs an even offset. */
  mn_view_t *i32 = NULL, *odd = NULL, *bad = NULL, *re = NULL, *im = NULL;
  MN_CHECK_OK(mn_view_view_dtype(a, MN_DTYPE_INT32, &i32));
  MN_CHECK(SIZES(i32, 20) && mn_view_dtype(i32) == MN_DTYPE_INT32);
  MN_CHECK_OK(mn_view_slice(i32, 0, 1, 5, 1, &odd));
  MN_CHECK_ERR(mn_view_view_dtype(odd, MN_DTYPE_INT64, &bad), MN_ERR_INVALID_ARGUMENT,
               "self.storage_offset() must be divisible by 2");
  MN_CHECK_ERR(mn_view_imag(a, &im), MN_ERR_INVALID_ARGUMENT, "imag is not implemented");
  MN_CHECK_OK(mn_view_real(a, &re));
  MN_CHECK(mn_view_same_storage_and_layout(re, a));
  /* 25 dims at most. */
  mn_view_t *cur = NULL, *next = NULL;
  MN_CHECK_OK(mn_view_select(a, 0, 3, &cur)); /* 0-d */
  for (int d = 0; d < MN_MAX_DIMS; d++) {
    MN_CHECK_OK(mn_view_unsqueeze(cur, 0, &next));
    mn_view_destroy(cur);
    cur = next;
  }
  MN_CHECK(mn_view_ndim(cur) == MN_MAX_DIMS && mn_view_numel(cur) == 1);
  next = NULL;
  MN_CHECK_ERR(mn_view_unsqueeze(cur, 0, &next), MN_ERR_INVALID_ARGUMENT, "at most 25");
  MN_CHECK(next == NULL);
  MN_CHECK_OK(mn_view_squeeze(cur, &next));
  MN_CHECK(mn_view_ndim(next) == 0 && *(int64_t *)mn_view_data(next) == 3);
  mn_view_t *vs[] = {a, i32, odd, re, cur, next};
  for (int k = 0; k < 6; k++) mn_view_destroy(vs[k]);
}

MN_TEST(errors_leave_nothing) {
  mn_view_t *a = arange(CPU, 12), *m = NULL, *out = NULL;
  mn_storage_t *s = mn_view_storage(a);
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){3, 4}, &m));
  long refs = mn_storage_refcount(s);
  MN_CHECK_ERR(mn_view_view(m, 2, (int64_t[]){5, -1}, &out), MN_ERR_INVALID_ARGUMENT,
               "is invalid for input of size 12");
  MN_CHECK_ERR(mn_view_view(m, 2, (int64_t[]){-1, -1}, &out), MN_ERR_INVALID_ARGUMENT, "only one dimension");
  MN_CHECK_ERR(mn_view_transpose(m, 0, 2, &out), MN_ERR_INVALID_ARGUMENT, "Dimension out of range");
  MN_CHECK_ERR(mn_view_permute(m, 2, (int[]){0, 0}, &out), MN_ERR_INVALID_ARGUMENT, "repeated dim");
  MN_CHECK_ERR(mn_view_slice(m, 0, 0, 2, 0, &out), MN_ERR_INVALID_ARGUMENT, "slice step must be positive");
  MN_CHECK_ERR(mn_view_narrow(m, 1, 3, 2, &out), MN_ERR_INVALID_ARGUMENT, "exceeds dimension size");
  MN_CHECK_ERR(mn_view_select(m, 0, 3, &out), MN_ERR_INVALID_ARGUMENT, "out of range");
  MN_CHECK_ERR(mn_view_expand(m, 2, (int64_t[]){3, 5}, &out), MN_ERR_INVALID_ARGUMENT, "must match the existing size");
  MN_CHECK_ERR(mn_view_diagonal(m, 0, 1, 1, &out), MN_ERR_INVALID_ARGUMENT, "cannot be identical");
  MN_CHECK_ERR(mn_view_unfold(m, 1, 5, 1, &out), MN_ERR_INVALID_ARGUMENT, "maximum size");
  MN_CHECK_ERR(mn_view_as_strided(m, 2, (int64_t[]){3, 4}, (int64_t[]){4, 1}, 1, &out), MN_ERR_INVALID_ARGUMENT,
               "reaches byte");
  mn_view_t *m3 = NULL;
  MN_CHECK_OK(mn_view_unsqueeze(m, 0, &m3));
  MN_CHECK_ERR(mn_view_t2d(m3, &out), MN_ERR_INVALID_ARGUMENT, "t() expects a tensor with <= 2 dimensions");
  mn_view_destroy(m3);
  mn_view_t *i8 = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_INT8, 1, (int64_t[]){3}, &i8));
  MN_CHECK_ERR(mn_view_fill(i8, mn_scalar_int(200), NULL), MN_ERR_INVALID_ARGUMENT,
               "value cannot be converted to type int8 without overflow");
  MN_CHECK(out == NULL && mn_storage_refcount(s) == refs);
  mn_view_destroy(i8);
  mn_view_destroy(m);
  mn_view_destroy(a);
}

/* Size, stride and offset arithmetic that used to
 * wrap. Each case is the essence of a reproducer. */
MN_TEST(overflow_regressions) {
  const int64_t BIG = INT64_MAX, P61 = (int64_t)1 << 61;
  mn_view_t *c = NULL, *out = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_COMPLEX128, 1, (int64_t[]){1}, &c)); /* 16 bytes */
  mn_storage_t *s = mn_view_storage(c);
  /* (2^61 + 1 - 1) * INT64_MAX + 2^61 used to wrap in 128 bits times 16 bytes:
   * element (1, 0) lay 16 bytes before the data. */
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_COMPLEX128, 2, (int64_t[]){P61 + 1, 2}, (int64_t[]){BIG, P61}, 0, &out),
               MN_ERR_OVERFLOW, "overflowed");
  MN_CHECK_ERR(mn_view_as_strided(c, 2, (int64_t[]){P61 + 1, 2}, (int64_t[]){BIG, P61}, 0, &out), MN_ERR_OVERFLOW,
               "overflowed");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_FLOAT64, 1, (int64_t[]){2}, (int64_t[]){BIG}, 0, &out),
               MN_ERR_OVERFLOW, "overflowed");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_COMPLEX128, 0, NULL, NULL, BIG / 8, &out), MN_ERR_OVERFLOW, "overflowed");
  MN_CHECK_ERR(mn_view_create(s, MN_DTYPE_UINT8, 1, (int64_t[]){17}, NULL, 0, &out), MN_ERR_INVALID_ARGUMENT,
               "reaches byte 17");
  /* Size-1 dims never move: any stride is legal there (as in PyTorch). */
  MN_CHECK_OK(mn_view_as_strided(c, 2, (int64_t[]){1, 1}, (int64_t[]){BIG, BIG}, 0, &out));
  mn_view_destroy(out);
  out = NULL;
  /* The same geometry in a 144-byte save file: save a [1, 1] complex128 view,
   * patch its sizes and strides, recompute the header checksum. */
  mn_view_t *v2 = NULL;
  MN_CHECK_OK(mn_view_view(c, 2, (int64_t[]){1, 1}, &v2));
  void *buf = NULL;
  size_t len = 0;
  MN_CHECK_OK(mn_save_buffer(1, (const char *const[]){"x"}, (const mn_view_t *const[]){v2}, &buf, &len));
  MN_CHECK(len == 144);
  if (len == 144) {
    uint8_t *b = buf;
    mn_test_wr_le(b + 85, (uint64_t)P61 + 1, 8);
    mn_test_wr_le(b + 93, 2, 8);
    mn_test_wr_le(b + 101, (uint64_t)BIG, 8);
    mn_test_wr_le(b + 109, (uint64_t)P61, 8);
    mn_test_wr_le(b + 117, mn_test_crc32(b, 117), 4);
    mn_named_views_t *nv = NULL;
    MN_CHECK_ERR(mn_load_buffer(buf, len, CPU, &nv), MN_ERR_FORMAT, "overflowed");
    MN_CHECK(nv == NULL);
  }
  free(buf);
  mn_view_destroy(v2);
  /* slice with step INT64_MAX: one element (PyTorch), the stride kept. */
  mn_view_t *a = arange(CPU, 100), *m = NULL;
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){10, 10}, &m));
  MN_CHECK_OK(mn_view_slice(a, 0, 0, BIG, BIG, &out));
  MN_CHECK(SIZES(out, 1) && STRIDES(out, BIG));
  mn_view_destroy(out);
  MN_CHECK_OK(mn_view_slice(m, 0, 3, BIG, BIG, &out));
  MN_CHECK(SIZES(out, 1, 10) && STRIDES(out, 10, 1) && mn_view_offset(out) == 30);
  mn_view_destroy(out);
  MN_CHECK_OK(mn_view_slice(m, 1, INT64_MIN, BIG, BIG / 2, &out));
  MN_CHECK(SIZES(out, 10, 1) && mn_view_offset(out) == 0);
  mn_view_destroy(out);
  MN_CHECK_OK(mn_view_unfold(m, 0, 2, BIG, &out));
  MN_CHECK(SIZES(out, 1, 10, 2) && STRIDES(out, 10, 1, 10));
  mn_view_destroy(out);
  /* chunk and split with huge counts and sizes. */
  mn_view_t **parts = NULL;
  int n = 0;
  MN_CHECK_OK(mn_view_chunk(a, BIG, 0, &parts, &n));
  MN_CHECK(n == 100 && SIZES(parts[99], 1) && mn_view_offset(parts[99]) == 99);
  mn_view_list_destroy(parts, n);
  MN_CHECK_OK(mn_view_split(a, BIG, 0, &parts, &n));
  MN_CHECK(n == 1 && SIZES(parts[0], 100));
  mn_view_list_destroy(parts, n);
  /* diagonal with extreme offsets is empty; expand to INT64_MAX elements. */
  MN_CHECK_OK(mn_view_diagonal(m, BIG, 0, 1, &out));
  MN_CHECK(SIZES(out, 0));
  mn_view_destroy(out);
  MN_CHECK_OK(mn_view_diagonal(m, INT64_MIN, 0, 1, &out));
  MN_CHECK(SIZES(out, 0));
  mn_view_destroy(out);
  mn_view_t *one = NULL, *e = NULL;
  MN_CHECK_OK(mn_view_select(a, 0, -1, &one));
  MN_CHECK_OK(mn_view_expand(one, 1, (int64_t[]){BIG}, &e));
  MN_CHECK(SIZES(e, BIG) && STRIDES(e, 0) && mn_view_nbytes(e) == SIZE_MAX);
  MN_CHECK_ERR(mn_view_expand(one, 2, (int64_t[]){BIG, 2}, &out), MN_ERR_OVERFLOW, "numel overflows");
  mn_view_t *big = NULL;
  MN_CHECK(mn_view_contiguous(e, NULL, &big) != MN_OK && big == NULL); /* too large to allocate, nothing left */
  /* A stride that cannot be multiplied any further: unsqueeze in front of it. */
  mn_view_t *w = NULL;
  MN_CHECK_ERR(mn_view_as_strided(a, 2, (int64_t[]){1, 2}, (int64_t[]){1, BIG / 2}, 0, &w), MN_ERR_OVERFLOW,
               "overflowed"); /* 2 int64s BIG/2 apart: more bytes than a size_t holds */
  MN_CHECK_OK(mn_view_as_strided(a, 1, (int64_t[]){1}, (int64_t[]){BIG}, 0, &w));
  MN_CHECK_OK(mn_view_unsqueeze(w, 0, &out)); /* size 1 * stride INT64_MAX fits */
  MN_CHECK(STRIDES(out, BIG, BIG));
  mn_view_destroy(out);
  mn_view_destroy(w);
  mn_view_destroy(e);
  mn_view_destroy(one);
  mn_view_destroy(m);
  mn_view_destroy(a);
  out = NULL;
  /* DLPack: a huge shape with row-major (NULL) strides; one that spans more than the address space. */
  static int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40};
  DLManagedTensor t = {.dl_tensor = {.data = mn_view_data(c), .device = {kDLCPU, 0}, .ndim = 3,
                                     .dtype = {kDLFloat, 64, 1}, .shape = huge}};
  MN_CHECK_ERR(mn_view_from_dlpack(&t, &out), MN_ERR_OVERFLOW, "overflow");
  static int64_t two[1] = {2}, far[1] = {(int64_t)1 << 62};
  t.dl_tensor.ndim = 1;
  t.dl_tensor.shape = two;
  t.dl_tensor.strides = far;
  MN_CHECK_ERR(mn_view_from_dlpack(&t, &out), MN_ERR_OVERFLOW, "address space");
  t.dl_tensor.strides = NULL;
  t.dl_tensor.byte_offset = UINT64_MAX - 8;
  MN_CHECK_ERR(mn_view_from_dlpack(&t, &out), MN_ERR_OVERFLOW, "address space");
  MN_CHECK(out == NULL && mn_storage_refcount(s) == 1);
  mn_view_destroy(c);
}

static int legacy_deleted;
static void count_legacy(DLManagedTensor *t) { (void)t, legacy_deleted++; }

MN_TEST(dlpack_roundtrip) {
  mn_view_t *a = arange(CPU, 12), *m = NULL, *t = NULL, *back = NULL;
  MN_CHECK_OK(mn_view_view(a, 2, (int64_t[]){3, 4}, &m));
  MN_CHECK_OK(mn_view_t2d(m, &t));
  mn_storage_t *s = mn_view_storage(a);
  DLManagedTensorVersioned *v = NULL;
  MN_CHECK_OK(mn_view_to_dlpack_versioned(t, &v));
  MN_CHECK(v->version.major == 1 && v->dl_tensor.ndim == 2 && v->dl_tensor.strides[0] == 1 &&
           v->dl_tensor.strides[1] == 4 && v->dl_tensor.dtype.code == kDLInt && v->dl_tensor.dtype.bits == 64 &&
           v->dl_tensor.device.device_type == kDLCPU && v->dl_tensor.data == mn_view_data(t));
  long refs = mn_storage_refcount(s);
  MN_CHECK_OK(mn_view_from_dlpack_versioned(v, &back)); /* import takes ownership */
  MN_CHECK(mn_view_data(back) == mn_view_data(t) && STRIDES(back, 1, 4) && !mn_view_shares_storage(back, t));
  MN_CHECK(mn_storage_refcount(s) == refs);
  mn_view_destroy(back); /* runs our own export deleter: the reference goes */
  MN_CHECK(mn_storage_refcount(s) == refs - 1);
  /* Legacy: a producer's deleter runs once, when the last view dies. */
  DLManagedTensor *l = NULL;
  MN_CHECK_OK(mn_view_to_dlpack(m, &l));
  void (*their)(DLManagedTensor *) = l->deleter;
  static int64_t shape[2] = {2, 6};
  DLManagedTensor mine = {.dl_tensor = l->dl_tensor, .deleter = count_legacy};
  mine.dl_tensor.shape = shape;
  mine.dl_tensor.strides = NULL; /* row-major */
  mn_view_t *x = NULL, *y = NULL;
  MN_CHECK_OK(mn_view_from_dlpack(&mine, &x));
  MN_CHECK(SIZES(x, 2, 6) && STRIDES(x, 6, 1));
  MN_CHECK_OK(mn_view_select(x, 0, 1, &y));
  mn_view_destroy(x);
  MN_CHECK(legacy_deleted == 0);
  MN_CHECK(((int64_t *)mn_view_data(y))[0] == 6);
  mn_view_destroy(y);
  MN_CHECK(legacy_deleted == 1);
  /* Refusals keep the tensor the caller's. */
  mine.dl_tensor.dtype.lanes = 4;
  MN_CHECK_ERR(mn_view_from_dlpack(&mine, &x), MN_ERR_NOT_SUPPORTED, "lanes");
  mine.dl_tensor.dtype.lanes = 1;
  mine.dl_tensor.device.device_type = kDLVulkan;
  MN_CHECK_ERR(mn_view_from_dlpack(&mine, &x), MN_ERR_NOT_SUPPORTED, "device type");
  DLManagedTensorVersioned vv = {.version = {2, 0}, .dl_tensor = l->dl_tensor};
  MN_CHECK_ERR(mn_view_from_dlpack_versioned(&vv, &x), MN_ERR_NOT_SUPPORTED, "major version 2");
  vv.version.major = 1;
  vv.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  MN_CHECK_ERR(mn_view_from_dlpack_versioned(&vv, &x), MN_ERR_NOT_SUPPORTED, "read-only");
  MN_CHECK(legacy_deleted == 1); /* refusals called no deleter */
  their(l);
  /* bool travels as kDLBool (code 6) and comes back as bool. */
  mn_view_t *bv = NULL, *bb = NULL;
  MN_CHECK_OK(mn_view_empty(CPU, MN_DTYPE_BOOL, 1, (int64_t[]){3}, &bv));
  DLManagedTensor *bl = NULL;
  MN_CHECK_OK(mn_view_to_dlpack(bv, &bl));
  MN_CHECK(bl->dl_tensor.dtype.code == MN_DLPACK_CODE_BOOL && bl->dl_tensor.dtype.bits == 8);
  MN_CHECK_OK(mn_view_from_dlpack(bl, &bb));
  MN_CHECK(mn_view_dtype(bb) == MN_DTYPE_BOOL);
  mn_view_destroy(bb);
  mn_view_destroy(bv);
  /* SIM views export as kDLExtDev and come back as SIM views. */
  mn_view_t *sv = arange(SIM, 3), *sb = NULL;
  DLManagedTensor *sl = NULL;
  MN_CHECK_OK(mn_view_to_dlpack(sv, &sl));
  MN_CHECK(sl->dl_tensor.device.device_type == kDLExtDev && sl->dl_tensor.device.device_id == 0);
  MN_CHECK_OK(mn_view_from_dlpack(sl, &sb));
  MN_CHECK(mn_device_equal(mn_view_device(sb), SIM) && mn_view_data(sb) == mn_view_data(sv));
  mn_view_destroy(sb);
  mn_view_destroy(sv);
  mn_view_destroy(t);
  mn_view_destroy(m);
  MN_CHECK(mn_storage_refcount(s) == 1);
  mn_view_destroy(a);
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
  for (int i = 0; i < 2; i++) {
    mn_sim_stats_t st;
    MN_CHECK_OK(mn_sim_get_stats(mn_device_sim(i), &st));
    MN_CHECK(st.mapped_bytes == 0 && st.illegal_accesses == 0);
  }
}

int main(void) {
  CPU = mn_device_cpu();
  SIM = mn_device_sim(0);
  mn_test_configure_sim(2, (size_t)1 << 30);
  MN_RUN(classic_examples);
  MN_RUN(every_op_cpu_equals_sim);
  MN_RUN(chain_results);
  MN_RUN(aliasing);
  MN_RUN(work_is_ordered_on_the_given_stream);
  MN_RUN(overlap_refusals);
  MN_RUN(copies_between_devices_cast_and_broadcast);
  MN_RUN(copies_between_two_sim_devices);
  MN_RUN(queries);
  MN_RUN(split_chunk_dtype_views_and_dims);
  MN_RUN(errors_leave_nothing);
  MN_RUN(dlpack_roundtrip);
  MN_RUN(overflow_regressions);
  MN_RUN(nothing_left_on_sim);
  return mn_test_finish();
}
