/* storage/crc32.c: CRC32 (IEEE, reflected, zlib's) for the save formats:
 * a portable slicing-by-16 table loop and, on x86-64, carry-less multiply
 * folding with PCLMULQDQ (16 bytes per lane), AVX2 VPCLMULQDQ (32) or
 * AVX-512 VPCLMULQDQ (64),
 * chosen at run time (__builtin_cpu_supports) and compiled with target
 * attributes, so the build needs no -m flags. Pure functions; the tables and
 * the choice are made once (pthread_once); any thread.
 *
 * The folding, from the polynomial arithmetic (GF(2)[x] mod P, P = x^32 +
 * 0x04C11DB7's terms). Reflected CRCs read bit 0 of byte 0 first, so 16 data
 * bytes loaded little-endian into a 128-bit register r stand for
 * R(x) = sum r_i x^(127-i): the low qword holds the higher powers. Write
 * R = L x^64 + H (L the low qword, H the high one). The CRC of a message M
 * (its first 32 bits xored with the initial state) is M x^32 mod P, and only
 * the class of M mod P matters, so a register followed by F more bits of data
 * D is replaced by
 *     R x^F + D  =  L x^(F+64) + H x^F + D  ==  L k_lo + H k_hi + D   (mod P)
 * with k_lo = x^(F+64) mod P and k_hi = x^F mod P: two 64x32-bit carry-less
 * products, under 96 bits, so the register stays 128 bits wide. Two details
 * of the instruction set the constants absorb:
 *   - PCLMULQDQ of two 64-bit lanes a, b (lane bit i = coefficient of
 *     x^(63-i)) gives c_k = xor_{i+j=k} a_i b_j, which read as a 128-bit
 *     register (bit k = x^(127-k)) is x*A*B: one extra factor x;
 *   - a constant w of 33 bits stored in the low bits of a lane stands for
 *     x^31 * W when W is read as a 33-bit reflected value (bit i = x^(32-i)).
 * So the product register is x^32 * L * W, and W must be x^(F+64-32) mod P:
 *     k_lo = x^(F+32) mod P,  k_hi = x^(F-32) mod P,
 * written as 33-bit reflected values, i.e. (32-bit reflected value) << 1.
 * mn__crc32_xpow computes x^n mod P bit by bit; the constants below came from
 *     python3 -c "
 *     def xpow(n):
 *         v = 0x80000000
 *         for _ in range(n): v = (v >> 1) ^ 0xEDB88320 if v & 1 else v >> 1
 *         return v
 *     for F in (128, 256, 384, 512, 1024, 1536, 2048):
 *         print(F, hex(xpow(F + 32) << 1), hex(xpow(F - 32) << 1))"
 * and tests/test_crc32.c re-derives each one with mn__crc32_xpow. The last
 * register (128 bits) is reduced by the table loop itself: the CRC state of
 * its 16 bytes from state 0 is exactly R x^32 mod P, and the tail bytes
 * continue from there. */
#include "storage/crc32.h"

#include <pthread.h>
#include <stdbool.h>

#define POLY 0xEDB88320u /* 0x04C11DB7 reflected */

/* ---- portable: slicing-by-16 -------------------------------------------------
 * T[0] is the bytewise table; T[t][b] is the CRC state of byte b followed by
 * t zero bytes, so 16 bytes are 16 lookups xored together. */
static uint32_t T[16][256];

static void tables_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? POLY ^ (c >> 1) : c >> 1;
    T[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 16; t++) T[t][i] = (T[t - 1][i] >> 8) ^ T[0][T[t - 1][i] & 0xFF];
}

static inline uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The raw state (no inversions) after n more bytes. Needs the tables. */
static uint32_t raw_table(uint32_t c, const unsigned char *p, size_t n) {
  while (n >= 16) {
    uint32_t a = c ^ le32(p);
    c = T[15][a & 0xFF] ^ T[14][(a >> 8) & 0xFF] ^ T[13][(a >> 16) & 0xFF] ^ T[12][a >> 24] ^ T[11][p[4]] ^
        T[10][p[5]] ^ T[9][p[6]] ^ T[8][p[7]] ^ T[7][p[8]] ^ T[6][p[9]] ^ T[5][p[10]] ^ T[4][p[11]] ^ T[3][p[12]] ^
        T[2][p[13]] ^ T[1][p[14]] ^ T[0][p[15]];
    p += 16;
    n -= 16;
  }
  while (n--) c = T[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init(void);

uint32_t mn__crc32_table(uint32_t crc, const void *data, size_t n) {
  pthread_once(&once, init);
  return ~raw_table(~crc, data, n);
}

uint32_t mn__crc32_xpow(uint64_t n) {
  uint32_t v = 0x80000000u; /* x^0 */
  while (n--) v = v & 1 ? (v >> 1) ^ POLY : v >> 1;
  return v;
}

/* a * b mod P, both reflected (bit 31 - i holds the coefficient of x^i):
 * for each term x^i of a, b times x^i is added in. */
static uint32_t mulmodp(uint32_t a, uint32_t b) {
  uint32_t r = 0;
  for (int i = 0; i < 32; i++, b = b & 1 ? (b >> 1) ^ POLY : b >> 1)
    if (a & (0x80000000u >> i)) r ^= b;
  return r;
}

uint32_t mn__crc32_shift(uint64_t nbytes) {
  uint32_t r = 0x80000000u, sq = 0x00800000u; /* x^0; x^8, squared once per bit of nbytes */
  for (; nbytes; nbytes >>= 1, sq = mulmodp(sq, sq))
    if (nbytes & 1) r = mulmodp(r, sq);
  return r;
}

/* zlib's pre- and post-inversion cancel in the sum: the CRC of A followed by
 * B is crc(A) x^(8 |B|) + crc(B) mod P. */
uint32_t mn__crc32_combine(uint32_t crc1, uint32_t crc2, uint32_t shift2) { return mulmodp(crc1, shift2) ^ crc2; }

/* ---- x86-64: carry-less multiply folding ---------------------------------------- */

/* k_lo, k_hi of a fold over F bits (see the top of the file). */
#define K128_LO 0x1751997d0ull
#define K128_HI 0x0ccaa009eull
#define K256_LO 0x0f1da05aaull
#define K256_HI 0x15a546366ull
#define K384_LO 0x03db1ecdcull
#define K384_HI 0x174359406ull
#define K512_LO 0x154442bd4ull
#define K512_HI 0x1c6e41596ull
#define K1024_LO 0x1e88ef372ull
#define K1024_HI 0x14a7fe880ull
#define K1536_LO 0x1821d8bc0ull
#define K1536_HI 0x12e958ac4ull
#define K2048_LO 0x11542778aull
#define K2048_HI 0x1322d1430ull

void mn__crc32_fold_constants(unsigned bits, uint64_t *lo, uint64_t *hi) {
  static const struct {
    unsigned bits;
    uint64_t lo, hi;
  } k[] = {{128, K128_LO, K128_HI},    {256, K256_LO, K256_HI},    {384, K384_LO, K384_HI},
           {512, K512_LO, K512_HI},    {1024, K1024_LO, K1024_HI}, {1536, K1536_LO, K1536_HI},
           {2048, K2048_LO, K2048_HI}};
  *lo = *hi = 0;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (k[i].bits == bits) *lo = k[i].lo, *hi = k[i].hi;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MN__CRC_X86 1
#include <immintrin.h>

#define PCLMUL_TARGET __attribute__((target("pclmul,sse4.1")))
#define VPCLMUL_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))

/* r folded over F bits onto d: r.lo * k.lo ^ r.hi * k.hi ^ d. */
PCLMUL_TARGET static inline __m128i fold16(__m128i r, __m128i k, __m128i d) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(r, k, 0x00), _mm_clmulepi64_si128(r, k, 0x11)), d);
}

PCLMUL_TARGET static inline __m128i kpair(uint64_t lo, uint64_t hi) { return _mm_set_epi64x((long long)hi, (long long)lo); }

PCLMUL_TARGET static inline __m128i load16(const unsigned char *p) { return _mm_loadu_si128((const __m128i *)p); }

/* The last register and the tail: 16-byte folds, then the table loop
 * reduces the register (its CRC state from 0) and goes on with the tail. */
PCLMUL_TARGET static uint32_t finish(__m128i x, const unsigned char *p, size_t n) {
  const __m128i k128 = kpair(K128_LO, K128_HI);
  for (; n >= 16; p += 16, n -= 16) x = fold16(x, k128, load16(p));
  unsigned char b[16];
  _mm_storeu_si128((__m128i *)b, x);
  return ~raw_table(raw_table(0, b, 16), p, n);
}

/* Four 16-byte registers folded 64 bytes at a time. */
PCLMUL_TARGET static uint32_t crc_pclmul(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  if (n < 64) return ~raw_table(~crc, p, n);
  __m128i x0 = _mm_xor_si128(load16(p), _mm_cvtsi32_si128((int)~crc)), x1 = load16(p + 16), x2 = load16(p + 32),
          x3 = load16(p + 48);
  p += 64;
  n -= 64;
  const __m128i k512 = kpair(K512_LO, K512_HI);
  for (; n >= 64; p += 64, n -= 64) {
    x0 = fold16(x0, k512, load16(p));
    x1 = fold16(x1, k512, load16(p + 16));
    x2 = fold16(x2, k512, load16(p + 32));
    x3 = fold16(x3, k512, load16(p + 48));
  }
  /* x0 stands 48 bytes before x3, x1 32, x2 16 */
  __m128i x = fold16(x0, kpair(K384_LO, K384_HI), x3);
  x = fold16(x1, kpair(K256_LO, K256_HI), x);
  x = fold16(x2, kpair(K128_LO, K128_HI), x);
  return finish(x, p, n);
}

#define VPCLMUL256_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.1")))

VPCLMUL256_TARGET static inline __m256i fold32(__m256i r, __m256i k, __m256i d) {
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(r, k, 0x00), _mm256_clmulepi64_epi128(r, k, 0x11)),
                          d);
}

VPCLMUL256_TARGET static inline __m256i kpair2(uint64_t lo, uint64_t hi) {
  return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)hi, (long long)lo));
}

VPCLMUL256_TARGET static inline __m256i load32(const unsigned char *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* AVX2 VPCLMULQDQ (Zen 3 and later, Ice Lake and later): four 32-byte
 * registers (8 lanes of 16 bytes) folded 128 bytes at a time. */
VPCLMUL256_TARGET static uint32_t crc_vpclmul256(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  if (n < 128) return crc_pclmul(crc, data, n);
  __m256i y0 = _mm256_xor_si256(load32(p), _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, (int)~crc));
  __m256i y1 = load32(p + 32), y2 = load32(p + 64), y3 = load32(p + 96);
  p += 128;
  n -= 128;
  const __m256i k1024 = kpair2(K1024_LO, K1024_HI);
  for (; n >= 128; p += 128, n -= 128) {
    y0 = fold32(y0, k1024, load32(p));
    y1 = fold32(y1, k1024, load32(p + 32));
    y2 = fold32(y2, k1024, load32(p + 64));
    y3 = fold32(y3, k1024, load32(p + 96));
  }
  /* each register stands 32 bytes before the next (each lane likewise) */
  const __m256i k256 = kpair2(K256_LO, K256_HI);
  __m256i y = fold32(y0, k256, y1);
  y = fold32(y, k256, y2);
  y = fold32(y, k256, y3);
  for (; n >= 32; p += 32, n -= 32) y = fold32(y, k256, load32(p));
  /* the two lanes: lane 0 stands 16 bytes before lane 1 */
  __m128i x = fold16(_mm256_castsi256_si128(y), kpair(K128_LO, K128_HI), _mm256_extracti128_si256(y, 1));
  return finish(x, p, n);
}

VPCLMUL_TARGET static inline __m512i fold64(__m512i r, __m512i k, __m512i d) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(r, k, 0x00), _mm512_clmulepi64_epi128(r, k, 0x11), d, 0x96);
}

VPCLMUL_TARGET static inline __m512i kpair4(uint64_t lo, uint64_t hi) {
  return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* Four 64-byte registers (16 lanes of 16 bytes) folded 256 bytes at a time. */
VPCLMUL_TARGET static uint32_t crc_vpclmul(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  if (n < 256) return crc_pclmul(crc, data, n);
  __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)~crc));
  __m512i z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  const __m512i k2048 = kpair4(K2048_LO, K2048_HI);
  for (; n >= 256; p += 256, n -= 256) {
    z0 = fold64(z0, k2048, _mm512_loadu_si512(p));
    z1 = fold64(z1, k2048, _mm512_loadu_si512(p + 64));
    z2 = fold64(z2, k2048, _mm512_loadu_si512(p + 128));
    z3 = fold64(z3, k2048, _mm512_loadu_si512(p + 192));
  }
  /* z0 stands 192 bytes before z3, z1 128, z2 64 (each lane likewise) */
  __m512i z = fold64(z0, kpair4(K1536_LO, K1536_HI), z3);
  z = fold64(z1, kpair4(K1024_LO, K1024_HI), z);
  z = fold64(z2, kpair4(K512_LO, K512_HI), z);
  const __m512i k512 = kpair4(K512_LO, K512_HI);
  for (; n >= 64; p += 64, n -= 64) z = fold64(z, k512, _mm512_loadu_si512(p));
  /* the four lanes: lane 0 stands 48 bytes before lane 3 */
  __m128i x = fold16(_mm512_extracti32x4_epi32(z, 0), kpair(K384_LO, K384_HI), _mm512_extracti32x4_epi32(z, 3));
  x = fold16(_mm512_extracti32x4_epi32(z, 1), kpair(K256_LO, K256_HI), x);
  x = fold16(_mm512_extracti32x4_epi32(z, 2), kpair(K128_LO, K128_HI), x);
  return finish(x, p, n);
}
#endif

/* ---- dispatch ---------------------------------------------------------------------- */

static mn__crc32_impl_t impls[4];
static size_t nimpls;

static void init(void) {
  tables_init();
#ifdef MN__CRC_X86
  __builtin_cpu_init();
  bool pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  if (pclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
    impls[nimpls++] = (mn__crc32_impl_t){"vpclmulqdq-avx512", crc_vpclmul};
  if (pclmul && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq"))
    impls[nimpls++] = (mn__crc32_impl_t){"vpclmulqdq-avx2", crc_vpclmul256};
  if (pclmul) impls[nimpls++] = (mn__crc32_impl_t){"pclmulqdq", crc_pclmul};
#endif
  impls[nimpls++] = (mn__crc32_impl_t){"table", mn__crc32_table};
}

size_t mn__crc32_impls(const mn__crc32_impl_t **out) {
  pthread_once(&once, init);
  *out = impls;
  return nimpls;
}

uint32_t mn__crc32(uint32_t crc, const void *data, size_t n) {
  pthread_once(&once, init);
  return impls[0].fn(crc, data, n);
}
