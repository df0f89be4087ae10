/* kernels/cpu_transpose.c: the CPU 2-d transpose (kernels/cpu_transpose.h).
 * A tile of a few hundred bytes per side is moved in fixed-size blocks
 * transposed in registers: unpack networks for 1-, 2-, 4- and 8-byte items
 * (SSE2 on every x86-64; AVX2 chosen at run time, its functions built with
 * target attributes so that the build needs no -m flags), 16-byte moves for
 * 16-byte items, fixed-size C moves on other machines. A block that would
 * cross a tile's ragged edge is moved back to end at the edge (it rewrites a
 * few elements of its neighbour with the same values) instead of falling back
 * to element loops. Streaming (large operands): each tile is transposed into
 * a buffer in L1, then leaves it as whole aligned 64-byte dst lines written
 * with non-temporal stores, so the dst lines are never read (no read for
 * ownership) and power-of-two row strides do not thrash cache sets. Panels
 * of src rows are walked along the full row, so src is read as a few
 * sequential streams. Operands in cache whose row stride is a multiple of
 * 4 KiB (every row of a tile in one L1 set) take the same path with ordinary
 * stores. Pure functions: thread-safe. */
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu_transpose.h"

#if defined(__SSE2__) && (defined(__x86_64__) || defined(__i386__))
#include <emmintrin.h>
#define MN__TR_X86 1
#if defined(__GNUC__) || defined(__clang__)
#include <immintrin.h>
#define MN__TR_HAVE_AVX2 1
#define MN__AVX2 __attribute__((target("avx2")))
#endif
#endif

mn__tr_isa mn__tr_best_isa(void) {
#if defined(MN__TR_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2")) return MN__TR_AVX2;
#endif
#if defined(MN__TR_X86)
  return MN__TR_SSE2;
#else
  return MN__TR_PORTABLE;
#endif
}

/* A tile: d[j * dld + i * E] = s[i * sld + j * E] for i < rows, j < cols. */
typedef void (*tile_fn)(char *d, int64_t dld, const char *s, int64_t sld, int64_t rows, int64_t cols, bool rows_first);

/* Tiles from MR x MC blocks (MR src rows, MC src cols), the last block of
 * each walk moved back to end at the edge; tiles smaller than one block go to
 * FALLBACK. rows_first: the blocks of MR src rows one after the other across
 * the tile, so each src line is used up while in L1 (dst is then the L1
 * buffer of the streaming path); else the blocks of MC dst rows one after the
 * other down the tile (dst lines used up while in L1). */
#define MN__TR_TILE(NAME, ATTR, BLOCK, MR, MC, E, FALLBACK)                                          \
  ATTR static void NAME(char *d, int64_t dld, const char *s, int64_t sld, int64_t rows, int64_t cols,  \
                        bool rows_first) {                                                            \
    if (rows < (MR) || cols < (MC)) {                                                                 \
      FALLBACK(d, dld, s, sld, rows, cols, rows_first);                                               \
      return;                                                                                         \
    }                                                                                                 \
    if (rows_first) {                                                                                 \
      for (int64_t i = 0;; i += (MR)) {                                                               \
        if (i > rows - (MR)) i = rows - (MR);                                                         \
        for (int64_t j = 0;; j += (MC)) {                                                             \
          if (j > cols - (MC)) j = cols - (MC);                                                       \
          BLOCK(d + j * dld + i * (E), dld, s + i * sld + j * (E), sld);                              \
          if (j == cols - (MC)) break;                                                                \
        }                                                                                             \
        if (i == rows - (MR)) break;                                                                  \
      }                                                                                               \
      return;                                                                                         \
    }                                                                                                 \
    for (int64_t j = 0;; j += (MC)) {                                                                 \
      if (j > cols - (MC)) j = cols - (MC);                                                           \
      for (int64_t i = 0;; i += (MR)) {                                                               \
        if (i > rows - (MR)) i = rows - (MR);                                                         \
        BLOCK(d + j * dld + i * (E), dld, s + i * sld + j * (E), sld);                                \
        if (i == rows - (MR)) break;                                                                  \
      }                                                                                               \
      if (j == cols - (MC)) break;                                                                    \
    }                                                                                                 \
  }

/* ---- portable: element loops and 4 x 4 blocks of fixed-size moves ---- */

#define MN__TR_PORTABLE_DEF(E)                                                                        \
  static void loop_##E(char *d, int64_t dld, const char *s, int64_t sld, int64_t rows, int64_t cols,   \
                       bool rows_first) {                                                             \
    (void)rows_first;                                                                                 \
    for (int64_t j = 0; j < cols; j++)                                                                \
      for (int64_t i = 0; i < rows; i++) memcpy(d + j * dld + i * (E), s + i * sld + j * (E), (E));  \
  }                                                                                                   \
  static inline void blk_c##E(char *d, int64_t dld, const char *s, int64_t sld) {                     \
    unsigned char x[4][4][E];                                                                         \
    for (int i = 0; i < 4; i++) memcpy(x[i], s + i * sld, 4 * (E));                                   \
    for (int j = 0; j < 4; j++)                                                                       \
      for (int i = 0; i < 4; i++) memcpy(d + j * dld + i * (E), x[i][j], (E));                        \
  }                                                                                                   \
  MN__TR_TILE(tile_c##E, , blk_c##E, 4, 4, E, loop_##E)

MN__TR_PORTABLE_DEF(1)
MN__TR_PORTABLE_DEF(2)
MN__TR_PORTABLE_DEF(4)
MN__TR_PORTABLE_DEF(8)
MN__TR_PORTABLE_DEF(16)

/* Any item size: element loops. */
static void loop_any(char *d, int64_t dld, const char *s, int64_t sld, int64_t rows, int64_t cols, size_t item) {
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++) memcpy(d + j * dld + i * (int64_t)item, s + i * sld + j * (int64_t)item, item);
}

#if defined(MN__TR_X86)
/* ---- SSE2 blocks ---- */

#define LD128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST128(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

/* 1-byte items, 16 x 16: four unpack stages (8-, 16-, 32-, 64-bit). */
static inline void blk_sse2_1(char *d, int64_t dld, const char *s, int64_t sld) {
  __m128i r[16], t[16];
  for (int k = 0; k < 16; k++) r[k] = LD128(s + k * sld);
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm_unpacklo_epi8(r[k], r[k + 1]);     /* cols 0-7 of rows k, k+1 */
    t[k + 1] = _mm_unpackhi_epi8(r[k], r[k + 1]); /* cols 8-15 */
  }
  for (int k = 0; k < 16; k += 4) { /* r[k + q]: cols 4q..4q+3 of rows k..k+3 */
    r[k] = _mm_unpacklo_epi16(t[k], t[k + 2]);
    r[k + 1] = _mm_unpackhi_epi16(t[k], t[k + 2]);
    r[k + 2] = _mm_unpacklo_epi16(t[k + 1], t[k + 3]);
    r[k + 3] = _mm_unpackhi_epi16(t[k + 1], t[k + 3]);
  }
  for (int k = 0; k < 16; k += 8) /* t[k + m]: cols 2m, 2m+1 of rows k..k+7 */
    for (int m = 0; m < 4; m++) {
      t[k + 2 * m] = _mm_unpacklo_epi32(r[k + m], r[k + 4 + m]);
      t[k + 2 * m + 1] = _mm_unpackhi_epi32(r[k + m], r[k + 4 + m]);
    }
  for (int m = 0; m < 8; m++) {
    ST128(d + (2 * m) * dld, _mm_unpacklo_epi64(t[m], t[8 + m]));
    ST128(d + (2 * m + 1) * dld, _mm_unpackhi_epi64(t[m], t[8 + m]));
  }
}

/* 2-byte items, 8 x 8. */
static inline void blk_sse2_2(char *d, int64_t dld, const char *s, int64_t sld) {
  __m128i r[8], t[8];
  for (int k = 0; k < 8; k++) r[k] = LD128(s + k * sld);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm_unpacklo_epi16(r[k], r[k + 1]);
    t[k + 1] = _mm_unpackhi_epi16(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) { /* r[k + q]: cols 2q, 2q+1 of rows k..k+3 */
    r[k] = _mm_unpacklo_epi32(t[k], t[k + 2]);
    r[k + 1] = _mm_unpackhi_epi32(t[k], t[k + 2]);
    r[k + 2] = _mm_unpacklo_epi32(t[k + 1], t[k + 3]);
    r[k + 3] = _mm_unpackhi_epi32(t[k + 1], t[k + 3]);
  }
  for (int k = 0; k < 4; k++) {
    ST128(d + (2 * k) * dld, _mm_unpacklo_epi64(r[k], r[k + 4]));
    ST128(d + (2 * k + 1) * dld, _mm_unpackhi_epi64(r[k], r[k + 4]));
  }
}

/* 4-byte items, 4 x 4. */
static inline void blk_sse2_4(char *d, int64_t dld, const char *s, int64_t sld) {
  __m128i r0 = LD128(s), r1 = LD128(s + sld), r2 = LD128(s + 2 * sld), r3 = LD128(s + 3 * sld);
  __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
  __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
  ST128(d, _mm_unpacklo_epi64(t0, t1));
  ST128(d + dld, _mm_unpackhi_epi64(t0, t1));
  ST128(d + 2 * dld, _mm_unpacklo_epi64(t2, t3));
  ST128(d + 3 * dld, _mm_unpackhi_epi64(t2, t3));
}

/* 8-byte items, 2 x 2. */
static inline void blk_sse2_8(char *d, int64_t dld, const char *s, int64_t sld) {
  __m128i r0 = LD128(s), r1 = LD128(s + sld);
  ST128(d, _mm_unpacklo_epi64(r0, r1));
  ST128(d + dld, _mm_unpackhi_epi64(r0, r1));
}

/* 16-byte items, 4 x 4 moves. */
static inline void blk_sse2_16(char *d, int64_t dld, const char *s, int64_t sld) {
  __m128i r[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) r[i][j] = LD128(s + i * sld + j * 16);
  for (int j = 0; j < 4; j++)
    for (int i = 0; i < 4; i++) ST128(d + j * dld + i * 16, r[i][j]);
}

MN__TR_TILE(tile_sse2_1, , blk_sse2_1, 16, 16, 1, tile_c1)
MN__TR_TILE(tile_sse2_2, , blk_sse2_2, 8, 8, 2, tile_c2)
MN__TR_TILE(tile_sse2_4, , blk_sse2_4, 4, 4, 4, tile_c4)
MN__TR_TILE(tile_sse2_8, , blk_sse2_8, 2, 2, 8, loop_8)
MN__TR_TILE(tile_sse2_16, , blk_sse2_16, 4, 4, 16, loop_16)

/* dst[0, n) = src[0, n): the 64-byte lines of dst wholly inside with
 * streaming stores, the partial lines at either end with ordinary ones. */
static inline void stream_out_sse2(char *d, const char *s, int64_t n) {
  int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63);
  if (head > n) head = n;
  if (head) memcpy(d, s, (size_t)head);
  d += head, s += head, n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64)
    for (int k = 0; k < 64; k += 16) _mm_stream_si128((__m128i *)(void *)(d + k), LD128(s + k));
  if (n) memcpy(d, s, (size_t)n);
}
#endif /* MN__TR_X86 */

#if defined(MN__TR_HAVE_AVX2)
/* ---- AVX2 blocks: two SSE-sized tiles side by side in the 128-bit lanes ---- */

#define LD256(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
/* rows a (low lane) and b (high lane), 16 bytes each */
#define LD2X128(a, b) _mm256_inserti128_si256(_mm256_castsi128_si256(LD128(a)), LD128(b), 1)

/* 1-byte items, 32 x 16: lanes hold rows k and k + 16; a 16 x 16 unpack
 * network per lane; each dst row gets 32 bytes. */
MN__AVX2 static inline void blk_avx2_1(char *d, int64_t dld, const char *s, int64_t sld) {
  __m256i r[16], t[16];
  for (int k = 0; k < 16; k++) r[k] = LD2X128(s + k * sld, s + (k + 16) * sld);
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm256_unpacklo_epi8(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_epi8(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {
    r[k] = _mm256_unpacklo_epi16(t[k], t[k + 2]);
    r[k + 1] = _mm256_unpackhi_epi16(t[k], t[k + 2]);
    r[k + 2] = _mm256_unpacklo_epi16(t[k + 1], t[k + 3]);
    r[k + 3] = _mm256_unpackhi_epi16(t[k + 1], t[k + 3]);
  }
  for (int k = 0; k < 16; k += 8)
    for (int m = 0; m < 4; m++) {
      t[k + 2 * m] = _mm256_unpacklo_epi32(r[k + m], r[k + 4 + m]);
      t[k + 2 * m + 1] = _mm256_unpackhi_epi32(r[k + m], r[k + 4 + m]);
    }
  for (int m = 0; m < 8; m++) {
    ST256(d + (2 * m) * dld, _mm256_unpacklo_epi64(t[m], t[8 + m]));
    ST256(d + (2 * m + 1) * dld, _mm256_unpackhi_epi64(t[m], t[8 + m]));
  }
}

/* 2-byte items, 16 x 8: lanes hold rows k and k + 8. */
MN__AVX2 static inline void blk_avx2_2(char *d, int64_t dld, const char *s, int64_t sld) {
  __m256i r[8], t[8];
  for (int k = 0; k < 8; k++) r[k] = LD2X128(s + k * sld, s + (k + 8) * sld);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_epi16(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_epi16(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_unpacklo_epi32(t[k], t[k + 2]);
    r[k + 1] = _mm256_unpackhi_epi32(t[k], t[k + 2]);
    r[k + 2] = _mm256_unpacklo_epi32(t[k + 1], t[k + 3]);
    r[k + 3] = _mm256_unpackhi_epi32(t[k + 1], t[k + 3]);
  }
  for (int k = 0; k < 4; k++) {
    ST256(d + (2 * k) * dld, _mm256_unpacklo_epi64(r[k], r[k + 4]));
    ST256(d + (2 * k + 1) * dld, _mm256_unpackhi_epi64(r[k], r[k + 4]));
  }
}

/* 4-byte items, 8 x 8: lanes hold rows k and k + 4 (cols 0-3 in r0..r3,
 * cols 4-7 in r4..r7); a 4 x 4 network per lane. */
MN__AVX2 static inline void blk_avx2_4(char *d, int64_t dld, const char *s, int64_t sld) {
  __m256i r[8];
  for (int k = 0; k < 4; k++) {
    r[k] = LD2X128(s + k * sld, s + (k + 4) * sld);
    r[4 + k] = LD2X128(s + k * sld + 16, s + (k + 4) * sld + 16);
  }
  for (int h = 0; h < 8; h += 4) {
    __m256i t0 = _mm256_unpacklo_epi32(r[h], r[h + 1]), t1 = _mm256_unpackhi_epi32(r[h], r[h + 1]);
    __m256i t2 = _mm256_unpacklo_epi32(r[h + 2], r[h + 3]), t3 = _mm256_unpackhi_epi32(r[h + 2], r[h + 3]);
    ST256(d + (h + 0) * dld, _mm256_unpacklo_epi64(t0, t2));
    ST256(d + (h + 1) * dld, _mm256_unpackhi_epi64(t0, t2));
    ST256(d + (h + 2) * dld, _mm256_unpacklo_epi64(t1, t3));
    ST256(d + (h + 3) * dld, _mm256_unpackhi_epi64(t1, t3));
  }
}

/* 8-byte items, 4 x 4: lanes hold rows k and k + 2. */
MN__AVX2 static inline void blk_avx2_8(char *d, int64_t dld, const char *s, int64_t sld) {
  __m256i r0 = LD2X128(s, s + 2 * sld), r1 = LD2X128(s + sld, s + 3 * sld);
  __m256i r2 = LD2X128(s + 16, s + 2 * sld + 16), r3 = LD2X128(s + sld + 16, s + 3 * sld + 16);
  ST256(d, _mm256_unpacklo_epi64(r0, r1));
  ST256(d + dld, _mm256_unpackhi_epi64(r0, r1));
  ST256(d + 2 * dld, _mm256_unpacklo_epi64(r2, r3));
  ST256(d + 3 * dld, _mm256_unpackhi_epi64(r2, r3));
}

MN__TR_TILE(tile_avx2_1, MN__AVX2, blk_avx2_1, 32, 16, 1, tile_sse2_1)
MN__TR_TILE(tile_avx2_2, MN__AVX2, blk_avx2_2, 16, 8, 2, tile_sse2_2)
MN__TR_TILE(tile_avx2_4, MN__AVX2, blk_avx2_4, 8, 8, 4, tile_sse2_4)
MN__TR_TILE(tile_avx2_8, MN__AVX2, blk_avx2_8, 4, 4, 8, tile_sse2_8)

MN__AVX2 static inline void stream_out_avx2(char *d, const char *s, int64_t n) {
  int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63);
  if (head > n) head = n;
  if (head) memcpy(d, s, (size_t)head);
  d += head, s += head, n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    _mm256_stream_si256((__m256i *)(void *)d, LD256(s));
    _mm256_stream_si256((__m256i *)(void *)(d + 32), LD256(s + 32));
  }
  if (n) memcpy(d, s, (size_t)n);
}
#endif /* MN__TR_HAVE_AVX2 */

/* ---- the driver ---- */

/* Per item size (1, 2, 4, 8, 16): tile rows when dst lines are aligned at
 * tile edges, tile rows when not (a tile then also transposes the next
 * 64 / E rows, for the dst line it ends in), and tile cols; measured on
 * 4096^2 and 4095 x 4097 transposes (docs/KERNELS.md). */
static const int64_t tile_rows_aligned[5] = {128, 64, 32, 16, 8};
static const int64_t tile_rows_ragged[5] = {256, 64, 32, 16, 16};
static const int64_t tile_cols[5] = {64, 64, 32, 16, 8};
/* Streaming (non-temporal stores): tiles one src line wide (2048^2 and
 * 4096^2 f32: faster in 13 of 18 side-by-side runs, noisy host; 4096^2 bf16:
 * 32 cols instead of 64 and 128 rows instead of 64, 40-42% of memcpy -> 55-84%
 * at one thread), and for 1- and 2-byte items tall tiles, so each dst row
 * gets 256 bytes (4 lines) of non-temporal stores per tile (i8 4096^2: 256
 * rows instead of 128, +10-15%; ragged shapes also redo fewer rows per tile:
 * bf16 4095 x 4097 at 256 rows, 33-38% -> 40-47%). */
static const int64_t tile_rows_streamed_aligned[5] = {256, 128, 32, 16, 8};
static const int64_t tile_rows_streamed_ragged[5] = {256, 256, 32, 16, 16};
static const int64_t tile_cols_streamed[5] = {64, 32, 16, 16, 8};
/* >= cols * (rows + 64 / E) * E of the tables above (20480 for 1-byte
 * items, streamed or buffered; 18432 for 2-byte ones streamed) */
enum { MN__TR_BUF = 20480 };

static int item_index(size_t item) {
  switch (item) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    case 8: return 3;
    case 16: return 4;
    default: return -1;
  }
}

int64_t mn__tr_panel_rows(size_t item, bool stream) {
  int k = item_index(item);
  if (k < 0) return 16;
  const int64_t a = stream ? tile_rows_streamed_aligned[k] : tile_rows_aligned[k];
  const int64_t r = stream ? tile_rows_streamed_ragged[k] : tile_rows_ragged[k];
  return a > r ? a : r;
}

static tile_fn tile_of(mn__tr_isa isa, int k) {
  static const tile_fn portable[5] = {tile_c1, tile_c2, tile_c4, tile_c8, tile_c16};
#if defined(MN__TR_X86)
  static const tile_fn sse2[5] = {tile_sse2_1, tile_sse2_2, tile_sse2_4, tile_sse2_8, tile_sse2_16};
#if defined(MN__TR_HAVE_AVX2)
  static const tile_fn avx2[5] = {tile_avx2_1, tile_avx2_2, tile_avx2_4, tile_avx2_8, tile_sse2_16};
  if (isa >= MN__TR_AVX2) return avx2[k];
#endif
  if (isa >= MN__TR_SSE2) return sse2[k];
#endif
  (void)isa;
  return portable[k];
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Byte offset from row of the first 64-byte aligned address at or after row + off. */
static inline int64_t line_up(const char *row, int64_t off) {
  uintptr_t a = (uintptr_t)row + (uintptr_t)off;
  return off + (int64_t)((64 - (a & 63)) & 63);
}

#if defined(MN__TR_X86)
static inline void copy_out(char *d, const char *s, int64_t n) { memcpy(d, s, (size_t)n); }

/* Streaming (and buffered: the same with ordinary stores, copy_out): tiles of rows [i0, i1) x cols [j0, j0 + tc) go through buf; a
 * tile writes, in each dst row, the bytes from the first line boundary at or
 * after i0 (the row's start when i0 = 0) to the first at or after i1 (the
 * row's end when i1 = rows): whole lines, except at the row's ends. Every
 * byte has one writer whatever the split of rows between calls. */
#define MN__TR_STREAMED(NAME, ATTR, OUT, FENCE, RA, RR, TC)                                                      \
  ATTR static void NAME(const mn__tr2d_t *t, int64_t r0, int64_t r1, int k, tile_fn tile) {                      \
    const int64_t E = (int64_t)t->item, L = 64 / E, end = t->rows * E;                                           \
    const bool lines_aligned = ((uintptr_t)t->dst & 63) == 0 && (t->dld & 63) == 0;                              \
    const int64_t pr = lines_aligned ? RA[k] : RR[k], tc = TC[k];                                                \
    const int64_t bld = (pr + L) * E; /* buffer row pitch */                                                     \
    _Alignas(64) char buf[MN__TR_BUF];                                                                           \
    for (int64_t i0 = r0; i0 < r1; i0 += pr) {                                                                   \
      const int64_t i1 = min64(i0 + pr, r1);                                                                     \
      /* the rows the tile's last dst lines need */                                                              \
      const int64_t ie = i1 == t->rows || (lines_aligned && ((i1 * E) & 63) == 0) ? i1 : min64(i1 + L, t->rows); \
      for (int64_t j0 = 0; j0 < t->cols; j0 += tc) {                                                             \
        const int64_t jn = min64(tc, t->cols - j0);                                                              \
        tile(buf, bld, t->src + i0 * t->sld + j0 * E, t->sld, ie - i0, jn, true);                                \
        for (int64_t j = 0; j < jn; j++) {                                                                       \
          char *row = t->dst + (j0 + j) * t->dld;                                                                \
          int64_t lo = i0 == 0 ? 0 : min64(line_up(row, i0 * E), end);                                           \
          int64_t hi = i1 == t->rows ? end : min64(line_up(row, i1 * E), end);                                   \
          if (lo < hi) OUT(row + lo, buf + j * bld + (lo - i0 * E), hi - lo);                                    \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    if (FENCE) _mm_sfence(); /* the streamed lines are visible before the caller's task ends */                  \
  }
MN__TR_STREAMED(streamed_sse2, , stream_out_sse2, true, tile_rows_streamed_aligned, tile_rows_streamed_ragged,
                tile_cols_streamed)
MN__TR_STREAMED(buffered_sse2, , copy_out, false, tile_rows_aligned, tile_rows_ragged, tile_cols)
#if defined(MN__TR_HAVE_AVX2)
MN__TR_STREAMED(streamed_avx2, MN__AVX2, stream_out_avx2, true, tile_rows_streamed_aligned, tile_rows_streamed_ragged,
                tile_cols_streamed)
#endif
#endif

void mn__cpu_transpose_2d(const mn__tr2d_t *t, int64_t r0, int64_t r1) {
  if (r0 >= r1 || t->cols <= 0) return;
  const int k = item_index(t->item);
  if (k < 0) {
    const int64_t item = (int64_t)t->item;
    loop_any(t->dst + r0 * item, t->dld, t->src + r0 * t->sld, t->sld, r1 - r0, t->cols, t->item);
    return;
  }
  const tile_fn tile = tile_of(t->isa, k);
  const int64_t E = (int64_t)t->item;
#if defined(MN__TR_X86)
  /* dst row pieces of at least 4 lines and tiles of at least 16 cols */
  if (t->stream && t->isa >= MN__TR_SSE2 && t->rows * E >= 256 && t->cols >= 16) {
#if defined(MN__TR_HAVE_AVX2)
    if (t->isa >= MN__TR_AVX2) {
      streamed_avx2(t, r0, r1, k, tile);
      return;
    }
#endif
    streamed_sse2(t, r0, r1, k, tile);
    return;
  }
  /* a row stride of a multiple of 4 KiB puts every row of a tile in one L1
   * set: the tile goes through the L1 buffer, leaving it as dst row pieces */
  if (t->isa >= MN__TR_SSE2 && t->rows * E >= 256 && t->cols >= 16 && ((t->sld & 4095) == 0 || (t->dld & 4095) == 0)) {
    buffered_sse2(t, r0, r1, k, tile);
    return;
  }
#endif
  const int64_t pr = tile_rows_aligned[k], tc = tile_cols[k];
  for (int64_t i0 = r0; i0 < r1; i0 += pr) {
    const int64_t in = min64(pr, r1 - i0);
    for (int64_t j0 = 0; j0 < t->cols; j0 += tc)
      tile(t->dst + j0 * t->dld + i0 * E, t->dld, t->src + i0 * t->sld + j0 * E, t->sld, in, min64(tc, t->cols - j0),
           false);
  }
}
