/* tests/fuzz_driver.h: the seeded mutation driver shared by the deterministic
 * fuzz tests, and the entry-point macro that also builds their libFuzzer targets. */
/*
 * A fuzz test file defines check(data, size) (1 when an invariant broke) and
 * one mn_fuzz_driver_t, then says MN_FUZZ_ENTRY(driver). Built with
 * MN_FUZZ_LIBFUZZER (clang, `fuzz` preset) that is LLVMFuzzerTestOneInput,
 * which aborts on a broken invariant; otherwise it is a main() that runs
 * mn_fuzz_main: every corpus file, then ITERATIONS seeded mutations of them.
 * Command line: PROGRAM [CORPUS_DIR] [ITERATIONS (20000)] [SEED].
 * Single-threaded: the generator state is one global.
 */
#ifndef MNEMO_TESTS_FUZZ_DRIVER_H
#define MNEMO_TESTS_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct mn_fuzz_driver_s {
  const char *corpus_dir;                       /* default seed directory */
  int (*check)(const uint8_t *data, size_t size); /* 1 when an invariant broke */
  /* Whether an input is accepted (only counted); may rewrite its (private) copy. */
  int (*accepts)(uint8_t *data, size_t size);
  int every_seed_accepted;                      /* fail when a seed is refused */
  const char *const *tokens;                    /* spliced in (may be NULL) */
  size_t ntokens;
  const uint8_t *special; /* byte values written over one byte (may be NULL) */
  size_t nspecial;
  /* A structure-aware mutation (may be NULL): edits one field of buf[0..len)
   * (capacity cap) knowing the format, repairs checksums; the new length.
   * Applied after the generic edits to every other input, by both drivers. */
  size_t (*mutate)(uint8_t *buf, size_t len, size_t cap);
} mn_fuzz_driver_t;

/* xorshift64*: the deterministic generator every driver uses. */
void mn_fuzz_seed(uint64_t seed);
uint64_t mn_fuzz_rng(void);
/* Applies 1..4 random edits to buf[0..len) (capacity cap); the new length. */
size_t mn_fuzz_mutate(const mn_fuzz_driver_t *d, uint8_t *buf, size_t len, size_t cap);
/* The deterministic driver; the process exit status. */
int mn_fuzz_main(const mn_fuzz_driver_t *d, int argc, char **argv);

#ifdef MN_FUZZ_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max);
/* libFuzzer's own mutations, then (every other input) the driver's structure-aware one. */
#define MN_FUZZ_ENTRY(driver)                                                            \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                          \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {                         \
    if ((driver).check(data, size)) abort();                                             \
    return 0;                                                                            \
  }                                                                                      \
  size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed); \
  size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed) { \
    size = LLVMFuzzerMutate(data, size, max);                                            \
    if ((driver).mutate && (seed & 1)) {                                                 \
      mn_fuzz_seed(seed);                                                                \
      size = (driver).mutate(data, size, max);                                           \
    }                                                                                    \
    return size;                                                                         \
  }
#else
#define MN_FUZZ_ENTRY(driver) \
  int main(int argc, char **argv) { return mn_fuzz_main(&(driver), argc, argv); }
#endif

#endif
