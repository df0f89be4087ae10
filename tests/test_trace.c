/* tests/test_trace.c: the trace format (docs/TRACE_FORMAT.md): parser accepts and
 * rejects with line numbers, writer round trip, version 3 (frames, stacks,
 * percent-encoding, interning, the writer's cuts), version 4 (annotations
 * among the entries, their errors, host faults), recorder sink, replay on SIM;
 * 100k meta keys parse and write in linear time; the readers (trace, RMM CSV)
 * and the writer refuse a FIFO, a folder or a device at once; mn_report_build
 * refuses bad input and leaves the SIM device as found; the events' clock
 * (runtime/clock.c) against clock_gettime, on one thread and on four. */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mn_test.h"
#include "runtime/clock.h"
#include "runtime/hostmem.h"

#define MiB ((uint64_t)1 << 20)

static mn_device_t SIM0;

static mn_status parse_str(const char *text, mn_trace_t **out) {
  return mn_trace_parse(text, strlen(text), "t.trace", out);
}

static size_t sim_mapped(void) {
  mn_sim_stats_t s;
  memset(&s, 0, sizeof s);
  MN_CHECK_OK(mn_sim_get_stats(SIM0, &s));
  return s.mapped_bytes;
}

/* Whether the caching allocator in this build is the real one (it keeps stats). */
static bool have_caching(void) {
  mn_allocator_t *a = NULL;
  if (mn_caching_allocator_create(SIM0, NULL, &a) != MN_OK) return false;
  mn_alloc_stats_t s;
  bool ok = mn_allocator_get_stats(a, &s) == MN_OK;
  mn_allocator_destroy(a);
  mn_clear_error();
  return ok;
}

static const char GOOD[] =
    "mnemo-trace 1\n"
    "# a comment\n"
    "meta source unit test\n"
    "meta empty\n"
    "meta torch_peak_reserved 12345\n"
    "\n"
    "pre segment_alloc 0 0x1000000 20971520\n"
    "pre alloc 0 0x1000000 4194304 4194304\n"
    "0 segment_alloc 0 0x2000000 2097152\n"
    "5 alloc 0 0x2000000 1048576\n"
    "  7\talloc 7 0X1400000 3145728 3145728  \n"
    "9 free_requested 0 0x2000000 1048576\r\n"
    "9 free_completed 0 0x2000000 1048576\n"
    "12 alloc 0 0x2000000 2097152\n"
    "13 free_requested 7 0x1400000 3145728\n"
    "14 free_requested 0 0x2000000 2097152\n"
    "15 free_requested 0 0x1000000 4194304\n"
    "16 oom 0 0x0 99\n"
    "end 12\n"
    "\n";

MN_TEST(parse_good) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(parse_str(GOOD, &t));
  if (!t) return;
  MN_CHECK(t->version == 1 && t->nentries == 12 && t->nmeta == 3);
  MN_CHECK(!strcmp(mn_trace_meta_get(t, "source"), "unit test"));
  MN_CHECK(!strcmp(mn_trace_meta_get(t, "empty"), ""));
  MN_CHECK(mn_trace_meta_get(t, "nope") == NULL);
  uint64_t v = 0;
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_peak_reserved", &v));
  MN_CHECK(v == 12345);
  MN_CHECK_ERR(mn_trace_meta_get_u64(t, "source", &v), MN_ERR_FORMAT, "source");
  MN_CHECK_ERR(mn_trace_meta_get_u64(t, "nope", &v), MN_ERR_NOT_FOUND, "nope");
  const mn_trace_entry_t *e = t->entries;
  MN_CHECK(e[0].pre && e[0].action == MN_TRACE_SEGMENT_ALLOC && e[0].line == 7);
  MN_CHECK(e[1].pre && e[1].action == MN_TRACE_ALLOC && e[1].address == 0x1000000 && e[1].size == 4 * MiB &&
           e[1].block_size == 4 * MiB);
  MN_CHECK(!e[3].pre && e[3].time_us == 5 && e[3].block_size == 0 && e[3].line == 10);
  MN_CHECK(e[4].stream == 7 && e[4].address == 0x1400000 && e[4].time_us == 7);
  MN_CHECK(e[5].action == MN_TRACE_FREE_REQUESTED && e[5].line == 12); /* CRLF accepted */
  MN_CHECK(e[11].action == MN_TRACE_OOM && e[11].size == 99);
  MN_CHECK_OK(mn_trace_validate(t));
  mn_trace_destroy(t);
  /* Maximal numbers parse. */
  MN_CHECK_OK(parse_str("mnemo-trace 1\n18446744073709551615 alloc 18446744073709551615 0xFFFFFFFFFFFFFFFF "
                        "18446744073709551615\nend 1\n", &t));
  if (t) MN_CHECK(t->entries[0].address == UINT64_MAX && t->entries[0].size == UINT64_MAX);
  mn_trace_destroy(t);
  MN_CHECK_OK(parse_str("mnemo-trace 1\nend 0\n", &t));
  if (t) MN_CHECK(t->nentries == 0);
  mn_trace_destroy(t);
}

typedef struct bad_case_s {
  const char *text;
  const char *needle; /* must appear in the message (line numbers included) */
} bad_case_t;

MN_TEST(parse_rejects_with_line_numbers) {
  static const bad_case_t cases[] = {
      {"mnemo-trace 1\n", "t.trace:1: truncated file: no end line"},
      {"hello\nend 0\n", "t.trace:1: not a mnemo trace"},
      {"# comment first\nmnemo-trace 1\nend 0\n", "t.trace:1: not a mnemo trace"},
      {"mnemo-trace 5\nend 0\n", "t.trace:1: unsupported trace version 5"},
      {"mnemo-trace 1\n0 alloc 0 0x10 8 0 1\nend 1\n", "t.trace:2: event line has 7 fields, expected 5 to 6"},
      {"mnemo-trace 2\n0 alloc 0 0x10 8 0 x\nend 1\n", "t.trace:2: device \"x\" is not a decimal"},
      {"mnemo-trace x\nend 0\n", "t.trace:1: bad version line"},
      {"mnemo-trace 1 1\nend 0\n", "t.trace:1: bad version line"},
      {"mnemo-trace 1\nend 0", "t.trace:2: truncated file: the last line has no newline"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\n", "t.trace:2: truncated file: no end line after 1"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\nend 2\n", "t.trace:3: end line counts 2"},
      {"mnemo-trace 1\nend\n", "t.trace:2: bad end line"},
      {"mnemo-trace 1\nend 0\n0 alloc 0 0x10 16\n", "t.trace:3: text after the end line"},
      {"mnemo-trace 1\nend 0\n# late comment\n", "t.trace:3: text after the end line"},
      {"mnemo-trace 1\nmeta a b\n0 malloc 0 0x10 16\nend 1\n", "t.trace:3: unknown action \"malloc\""},
      {"mnemo-trace 1\n0 alloc 0 10 16\nend 1\n", "t.trace:2: address \"10\""},
      {"mnemo-trace 1\n0 alloc 0 0x 16\nend 1\n", "t.trace:2: address"},
      {"mnemo-trace 1\n0 alloc 0 0x10000000000000000 16\nend 1\n", "t.trace:2: address"},
      {"mnemo-trace 1\n0 alloc 0 0xg 16\nend 1\n", "t.trace:2: address"},
      {"mnemo-trace 1\n0 alloc 0 0x10 18446744073709551616\nend 1\n", "t.trace:2: size"},
      {"mnemo-trace 1\n0 alloc 0 0x10 -5\nend 1\n", "t.trace:2: size"},
      {"mnemo-trace 1\n0 alloc -1 0x10 5\nend 1\n", "t.trace:2: stream"},
      {"mnemo-trace 1\n0x5 alloc 0 0x10 5\nend 1\n", "t.trace:2: time"},
      {"mnemo-trace 1\n0 alloc 0 0x10 5 x\nend 1\n", "t.trace:2: block_size"},
      {"mnemo-trace 1\n0 alloc 0 0x10\nend 1\n", "t.trace:2: event line has 4 fields"},
      {"mnemo-trace 1\n0 alloc 0 0x10 1 2 3\nend 1\n", "t.trace:2: event line has 7 fields"},
      {"mnemo-trace 1\n0 alloc 0 0x10 1 2 3 4 5 6\nend 1\n", "t.trace:2: event line has"},
      {"mnemo-trace 1\n0 alloc 0 0x10 0\nend 1\n", "t.trace:2: alloc of 0 bytes"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\nmeta k v\nend 1\n", "t.trace:3: meta line after"},
      {"mnemo-trace 1\nmeta k v\nmeta k w\nend 0\n", "t.trace:3: duplicate meta key k"},
      {"mnemo-trace 1\nmeta k=v 1\nend 0\n", "t.trace:2: meta key \"k=v\""},
      {"mnemo-trace 1\nmeta\nend 0\n", "t.trace:2: meta line without a key"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\npre alloc 0 0x20 16\nend 2\n", "t.trace:3: pre line after an event"},
      {"mnemo-trace 1\npre free_requested 0 0x20 16\nend 1\n", "t.trace:2: pre line with action free_requested"},
      {"mnemo-trace 1\npre alloc 0 0x20\nend 1\n", "t.trace:2: pre line has 4 fields"},
      {"mnemo-trace 1\nfoo 1 2\nend 0\n", "t.trace:2: unknown line kind \"foo\""},
      {"mnemo-trace 1\nmeta\xff k v\nend 0\n", "t.trace:2: byte 0xff at column 5"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\xc3\xa9\nend 1\n", "t.trace:2: byte 0xc3 at column 18"},
      /* liveness */
      {"mnemo-trace 1\n0 alloc 0 0x10 16\n1 alloc 0 0x10 16\nend 2\n",
       "t.trace:3: alloc of 0x10, which is already live (allocated at t.trace:2)"},
      {"mnemo-trace 1\npre alloc 0 0x10 16\n1 alloc 0 0x10 16\nend 2\n", "t.trace:3: alloc of 0x10"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\n1 free_requested 0 0x20 16\nend 2\n",
       "t.trace:3: free_requested of 0x20, which is not live"},
      {"mnemo-trace 1\n0 alloc 0 0x10 16\n1 free_requested 0 0x10 16\n2 free_requested 0 0x10 16\nend 3\n",
       "t.trace:4: free_requested of 0x10"},
      /* the first offence in file order is the one reported */
      {"mnemo-trace 1\n0 alloc 0 0x90 16\n0 free_requested 0 0x30 16\n0 alloc 0 0x90 16\nend 3\n",
       "t.trace:3: free_requested of 0x30"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mn_trace_t *t = (mn_trace_t *)&cases[i]; /* must stay untouched */
    mn_trace_t *before = t;
    MN_CHECK_ERR(parse_str(cases[i].text, &t), MN_ERR_FORMAT, cases[i].needle);
    MN_CHECK(t == before);
  }
  mn_trace_t *t = NULL;
  /* Embedded NUL (strlen cannot be used). */
  static const char nul[] = "mnemo-trace 1\n0 alloc 0 0x10 16\0\nend 1\n";
  MN_CHECK_ERR(mn_trace_parse(nul, sizeof nul - 1, "n.trace", &t), MN_ERR_FORMAT, "n.trace:2: NUL byte");
  MN_CHECK_ERR(mn_trace_parse("", 0, NULL, &t), MN_ERR_FORMAT, "<memory>: empty file");
  /* A line over the limit. */
  size_t n = 14 + MN_TRACE_LINE_MAX + 1 + 7;
  char *big = malloc(n + 1);
  memcpy(big, "mnemo-trace 1\n", 14);
  memset(big + 14, '#', MN_TRACE_LINE_MAX + 1);
  memcpy(big + 14 + MN_TRACE_LINE_MAX + 1, "\nend 0\n", 7);
  MN_CHECK_ERR(mn_trace_parse(big, n, "big", &t), MN_ERR_FORMAT, "big:2: line longer than 4096");
  big[14 + MN_TRACE_LINE_MAX] = '\n'; /* exactly at the limit: fine */
  memcpy(big + 14 + MN_TRACE_LINE_MAX + 1, "end 0\n", 6);
  MN_CHECK_OK(mn_trace_parse(big, n - 1, "big", &t));
  mn_trace_destroy(t);
  free(big);
  MN_CHECK(t != NULL);
}

static char *tmp_path(const char *tag) {
  static char buf[4][256];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 256, "%s/mnemo_test_trace_%d_%s.trace", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(),
           tag);
  return p;
}

MN_TEST(read_files_and_truncation) {
  mn_trace_t *t = NULL;
  MN_CHECK_ERR(mn_trace_read("/nonexistent/dir/x.trace", &t), MN_ERR_IO, "/nonexistent/dir/x.trace");
  const char *p = tmp_path("read");
  FILE *f = fopen(p, "wb");
  fwrite(GOOD, 1, sizeof GOOD - 1, f);
  fclose(f);
  MN_CHECK_OK(mn_trace_read(p, &t));
  if (t) MN_CHECK(t->nentries == 12);
  mn_trace_destroy(t);
  /* Cut the file at every length: each prefix is refused (never accepted, never a crash). */
  for (size_t cut = 0; cut < sizeof GOOD - 3; cut++) {
    t = NULL;
    mn_status st = mn_trace_parse(GOOD, cut, p, &t);
    MN_CHECK(st == MN_ERR_FORMAT && t == NULL);
  }
  /* A file truncated in the middle of a line names the file and the line. */
  f = fopen(p, "wb");
  fwrite(GOOD, 1, 200, f);
  fclose(f);
  char want[300];
  snprintf(want, sizeof want, "%s:9: truncated", p);
  MN_CHECK_ERR(mn_trace_read(p, &t), MN_ERR_FORMAT, want);
  remove(p);
}

MN_TEST(write_read_round_trip) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  MN_CHECK_OK(mn_trace_meta_set(t, "source", "  round trip  "));
  MN_CHECK_OK(mn_trace_meta_set(t, "device", "sim:0"));
  MN_CHECK_OK(mn_trace_meta_set(t, "device", "sim:1")); /* replaced */
  MN_CHECK_OK(mn_trace_meta_set(t, "blank", ""));
  MN_CHECK_ERR(mn_trace_meta_set(t, "bad key", "x"), MN_ERR_INVALID_ARGUMENT, "bad key");
  MN_CHECK_ERR(mn_trace_meta_set(t, "k", "a\nb"), MN_ERR_INVALID_ARGUMENT, "line break");
  mn_trace_entry_t e = {.action = MN_TRACE_SEGMENT_ALLOC, .pre = true, .address = 0x100000, .size = 20 * MiB};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_ALLOC, .pre = true, .address = 0x100000, .size = 1000, .block_size = 1024};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_ALLOC, .time_us = 3, .stream = 42, .address = UINT64_MAX, .size = 5};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_REQUESTED, .time_us = 2, .stream = 42, .address = UINT64_MAX, .size = 5};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_EMPTY_CACHE, .time_us = 9};
  MN_CHECK_OK(mn_trace_append(t, &e));
  /* Append refuses what the format forbids. */
  e = (mn_trace_entry_t){.action = MN_TRACE_ALLOC, .pre = true, .address = 1, .size = 1};
  MN_CHECK_ERR(mn_trace_append(t, &e), MN_ERR_INVALID_STATE, "pre entry after");
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_COMPLETED, .pre = true};
  MN_CHECK_ERR(mn_trace_append(t, &e), MN_ERR_INVALID_ARGUMENT, "pre entry must be");
  e = (mn_trace_entry_t){.action = MN_TRACE_ALLOC, .size = 0};
  MN_CHECK_ERR(mn_trace_append(t, &e), MN_ERR_INVALID_ARGUMENT, "0 bytes");
  e = (mn_trace_entry_t){.action = (mn_trace_action)77, .size = 1};
  MN_CHECK_ERR(mn_trace_append(t, &e), MN_ERR_INVALID_ARGUMENT, "77");
  MN_CHECK(t->nentries == 5);

  const char *p = tmp_path("rt");
  MN_CHECK_OK(mn_trace_write(t, p));
  mn_trace_t *u = NULL;
  MN_CHECK_OK(mn_trace_read(p, &u));
  if (u) {
    MN_CHECK(u->nentries == t->nentries && u->nmeta == 3);
    for (size_t i = 0; i < t->nentries && i < u->nentries; i++) {
      const mn_trace_entry_t *a = &t->entries[i], *b = &u->entries[i];
      MN_CHECK(a->action == b->action && a->pre == b->pre && a->time_us == b->time_us && a->stream == b->stream &&
               a->address == b->address && a->size == b->size && a->block_size == b->block_size);
      MN_CHECK(b->line == i + 5); /* version + 3 meta lines */
    }
    MN_CHECK(!strcmp(mn_trace_meta_get(u, "source"), "round trip"));
    MN_CHECK(!strcmp(mn_trace_meta_get(u, "device"), "sim:1"));
    MN_CHECK(!strcmp(mn_trace_meta_get(u, "blank"), ""));
    /* format -> parse -> format gives the same text. */
    char *t1 = NULL, *t2 = NULL;
    size_t l1 = 0, l2 = 0;
    MN_CHECK_OK(mn_trace_format(t, &t1, &l1));
    MN_CHECK_OK(mn_trace_format(u, &t2, &l2));
    MN_CHECK(t1 && t2 && l1 == l2 && !memcmp(t1, t2, l1) && strlen(t1) == l1);
    free(t1);
    free(t2);
  }
  mn_trace_destroy(u);
  remove(p);

  /* The writer refuses a trace that would not read back, and writes nothing. */
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_REQUESTED, .time_us = 10, .address = 0x777, .size = 1};
  MN_CHECK_OK(mn_trace_append(t, &e));
  MN_CHECK_ERR(mn_trace_write(t, p), MN_ERR_INVALID_ARGUMENT, "free_requested of 0x777, which is not live");
  MN_CHECK(access(p, F_OK) != 0);
  MN_CHECK_ERR(mn_trace_validate(t), MN_ERR_FORMAT, "entry 5: free_requested of 0x777");
  MN_CHECK_ERR(mn_trace_write(t, "/nonexistent/dir/x.trace"), MN_ERR_INVALID_ARGUMENT, "0x777");
  mn_trace_destroy(t);
  MN_CHECK_OK(mn_trace_create(&t));
  MN_CHECK_ERR(mn_trace_write(t, "/nonexistent/dir/x.trace"), MN_ERR_IO, "/nonexistent/dir/x.trace.tmp");
  mn_trace_destroy(t);
  mn_trace_action a;
  MN_CHECK_OK(mn_trace_action_parse("segment_unmap", &a));
  MN_CHECK(a == MN_TRACE_SEGMENT_UNMAP);
  MN_CHECK_ERR(mn_trace_action_parse("snapshot", &a), MN_ERR_FORMAT, "snapshot");
}

/* 100k meta keys took 36 s with the old pairwise check; the
 * speed is bench_storage's load_many/trace, this test checks the answers. */
#define MANY 100000

MN_TEST(many_meta_keys) {
  /* "mnemo-trace 1", MANY "meta kNNNNNN vNNNNNN" lines, "end 0" */
  size_t cap = 32 + (size_t)MANY * 22, n = 0;
  char *text = malloc(cap);
  if (!text) return;
  n += (size_t)snprintf(text + n, cap - n, "mnemo-trace 1\n");
  for (int i = 0; i < MANY; i++) n += (size_t)snprintf(text + n, cap - n, "meta k%06d v%06d\n", i, i);
  n += (size_t)snprintf(text + n, cap - n, "end 0\n");
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_parse(text, n, "t.trace", &t));
  char *out = NULL;
  size_t len = 0;
  if (t) MN_CHECK_OK(mn_trace_format(t, &out, &len));
  if (t) {
    MN_CHECK(t->nmeta == MANY && strcmp(t->meta[MANY - 1].key, "k099999") == 0);
    MN_CHECK(!strcmp(mn_trace_meta_get(t, "k054321"), "v054321"));
    MN_CHECK(out && len == n && memcmp(out, text, n) == 0); /* the writer gives the same text back */
  }
  free(out);
  /* a repeated key in the trace to write is refused too */
  if (t) {
    char *k = t->meta[MANY - 1].key;
    t->meta[MANY - 1].key = t->meta[0].key;
    out = NULL;
    MN_CHECK_ERR(mn_trace_format(t, &out, &len), MN_ERR_INVALID_ARGUMENT, "duplicate meta key k000000");
    MN_CHECK(out == NULL);
    t->meta[MANY - 1].key = k;
  }
  mn_trace_destroy(t);
  /* a duplicate at the very end is still found, with its line */
  char *last = strstr(text, "meta k099999");
  MN_CHECK(last != NULL);
  if (last) memcpy(last, "meta k000000", 12);
  t = NULL;
  MN_CHECK_ERR(mn_trace_parse(text, n, "t.trace", &t), MN_ERR_FORMAT, "t.trace:100001: duplicate meta key k000000");
  MN_CHECK(t == NULL);
  free(text);
}

/* ---- version 3: frames and stacks ---------------------------------------------- */

/* Every frame, stack and entry of a and b agree (the line numbers aside). */
static void same_v3(const mn_trace_t *a, const mn_trace_t *b) {
  MN_CHECK(a->nframes == b->nframes && a->nstacks == b->nstacks && a->nentries == b->nentries);
  for (uint32_t i = 1; i <= a->nframes && i <= b->nframes; i++) {
    const mn_trace_frame_t *x = mn_trace_frame_get(a, i), *y = mn_trace_frame_get(b, i);
    MN_CHECK(x && y && x->line == y->line && !strcmp(x->file, y->file) && !strcmp(x->name, y->name));
  }
  for (uint32_t s = 1; s <= a->nstacks && s <= b->nstacks; s++) {
    const uint32_t *x = NULL, *y = NULL;
    size_t nx = mn_trace_stack_get(a, s, &x), ny = mn_trace_stack_get(b, s, &y);
    MN_CHECK(nx >= 1 && nx == ny && !memcmp(x, y, nx * sizeof *x));
  }
  for (size_t i = 0; i < a->nentries && i < b->nentries; i++) {
    const mn_trace_entry_t *x = &a->entries[i], *y = &b->entries[i];
    MN_CHECK(x->action == y->action && x->pre == y->pre && x->time_us == y->time_us && x->address == y->address &&
             x->size == y->size && x->block_size == y->block_size && x->device == y->device && x->stack == y->stack);
  }
}

/* Frames with blanks, %, tabs and UTF-8 in names and files, an unknown file,
 * a file named "-", stacks, entries with and without one (pre lines too), a
 * device: written as version 3, read back the same, the text stable. */
MN_TEST(v3_round_trip) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  if (!t) return;
  MN_CHECK_OK(mn_trace_meta_set(t, "source", "v3 test"));
  uint32_t f[8] = {0};
  MN_CHECK_OK(mn_trace_frame_add(t, "/src/my model.py", 42, "forward(self, x: Tensor)", &f[0]));
  MN_CHECK_OK(mn_trace_frame_add(t, "", 0, "", &f[1]));                          /* unknown, no name */
  MN_CHECK_OK(mn_trace_frame_add(t, "-", 7, " 100%\tdone ", &f[2]));            /* a file named "-" */
  MN_CHECK_OK(mn_trace_frame_add(t, "/caf\xc3\xa9/\xe6\xa8\xa1.py", 3, "na\xc3\xafve  fn", &f[3])); /* UTF-8 */
  MN_CHECK_OK(mn_trace_frame_add(t, NULL, 0, NULL, &f[4]));                      /* = frame 2 */
  MN_CHECK(f[0] == 1 && f[1] == 2 && f[2] == 3 && f[3] == 4 && f[4] == 2 && t->nframes == 4);
  uint32_t s1 = 0, s2 = 0;
  uint32_t ids1[] = {1, 2, 3, 4}, ids2[] = {4};
  MN_CHECK_OK(mn_trace_stack_add(t, ids1, 4, &s1));
  MN_CHECK_OK(mn_trace_stack_add(t, ids2, 1, &s2));
  MN_CHECK(s1 == 1 && s2 == 2 && t->nstacks == 2);
  mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .pre = true, .address = 0x100, .size = 10, .stack = 2};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_ALLOC, .time_us = 5, .stream = 3, .address = 0x200, .size = 20,
                         .block_size = 512, .device = 1, .stack = 1};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_REQUESTED, .time_us = 6, .stream = 3, .address = 0x200, .size = 20,
                         .device = 1};
  MN_CHECK_OK(mn_trace_append(t, &e));
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_REQUESTED, .time_us = 7, .address = 0x100, .size = 10, .stack = 2};
  MN_CHECK_OK(mn_trace_append(t, &e));
  char *text = NULL;
  size_t len = 0;
  MN_CHECK_OK(mn_trace_format(t, &text, &len));
  static const char want[] = "mnemo-trace 3\n"
                             "meta source v3 test\n"
                             "frame 1 42 /src/my%20model.py forward(self, x: Tensor)\n"
                             "frame 2 0 -\n"
                             "frame 3 7 %2D %20100%25%09done%20\n"
                             "frame 4 3 /caf%C3%A9/%E6%A8%A1.py na%C3%AFve  fn\n"
                             "stack 1 1 2 3 4\n"
                             "stack 2 4\n"
                             "pre alloc 0 0x100 10 0 0 2\n"
                             "5 alloc 3 0x200 20 512 1 1\n"
                             "6 free_requested 3 0x200 20 0 1 0\n"
                             "7 free_requested 0 0x100 10 0 0 2\n"
                             "end 4\n";
  MN_CHECK(text && len == sizeof want - 1 && !strcmp(text, want));
  if (text && strcmp(text, want)) printf("  got:\n%s", text);
  mn_trace_t *u = NULL;
  if (text) MN_CHECK_OK(mn_trace_parse(text, len, "v3.trace", &u));
  if (u) {
    MN_CHECK(u->version == 3);
    same_v3(t, u);
    MN_CHECK(!strcmp(u->frames[2].file, "-") && !strcmp(u->frames[2].name, " 100%\tdone "));
    MN_CHECK(!strcmp(u->frames[1].file, "") && !strcmp(u->frames[1].name, ""));
    MN_CHECK(u->entries[0].pre && u->entries[0].stack == 2 && u->entries[1].line == 10);
    /* What was read is interned as well: adding a frame or stack it has gives its id. */
    uint32_t id = 0;
    MN_CHECK_OK(mn_trace_frame_add(u, "/caf\xc3\xa9/\xe6\xa8\xa1.py", 3, "na\xc3\xafve  fn", &id));
    MN_CHECK(id == 4 && u->nframes == 4);
    MN_CHECK_OK(mn_trace_stack_add(u, ids1, 4, &id));
    MN_CHECK(id == 1 && u->nstacks == 2);
    char *text2 = NULL;
    size_t len2 = 0;
    MN_CHECK_OK(mn_trace_format(u, &text2, &len2));
    MN_CHECK(text2 && len2 == len && !memcmp(text, text2, len));
    free(text2);
  }
  mn_trace_destroy(u);
  /* Through a file too. */
  const char *p = tmp_path("v3");
  MN_CHECK_OK(mn_trace_write(t, p));
  u = NULL;
  MN_CHECK_OK(mn_trace_read(p, &u));
  if (u) same_v3(t, u);
  mn_trace_destroy(u);
  remove(p);
  free(text);
  mn_trace_destroy(t);

  /* A reader's liberties: lowercase escapes, extra blanks, leading zeros, an
   * omitted stack field, a repeated frame or stack (kept under its own id). */
  static const char loose[] = "mnemo-trace 3\n"
                              "frame 1 0 a%2fb   spaced  name  \t\n"
                              "frame 002 10 a%2Fb spaced  name\n"
                              "frame 3 1 %2d\n"
                              "  stack 1 2 1  \n"
                              "stack 2 2 1\n"
                              "stack 3 3\n"
                              "pre alloc 0 0x10 1\n"
                              "1 alloc 0 0x20 1 0 0\n"
                              "2 alloc 0 0x30 1 0 0 03\n"
                              "end 3\n";
  u = NULL;
  MN_CHECK_OK(mn_trace_parse(loose, sizeof loose - 1, "loose", &u));
  if (u) {
    MN_CHECK(u->nframes == 3 && !strcmp(u->frames[0].file, "a/b") && !strcmp(u->frames[0].name, "spaced  name"));
    MN_CHECK(u->frames[1].line == 10 && !strcmp(u->frames[2].file, "-") && !strcmp(u->frames[2].name, ""));
    MN_CHECK(u->nstacks == 3 && u->entries[0].stack == 0 && u->entries[1].stack == 0 && u->entries[2].stack == 3);
    const uint32_t *ids = NULL;
    MN_CHECK(mn_trace_stack_get(u, 2, &ids) == 2 && ids[0] == 2 && ids[1] == 1);
    MN_CHECK(mn_trace_stack_get(u, 0, &ids) == 0 && mn_trace_stack_get(u, 4, &ids) == 0);
    MN_CHECK(mn_trace_frame_get(u, 0) == NULL && mn_trace_frame_get(u, 4) == NULL);
    char *out = NULL;
    size_t olen = 0;
    MN_CHECK_OK(mn_trace_format(u, &out, &olen));
    MN_CHECK(out && strstr(out, "frame 1 0 a/b spaced  name\nframe 2 10 a/b spaced  name\nframe 3 1 %2D\n"
                                "stack 1 2 1\nstack 2 2 1\nstack 3 3\npre alloc 0 0x10 1 0 0 0\n"));
    free(out);
  }
  mn_trace_destroy(u);
  /* Versions 1 and 2 are written as before when there are no frames. */
  u = NULL;
  MN_CHECK_OK(parse_str("mnemo-trace 3\n1 alloc 0 0x20 1 0 1 0\nend 1\n", &u));
  if (u) {
    char *out = NULL;
    MN_CHECK_OK(mn_trace_format(u, &out, NULL));
    MN_CHECK(out && !strcmp(out, "mnemo-trace 2\n1 alloc 0 0x20 1 0 1\nend 1\n"));
    free(out);
  }
  mn_trace_destroy(u);
}

MN_TEST(v3_rejects_with_line_numbers) {
  static const bad_case_t cases[] = {
      {"mnemo-trace 3\nframe 2 0 f n\nend 0\n", "t.trace:2: frame id 2, expected 1"},
      {"mnemo-trace 3\nframe 1 0 f n\nframe 5 0 f m\nend 0\n", "t.trace:3: frame id 5, expected 2"},
      {"mnemo-trace 3\nframe x 0 f n\nend 0\n", "t.trace:2: frame id \"x\" is not a decimal"},
      {"mnemo-trace 3\nframe 1 4294967296 f n\nend 0\n", "t.trace:2: frame line number \"4294967296\""},
      {"mnemo-trace 3\nframe 1 0\nend 0\n", "t.trace:2: frame line without a file"},
      {"mnemo-trace 3\nframe\nend 0\n", "t.trace:2: frame line without an id"},
      {"mnemo-trace 3\nframe 1 0 a%2 n\nend 0\n", "t.trace:2: bad % escape \"%2\" in the frame's file"},
      {"mnemo-trace 3\nframe 1 0 f n%zz\nend 0\n", "t.trace:2: bad % escape \"%zz\" in the frame's name"},
      {"mnemo-trace 3\nframe 1 0 f 100%\nend 0\n", "t.trace:2: bad % escape \"%\" in the frame's name"},
      {"mnemo-trace 3\nframe 1 0 f%00 n\nend 0\n", "t.trace:2: %00 (a NUL byte) in the frame's file"},
      {"mnemo-trace 3\nframe 1 0 f a\tb\nend 0\n", "t.trace:2: tab inside the frame's name"},
      {"mnemo-trace 3\nframe 1 0 f caf\xc3\xa9\nend 0\n", "t.trace:2: byte 0xc3 at column"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 2\nend 0\n", "t.trace:3: stack 1: frame \"2\" is not a frame id"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 0\nend 0\n", "t.trace:3: stack 1: frame \"0\" is not a frame id"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 1 x\nend 0\n", "t.trace:3: stack 1: frame \"x\""},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1\nend 0\n", "t.trace:3: stack 1 has no frames"},
      {"mnemo-trace 3\nstack\nend 0\n", "t.trace:2: stack line without an id"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 2 1\nend 0\n", "t.trace:3: stack id 2, expected 1"},
      {"mnemo-trace 3\n0 alloc 0 0x10 1 0 0 1\nend 1\n", "t.trace:2: stack \"1\" is not 0 or a stack id"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 1\n0 alloc 0 0x10 1 0 0 2\nend 1\n",
       "t.trace:4: stack \"2\" is not 0 or a stack id (the file has 1 stacks)"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 1\npre alloc 0 0x10 1 0 0 2\nend 1\n", "t.trace:4: stack \"2\""},
      {"mnemo-trace 3\n0 alloc 0 0x10 1 0 0 0 9\nend 1\n", "t.trace:2: event line has 9 fields, expected 5 to 8"},
      {"mnemo-trace 2\n0 alloc 0 0x10 1 0 0 0\nend 1\n", "t.trace:2: event line has 8 fields, expected 5 to 7"},
      {"mnemo-trace 2\npre alloc 0 0x10 1 0 0 0\nend 1\n", "t.trace:2: pre line has 8 fields, expected 5 to 7"},
      {"mnemo-trace 1\nframe 1 0 f n\nend 0\n", "t.trace:2: frame line in a version 1 file"},
      {"mnemo-trace 2\nstack 1 1\nend 0\n", "t.trace:2: stack line in a version 2 file"},
      {"mnemo-trace 3\npre alloc 0 0x10 1\nframe 1 0 f n\nend 1\n", "t.trace:3: frame line after the first pre line"},
      {"mnemo-trace 3\n0 alloc 0 0x10 1\nframe 1 0 f n\nend 1\n", "t.trace:3: frame line after the first event line"},
      {"mnemo-trace 3\nframe 1 0 f n\nstack 1 1\nframe 2 0 f n\nend 0\n",
       "t.trace:4: frame line after the first stack line"},
      {"mnemo-trace 3\nframe 1 0 f n\n0 alloc 0 0x10 1\nstack 1 1\nend 1\n",
       "t.trace:4: stack line after the first event line"},
      {"mnemo-trace 3\nframe 1 0 f n\nmeta k v\nend 0\n", "t.trace:3: meta line after a frame or stack line"},
      {"mnemo-trace 3\nframe 1 0 f n\nend 1\n", "t.trace:3: end line counts 1 pre and event lines, the file has 0"},
      {"mnemo-trace 3\nframes 1 0 f n\nend 0\n", "t.trace:2: unknown line kind \"frames\" (expected meta, frame, stack"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mn_trace_t *t = (mn_trace_t *)&cases[i]; /* must stay untouched */
    mn_trace_t *before = t;
    MN_CHECK_ERR(parse_str(cases[i].text, &t), MN_ERR_FORMAT, cases[i].needle);
    MN_CHECK(t == before);
  }
}

/* The API's checks: interning, unknown ids, the line limit; the writer keeps
 * the innermost MN_TRACE_STACK_MAX frames of a longer stack. */
MN_TEST(v3_interning_and_cuts) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  if (!t) return;
  uint32_t a = 0, b = 0, c = 0, d = 0;
  MN_CHECK_OK(mn_trace_frame_add(t, "x.c", 1, "f", &a));
  MN_CHECK_OK(mn_trace_frame_add(t, "x.c", 1, "f", &b));
  MN_CHECK_OK(mn_trace_frame_add(t, "x.c", 2, "f", &c)); /* another line */
  MN_CHECK_OK(mn_trace_frame_add(t, "x.c", 1, "g", &d)); /* another name */
  MN_CHECK(a == 1 && b == 1 && c == 2 && d == 3 && t->nframes == 3);
  MN_CHECK_OK(mn_trace_frame_add(t, "x.cf", 1, "", &b)); /* "x.c"+"f" is not "x.cf"+"" */
  MN_CHECK(b == 4);
  uint32_t s = 0, s2 = 0, ids[3] = {1, 2, 3};
  MN_CHECK_OK(mn_trace_stack_add(t, ids, 3, &s));
  MN_CHECK_OK(mn_trace_stack_add(t, ids, 3, &s2));
  MN_CHECK(s == 1 && s2 == 1);
  MN_CHECK_OK(mn_trace_stack_add(t, ids, 2, &s2)); /* a prefix is another stack */
  MN_CHECK(s2 == 2 && t->nstacks == 2 && t->stack_start[0] == 0 && t->stack_start[2] == 5);
  uint32_t bad[2] = {1, 5};
  MN_CHECK_ERR(mn_trace_stack_add(t, bad, 2, &s2), MN_ERR_INVALID_ARGUMENT, "frame id 5 (position 1)");
  bad[1] = 0;
  MN_CHECK_ERR(mn_trace_stack_add(t, bad, 2, &s2), MN_ERR_INVALID_ARGUMENT, "frame id 0");
  MN_CHECK_ERR(mn_trace_stack_add(t, ids, 0, &s2), MN_ERR_INVALID_ARGUMENT, "at least one frame");
  MN_CHECK(t->nstacks == 2);
  mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .address = 0x10, .size = 1, .stack = 3};
  MN_CHECK_ERR(mn_trace_append(t, &e), MN_ERR_INVALID_ARGUMENT, "stack 3 is not a stack id (the trace has 2 stacks)");
  MN_CHECK(t->nentries == 0);
  /* Many frames: the tables grow and still find every one. */
  char name[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(name, sizeof name, "fn%d", i);
    MN_CHECK_OK(mn_trace_frame_add(t, "many.c", (uint32_t)i, name, &a));
    if (a != (uint32_t)(5 + i)) {
      MN_CHECK(a == (uint32_t)(5 + i));
      break;
    }
  }
  MN_CHECK_OK(mn_trace_frame_add(t, "many.c", 1234, "fn1234", &a));
  MN_CHECK(a == 5 + 1234 && t->nframes == 5004);
  /* A frame whose line would pass 4096 bytes is refused; one that fits is kept and reads back. */
  size_t room = MN_TRACE_LINE_MAX - strlen("frame 5005 0 f ");
  char *big = malloc(room + 2);
  if (big) {
    memset(big, 'n', room + 1);
    big[room + 1] = '\0';
    MN_CHECK_ERR(mn_trace_frame_add(t, "f", 0, big, &a), MN_ERR_INVALID_ARGUMENT, "over the 4096-byte line");
    big[room] = '\0';
    MN_CHECK_OK(mn_trace_frame_add(t, "f", 0, big, &a));
    MN_CHECK(a == 5005);
    memset(big, '%', room / 3 + 1); /* each escaped to 3 bytes */
    big[room / 3 + 1] = '\0';
    MN_CHECK_ERR(mn_trace_frame_add(t, "g", 0, big, &b), MN_ERR_INVALID_ARGUMENT, "over the 4096-byte line");
    free(big);
  }
  /* A stack of 300 frames is written cut to its innermost 128. */
  uint32_t deep[300];
  for (int i = 0; i < 300; i++) deep[i] = (uint32_t)(5000 - i);
  MN_CHECK_OK(mn_trace_stack_add(t, deep, 300, &s));
  MN_CHECK(s == 3 && mn_trace_stack_get(t, 3, NULL) == 300);
  e.stack = 3;
  MN_CHECK_OK(mn_trace_append(t, &e));
  char *text = NULL;
  size_t len = 0;
  MN_CHECK_OK(mn_trace_format(t, &text, &len));
  mn_trace_t *u = NULL;
  if (text) MN_CHECK_OK(mn_trace_parse(text, len, "cut", &u));
  if (u) {
    const uint32_t *got = NULL;
    MN_CHECK(mn_trace_stack_get(u, 3, &got) == MN_TRACE_STACK_MAX && got[0] == 5000 && got[127] == 5000 - 127);
    MN_CHECK(u->nframes == 5005 && strlen(u->frames[5004].name) == room && u->entries[0].stack == 3);
    mn_trace_destroy(u);
  }
  /* A file's stack of more than 128 frames is read whole (the writer then cuts it). */
  if (text) {
    char *st3 = strstr(text, "stack 3 ");
    MN_CHECK(st3 && strchr(st3, '\n') - st3 < 128 * 6);
  }
  free(text);
  mn_trace_destroy(t);
  size_t cap = 64 + 300 * 12, n = 0;
  char *lines = malloc(cap);
  if (!lines) return;
  n += (size_t)snprintf(lines + n, cap - n, "mnemo-trace 3\nframe 1 0 f a\nframe 2 0 f b\nstack 1");
  for (int i = 0; i < 300; i++) n += (size_t)snprintf(lines + n, cap - n, " %d", 1 + i % 2);
  n += (size_t)snprintf(lines + n, cap - n, "\nend 0\n");
  u = NULL;
  MN_CHECK_OK(mn_trace_parse(lines, n, "long", &u));
  if (u) MN_CHECK(mn_trace_stack_get(u, 1, NULL) == 300);
  mn_trace_destroy(u);
  free(lines);
}

/* Builds a version 3 trace through the API (enough frames and stacks to grow
 * every table twice), formats, parses and formats it again. */
static mn_status v3_workload(void) {
  mn_trace_t *t = NULL, *u = NULL;
  char *text = NULL, *text2 = NULL;
  size_t len = 0, len2 = 0;
  mn_status st = mn_trace_create(&t);
  char name[32];
  uint32_t ids[3], s = 0;
  for (int i = 0; i < 300 && st == MN_OK; i++) {
    snprintf(name, sizeof name, "fn %d%%", i);
    st = mn_trace_frame_add(t, i % 3 ? "a.c" : "", (uint32_t)i, name, &ids[i % 3]);
    if (st == MN_OK && i >= 2) st = mn_trace_stack_add(t, ids, 1 + (size_t)i % 3, &s);
    mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .time_us = (uint64_t)i, .address = 16 * (uint64_t)(i + 1),
                          .size = 8, .stack = s};
    if (st == MN_OK) st = mn_trace_append(t, &e);
  }
  if (st == MN_OK) st = mn_trace_format(t, &text, &len);
  if (st == MN_OK) st = mn_trace_parse(text, len, "sweep", &u);
  if (st == MN_OK) st = mn_trace_format(u, &text2, &len2);
  if (st == MN_OK && (len != len2 || memcmp(text, text2, len) != 0)) st = MN_ERR_INTERNAL;
  free(text);
  free(text2);
  mn_trace_destroy(t);
  mn_trace_destroy(u);
  return st;
}

/* Every host allocation of v3_workload fails in turn: the workload then fails
 * with MN_ERR_OUT_OF_MEMORY and a message (nothing leaks: LSan in the ASan
 * build), and runs clean again after. */
MN_TEST(v3_host_faults) {
  mn__hostmem_fail_nth(INT64_MAX);
  MN_CHECK_OK(v3_workload());
  int64_t calls = mn__hostmem_calls();
  mn__hostmem_fail_nth(0);
  MN_CHECK(calls > 20);
  for (int64_t k = 1; k <= calls; k++) {
    mn__hostmem_fail_nth(k);
    mn_status st = v3_workload();
    bool fired = mn__hostmem_fault_fired();
    mn__hostmem_fail_nth(0);
    MN_CHECK(fired && st == MN_ERR_OUT_OF_MEMORY && strstr(mn_last_error(), "out of host memory"));
    if (!fired || st != MN_ERR_OUT_OF_MEMORY) {
      printf("  fault %lld of %lld: %s %s\n", (long long)k, (long long)calls, mn_status_name(st), mn_last_error());
      break;
    }
  }
  MN_CHECK_OK(v3_workload());
}

/* ---- version 4: annotations ---- */

static void same_annotations(const mn_trace_t *a, const mn_trace_t *b) {
  MN_CHECK(a->nannotations == b->nannotations);
  for (size_t i = 0; i < a->nannotations && i < b->nannotations; i++) {
    const mn_trace_annotation_t *x = &a->annotations[i], *y = &b->annotations[i];
    MN_CHECK(x->time_us == y->time_us && x->entry == y->entry && x->device == y->device && x->stack == y->stack &&
             x->stage == y->stage && !strcmp(x->name, y->name));
  }
}

/* Annotations before the pre lines, between them, among the events and after
 * the last one, with and without a stack, names with blanks, %, a tab, UTF-8
 * and none: written as version 4, read back the same, the text stable. */
MN_TEST(v4_round_trip) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  if (!t) return;
  uint32_t f1 = 0, s1 = 0;
  MN_CHECK_OK(mn_trace_frame_add(t, "train.py", 7, "step", &f1));
  MN_CHECK_OK(mn_trace_stack_add(t, &f1, 1, &s1));
  mn_trace_annotation_t a = {.time_us = 0, .device = 0, .stage = MN_TRACE_ANNOTATION_START, .name = "whole run"};
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  mn_trace_entry_t pre = {.action = MN_TRACE_ALLOC, .pre = true, .address = 0x100, .size = 8};
  MN_CHECK_OK(mn_trace_append(t, &pre));
  a = (mn_trace_annotation_t){.device = 1, .stage = MN_TRACE_ANNOTATION_MARK, .name = "between pre lines",
                              .entry = 99 /* ignored */};
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  pre.address = 0x200;
  MN_CHECK_OK(mn_trace_append(t, &pre));
  mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .time_us = 5, .address = 0x300, .size = 16, .stack = s1};
  MN_CHECK_OK(mn_trace_append(t, &e));
  a = (mn_trace_annotation_t){.time_us = 6, .stage = MN_TRACE_ANNOTATION_START, .stack = s1,
                              .name = " forward 100%\tdone caf\xc3\xa9 "};
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  a = (mn_trace_annotation_t){.time_us = 6, .stage = MN_TRACE_ANNOTATION_MARK, .name = NULL};
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  e = (mn_trace_entry_t){.action = MN_TRACE_FREE_REQUESTED, .time_us = 9, .address = 0x300, .size = 16};
  MN_CHECK_OK(mn_trace_append(t, &e));
  a = (mn_trace_annotation_t){.time_us = 10, .stage = MN_TRACE_ANNOTATION_END, .stack = s1,
                              .name = " forward 100%\tdone caf\xc3\xa9 "};
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  MN_CHECK(t->nannotations == 5 && t->nentries == 4);
  static const size_t want_entry[] = {0, 1, 3, 3, 4};
  for (size_t i = 0; i < 5 && i < t->nannotations; i++) MN_CHECK(t->annotations[i].entry == want_entry[i]);
  MN_CHECK(t->annotations[3].name && t->annotations[3].name[0] == '\0');
  char *text = NULL, *text2 = NULL;
  size_t len = 0, len2 = 0;
  MN_CHECK_OK(mn_trace_format(t, &text, &len));
  if (!text) {
    mn_trace_destroy(t);
    return;
  }
  static const char want[] =
      "mnemo-trace 4\n"
      "frame 1 7 train.py step\n"
      "stack 1 1\n"
      "annotate 0 0 start 0 whole run\n"
      "pre alloc 0 0x100 8 0 0 0\n"
      "annotate 0 1 mark 0 between pre lines\n"
      "pre alloc 0 0x200 8 0 0 0\n"
      "5 alloc 0 0x300 16 0 0 1\n"
      "annotate 6 0 start 1 %20forward 100%25%09done caf%C3%A9%20\n"
      "annotate 6 0 mark 0\n"
      "9 free_requested 0 0x300 16 0 0 0\n"
      "annotate 10 0 end 1 %20forward 100%25%09done caf%C3%A9%20\n"
      "end 9\n";
  MN_CHECK(len == strlen(want) && !strcmp(text, want));
  if (strcmp(text, want)) printf("got:\n%s", text);
  mn_trace_t *u = NULL;
  MN_CHECK_OK(mn_trace_parse(text, len, "v4", &u));
  if (u) {
    MN_CHECK(u->version == 4);
    same_v3(t, u);
    same_annotations(t, u);
    MN_CHECK_OK(mn_trace_format(u, &text2, &len2));
    MN_CHECK(text2 && len2 == len && !memcmp(text, text2, len));
    MN_CHECK_OK(mn_trace_validate(u));
  }
  /* a file (mn_trace_write / mn_trace_read) */
  char *path = tmp_path("v4");
  mn_trace_t *r = NULL;
  MN_CHECK_OK(mn_trace_write(t, path));
  MN_CHECK_OK(mn_trace_read(path, &r));
  if (r) same_annotations(t, r);
  unlink(path);
  mn_trace_destroy(r);
  mn_trace_destroy(u);
  free(text);
  free(text2);
  mn_trace_destroy(t);
  /* Without frames the annotations still make it version 4 (every field written);
   * without annotations nothing changes: version 1. */
  MN_CHECK_OK(parse_str("mnemo-trace 4\n0 alloc 0 0x10 16\nannotate 3 0 mark 0 x\nend 2\n", &t));
  if (t) {
    MN_CHECK(t->nannotations == 1 && t->annotations[0].entry == 1 && t->annotations[0].time_us == 3 &&
             t->annotations[0].stage == MN_TRACE_ANNOTATION_MARK && !strcmp(t->annotations[0].name, "x"));
    MN_CHECK_OK(mn_trace_format(t, &text, &len));
    MN_CHECK(text && !strcmp(text, "mnemo-trace 4\n0 alloc 0 0x10 16 0 0 0\nannotate 3 0 mark 0 x\nend 2\n"));
    free(text);
    mn_trace_destroy(t);
  }
  MN_CHECK_OK(parse_str("mnemo-trace 4\n  annotate  1 2147483647 end 0 a  b \t\nend 1\n", &t));
  if (t) {
    MN_CHECK(t->nannotations == 1 && t->annotations[0].entry == 0 && t->annotations[0].device == INT32_MAX &&
             t->annotations[0].stage == MN_TRACE_ANNOTATION_END && !strcmp(t->annotations[0].name, "a  b"));
    mn_trace_destroy(t);
  }
  MN_CHECK_OK(parse_str("mnemo-trace 4\n0 alloc 0 0x10 16\nend 1\n", &t));
  if (t) {
    MN_CHECK(t->version == 4 && t->nannotations == 0);
    MN_CHECK_OK(mn_trace_format(t, &text, &len));
    MN_CHECK(text && !strcmp(text, "mnemo-trace 1\n0 alloc 0 0x10 16\nend 1\n"));
    free(text);
    mn_trace_destroy(t);
  }
  MN_CHECK(!strcmp(mn_trace_annotation_stage_name(MN_TRACE_ANNOTATION_START), "start") &&
           !strcmp(mn_trace_annotation_stage_name(MN_TRACE_ANNOTATION_END), "end") &&
           !strcmp(mn_trace_annotation_stage_name(MN_TRACE_ANNOTATION_MARK), "mark") &&
           mn_trace_annotation_stage_name((mn_trace_annotation_stage)3) == NULL);
}

MN_TEST(v4_rejects_with_line_numbers) {
  static const bad_case_t cases[] = {
      {"mnemo-trace 3\nannotate 0 0 mark 0 x\nend 1\n", "t.trace:2: annotate line in a version 3 file"},
      {"mnemo-trace 1\nannotate 0 0 mark 0 x\nend 1\n", "t.trace:2: annotate line in a version 1 file"},
      {"mnemo-trace 4\nannotate 0 0 begin 0 x\nend 1\n", "t.trace:2: annotation stage \"begin\" is not start, end or mark"},
      {"mnemo-trace 4\nannotate 0 0 START 0 x\nend 1\n", "t.trace:2: annotation stage \"START\""},
      {"mnemo-trace 4\nannotate 0 0 mark 1 x\nend 1\n", "t.trace:2: stack \"1\" is not 0 or a stack id (the file has 0 stacks)"},
      {"mnemo-trace 4\nframe 1 0 f n\nstack 1 1\nannotate 0 0 mark 2 x\nend 1\n",
       "t.trace:4: stack \"2\" is not 0 or a stack id (the file has 1 stacks)"},
      {"mnemo-trace 4\nannotate 0 0 mark x y\nend 1\n", "t.trace:2: stack \"x\""},
      {"mnemo-trace 4\nannotate 0 0 mark 0 a%zz\nend 1\n", "t.trace:2: bad % escape \"%zz\" in the annotation's name"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 100%\nend 1\n", "t.trace:2: bad % escape \"%\" in the annotation's name"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 a%00b\nend 1\n", "t.trace:2: %00 (a NUL byte) in the annotation's name"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 a\tb\nend 1\n", "t.trace:2: tab inside the annotation's name"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 caf\xc3\xa9\nend 1\n", "t.trace:2: byte 0xc3"},
      {"mnemo-trace 4\nannotate x 0 mark 0 n\nend 1\n", "t.trace:2: time \"x\" is not a decimal"},
      {"mnemo-trace 4\nannotate 18446744073709551616 0 mark 0 n\nend 1\n", "t.trace:2: time"},
      {"mnemo-trace 4\nannotate 0 2147483648 mark 0 n\nend 1\n", "t.trace:2: device \"2147483648\" is not a decimal up to"},
      {"mnemo-trace 4\nannotate 0 0 mark\nend 1\n", "t.trace:2: annotate line without a stack"},
      {"mnemo-trace 4\nannotate\nend 1\n", "t.trace:2: annotate line without a time"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 x\nend 0\n",
       "t.trace:3: end line counts 0 pre, event and annotate lines, the file has 1"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 x\n", "t.trace:2: truncated file: no end line after 1 pre, event and annotate"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 x\nmeta k v\nend 1\n", "t.trace:3: meta line after an annotate line"},
      {"mnemo-trace 4\nannotate 0 0 mark 0 x\nframe 1 0 f n\nend 1\n", "t.trace:3: frame line after the first annotate line"},
      {"mnemo-trace 4\nframe 1 0 f n\nannotate 0 0 mark 0 x\nstack 1 1\nend 1\n",
       "t.trace:4: stack line after the first annotate line"},
      {"mnemo-trace 4\nend 0\nannotate 0 0 mark 0 x\n", "t.trace:3: text after the end line"},
      {"mnemo-trace 4\n0 alloc 0 0x10 16\nannotate 0 0 mark 0 x\npre alloc 0 0x20 16\nend 3\n",
       "t.trace:4: pre line after an event line"},
      {"mnemo-trace 4\nannotations 0 0 mark 0 x\nend 1\n", "t.trace:2: unknown line kind \"annotations\" (expected meta, frame, stack, pre, annotate,"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mn_trace_t *t = (mn_trace_t *)&cases[i]; /* must stay untouched */
    mn_trace_t *before = t;
    MN_CHECK_ERR(parse_str(cases[i].text, &t), MN_ERR_FORMAT, cases[i].needle);
    MN_CHECK(t == before);
  }
  /* The API refuses what the format does not allow and leaves the trace unchanged. */
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  if (!t) return;
  mn_trace_annotation_t a = {.stage = (mn_trace_annotation_stage)3, .name = "x"};
  MN_CHECK_ERR(mn_trace_annotation_add(t, &a), MN_ERR_INVALID_ARGUMENT, "stage 3");
  a.stage = MN_TRACE_ANNOTATION_MARK;
  a.stack = 1;
  MN_CHECK_ERR(mn_trace_annotation_add(t, &a), MN_ERR_INVALID_ARGUMENT, "stack 1 is not a stack id");
  a.stack = 0;
  a.device = (uint32_t)INT32_MAX + 1;
  MN_CHECK_ERR(mn_trace_annotation_add(t, &a), MN_ERR_INVALID_ARGUMENT, "device index 2147483648");
  a.device = 0;
  char *longname = malloc(MN_TRACE_LINE_MAX);
  if (longname) {
    memset(longname, '%', MN_TRACE_LINE_MAX / 3); /* each byte written %25 */
    longname[MN_TRACE_LINE_MAX / 3] = '\0';
    a.name = longname;
    MN_CHECK_ERR(mn_trace_annotation_add(t, &a), MN_ERR_INVALID_ARGUMENT, "over the 4096-byte line");
    free(longname);
  }
  MN_CHECK_ERR(mn_trace_annotation_add(t, NULL), MN_ERR_INVALID_ARGUMENT, "must not be NULL");
  MN_CHECK(t->nannotations == 0 && t->annotations == NULL);
  /* The writer refuses annotations out of order or past the entries (fields changed by hand). */
  a.name = "ok";
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .address = 0x10, .size = 4};
  MN_CHECK_OK(mn_trace_append(t, &e));
  MN_CHECK_OK(mn_trace_annotation_add(t, &a));
  char *text = NULL;
  size_t len = 0;
  if (t->nannotations == 2) {
    t->annotations[0].entry = 1;
    t->annotations[1].entry = 0;
    MN_CHECK_ERR(mn_trace_format(t, &text, &len), MN_ERR_INVALID_ARGUMENT, "annotation 1 breaks the format");
    t->annotations[0].entry = 0;
    t->annotations[1].entry = 2;
    MN_CHECK_ERR(mn_trace_format(t, &text, &len), MN_ERR_INVALID_ARGUMENT, "annotation 1 breaks the format");
    t->annotations[1].entry = 1;
    t->annotations[1].stage = (mn_trace_annotation_stage)7;
    MN_CHECK_ERR(mn_trace_format(t, &text, &len), MN_ERR_INVALID_ARGUMENT, "annotation 1 breaks the format");
    t->annotations[1].stage = MN_TRACE_ANNOTATION_END;
    MN_CHECK(text == NULL);
    MN_CHECK_OK(mn_trace_format(t, &text, &len));
    MN_CHECK(text && !strcmp(text, "mnemo-trace 4\nannotate 0 0 mark 0 ok\n0 alloc 0 0x10 4 0 0 0\n"
                                   "annotate 0 0 end 0 ok\nend 3\n"));
    free(text);
  }
  mn_trace_destroy(t);
}

/* Builds a trace with annotations (enough to grow the array), formats,
 * parses and formats it again. */
static mn_status v4_workload(void) {
  mn_trace_t *t = NULL, *u = NULL;
  char *text = NULL, *text2 = NULL;
  size_t len = 0, len2 = 0;
  mn_status st = mn_trace_create(&t);
  char name[32];
  for (int i = 0; i < 100 && st == MN_OK; i++) {
    snprintf(name, sizeof name, "step %d%%", i);
    mn_trace_annotation_t a = {.time_us = (uint64_t)i, .stage = (mn_trace_annotation_stage)(i % 3), .name = name};
    st = mn_trace_annotation_add(t, &a);
    mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .time_us = (uint64_t)i, .address = 16 * (uint64_t)(i + 1),
                          .size = 8};
    if (st == MN_OK) st = mn_trace_append(t, &e);
  }
  if (st == MN_OK) st = mn_trace_format(t, &text, &len);
  if (st == MN_OK) st = mn_trace_parse(text, len, "sweep", &u);
  if (st == MN_OK) st = mn_trace_format(u, &text2, &len2);
  if (st == MN_OK && (len != len2 || memcmp(text, text2, len) != 0 || u->nannotations != 100)) st = MN_ERR_INTERNAL;
  free(text);
  free(text2);
  mn_trace_destroy(t);
  mn_trace_destroy(u);
  return st;
}

/* Every host allocation of v4_workload fails in turn: a clean
 * MN_ERR_OUT_OF_MEMORY with a message, nothing leaked (LSan in the ASan build). */
MN_TEST(v4_host_faults) {
  mn__hostmem_fail_nth(INT64_MAX);
  MN_CHECK_OK(v4_workload());
  int64_t calls = mn__hostmem_calls();
  mn__hostmem_fail_nth(0);
  MN_CHECK(calls > 10);
  for (int64_t k = 1; k <= calls; k++) {
    mn__hostmem_fail_nth(k);
    mn_status st = v4_workload();
    bool fired = mn__hostmem_fault_fired();
    mn__hostmem_fail_nth(0);
    MN_CHECK(fired && st == MN_ERR_OUT_OF_MEMORY && strstr(mn_last_error(), "out of host memory"));
    if (!fired || st != MN_ERR_OUT_OF_MEMORY) {
      printf("  fault %lld of %lld: %s %s\n", (long long)k, (long long)calls, mn_status_name(st), mn_last_error());
      break;
    }
  }
  MN_CHECK_OK(v4_workload());
}

static bool is_fifo(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

MN_TEST(paths_refuse_fifos_folders_and_devices) {
  char fifo[300], dir[300], tmpfifo[320];
  snprintf(fifo, sizeof fifo, "%s/mnemo_test_trace_%d.fifo", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  snprintf(dir, sizeof dir, "%s/mnemo_test_trace_%d.dir", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  MN_CHECK(mkfifo(fifo, 0600) == 0 && mkdir(dir, 0700) == 0);
  const char *bad[3] = {fifo, dir, "/dev/null"};
  mn_trace_t *w = NULL;
  MN_CHECK_OK(mn_trace_create(&w));
  alarm(60); /* a blocking open() fails the test (SIGALRM) instead of hanging it */
  for (int k = 0; k < 3; k++) {
    mn_trace_t *t = NULL;
    MN_CHECK_ERR(mn_trace_read(bad[k], &t), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK_ERR(mn_trace_import_rmm_csv_file(bad[k], &t), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
    MN_CHECK(t == NULL);
    if (k < 2 && w) MN_CHECK_ERR(mn_trace_write(w, bad[k]), MN_ERR_INVALID_ARGUMENT, "is not a regular file");
  }
  MN_CHECK(is_fifo(fifo));
  /* a FIFO planted at a guessable temporary name: the writer's own name is
   * random and exclusive (runtime/fileio.c), so the write neither blocks nor fails */
  const char *p = tmp_path("planted");
  snprintf(tmpfifo, sizeof tmpfifo, "%s.tmp%ld", p, (long)getpid());
  MN_CHECK(mkfifo(tmpfifo, 0600) == 0);
  if (w) MN_CHECK_OK(mn_trace_write(w, p));
  MN_CHECK(is_fifo(tmpfifo) && access(p, F_OK) == 0);
  alarm(0);
  unlink(tmpfifo);
  remove(p);
  mn_trace_destroy(w);
  unlink(fifo);
  rmdir(dir);
}

MN_TEST(recorder_sink) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  mn_trace_event_t ev = {.action = MN_TRACE_SEGMENT_ALLOC, .time_ns = 5000000, .device = SIM0, .stream_id = 3,
                         .address = 0x200000, .size = 2 * MiB};
  mn_trace_recorder_sink(t, &ev);
  ev = (mn_trace_event_t){.action = MN_TRACE_ALLOC, .time_ns = 5002999, .device = SIM0, .stream_id = 3,
                          .address = 0x200000, .size = 1024, .requested_size = 1000};
  mn_trace_recorder_sink(t, &ev);
  ev = (mn_trace_event_t){.action = MN_TRACE_FREE_REQUESTED, .time_ns = 5004000, .device = SIM0, .stream_id = 3,
                          .address = 0x200000, .size = 1024, .requested_size = 1000};
  mn_trace_recorder_sink(t, &ev);
  ev.action = (mn_trace_action)99;
  mn_trace_recorder_sink(t, &ev);
  mn_trace_recorder_sink(NULL, &ev);
  MN_CHECK(t->nentries == 3 && t->dropped == 1);
  if (t->nentries == 3) {
    MN_CHECK(t->entries[0].time_us == 0 && t->entries[1].time_us == 2 && t->entries[2].time_us == 4);
    MN_CHECK(t->entries[1].size == 1000 && t->entries[1].block_size == 1024 && t->entries[1].stream == 3);
    MN_CHECK(t->entries[2].size == 1000 && t->entries[2].block_size == 0);
  }
  MN_CHECK(!strcmp(mn_trace_meta_get(t, "recorded_by"), "mnemo"));
  MN_CHECK(!strcmp(mn_trace_meta_get(t, "device"), "sim:0"));
  MN_CHECK(!strcmp(mn_trace_meta_get(t, "time_origin_us"), "5000"));
  MN_CHECK_OK(mn_trace_validate(t));
  mn_trace_destroy(t);
}

/* pre 4 MiB; A 1 MiB (stream 0); B 3 MiB (stream 7); free A; C 2 MiB; frees. */
static const char SMALL[] =
    "mnemo-trace 1\n"
    "pre alloc 0 0x1000000 4194304\n"
    "0 alloc 0 0x2000000 1048576\n"
    "1 alloc 7 0x3000000 3145728\n"
    "2 free_requested 0 0x2000000 1048576\n"
    "3 alloc 0 0x2000000 2097152\n"
    "4 free_requested 7 0x3000000 3145728\n"
    "5 free_requested 0 0x2000000 2097152\n"
    "6 free_requested 0 0x1000000 4194304\n"
    "end 8\n";

/* ---- event time stamps (runtime/clock.c) ---- */

static uint64_t mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The event clock for ms milliseconds: every reading inside the
 * clock_gettime readings around it, give or take tol_ns (a line's error is
 * under a microsecond; NTP may slew CLOCK_MONOTONIC by up to 500 ppm of the
 * 10 ms a line is used for), never below the thread's previous one. The
 * number of readings that failed, and of those taken. */
enum { CLOCK_TOL_NS = 20000 };

typedef struct clock_run_s {
  uint64_t ms, tol_ns, bad_bracket, went_back, readings;
} clock_run_t;

static void *clock_run(void *arg) {
  clock_run_t *r = arg;
  uint64_t end = mono_now() + r->ms * 1000000, last = 0;
  for (;;) {
    uint64_t c0 = mono_now(), t = mn__clock_ns(), c1 = mono_now();
    if (t + r->tol_ns < c0 || t > c1 + r->tol_ns) r->bad_bracket++;
    if (t < last) r->went_back++;
    last = t;
    r->readings++;
    if (c1 >= end) return NULL;
  }
}

MN_TEST(event_clock_follows_clock_gettime) {
  /* 40 ms: the first line is drawn after 5 ms, then renewed every 10 ms */
  clock_run_t r = {.ms = 40, .tol_ns = CLOCK_TOL_NS};
  clock_run(&r);
  MN_CHECK(r.readings > 1000);
  MN_CHECK(r.bad_bracket == 0 && r.went_back == 0);
  /* an x86-64 host with an invariant TSC that its kernel keeps as its clock
   * (this project's machines) reads the TSC once a line is known */
#if defined(__x86_64__)
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  char src[32] = {0};
  bool kernel_tsc = f && fgets(src, sizeof src, f) && strcmp(src, "tsc\n") == 0;
  if (f) fclose(f);
  f = fopen("/proc/cpuinfo", "r");
  bool invariant = false;
  char line[4096];
  while (f && !invariant && fgets(line, sizeof line, f))
    invariant = !strncmp(line, "flags", 5) && strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
  if (f) fclose(f);
  if (kernel_tsc && invariant) MN_CHECK(mn__clock_uses_tsc());
  printf("  event clock: %s (%" PRIu64 " readings in 40 ms)\n", mn__clock_uses_tsc() ? "TSC" : "clock_gettime",
         r.readings);
#endif
}

MN_TEST(event_clock_threads) {
  enum { N = 4 };
  pthread_t th[N];
  clock_run_t r[N];
  for (int i = 0; i < N; i++) {
    r[i] = (clock_run_t){.ms = 30, .tol_ns = CLOCK_TOL_NS};
    MN_CHECK(pthread_create(&th[i], NULL, clock_run, &r[i]) == 0);
  }
  for (int i = 0; i < N; i++) {
    MN_CHECK(pthread_join(th[i], NULL) == 0);
    MN_CHECK(r[i].readings > 100);
    MN_CHECK(r[i].bad_bracket == 0 && r[i].went_back == 0);
  }
}

/* The allocator's events carry the clock: each inside the clock_gettime
 * readings around its call. */
static uint64_t g_ev_time[4];
static size_t g_ev_n;
static void time_sink(void *user, const mn_trace_event_t *e) {
  (void)user;
  if (g_ev_n < 4) g_ev_time[g_ev_n] = e->time_ns;
  g_ev_n++;
}

MN_TEST(event_times_are_the_clock) {
  mn_allocator_t *a = NULL;
  mn_caching_config_t cfg = mn_caching_config_default();
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, &cfg, &a));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, time_sink, NULL));
  void *p = NULL;
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  MN_CHECK_OK(mn_allocator_free(a, p)); /* warm: the segment is cached */
  struct timespec pause = {0, 12000000};
  nanosleep(&pause, NULL); /* past the first line */
  g_ev_n = 0;
  uint64_t c0 = mono_now();
  MN_CHECK_OK(mn_allocator_alloc(a, 4096, NULL, &p));
  uint64_t c1 = mono_now();
  MN_CHECK_OK(mn_allocator_free(a, p));
  uint64_t c2 = mono_now();
  MN_CHECK(g_ev_n == 3); /* alloc, free_requested, free_completed */
  MN_CHECK(g_ev_time[0] + CLOCK_TOL_NS >= c0 && g_ev_time[0] <= c1 + CLOCK_TOL_NS);
  MN_CHECK(g_ev_time[1] + CLOCK_TOL_NS >= c1 && g_ev_time[1] <= c2 + CLOCK_TOL_NS && g_ev_time[2] == g_ev_time[1]);
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
  mn_allocator_destroy(a);
}

MN_TEST(replay_naive) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(parse_str(SMALL, &t));
  if (!t) return;
  size_t base = sim_mapped();
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_naive_allocator_create(SIM0, &a));
  mn_replay_result_t r;
  memset(&r, 0x5a, sizeof r);
  MN_CHECK_OK(mn_trace_replay(t, a, NULL, &r));
  MN_CHECK(!r.stats_from_allocator);
  MN_CHECK(r.pre_allocs == 1 && r.allocs == 3 && r.frees == 4 && r.ooms == 0 && r.skipped_frees == 0);
  MN_CHECK(r.streams == 2);
  /* Requested: 4+1+3 = 8, then 4+3+2 = 9 MiB. Mapped (2 MiB granules): 4+2+4 = 10 MiB. */
  MN_CHECK(r.peak_requested == (int64_t)(9 * MiB) && r.peak_allocated == (int64_t)(9 * MiB));
  MN_CHECK(r.peak_reserved == (int64_t)(10 * MiB));
  MN_CHECK(r.reserved_after_pre == (int64_t)(4 * MiB) && r.allocated_after_pre == (int64_t)(4 * MiB));
  MN_CHECK(r.device_allocs == 4 && r.device_allocs_events == 3);
  MN_CHECK(r.ratio > 1.11 && r.ratio < 1.12 && r.ns_per_op > 0);
  MN_CHECK(sim_mapped() == base); /* everything freed */

  /* Leaving out the pre allocation skips its free. */
  mn_replay_options_t o = mn_replay_options_default();
  o.skip_pre = true;
  MN_CHECK_OK(mn_trace_replay(t, a, &o, &r));
  MN_CHECK(r.pre_allocs == 0 && r.skipped_frees == 1 && r.peak_requested == (int64_t)(5 * MiB));

  /* Out of memory is counted, not fatal: the 2nd raw allocation (A) fails. */
  MN_CHECK_OK(mn_sim_fault_inject(SIM0, MN_SIM_FAULT_RAW_ALLOC, 2, 1));
  MN_CHECK_OK(mn_trace_replay(t, a, NULL, &r));
  MN_CHECK(r.ooms == 1 && r.skipped_frees == 1 && r.frees == 3 && r.peak_requested == (int64_t)(9 * MiB));
  MN_CHECK_OK(mn_sim_fault_clear(SIM0));
  MN_CHECK(sim_mapped() == base);
  mn_allocator_destroy(a);
  mn_trace_destroy(t);
  MN_CHECK_OK(mn_sim_check_invariants(SIM0));
}

/* Replays `text` on a fresh caching allocator (config NULL: defaults). */
static mn_status replay_text(const char *text, const mn_replay_options_t *o, mn_replay_result_t *r) {
  mn_trace_t *t = NULL;
  mn_allocator_t *a = NULL;
  mn_status st = parse_str(text, &t);
  if (st == MN_OK) st = mn_caching_allocator_create(SIM0, NULL, &a);
  if (st == MN_OK) st = mn_trace_replay(t, a, o, r);
  mn_allocator_destroy(a);
  mn_trace_destroy(t);
  return st;
}

/* The pre segments reserved as recorded: laid out when the allocator's rules
 * allow it, reserved but not laid out when a block breaks them, not rebuilt at
 * all when the allocator makes other segment sizes. */
MN_TEST(replay_pre_segments_as_recorded) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  mn_replay_result_t r;
  /* A 20 MiB large segment: 4 MiB live at 0 and at 10 MiB, 6 MiB free twice. A
   * 6 MiB request then fits in a gap: no new segment. */
  const char *large = "mnemo-trace 1\n"
                      "pre segment_alloc 0 0x10000000 20971520\n"
                      "pre alloc 0 0x10000000 4194304 4194304\n"
                      "pre alloc 0 0x10a00000 4194000 4194304\n"
                      "1 alloc 0 0x20000000 6291456\n"
                      "2 free_requested 0 0x20000000 6291456\n"
                      "end 5\n";
  MN_CHECK_OK(replay_text(large, NULL, &r));
  MN_CHECK(r.pre_segments == 1 && r.pre_segments_laid_out == 1);
  MN_CHECK(r.reserved_after_pre == 20971520 && r.peak_reserved == 20971520);
  MN_CHECK(r.device_allocs_events == 0);
  MN_CHECK(r.allocated_after_pre == 8388608 && r.peak_allocated == 8388608 + 6291456);
  MN_CHECK(r.pre_allocs == 2 && r.allocs == 1 && r.frees == 1);
  /* The same from a cold cache: the pre allocations packed at the start of a
   * 20 MiB segment the allocator makes for them (the same reserved bytes here). */
  mn_replay_options_t o = mn_replay_options_default();
  o.skip_pre_segments = true;
  MN_CHECK_OK(replay_text(large, &o, &r));
  MN_CHECK(r.pre_segments == 0 && r.reserved_after_pre == 20971520 && r.device_allocs_events == 0);
  /* A small (2 MiB) segment: 512 B live at 0 and 1.5 MiB; a 1 MiB request fits
   * between them (the gap of 1.5 MiB is laid out in pieces of at most 1 MiB). */
  const char *small = "mnemo-trace 1\n"
                      "pre segment_alloc 0 0x10000000 2097152\n"
                      "pre alloc 0 0x10000000 100 512\n"
                      "pre alloc 0 0x10180000 512 512\n"
                      "1 alloc 0 0x20000000 1048576\n"
                      "end 4\n";
  MN_CHECK_OK(replay_text(small, NULL, &r));
  MN_CHECK(r.pre_segments == 1 && r.pre_segments_laid_out == 1);
  MN_CHECK(r.reserved_after_pre == 2097152 && r.peak_reserved == 2097152 && r.device_allocs_events == 0);
  /* A block that breaks the pool rules (1 KiB in a large segment): the segment is
   * reserved, not laid out; the allocation replays as usual (a small segment). */
  const char *odd = "mnemo-trace 1\n"
                    "pre segment_alloc 0 0x10000000 20971520\n"
                    "pre alloc 0 0x10000000 1024 1024\n"
                    "end 2\n";
  MN_CHECK_OK(replay_text(odd, NULL, &r));
  MN_CHECK(r.pre_segments == 1 && r.pre_segments_laid_out == 0);
  MN_CHECK(r.reserved_after_pre == 20971520 + 2097152 && r.pre_allocs == 1);
  /* A segment size this allocator never makes (3 MiB: it would take 20 MiB):
   * nothing rebuilt, a cold start, nothing left over. */
  const char *other = "mnemo-trace 1\n"
                      "pre segment_alloc 0 0x10000000 3145728\n"
                      "pre alloc 0 0x10000000 2097152 2097152\n"
                      "end 2\n";
  MN_CHECK_OK(replay_text(other, NULL, &r));
  MN_CHECK(r.pre_segments == 0 && r.pre_segments_laid_out == 0);
  MN_CHECK(r.reserved_after_pre == 20971520 && r.allocated_after_pre == 2097152);
  MN_CHECK(r.peak_allocated == 2097152);
  /* Blocks that overlap or spill out of their segment: reserved, not laid out. */
  const char *spill = "mnemo-trace 1\n"
                      "pre segment_alloc 0 0x10000000 20971520\n"
                      "pre alloc 0 0x11300000 2097152 2097152\n"
                      "end 2\n";
  MN_CHECK_OK(replay_text(spill, NULL, &r));
  MN_CHECK(r.pre_segments == 1 && r.pre_segments_laid_out == 0 && r.pre_allocs == 1);
}

/* live_ptrs: at the stop, the pointers of the allocations still live, NULL elsewhere. */
MN_TEST(replay_live_ptrs) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  const char *text = "mnemo-trace 2\n"
                     "pre alloc 0 0x1000 4096 4096 0\n"
                     "1 alloc 0 0x2000 8192 8192 1\n"
                     "2 alloc 0 0x3000 8192 8192 0\n"
                     "3 free_requested 0 0x1000 4096 0 0\n"
                     "4 alloc 0 0x4000 512 512 0\n"
                     "end 5\n";
  void *live[5];
  mn_replay_options_t o = mn_replay_options_default();
  o.live_ptrs = live;
  o.stop_after = 3; /* device 0's entries 0, 2, 3 replayed: 0x3000 live */
  mn_replay_result_t r;
  memset(live, 0xab, sizeof live);
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(!live[0] && !live[1] && live[2] && !live[3] && !live[4]);
  o.stop_after = SIZE_MAX;
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(!live[0] && !live[1] && live[2] && !live[3] && live[4] && live[2] != live[4]);
  o.trace_device = 1;
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(!live[0] && live[1] && !live[2] && !live[3] && !live[4]);
  /* stopped before device 1's first entry (entry 1): nothing of it replayed */
  o.stop_after = 0;
  memset(live, 0xab, sizeof live);
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(!live[0] && !live[1] && !live[2] && !live[3] && !live[4]);
  MN_CHECK(r.allocs == 0 && r.pre_allocs == 0 && r.peak_allocated == 0);
}

/* Recorded oom lines: counted always; with replay_ooms their allocation is tried
 * (the test's SIM device has 1 GiB): 2 GiB runs out of memory there too
 * (reproduced), 4 MiB has room (allocated and freed at once). on_oom reports
 * them, and the replay's own failed allocations, with the trace's entry indices
 * (also through the one-device copy of a trace of several devices). */
typedef struct oom_log_s {
  mn_replay_oom_t v[8];
  size_t n;
} oom_log_t;

static void log_oom(void *user, const mn_replay_oom_t *o) {
  oom_log_t *l = user;
  if (l->n < 8) l->v[l->n++] = *o;
}

MN_TEST(replay_oom_lines) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  const char *text = "mnemo-trace 2\n"
                     "1 alloc 0 0x10000000 10485760 10485760 0\n"
                     "2 oom 0 0x100000 2147483648 0 0\n"
                     "3 oom 0 0x100000 4194304 0 0\n"
                     "4 alloc 0 0x20000000 4096 4096 1\n"
                     "5 oom 0 0x0 2147483648 0 1\n"
                     "6 alloc 0 0x30000000 2147483648 0 0\n"
                     "7 free_requested 0 0x30000000 2147483648 0 0\n"
                     "8 free_requested 0 0x10000000 10485760 0 0\n"
                     "end 8\n";
  oom_log_t log;
  memset(&log, 0, sizeof log);
  mn_replay_options_t o = mn_replay_options_default();
  o.on_oom = log_oom;
  o.on_oom_user = &log;
  mn_replay_result_t r;
  MN_CHECK_OK(replay_text(text, &o, &r)); /* oom lines only counted */
  MN_CHECK(r.recorded_ooms == 2 && r.ooms_reproduced == 0 && r.ooms == 1 && r.skipped_frees == 1);
  MN_CHECK(log.n == 1 && log.v[0].entry == 5 && !log.v[0].recorded && log.v[0].reproduced &&
           log.v[0].size == 2147483648u);
  MN_CHECK(r.peak_allocated == 10485760);
  memset(&log, 0, sizeof log);
  o.replay_ooms = true;
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(r.recorded_ooms == 2 && r.ooms_reproduced == 1 && r.ooms == 1);
  MN_CHECK(log.n == 3);
  MN_CHECK(log.v[0].entry == 1 && log.v[0].recorded && log.v[0].reproduced && log.v[0].size == 2147483648u);
  MN_CHECK(log.v[1].entry == 2 && log.v[1].recorded && !log.v[1].reproduced && log.v[1].size == 4194304);
  MN_CHECK(log.v[2].entry == 5 && !log.v[2].recorded);
  MN_CHECK(r.peak_requested == 10485760);                /* the tried allocation is not the trace's */
  MN_CHECK(r.peak_allocated == 10485760 + 4194304);      /* but the allocator held it a moment */
  memset(&log, 0, sizeof log);
  o.trace_device = 1;
  MN_CHECK_OK(replay_text(text, &o, &r));
  MN_CHECK(r.trace_device == 1 && r.recorded_ooms == 1 && r.ooms_reproduced == 1 && r.ooms == 0);
  MN_CHECK(log.n == 1 && log.v[0].entry == 4 && log.v[0].recorded && log.v[0].reproduced);
}

MN_TEST(replay_caching_and_record) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  mn_trace_t *t = NULL;
  MN_CHECK_OK(parse_str(SMALL, &t));
  if (!t) return;
  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
  mn_trace_t *rec = NULL;
  MN_CHECK_OK(mn_trace_create(&rec));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, mn_trace_recorder_sink, rec));
  mn_replay_result_t r;
  MN_CHECK_OK(mn_trace_replay(t, a, NULL, &r));
  MN_CHECK_OK(mn_caching_allocator_set_trace_sink(a, NULL, NULL));
  MN_CHECK(r.stats_from_allocator && r.ooms == 0 && r.streams == 2);
  /* PyTorch's rules: the pre 4 MiB comes from a 20 MiB segment; A (1 MiB) from a
   * 2 MiB small segment; B (3 MiB, stream 7) from a new 20 MiB segment of its
   * stream; C (2 MiB, stream 0) from the rest of the first 20 MiB segment.
   * Allocated peaks at 4+3+2 = 9 MiB; reserved 20+2+20 = 42 MiB; 3 raw allocations. */
  MN_CHECK(r.peak_allocated == (int64_t)(9 * MiB));
  MN_CHECK(r.peak_reserved == (int64_t)(42 * MiB));
  MN_CHECK(r.reserved_after_pre == (int64_t)(20 * MiB) && r.allocated_after_pre == (int64_t)(4 * MiB));
  MN_CHECK(r.device_allocs == 3 && r.device_allocs_events == 2);
  mn_allocator_destroy(a);

  /* What the allocator reported reads back and replays to the same figures. */
  const char *p = tmp_path("rec");
  MN_CHECK(rec->dropped == 0);
  MN_CHECK_OK(mn_trace_write(rec, p));
  mn_trace_t *back = NULL;
  MN_CHECK_OK(mn_trace_read(p, &back));
  if (back) {
    size_t allocs = 0, segs = 0;
    for (size_t i = 0; i < back->nentries; i++) {
      allocs += back->entries[i].action == MN_TRACE_ALLOC;
      segs += back->entries[i].action == MN_TRACE_SEGMENT_ALLOC;
    }
    MN_CHECK(allocs == 4 && segs == 3);
    mn_replay_result_t r2;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
    MN_CHECK_OK(mn_trace_replay(back, a, NULL, &r2));
    mn_allocator_destroy(a);
    MN_CHECK(r2.peak_allocated == r.peak_allocated && r2.peak_reserved == r.peak_reserved &&
             r2.device_allocs == r.device_allocs);
  }
  mn_trace_destroy(back);
  mn_trace_destroy(rec);
  mn_trace_destroy(t);
  remove(p);
}

#ifdef MN_SOURCE_DIR
/* data/traces/NAME, read (NULL, with a failed check, when it cannot be). */
static mn_trace_t *read_real(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/data/traces/%s", MN_SOURCE_DIR, name);
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_read(path, &t));
  return t;
}

/* The real traces in data/traces: the caching allocator with PyTorch's
 * defaults must need what PyTorch needed (within 2%), and expandable segments
 * must bring the full step to <= 1.03x reserved/allocated. */
static void replay_real(const char *name, bool check_expandable) {
  mn_trace_t *t = read_real(name);
  if (!t) return;
  uint64_t torch_reserved = 0, torch_segments = 0, torch_allocated = 0;
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_peak_reserved", &torch_reserved));
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_segment_allocs", &torch_segments));
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_peak_allocated", &torch_allocated));
  const char *configs[2] = {"", "expandable_segments:True"};
  for (int k = 0; k < (check_expandable ? 2 : 1); k++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    MN_CHECK_OK(mn_caching_config_parse(configs[k], &cfg));
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, &cfg, &a));
    if (!a) break;
    mn_replay_result_t r;
    memset(&r, 0, sizeof r);
    MN_CHECK_OK(mn_trace_replay(t, a, NULL, &r));
    mn_allocator_destroy(a);
    MN_CHECK(r.ooms == 0 && r.skipped_frees == 0 && r.peak_device_mapped == r.peak_reserved);
    double res = (double)r.peak_reserved / (double)torch_reserved;
    double segs = (double)r.device_allocs_events / (double)torch_segments;
    printf("  %s [%s]: reserved %.4f x pytorch, allocated %.4f x, raw allocations %.4f x, reserved/allocated %.4f\n",
           name, configs[k][0] ? configs[k] : "defaults", res, (double)r.peak_allocated / (double)torch_allocated,
           segs, r.ratio);
    if (k == 0) {
      MN_CHECK(res > 0.98 && res < 1.02);
      MN_CHECK(segs > 0.98 && segs < 1.02);
    } else {
      MN_CHECK(r.ratio <= 1.03);
    }
  }
  mn_trace_destroy(t);
}

/* The traces recorded on an H100 (data/traces/README.md): they replay with
 * no OOM and no unknown free, allocated bytes within 0.1% of PyTorch's (the
 * same requests, PyTorch's rounding), and peak reserved as pinned in each
 * NAME.json when it was recorded (replay on SIM is deterministic; the
 * differences from PyTorch's reserved are explained in that README). */
/* A trace recorded after a warm-up: replayed as recorded (the pre segments
 * reserved and laid out as PyTorch held them), the peaks and the raw allocations
 * during the events equal PyTorch's; from a cold cache (skip_pre_segments) the
 * peak reserved is mnemo's own answer, pinned. */
static void replay_recorded(const char *name, uint64_t want_cold_reserved) {
  mn_trace_t *t = read_real(name);
  if (!t) return;
  uint64_t torch_allocated = 0, torch_reserved = 0, torch_segs = 0, pre_segs = 0;
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_peak_allocated", &torch_allocated));
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_peak_reserved", &torch_reserved));
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "torch_segment_allocs", &torch_segs));
  MN_CHECK_OK(mn_trace_meta_get_u64(t, "pre_segments", &pre_segs));
  for (int cold = 0; cold < 2; cold++) {
    mn_allocator_t *a = NULL;
    MN_CHECK_OK(mn_caching_allocator_create(SIM0, NULL, &a));
    if (!a) continue;
    mn_replay_result_t r;
    memset(&r, 0, sizeof r);
    mn_replay_options_t o = mn_replay_options_default();
    o.skip_pre_segments = cold;
    MN_CHECK_OK(mn_trace_replay(t, a, &o, &r));
    mn_allocator_destroy(a);
    double alloc = (double)r.peak_allocated / (double)torch_allocated;
    printf("  %s [%s]: reserved %llu B (pytorch %llu, cold pinned %llu), allocated %.4f x pytorch, %llu of %llu pre "
           "segments laid out\n",
           name, cold ? "cold" : "as recorded", (unsigned long long)r.peak_reserved,
           (unsigned long long)torch_reserved, (unsigned long long)want_cold_reserved, alloc,
           (unsigned long long)r.pre_segments_laid_out, (unsigned long long)pre_segs);
    MN_CHECK(r.ooms == 0 && r.skipped_frees == 0);
    MN_CHECK(alloc >= 1.0 && alloc < 1.001);
    if (cold) {
      MN_CHECK((uint64_t)r.peak_reserved == want_cold_reserved);
      MN_CHECK(r.pre_segments == 0);
    } else {
      MN_CHECK((uint64_t)r.peak_reserved == torch_reserved);
      MN_CHECK((uint64_t)r.device_allocs_events == torch_segs);
      MN_CHECK(r.pre_segments == pre_segs && r.pre_segments_laid_out == pre_segs);
    }
  }
  mn_trace_destroy(t);
}

MN_TEST(replay_recorded_h100_traces) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  replay_recorded("small_transformer_train.trace", 9061793792ull);
  replay_recorded("resnet50_train.trace", 3892314112ull);
  replay_recorded("gpt2_train_2s.trace", 17641242624ull);
  replay_recorded("gpt2_infer_var.trace", 5102370816ull);
}

MN_TEST(replay_real_traces) {
  if (!have_caching()) {
    printf("  (caching allocator not in this build: skipped)\n");
    return;
  }
  replay_real("ctx128_fullstep.trace", true);
  replay_real("ctx128_forward_mixed.trace", false);
}
#endif

/* Alloc/free matching over thousands of addresses on two devices (the matcher's
 * table grows several times; address 0 is a key like any other): pairs matched,
 * and the first offending entry reported, whichever address comes first in sort order. */
static void match_many_addresses(void) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(mn_trace_create(&t));
  enum { N = 3000 };
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t k = 0; k < N; k++) {
      mn_trace_entry_t e = {.action = pass ? MN_TRACE_FREE_REQUESTED : MN_TRACE_ALLOC, .time_us = k,
                            .address = (uint64_t)(k / 2) * 512, .size = 512, .device = k % 2};
      MN_CHECK_OK(mn_trace_append(t, &e));
    }
  MN_CHECK_OK(mn_trace_validate(t));
  /* live again: entry 2N allocates 0x200 on device 1; entry 2N+2 frees 0x400 on
   * device 0, which is not live; entry 2N+3 allocates 0x200 on device 1 again */
  mn_trace_entry_t more[4] = {{.action = MN_TRACE_ALLOC, .address = 0x200, .size = 8, .device = 1},
                              {.action = MN_TRACE_ALLOC, .address = 0x200, .size = 8, .device = 0},
                              {.action = MN_TRACE_FREE_REQUESTED, .address = 0x400, .size = 8, .device = 0},
                              {.action = MN_TRACE_ALLOC, .address = 0x200, .size = 8, .device = 1}};
  for (int k = 0; k < 4; k++) MN_CHECK_OK(mn_trace_append(t, &more[k]));
  MN_CHECK_ERR(mn_trace_validate(t), MN_ERR_FORMAT, "entry 6002: free_requested of 0x400, which is not live");
  mn_trace_destroy(t);
}

/* mn_report_build: bad input refused with a message before anything is
 * replayed (NULL trace or out, too many settings, a setting that does not
 * parse, a device number out of range, a SIM size the SIM device refuses),
 * *out untouched and the SIM device's configuration as found; a small report
 * to stdout names no path and gives the SIM device back as found. */
static bool same_sim(const mn_sim_config_t *a, const mn_sim_config_t *b) {
  return a->device_count == b->device_count && a->capacity == b->capacity && a->granularity == b->granularity &&
         a->eager == b->eager && a->no_peer_access == b->no_peer_access;
}

static void report_build_refuses_bad_input(void) {
  mn_trace_t *t = NULL;
  MN_CHECK_OK(parse_str("mnemo-trace 1\n0 alloc 0 0x200000 4096 4096\n1 free_requested 0 0x200000 4096 0\nend 2\n",
                        &t));
  if (!t) return;
  mn_sim_config_t before, now;
  MN_CHECK_OK(mn_sim_get_config(&before));
  mn_report_t sentinel, *r = &sentinel;
  mn_report_options_t o = mn_report_options_default();
  MN_CHECK_ERR(mn_report_build(NULL, &o, &r), MN_ERR_INVALID_ARGUMENT, "mn_report_build: NULL trace");
  MN_CHECK_ERR(mn_report_build(t, &o, NULL), MN_ERR_INVALID_ARGUMENT, "mn_report_build: NULL out");
  const char *many[MN_REPORT_MAX_CONFIGS + 1];
  for (int k = 0; k <= MN_REPORT_MAX_CONFIGS; k++) many[k] = "";
  o.configs = many;
  o.nconfigs = MN_REPORT_MAX_CONFIGS + 1;
  MN_CHECK_ERR(mn_report_build(t, &o, &r), MN_ERR_INVALID_ARGUMENT, "at most 16 --config (17 given)");
  const char *bad[2] = {"", "nonsense:1"};
  o.configs = bad;
  o.nconfigs = 2;
  MN_CHECK_ERR(mn_report_build(t, &o, &r), MN_ERR_INVALID_ARGUMENT, "bad --config \"nonsense:1\": ");
  o = mn_report_options_default();
  o.trace_device = 5000;
  MN_CHECK_ERR(mn_report_build(t, &o, &r), MN_ERR_INVALID_ARGUMENT, "--trace-device 5000");
  o.trace_device = -2;
  MN_CHECK_ERR(mn_report_build(t, &o, &r), MN_ERR_INVALID_ARGUMENT, "--trace-device -2");
  o = mn_report_options_default();
  o.capacity = 1;
  MN_CHECK_ERR(mn_report_build(t, &o, &r), MN_ERR_INVALID_ARGUMENT, "--capacity: mn_sim_configure: capacity=1");
  MN_CHECK(r == &sentinel);
  MN_CHECK_OK(mn_sim_get_config(&now));
  MN_CHECK(same_sim(&before, &now));
  /* a good one, to stdout (no output named), on a SIM device of 64 MiB */
  o.capacity = (size_t)64 << 20;
  r = NULL;
  MN_CHECK_OK(mn_report_build(t, &o, &r));
  if (r) {
    MN_CHECK(r->page && r->page_size == strlen(r->page) && strstr(r->page, "<html"));
    MN_CHECK(strncmp(r->summary, "report (stdout): 2 entries, 1 configs, 1 device, ", 49) == 0);
    MN_CHECK(strncmp(r->json, "{\"path\": null, \"bytes\": ", 24) == 0);
    MN_CHECK(strcmp(r->notes, "") == 0);
    mn_report_free(r);
  }
  MN_CHECK_OK(mn_sim_get_config(&now));
  MN_CHECK(same_sim(&before, &now));
  mn_trace_destroy(t);
}

int main(void) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = (size_t)1 << 30;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure: %s\n", mn_last_error());
    return 1;
  }
  SIM0 = mn_device_sim(0);
  MN_RUN(parse_good);
  MN_RUN(parse_rejects_with_line_numbers);
  MN_RUN(read_files_and_truncation);
  MN_RUN(write_read_round_trip);
  MN_RUN(v3_round_trip);
  MN_RUN(v3_rejects_with_line_numbers);
  MN_RUN(v3_interning_and_cuts);
  MN_RUN(v3_host_faults);
  MN_RUN(v4_round_trip);
  MN_RUN(v4_rejects_with_line_numbers);
  MN_RUN(v4_host_faults);
  MN_RUN(many_meta_keys);
  MN_RUN(paths_refuse_fifos_folders_and_devices);
  MN_RUN(recorder_sink);
  MN_RUN(event_clock_follows_clock_gettime);
  MN_RUN(event_clock_threads);
  MN_RUN(event_times_are_the_clock);
  MN_RUN(replay_naive);
  MN_RUN(replay_caching_and_record);
  MN_RUN(replay_pre_segments_as_recorded);
  MN_RUN(replay_live_ptrs);
  MN_RUN(match_many_addresses);
  MN_RUN(replay_oom_lines);
  MN_RUN(report_build_refuses_bad_input);
#ifdef MN_SOURCE_DIR
  /* The recorded GPU had 80 GB: give the SIM device as much (memory is lazily backed). */
  c.capacity = (size_t)80 << 30;
  MN_CHECK_OK(mn_sim_configure(&c));
  MN_RUN(replay_real_traces);
  MN_RUN(replay_recorded_h100_traces);
#endif
  return mn_test_finish();
}
