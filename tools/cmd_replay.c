/* tools/cmd_replay.c: `mnemo replay`: replays a trace file against the caching
 * allocator (one run per --config) on the SIM device and prints the memory it needed.
 * Options: its table below, read by the shared parser (tools/cli.h).
 * Single-threaded (the CLI's main thread). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "profiling/analysis.h"
#include "runtime/hostmem.h"
#include "trace_input.h"

const char cmd_replay_about[] =
    "Replays a trace (docs/TRACE_FORMAT.md) or a PyTorch snapshot (.pickle, imported\n"
    "on the fly) on the SIM device (or cuda:0), once per --config, and compares the\n"
    "peak allocated/reserved bytes with the recorded run. With no --config the replay\n"
    "is as recorded: the allocator settings in the trace; the pre-existing segments\n"
    "are reserved as recorded (the warm cache recording began with) unless\n"
    "--no-pre-segments. Every device of the trace is replayed on its own, against its\n"
    "own recorded figures (not pinned host memory). Without --capacity, a device whose\n"
    "recording ran out of memory (or freed part of its cache for want of it) replays\n"
    "on a SIM device of the size the recording had, so the OOM recurs at its entry.\n"
    "A progress bar on stderr when it is a terminal.\n";

enum {
  O_CONFIG = 1, O_ALLOCATOR, O_JSON, O_DEVICE, O_CAPACITY, O_RETRIES, O_TRACE_DEVICE, O_NO_PRE, O_NO_PRE_SEGMENTS,
  O_NO_EMPTY_CACHE, O_REPEAT, O_PROGRESS, O_NO_PROGRESS, O_MAX_DECOMPRESSED, O_NO_CACHE
};

const mn__cli_opt_t cmd_replay_opts[] = {
    {"config", 0, "ALLOC_CONF", O_CONFIG,
     "allocator settings of one run (PYTORCH_CUDA_ALLOC_CONF syntax, \"\" for mnemo's defaults); repeat it to "
     "compare several (at most 64; default: as recorded)"},
    {"allocator", 0, "caching|naive", O_ALLOCATOR, "the allocator replayed (default caching; naive takes no --config)"},
    {"json", 0, NULL, O_JSON, "one JSON object per device and run (a list when more than one) instead of the table"},
    {"device", 0, "sim|cuda", O_DEVICE, "the device replayed on: sim:0 (default) or cuda:0"},
    {"capacity", 0, "BYTES", O_CAPACITY, "the SIM device's size (e.g. 80G); OOMs beyond it (default: as recorded)"},
    {"retries", 0, "N", O_RETRIES, "on an OOM, empty the cache and retry up to N times (0..1000)"},
    {"trace-device", 0, "N", O_TRACE_DEVICE, "replay only this recorded device (0..1000; default: every device)"},
    {"no-pre", 0, NULL, O_NO_PRE, "skip the allocations made before recording began"},
    {"no-pre-segments", 0, NULL, O_NO_PRE_SEGMENTS, "do not reserve the pre-existing segments as recorded"},
    {"no-empty-cache", 0, NULL, O_NO_EMPTY_CACHE, "ignore the trace's empty_cache points"},
    {"repeat", 0, "N", O_REPEAT, "N fresh replays per config (1..101), median ns/op"},
    {"progress", 0, NULL, O_PROGRESS, "a progress bar on stderr (default: when it is a terminal)"},
    {"no-progress", 0, NULL, O_NO_PROGRESS, "no progress bar"},
    MN__TOOLS_OPT_MAX_DECOMPRESSED(O_MAX_DECOMPRESSED),
    MN__TOOLS_OPT_NO_CACHE(O_NO_CACHE),
    {NULL, 0, NULL, 0, NULL},
};

#define MAX_CONFIGS 64
#define MAX_REPEAT 101

typedef struct oom_list_s {
  mn_replay_oom_t *v;
  size_t n, cap;
  bool nomem; /* some were lost for want of host memory */
} oom_list_t;

typedef struct torch_figs_s {
  uint64_t peak_allocated, peak_reserved, segment_allocs, reserved_start;
  bool has_allocated, has_reserved, has_segments, has_start;
} torch_figs_t;

/* One device of the trace, replayed on its own (a fresh allocator per run). */
typedef struct dev_info_s {
  uint32_t index;     /* the trace's device index (the entries' device field) */
  uint64_t label;     /* the recorded device's number (CUDA index for a PyTorch snapshot) */
  size_t nentries, pre;
  size_t ntorch_ooms; /* its recorded oom lines */
  uint64_t oom_capacity; /* reserved at its first oom line + that line's device_free; 0: no oom line */
  uint64_t release_capacity; /* no oom line: the size its partial cache releases imply (0: none) */
  size_t partial_releases;   /* runs of segment frees with no empty_cache line before them */
  torch_figs_t tf;
} dev_info_t;

typedef struct replay_run_s {
  const char *config; /* as given; "" for the defaults */
  bool as_recorded;   /* no --config: the trace's recorded settings (meta config) */
  char effective[512];
  mn_replay_result_t res;
  const dev_info_t *dev;
  uint64_t capacity;    /* the SIM device's bytes for this run (0: not a SIM run) */
  const char *capacity_from; /* "option", "oom" (as recorded) or "default" */
  oom_list_t ooms;      /* the replay's out-of-memory entries and recorded oom lines */
} replay_run_t;

static char g_devname[32] = "sim:0"; /* the replay device, for the table */

/* The SIM device as recorded for device d (the rule: mn__trace_size_as_recorded). */
static const char *size_as_recorded(const dev_info_t *d, mn_sim_config_t *sc) {
  mn_trace_device_t td;
  memset(&td, 0, sizeof td);
  td.oom_capacity = d->oom_capacity;
  td.release_capacity = d->release_capacity;
  return mn__trace_size_as_recorded(&td, sc);
}

static const char *gib(int64_t bytes, char *buf, size_t n) {
  if (bytes < 0) snprintf(buf, n, "n/a");
  else if (bytes >= (int64_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)bytes / (double)(1u << 30));
  else snprintf(buf, n, "%.2f MiB", (double)bytes / (double)(1u << 20));
  return buf;
}

/* A device's PyTorch figures: its `devN.torch_*` keys in a trace of several
 * devices (the importer's `meta devices`), the plain `torch_*` keys otherwise. */
static void read_torch(const mn_trace_t *t, bool multi, uint64_t label, torch_figs_t *f) {
  static const char *const names[4] = {"torch_peak_allocated", "torch_peak_reserved", "torch_segment_allocs",
                                       "torch_reserved_start"};
  uint64_t *vals[4] = {&f->peak_allocated, &f->peak_reserved, &f->segment_allocs, &f->reserved_start};
  bool *has[4] = {&f->has_allocated, &f->has_reserved, &f->has_segments, &f->has_start};
  memset(f, 0, sizeof *f);
  for (int k = 0; k < 4; k++) {
    char key[MN_TRACE_META_KEY_MAX + 1];
    if (multi) snprintf(key, sizeof key, "dev%" PRIu64 ".%s", label, names[k]);
    else snprintf(key, sizeof key, "%s", names[k]);
    *has[k] = mn_trace_meta_get_u64(t, key, vals[k]) == MN_OK;
  }
  mn_clear_error();
}

static void oom_push(void *user, const mn_replay_oom_t *o) {
  oom_list_t *l = user;
  if (!mn__grow(&l->v, l->n, &l->cap, sizeof *l->v, 16)) {
    l->nomem = true;
    return;
  }
  l->v[l->n++] = *o;
}

/* The replay's outcome at recorded oom line `entry` (NULL: not replayed). */
static const mn_replay_oom_t *oom_find(const oom_list_t *l, size_t entry) {
  for (size_t k = 0; k < l->n; k++)
    if (l->v[k].recorded && l->v[k].entry == entry) return &l->v[k];
  return NULL;
}

static void print_json_run(const char *trace_path, const mn_trace_t *t, const char *allocator,
                           const replay_run_t *run) {
  const mn_replay_result_t *r = &run->res;
  const torch_figs_t *tf = &run->dev->tf;
  printf("{\"trace\": ");
  mn__tools_json_str(stdout, trace_path);
  printf(", \"device\": %" PRIu64 ", \"allocator\": \"%s\", \"config\": ", run->dev->label, allocator);
  mn__tools_json_str(stdout, run->config);
  printf(", \"config_effective\": ");
  mn__tools_json_str(stdout, run->effective);
  printf(", \"as_recorded\": %s", run->as_recorded ? "true" : "false");
  printf(", \"peak_allocated\": %" PRId64 ", \"peak_reserved\": %" PRId64 ", \"peak_requested\": %" PRId64
         ", \"ratio\": %.4f, \"device_allocs\": %" PRId64 ", \"device_allocs_events\": %" PRId64 ", \"device_frees\": %" PRId64 ", \"peak_device_mapped\": %" PRId64
         ", \"reserved_after_pre\": %" PRId64 ", \"allocated_after_pre\": %" PRId64
         ", \"ns_per_op\": %.1f, \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"pre_allocs\": %" PRIu64
         ", \"ooms\": %" PRIu64 ", \"skipped_frees\": %" PRIu64 ", \"streams\": %zu, \"stats_from_allocator\": %s"
         ", \"retries\": %" PRIu64 ", \"empty_caches\": %" PRIu64 ", \"trace_device\": %" PRIu32
         ", \"trace_devices\": %" PRIu32 ", \"pre_segments\": %" PRIu64 ", \"pre_segments_laid_out\": %" PRIu64
         ", \"replay_device\": \"%s\"",
         r->peak_allocated, r->peak_reserved, r->peak_requested, r->ratio, r->device_allocs, r->device_allocs_events,
         r->device_frees, r->peak_device_mapped,
         r->reserved_after_pre, r->allocated_after_pre, r->ns_per_op, r->allocs, r->frees, r->pre_allocs, r->ooms,
         r->skipped_frees, r->streams, r->stats_from_allocator ? "true" : "false", r->retries, r->empty_caches,
         r->trace_device, r->trace_devices, r->pre_segments, r->pre_segments_laid_out, g_devname);
  if (run->capacity) printf(", \"capacity\": %" PRIu64 ", \"capacity_from\": \"%s\"", run->capacity, run->capacity_from);
  else printf(", \"capacity\": null");
  /* the replay's out-of-memory allocations; then the recorded oom lines and what the replay did there */
  printf(", \"oom_entries\": [");
  const char *sep = "";
  for (size_t k = 0; k < run->ooms.n; k++) {
    if (run->ooms.v[k].recorded) continue;
    printf("%s{\"entry\": %zu, \"size\": %" PRIu64 "}", sep, run->ooms.v[k].entry, run->ooms.v[k].size);
    sep = ", ";
  }
  printf("], \"torch_ooms\": [");
  sep = "";
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->action != MN_TRACE_OOM || e->device != run->dev->index) continue;
    const mn_replay_oom_t *o = oom_find(&run->ooms, i);
    printf("%s{\"entry\": %zu, \"time_us\": %" PRIu64 ", \"size\": %" PRIu64 ", \"device_free\": %" PRIu64
           ", \"reproduced\": %s}",
           sep, i, e->time_us, e->size, e->address, o ? (o->reproduced ? "true" : "false") : "null");
    sep = ", ";
  }
  printf("], \"ooms_reproduced\": %" PRIu64, r->ooms_reproduced);
  if (r->recorded_ooms) printf(", \"oom_reproduced\": %s", r->ooms_reproduced == r->recorded_ooms ? "true" : "false");
  if (tf->has_allocated || tf->has_reserved) {
    printf(", \"torch\": {");
    sep = "";
    if (tf->has_allocated) printf("%s\"peak_allocated\": %" PRIu64, sep, tf->peak_allocated), sep = ", ";
    if (tf->has_reserved) printf("%s\"peak_reserved\": %" PRIu64, sep, tf->peak_reserved), sep = ", ";
    if (tf->has_segments) printf("%s\"segment_allocs\": %" PRIu64, sep, tf->segment_allocs), sep = ", ";
    if (tf->has_start) printf("%s\"reserved_start\": %" PRIu64, sep, tf->reserved_start);
    printf("}");
    if (tf->has_reserved && tf->peak_reserved && r->peak_reserved >= 0)
      printf(", \"reserved_vs_torch\": %.4f", (double)r->peak_reserved / (double)tf->peak_reserved);
    if (tf->has_allocated && tf->peak_allocated)
      printf(", \"allocated_vs_torch\": %.4f", (double)r->peak_allocated / (double)tf->peak_allocated);
    if (tf->has_segments && tf->segment_allocs && r->device_allocs_events >= 0)
      printf(", \"segments_vs_torch\": %.4f", (double)r->device_allocs_events / (double)tf->segment_allocs);
  }
  printf("}");
}

/* The row label of a run: its config, "(defaults)", or "as recorded (...)". */
static const char *run_label(const replay_run_t *run, bool naive, char *buf, size_t n) {
  if (naive) return "(naive)";
  if (run->as_recorded) {
    snprintf(buf, n, "as recorded (%s)", run->config[0] ? run->config : "defaults");
    return buf;
  }
  return run->config[0] ? run->config : "(defaults)";
}

/* One device's block of the table: its runs (runs[0..nruns), all of this device). */
static void print_table_device(const mn_trace_t *t, const char *allocator, const replay_run_t *runs, size_t nruns,
                               bool several) {
  const dev_info_t *d = runs[0].dev;
  const torch_figs_t *tf = &d->tf;
  bool allocator_naive = !strcmp(allocator, "naive");
  /* the config column as wide as its longest label: names are never cut */
  static const char torch_label[] = "pytorch (recorded, from the trace header)";
  char a[32], b[32], rt[16], sg[32], lb[4096];
  int w = 40;
  for (size_t k = 0; k < nruns; k++) {
    size_t len = strlen(run_label(&runs[k], allocator_naive, lb, sizeof lb));
    if (len > (size_t)w) w = len > 512 ? 512 : (int)len;
  }
  if ((tf->has_allocated || tf->has_reserved) && sizeof torch_label - 1 > (size_t)w) w = (int)sizeof torch_label - 1;
  bool capnote = runs[0].capacity && runs[0].capacity_from[0] != 'd';
  if (several || d->ntorch_ooms || capnote) {
    printf("device %" PRIu64 ": %zu entries (%zu pre-existing allocations), %zu stream(s)", d->label, d->nentries,
           d->pre, runs[0].res.streams);
    if (capnote)
      printf("; capacity %s (%s)", gib((int64_t)runs[0].capacity, a, sizeof a),
             runs[0].capacity_from[0] == 'o'   ? "as recorded: PyTorch's reserved bytes at its first OOM + the free "
                                                 "bytes it reported"
             : runs[0].capacity_from[0] == 'r' ? "as recorded: the least that PyTorch's partial cache releases allow"
                                               : "--capacity");
    printf("\n");
  }
  printf("%-*s %12s %12s %7s %9s %8s %7s %9s %5s\n", w, "config", "peak alloc", "peak reserv", "res/all",
         "res/torch", "seg/torch", "dev.all", "ns/op", "OOMs");
  for (size_t k = 0; k < nruns; k++) {
    const mn_replay_result_t *r = &runs[k].res;
    if (tf->has_reserved && tf->peak_reserved && r->peak_reserved >= 0)
      snprintf(rt, sizeof rt, "%.3f", (double)r->peak_reserved / (double)tf->peak_reserved);
    else snprintf(rt, sizeof rt, "-");
    if (tf->has_segments && tf->segment_allocs)
      snprintf(sg, sizeof sg, "%.3f", (double)r->device_allocs_events / (double)tf->segment_allocs);
    else snprintf(sg, sizeof sg, "-");
    printf("%-*s %12s %12s %7.3f %9s %8s %7" PRId64 " %9.1f %5" PRIu64 "\n", w,
           run_label(&runs[k], allocator_naive, lb, sizeof lb), gib(r->peak_allocated, a, sizeof a),
           gib(r->peak_reserved, b, sizeof b), r->ratio, rt, sg, r->device_allocs, r->ns_per_op, r->ooms);
  }
  if (tf->has_allocated || tf->has_reserved) {
    printf("%-*s %12s %12s %7.3f %9s %8s %7s %9s %5s\n", w, torch_label,
           tf->has_allocated ? gib((int64_t)tf->peak_allocated, a, sizeof a) : "-",
           tf->has_reserved ? gib((int64_t)tf->peak_reserved, b, sizeof b) : "-",
           tf->has_allocated && tf->peak_allocated ? (double)tf->peak_reserved / (double)tf->peak_allocated : 0.0,
           "1.000", "1.000", "-", "-", "-");
  }
  for (size_t k = 0; k < nruns; k++) {
    const mn_replay_result_t *r = &runs[k].res;
    printf("  %s: after the pre-existing allocations reserved %s", run_label(&runs[k], allocator_naive, lb, sizeof lb),
           gib(r->reserved_after_pre, a, sizeof a));
    if (tf->has_start) printf(" (pytorch %s)", gib((int64_t)tf->reserved_start, b, sizeof b));
    if (r->pre_segments)
      printf(" in %" PRIu64 " pre-existing segments reserved as recorded (%" PRIu64 " laid out)", r->pre_segments,
             r->pre_segments_laid_out);
    printf(", %" PRId64 " raw allocations during the events", r->device_allocs_events);
    if (tf->has_segments) printf(" (pytorch %" PRIu64 ")", tf->segment_allocs);
    printf(", %" PRId64 " raw frees", r->device_frees);
    if (r->stats_from_allocator && r->peak_device_mapped >= 0 && r->peak_device_mapped != r->peak_reserved)
      printf("; WARNING: the SIM device's mapped peak is %s", gib(r->peak_device_mapped, b, sizeof b));
    printf("%s\n", runs[k].res.stats_from_allocator ? "" : " [no allocator stats: SIM mapped bytes]");
    if (r->recorded_ooms)
      printf("    PyTorch ran out of memory %" PRIu64 " time(s); the replay did too at %" PRIu64 " of them\n",
             r->recorded_ooms, r->ooms_reproduced);
  }
  size_t shown = 0;
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->action != MN_TRACE_OOM || e->device != d->index) continue;
    if (shown++ == 8) {
      printf("  ... (%zu recorded OOMs in all: --json lists them)\n", d->ntorch_ooms);
      break;
    }
    const mn_replay_oom_t *o = oom_find(&runs[0].ooms, i);
    printf("  recorded OOM at entry %zu (%" PRIu64 " us): asked %s, the device had %s free; replay (%s): %s\n", i,
           e->time_us, gib(e->size > INT64_MAX ? -1 : (int64_t)e->size, a, sizeof a),
           gib(e->address > INT64_MAX ? -1 : (int64_t)e->address, b, sizeof b),
           run_label(&runs[0], allocator_naive, lb, sizeof lb),
           !o ? "not replayed" : o->reproduced ? "out of memory there too" : "had room");
  }
}

static void print_table(const char *trace_path, const mn_trace_t *t, const char *allocator, const replay_run_t *runs,
                        size_t nruns, size_t per_dev) {
  size_t pre = 0;
  for (size_t i = 0; i < t->nentries && t->entries[i].pre; i++) pre += t->entries[i].action == MN_TRACE_ALLOC;
  const char *src = mn_trace_meta_get(t, "source");
  size_t ndev = per_dev ? nruns / per_dev : 0;
  printf("trace %s%s%s%s: %zu entries (%zu pre-existing allocations)", trace_path, src ? " (from " : "",
         src ? src : "", src ? ")" : "", t->nentries, pre);
  if (ndev == 1) printf(", %zu stream(s)", nruns ? runs[0].res.streams : 0);
  else printf(", %zu devices, each replayed on its own", ndev);
  printf("; device %s; allocator %s\n", g_devname, allocator);
  for (size_t k = 0; k < ndev; k++) {
    if (k) printf("\n");
    print_table_device(t, allocator, runs + k * per_dev, per_dev, ndev > 1);
  }
  printf("peak alloc/reserv: over the whole replay, pre-existing allocations included; res/torch: our peak\n"
         "reserved / PyTorch's (this device's figures); seg/torch: raw allocations during the trace events /\n"
         "PyTorch's segment_alloc events; dev.all: raw allocations in all; ns/op: host time per alloc/free call.\n");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct progress_s {
  size_t total, next;
  const char *label;
} progress_t;

static void progress_step(void *user, const mn_replay_step_t *s) {
  progress_t *p = user;
  if (s->entry < p->next) return;
  p->next = s->entry + p->total / 100 + 1;
  int pct = p->total ? (int)(100.0 * (double)(s->entry + 1) / (double)p->total) : 100;
  int bars = pct * 30 / 100;
  fprintf(stderr, "\r%-24.24s [%.*s%*s] %3d%%", p->label, bars, "==============================", 30 - bars, "", pct);
  fflush(stderr);
}

/* Options of one `mnemo replay` call that every run shares. */
typedef struct replay_args_s {
  bool naive, skip_pre, skip_pre_segments, skip_empty_cache, progress;
  int repeat, trace_device;
  unsigned retries;
  mn_device_t device;
} replay_args_t;

static int replay_one(const mn_trace_t *t, const replay_args_t *ra, replay_run_t *run) {
  bool naive = ra->naive, skip_pre = ra->skip_pre;
  int repeat = ra->repeat;
  mn_caching_config_t cfg = mn_caching_config_default();
  if (mn_caching_config_parse(run->config, &cfg) != MN_OK) {
    fprintf(stderr, "mnemo replay: bad --config \"%s\": %s\n", run->config, mn_last_error());
    return 2;
  }
  if (naive) snprintf(run->effective, sizeof run->effective, "naive");
  else if (mn_caching_config_format(&cfg, run->effective, sizeof run->effective) != MN_OK)
    snprintf(run->effective, sizeof run->effective, "?");
  double ns[MAX_REPEAT];
  for (int k = 0; k < repeat; k++) {
    mn_allocator_t *a = NULL;
    mn_status st = naive ? mn_naive_allocator_create(ra->device, &a)
                         : mn_caching_allocator_create(ra->device, &cfg, &a);
    if (st != MN_OK) {
      fprintf(stderr, "mnemo replay: cannot create the allocator: %s\n", mn_last_error());
      return 1;
    }
    mn_replay_options_t opt = mn_replay_options_default();
    opt.skip_pre = skip_pre;
    opt.skip_empty_cache = ra->skip_empty_cache;
    opt.skip_pre_segments = ra->skip_pre_segments;
    opt.oom_retries = ra->retries;
    opt.trace_device = (int)run->dev->index;
    opt.replay_ooms = true;
    if (k == 0) { /* the first replay's OOMs are the run's (the others replay the same) */
      opt.on_oom = oom_push;
      opt.on_oom_user = &run->ooms;
    }
    progress_t prog = {t->nentries, 0, run->config[0] ? run->config : "(defaults)"};
    if (ra->progress) {
      opt.on_step = progress_step;
      opt.on_step_user = &prog;
    }
    mn_replay_result_t res;
    st = mn_trace_replay(t, a, &opt, &res);
    if (ra->progress && st == MN_OK) {
      mn_replay_step_t last = {.entry = t->nentries ? t->nentries - 1 : 0};
      prog.next = 0;
      progress_step(&prog, &last); /* the bar ends at 100% */
    }
    if (ra->progress) fprintf(stderr, "\r%60s\r", "");
    mn_allocator_destroy(a);
    if (st != MN_OK) {
      fprintf(stderr, "mnemo replay: %s\n", mn_last_error());
      return 1;
    }
    if (run->ooms.nomem) {
      fprintf(stderr, "mnemo replay: out of host memory for the list of OOMs\n");
      return 1;
    }
    if (k == 0) run->res = res;
    else if (res.peak_allocated != run->res.peak_allocated || res.peak_reserved != run->res.peak_reserved ||
             res.device_allocs != run->res.device_allocs)
      fprintf(stderr, "mnemo replay: warning: replay %d of \"%s\" gave other peaks than the first\n", k + 1,
              run->config);
    ns[k] = res.ns_per_op;
  }
  qsort(ns, (size_t)repeat, sizeof ns[0], cmp_double);
  run->res.ns_per_op = ns[repeat / 2];
  run->res.op_ns = 0; /* per replay; not meaningful for the median */
  return 0;
}

/* The devices of trace t to replay, lowest index first: every device with entries,
 * or the one whose recorded number is `want` (>= 0). A device's recorded number is
 * its index in a trace of several devices (`meta devices`, the importer's CUDA
 * indices), else the trace's `meta device` (a one-device import of device N keeps
 * its entries on index 0), else its index. The device `meta host_device` names
 * (pinned host memory) is not replayed: the device allocator is not PyTorch's host
 * allocator; a note says so. The rule and the sizes as recorded: mn_trace_devices. */
static int find_devices(const mn_trace_t *t, int want, bool quiet, dev_info_t **out, size_t *nout) {
  bool multi = mn_trace_meta_get(t, "devices") != NULL;
  mn_trace_device_t *td = NULL;
  size_t n = 0;
  if (mn_trace_devices(t, &td, &n) != MN_OK) {
    fprintf(stderr, "mnemo replay: %s\n", mn_last_error());
    return 1;
  }
  dev_info_t *d = mn__calloc(n ? n : 1, sizeof *d);
  if (!d) {
    mn_trace_devices_free(td);
    fprintf(stderr, "mnemo replay: out of host memory\n");
    return 1;
  }
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    if (td[k].host) {
      if (want < 0 && !quiet)
        fprintf(stderr, "mnemo replay: note: device %" PRIu64 " holds pinned host memory (meta host_device): not "
                        "replayed (the device allocator is not PyTorch's host allocator)\n", td[k].label);
      else if ((uint64_t)want == td[k].label) {
        fprintf(stderr, "mnemo replay: --trace-device %d is the trace's pinned host memory (meta host_device): "
                        "only device memory is replayed\n", want);
        mn_trace_devices_free(td);
        free(d);
        return 2;
      }
      continue;
    }
    if (want >= 0 && td[k].label != (uint64_t)want) continue;
    dev_info_t *x = &d[m++];
    x->index = td[k].index;
    x->label = td[k].label;
    x->nentries = td[k].entries;
    x->pre = td[k].pre_allocs;
    x->ntorch_ooms = td[k].oom_lines;
    x->oom_capacity = td[k].oom_capacity;
    x->release_capacity = td[k].release_capacity;
    x->partial_releases = td[k].partial_releases;
  }
  if (m == 0) {
    if (want >= 0) {
      fprintf(stderr, "mnemo replay: --trace-device %d: the trace has no entries on that device (it has:", want);
      for (size_t k = 0; k < n; k++) fprintf(stderr, " %" PRIu64, td[k].label);
      fprintf(stderr, "%s)\n", n ? "" : " none");
      mn_trace_devices_free(td);
      free(d);
      return 1;
    }
    if (n == 0) { /* an empty trace: one (empty) replay of device 0, as before */
      uint64_t one = 0;
      if (multi || mn_trace_meta_get_u64(t, "device", &one) != MN_OK) one = 0;
      mn_clear_error();
      d[0].label = one;
      m = 1;
    }
  }
  mn_trace_devices_free(td);
  for (size_t k = 0; k < m; k++) read_torch(t, multi, d[k].label, &d[k].tf);
  *out = d;
  *nout = m;
  return 0;
}

int cmd_replay(int argc, char **argv) {
  const char *path = NULL, *configs[MAX_CONFIGS];
  size_t nconfigs = 0, capacity = 0;
  bool json = false, naive = false, skip_pre = false;
  int repeat = 1;
  replay_args_t ra = {.repeat = 1, .trace_device = -1, .device = mn_device_sim(0), .progress = isatty(2) != 0};
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  int id;
  long n = 0;
  while ((id = mn__cli_next(&p, &v)) > 0) {
    switch (id) {
    case O_JSON: json = true; break;
    case O_NO_PRE: skip_pre = true; break;
    case O_NO_PRE_SEGMENTS: ra.skip_pre_segments = true; break;
    case O_NO_EMPTY_CACHE: ra.skip_empty_cache = true; break;
    case O_PROGRESS: ra.progress = true; break;
    case O_NO_PROGRESS: ra.progress = false; break;
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&p, v)) return 2;
      break;
    case O_NO_CACHE: mn__tools_set_no_cache(); break;
    case O_DEVICE:
      if (!strcmp(v, "sim")) {
        ra.device = mn_device_sim(0);
      } else if (!strcmp(v, "cuda")) {
        ra.device = mn_device_cuda(0); /* checked after the options */
      } else {
        return mn__cli_error(&p, "--device must be sim or cuda, not \"%s\"", v);
      }
      break;
    case O_RETRIES:
      if (mn__cli_int(&p, v, 0, 1000, &n)) return 2;
      ra.retries = (unsigned)n;
      break;
    case O_TRACE_DEVICE:
      if (mn__cli_int(&p, v, 0, 1000, &n)) return 2;
      ra.trace_device = (int)n;
      break;
    case O_REPEAT:
      if (mn__cli_int(&p, v, 1, MAX_REPEAT, &n)) return 2;
      repeat = (int)n;
      break;
    case O_CONFIG:
      if (nconfigs == MAX_CONFIGS) return mn__cli_error(&p, "at most %d --config", MAX_CONFIGS);
      configs[nconfigs++] = v;
      break;
    case O_CAPACITY:
      if (mn__cli_bytes(&p, v, &capacity)) return 2;
      break;
    case O_ALLOCATOR:
      if (strcmp(v, "naive") && strcmp(v, "caching"))
        return mn__cli_error(&p, "--allocator must be caching or naive, not \"%s\"", v);
      naive = !strcmp(v, "naive");
      break;
    }
  }
  if (id < 0) return p.rc;
  if (mn__cli_want_args(&p, 1, 1, "trace")) return 2;
  path = p.args[0];
  if (naive && nconfigs > 0)
    return mn__cli_error(&p, "--config applies to the caching allocator, not --allocator naive");
  if (capacity && ra.device.type != MN_DEVICE_SIM)
    return mn__cli_error(&p, "--capacity applies to the SIM device, not --device cuda");
  if (ra.device.type == MN_DEVICE_CUDA) {
    int ncuda = 0;
    if (mn_device_count(MN_DEVICE_CUDA, &ncuda) != MN_OK || ncuda == 0) {
      mn_clear_error();
      fprintf(stderr, "mnemo replay: --device cuda: no CUDA device here (%s); use --device sim\n",
              mn_build_has_cuda() ? "none found" : "this mnemo was built without CUDA");
      return 1;
    }
  }
  mn_sim_config_t sim0 = mn_sim_config_default();
  if (ra.device.type == MN_DEVICE_SIM && mn_sim_get_config(&sim0) != MN_OK) {
    fprintf(stderr, "mnemo replay: the SIM device: %s\n", mn_last_error());
    return 1;
  }
  if (capacity) sim0.capacity = capacity;
  mn_device_format(ra.device, g_devname, sizeof g_devname);
  mn_trace_t *t = NULL;
  /* A snapshot: every device (or the one asked for) imported. */
  int lrc = mn__tools_trace_load("mnemo replay", path, ra.trace_device >= 0 ? ra.trace_device : MN__TOOLS_ALL_DEVICES, &t);
  if (lrc) return lrc;
  int rc = 0;
  size_t ndev = 0;
  dev_info_t *devs = NULL;
  replay_run_t *runs = NULL;
  if ((rc = find_devices(t, ra.trace_device, false, &devs, &ndev)) != 0) goto out;
  /* No --config: replay as recorded, with the settings the trace was recorded with. */
  bool as_recorded = false;
  if (nconfigs == 0) configs[nconfigs++] = naive ? "" : mn__tools_recorded_config("mnemo replay", t, &as_recorded);
  runs = mn__calloc(ndev * nconfigs, sizeof *runs);
  if (!runs) {
    fprintf(stderr, "mnemo replay: out of host memory\n");
    rc = 1;
    goto out;
  }
  for (size_t d = 0; d < ndev && rc == 0; d++) {
    /* Each device on the SIM device sized by --capacity, else as recorded (its first
     * OOM), else the SIM default; the allocators of the runs before are gone. */
    uint64_t cap = 0;
    const char *from = "default";
    if (ra.device.type == MN_DEVICE_SIM) {
      mn_sim_config_t sc = sim0;
      from = capacity ? "option" : size_as_recorded(&devs[d], &sc);
      if (mn_sim_configure(&sc) != MN_OK) {
        fprintf(stderr, "mnemo replay: %s%s: %s\n", capacity ? "--capacity" : "the SIM device's capacity",
                from[0] == 'o' && !capacity ? " as recorded" : "", mn_last_error());
        rc = 2;
        break;
      }
      cap = sc.capacity;
    }
    for (size_t k = 0; k < nconfigs && rc == 0; k++) {
      replay_run_t *run = &runs[d * nconfigs + k];
      run->config = configs[k];
      run->as_recorded = as_recorded;
      run->dev = &devs[d];
      run->capacity = cap;
      run->capacity_from = from;
      ra.naive = naive;
      ra.skip_pre = skip_pre;
      ra.repeat = repeat;
      rc = replay_one(t, &ra, run);
    }
  }
  if (rc == 0) {
    const char *alloc_name = naive ? "naive" : "caching";
    size_t nruns = ndev * nconfigs;
    if (json) {
      /* One object when one device and one config (as before several devices were
       * replayed); else an array, device by device, each device's configs in order. */
      if (nruns > 1) printf("[\n");
      for (size_t k = 0; k < nruns; k++) {
        print_json_run(path, t, alloc_name, &runs[k]);
        printf("%s\n", nruns > 1 && k + 1 < nruns ? "," : "");
      }
      if (nruns > 1) printf("]\n");
    } else {
      print_table(path, t, alloc_name, runs, nruns, nconfigs);
    }
  }
out:
  for (size_t k = 0; runs && k < ndev * nconfigs; k++) free(runs[k].ooms.v);
  free(runs);
  free(devs);
  mn_trace_destroy(t);
  return rc;
}
