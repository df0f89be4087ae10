/* tests/test_trace.c: the trace format (docs/TRACE_FORMAT.md): parser accepts and
 * rejects with line numbers, writer round trip, recorder sink, replay on SIM;
 * 100k meta keys parse and write in linear time; the readers (trace, RMM CSV)
 * and the writer refuse a FIFO, a folder or a device at once. */
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mn_test.h"

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
      {"mnemo-trace 3\nend 0\n", "t.trace:1: unsupported trace version 3"},
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

/* 100k meta keys took 36 s with the old pairwise check (issue 14); the
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
  MN_RUN(many_meta_keys);
  MN_RUN(paths_refuse_fifos_folders_and_devices);
  MN_RUN(recorder_sink);
  MN_RUN(replay_naive);
  MN_RUN(replay_caching_and_record);
#ifdef MN_SOURCE_DIR
  /* The recorded GPU had 80 GB: give the SIM device as much (memory is lazily backed). */
  c.capacity = (size_t)80 << 30;
  MN_CHECK_OK(mn_sim_configure(&c));
  MN_RUN(replay_real_traces);
  MN_RUN(replay_recorded_h100_traces);
#endif
  return mn_test_finish();
}
