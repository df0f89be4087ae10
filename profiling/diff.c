/* profiling/diff.c: two traces compared (mn_diff_build): the text of `mnemo
 * diff A B`, its --json object, and the page of `mnemo report A B -o DIFF.html`
 * (profiling/diff_page.html) with its short summary. Each trace (two runs, or
 * two ranks of one job) is replayed on the SIM device as recorded (or with one
 * setting for both), side by side:
 *  - their peaks: the replay's allocated and reserved bytes, PyTorch's recorded ones;
 *  - the allocations alive at each one's peak of allocated bytes, grouped by the
 *    first user frame of their stacks (the stack rule, profiling/stacks.h), with the
 *    change per group, the largest change first;
 *  - the segment sizes one holds more of than the other at its peak of reserved bytes;
 *  - (the page) the two timelines on one x scale: the fraction of the trace's
 *    entries, or the time since its first event.
 * Each input is replayed three times (the timeline, then a stop at each peak).
 * Any thread; the SIM device is the caller's for the call (its configuration
 * is restored as found on return). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diff_page.h"
#include "mnemo/caching.h"
#include "mnemo/sim.h"
#include "profiling/analysis.h"
#include "profiling/pages.h"
#include "runtime/hostmem.h"

#define FUNC "mn_diff_build"
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
  const char *path; /* the input's name */
  char label[64];   /* "A" / "B", or "rank N" when both names hold a rank */
  const mn_trace_t *t;
  const char *config;
  bool as_recorded;
  mn_replay_result_t res;
  step_t *steps;
  size_t nsteps, cap;
  bool oom;                              /* host memory ran out in on_step */
  size_t peak_alloc_step, peak_res_step; /* first step at each peak; nsteps: none */
  group_t *groups;                       /* at the peak of allocated bytes, sorted by label */
  size_t ngroups, live;
  uint64_t live_bytes;
  uint64_t *segs; /* segment sizes at the peak of reserved bytes, largest first */
  size_t nsegs;
  bool seg_failed;
  bool has_torch_alloc, has_torch_res;
  uint64_t torch_alloc, torch_res;
  uint64_t t0;       /* time of the first event (not a pre line) */
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

/* Fails under FUNC with "<path>: <what><the failure's message>" (the message
 * of the call that failed, "out of host memory" when it set none). */
static mn_status side_error(mn_status st, const side_t *s, const char *what) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", mn_last_error()[0] ? mn_last_error() : "out of host memory");
  return mn__error(st, FUNC, "%s: %s%s", s->path, what, msg);
}

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
  s->segs = mn__malloc((snap->nsegments ? snap->nsegments : 1) * sizeof *s->segs);
  if (!s->segs) {
    mn_clear_error(); /* side_error says "out of host memory" */
    s->seg_failed = true;
  } else {
    for (size_t i = 0; i < snap->nsegments; i++) s->segs[i] = snap->segments[i].total_size;
    s->nsegs = snap->nsegments;
    qsort(s->segs, s->nsegs, sizeof *s->segs, cmp_u64_desc);
  }
  mn_snapshot_free(snap);
}

static mn_status replay(const side_t *s, mn_replay_options_t *o, mn_replay_result_t *res) {
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
  char *s = mn__malloc(n);
  if (!s) return NULL;
  if (f && f->line) snprintf(s, n, "%s:%" PRIu32 "%s%s", file, f->line, name[0] ? " " : "", name);
  else snprintf(s, n, "%s%s%s", file, file[0] && name[0] ? " " : "", name[0] || file[0] ? name : "??");
  return s;
}

static int cmp_group_label(const void *a, const void *b) {
  return strcmp(((const group_t *)a)->label, ((const group_t *)b)->label);
}

/* The allocations alive after entry `stop`, grouped by the label of their
 * first user frame. MN_OK, the replay's failure, or MN_ERR_OUT_OF_MEMORY with
 * the error cleared (side_error names it). */
static mn_status holders_at(side_t *s, size_t stop) {
  const mn_trace_t *t = s->t;
  size_t n = t->nentries ? t->nentries : 1;
  void **ptrs = mn__calloc(n, sizeof *ptrs);
  size_t *live = mn__malloc(n * sizeof *live);
  size_t nlive = 0, ng = 0;
  mn__holder_t *g = NULL;
  mn_status st = MN_ERR_OUT_OF_MEMORY;
  if (!ptrs || !live) goto out;
  mn_replay_options_t o = mn_replay_options_default();
  o.stop_after = stop;
  o.live_ptrs = ptrs;
  mn_replay_result_t r;
  mn_status rs = replay(s, &o, &r);
  if (rs != MN_OK) {
    st = rs;
    goto out;
  }
  for (size_t i = 0; i < t->nentries; i++)
    if (ptrs[i]) {
      live[nlive++] = i;
      s->live_bytes = mn__sat_add_u64(s->live_bytes, t->entries[i].size);
    }
  s->live = nlive;
  if (!mn__holders(t, live, nlive, &g, &ng)) goto out;
  mn__holders_by_key(g, &ng);
  s->groups = mn__calloc(ng ? ng : 1, sizeof *s->groups);
  if (!s->groups) goto out;
  static const char *const no_stack[] = {"(no user frame)", "(no stack: allocated before recording)",
                                         "(no stack recorded)"};
  for (size_t k = 0; k < ng; k++) {
    group_t *gr = &s->groups[s->ngroups];
    if (g[k].kind == 0 && g[k].key) gr->label = frame_label(t, g[k].key);
    else gr->label = mn__strdup(no_stack[g[k].kind]);
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
  st = MN_OK;
out:
  if (st == MN_ERR_OUT_OF_MEMORY) mn_clear_error();
  free(g);
  free(live);
  free(ptrs);
  return st;
}

/* Replays one input: the timeline and its peaks, then the holders at the peak
 * of allocated bytes and the segments at the peak of reserved bytes. MN_OK, or
 * the failure under FUNC. */
static mn_status analyze_side(side_t *s) {
  mn_replay_options_t o = mn_replay_options_default();
  o.on_step = on_step;
  o.on_step_user = s;
  mn_status st = replay(s, &o, &s->res);
  if (st != MN_OK) return side_error(st, s, "");
  if (s->oom) return mn__error(MN_ERR_OUT_OF_MEMORY, FUNC, "out of host memory");
  s->peak_alloc_step = s->peak_res_step = s->nsteps;
  for (size_t i = 0; i < s->nsteps; i++) {
    if (s->peak_alloc_step == s->nsteps || s->steps[i].allocated > s->steps[s->peak_alloc_step].allocated)
      s->peak_alloc_step = i;
    if (s->peak_res_step == s->nsteps || s->steps[i].reserved > s->steps[s->peak_res_step].reserved)
      s->peak_res_step = i;
  }
  if (s->nsteps) {
    st = holders_at(s, s->steps[s->peak_alloc_step].entry);
    if (st != MN_OK) return side_error(st, s, "");
    mn_replay_options_t so = mn_replay_options_default();
    so.stop_after = s->steps[s->peak_res_step].entry;
    so.at_stop = take_segments;
    so.at_stop_user = s;
    mn_replay_result_t r;
    st = replay(s, &so, &r);
    if (st == MN_OK && s->seg_failed) st = mn_last_status() != MN_OK ? mn_last_status() : MN_ERR_OUT_OF_MEMORY;
    if (st != MN_OK) return side_error(st, s, "segments at the peak: ");
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
  return MN_OK;
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

static mn_status compare(diff_t *d) {
  side_t *a = &d->s[0], *b = &d->s[1];
  d->rows = mn__malloc((a->ngroups + b->ngroups + 1) * sizeof *d->rows);
  if (!d->rows) return mn__error(MN_ERR_OUT_OF_MEMORY, FUNC, "out of host memory");
  d->segrows = mn__malloc((a->nsegs + b->nsegs + 1) * sizeof *d->segrows);
  if (!d->segrows) return mn__error(MN_ERR_OUT_OF_MEMORY, FUNC, "out of host memory");
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
    uint64_t size = i == a->nsegs               ? b->segs[j]
                    : j == b->nsegs             ? a->segs[i]
                    : a->segs[i] > b->segs[j]   ? a->segs[i]
                                                : b->segs[j];
    seg_row_t r = {size, 0, 0};
    while (i < a->nsegs && a->segs[i] == size) r.a++, i++;
    while (j < b->nsegs && b->segs[j] == size) r.b++, j++;
    if (r.a != r.b) d->segrows[d->nsegrows++] = r;
  }
  qsort(d->segrows, d->nsegrows, sizeof *d->segrows, cmp_segrow);
  return MN_OK;
}

/* Labels: "rank N" for each when both names hold rank<N> (rank0, rank_1,
 * rank-2...) in their last path component, with different numbers; else A and B. */
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

static void print_peak_row(mn__sbuf_t *f, const char *what, bool ha, uint64_t a, bool hb, uint64_t b) {
  char x[32], y[32], z[48];
  snprintf(x, sizeof x, ha ? "%.2f GiB" : "-", (double)a / 1073741824.0);
  snprintf(y, sizeof y, hb ? "%.2f GiB" : "-", (double)b / 1073741824.0);
  if (ha && hb) gib_delta(z, sizeof z, a, b);
  else snprintf(z, sizeof z, "-");
  mn__sbuf_printf(f, "  %-34s %14s %14s   %s\n", what, x, y, z);
}

static void print_mib_signed(mn__sbuf_t *f, uint64_t a, uint64_t b) {
  char x[48];
  snprintf(x, sizeof x, "%s%.2f MiB", b >= a ? "+" : "-", (double)absdiff(a, b) / 1048576.0);
  mn__sbuf_printf(f, "%15s", x);
}

static void print_text(mn__sbuf_t *f, const diff_t *d, size_t top) {
  const side_t *a = &d->s[0], *b = &d->s[1];
  mn__sbuf_printf(f, "mnemo diff%s:\n", d->ranks ? " of two ranks" : "");
  for (int k = 0; k < 2; k++) {
    const side_t *s = &d->s[k];
    mn__sbuf_printf(f, "  %-7s %s", s->label, s->path);
    if (s->multi) mn__sbuf_printf(f, " device %" PRIu64, s->device);
    mn__sbuf_printf(f, ": %zu entries, replayed on sim:0 (%s%s)\n", s->t->nentries,
                    s->as_recorded ? "as recorded: " : "", s->config[0] ? s->config : "defaults");
  }
  mn__sbuf_printf(f, "\npeaks %*s %14s %14s   %s - %s\n", 28, "", a->label, b->label, b->label, a->label);
  print_peak_row(f, "replay allocated", true, (uint64_t)a->res.peak_allocated, true, (uint64_t)b->res.peak_allocated);
  print_peak_row(f, "replay reserved", true, (uint64_t)a->res.peak_reserved, true, (uint64_t)b->res.peak_reserved);
  print_peak_row(f, "pytorch allocated (recorded)", a->has_torch_alloc, a->torch_alloc, b->has_torch_alloc,
                 b->torch_alloc);
  print_peak_row(f, "pytorch reserved (recorded)", a->has_torch_res, a->torch_res, b->has_torch_res, b->torch_res);
  mn__sbuf_printf(f, "  %-34s %14zu %14zu\n", "segments at the peak reserved", a->nsegs, b->nsegs);
  mn__sbuf_printf(f, "  %-34s %14zu %14zu\n", "allocations at the peak allocated", a->live, b->live);

  mn__sbuf_printf(f,
                  "\nwho holds each peak of allocated bytes, by the first user frame of the stack\n"
                  "(the rule: docs/PROFILING.md), the largest change first (%zu of %zu groups):\n",
                  d->nrows < top ? d->nrows : top, d->nrows);
  mn__sbuf_printf(f, "  %14s %14s %15s   group\n", a->label, b->label, "change");
  for (size_t k = 0; k < d->nrows && k < top; k++) {
    const row_t *r = &d->rows[k];
    mn__sbuf_printf(f, "  %10.2f MiB %10.2f MiB ", (double)r->a_bytes / 1048576.0, (double)r->b_bytes / 1048576.0);
    print_mib_signed(f, r->a_bytes, r->b_bytes);
    mn__sbuf_printf(f, "   %s (%zu -> %zu allocations)\n", r->label, r->a_count, r->b_count);
  }

  mn__sbuf_printf(f, "\nsegments at each peak of reserved bytes, sizes held a different number of times:\n");
  if (!d->nsegrows) mn__sbuf_printf(f, "  none: the same segment sizes\n");
  for (size_t k = 0; k < d->nsegrows && k < top; k++) {
    const seg_row_t *r = &d->segrows[k];
    size_t more = r->a > r->b ? r->a - r->b : r->b - r->a;
    mn__sbuf_printf(f, "  %12.2f MiB  %s %zu, %s %zu: %zu only in %s\n", (double)r->size / 1048576.0, a->label, r->a,
                    b->label, r->b, more, r->a > r->b ? a->label : b->label);
  }
  if (d->nsegrows > top) mn__sbuf_printf(f, "  ... %zu other sizes\n", d->nsegrows - top);
}

/* ---- JSON (--json, and the page's data) ---------------------------------------- */

static void json_opt_u64(mn__sbuf_t *f, const char *key, bool has, uint64_t v) {
  if (has) mn__sbuf_printf(f, ", \"%s\": %" PRIu64, key, v);
  else mn__sbuf_printf(f, ", \"%s\": null", key);
}

/* The steps the page draws: all, or per bucket those of highest allocated and reserved. */
static void json_points(mn__sbuf_t *f, const side_t *s) {
  const mn_trace_t *t = s->t;
  size_t n = s->nsteps, buckets = n <= PAGE_POINTS_ALL ? n : PAGE_BUCKETS;
  mn__sbuf_puts(f, ", \"points\": [");
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
      mn__sbuf_printf(f, "%s[%zu,%" PRIu64 ",%" PRId64 ",%" PRId64 "]", sep, st->entry, tu > s->t0 ? tu - s->t0 : 0,
                      st->allocated, st->reserved);
      sep = ",";
    }
  }
  mn__sbuf_putc(f, ']');
}

static void json_side(mn__sbuf_t *f, const side_t *s, bool points) {
  mn__sbuf_puts(f, "{\"path\": ");
  mn__sbuf_json_str(f, s->path);
  mn__sbuf_puts(f, ", \"label\": ");
  mn__sbuf_json_str(f, s->label);
  mn__sbuf_puts(f, ", \"config\": ");
  mn__sbuf_json_str(f, s->config);
  mn__sbuf_printf(f, ", \"device\": %" PRIu64, s->device);
  const step_t *pa = s->nsteps ? &s->steps[s->peak_alloc_step] : NULL;
  const step_t *pr = s->nsteps ? &s->steps[s->peak_res_step] : NULL;
  mn__sbuf_printf(f,
                  ", \"as_recorded\": %s, \"entries\": %zu, \"peak_allocated\": %" PRId64
                  ", \"peak_reserved\": %" PRId64
                  ", \"peak_allocated_entry\": %zu, \"peak_reserved_entry\": %zu, \"ooms\": %" PRIu64,
                  s->as_recorded ? "true" : "false", s->t->nentries, s->res.peak_allocated, s->res.peak_reserved,
                  pa ? pa->entry : 0, pr ? pr->entry : 0, s->res.ooms);
  json_opt_u64(f, "torch_peak_allocated", s->has_torch_alloc, s->torch_alloc);
  json_opt_u64(f, "torch_peak_reserved", s->has_torch_res, s->torch_res);
  mn__sbuf_printf(f, ", \"live_at_peak\": %zu, \"live_bytes_at_peak\": %" PRIu64 ", \"segments_at_peak\": %zu",
                  s->live, s->live_bytes, s->nsegs);
  if (points) {
    mn__sbuf_printf(f, ", \"time_span_us\": %" PRIu64,
                    s->t->nentries && s->t->entries[s->t->nentries - 1].time_us > s->t0
                        ? s->t->entries[s->t->nentries - 1].time_us - s->t0
                        : 0);
    json_points(f, s);
  }
  mn__sbuf_putc(f, '}');
}

/* The members of the comparison's object (without its braces). */
static void json_diff_members(mn__sbuf_t *f, const diff_t *d, bool points) {
  mn__sbuf_puts(f, "\"a\": ");
  json_side(f, &d->s[0], points);
  mn__sbuf_puts(f, ",\n\"b\": ");
  json_side(f, &d->s[1], points);
  mn__sbuf_printf(f, ",\n\"ranks\": %s,\n\"groups\": [", d->ranks ? "true" : "false");
  for (size_t k = 0; k < d->nrows; k++) {
    const row_t *r = &d->rows[k];
    mn__sbuf_printf(f, "%s\n {\"group\": ", k ? "," : "");
    mn__sbuf_json_str(f, r->label);
    mn__sbuf_printf(f,
                    ", \"a_count\": %zu, \"a_bytes\": %" PRIu64 ", \"b_count\": %zu, \"b_bytes\": %" PRIu64
                    ", \"delta_bytes\": %s%" PRIu64 "}",
                    r->a_count, r->a_bytes, r->b_count, r->b_bytes, r->b_bytes < r->a_bytes ? "-" : "",
                    absdiff(r->a_bytes, r->b_bytes));
  }
  mn__sbuf_puts(f, "],\n\"segments\": [");
  for (size_t k = 0; k < d->nsegrows; k++)
    mn__sbuf_printf(f, "%s\n {\"size\": %" PRIu64 ", \"a_count\": %zu, \"b_count\": %zu}", k ? "," : "",
                    d->segrows[k].size, d->segrows[k].a, d->segrows[k].b);
  mn__sbuf_puts(f, "]");
}

static void json_diff(mn__sbuf_t *f, const diff_t *d, bool points) {
  mn__sbuf_putc(f, '{');
  json_diff_members(f, d, points);
  mn__sbuf_puts(f, "}\n");
}

/* ---- the page -------------------------------------------------------------------- */

/* The page (its data between the template's two halves), then its summary
 * and JSON (the page's name and size first). */
static void build_page(const diff_t *d, const mn_diff_options_t *o, mn__sbuf_t *page, mn__sbuf_t *summary,
                       mn__sbuf_t *json) {
  mn__sbuf_puts(page, mn_diff_page_head);
  mn__sbuf_puts(page, "<script id=\"mn-data\" type=\"application/json\">\n{\"title\": ");
  if (o->title) {
    mn__sbuf_json_str(page, o->title);
  } else {
    mn__sbuf_t dflt = {0};
    mn__sbuf_printf(&dflt, "%s vs %s", d->s[0].path, d->s[1].path);
    if (dflt.oom) page->oom = true;
    else mn__sbuf_json_str(page, mn__sbuf_str(&dflt));
    mn__sbuf_free(&dflt);
  }
  mn__sbuf_printf(page, ",\n\"top\": %d,\n\"diff\": ", PAGE_TOP);
  json_diff(page, d, true);
  mn__sbuf_puts(page, "}\n</script>\n");
  mn__sbuf_puts(page, mn_diff_page_tail);
  size_t len = page->len;
  mn__sbuf_printf(summary, "report %s: %s (%s) vs %s (%s), %zu bytes\n", o->output ? o->output : "(stdout)",
                  d->s[0].path, d->s[0].label, d->s[1].path, d->s[1].label, len);
  print_peak_row(summary, "replay allocated", true, (uint64_t)d->s[0].res.peak_allocated, true,
                 (uint64_t)d->s[1].res.peak_allocated);
  print_peak_row(summary, "replay reserved", true, (uint64_t)d->s[0].res.peak_reserved, true,
                 (uint64_t)d->s[1].res.peak_reserved);
  mn__sbuf_puts(json, "{\"path\": ");
  if (o->output) mn__sbuf_json_str(json, o->output);
  else mn__sbuf_puts(json, "null");
  mn__sbuf_printf(json, ", \"bytes\": %zu,\n", len);
  json_diff_members(json, d, false);
  mn__sbuf_puts(json, "}\n");
}

/* ---- the builder ----------------------------------------------------------------- */

static void diff_free(diff_t *d) {
  for (int k = 0; k < 2; k++) {
    side_t *s = &d->s[k];
    for (size_t i = 0; i < s->ngroups; i++) free(s->groups[i].label);
    free(s->groups);
    free(s->steps);
    free(s->segs);
  }
  free(d->rows);
  free(d->segrows);
}

/* The options checked, each side's device picked and settings read (notes
 * added), before any replay. */
static mn_status prepare(const mn_trace_t *a, const mn_trace_t *b, const mn_diff_options_t *o, diff_t *d,
                         mn__sbuf_t *notes) {
  if (o->config) {
    mn_caching_config_t cfg = mn_caching_config_default();
    if (mn_caching_config_parse(o->config, &cfg) != MN_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", mn__last_error_detail());
      return mn__error(MN_ERR_INVALID_ARGUMENT, FUNC, "bad config \"%s\": %s", o->config, msg);
    }
  }
  if (o->trace_device < -1 || o->trace_device > 1000)
    return mn__error(MN_ERR_INVALID_ARGUMENT, FUNC, "trace_device %d is out of range (-1..1000)", o->trace_device);
  const mn_trace_t *t[2] = {a, b};
  const char *names[2] = {o->name_a ? o->name_a : "A", o->name_b ? o->name_b : "B"};
  for (int k = 0; k < 2; k++) {
    side_t *s = &d->s[k];
    s->path = names[k];
    s->t = t[k];
    mn_status st = mn__trace_pick_device(FUNC, s->path, s->t, o->trace_device, "comparing", notes, &s->replay_device,
                                         &s->device, &s->multi);
    if (st != MN_OK) return st;
    s->config = o->config ? o->config : mn__trace_recorded_config(s->t, notes, &s->as_recorded);
  }
  set_labels(d);
  return MN_OK;
}

mn_status mn_diff_build(const mn_trace_t *a, const mn_trace_t *b, const mn_diff_options_t *options, mn_report_t **out) {
  if (!a || !b || !out) return mn__error(MN_ERR_INVALID_ARGUMENT, FUNC, "NULL argument");
  mn_diff_options_t o = options ? *options : mn_diff_options_default();
  mn_sim_config_t found;
  mn_status st = mn_sim_get_config(&found);
  if (st != MN_OK) return mn__error_wrap(st, FUNC);
  diff_t d;
  memset(&d, 0, sizeof d);
  mn__sbuf_t page = {0}, summary = {0}, json = {0}, notes = {0};
  st = prepare(a, b, &o, &d, &notes);
  for (int k = 0; k < 2 && st == MN_OK; k++) {
    mn__report_progress(o.on_progress, o.progress_user, "%s: replaying %zu entries...", d.s[k].label,
                        d.s[k].t->nentries);
    st = analyze_side(&d.s[k]);
  }
  if (st == MN_OK) st = compare(&d);
  if (st == MN_OK) {
    if (o.page) {
      build_page(&d, &o, &page, &summary, &json);
    } else {
      print_text(&summary, &d, o.top ? o.top : DEFAULT_TOP);
      json_diff(&json, &d, false);
    }
  }
  st = mn__report_sim_restore(FUNC, &found, st);
  diff_free(&d);
  if (st == MN_OK) return mn__report_finish(FUNC, o.page ? &page : NULL, &summary, &json, &notes, out);
  mn__sbuf_free(&page);
  mn__sbuf_free(&summary);
  mn__sbuf_free(&json);
  mn__sbuf_free(&notes);
  return st;
}
