/* tests/fuzz_driver.c: the seeded corpus-mutation driver behind the plain
 * (non-libFuzzer) fuzz tests; single-threaded. */
#include "fuzz_driver.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

#define MN_FUZZ_MAX_SEED (1 << 16)

typedef struct seed_s {
  uint8_t *data;
  size_t size;
} seed_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void mn_fuzz_seed(uint64_t seed) { rng_state = seed | 1; }

uint64_t mn_fuzz_rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

/* Opens a gap of n bytes at `at` (n <= cap - len); the new length. */
static size_t open_gap(uint8_t *buf, size_t len, size_t at, size_t n) {
  memmove(buf + at + n, buf + at, len - at);
  return len + n;
}

size_t mn_fuzz_mutate(const mn_fuzz_driver_t *d, uint8_t *buf, size_t len, size_t cap) {
  int rounds = 1 + (int)(mn_fuzz_rng() % 4);
  for (int r = 0; r < rounds; r++) {
    switch (mn_fuzz_rng() % 7) {
      case 0: /* flip a byte */
        if (len) buf[mn_fuzz_rng() % len] = (uint8_t)mn_fuzz_rng();
        break;
      case 1: /* an edge value over one byte */
        if (len && d->nspecial) buf[mn_fuzz_rng() % len] = d->special[mn_fuzz_rng() % d->nspecial];
        break;
      case 2: /* delete a run */
        if (len) {
          size_t at = mn_fuzz_rng() % len, n = 1 + mn_fuzz_rng() % 16;
          if (n > len - at) n = len - at;
          memmove(buf + at, buf + at + n, len - at - n);
          len -= n;
        }
        break;
      case 3: /* insert a token (an empty one stands for a NUL byte) */
        if (d->ntokens) {
          const char *tok = d->tokens[mn_fuzz_rng() % d->ntokens];
          size_t n = strlen(tok) ? strlen(tok) : 1, at = len ? mn_fuzz_rng() % (len + 1) : 0;
          if (len + n <= cap) {
            len = open_gap(buf, len, at, n);
            memcpy(buf + at, tok, n);
          }
        }
        break;
      case 4: /* truncate */
        if (len) len = mn_fuzz_rng() % len;
        break;
      case 5: /* duplicate a run */
        if (len) {
          size_t at = mn_fuzz_rng() % len, n = 1 + mn_fuzz_rng() % 64;
          if (n > len - at) n = len - at;
          if (len + n <= cap) len = open_gap(buf, len, at, n);
        }
        break;
      default: /* change a digit (text numbers) */
        for (size_t k = 0; len && k < 16; k++) {
          size_t at = mn_fuzz_rng() % len;
          if (buf[at] >= '0' && buf[at] <= '9') {
            buf[at] = (uint8_t)('0' + mn_fuzz_rng() % 10);
            break;
          }
        }
        break;
    }
  }
  if (d->mutate && (mn_fuzz_rng() & 1)) len = d->mutate(buf, len, cap);
  return len;
}

/* Reads every non-hidden file of dir (at most 64 KiB each); 0 when some were read. */
static int load_corpus(const char *dir, seed_t **out, size_t *n) {
  DIR *dh = opendir(dir);
  if (!dh) {
    fprintf(stderr, "cannot open corpus directory %s\n", dir);
    return 1;
  }
  size_t cap = 16;
  seed_t *seeds = malloc(cap * sizeof *seeds);
  *n = 0;
  struct dirent *de;
  while (seeds && (de = readdir(dh)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    uint8_t *data = malloc(MN_FUZZ_MAX_SEED);
    size_t size = data ? fread(data, 1, MN_FUZZ_MAX_SEED, f) : 0;
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
  closedir(dh);
  *out = seeds;
  return seeds && *n ? 0 : 1;
}

/* Checks one input from an exact-size private copy (so ASan sees any read
 * past the end), then asks whether it is accepted. Adds to the counters. */
static int run_one(const mn_fuzz_driver_t *d, const uint8_t *data, size_t len, size_t *accepted) {
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) return -1;
  memcpy(exact, data, len);
  int bad = d->check(exact, len);
  if (d->accepts && d->accepts(exact, len)) (*accepted)++;
  free(exact);
  return bad;
}

int mn_fuzz_main(const mn_fuzz_driver_t *d, int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : d->corpus_dir;
  long iterations = argc > 2 ? atol(argv[2]) : 20000;
  mn_fuzz_seed(argc > 3 ? strtoull(argv[3], NULL, 10) : 0x9e3779b97f4a7c15ull);
  seed_t *seeds = NULL;
  size_t nseeds = 0;
  if (load_corpus(dir, &seeds, &nseeds)) {
    fprintf(stderr, "no seed inputs in %s\n", dir);
    free(seeds);
    return 1;
  }
  int failures = 0, oom = 0;
  size_t seeds_ok = 0, accepted = 0;
  for (size_t i = 0; i < nseeds && !oom; i++) {
    int bad = run_one(d, seeds[i].data, seeds[i].size, &seeds_ok);
    if (bad < 0) oom = 1;
    else failures += bad;
  }
  size_t cap = MN_FUZZ_MAX_SEED + 4096;
  uint8_t *buf = malloc(cap);
  if (!buf) oom = 1;
  for (long it = 0; !oom && it < iterations; it++) {
    const seed_t *s = &seeds[mn_fuzz_rng() % nseeds];
    size_t len = s->size < cap ? s->size : cap;
    memcpy(buf, s->data, len);
    len = mn_fuzz_mutate(d, buf, len, cap);
    int bad = run_one(d, buf, len, &accepted);
    if (bad < 0) oom = 1;
    if (bad > 0) {
      failures++;
      fprintf(stderr, "  at iteration %ld\n", it);
    }
  }
  free(buf);
  for (size_t i = 0; i < nseeds; i++) free(seeds[i].data);
  free(seeds);
  printf("%zu seeds (%zu accepted), %ld mutations (%zu accepted), %d failures\n", nseeds, seeds_ok, iterations,
         accepted, failures);
  if (oom) {
    fprintf(stderr, "out of host memory\n");
    return 1;
  }
  if (d->every_seed_accepted && seeds_ok != nseeds) {
    fprintf(stderr, "every seed must be accepted\n");
    return 1;
  }
  return failures ? 1 : 0;
}
