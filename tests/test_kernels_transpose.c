/* tests/test_kernels_transpose.c: the CPU 2-d transpose (kernels/cpu_transpose.h)
 * against a naive loop: every instruction set this CPU runs (portable, SSE2,
 * AVX2), every item size (1, 2, 4, 8, 16 and odd ones), odd shapes, 1 x N,
 * N x 1, tiles with ragged edges, padded and odd row pitches, misaligned
 * addresses, streamed and not, rows split between calls; then transposed and
 * permuted sub-views with offsets through mn_kernel_copy_view (the CPU
 * executor, its pool and its streaming path). No timing. Single-threaded
 * test code (the library's pool runs inside the copies). */
#include <stdint.h>

#include "kernels/cpu_transpose.h"
#include "mn_test.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

static int reported;

/* One transpose of rows x cols items of `item` bytes, dst and src at `dshift`
 * and `sshift` bytes past 64-byte aligned blocks, row pitches of the packed
 * size plus dpad / spad bytes, done as calls on the rows split at `splits`;
 * the whole dst block (pitch padding and the bytes around it included)
 * against the naive result over the same poison. */
static void check_2d(mn__tr_isa isa, size_t item, int64_t rows, int64_t cols, bool stream, int dshift, int sshift,
                     int64_t dpad, int64_t spad, int nsplit, const int64_t *splits) {
  const int64_t E = (int64_t)item, dld = rows * E + dpad, sld = cols * E + spad;
  const size_t dbytes = (size_t)(cols * dld) + 128, sbytes = (size_t)(rows * sld) + 128;
  unsigned char *dblk = aligned_alloc(64, (dbytes + dshift + 63) / 64 * 64 + 64);
  unsigned char *sblk = aligned_alloc(64, (sbytes + sshift + 63) / 64 * 64 + 64);
  unsigned char *want = malloc(dbytes);
  if (!dblk || !sblk || !want) {
    MN_CHECK(false);
    free(dblk), free(sblk), free(want);
    return;
  }
  unsigned char *d = dblk + dshift, *s = sblk + sshift;
  for (size_t k = 0; k < sbytes; k++) s[k] = (unsigned char)rng();
  memset(d, 0xA5, dbytes);
  memset(want, 0xA5, dbytes);
  /* element (i, j) of src lives 64 bytes in (guard bytes before the rows) */
  unsigned char *sm = s + 64, *dm = d + 64, *wm = want + 64;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) memcpy(wm + j * dld + i * E, sm + i * sld + j * E, item);
  mn__tr2d_t t = {(char *)dm, (const char *)sm, dld, sld, rows, cols, item, isa, stream};
  int64_t r0 = 0;
  for (int k = 0; k <= nsplit; k++) {
    int64_t r1 = k < nsplit ? splits[k] : rows;
    mn__cpu_transpose_2d(&t, r0, r1);
    r0 = r1;
  }
  bool same = memcmp(d, want, dbytes) == 0;
  MN_CHECK(same);
  if (!same && reported++ < 10)
    fprintf(stderr, "  isa %d item %zu %lld x %lld stream %d shifts %d/%d pads %lld/%lld splits %d: differs\n", (int)isa,
            item, (long long)rows, (long long)cols, (int)stream, dshift, sshift, (long long)dpad, (long long)spad, nsplit);
  free(dblk), free(sblk), free(want);
}

MN_TEST(tr2d_every_isa_item_and_shape) {
  static const int64_t shapes[][2] = {{1, 1},   {1, 200},   {200, 1},  {2, 3},    {3, 70},   {70, 3},
                                      {7, 9},   {15, 17},   {16, 16},  {17, 33},  {31, 31},  {32, 16},
                                      {33, 65}, {64, 64},   {65, 129}, {100, 37}, {128, 64}, {129, 67},
                                      {250, 7}, {257, 300}, {300, 45}, {513, 40}, {40, 513}};
  static const size_t items[] = {1, 2, 4, 8, 16, 3, 12};
  const mn__tr_isa best = mn__tr_best_isa();
  printf("  best isa: %d\n", (int)best);
  for (int isa = MN__TR_PORTABLE; isa <= (int)best; isa++)
    for (size_t it = 0; it < sizeof items / sizeof items[0]; it++)
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int stream = 0; stream < 2; stream++) {
          const size_t item = items[it];
          const int64_t rows = shapes[sh][0], cols = shapes[sh][1];
          /* aligned packed; misaligned dst with a padded pitch; odd pitches
           * (not multiples of the item) and odd addresses */
          check_2d(isa, item, rows, cols, stream, 0, 0, 0, 0, 0, NULL);
          check_2d(isa, item, rows, cols, stream, (int)item, 8, 5 * (int64_t)item, (int64_t)item, 0, NULL);
          check_2d(isa, item, rows, cols, stream, 1, 3, 3, 7, 0, NULL);
          check_2d(isa, item, rows, cols, stream, 0, 40, 64 - (rows * (int64_t)item) % 64, 0, 0, NULL);
          /* rows split between calls: at the panel size and anywhere */
          const int64_t p = mn__tr_panel_rows(item, stream);
          if (rows > p) {
            const int64_t at[2] = {p, rows > 2 * p ? 2 * p : rows};
            check_2d(isa, item, rows, cols, stream, 0, 0, 0, 0, 2, at);
          }
          if (rows > 3) {
            int64_t a = 1 + (int64_t)(rng() % (uint64_t)(rows - 2)), b = a + (int64_t)(rng() % (uint64_t)(rows - a));
            const int64_t at[2] = {a, b};
            check_2d(isa, item, rows, cols, stream, 1 + (int)(rng() % 63), (int)(rng() % 64), (int64_t)(rng() % 100),
                     (int64_t)(rng() % 100), 2, at);
          }
        }
}

/* Row pitches that are multiples of 4 KiB (src, dst or both): in cache, the
 * tiles go through the L1 buffer with ordinary stores (every row of a tile
 * would share one L1 set); aligned and misaligned, rows split between calls,
 * every instruction set and item size, streamed and not. */
MN_TEST(tr2d_4k_row_pitches) {
  static const size_t items[] = {1, 2, 4, 8, 16};
  const mn__tr_isa best = mn__tr_best_isa();
  for (int isa = MN__TR_PORTABLE; isa <= (int)best; isa++)
    for (size_t it = 0; it < sizeof items / sizeof items[0]; it++)
      for (int stream = 0; stream < 2; stream++) {
        const size_t item = items[it];
        const int64_t n4k = 4096 / (int64_t)item; /* items in 4 KiB */
        /* src pitch 4 KiB (packed), dst pitch 4 KiB (packed), both, both at 8 KiB */
        check_2d(isa, item, 77, n4k, stream, 0, 0, 0, 0, 0, NULL);
        check_2d(isa, item, n4k, 45, stream, 0, 0, 0, 0, 0, NULL);
        check_2d(isa, item, n4k, n4k / 2, stream, 0, 0, 0, 4096 - (n4k / 2) * (int64_t)item, 0, NULL);
        check_2d(isa, item, 130, 19, stream, 0, 0, 8192 - 130 * (int64_t)item, 8192 - 19 * (int64_t)item, 0, NULL);
        /* misaligned bases, rows split anywhere */
        const int64_t at[2] = {3, 70};
        check_2d(isa, item, 77, n4k, stream, 5, 3, 0, 0, 2, at);
        check_2d(isa, item, n4k, 45, stream, 1, 9, 0, 0, 2, at);
      }
}

/* ---- through the kernels: views of CPU storages ---- */

static void fill_random(unsigned char *p, size_t n) {
  for (size_t k = 0; k < n; k += 8) {
    uint64_t v = rng();
    memcpy(p + k, &v, n - k < 8 ? n - k : 8);
  }
}

/* Naive strided copy over ndim <= 4 dims (element strides). */
static void ref_copy(unsigned char *d, const int64_t *dstr, const unsigned char *s, const int64_t *sstr, int ndim,
                     const int64_t *sizes, size_t item) {
  int64_t idx[4] = {0, 0, 0, 0}, total = 1;
  for (int k = 0; k < ndim; k++) total *= sizes[k];
  for (int64_t n = 0; n < total; n++) {
    int64_t od = 0, os = 0, rest = n;
    for (int k = ndim - 1; k >= 0; k--) {
      idx[k] = rest % sizes[k];
      rest /= sizes[k];
      od += idx[k] * dstr[k];
      os += idx[k] * sstr[k];
    }
    memcpy(d + od * (int64_t)item, s + os * (int64_t)item, item);
  }
}

/* dst and src storages of dn / sn elements; views of `sizes` with the given
 * strides and offsets; the copy against ref_copy over the whole dst storage. */
static void check_views(mn_dtype dt, int ndim, const int64_t *sizes, const int64_t *dstr, int64_t doff, int64_t dn,
                        const int64_t *sstr, int64_t soff, int64_t sn, const char *what) {
  const size_t item = mn_dtype_itemsize(dt);
  mn_stream_t *stream = NULL;
  mn_storage_t *ds = NULL, *ss = NULL;
  mn_view_t *dv = NULL, *sv = NULL;
  unsigned char *want = malloc((size_t)dn * item);
  MN_CHECK_OK(mn_stream_create(mn_device_cpu(), &stream));
  if (stream) MN_CHECK_OK(mn_storage_create(mn_device_cpu(), (size_t)dn * item, NULL, stream, &ds));
  if (stream) MN_CHECK_OK(mn_storage_create(mn_device_cpu(), (size_t)sn * item, NULL, stream, &ss));
  if (ds) MN_CHECK_OK(mn_view_create(ds, dt, ndim, sizes, dstr, doff, &dv));
  if (ss) MN_CHECK_OK(mn_view_create(ss, dt, ndim, sizes, sstr, soff, &sv));
  if (dv && sv && want) {
    unsigned char *d = mn_storage_data(ds), *s = mn_storage_data(ss);
    fill_random(s, (size_t)sn * item);
    memset(d, 0x5A, (size_t)dn * item);
    memset(want, 0x5A, (size_t)dn * item);
    ref_copy(want + doff * (int64_t)item, dstr, s + soff * (int64_t)item, sstr, ndim, sizes, item);
    MN_CHECK_OK(mn_kernel_copy_view(stream, dv, sv));
    MN_CHECK_OK(mn_stream_synchronize(stream));
    bool same = memcmp(d, want, (size_t)dn * item) == 0;
    MN_CHECK(same);
    if (!same && reported++ < 10) fprintf(stderr, "  %s %s: differs\n", what, mn_dtype_name(dt));
  } else {
    MN_CHECK(false);
  }
  mn_view_destroy(dv);
  mn_view_destroy(sv);
  mn_storage_release(ds);
  mn_storage_release(ss);
  if (stream) MN_CHECK_OK(mn_stream_destroy(stream));
  free(want);
}

static const mn_dtype view_dtypes[] = {MN_DTYPE_UINT8, MN_DTYPE_BFLOAT16, MN_DTYPE_FLOAT32, MN_DTYPE_INT64,
                                       MN_DTYPE_COMPLEX128};

/* A transposed sub-block of a padded matrix into a sub-block of another:
 * src storage R x (C + 5) row-major, the block at (1, 2), read transposed
 * (logical C x R); dst rows of pitch R + 7 at offset 3. Sizes from small (one
 * thread) to over 4 MiB of dst (streaming stores, the pool). */
MN_TEST(transposed_subviews_with_offsets) {
  static const int64_t shapes[][2] = {{1, 300}, {300, 1}, {37, 53}, {129, 255}, {1100, 1030}, {2049, 1023}};
  for (size_t k = 0; k < sizeof view_dtypes / sizeof view_dtypes[0]; k++)
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
      const int64_t R = shapes[sh][0], C = shapes[sh][1];
      if (R * C * (int64_t)mn_dtype_itemsize(view_dtypes[k]) > ((int64_t)24 << 20)) continue;
      const int64_t sizes[2] = {C, R};
      const int64_t sstr[2] = {1, C + 5}, soff = 1 * (C + 5) + 2, sn = (R + 2) * (C + 5);
      const int64_t dstr[2] = {R + 7, 1}, doff = 3, dn = doff + C * (R + 7);
      check_views(view_dtypes[k], 2, sizes, dstr, doff, dn, sstr, soff, sn, "transposed sub-view");
      /* and into a packed dst */
      const int64_t pstr[2] = {R, 1};
      check_views(view_dtypes[k], 2, sizes, pstr, 0, R * C, sstr, soff, sn, "transposed sub-view, packed dst");
    }
}

/* Every permutation of a 4-d array into a contiguous dst, small (odd sizes)
 * and large (NCHW <-> NHWC at over 4 MiB, odd sizes, a sliced src). */
MN_TEST(permutes_4d) {
  static const int perms[24][4] = {{0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1},
                                   {1, 0, 2, 3}, {1, 0, 3, 2}, {1, 2, 0, 3}, {1, 2, 3, 0}, {1, 3, 0, 2}, {1, 3, 2, 0},
                                   {2, 0, 1, 3}, {2, 0, 3, 1}, {2, 1, 0, 3}, {2, 1, 3, 0}, {2, 3, 0, 1}, {2, 3, 1, 0},
                                   {3, 0, 1, 2}, {3, 0, 2, 1}, {3, 1, 0, 2}, {3, 1, 2, 0}, {3, 2, 0, 1}, {3, 2, 1, 0}};
  static const int64_t shape[4] = {3, 17, 33, 65};
  for (size_t k = 0; k < sizeof view_dtypes / sizeof view_dtypes[0]; k++)
    for (int p = 0; p < 24; p++) {
      /* src: `shape` row-major; dst: the permuted shape, contiguous */
      int64_t sst[4], acc = 1, sizes[4], sstr[4], dstr[4];
      for (int d = 3; d >= 0; d--) sst[d] = acc, acc *= shape[d];
      for (int d = 0; d < 4; d++) sizes[d] = shape[perms[p][d]], sstr[d] = sst[perms[p][d]];
      acc = 1;
      for (int d = 3; d >= 0; d--) dstr[d] = acc, acc *= sizes[d];
      check_views(view_dtypes[k], 4, sizes, dstr, 0, acc, sstr, 0, acc, "permute");
    }
  /* NCHW -> NHWC and back, 3 x 131 x 61 x 67, from a channel slice 1..132 of 133 */
  for (size_t k = 0; k < 3; k++) {
    const mn_dtype dt = view_dtypes[k];
    const int64_t N = 3, C = 131, H = 61, W = 67, CS = 133;
    const int64_t nhwc_sizes[4] = {N, H, W, C}, nchw_sizes[4] = {N, C, H, W};
    const int64_t src_nchw[4] = {CS * H * W, W, 1, H * W}; /* viewed as N, H, W, C */
    const int64_t dst_nhwc[4] = {H * W * C, W * C, C, 1};
    check_views(dt, 4, nhwc_sizes, dst_nhwc, 0, N * H * W * C, src_nchw, H * W, N * CS * H * W, "nchw -> nhwc");
    const int64_t src_nhwc[4] = {H * W * CS, 1, W * CS, CS}; /* viewed as N, C, H, W */
    const int64_t dst_nchw[4] = {C * H * W, H * W, W, 1};
    check_views(dt, 4, nchw_sizes, dst_nchw, 0, N * C * H * W, src_nhwc, 1, N * H * W * CS, "nhwc -> nchw");
  }
}

int main(void) {
  MN_RUN(tr2d_every_isa_item_and_shape);
  MN_RUN(tr2d_4k_row_pitches);
  MN_RUN(transposed_subviews_with_offsets);
  MN_RUN(permutes_4d);
  return mn_test_finish();
}
