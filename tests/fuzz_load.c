/* tests/fuzz_load.c: fuzzes the two loaders (mnemo save files, safetensors): a
 * libFuzzer target (clang, MN_FUZZ_LIBFUZZER) and a plain seeded mutation driver. */
/*
 * Every input goes to mn_load_buffer and mn_safetensors_load_buffer (CPU).
 * Each must either refuse it with MN_ERR_FORMAT, a message and no result, or
 * accept it; every view of an accepted set is cloned, filled and copied into
 * (kernels touch every element it reaches, so a view outside its storage is
 * an ASan report), and the set must save again and load back to the same
 * names. Checksums would stop almost every mutation at the first check, so
 * each input is also tried with its mnemo checksums recomputed ("repaired"),
 * which lets mutations reach the record and view parsers; a structure-aware
 * mutator (both drivers, every other input) writes edge values over record
 * fields and header numbers and repairs the checksums.
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
#include "test_bytes.h"

/* Recomputes the blob and header checksums of a mnemo file in place where the
 * fields that locate them are in range. Returns whether anything was done. */
static int repair(uint8_t *d, size_t n) {
  if (n < 44 || memcmp(d, "MNEMOSAV", 8) != 0) return 0;
  uint64_t hs = mn_test_rd_le(d + 16, 8), ns = mn_test_rd_le(d + 24, 8);
  if (hs < 44 || hs > n || ns > (hs - 40) / 24) return 0;
  for (uint64_t k = 0; k < ns; k++) {
    uint8_t *r = d + 40 + k * 24;
    uint64_t len = mn_test_rd_le(r, 8), off = mn_test_rd_le(r + 8, 8);
    if (off <= n && len <= n - off) mn_test_wr_le(r + 16, mn_test_crc32(d + off, (size_t)len), 4);
  }
  mn_test_wr_le(d + hs - 4, mn_test_crc32(d, (size_t)hs - 4), 4);
  return 1;
}

/* ---- the structure-aware mutator ------------------------------------------------
 * Writes an edge value over one field of a mnemo file's records (counts,
 * storage sizes and offsets, a view's storage index, dtype, ndim, offset,
 * sizes and strides) and repairs the checksums, or replaces one number of a
 * safetensors JSON header (fixing its length prefix), so that mutations reach
 * the record parsers and the view geometry checks instead of a checksum. */

static const uint64_t EDGE64[] = {0, 1, 2, 3, 7, 8, 16, 255, 65535, 1ull << 31, 1ull << 32, 1ull << 61,
                                  (1ull << 61) + 1, 1ull << 62, 0x7fffffffffffffffull, 0x7ffffffffffffffeull,
                                  1ull << 63, ~0ull, ~0ull - 15};
static const char *const EDGE_TEXT[] = {"0", "1", "2", "-1", "4294967296", "9223372036854775807",
                                        "9223372036854775808", "18446744073709551615", "2305843009213693953",
                                        "4611686018427387904", "99999999999999999999999"};

typedef struct {
  size_t at[512];
  uint8_t width[512];
  size_t n;
} fields_t;

static void field(fields_t *f, size_t at, int width, size_t end) {
  if (f->n < 512 && at + (size_t)width <= end) {
    f->at[f->n] = at;
    f->width[f->n++] = (uint8_t)width;
  }
}

/* The record fields of a mnemo file, as far as its header can be walked. */
static void mnemo_fields(const uint8_t *d, size_t n, fields_t *f) {
  f->n = 0;
  if (n < 40 || memcmp(d, "MNEMOSAV", 8) != 0) return;
  uint64_t hs = mn_test_rd_le(d + 16, 8), ns = mn_test_rd_le(d + 24, 8), nviews = mn_test_rd_le(d + 32, 8);
  size_t end = hs >= 4 && hs <= n ? (size_t)hs - 4 : n;
  for (size_t at = 8; at < 40; at += 8) field(f, at, at == 8 ? 4 : 8, end);
  field(f, 12, 4, end);
  size_t pos = 40;
  for (uint64_t k = 0; k < ns && pos + 24 <= end; k++, pos += 24) {
    field(f, pos, 8, end);
    field(f, pos + 8, 8, end);
  }
  for (uint64_t k = 0; k < nviews && pos + 4 <= end; k++) {
    field(f, pos, 4, end);
    pos += 4 + (size_t)mn_test_rd_le(d + pos, 4);
    if (pos + 16 > end) break;
    field(f, pos, 4, end);
    field(f, pos + 4, 2, end);
    field(f, pos + 6, 2, end);
    field(f, pos + 8, 8, end);
    size_t ndim = (size_t)mn_test_rd_le(d + pos + 6, 2);
    pos += 16;
    for (size_t i = 0; i < 2 * ndim && pos + 8 <= end; i++, pos += 8) field(f, pos, 8, end);
  }
}

/* The view records of a mnemo file: offset of each one's storage-index field. */
static size_t view_records(const uint8_t *d, size_t n, size_t *at, size_t max) {
  fields_t f;
  mnemo_fields(d, n, &f);
  size_t k = 0;
  for (size_t i = 0; i + 1 < f.n && k < max; i++) /* storage index (4) then dtype (2) */
    if (f.width[i] == 4 && f.width[i + 1] == 2 && f.at[i + 1] == f.at[i] + 4) at[k++] = f.at[i];
  return k;
}

/* The wrap mutation: rewrites one view's sizes and strides so that its extent
 * in elements, offset + 1 + sum((size - 1) * stride), is 2^64 / item or
 * 2^128 / item plus one: a bounds check computed in 64- or 128-bit
 * arithmetic then wraps to `item` bytes and accepts it. Greedy: the first
 * dims take the largest strides, the last one the remainder. A correct check
 * refuses every such view; a wrapping one lets the kernels write outside the
 * storage (caught by ASan in touch()). */
static size_t mutate_wrap(uint8_t *d, size_t n) {
  size_t recs[64];
  size_t nrec = view_records(d, n, recs, 64);
  if (!nrec) return n;
  size_t at = recs[mn_fuzz_rng() % nrec];
  int dtype = (int)mn_test_rd_le(d + at + 4, 2), ndim = (int)mn_test_rd_le(d + at + 6, 2);
  if (!mn_dtype_is_valid((mn_dtype)dtype) || ndim < 2 || ndim > MN_MAX_DIMS || at + 16 + 16 * (size_t)ndim > n) return n;
  unsigned __int128 item = mn_dtype_itemsize((mn_dtype)dtype);
  unsigned __int128 m = mn_fuzz_rng() & 1 ? ((unsigned __int128)1 << 64) : ~(unsigned __int128)0;
  unsigned __int128 left = m / item + (m == ~(unsigned __int128)0 && m % item == item - 1 ? 1 : 0);
  left -= mn_test_rd_le(d + at + 8, 8) + 1; /* offset + 1 */
  uint64_t sizes[MN_MAX_DIMS], strides[MN_MAX_DIMS];
  unsigned __int128 numel = 1;
  for (int k = 0; k < ndim; k++) {
    uint64_t stride = k + 1 < ndim ? (uint64_t)INT64_MAX - (mn_fuzz_rng() % 4) : 0;
    if (k + 1 == ndim) { /* the remainder in one step of size 2 */
      if (left > (unsigned __int128)INT64_MAX) return n;
      stride = (uint64_t)left;
    }
    unsigned __int128 steps = stride ? left / stride : 0;
    if (k + 1 == ndim) steps = stride ? 1 : 0;
    if (steps > (unsigned __int128)INT64_MAX - 1) steps = (unsigned __int128)INT64_MAX - 1;
    sizes[k] = (uint64_t)steps + 1;
    strides[k] = stride;
    left -= steps * stride;
    numel *= sizes[k];
    if (numel > (unsigned __int128)INT64_MAX) return n;
  }
  for (int k = 0; k < ndim; k++) {
    mn_test_wr_le(d + at + 16 + 8 * (size_t)k, sizes[k], 8);
    mn_test_wr_le(d + at + 16 + 8 * (size_t)(ndim + k), strides[k], 8);
  }
  repair(d, n);
  return n;
}

static size_t mutate_mnemo(uint8_t *d, size_t n) {
  if (mn_fuzz_rng() % 4 == 0) return mutate_wrap(d, n);
  fields_t f;
  mnemo_fields(d, n, &f);
  if (!f.n) return n;
  size_t k = (size_t)(mn_fuzz_rng() % f.n);
  uint64_t v = EDGE64[mn_fuzz_rng() % (sizeof EDGE64 / sizeof *EDGE64)];
  switch (mn_fuzz_rng() % 4) {
    case 0: v = mn_test_rd_le(d + f.at[k], f.width[k]) + 1; break;
    case 1: v = mn_test_rd_le(d + f.at[k], f.width[k]) - 1; break;
    case 2: v = mn_fuzz_rng() % 64; break;
    default: break;
  }
  mn_test_wr_le(d + f.at[k], v, f.width[k]);
  repair(d, n);
  return n;
}

/* One number of a safetensors header replaced by an edge value. */
static size_t mutate_safetensors(uint8_t *d, size_t n, size_t cap) {
  if (n < 10) return n;
  uint64_t hl = mn_test_rd_le(d, 8);
  if (hl > n - 8 || d[8] != '{') return n;
  size_t starts[256], ns = 0;
  for (size_t i = 8; i < 8 + hl && ns < 256; i++)
    if (((d[i] >= '0' && d[i] <= '9') || d[i] == '-') && !(d[i - 1] >= '0' && d[i - 1] <= '9')) starts[ns++] = i;
  if (!ns) return n;
  size_t at = starts[mn_fuzz_rng() % ns], end = at + 1;
  while (end < 8 + hl && d[end] >= '0' && d[end] <= '9') end++;
  const char *t = EDGE_TEXT[mn_fuzz_rng() % (sizeof EDGE_TEXT / sizeof *EDGE_TEXT)];
  size_t tl = strlen(t), old = end - at;
  if (n - old + tl > cap) return n;
  memmove(d + at + tl, d + end, n - end);
  memcpy(d + at, t, tl);
  mn_test_wr_le(d, hl - old + tl, 8);
  return n - old + tl;
}

static size_t mutate_structured(uint8_t *d, size_t n, size_t cap) {
  return n >= 8 && memcmp(d, "MNEMOSAV", 8) == 0 ? mutate_mnemo(d, n) : mutate_safetensors(d, n, cap);
}

static int same_names(const mn_named_views_t *a, const mn_named_views_t *b) {
  if (a->count != b->count) return 0;
  for (size_t i = 0; i < a->count; i++)
    if (strcmp(a->names[i], b->names[i]) != 0) return 0;
  return 1;
}

/* Runs kernels over every element a loaded view reaches (under ASan/UBSan a
 * view outside its storage is found here, not only by mn_view_check): clone
 * it, fill it with 1, check a clone of it reads back all ones, copy the first
 * clone back in. A refusal (a copy into an overlapping view) must carry a
 * message. Views of more than MAX_TOUCH elements are left alone (an expanded
 * view can name 2^62 elements of one byte). 1 when an invariant is broken. */
#define MAX_TOUCH ((int64_t)1 << 16)

/* The fuzzer's own bounds oracle, independent of the library's arithmetic:
 * whether the last element v reaches, offset + sum((size - 1) * stride), is
 * below nbytes / itemsize. The sum of at most 25 products below 2^126 is
 * saturated at 2^127 rather than wrapped. */
static int inside_storage(const mn_view_t *v) {
  const unsigned __int128 CAP = (unsigned __int128)1 << 127;
  unsigned __int128 last = (uint64_t)mn_view_offset(v);
  for (int d = 0; d < mn_view_ndim(v); d++) {
    if (mn_view_size(v, d) == 0) return 1;
    last += (unsigned __int128)(uint64_t)(mn_view_size(v, d) - 1) * (uint64_t)mn_view_stride(v, d);
    if (last > CAP) last = CAP;
  }
  return last < mn_storage_nbytes(mn_view_storage(v)) / mn_dtype_itemsize(mn_view_dtype(v));
}

static int touch(mn_view_t *v) {
  int64_t n = mn_view_numel(v);
  if (mn_view_check(v) != MN_OK || !inside_storage(v)) {
    fprintf(stderr, "a loaded %s view reaches outside its %zu-byte storage: offset %lld, (size, stride)",
            mn_dtype_name(mn_view_dtype(v)), mn_storage_nbytes(mn_view_storage(v)), (long long)mn_view_offset(v));
    for (int d = 0; d < mn_view_ndim(v); d++)
      fprintf(stderr, " (%lld, %lld)", (long long)mn_view_size(v, d), (long long)mn_view_stride(v, d));
    fprintf(stderr, "\n");
    return 1;
  }
  /* Nothing to touch in an empty view (its contiguous strides may not even
   * exist: sizes {0, 2^40, 2^40}, refused by empty/clone as in PyTorch). */
  if (n == 0 || n > MAX_TOUCH) return 0;
  mn_view_t *before = NULL, *after = NULL, *ones = NULL;
  mn_status st = mn_view_clone(v, NULL, &before);
  if (st == MN_OK) {
    mn_status fst = mn_view_fill(v, mn_scalar_int(1), NULL); /* refused when elements overlap */
    if (fst == MN_OK) {
      st = mn_view_clone(v, NULL, &after);
      if (st == MN_OK)
        st = mn_view_empty(mn_device_cpu(), mn_view_dtype(v), mn_view_ndim(v), mn_view_sizes(v), &ones);
      if (st == MN_OK) st = mn_view_fill(ones, mn_scalar_int(1), NULL);
      if (st == MN_OK && n > 0 && memcmp(mn_view_data(after), mn_view_data(ones), mn_view_nbytes(ones)) != 0) {
        fprintf(stderr, "a loaded view does not read back what was filled in\n");
        st = MN_ERR_INTERNAL;
      }
    } else if (fst != MN_ERR_INVALID_ARGUMENT || !mn_last_error()[0]) {
      st = fst;
    }
  }
  if (st == MN_OK) {
    st = mn_view_copy(v, before, NULL);
    if (st == MN_ERR_INVALID_ARGUMENT && mn_last_error()[0]) st = MN_OK; /* overlapping destination */
  }
  if (st != MN_OK) fprintf(stderr, "kernels on a loaded view failed with %s: %s\n", mn_status_name(st), mn_last_error());
  mn_view_destroy(ones);
  mn_view_destroy(after);
  mn_view_destroy(before);
  return st != MN_OK;
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
  for (size_t i = 0; i < nv->count && !bad; i++) bad = touch(nv->views[i]);
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
    .mutate = mutate_structured,
};

MN_FUZZ_ENTRY(DRIVER)
