/* tools/cmd_snapshot.c: `mnemo snapshot` (segment/block tables and memory_summary of
 * a trace's replay at a point, or of a PyTorch snapshot), `mnemo import` (RMM CSV,
 * PyTorch) and `mnemo export` (to a PyTorch snapshot). Options: their tables below,
 * read by the shared parser (tools/cli.h). Single-threaded (the CLI's main thread). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"
#include "profiling/stacks.h"
#include "trace_input.h"

const char cmd_snapshot_about[] =
    "FILE a mnemo trace: replays it on the SIM device up to a moment (--at: the peak\n"
    "of allocated bytes by default, the peak of reserved bytes, its end, or an entry\n"
    "index) and prints the segments (free space, fragmentation), with --blocks their\n"
    "blocks, the memory_summary table (with the recorded allocator settings unless\n"
    "--config is given) and who holds the memory; --json: one JSON object instead,\n"
    "allocated_bytes and the live allocations there (size, stream, frames innermost\n"
    "first). FILE a PyTorch snapshot pickle: its segments as dumped\n"
    "(import_torch_snapshot.py --table); with --at, --config or --json it is\n"
    "imported and replayed as a trace.\n";

enum { O_AT = 1, O_CONFIG, O_BLOCKS, O_MAX_DECOMPRESSED, O_JSON, O_NO_CACHE, O_TRACE_DEVICE };

const mn__cli_opt_t cmd_snapshot_opts[] = {
    {"at", 0, "peak|reserved-peak|end|ENTRY", O_AT,
     "the moment: the peak of allocated bytes (default), the peak of reserved bytes, the end, or an entry index"},
    {"config", 0, "ALLOC_CONF", O_CONFIG,
     "allocator settings of the replay (PYTORCH_CUDA_ALLOC_CONF syntax; default: as recorded)"},
    {"blocks", 0, NULL, O_BLOCKS, "every block of the segments, and the largest live allocations"},
    {"json", 0, NULL, O_JSON, "one JSON object: allocated_bytes and the live allocations with their stacks"},
    {"trace-device", 0, "N", O_TRACE_DEVICE,
     "the trace's (or snapshot's) device to replay (0..1000; default: the lowest, with a note when there are several)"},
    MN__TOOLS_OPT_MAX_DECOMPRESSED(O_MAX_DECOMPRESSED),
    MN__TOOLS_OPT_NO_CACHE(O_NO_CACHE),
    {NULL, 0, NULL, 0, NULL},
};

const char cmd_import_about[] =
    "Converts an RMM logging_resource_adaptor CSV log or a PyTorch memory snapshot\n"
    "(import_torch_snapshot.py) into a mnemo trace (-o FILE, or -o - for stdout).\n";

enum { O_FROM = 11, O_TO, O_OUTPUT, O_DEVICE }; /* apart from the ids above: O_MAX_DECOMPRESSED too */

const mn__cli_opt_t cmd_import_opts[] = {
    {"from", 0, "rmm|torch", O_FROM, "the input's format (required)"},
    {"output", 'o', "TRACE", O_OUTPUT, "the trace to write (required; - for stdout)"},
    {"device", 0, "N|all", O_DEVICE, "--from torch: the snapshot's device to import (default: the importer's)"},
    MN__TOOLS_OPT_MAX_DECOMPRESSED(O_MAX_DECOMPRESSED),
    {NULL, 0, NULL, 0, NULL},
};

const char cmd_export_about[] =
    "Writes a trace (any: imported, recorded by mnemo) as a PyTorch memory snapshot,\n"
    "stacks included, that PyTorch's memory_viz opens (export_torch_snapshot.py);\n"
    "-o FILE, or -o - for stdout.\n";

const mn__cli_opt_t cmd_export_opts[] = {
    {"to", 0, "torch", O_TO, "the output's format (required; torch is the one)"},
    {"output", 'o', "SNAPSHOT.pickle", O_OUTPUT, "the pickle to write (required; - for stdout)"},
    {"device", 0, "N", O_DEVICE, "only this device index of the trace"},
    {NULL, 0, NULL, 0, NULL},
};

typedef struct peak_s {
  int64_t reserved, allocated;
  size_t entry, entry_alloc, last;
} peak_t;

/* The first steps at the peaks of reserved and of allocated bytes. */
static void find_peak(void *user, const mn_replay_step_t *s) {
  peak_t *p = user;
  if (s->reserved > p->reserved) {
    p->reserved = s->reserved;
    p->entry = s->entry;
  }
  if (s->allocated > p->allocated) {
    p->allocated = s->allocated;
    p->entry_alloc = s->entry;
  }
  p->last = s->entry;
}

/* Whether `snapshot --json` leaves a frame out of a stack: the stack rule's hidden
 * (allocator-internal) frames, those memory_viz filters (profiling/stacks.h). */
static bool frame_hidden(const mn_trace_frame_t *f) { return mn__frame_is_internal(f); }

typedef struct json_stop_s {
  const mn_trace_t *t;
  void **live;
  int64_t allocated, reserved;
  mn_snapshot_t *snap;
  bool failed;
} json_stop_t;

static void json_state(void *user, mn_allocator_t *a) {
  json_stop_t *j = user;
  mn_alloc_stats_t st;
  if (mn_allocator_get_stats(a, &st) == MN_OK) {
    j->allocated = st.allocated_bytes[MN_POOL_ALL].current;
    j->reserved = st.reserved_bytes[MN_POOL_ALL].current;
  }
  if (mn_allocator_snapshot(a, &j->snap) != MN_OK) {
    j->snap = NULL;
    j->failed = true;
  }
}

/* The replay's block size at address p (its snapshot's block there), 0 if none. */
static uint64_t block_at(const mn_snapshot_t *s, uintptr_t p) {
  size_t lo = 0, hi = s->nsegments;
  while (lo < hi) { /* segments sorted by address: the last one starting at or before p */
    size_t mid = (lo + hi) / 2;
    if (s->segments[mid].address <= p) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return 0;
  const mn_snapshot_segment_t *g = &s->segments[lo - 1];
  for (size_t b = 0; b < g->nblocks; b++)
    if (g->blocks[b].address == p) return g->blocks[b].size;
  return 0;
}

/* `snapshot --json`: one object, the live allocations at the stop, largest first. */
static int print_json(const mn_trace_t *t, const char *path, const char *at, size_t stop, const json_stop_t *j,
                      bool state_only, uint64_t device) {
  size_t *live = mn__malloc((t->nentries ? t->nentries : 1) * sizeof *live), n = 0;
  if (!live) {
    fprintf(stderr, "mnemo snapshot: out of host memory\n");
    return 1;
  }
  for (size_t i = 0; i < t->nentries; i++)
    if (j->live[i]) live[n++] = i;
  mn__trace_sort_by_size(t, live, n);
  printf("{\"trace\": ");
  mn__tools_json_str(stdout, path);
  printf(", \"at\": ");
  mn__tools_json_str(stdout, at);
  printf(", \"entry\": %zu, \"line\": %" PRIu32 ", \"device\": %" PRIu64 ", \"state_only\": %s"
         ", \"allocated_bytes\": %" PRId64 ", \"reserved_bytes\": %" PRId64 ", \"count\": %zu, \"allocations\": [",
         stop, stop < t->nentries ? t->entries[stop].line : 0, device, state_only ? "true" : "false", j->allocated,
         j->reserved, n);
  for (size_t k = 0; k < n; k++) {
    const mn_trace_entry_t *e = &t->entries[live[k]];
    printf("%s\n {\"size\": %" PRIu64 ", \"requested\": %" PRIu64 ", \"stream\": %" PRIu64
           ", \"entry\": %zu, \"line\": %" PRIu32 ", \"pre\": %s, \"frames\": [",
           k ? "," : "", block_at(j->snap, (uintptr_t)j->live[live[k]]), e->size, e->stream, live[k], e->line,
           e->pre ? "true" : "false");
    const uint32_t *fr = NULL;
    size_t nf = mn_trace_stack_get(t, e->stack, &fr);
    const char *sep = "";
    for (size_t q = 0; q < nf; q++) {
      const mn_trace_frame_t *f = mn_trace_frame_get(t, fr[q]);
      if (!f || frame_hidden(f)) continue;
      printf("%s{\"file\": ", sep);
      mn__tools_json_str(stdout, f->file ? f->file : "");
      printf(", \"line\": %" PRIu32 ", \"name\": ", f->line);
      mn__tools_json_str(stdout, f->name ? f->name : "");
      putchar('}');
      sep = ", ";
    }
    printf("]}");
  }
  printf("]}\n");
  free(live);
  return 0;
}

typedef struct stop_s {
  bool blocks;
  int rc;
  const mn_trace_t *t;
  void **live; /* the replay's live pointer per entry at the stop */
} stop_t;

#define TOP_STACKS 10
#define FRAMES_SHOWN 6
#define BLOCKS_SHOWN 50

static void print_frame(const mn_trace_t *t, uint32_t id, const char *indent) {
  const mn_trace_frame_t *f = mn_trace_frame_get(t, id);
  if (!f) return;
  printf("%s%s", indent, f->name[0] ? f->name : "?");
  if (f->file[0]) printf("  (%s%s", f->file, f->line ? "" : ")");
  if (f->file[0] && f->line) printf(":%" PRIu32 ")", f->line);
  printf("\n");
}

/* Who holds the memory at the stop: the live allocations grouped by the stack
 * that allocated them (traces with stacks), and with --blocks the largest ones. */
static int print_holders(const stop_t *s) {
  const mn_trace_t *t = s->t;
  if (t->nstacks == 0 && !s->blocks) return 0;
  size_t *live = mn__malloc((t->nentries ? t->nentries : 1) * sizeof *live), nlive = 0, ngroups = 0;
  mn__holder_t *groups = NULL;
  uint64_t total = 0;
  for (size_t i = 0; live && i < t->nentries; i++)
    if (s->live[i]) {
      live[nlive++] = i;
      total = mn__sat_add_u64(total, t->entries[i].size); /* user data: the total saturates */
    }
  if (!live || !mn__holders(t, live, nlive, &groups, &ngroups)) { /* live: sorted, largest first */
    free(live);
    fprintf(stderr, "mnemo snapshot: out of host memory\n");
    return 1;
  }
  static const char *const no_stack[] = {"", ", no stack: allocated before recording", ", no stack recorded"};
  if (t->nstacks) {
    mn__holders_by_key(groups, &ngroups);
    printf("\nwho holds the memory: %zu live allocations, %.2f MiB asked for, by the first user frame of the stack\n"
           "that allocated them (allocator-internal frames hidden; the rule: docs/PROFILING.md)\n",
           nlive, (double)total / 1048576.0);
    for (size_t j = 0; j < TOP_STACKS && j < ngroups; j++) {
      const mn__holder_t *g = &groups[j];
      printf("  %10.2f MiB %5.1f%% in %zu allocation%s", (double)g->bytes / 1048576.0,
             total ? 100.0 * (double)g->bytes / (double)total : 0.0, g->count, g->count == 1 ? "" : "s");
      if (g->nstacks > 1) printf(" from %zu stacks", g->nstacks);
      printf("%s\n", no_stack[g->kind]);
      if (!g->stack) continue;
      uint32_t fr[FRAMES_SHOWN];
      /* the first user frame and those outward of it; a stack without one: what is not internal */
      size_t nf = mn__stack_user_frames(t, g->stack, fr, FRAMES_SHOWN);
      if (!nf) {
        nf = mn__stack_shown_frames(t, g->stack, fr, FRAMES_SHOWN);
        printf("      (no user frame%s)\n", nf ? "; the frames not internal:" : ": only allocator-internal frames");
      }
      for (size_t f = 0; f < nf && f < FRAMES_SHOWN; f++) print_frame(t, fr[f], "      ");
      if (nf > FRAMES_SHOWN) printf("      ... %zu more frames\n", nf - FRAMES_SHOWN);
    }
  }
  if (s->blocks) {
    printf("\nlive allocations, largest first (%zu of %zu):\n", nlive < BLOCKS_SHOWN ? nlive : BLOCKS_SHOWN, nlive);
    for (size_t j = 0; j < nlive && j < BLOCKS_SHOWN; j++) {
      const mn_trace_entry_t *e = &t->entries[live[j]];
      printf("  %p %12.2f KiB  trace %s %" PRIu32 "%s\n", s->live[live[j]], (double)e->size / 1024.0,
             e->line ? "line" : "entry", e->line ? e->line : (uint32_t)live[j], e->pre ? " (before recording)" : "");
      uint32_t key = mn__stack_key(t, e->stack);
      if (key) print_frame(t, key, "      at ");
    }
  }
  free(groups);
  free(live);
  return 0;
}

static void print_state(void *user, mn_allocator_t *a) {
  stop_t *s = user;
  mn_snapshot_t *snap = NULL;
  if (mn_allocator_snapshot(a, &snap) != MN_OK || mn_snapshot_print(snap, s->blocks, stdout) != MN_OK) {
    fprintf(stderr, "mnemo snapshot: %s\n", mn_last_error());
    s->rc = 1;
  }
  if (snap) mn_snapshot_free(snap);
  size_t need = 0;
  char small[1];
  /* a one-byte buffer: the call fails and says the size it needs */
  mn__ignore(mn_allocator_memory_summary(a, small, sizeof small, &need));
  char *buf = need ? mn__malloc(need) : NULL;
  if (buf && mn_allocator_memory_summary(a, buf, need, NULL) == MN_OK) {
    printf("\n%s", buf);
  } else {
    fprintf(stderr, "mnemo snapshot: memory summary: %s\n", mn_last_error());
    s->rc = 1;
  }
  free(buf);
}

/* Replays device `dev` of t (-1: the replay's default) on a fresh caching
 * allocator (*a, the caller's to destroy) up to entry `stop`, calls at_stop there
 * and fills live (the replay's pointers of the live allocations, by entry); the
 * recorded OOMs are tried again, as `mnemo replay` does. */
static mn_status replay_to(const mn_trace_t *t, const mn_caching_config_t *cfg, int dev, size_t stop,
                           void (*at_stop)(void *, mn_allocator_t *), void *user, void **live, mn_allocator_t **a) {
  mn_replay_options_t o = mn_replay_options_default();
  o.trace_device = dev;
  o.replay_ooms = true;
  o.stop_after = stop;
  o.at_stop = at_stop;
  o.at_stop_user = user;
  o.live_ptrs = live;
  mn_replay_result_t r;
  mn_status st = mn_caching_allocator_create(mn_device_sim(0), cfg, a);
  return st == MN_OK ? mn_trace_replay(t, *a, &o, &r) : st;
}

/* The trace device index a replay with trace_device `want` drives (-1: the lowest). */
static uint32_t replayed_index(const mn_trace_t *t, int want) {
  if (want >= 0) return (uint32_t)want;
  uint32_t low = UINT32_MAX;
  for (size_t i = 0; i < t->nentries; i++)
    if (t->entries[i].device < low) low = t->entries[i].device;
  return low == UINT32_MAX ? 0 : low;
}

int cmd_snapshot(int argc, char **argv) {
  const char *path = NULL, *at = "peak", *config = NULL;
  bool blocks = false, json = false;
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  int id;
  bool at_given = false;
  int trace_device = -1;
  long dev_opt = 0;
  while ((id = mn__cli_next(&p, &v)) > 0) {
    switch (id) {
    case O_BLOCKS: blocks = true; break;
    case O_TRACE_DEVICE:
      if (mn__cli_int(&p, v, 0, 1000, &dev_opt)) return 2;
      trace_device = (int)dev_opt;
      break;
    case O_JSON: json = true; break;
    case O_AT:
      at = v;
      at_given = true;
      if (strcmp(at, "peak") && strcmp(at, "reserved-peak") && strcmp(at, "end") &&
          (!*at || strspn(at, "0123456789") != strlen(at)))
        return mn__cli_error(&p, "--at must be peak, reserved-peak, end or an entry index, not \"%s\"", at);
      break;
    case O_CONFIG: config = v; break;
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&p, v)) return 2;
      break;
    case O_NO_CACHE: mn__tools_set_no_cache(); break;
    }
  }
  if (id < 0) return p.rc;
  if (mn__cli_want_args(&p, 1, 1, "file")) return 2;
  path = p.args[0];
  /* A PyTorch snapshot: its segments as dumped; asked for a moment or settings,
   * imported and replayed as a trace (below), never the option ignored. */
  if (!at_given && !config && !json && trace_device < 0 && mn__tools_is_snapshot(path)) {
    char *args[5] = {(char *)path, "--table", blocks ? "--blocks" : NULL};
    return mn__tools_run_script("mnemo snapshot", "import_torch_snapshot.py", args,
                                mn__tools_import_args(args, blocks ? 3 : 2));
  }
  mn_caching_config_t cfg = mn_caching_config_default();
  if (config && mn_caching_config_parse(config, &cfg) != MN_OK) {
    fprintf(stderr, "mnemo snapshot: bad --config \"%s\": %s\n", config, mn_last_error());
    return 2;
  }
  mn_trace_t *t = NULL;
  int lrc = mn__tools_trace_load("mnemo snapshot", path, trace_device >= 0 ? trace_device : MN__TOOLS_ALL_DEVICES, &t);
  if (lrc) return lrc;
  /* the one device shown, its SIM device sized as `mnemo replay` sizes it (its
   * first recorded OOM...), its recorded OOMs tried again as there */
  int dev_index = -1;
  uint64_t dev_number = 0;
  bool multi = false;
  lrc = mn__tools_pick_device("mnemo snapshot", path, t, trace_device, "showing", &dev_index, &dev_number, &multi);
  if (!lrc) {
    mn_sim_config_t sc = mn_sim_config_default();
    const char *from = "default";
    if (mn_sim_get_config(&sc) != MN_OK) {
      fprintf(stderr, "mnemo snapshot: the SIM device: %s\n", mn_last_error());
      lrc = 1;
    } else if (mn__sim_as_recorded(t, replayed_index(t, dev_index), &sc, &from) != MN_OK) {
      fprintf(stderr, "mnemo snapshot: %s\n", mn_last_error());
      lrc = 1;
    } else if (mn_sim_configure(&sc) != MN_OK) {
      fprintf(stderr, "mnemo snapshot: the SIM device's capacity as recorded: %s\n", mn_last_error());
      lrc = 2;
    }
  }
  if (lrc) {
    mn_trace_destroy(t);
    return lrc;
  }
  bool as_recorded = false;
  if (!config) {
    config = mn__tools_recorded_config("mnemo snapshot", t, &as_recorded);
    if (mn_caching_config_parse(config, &cfg) != MN_OK) { /* checked by mn__tools_recorded_config */
      fprintf(stderr, "mnemo snapshot: %s\n", mn_last_error());
      mn_trace_destroy(t);
      return 1;
    }
  }
  size_t stop = SIZE_MAX;
  int rc = 1;
  mn_allocator_t *a = NULL;
  const char *so = mn_trace_meta_get(t, "state_only");
  bool state_only = so && !strcmp(so, "1");
  if (!strcmp(at, "peak") || !strcmp(at, "reserved-peak")) {
    peak_t pk = {-1, -1, 0, 0, 0};
    mn_replay_options_t o = mn_replay_options_default();
    o.trace_device = dev_index;
    o.replay_ooms = true;
    o.on_step = find_peak;
    o.on_step_user = &pk;
    mn_replay_result_t r;
    if (mn_caching_allocator_create(mn_device_sim(0), &cfg, &a) != MN_OK || mn_trace_replay(t, a, &o, &r) != MN_OK)
      goto fail;
    mn_allocator_destroy(a);
    a = NULL;
    /* a state dump: its state, once every allocation is in */
    stop = state_only ? pk.last : !strcmp(at, "peak") ? pk.entry_alloc : pk.entry;
  } else if (!strcmp(at, "end")) {
    stop = t->nentries ? t->nentries - 1 : 0;
  } else {
    char *end = NULL;
    unsigned long long n = strtoull(at, &end, 10);
    if (*end || at[0] == '-' || n >= t->nentries) {
      fprintf(stderr, "mnemo snapshot: --at must be peak, reserved-peak, end or an entry index below %zu, not \"%s\"\n",
              t->nentries, at);
      rc = 2;
      goto done;
    }
    stop = (size_t)n;
  }
  if (json) {
    json_stop_t j = {t, mn__calloc(t->nentries ? t->nentries : 1, sizeof(void *)), -1, -1, NULL, false};
    if (!j.live) {
      fprintf(stderr, "mnemo snapshot: out of host memory\n");
      goto done;
    }
    if (replay_to(t, &cfg, dev_index, stop, json_state, &j, j.live, &a) != MN_OK || j.failed) {
      free(j.live);
      if (j.snap) mn_snapshot_free(j.snap);
      goto fail;
    }
    rc = print_json(t, path, at, stop, &j, state_only, dev_number);
    free(j.live);
    mn_snapshot_free(j.snap);
    goto done;
  }
  printf("snapshot of %s replayed on sim:0 (%s%s) after entry %zu", path, as_recorded ? "as recorded: " : "",
         config[0] ? config : "defaults", stop);
  if (stop < t->nentries && t->entries[stop].line) printf(" (line %" PRIu32 ")", t->entries[stop].line);
  printf(" [%s]", at);
  if (multi) printf(" device %" PRIu64, dev_number);
  printf("\n");
  stop_t s = {blocks, 0, t, mn__calloc(t->nentries ? t->nentries : 1, sizeof(void *))};
  if (!s.live) {
    fprintf(stderr, "mnemo snapshot: out of host memory\n");
    goto done;
  }
  if (replay_to(t, &cfg, dev_index, stop, print_state, &s, s.live, &a) != MN_OK) {
    free(s.live);
    goto fail;
  }
  rc = s.rc ? s.rc : print_holders(&s);
  free(s.live);
  goto done;
fail:
  fprintf(stderr, "mnemo snapshot: %s\n", mn_last_error());
done:
  mn_allocator_destroy(a);
  mn_trace_destroy(t);
  return rc;
}

/* The arguments of `mnemo import` and `mnemo export`: --from or --to FORMAT,
 * one input, -o OUTPUT, optional --device N (and for import
 * --max-decompressed-size). Returns -1 when they parse, else the exit status (0
 * after --help; 2 after saying why on stderr). */
typedef struct io_args_s {
  const char *format, *in, *out, *device;
  bool max_decompressed; /* --max-decompressed-size given */
  mn__cli_t p;
} io_args_t;

static int parse_io_args(int argc, char **argv, io_args_t *a) {
  memset(a, 0, sizeof *a);
  mn__cli_begin(&a->p, argc, argv);
  const char *v;
  int id;
  while ((id = mn__cli_next(&a->p, &v)) > 0) {
    switch (id) {
    case O_FROM:
    case O_TO: a->format = v; break;
    case O_OUTPUT: a->out = v; break;
    case O_DEVICE: {
      long n = 0;
      /* checked here, so that a bad value is mnemo's usage error, not the script's */
      bool import = !strcmp(a->p.cmd->name, "import");
      if (import && strcmp(v, "all") && (!*v || strspn(v, "0123456789") != strlen(v) || strtol(v, NULL, 10) > 1000))
        return mn__cli_error(&a->p, "--device must be an index (0..1000) or all, not \"%s\"", v);
      if (!import && mn__cli_int(&a->p, v, 0, 1000, &n)) return 2;
      a->device = v;
      break;
    }
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&a->p, v)) return 2;
      a->max_decompressed = true;
      break;
    }
  }
  if (id < 0) return a->p.rc;
  if (mn__cli_want_args(&a->p, 1, 1, "input")) return 2;
  a->in = a->p.args[0];
  bool import = !strcmp(a->p.cmd->name, "import");
  if (!a->format) return mn__cli_error(&a->p, "missing %s", import ? "--from rmm|torch" : "--to torch");
  if (!a->out) return mn__cli_error(&a->p, "missing -o %s (- for stdout)", import ? "TRACE" : "SNAPSHOT.pickle");
  if (!*a->out) return mn__cli_error(&a->p, "-o needs a file name (or - for stdout)");
  return -1;
}

/* The trace as text on stdout (-o -): 0, or 1 after saying why on stderr. */
static int write_stdout(const mn_trace_t *t) {
  char *text = NULL;
  size_t len = 0;
  if (mn_trace_format(t, &text, &len) != MN_OK) {
    fprintf(stderr, "mnemo import: %s\n", mn_last_error());
    return 1;
  }
  int rc = 0;
  if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
    fprintf(stderr, "mnemo import: writing the trace to stdout failed\n");
    rc = 1;
  }
  free(text);
  return rc;
}

int cmd_import(int argc, char **argv) {
  io_args_t io;
  int prc = parse_io_args(argc, argv, &io);
  if (prc >= 0) return prc;
  const char *from = io.format, *in = io.in, *out = io.out, *device = io.device;
  if (strcmp(from, "rmm") && strcmp(from, "torch"))
    return mn__cli_error(&io.p, "--from must be rmm or torch, not \"%s\"", from);
  if (!strcmp(from, "torch")) {
    /* The Python importer would read a FIFO or /dev/zero forever: hand it
     * regular files only, as the C loaders take. */
    int fd = -1;
    if (mn__file_open_regular("mnemo import", in, O_RDONLY, 0, &fd, NULL) != MN_OK) {
      fprintf(stderr, "%s\n", mn_last_error()); /* "mnemo import: '<in>' is not a regular file" */
      return 1;
    }
    close(fd);
    char *args[7] = {(char *)in, "-o", (char *)out, "--device", (char *)device};
    return mn__tools_run_script("mnemo import", "import_torch_snapshot.py", args,
                                mn__tools_import_args(args, device ? 5 : 3));
  }
  if (device) return mn__cli_error(&io.p, "--device applies to --from torch, not --from rmm");
  if (io.max_decompressed)
    return mn__cli_error(&io.p, "--max-decompressed-size applies to --from torch (a .pickle.gz), not --from rmm");
  mn_trace_t *t = NULL;
  if (mn_trace_import_rmm_csv_file(in, &t) != MN_OK) {
    fprintf(stderr, "mnemo import: %s\n", mn_last_error());
    return 1;
  }
  int rc = 0;
  if (mn__cli_is_stdout(out)) {
    rc = write_stdout(t);
  } else if (mn_trace_write(t, out) != MN_OK) {
    fprintf(stderr, "mnemo import: %s\n", mn_last_error());
    rc = 1;
  }
  if (rc == 0) {
    size_t pre = 0;
    for (size_t i = 0; i < t->nentries; i++) pre += t->entries[i].pre;
    fprintf(stderr, "%s: %zu events, %zu allocations made before the log began\n", in, t->nentries - pre, pre);
  }
  mn_trace_destroy(t);
  return rc;
}

int cmd_export(int argc, char **argv) {
  io_args_t io;
  int prc = parse_io_args(argc, argv, &io);
  if (prc >= 0) return prc;
  const char *to = io.format, *in = io.in, *out = io.out, *device = io.device;
  if (strcmp(to, "torch") != 0) return mn__cli_error(&io.p, "--to torch is the one format (not \"%s\")", to);
  /* Regular files only, as the C readers take: a FIFO would block the script. */
  int fd = -1;
  if (mn__file_open_regular("mnemo export", in, O_RDONLY, 0, &fd, NULL) != MN_OK) {
    fprintf(stderr, "%s\n", mn_last_error());
    return 1;
  }
  close(fd);
  char *args[5] = {(char *)in, "-o", (char *)out, "--device", (char *)device};
  return mn__tools_run_script("mnemo export", "export_torch_snapshot.py", args, device ? 5 : 3);
}
