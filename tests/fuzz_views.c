/* tests/fuzz_views.c: fuzzes view chains: a libFuzzer target (clang, built with
 * MN_FUZZ_LIBFUZZER) and a deterministic driver on generated inputs (any compiler). */
/*
 * Each input becomes one chain of the view-chain language (docs/VIEW_CHAINS.md):
 * an even first byte builds a chain from the following bytes (op codes and
 * small arguments, so most chains are valid and deep); an odd first byte
 * hands the rest to the parser as text. Every chain must either run, with
 * every intermediate view passing mn_view_check (no element outside its
 * storage), or be refused with a status and a non-empty message
 * (mn_chain_run reports MN_ERR_INTERNAL otherwise, and the target aborts).
 * Chains include as_strided, DLPack round trips and imports of foreign
 * geometry (dlpack_as), and legal but extreme int64 arguments (INT64_MAX,
 * INT64_MIN, 2^61 + 1, ...) to slice, narrow, select, diagonal, unfold,
 * split, chunk and expand; every view is finally copied out element by
 * element, so under ASan/UBSan a view outside its storage is a report.
 *
 * libFuzzer (clang builds; CTest `fuzz_views` runs it for 20 s):
 *   CC=clang cmake -S . -B build/fuzz -G Ninja -DMNEMO_CUDA=OFF
 *   cmake --build build/fuzz --target fuzz_views
 *   build/fuzz/tests/fuzz_views -max_total_time=600
 * Deterministic driver (every build; CTest `test_fuzz_views`):
 *   build/<dir>/tests/test_fuzz_views [ITERATIONS (100000)] [SEED]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_driver.h"
#include "view_chain.h"

static const char *const DTYPES[] = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                                     "bfloat16", "float32", "float64", "complex64", "complex128",
                                     "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"};
#define NDT (int)(sizeof DTYPES / sizeof *DTYPES)

typedef struct {
  const uint8_t *p;
  size_t n, at;
} reader;

static int next(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }
/* Mostly 0..2, sometimes -1 or out of range: dims and counts that often work. */
static int small(reader *r) {
  int v = next(r);
  return (v & 15) == 0 ? -1 - (v >> 7) : (v & 15) == 1 ? 3 + (v >> 6) : (v >> 4) % 3;
}
static int size_arg(reader *r) { return next(r) % 6; } /* 0..5 */

static void add(char *buf, size_t cap, const char *fmt, int a, int b, int c, int d) {
  size_t len = strlen(buf);
  if (len + 64 < cap) snprintf(buf + len, cap - len, fmt, a, b, c, d);
}

static void add64(char *buf, size_t cap, const char *fmt, long long a, long long b, long long c, long long d) {
  size_t len = strlen(buf);
  if (len + 128 < cap) snprintf(buf + len, cap - len, fmt, a, b, c, d);
}

/* Legal but extreme int64 arguments: the overflow edges of size, stride and
 * offset arithmetic (PyTorch takes all of them as start, end, step, ...). */
static long long huge(reader *r) {
  static const long long H[] = {INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, (long long)1 << 62,
                                ((long long)1 << 61) + 1, (long long)1 << 32, -((long long)1 << 62), 0, 1, -1};
  int v = next(r);
  return v < 176 ? H[v % 11] : (long long)(v - 216); /* mostly edges, else -40..39 */
}

static void build_chain(reader *r, char *buf, size_t cap) {
  snprintf(buf, cap, "arange %d %s", next(r) % 37, DTYPES[next(r) % NDT]);
  while (r->at < r->n && strlen(buf) + 128 < cap) {
    int op = next(r) % 38, a = small(r), b = small(r), c = small(r), d = small(r);
    switch (op) {
      case 0: add(buf, cap, " | view %d %d", size_arg(r), -1, 0, 0); break;
      case 1: add(buf, cap, " | reshape %d %d %d", size_arg(r), size_arg(r), -1, 0); break;
      case 2: add(buf, cap, " | t", 0, 0, 0, 0); break;
      case 3: add(buf, cap, " | transpose %d %d", a, b, 0, 0); break;
      case 4: add(buf, cap, " | permute %d %d", a, b, 0, 0); break;
      case 5: add(buf, cap, " | movedim %d,%d %d,%d", a, b, c, d); break;
      case 6: add(buf, cap, " | slice %d %d %d %d", a, b, c + 3, (d & 1) + 1); break;
      case 7: add(buf, cap, " | narrow %d %d %d", a, b, c, 0); break;
      case 8: add(buf, cap, " | select %d %d", a, b, 0, 0); break;
      case 9: add(buf, cap, " | unsqueeze %d", a, 0, 0, 0); break;
      case 10: add(buf, cap, a & 1 ? " | squeeze" : " | squeeze %d", b, 0, 0, 0); break;
      case 11: add(buf, cap, " | unsqueeze 0 | expand %d %d", size_arg(r), -1, 0, 0); break;
      case 12: add(buf, cap, " | flatten %d %d", a, b, 0, 0); break;
      case 13: add(buf, cap, " | unflatten %d %d,-1", a, b + 1, 0, 0); break;
      case 14: add(buf, cap, " | diagonal %d %d %d", a, b, c, 0); break;
      case 15: add(buf, cap, " | unfold %d %d %d", a, b, (c & 1) + 1, 0); break;
      case 16: add(buf, cap, " | split %d %d %d", b + 1, a, c & 1, 0); break;
      case 17: add(buf, cap, " | chunk %d %d %d", b + 1, a, c & 1, 0); break;
      case 18:
        add(buf, cap, " | view_dtype ", 0, 0, 0, 0);
        add(buf, cap, DTYPES[(a + 3) % NDT], 0, 0, 0, 0);
        break;
      case 19: add(buf, cap, a & 1 ? " | real" : " | imag", 0, 0, 0, 0); break;
      case 20: add(buf, cap, " | as_strided %d,%d %d,%d", size_arg(r), size_arg(r), b + 3, c + 3); break;
      case 21: add(buf, cap, a & 1 ? " | contiguous" : " | clone", 0, 0, 0, 0); break;
      case 22:
        add(buf, cap, " | to ", 0, 0, 0, 0);
        add(buf, cap, DTYPES[(b + 3) % NDT], 0, 0, 0, 0);
        break;
      case 23: add(buf, cap, " | copy %d int32", size_arg(r), 0, 0, 0); break;
      case 24: add(buf, cap, " | copy_self", 0, 0, 0, 0); break;
      case 25: add(buf, cap, " | fill %d", a * 100, 0, 0, 0); break;
      case 26: add(buf, cap, " | zero", 0, 0, 0, 0); break;
      case 27: add(buf, cap, " | base", 0, 0, 0, 0); break;
      case 28: add64(buf, cap, " | slice %lld %lld %lld %lld", a, huge(r), huge(r), huge(r)); break;
      case 29: add64(buf, cap, " | narrow %lld %lld %lld", a, huge(r), huge(r), 0); break;
      case 30:
        add64(buf, cap, b & 1 ? " | select %lld %lld" : " | diagonal %lld %lld %lld", b & 1 ? a : huge(r),
              b & 1 ? huge(r) : a, c, 0);
        break;
      case 31: add64(buf, cap, " | unfold %lld %lld %lld", a, huge(r), huge(r), 0); break;
      case 32: add64(buf, cap, b & 1 ? " | split %lld %lld 0" : " | chunk %lld %lld 0", huge(r), a, 0, 0); break;
      case 33: add64(buf, cap, " | expand %lld %lld", huge(r), -1, 0, 0); break;
      case 34:
        add64(buf, cap, " | as_strided %lld,%lld %lld,%lld", huge(r), huge(r), huge(r), huge(r));
        add64(buf, cap, c & 1 ? " none" : " %lld", huge(r), 0, 0, 0);
        break;
      case 35: add(buf, cap, a & 1 ? " | dlpack versioned" : " | dlpack", 0, 0, 0, 0); break;
      case 36:
        add64(buf, cap, " | dlpack_as %lld,%lld", b & 1 ? huge(r) : size_arg(r), c & 1 ? huge(r) : size_arg(r), 0, 0);
        if (d & 1) add(buf, cap, " none", 0, 0, 0, 0);
        else add64(buf, cap, " %lld,%lld", a & 1 ? huge(r) : size_arg(r), size_arg(r), 0, 0);
        break;
      default: add(buf, cap, " | as_strided %d %d none", size_arg(r), b + 3, 0, 0); break;
    }
  }
}

static long ran_ok, refused, unparsed;

/* Runs one input; 0, or 1 when an invariant broke. */
static int check_input(const uint8_t *data, size_t size, mn_device_t dev) {
  char buf[4096];
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    reader r = {data + 1, size - 1, 0};
    build_chain(&r, buf, sizeof buf);
  } else {
    size_t n = size - 1 < sizeof buf - 1 ? size - 1 : sizeof buf - 1;
    memcpy(buf, data + 1, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
      if (buf[i] == '\n' || buf[i] == '\0') buf[i] = ' ';
  }
  char *json = NULL;
  mn_status st = mn_chain_run(buf, dev, &json);
  if (getenv("MN_FUZZ_VIEWS_PRINT")) printf("%s\n  -> %.200s\n", buf, json ? json : "");
  if (st == MN_OK) ran_ok++;
  else if (st == MN_ERR_FORMAT) unparsed++;
  else refused++;
  int bad = st == MN_ERR_INTERNAL || json == NULL || (st != MN_OK && strstr(json, "\"error\": \"\"") != NULL);
  if (bad) fprintf(stderr, "chain broke an invariant (%s): %s\n  -> %s\n", mn_status_name(st), buf, json ? json : "");
  free(json);
  return bad;
}

#ifdef MN_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (check_input(data, size, mn_device_cpu())) abort();
  return 0;
}
#else
int main(int argc, char **argv) {
  long iterations = argc > 1 ? atol(argv[1]) : 100000;
  mn_fuzz_seed(argc > 2 ? strtoull(argv[2], NULL, 10) : 0x9e3779b97f4a7c15ull);
  mn_sim_config_t c = mn_sim_config_default();
  c.device_count = 1;
  if (mn_sim_configure(&c) != MN_OK) return 1;
  int failures = 0;
  uint8_t buf[96];
  for (long i = 0; i < iterations; i++) {
    size_t len = 1 + (size_t)(mn_fuzz_rng() % (i % 2 ? 24 : sizeof buf));
    for (size_t n = 0; n < len; n++) buf[n] = (uint8_t)mn_fuzz_rng();
    buf[0] &= (uint8_t)(i % 8 == 7 ? 0xff : 0xfe); /* mostly structured chains */
    /* Every 16th input also runs on the simulated GPU. */
    failures += check_input(buf, len, mn_device_cpu());
    if (i % 16 == 0) failures += check_input(buf, len, mn_device_sim(0));
  }
  printf("%ld inputs (%ld chains ran, %ld refused by an op, %ld did not parse), %d broke an invariant\n", iterations,
         ran_ok, refused, unparsed, failures);
  return failures ? 1 : 0;
}
#endif
