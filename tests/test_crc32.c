/* tests/test_crc32.c: the save formats' CRC32 (storage/crc32.c): every
 * implementation this CPU runs (AVX-512 VPCLMULQDQ folding, PCLMULQDQ
 * folding, the slicing-by-16 table loop) against a bitwise reference on the
 * check value, every length 0..4096 at every alignment mod 64 (random data),
 * a few MiB, and pieces chained through the running CRC; the folding
 * constants re-derived from x^n mod P. Single-threaded. */
#include <stdint.h>

#include "mn_test.h"
#include "storage/crc32.h"
#include "test_bytes.h"

/* zlib's crc32(crc, p, n), one bit at a time. */
static uint32_t ref_crc(uint32_t crc, const unsigned char *p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

MN_TEST(check_value) {
  const mn__crc32_impl_t *im = NULL;
  size_t n = mn__crc32_impls(&im);
  MN_CHECK(n >= 1 && strcmp(im[n - 1].name, "table") == 0);
  for (size_t k = 0; k < n; k++) {
    printf("  crc32 implementation: %s\n", im[k].name);
    MN_CHECK(im[k].fn(0, "123456789", 9) == 0xCBF43926u);
    MN_CHECK(im[k].fn(0, "", 0) == 0 && im[k].fn(0x1234, NULL, 0) == 0x1234);
  }
  MN_CHECK(mn__crc32(0, "123456789", 9) == 0xCBF43926u);
  MN_CHECK(mn__crc32_table(0, "123456789", 9) == 0xCBF43926u);
  MN_CHECK(mn_test_crc32("123456789", 9) == 0xCBF43926u);
}

MN_TEST(every_length_and_alignment) {
  enum { MAXN = 4096, PAD = 64 };
  static unsigned char buf[MAXN + PAD];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)next();
  const mn__crc32_impl_t *im = NULL;
  size_t nimpl = mn__crc32_impls(&im);
  int bad = 0;
  for (size_t n = 0; n <= MAXN; n++) {
    size_t a = (size_t)(next() % PAD);
    uint32_t init = n % 3 ? (uint32_t)next() : 0;
    uint32_t want = ref_crc(init, buf + a, n);
    for (size_t k = 0; k < nimpl; k++)
      if (im[k].fn(init, buf + a, n) != want) {
        if (bad++ < 5) fprintf(stderr, "  %s: length %zu at offset %zu differs\n", im[k].name, n, a);
      }
  }
  /* every alignment at the lengths around each implementation's thresholds */
  static const size_t lens[] = {15, 16, 17, 63, 64, 65, 127, 128, 255, 256, 257, 319, 320, 511, 512, 1000};
  for (size_t a = 0; a < PAD; a++)
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
      for (size_t k = 0; k < nimpl; k++)
        bad += im[k].fn(7, buf + a, lens[l]) != ref_crc(7, buf + a, lens[l]);
  MN_CHECK(bad == 0);
}

MN_TEST(megabytes_and_chaining) {
  size_t n = (3u << 20) + 77;
  unsigned char *b = malloc(n + 64);
  MN_CHECK(b != NULL);
  if (!b) return;
  for (size_t i = 0; i < n + 64; i++) b[i] = (unsigned char)next();
  const mn__crc32_impl_t *im = NULL;
  size_t nimpl = mn__crc32_impls(&im);
  for (size_t a = 0; a < 3; a++) {
    uint32_t want = ref_crc(0, b + a * 13, n);
    for (size_t k = 0; k < nimpl; k++) MN_CHECK(im[k].fn(0, b + a * 13, n) == want);
    MN_CHECK(mn__crc32(0, b + a * 13, n) == want);
    /* in pieces of random sizes, the running CRC carried along */
    uint32_t c = 0;
    for (size_t at = 0; at < n;) {
      size_t piece = (size_t)(next() % 70000);
      if (piece > n - at) piece = n - at;
      c = mn__crc32(c, b + a * 13 + at, piece);
      at += piece;
    }
    MN_CHECK(c == want);
  }
  free(b);
}

MN_TEST(fold_constants_from_the_polynomial) {
  /* x^0 is bit 31, x^31 bit 0, x^32 = P's low terms (0x04C11DB7 reflected) */
  MN_CHECK(mn__crc32_xpow(0) == 0x80000000u && mn__crc32_xpow(31) == 1u && mn__crc32_xpow(32) == 0xEDB88320u);
  /* 9 bytes, the first bit set: the message x^71, whose remainder from a
   * zero state (init ~0xFFFFFFFF = 0, final xor undone) is x^(71+32) mod P:
   * x^n mod P agrees with the table loop */
  unsigned char z[9] = {0x01};
  MN_CHECK(~mn__crc32_table(0xFFFFFFFFu, z, 9) == mn__crc32_xpow(71 + 32));
  static const unsigned bits[] = {128, 256, 384, 512, 1024, 1536, 2048};
  for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
    uint64_t lo = 0, hi = 0;
    mn__crc32_fold_constants(bits[i], &lo, &hi);
    MN_CHECK(lo == (uint64_t)mn__crc32_xpow(bits[i] + 32) << 1);
    MN_CHECK(hi == (uint64_t)mn__crc32_xpow(bits[i] - 32) << 1);
  }
}

/* CRCs of pieces checksummed apart combine into the whole's: every split
 * point of a short buffer (empty pieces too), random splits of 3 MiB into
 * up to 9 pieces, and a shift equal to x^(8n) stepped bit by bit. */
MN_TEST(pieces_combine) {
  unsigned char s[300];
  for (size_t i = 0; i < sizeof s; i++) s[i] = (unsigned char)next();
  int bad = 0;
  for (size_t n = 0; n <= sizeof s; n += 37)
    for (size_t cut = 0; cut <= n; cut++)
      bad += mn__crc32_combine(mn__crc32(0, s, cut), mn__crc32(0, s + cut, n - cut), mn__crc32_shift(n - cut)) !=
             ref_crc(0, s, n);
  MN_CHECK(bad == 0);
  static const uint64_t lens[] = {0, 1, 2, 3, 7, 64, 1000, 4096, 65537};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    MN_CHECK(mn__crc32_shift(lens[i]) == mn__crc32_xpow(8 * lens[i]));
  size_t big = (3u << 20) + 5;
  unsigned char *b = malloc(big);
  MN_CHECK(b != NULL);
  if (!b) return;
  for (size_t i = 0; i < big; i++) b[i] = (unsigned char)next();
  uint32_t want = ref_crc(0, b, big);
  for (int round = 0; round < 20; round++) {
    size_t cuts = 1 + (size_t)(next() % 9), at = 0;
    uint32_t c = 0;
    for (size_t k = 0; k < cuts; k++) {
      size_t piece = k + 1 == cuts ? big - at : (size_t)(next() % (big - at + 1));
      c = mn__crc32_combine(c, mn__crc32(0, b + at, piece), mn__crc32_shift(piece));
      at += piece;
    }
    MN_CHECK(c == want);
  }
  free(b);
}

int main(void) {
  MN_RUN(check_value);
  MN_RUN(pieces_combine);
  MN_RUN(every_length_and_alignment);
  MN_RUN(megabytes_and_chaining);
  MN_RUN(fold_constants_from_the_polynomial);
  return mn_test_finish();
}
