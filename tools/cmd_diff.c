/* tools/cmd_diff.c: `mnemo diff A B` (text or --json) and `mnemo report A B -o
 * DIFF.html` (profiling/diff_page.html; its summary as text or, with --json, `diff
 * --json`'s object with the page's path and size): two traces or PyTorch snapshots (two runs, or
 * two ranks of one job), each replayed on the SIM device as recorded, side by side:
 *  - their peaks: the replay's allocated and reserved bytes, PyTorch's recorded ones;
 *  - the allocations alive at each one's peak of allocated bytes, grouped by the
 *    first user frame of their stacks (the stack rule, profiling/stacks.h), with the
 *    change per group, the largest change first;
 *  - the segment sizes one holds more of than the other at its peak of reserved bytes;
 *  - (the page) the two timelines on one x scale: the fraction of the trace's
 *    entries, or the time since its first event.
 * Each input is replayed three times (the timeline, then a stop at each peak).
 * Single-threaded (the CLI's main thread). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "diff_page.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "profiling/stacks.h"
#include "trace_input.h"

const char cmd_diff_about[] =
    "Compares two traces or PyTorch snapshots (imported on the fly): two runs, or two\n"
    "ranks of one job (files named rank0, rank_1...: labelled so). Each is replayed\n"
    "on the SIM device as recorded (or with --config): the peaks (replay and\n"
    "PyTorch's recorded), the allocations alive at each one's peak of allocated\n"
    "bytes grouped by the first user frame of their stacks with the change per group\n"
    "(largest first), the segment sizes only one holds at its peak of reserved bytes.\n"
    "As a page with the two timelines aligned: mnemo report A B -o DIFF.html.\n";

enum { O_JSON = 1, O_TOP, O_CONFIG, O_TRACE_DEVICE, O_MAX_DECOMPRESSED, O_NO_CACHE };

const mn__cli_opt_t cmd_diff_opts[] = {
    {"json", 0, NULL, O_JSON, "print one JSON object (every group) instead of the text"},
    {"top", 0, "N", O_TOP, "the text's rows of groups and of segment sizes (default 15)"},
    {"config", 0, "ALLOC_CONF", O_CONFIG,
     "allocator settings of both replays (PYTORCH_CUDA_ALLOC_CONF syntax; default: each as recorded)"},
    {"trace-device", 0, "N", O_TRACE_DEVICE,
     "the recorded device to compare in both (0..1000; default: each one's lowest, with a note when it has more)"},
    MN__TOOLS_OPT_MAX_DECOMPRESSED(O_MAX_DECOMPRESSED),
    MN__TOOLS_OPT_NO_CACHE(O_NO_CACHE),
    {NULL, 0, NULL, 0, NULL},
};

#define DEFAULT_TOP 15
#define PAGE_TOP 50          /* the page's rows of groups */
#define PAGE_POINTS_ALL 6000 /* up to this many steps a timeline keeps every one */
#define PAGE_BUCKETS 3000    /* beyond: per bucket, the steps of highest allocated and reserved */

typedef struct step_s {
  size_t entry;
  int64_t allocated, reserved;
} step_t;

/* A group of live allocations at one input's peak, by its label (the first user frame). */
typedef struct group_s {
  char *label;
  size_t count;
  uint64_t bytes;
} group_t;

typedef struct side_s {
  const char *path;
  char label[64]; /* "A" / "B", or "rank N" when both files are named by rank */
  mn_trace_t *t;
  const char *config;
  bool as_recorded;
  mn_replay_result_t res;
  step_t *steps;
  size_t nsteps, cap;
  bool oom;                                 /* host memory ran out in on_step */
  size_t peak_alloc_step, peak_res_step;    /* first step at each peak; nsteps: none */
  group_t *groups;                          /* at the peak of allocated bytes, sorted by label */
  size_t ngroups, live;
  uint64_t live_bytes;
  uint64_t *segs; /* segment sizes at the peak of reserved bytes, largest first */
  size_t nsegs;
  bool seg_failed;
  bool has_torch_alloc, has_torch_res;
  uint64_t torch_alloc, torch_res;
  uint64_t t0; /* time of the first event (not a pre line) */
  int replay_device; /* the trace device index replayed (-1: the replay's default, the lowest) */
  uint64_t device;   /* the recorded device number compared (the importer's CUDA index) */
  bool multi;        /* a trace of several devices (`meta devices`) */
} side_t;

/* One row of the comparison of groups. */
typedef struct row_s {
  const char *label;
  size_t a_count, b_count;
  uint64_t a_bytes, b_bytes;
} row_t;

/* A segment size held a different number of times by the two. */
typedef struct seg_row_s {
  uint64_t size;
  size_t a, b;
} seg_row_t;

typedef struct diff_s {
  side_t s[2];
  bool ranks; /* the labels are rank numbers */
  row_t *rows;
  size_t nrows;
  seg_row_t *segrows;
  size_t nsegrows;
} diff_t;

/* ---- replay ------------------------------------------------------------------ */

static void on_step(void *user, const mn_replay_step_t *st) {
  side_t *s = user;
  if (s->oom) return;
  if (!mn__grow(&s->steps, s->nsteps, &s->cap, sizeof *s->steps, 4096)) {
    s->oom = true;
    return;
  }
  s->steps[s->nsteps++] = (step_t){st->entry, st->allocated, st->reserved};
}

static int cmp_u64_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void take_segments(void *user, mn_allocator_t *a) {
  side_t *s = user;
  mn_snapshot_t *snap = NULL;
  if (mn_allocator_snapshot(a, &snap) != MN_OK) {
    s->seg_failed = true;
    return;
  }
  s->segs = malloc((snap->nsegments ? snap->nsegments : 1) * sizeof *s->segs);
  if (!s->segs) {
    s->seg_failed = true;
  } else {
    for (size_t i = 0; i < snap->nsegments; i++) s->segs[i] = snap->segments[i].total_size;
    s->nsegs = snap->nsegments;
    qsort(s->segs, s->nsegs, sizeof *s->segs, cmp_u64_desc);
  }
  mn_snapshot_free(snap);
}

static mn_status replay(side_t *s, mn_replay_options_t *o, mn_replay_result_t *res) {
  mn_caching_config_t cfg = mn_caching_config_default();
  mn_allocator_t *a = NULL;
  o->trace_device = s->replay_device;
  mn_status st = mn_caching_config_parse(s->config, &cfg);
  if (st == MN_OK) st = mn_caching_allocator_create(mn_device_sim(0), &cfg, &a);
  if (st == MN_OK) st = mn_trace_replay(s->t, a, o, res);
  mn_allocator_destroy(a);
  return st;
}

/* "file:line name" of a frame (just the name when the file is unknown; allocated). */
static char *frame_label(const mn_trace_t *t, uint32_t id) {
  const mn_trace_frame_t *f = mn_trace_frame_get(t, id);
  const char *file = f ? f->file : "", *name = f ? f->name : "";
  size_t n = strlen(file) + strlen(name) + 16;
  char *s = malloc(n);
  if (!s) return NULL;
  if (f && f->line) snprintf(s, n, "%s:%" PRIu32 "%s%s", file, f->line, name[0] ? " " : "", name);
  else snprintf(s, n, "%s%s%s", file, file[0] && name[0] ? " " : "", name[0] || file[0] ? name : "??");
  return s;
}

static int cmp_group_label(const void *a, const void *b) {
  return strcmp(((const group_t *)a)->label, ((const group_t *)b)->label);
}

/* The allocations alive after entry `stop`, grouped by the label of their first user frame. */
static bool holders_at(side_t *s, size_t stop) {
  const mn_trace_t *t = s->t;
  size_t n = t->nentries ? t->nentries : 1;
  void **ptrs = calloc(n, sizeof *ptrs);
  size_t *live = malloc(n * sizeof *live), nlive = 0, ng = 0;
  mn__holder_t *g = NULL;
  bool ok = false;
  if (!ptrs || !live) goto out;
  mn_replay_options_t o = mn_replay_options_default();
  o.stop_after = stop;
  o.live_ptrs = ptrs;
  mn_replay_result_t r;
  if (replay(s, &o, &r) != MN_OK) goto out;
  for (size_t i = 0; i < t->nentries; i++)
    if (ptrs[i]) {
      live[nlive++] = i;
      s->live_bytes = mn__sat_add_u64(s->live_bytes, t->entries[i].size);
    }
  s->live = nlive;
  if (!mn__holders(t, live, nlive, &g, &ng)) goto out;
  mn__holders_by_key(g, &ng);
  s->groups = calloc(ng ? ng : 1, sizeof *s->groups);
  if (!s->groups) goto out;
  static const char *const no_stack[] = {"(no user frame)", "(no stack: allocated before recording)",
                                         "(no stack recorded)"};
  for (size_t k = 0; k < ng; k++) {
    group_t *gr = &s->groups[s->ngroups];
    gr->label = g[k].kind == 0 && g[k].key ? frame_label(t, g[k].key) : strdup(no_stack[g[k].kind]);
    if (!gr->label) goto out;
    gr->count = g[k].count;
    gr->bytes = g[k].bytes;
    s->ngroups++;
  }
  /* by label; groups of one label (stacks without a user frame) merged */
  qsort(s->groups, s->ngroups, sizeof *s->groups, cmp_group_label);
  size_t m = 0;
  for (size_t k = 0; k < s->ngroups; k++) {
    if (m && !strcmp(s->groups[m - 1].label, s->groups[k].label)) {
      s->groups[m - 1].count += s->groups[k].count;
      s->groups[m - 1].bytes = mn__sat_add_u64(s->groups[m - 1].bytes, s->groups[k].bytes);
      free(s->groups[k].label);
    } else {
      s->groups[m++] = s->groups[k];
    }
  }
  s->ngroups = m;
  ok = true;
out:
  free(g);
  free(live);
  free(ptrs);
  return ok;
}

/* Replays one input: the timeline and its peaks, then the holders at the peak of
 * allocated bytes and the segments at the peak of reserved bytes. 0 or an exit status. */
static int analyze_side(side_t *s) {
  mn_replay_options_t o = mn_replay_options_default();
  o.on_step = on_step;
  o.on_step_user = s;
  if (replay(s, &o, &s->res) != MN_OK) {
    fprintf(stderr, "mnemo diff: %s: %s\n", s->path, mn_last_error());
    return 1;
  }
  if (s->oom) goto oom;
  s->peak_alloc_step = s->peak_res_step = s->nsteps;
  for (size_t i = 0; i < s->nsteps; i++) {
    if (s->peak_alloc_step == s->nsteps || s->steps[i].allocated > s->steps[s->peak_alloc_step].allocated)
      s->peak_alloc_step = i;
    if (s->peak_res_step == s->nsteps || s->steps[i].reserved > s->steps[s->peak_res_step].reserved)
      s->peak_res_step = i;
  }
  if (s->nsteps) {
    mn_clear_error(); /* a failure below without a library error is host memory */
    if (!holders_at(s, s->steps[s->peak_alloc_step].entry)) {
      fprintf(stderr, "mnemo diff: %s: %s\n", s->path, mn_last_error()[0] ? mn_last_error() : "out of host memory");
      return 1;
    }
    mn_replay_options_t so = mn_replay_options_default();
    so.stop_after = s->steps[s->peak_res_step].entry;
    so.at_stop = take_segments;
    so.at_stop_user = s;
    mn_replay_result_t r;
    if (replay(s, &so, &r) != MN_OK || s->seg_failed) {
      fprintf(stderr, "mnemo diff: %s: segments at the peak: %s\n", s->path, mn_last_error());
      return 1;
    }
  }
  /* PyTorch's figures of the device compared: its devN.torch_* keys in a trace of several */
  if (s->multi) s->device = s->res.trace_device;
  char ka[MN_TRACE_META_KEY_MAX + 1], kr[MN_TRACE_META_KEY_MAX + 1];
  snprintf(ka, sizeof ka, s->multi ? "dev%" PRIu64 ".torch_peak_allocated" : "torch_peak_allocated", s->device);
  snprintf(kr, sizeof kr, s->multi ? "dev%" PRIu64 ".torch_peak_reserved" : "torch_peak_reserved", s->device);
  s->has_torch_alloc = mn_trace_meta_get_u64(s->t, ka, &s->torch_alloc) == MN_OK;
  s->has_torch_res = mn_trace_meta_get_u64(s->t, kr, &s->torch_res) == MN_OK;
  mn_clear_error();
  s->t0 = 0;
  for (size_t i = 0; i < s->t->nentries; i++)
    if (!s->t->entries[i].pre) {
      s->t0 = s->t->entries[i].time_us;
      break;
    }
  return 0;
oom:
  fprintf(stderr, "mnemo diff: out of host memory\n");
  return 1;
}

/* ---- comparing ------------------------------------------------------------------ */

static uint64_t absdiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

static int cmp_row(const void *x, const void *y) {
  const row_t *a = x, *b = y;
  uint64_t da = absdiff(a->a_bytes, a->b_bytes), db = absdiff(b->a_bytes, b->b_bytes);
  if (da != db) return da < db ? 1 : -1;
  return strcmp(a->label, b->label);
}

static int cmp_segrow(const void *x, const void *y) {
  const seg_row_t *a = x, *b = y;
  return a->size < b->size ? 1 : a->size > b->size ? -1 : 0;
}

static bool compare(diff_t *d) {
  side_t *a = &d->s[0], *b = &d->s[1];
  d->rows = malloc((a->ngroups + b->ngroups + 1) * sizeof *d->rows);
  d->segrows = malloc((a->nsegs + b->nsegs + 1) * sizeof *d->segrows);
  if (!d->rows || !d->segrows) return false;
  size_t i = 0, j = 0;
  while (i < a->ngroups || j < b->ngroups) {
    int c = i == a->ngroups ? 1 : j == b->ngroups ? -1 : strcmp(a->groups[i].label, b->groups[j].label);
    row_t r = {c <= 0 ? a->groups[i].label : b->groups[j].label, 0, 0, 0, 0};
    if (c <= 0) {
      r.a_count = a->groups[i].count;
      r.a_bytes = a->groups[i++].bytes;
    }
    if (c >= 0) {
      r.b_count = b->groups[j].count;
      r.b_bytes = b->groups[j++].bytes;
    }
    d->rows[d->nrows++] = r;
  }
  qsort(d->rows, d->nrows, sizeof *d->rows, cmp_row);
  i = j = 0; /* both largest first */
  while (i < a->nsegs || j < b->nsegs) {
    uint64_t size = i == a->nsegs ? b->segs[j] : j == b->nsegs ? a->segs[i] : a->segs[i] > b->segs[j] ? a->segs[i] : b->segs[j];
    seg_row_t r = {size, 0, 0};
    while (i < a->nsegs && a->segs[i] == size) r.a++, i++;
    while (j < b->nsegs && b->segs[j] == size) r.b++, j++;
    if (r.a != r.b) d->segrows[d->nsegrows++] = r;
  }
  qsort(d->segrows, d->nsegrows, sizeof *d->segrows, cmp_segrow);
  return true;
}

/* Labels: "rank N" for each when both file names hold rank<N> (rank0, rank_1,
 * rank-2...) with different numbers; else A and B. */
static bool rank_of(const char *path, long *out) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (const char *p = base; (p = strstr(p, "rank")) != NULL; p++) {
    const char *q = p + 4;
    if (*q == '_' || *q == '-') q++;
    if (*q >= '0' && *q <= '9') {
      *out = strtol(q, NULL, 10);
      return true;
    }
  }
  return false;
}

static void set_labels(diff_t *d) {
  long ra = 0, rb = 0;
  d->ranks = rank_of(d->s[0].path, &ra) && rank_of(d->s[1].path, &rb) && ra != rb;
  for (int k = 0; k < 2; k++) {
    if (d->ranks) snprintf(d->s[k].label, sizeof d->s[k].label, "rank %ld", k ? rb : ra);
    else snprintf(d->s[k].label, sizeof d->s[k].label, "%s", k ? "B" : "A");
  }
}

/* ---- text ---------------------------------------------------------------------- */

static void gib_delta(char *buf, size_t n, uint64_t a, uint64_t b) {
  double da = (double)a, db = (double)b;
  if (a == b) snprintf(buf, n, "=");
  else if (a) snprintf(buf, n, "%+.2f GiB (%+.1f%%)", (db - da) / 1073741824.0, 100.0 * (db - da) / da);
  else snprintf(buf, n, "%+.2f GiB", (db - da) / 1073741824.0);
}

static void print_peak_row(FILE *f, const char *what, bool ha, uint64_t a, bool hb, uint64_t b) {
  char x[32], y[32], z[48];
  snprintf(x, sizeof x, ha ? "%.2f GiB" : "-", (double)a / 1073741824.0);
  snprintf(y, sizeof y, hb ? "%.2f GiB" : "-", (double)b / 1073741824.0);
  if (ha && hb) gib_delta(z, sizeof z, a, b);
  else snprintf(z, sizeof z, "-");
  fprintf(f, "  %-34s %14s %14s   %s\n", what, x, y, z);
}

static void print_mib_signed(uint64_t a, uint64_t b) {
  char x[48];
  snprintf(x, sizeof x, "%s%.2f MiB", b >= a ? "+" : "-", (double)absdiff(a, b) / 1048576.0);
  printf("%15s", x);
}

static void print_text(const diff_t *d, size_t top) {
  const side_t *a = &d->s[0], *b = &d->s[1];
  printf("mnemo diff%s:\n", d->ranks ? " of two ranks" : "");
  for (int k = 0; k < 2; k++) {
    const side_t *s = &d->s[k];
    printf("  %-7s %s", s->label, s->path);
    if (s->multi) printf(" device %" PRIu64, s->device);
    printf(": %zu entries, replayed on sim:0 (%s%s)\n", s->t->nentries, s->as_recorded ? "as recorded: " : "",
           s->config[0] ? s->config : "defaults");
  }
  printf("\npeaks %*s %14s %14s   %s - %s\n", 28, "", a->label, b->label, b->label, a->label);
  print_peak_row(stdout, "replay allocated", true, (uint64_t)a->res.peak_allocated, true, (uint64_t)b->res.peak_allocated);
  print_peak_row(stdout, "replay reserved", true, (uint64_t)a->res.peak_reserved, true, (uint64_t)b->res.peak_reserved);
  print_peak_row(stdout, "pytorch allocated (recorded)", a->has_torch_alloc, a->torch_alloc, b->has_torch_alloc,
                 b->torch_alloc);
  print_peak_row(stdout, "pytorch reserved (recorded)", a->has_torch_res, a->torch_res, b->has_torch_res, b->torch_res);
  printf("  %-34s %14zu %14zu\n", "segments at the peak reserved", a->nsegs, b->nsegs);
  printf("  %-34s %14zu %14zu\n", "allocations at the peak allocated", a->live, b->live);

  printf("\nwho holds each peak of allocated bytes, by the first user frame of the stack\n"
         "(the rule: docs/PROFILING.md), the largest change first (%zu of %zu groups):\n",
         d->nrows < top ? d->nrows : top, d->nrows);
  printf("  %14s %14s %15s   group\n", a->label, b->label, "change");
  for (size_t k = 0; k < d->nrows && k < top; k++) {
    const row_t *r = &d->rows[k];
    printf("  %10.2f MiB %10.2f MiB ", (double)r->a_bytes / 1048576.0, (double)r->b_bytes / 1048576.0);
    print_mib_signed(r->a_bytes, r->b_bytes);
    printf("   %s (%zu -> %zu allocations)\n", r->label, r->a_count, r->b_count);
  }

  printf("\nsegments at each peak of reserved bytes, sizes held a different number of times:\n");
  if (!d->nsegrows) printf("  none: the same segment sizes\n");
  for (size_t k = 0; k < d->nsegrows && k < top; k++) {
    const seg_row_t *r = &d->segrows[k];
    size_t more = r->a > r->b ? r->a - r->b : r->b - r->a;
    printf("  %12.2f MiB  %s %zu, %s %zu: %zu only in %s\n", (double)r->size / 1048576.0, a->label, r->a, b->label,
           r->b, more, r->a > r->b ? a->label : b->label);
  }
  if (d->nsegrows > top) printf("  ... %zu other sizes\n", d->nsegrows - top);
}

/* ---- JSON (--json, and the page's data) ---------------------------------------- */

static void json_opt_u64(FILE *f, const char *key, bool has, uint64_t v) {
  if (has) fprintf(f, ", \"%s\": %" PRIu64, key, v);
  else fprintf(f, ", \"%s\": null", key);
}

/* The steps the page draws: all, or per bucket those of highest allocated and reserved. */
static void json_points(FILE *f, const side_t *s) {
  const mn_trace_t *t = s->t;
  size_t n = s->nsteps, buckets = n <= PAGE_POINTS_ALL ? n : PAGE_BUCKETS;
  fprintf(f, ", \"points\": [");
  const char *sep = "";
  for (size_t b = 0; b < buckets; b++) {
    size_t lo = b * n / buckets, hi = (b + 1) * n / buckets, ia = lo, ir = lo;
    for (size_t i = lo; i < hi; i++) {
      if (s->steps[i].allocated > s->steps[ia].allocated) ia = i;
      if (s->steps[i].reserved > s->steps[ir].reserved) ir = i;
    }
    size_t pick[2] = {ia < ir ? ia : ir, ia < ir ? ir : ia};
    for (int k = 0; k < (ia == ir ? 1 : 2); k++) {
      const step_t *st = &s->steps[pick[k]];
      uint64_t tu = st->entry < t->nentries ? t->entries[st->entry].time_us : 0;
      /* [entry, us since the first event (pre lines: 0), allocated, reserved] */
      fprintf(f, "%s[%zu,%" PRIu64 ",%" PRId64 ",%" PRId64 "]", sep, st->entry, tu > s->t0 ? tu - s->t0 : 0,
              st->allocated, st->reserved);
      sep = ",";
    }
  }
  fputc(']', f);
}

static void json_side(FILE *f, const side_t *s, bool points) {
  fprintf(f, "{\"path\": ");
  mn__tools_json_str(f, s->path);
  fprintf(f, ", \"label\": ");
  mn__tools_json_str(f, s->label);
  fprintf(f, ", \"config\": ");
  mn__tools_json_str(f, s->config);
  fprintf(f, ", \"device\": %" PRIu64, s->device);
  const step_t *pa = s->nsteps ? &s->steps[s->peak_alloc_step] : NULL, *pr = s->nsteps ? &s->steps[s->peak_res_step] : NULL;
  fprintf(f,
          ", \"as_recorded\": %s, \"entries\": %zu, \"peak_allocated\": %" PRId64 ", \"peak_reserved\": %" PRId64
          ", \"peak_allocated_entry\": %zu, \"peak_reserved_entry\": %zu, \"ooms\": %" PRIu64,
          s->as_recorded ? "true" : "false", s->t->nentries, s->res.peak_allocated, s->res.peak_reserved,
          pa ? pa->entry : 0, pr ? pr->entry : 0, s->res.ooms);
  json_opt_u64(f, "torch_peak_allocated", s->has_torch_alloc, s->torch_alloc);
  json_opt_u64(f, "torch_peak_reserved", s->has_torch_res, s->torch_res);
  fprintf(f, ", \"live_at_peak\": %zu, \"live_bytes_at_peak\": %" PRIu64 ", \"segments_at_peak\": %zu", s->live,
          s->live_bytes, s->nsegs);
  if (points) {
    fprintf(f, ", \"time_span_us\": %" PRIu64, s->t->nentries && s->t->entries[s->t->nentries - 1].time_us > s->t0
                                                  ? s->t->entries[s->t->nentries - 1].time_us - s->t0
                                                  : 0);
    json_points(f, s);
  }
  fputc('}', f);
}

/* The members of the comparison's object (without its braces). */
static void json_diff_members(FILE *f, const diff_t *d, bool points) {
  fprintf(f, "\"a\": ");
  json_side(f, &d->s[0], points);
  fprintf(f, ",\n\"b\": ");
  json_side(f, &d->s[1], points);
  fprintf(f, ",\n\"ranks\": %s,\n\"groups\": [", d->ranks ? "true" : "false");
  for (size_t k = 0; k < d->nrows; k++) {
    const row_t *r = &d->rows[k];
    fprintf(f, "%s\n {\"group\": ", k ? "," : "");
    mn__tools_json_str(f, r->label);
    fprintf(f,
            ", \"a_count\": %zu, \"a_bytes\": %" PRIu64 ", \"b_count\": %zu, \"b_bytes\": %" PRIu64
            ", \"delta_bytes\": %s%" PRIu64 "}",
            r->a_count, r->a_bytes, r->b_count, r->b_bytes, r->b_bytes < r->a_bytes ? "-" : "",
            absdiff(r->a_bytes, r->b_bytes));
  }
  fprintf(f, "],\n\"segments\": [");
  for (size_t k = 0; k < d->nsegrows; k++)
    fprintf(f, "%s\n {\"size\": %" PRIu64 ", \"a_count\": %zu, \"b_count\": %zu}", k ? "," : "", d->segrows[k].size,
            d->segrows[k].a, d->segrows[k].b);
  fprintf(f, "]");
}

static void json_diff(FILE *f, const diff_t *d, bool points) {
  fputc('{', f);
  json_diff_members(f, d, points);
  fprintf(f, "}\n");
}

/* ---- the command ----------------------------------------------------------------- */

static void diff_free(diff_t *d) {
  for (int k = 0; k < 2; k++) {
    side_t *s = &d->s[k];
    for (size_t i = 0; i < s->ngroups; i++) free(s->groups[i].label);
    free(s->groups);
    free(s->steps);
    free(s->segs);
    mn_trace_destroy(s->t);
  }
  free(d->rows);
  free(d->segrows);
}

typedef struct diff_args_s {
  const char *paths[2], *config;
  int trace_device; /* the recorded device to compare in both (-1: each one's lowest) */
} diff_args_t;

/* Which device of side s's trace to replay: `want` (a recorded device number, as
 * `replay --trace-device` takes), else the lowest; pinned host memory (`meta
 * host_device`) never. 0, or an exit status after a message. */
static int pick_device(const char *prog, side_t *s, int want) {
  return mn__tools_pick_device(prog, s->path, s->t, want, "comparing", &s->replay_device, &s->device, &s->multi);
}

/* A --config both replays can use: 0, else a usage error (2). */
static int check_config(const mn__cli_t *p, const char *config) {
  mn_caching_config_t cfg = mn_caching_config_default();
  if (!config || mn_caching_config_parse(config, &cfg) == MN_OK) return 0;
  int rc = mn__cli_error(p, "bad --config \"%s\": %s", config, mn_last_error());
  mn_clear_error();
  return rc;
}

static int run_diff(const char *prog, const diff_args_t *args, diff_t *d) {
  for (int k = 0; k < 2; k++) {
    side_t *s = &d->s[k];
    s->path = args->paths[k];
    int lrc = mn__tools_trace_load(prog, s->path, -1, &s->t);
    if (lrc) return lrc;
    lrc = pick_device(prog, s, args->trace_device);
    if (lrc) return lrc;
    s->config = args->config ? args->config : mn__tools_recorded_config(prog, s->t, &s->as_recorded);
  }
  set_labels(d);
  /* what it is doing, on a terminal, for big inputs (mn__tools_stage_on) */
  bool stage = mn__tools_stage_on(-1, d->s[0].t->nentries + d->s[1].t->nentries);
  for (int k = 0; k < 2; k++) {
    mn__tools_stage(stage, prog, "%s: replaying %zu entries...", d->s[k].label, d->s[k].t->nentries);
    int rc = analyze_side(&d->s[k]);
    if (rc) return rc;
  }
  mn__tools_stage_clear(stage);
  if (!compare(d)) {
    fprintf(stderr, "%s: out of host memory\n", prog);
    return 1;
  }
  return 0;
}

int cmd_diff(int argc, char **argv) {
  diff_args_t args = {{NULL, NULL}, NULL, -1};
  bool json = false;
  long top = DEFAULT_TOP, dev = 0;
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  int id;
  while ((id = mn__cli_next(&p, &v)) > 0) {
    switch (id) {
    case O_JSON: json = true; break;
    case O_TOP:
      if (mn__cli_int(&p, v, 1, 1000000, &top)) return 2;
      break;
    case O_CONFIG:
      if (args.config) return mn__cli_error(&p, "one --config for both inputs");
      args.config = v;
      break;
    case O_TRACE_DEVICE:
      if (mn__cli_int(&p, v, 0, 1000, &dev)) return 2;
      args.trace_device = (int)dev;
      break;
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&p, v)) return 2;
      break;
    case O_NO_CACHE: mn__tools_set_no_cache(); break;
    }
  }
  if (id < 0) return p.rc;
  if (mn__cli_want_args(&p, 2, 2, "two traces or snapshots to compare")) return 2;
  args.paths[0] = p.args[0];
  args.paths[1] = p.args[1];
  if (check_config(&p, args.config)) return 2;
  diff_t d;
  memset(&d, 0, sizeof d);
  int rc = run_diff(p.prog, &args, &d);
  if (!rc) {
    if (json) json_diff(stdout, &d, false);
    else print_text(&d, (size_t)top);
  }
  diff_free(&d);
  return rc;
}

int cmd_diff_page(const mn__cli_t *p, const char *a, const char *b, const char *out, const char *title,
                  const char *config, int trace_device, bool json) {
  diff_args_t args = {{a, b}, config, trace_device};
  if (check_config(p, config)) return 2;
  diff_t d;
  memset(&d, 0, sizeof d);
  int rc = run_diff(p->prog, &args, &d);
  char *page = NULL;
  size_t len = 0;
  FILE *f = rc ? NULL : open_memstream(&page, &len);
  if (!rc && !f) {
    fprintf(stderr, "%s: out of host memory\n", p->prog);
    rc = 1;
  }
  if (f) {
    fputs(mn_diff_page_head, f);
    fprintf(f, "<script id=\"mn-data\" type=\"application/json\">\n{\"title\": ");
    char dflt[512];
    snprintf(dflt, sizeof dflt, "%s vs %s", d.s[0].path, d.s[1].path);
    mn__tools_json_str(f, title ? title : dflt);
    fprintf(f, ",\n\"top\": %d,\n\"diff\": ", PAGE_TOP);
    json_diff(f, &d, true);
    fprintf(f, "}\n</script>\n");
    fputs(mn_diff_page_tail, f);
    bool built = !ferror(f);
    built = fclose(f) == 0 && built;
    bool to_stdout = mn__cli_is_stdout(out);
    FILE *sum = to_stdout ? stderr : stdout; /* the summary, out of the page's way */
    if (!built) {
      fprintf(stderr, "%s: out of host memory building the page\n", p->prog);
      rc = 1;
    } else if (to_stdout ? fwrite(page, 1, len, stdout) != len
                         : mn__file_write_atomic(p->prog, out, page, len) != MN_OK) {
      fprintf(stderr, "%s\n", to_stdout ? "mnemo report: writing the page to stdout failed" : mn_last_error());
      rc = 1;
    } else if (json) { /* `diff --json`'s object, the page's path and size added */
      fputs("{\"path\": ", sum);
      if (to_stdout) fputs("null", sum);
      else mn__tools_json_str(sum, out);
      fprintf(sum, ", \"bytes\": %zu,\n", len);
      json_diff_members(sum, &d, false);
      fprintf(sum, "}\n");
    } else {
      fprintf(sum, "report %s: %s (%s) vs %s (%s), %zu bytes\n", to_stdout ? "(stdout)" : out, d.s[0].path,
              d.s[0].label, d.s[1].path, d.s[1].label, len);
      print_peak_row(sum, "replay allocated", true, (uint64_t)d.s[0].res.peak_allocated, true,
                     (uint64_t)d.s[1].res.peak_allocated);
      print_peak_row(sum, "replay reserved", true, (uint64_t)d.s[0].res.peak_reserved, true,
                     (uint64_t)d.s[1].res.peak_reserved);
    }
  }
  free(page);
  diff_free(&d);
  return rc;
}
