/* tests/test_bytes.h: small helpers several tests and fuzzers share: the
 * IEEE CRC32 of the save formats, little-endian field access for patching
 * files, and /proc counts of descriptors and mappings for leak checks.
 * Pure functions (the counts read /proc/self): any thread. */
#ifndef MNEMO_TESTS_TEST_BYTES_H
#define MNEMO_TESTS_TEST_BYTES_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* CRC32, IEEE polynomial, as zlib's crc32(0, p, n): what mnemo files carry. */
static inline uint32_t mn_test_crc32(const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

/* A little-endian unsigned field of `width` bytes (1..8). */
static inline uint64_t mn_test_rd_le(const void *at, int width) {
  const uint8_t *p = at;
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static inline void mn_test_wr_le(void *at, uint64_t v, int width) {
  uint8_t *p = at;
  for (int i = 0; i < width; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Open descriptors of this process (the listing's own included, so equal
 * counts compare); -1 without /proc. */
static inline int mn_test_count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Lines of /proc/self/maps that mention `needle`; -1 without /proc. */
static inline int mn_test_count_maps(const char *needle) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

#endif /* MNEMO_TESTS_TEST_BYTES_H */
