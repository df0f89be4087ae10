/* tools/cmd_report.c: `mnemo report`: replays a trace on the SIM device and writes
 * one self-contained HTML page (inline CSS, JS and SVG; no network) about its memory. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "report_page.h"
#include "runtime/fileio.h"

const char cmd_report_usage[] =
    "  report TRACE -o REPORT.html [--config ALLOC_CONF]... [--capacity BYTES]\n"
    "            [--trace-device N] [--title TEXT]\n"
    "            replay the trace on the SIM device (first --config for the timeline\n"
    "            and the segment map at the peak; every --config in the comparison)\n"
    "            and write one self-contained HTML page; prints its summary\n";

#define MAX_CONFIGS 16
#define MAX_POINTS 1500
#define TOP_ALLOCS 25

typedef struct sample_s {
  size_t entry;
  int64_t allocated, reserved, requested;
} sample_t;

typedef struct timeline_s {
  sample_t *s;
  size_t n, cap;
  bool oom;
} timeline_t;

static void on_step(void *user, const mn_replay_step_t *st) {
  timeline_t *tl = user;
  if (tl->n == tl->cap) {
    size_t cap = tl->cap ? tl->cap * 2 : 4096;
    sample_t *ns = realloc(tl->s, cap * sizeof *ns);
    if (!ns) {
      tl->oom = true;
      return;
    }
    tl->s = ns;
    tl->cap = cap;
  }
  tl->s[tl->n++] = (sample_t){st->entry, st->allocated, st->reserved, st->requested};
}

static void at_stop(void *user, mn_allocator_t *a) {
  mn_snapshot_t **snap = user;
  if (mn_allocator_snapshot(a, snap) != MN_OK) *snap = NULL;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '<') fputs("\\u003c", f); /* never closes the script element */
    else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

typedef struct ref_s {
  uint64_t address;
  size_t index;
} ref_t;

static int cmp_ref(const void *a, const void *b) {
  const ref_t *x = a, *y = b;
  if (x->address != y->address) return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static const mn_trace_t *g_sort_trace;
static int cmp_entry_size(const void *a, const void *b) {
  const mn_trace_entry_t *x = &g_sort_trace->entries[*(const size_t *)a];
  const mn_trace_entry_t *y = &g_sort_trace->entries[*(const size_t *)b];
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* The trace's allocations on `dev` still alive after entry `upto`, largest
 * first: indices into t->entries in *out (malloc'ed); returns the count. */
static size_t live_at(const mn_trace_t *t, uint32_t dev, size_t upto, size_t **out) {
  size_t n = 0;
  ref_t *refs = malloc((t->nentries ? t->nentries : 1) * sizeof *refs);
  size_t *live = malloc((t->nentries ? t->nentries : 1) * sizeof *live);
  if (!refs || !live) {
    free(refs);
    free(live);
    *out = NULL;
    return 0;
  }
  for (size_t i = 0; i < t->nentries && i <= upto; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->device == dev && (e->action == MN_TRACE_ALLOC || e->action == MN_TRACE_FREE_REQUESTED))
      refs[n++] = (ref_t){e->address, i};
  }
  qsort(refs, n, sizeof *refs, cmp_ref);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) /* the last entry of each address decides */
    if ((i + 1 == n || refs[i + 1].address != refs[i].address) && t->entries[refs[i].index].action == MN_TRACE_ALLOC)
      live[k++] = refs[i].index;
  free(refs);
  g_sort_trace = t;
  qsort(live, k, sizeof *live, cmp_entry_size);
  *out = live;
  return k;
}

static mn_status make_allocator(const char *config, mn_allocator_t **out) {
  mn_caching_config_t cfg = mn_caching_config_default();
  mn_status st = mn_caching_config_parse(config, &cfg);
  if (st != MN_OK) return st;
  return mn_caching_allocator_create(mn_device_sim(0), &cfg, out);
}

static void write_result(FILE *f, const char *config, const mn_replay_result_t *r) {
  fprintf(f, "{\"config\": ");
  json_str(f, config);
  fprintf(f,
          ", \"peak_allocated\": %" PRId64 ", \"peak_reserved\": %" PRId64 ", \"peak_requested\": %" PRId64
          ", \"ratio\": %.4f, \"device_allocs\": %" PRId64 ", \"ooms\": %" PRIu64 ", \"retries\": %" PRIu64
          ", \"ns_per_op\": %.1f}",
          r->peak_allocated, r->peak_reserved, r->peak_requested, r->ratio, r->device_allocs, r->ooms, r->retries,
          r->ns_per_op);
}

int cmd_report(int argc, char **argv) {
  const char *path = NULL, *out_path = NULL, *title = NULL, *configs[MAX_CONFIGS];
  size_t nconfigs = 0, capacity = 0;
  int trace_device = -1;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    bool takes = !strcmp(arg, "-o") || !strcmp(arg, "--config") || !strcmp(arg, "--capacity") ||
                 !strcmp(arg, "--trace-device") || !strcmp(arg, "--title");
    if (takes && i + 1 >= argc) {
      fprintf(stderr, "mnemo report: %s needs a value\n", arg);
      return 2;
    }
    if (!strcmp(arg, "-o")) {
      out_path = argv[++i];
    } else if (!strcmp(arg, "--title")) {
      title = argv[++i];
    } else if (!strcmp(arg, "--config")) {
      if (nconfigs == MAX_CONFIGS) {
        fprintf(stderr, "mnemo report: at most %d --config\n", MAX_CONFIGS);
        return 2;
      }
      configs[nconfigs++] = argv[++i];
    } else if (!strcmp(arg, "--capacity")) {
      if (mn_bytes_parse(argv[++i], &capacity) != MN_OK || capacity == 0) {
        fprintf(stderr, "mnemo report: --capacity \"%s\" is not a byte count (e.g. 80G)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(arg, "--trace-device")) {
      char *end = NULL;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 0 || n > 1000) {
        fprintf(stderr, "mnemo report: --trace-device must be 0..1000, not \"%s\"\n", argv[i]);
        return 2;
      }
      trace_device = (int)n;
    } else if (arg[0] == '-' && arg[1]) {
      fprintf(stderr, "mnemo report: unknown option %s\nusage: mnemo\n%s", arg, cmd_report_usage);
      return 2;
    } else if (!path) {
      path = arg;
    } else {
      fprintf(stderr, "mnemo report: one trace at a time (got %s and %s)\n", path, arg);
      return 2;
    }
  }
  if (!path || !out_path) {
    fprintf(stderr, "usage: mnemo\n%s", cmd_report_usage);
    return 2;
  }
  if (nconfigs == 0) configs[nconfigs++] = "";
  for (size_t k = 0; k < nconfigs; k++) {
    mn_caching_config_t cfg = mn_caching_config_default();
    if (mn_caching_config_parse(configs[k], &cfg) != MN_OK) {
      fprintf(stderr, "mnemo report: bad --config \"%s\": %s\n", configs[k], mn_last_error());
      return 2;
    }
  }
  if (capacity) {
    mn_sim_config_t sc = mn_sim_config_default();
    sc.capacity = capacity;
    if (mn_sim_configure(&sc) != MN_OK) {
      fprintf(stderr, "mnemo report: --capacity: %s\n", mn_last_error());
      return 2;
    }
  }
  mn_trace_t *t = NULL;
  if (mn_trace_read(path, &t) != MN_OK) {
    fprintf(stderr, "mnemo report: %s\n", mn_last_error());
    return 1;
  }
  int rc = 1;
  timeline_t tl = {0};
  mn_snapshot_t *snap = NULL;
  mn_replay_result_t res[MAX_CONFIGS];
  mn_allocator_t *a = NULL;
  size_t *top = NULL;
  FILE *f = NULL;
  /* 1: every config, the first with the timeline. */
  for (size_t k = 0; k < nconfigs; k++) {
    if (make_allocator(configs[k], &a) != MN_OK) goto fail;
    mn_replay_options_t o = mn_replay_options_default();
    o.trace_device = trace_device;
    if (k == 0) {
      o.on_step = on_step;
      o.on_step_user = &tl;
    }
    if (mn_trace_replay(t, a, &o, &res[k]) != MN_OK) goto fail;
    mn_allocator_destroy(a);
    a = NULL;
  }
  if (tl.oom) {
    fprintf(stderr, "mnemo report: out of host memory for the timeline\n");
    goto done;
  }
  /* 2: the peak (first step at the peak reserved), and the allocator's state there. */
  size_t peak_i = 0;
  for (size_t i = 0; i < tl.n; i++)
    if (tl.s[i].reserved > tl.s[peak_i].reserved) peak_i = i;
  size_t peak_entry = tl.n ? tl.s[peak_i].entry : 0;
  if (make_allocator(configs[0], &a) != MN_OK) goto fail;
  mn_replay_options_t o = mn_replay_options_default();
  o.trace_device = trace_device;
  o.stop_after = peak_entry;
  o.at_stop = at_stop;
  o.at_stop_user = &snap;
  mn_replay_result_t stop_res;
  if (mn_trace_replay(t, a, &o, &stop_res) != MN_OK) goto fail;
  mn_allocator_destroy(a);
  a = NULL;
  if (!snap) {
    fprintf(stderr, "mnemo report: no snapshot at the peak: %s\n", mn_last_error());
    goto done;
  }
  size_t nblocks = 0;
  for (size_t i = 0; i < snap->nsegments; i++) nblocks += snap->segments[i].nblocks;
  size_t nact = live_at(t, res[0].trace_device, peak_entry, &top);
  if (!top) {
    fprintf(stderr, "mnemo report: out of host memory\n");
    goto done;
  }

  /* 3: the page, built in memory and written through a temporary file renamed
   * into place (regular files only: a FIFO or device is refused, not waited on). */
  char *page = NULL;
  size_t page_len = 0;
  f = open_memstream(&page, &page_len);
  if (!f) {
    fprintf(stderr, "mnemo report: out of host memory\n");
    goto done;
  }
  fputs(mn_report_page_head, f);
  fprintf(f, "<script id=\"mn-data\" type=\"application/json\">\n{\"trace\": ");
  json_str(f, path);
  fprintf(f, ", \"title\": ");
  json_str(f, title ? title : path);
  const char *src = mn_trace_meta_get(t, "source");
  fprintf(f, ", \"source\": ");
  json_str(f, src ? src : "");
  fprintf(f, ", \"entries\": %zu, \"peak_entry\": %zu, \"peak_line\": %" PRIu32 ", \"live_at_peak\": %zu",
          t->nentries, peak_entry, peak_entry < t->nentries ? t->entries[peak_entry].line : 0, nact);
  uint64_t v;
  fprintf(f, ", \"torch\": {");
  const char *sep = "";
  static const char *const tkeys[] = {"torch_peak_allocated", "torch_peak_reserved", "torch_peak_requested"};
  for (size_t k = 0; k < 3; k++)
    if (mn_trace_meta_get_u64(t, tkeys[k], &v) == MN_OK) {
      fprintf(f, "%s\"%s\": %" PRIu64, sep, tkeys[k] + 6, v);
      sep = ", ";
    }
  mn_clear_error();
  fprintf(f, "}, \"results\": [");
  for (size_t k = 0; k < nconfigs; k++) {
    fprintf(f, "%s\n  ", k ? "," : "");
    write_result(f, configs[k], &res[k]);
  }
  /* Timeline, at most MAX_POINTS buckets; each keeps its step of highest
   * reserved (then allocated), so the peaks survive the thinning. */
  fprintf(f, "],\n\"timeline\": [");
  size_t per = tl.n / MAX_POINTS + 1;
  for (size_t b = 0; b < tl.n; b += per) {
    size_t best = b, best_alloc = b;
    for (size_t i = b; i < b + per && i < tl.n; i++) {
      if (tl.s[i].reserved > tl.s[best].reserved) best = i;
      if (tl.s[i].allocated > tl.s[best_alloc].allocated) best_alloc = i;
    }
    fprintf(f, "%s[%zu,%" PRId64 ",%" PRId64 ",%" PRId64 "]", b ? "," : "", tl.s[best].entry,
            tl.s[best_alloc].allocated, tl.s[best].reserved, tl.s[best].requested);
  }
  fprintf(f, "],\n\"segments\": [");
  for (size_t i = 0; i < snap->nsegments; i++) {
    const mn_snapshot_segment_t *s = &snap->segments[i];
    fprintf(f, "%s\n  {\"address\": \"0x%" PRIxPTR "\", \"size\": %zu, \"allocated\": %zu, \"stream\": %" PRIu64
            ", \"large\": %s, \"expandable\": %s, \"blocks\": [",
            i ? "," : "", s->address, s->total_size, s->allocated_size, s->stream_id, s->is_large ? "true" : "false",
            s->is_expandable ? "true" : "false");
    for (size_t b = 0; b < s->nblocks; b++)
      fprintf(f, "%s[%zu,%zu,%d]", b ? "," : "", s->blocks[b].size, s->blocks[b].requested_size,
              (int)s->blocks[b].state);
    fprintf(f, "]}");
  }
  fprintf(f, "],\n\"largest\": [");
  for (size_t i = 0; i < nact && i < TOP_ALLOCS; i++) {
    const mn_trace_entry_t *e = &t->entries[top[i]];
    fprintf(f, "%s[%" PRIu32 ",%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d]", i ? "," : "", e->line,
            top[i], e->stream, e->size, e->block_size, e->time_us, e->pre ? 1 : 0);
  }
  fprintf(f, "]}\n</script>\n");
  fputs(mn_report_page_tail, f);
  bool built = !ferror(f);
  built = fclose(f) == 0 && built;
  f = NULL;
  mn_status wst = built ? mn__file_write_atomic("mnemo report", out_path, page, page_len) : MN_ERR_OUT_OF_MEMORY;
  free(page);
  if (wst != MN_OK) {
    fprintf(stderr, "%s\n", built ? mn_last_error() : "mnemo report: out of host memory building the page");
    goto done;
  }
  /* 4: the summary on stdout. */
  char x[32], y[32];
  printf("report %s: %zu entries, %zu configs\n", out_path, t->nentries, nconfigs);
  printf("  peak reserved %" PRId64 " B (%.2f GiB) at entry %zu; peak allocated %" PRId64 " B (%.2f GiB)\n",
         res[0].peak_reserved, (double)res[0].peak_reserved / 1073741824.0, peak_entry, res[0].peak_allocated,
         (double)res[0].peak_allocated / 1073741824.0);
  size_t fr = 0, largest_free = 0;
  for (size_t i = 0; i < snap->nsegments; i++)
    for (size_t b = 0; b < snap->segments[i].nblocks; b++)
      if (snap->segments[i].blocks[b].state == MN_BLOCK_INACTIVE) {
        fr += snap->segments[i].blocks[b].size;
        if (snap->segments[i].blocks[b].size > largest_free) largest_free = snap->segments[i].blocks[b].size;
      }
  snprintf(x, sizeof x, "%.2f MiB", (double)fr / 1048576.0);
  snprintf(y, sizeof y, "%.2f MiB", (double)largest_free / 1048576.0);
  printf("  at the peak: %zu segments, %zu blocks, %s free in segments (largest free block %s)\n", snap->nsegments,
         nblocks, x, y);
  if (nact)
    printf("  %zu allocations alive at the peak; the largest: %.2f MiB (trace line %" PRIu32 ")\n", nact,
           (double)t->entries[top[0]].size / 1048576.0, t->entries[top[0]].line);
  for (size_t k = 0; k < nconfigs; k++)
    printf("  %-40.40s reserved %.2f GiB, allocated %.2f GiB, ratio %.3f, %" PRIu64 " OOMs\n",
           configs[k][0] ? configs[k] : "(defaults)", (double)res[k].peak_reserved / 1073741824.0,
           (double)res[k].peak_allocated / 1073741824.0, res[k].ratio, res[k].ooms);
  uint64_t tr = 0, ta = 0;
  if (mn_trace_meta_get_u64(t, "torch_peak_reserved", &tr) == MN_OK &&
      mn_trace_meta_get_u64(t, "torch_peak_allocated", &ta) == MN_OK)
    printf("  %-40s reserved %.2f GiB, allocated %.2f GiB, ratio %.3f\n", "pytorch (recorded, from the trace)",
           (double)tr / 1073741824.0, (double)ta / 1073741824.0, ta ? (double)tr / (double)ta : 0.0);
  mn_clear_error();
  rc = 0;
  goto done;
fail:
  fprintf(stderr, "mnemo report: %s\n", mn_last_error());
done:
  if (f) fclose(f);
  mn_allocator_destroy(a);
  free(top);
  if (snap) mn_snapshot_free(snap);
  free(tl.s);
  mn_trace_destroy(t);
  return rc;
}
