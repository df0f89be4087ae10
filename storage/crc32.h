/* storage/crc32.h: CRC32 of the save formats (IEEE 802.3 polynomial
 * 0x04C11DB7, reflected, init and final xor 0xFFFFFFFF: zlib's crc32). One
 * entry point picks, once per process, the fastest implementation this CPU
 * runs: carry-less multiply folding (x86-64 AVX-512 VPCLMULQDQ, or
 * PCLMULQDQ), else a portable slicing-by-16 table loop. Pure functions, any
 * thread (the tables and the choice are made once, under pthread_once). */
#ifndef MNEMO_STORAGE_CRC32_H
#define MNEMO_STORAGE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* zlib's crc32(crc, data, n): start with crc = 0; feeding a buffer in pieces
 * gives the CRC of the whole (crc = mn__crc32(crc, next, len)). */
uint32_t mn__crc32(uint32_t crc, const void *data, size_t n);
/* The same through the portable table loop only (the reference the folding
 * implementations are tested against, and the fallback). */
uint32_t mn__crc32_table(uint32_t crc, const void *data, size_t n);

/* Combining the CRCs of pieces checksummed apart (on several threads):
 * mn__crc32_combine(crc(A), crc(B), mn__crc32_shift(|B|)) is crc(A then B)
 * (mn__crc32_shift(n) is x^(8n) mod P, reflected; O(log n), worth keeping
 * when many pieces have one length). */
uint32_t mn__crc32_shift(uint64_t nbytes);
uint32_t mn__crc32_combine(uint32_t crc1, uint32_t crc2, uint32_t shift2);

/* One implementation this CPU can run: "vpclmulqdq-avx512", "pclmulqdq" or
 * "table" (tests check each; benchmarks time each). */
typedef struct mn__crc32_impl_s {
  const char *name;
  uint32_t (*fn)(uint32_t crc, const void *data, size_t n);
} mn__crc32_impl_t;
/* The implementations usable here, fastest first (mn__crc32 uses the first);
 * returns how many (at least 1: the table loop, always last). */
size_t mn__crc32_impls(const mn__crc32_impl_t **out);

/* x^n mod P in the reflected 32-bit representation (bit i holds the
 * coefficient of x^(31-i)): what the folding constants are made of
 * (crc32.c), computed bit by bit, for the tests that re-derive them. */
uint32_t mn__crc32_xpow(uint64_t n);
/* The folding constants crc32.c uses for a fold over `bits` (a multiple of
 * 128): *lo multiplies the register's low (earlier) 64 bits, *hi its high
 * 64; the tests compare them with (mn__crc32_xpow(bits +- 32) << 1). */
void mn__crc32_fold_constants(unsigned bits, uint64_t *lo, uint64_t *hi);

#endif /* MNEMO_STORAGE_CRC32_H */
