/* tests/fuzz_trace.c: fuzzes the trace reader (versions 1 and 2) and the RMM CSV
 * importer: a libFuzzer target (clang, MN_FUZZ_LIBFUZZER) and a plain driver that
 * mutates the seed corpus (any compiler). */
/*
 * Every input must either be refused with MN_ERR_FORMAT and a message, or be
 * accepted; an accepted trace must format, and its text must parse back to the
 * same text. The same input also goes to the RMM CSV importer, with the same
 * rules (what it accepts must format and parse back). Run under AddressSanitizer this finds out-of-bounds reads, leaks
 * and crashes.
 *
 * libFuzzer (clang builds; CTest `fuzz_trace` runs it for 20 s):
 *   CC=clang cmake -S . -B build/fuzz -G Ninja -DMNEMO_CUDA=OFF
 *   cmake --build build/fuzz --target fuzz_trace
 *   mkdir -p /tmp/fuzz-work
 *   build/fuzz/tests/fuzz_trace /tmp/fuzz-work tests/corpus/trace -max_total_time=600
 * New interesting inputs go to the first directory; crashes to ./crash-*.
 *
 * Plain driver (every build; CTest `test_fuzz_trace`): parses each corpus
 * file, then ITERATIONS (default 20000) mutations of them, with a
 * fixed seed so failures reproduce:
 *   build/<dir>/tests/test_fuzz_trace [CORPUS_DIR] [ITERATIONS] [SEED]
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"

/* Parses the input; on success checks format -> parse -> format is stable.
 * Returns 0, or 1 when an invariant is broken (the fuzzer then aborts). */
static int check_one(const uint8_t *data, size_t size, bool rmm) {
  mn_trace_t *t = NULL;
  mn_status st = rmm ? mn_trace_import_rmm_csv((const char *)data, size, "fuzz.csv", &t)
                     : mn_trace_parse((const char *)data, size, "fuzz", &t);
  if (st != MN_OK) {
    if (st != MN_ERR_FORMAT || t != NULL || mn_last_error()[0] == '\0') {
      fprintf(stderr, "parse failed with %s and message \"%s\"\n", mn_status_name(st), mn_last_error());
      return 1;
    }
    return 0;
  }
  int bad = 0;
  char *text = NULL, *text2 = NULL;
  size_t len = 0, len2 = 0;
  if (mn_trace_format(t, &text, &len) != MN_OK) {
    fprintf(stderr, "an accepted trace does not format: %s\n", mn_last_error());
    bad = 1;
  } else {
    mn_trace_t *u = NULL;
    if (mn_trace_parse(text, len, "formatted", &u) != MN_OK) {
      fprintf(stderr, "formatted text does not parse: %s\n", mn_last_error());
      bad = 1;
    } else if (mn_trace_format(u, &text2, &len2) != MN_OK || len2 != len || memcmp(text, text2, len) != 0) {
      fprintf(stderr, "format -> parse -> format is not stable\n");
      bad = 1;
    }
    mn_trace_destroy(u);
  }
  free(text);
  free(text2);
  mn_trace_destroy(t);
  return bad;
}

static int check_input(const uint8_t *data, size_t size) {
  return check_one(data, size, false) | check_one(data, size, true);
}

#ifdef MN_FUZZ_LIBFUZZER

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (check_input(data, size)) abort();
  return 0;
}

#else

#ifndef MN_TRACE_CORPUS_DIR
#define MN_TRACE_CORPUS_DIR "tests/corpus/trace"
#endif

typedef struct seed_s {
  uint8_t *data;
  size_t size;
} seed_t;

static uint64_t rng_state;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

/* Tokens that reach deeper parser states when spliced in. */
static const char *const TOKENS[] = {
    "mnemo-trace 1\n", "meta k v\n", "pre alloc 0 0x10 16\n", "0 alloc 0 0x10 16\n",
    "1 free_requested 0 0x10 16\n", "end 0\n", "end 1\n", "0x", "18446744073709551615", "18446744073709551616",
    "\r\n", "\t", " ", "#", "\n", "pre segment_alloc 0 0x0 0\n", "0xffffffffffffffff", "\0", "\xff",
    "mnemo-trace 2\n", " 0 1\n", " 2147483648", "Thread,Time,Action,Pointer,Size,Stream\n", ",allocate,",
    ",free,", ",allocate failure,", "1,0.5,allocate,0x10,8,0x0\n", "12:00:01.5", ","};

static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
  int rounds = 1 + (int)(rng() % 4);
  for (int r = 0; r < rounds; r++) {
    switch (rng() % 6) {
      case 0: /* flip a byte */
        if (len) buf[rng() % len] = (uint8_t)rng();
        break;
      case 1: /* delete a run */
        if (len) {
          size_t at = rng() % len, n = 1 + rng() % 16;
          if (n > len - at) n = len - at;
          memmove(buf + at, buf + at + n, len - at - n);
          len -= n;
        }
        break;
      case 2: { /* insert a token */
        const char *tok = TOKENS[rng() % (sizeof TOKENS / sizeof TOKENS[0])];
        size_t n = strlen(tok) ? strlen(tok) : 1, at = len ? rng() % (len + 1) : 0;
        if (len + n <= cap) {
          memmove(buf + at + n, buf + at, len - at);
          memcpy(buf + at, tok, n);
          len += n;
        }
        break;
      }
      case 3: /* truncate */
        if (len) len = rng() % len;
        break;
      case 4: /* duplicate a run */
        if (len) {
          size_t at = rng() % len, n = 1 + rng() % 64;
          if (n > len - at) n = len - at;
          if (len + n <= cap) {
            memmove(buf + at + n, buf + at, len - at);
            len += n;
          }
        }
        break;
      default: /* change a digit */
        for (size_t k = 0; len && k < 8; k++) {
          size_t at = rng() % len;
          if (buf[at] >= '0' && buf[at] <= '9') {
            buf[at] = (uint8_t)('0' + rng() % 10);
            break;
          }
        }
        break;
    }
  }
  return len;
}

static int load_corpus(const char *dir, seed_t **out, size_t *n) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open corpus directory %s\n", dir);
    return 1;
  }
  size_t cap = 16;
  seed_t *seeds = malloc(cap * sizeof *seeds);
  *n = 0;
  struct dirent *de;
  while (seeds && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    uint8_t *data = malloc(1 << 16);
    size_t size = data ? fread(data, 1, 1 << 16, f) : 0;
    fclose(f);
    if (*n == cap) {
      cap *= 2;
      seed_t *ns = realloc(seeds, cap * sizeof *seeds);
      if (!ns) {
        free(data);
        break;
      }
      seeds = ns;
    }
    seeds[(*n)++] = (seed_t){data, size};
  }
  closedir(d);
  *out = seeds;
  return seeds && *n ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : MN_TRACE_CORPUS_DIR;
  long iterations = argc > 2 ? atol(argv[2]) : 20000;
  rng_state = argc > 3 ? strtoull(argv[3], NULL, 10) | 1 : 0x9e3779b97f4a7c15ull;
  seed_t *seeds = NULL;
  size_t nseeds = 0;
  if (load_corpus(dir, &seeds, &nseeds)) {
    fprintf(stderr, "no seed inputs in %s\n", dir);
    return 1;
  }
  int failures = 0;
  size_t accepted = 0;
  for (size_t i = 0; i < nseeds; i++) {
    failures += check_input(seeds[i].data, seeds[i].size);
    mn_trace_t *t = NULL;
    if (mn_trace_parse((const char *)seeds[i].data, seeds[i].size, "seed", &t) == MN_OK) accepted++;
    mn_trace_destroy(t);
  }
  size_t cap = (1 << 16) + 4096;
  uint8_t *buf = malloc(cap);
  for (long it = 0; buf && it < iterations; it++) {
    const seed_t *s = &seeds[rng() % nseeds];
    size_t len = s->size < cap ? s->size : cap;
    memcpy(buf, s->data, len);
    len = mutate(buf, len, cap);
    /* An exact-size copy, so ASan sees any read past the end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) break;
    memcpy(exact, buf, len);
    if (check_input(exact, len)) {
      failures++;
      fprintf(stderr, "  at iteration %ld\n", it);
    }
    free(exact);
  }
  free(buf);
  for (size_t i = 0; i < nseeds; i++) free(seeds[i].data);
  free(seeds);
  printf("%zu seeds (%zu accepted), %ld mutated inputs, %d failures\n", nseeds, accepted, iterations, failures);
  return failures ? 1 : 0;
}

#endif
