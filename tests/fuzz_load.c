/* tests/fuzz_load.c: fuzzes the two loaders (mnemo save files, safetensors): a
 * libFuzzer target (clang, MN_FUZZ_LIBFUZZER) and a plain seeded mutation driver. */
/*
 * Every input goes to mn_load_buffer and mn_safetensors_load_buffer (CPU).
 * Each must either refuse it with MN_ERR_FORMAT, a message and no result, or
 * accept it; an accepted set must save again and load back to the same
 * names. Checksums would stop almost every mutation at the first check, so
 * each input is also tried with its mnemo checksums recomputed ("repaired"),
 * which lets mutations reach the record and view parsers.
 *
 * libFuzzer (clang builds; CTest `fuzz_load` runs it for 20 s):
 *   CC=clang cmake -S . -B build/fuzz -G Ninja -DMNEMO_CUDA=OFF
 *   cmake --build build/fuzz --target fuzz_load
 *   build/fuzz/tests/fuzz_load /tmp/fuzz-work tests/corpus/load -max_total_time=600
 *
 * Plain driver (every build; CTest `test_fuzz_load`):
 *   build/<dir>/tests/test_fuzz_load [CORPUS_DIR] [ITERATIONS] [SEED]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_driver.h"
#include "mnemo/mnemo.h"

static uint32_t crc32_ref(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes the blob and header checksums of a mnemo file in place where the
 * fields that locate them are in range. Returns whether anything was done. */
static int repair(uint8_t *d, size_t n) {
  if (n < 44 || memcmp(d, "MNEMOSAV", 8) != 0) return 0;
  uint64_t hs = rd64(d + 16), ns = rd64(d + 24);
  if (hs < 44 || hs > n || ns > (hs - 40) / 24) return 0;
  for (uint64_t k = 0; k < ns; k++) {
    uint8_t *r = d + 40 + k * 24;
    uint64_t len = rd64(r), off = rd64(r + 8);
    if (off <= n && len <= n - off) wr32(r + 16, crc32_ref(d + off, (size_t)len));
  }
  wr32(d + hs - 4, crc32_ref(d, (size_t)hs - 4));
  return 1;
}

static int same_names(const mn_named_views_t *a, const mn_named_views_t *b) {
  if (a->count != b->count) return 0;
  for (size_t i = 0; i < a->count; i++)
    if (strcmp(a->names[i], b->names[i]) != 0) return 0;
  return 1;
}

/* One loader on one input; 1 when an invariant is broken. */
static int check_one(const uint8_t *data, size_t size, int safetensors) {
  mn_named_views_t *nv = NULL;
  mn_status st = safetensors ? mn_safetensors_load_buffer(data, size, mn_device_cpu(), &nv)
                             : mn_load_buffer(data, size, mn_device_cpu(), &nv);
  if (st != MN_OK) {
    if (st != MN_ERR_FORMAT || nv != NULL || mn_last_error()[0] == '\0') {
      fprintf(stderr, "load failed with %s and message \"%s\"\n", mn_status_name(st), mn_last_error());
      return 1;
    }
    return 0;
  }
  int bad = 0;
  void *again = NULL;
  size_t again_size = 0;
  const char *const *names = (const char *const *)nv->names;
  const mn_view_t *const *views = (const mn_view_t *const *)nv->views;
  st = safetensors ? mn_safetensors_save_buffer(nv->count, names, views, nv->nmeta, (const char *const *)nv->meta_keys,
                                                (const char *const *)nv->meta_values, &again, &again_size)
                   : mn_save_buffer(nv->count, names, views, &again, &again_size);
  if (st != MN_OK) {
    fprintf(stderr, "an accepted input does not save again: %s\n", mn_last_error());
    bad = 1;
  } else {
    mn_named_views_t *nv2 = NULL;
    st = safetensors ? mn_safetensors_load_buffer(again, again_size, mn_device_cpu(), &nv2)
                     : mn_load_buffer(again, again_size, mn_device_cpu(), &nv2);
    if (st != MN_OK || !same_names(nv, nv2)) {
      fprintf(stderr, "save -> load of an accepted input differs: %s\n", mn_last_error());
      bad = 1;
    }
    mn_named_views_free(nv2);
  }
  free(again);
  mn_named_views_free(nv);
  return bad;
}

static int check_input(const uint8_t *data, size_t size) {
  int bad = check_one(data, size, 0) | check_one(data, size, 1);
  uint8_t *fixed = malloc(size ? size : 1);
  if (!fixed) return bad;
  memcpy(fixed, data, size);
  if (repair(fixed, size)) bad |= check_one(fixed, size, 0);
  free(fixed);
  return bad;
}

/* Counted as accepted: either loader takes it once its checksums are repaired. */
static int accepts(uint8_t *data, size_t size) {
  repair(data, size);
  mn_named_views_t *nv = NULL;
  int ok = mn_load_buffer(data, size, mn_device_cpu(), &nv) == MN_OK ||
           mn_safetensors_load_buffer(data, size, mn_device_cpu(), &nv) == MN_OK;
  mn_named_views_free(nv);
  return ok;
}

#ifndef MN_LOAD_CORPUS_DIR
#define MN_LOAD_CORPUS_DIR "tests/corpus/load"
#endif

/* Byte values that reach edge cases when written over a field. */
static const uint8_t SPECIAL[] = {0, 1, 2, 7, 8, 24, 25, 63, 64, 127, 128, 255, '{', '}', '"', '[', ']', ',', ':', '\\'};

static const mn_fuzz_driver_t DRIVER = {
    .corpus_dir = MN_LOAD_CORPUS_DIR,
    .check = check_input,
    .accepts = accepts,
    .every_seed_accepted = 1,
    .special = SPECIAL,
    .nspecial = sizeof SPECIAL,
};

MN_FUZZ_ENTRY(DRIVER)
