/* tests/fuzz_trace.c: fuzzes the trace reader (versions 1 to 4) and the RMM CSV
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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_driver.h"
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

static int accepts(uint8_t *data, size_t size) {
  mn_trace_t *t = NULL;
  int ok = mn_trace_parse((const char *)data, size, "input", &t) == MN_OK;
  mn_trace_destroy(t);
  return ok;
}

#ifndef MN_TRACE_CORPUS_DIR
#define MN_TRACE_CORPUS_DIR "tests/corpus/trace"
#endif

/* Tokens that reach deeper parser states when spliced in. */
static const char *const TOKENS[] = {
    "mnemo-trace 1\n", "meta k v\n", "pre alloc 0 0x10 16\n", "0 alloc 0 0x10 16\n",
    "1 free_requested 0 0x10 16\n", "end 0\n", "end 1\n", "0x", "18446744073709551615", "18446744073709551616",
    "\r\n", "\t", " ", "#", "\n", "pre segment_alloc 0 0x0 0\n", "0xffffffffffffffff", "\0", "\xff",
    "mnemo-trace 2\n", " 0 1\n", " 2147483648", "Thread,Time,Action,Pointer,Size,Stream\n", ",allocate,",
    ",free,", ",allocate failure,", "1,0.5,allocate,0x10,8,0x0\n", "12:00:01.5", ",",
    /* version 3: frames, stacks, percent escapes, the stack field */
    "mnemo-trace 3\n", "frame 1 0 f n\n", "frame 2 7 - a b\n", "stack 1 1\n", "stack 2 2 1\n", " 0 0 1\n", "%",
    "%2", "%00", "%C3%A9", "%25", "%20", " -", "frame ", "stack ", " 4294967296", "\xc3\xa9",
    /* version 4: annotate lines (stages, stack ids, names) among the entries */
    "mnemo-trace 4\n", "annotate 0 0 mark 0 x\n", "annotate 5 1 start 1 a%20b\n", "annotate 9 0 end 2\n",
    "annotate ", " start ", " end ", " mark ", " begin ", "annotate 0 0 mark 0 %zz\n", "end 2\n"};

static const mn_fuzz_driver_t DRIVER = {
    .corpus_dir = MN_TRACE_CORPUS_DIR,
    .check = check_input,
    .accepts = accepts,
    .tokens = TOKENS,
    .ntokens = sizeof TOKENS / sizeof TOKENS[0],
};

MN_FUZZ_ENTRY(DRIVER)
