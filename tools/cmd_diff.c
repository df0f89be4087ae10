/* tools/cmd_diff.c: `mnemo diff A B` (text or --json) and `mnemo report A B -o
 * DIFF.html` (its summary as text or, with --json, `diff --json`'s object with
 * the page's path and size): the CLI around mn_diff_build (profiling/diff.c,
 * which compares the two traces and builds the text, the JSON and the page):
 * options, the two inputs read (traces or PyTorch snapshots imported on the
 * fly), the notes on stderr, the page written, the summary printed, errors
 * turned into exit statuses. Single-threaded (the CLI's main thread). */
#include <stdio.h>

#include "mnemo/mnemo.h"
#include "commands.h"
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

/* A --config both replays can use: 0, else a usage error (2). */
static int check_config(const mn__cli_t *p, const char *config) {
  mn_caching_config_t cfg = mn_caching_config_default();
  if (!config || mn_caching_config_parse(config, &cfg) == MN_OK) return 0;
  int rc = mn__cli_error(p, "bad --config \"%s\": %s", config, mn_last_error());
  mn_clear_error();
  return rc;
}

/* Reads both inputs and compares them (o: the options but the progress and
 * the names, set here); the notes printed. 0 and *out, or the exit status
 * after a message. */
static int run_diff(const char *prog, const char *path_a, const char *path_b, mn_diff_options_t *o,
                    mn_report_t **out) {
  mn_trace_t *t[2] = {NULL, NULL};
  const char *paths[2] = {path_a, path_b};
  int rc = 0;
  for (int k = 0; k < 2 && !rc; k++) rc = mn__tools_trace_load(prog, paths[k], -1, &t[k]);
  if (!rc) {
    /* what it is doing, on a terminal, for big inputs (mn__tools_stage_on) */
    bool stage = mn__tools_stage_on(-1, t[0]->nentries + t[1]->nentries);
    o->name_a = path_a;
    o->name_b = path_b;
    o->on_progress = stage ? mn__tools_stage_fn : NULL;
    o->progress_user = (void *)prog;
    mn_status st = mn_diff_build(t[0], t[1], o, out);
    mn__tools_stage_clear(stage);
    if (st != MN_OK) rc = mn__tools_lib_failed(prog, st);
    else mn__tools_print_notes(prog, (*out)->notes);
  }
  mn_trace_destroy(t[0]);
  mn_trace_destroy(t[1]);
  return rc;
}

int cmd_diff(int argc, char **argv) {
  const char *config = NULL;
  int trace_device = -1;
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
      if (config) return mn__cli_error(&p, "one --config for both inputs");
      config = v;
      break;
    case O_TRACE_DEVICE:
      if (mn__cli_int(&p, v, 0, 1000, &dev)) return 2;
      trace_device = (int)dev;
      break;
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&p, v)) return 2;
      break;
    case O_NO_CACHE: mn__tools_set_no_cache(); break;
    }
  }
  if (id < 0) return p.rc;
  if (mn__cli_want_args(&p, 2, 2, "two traces or snapshots to compare")) return 2;
  if (check_config(&p, config)) return 2;
  mn_diff_options_t o = mn_diff_options_default();
  o.config = config;
  o.trace_device = trace_device;
  o.top = (size_t)top;
  mn_report_t *r = NULL;
  int rc = run_diff(p.prog, p.args[0], p.args[1], &o, &r);
  if (!rc) fputs(json ? r->json : r->summary, stdout);
  mn_report_free(r);
  return rc;
}

int cmd_diff_page(const mn__cli_t *p, const char *a, const char *b, const char *out, const char *title,
                  const char *config, int trace_device, bool json) {
  if (check_config(p, config)) return 2;
  bool to_stdout = mn__cli_is_stdout(out);
  mn_diff_options_t o = mn_diff_options_default();
  o.config = config;
  o.trace_device = trace_device;
  o.page = true;
  o.title = title;
  o.output = to_stdout ? NULL : out;
  mn_report_t *r = NULL;
  int rc = run_diff(p->prog, a, b, &o, &r);
  if (!rc) rc = mn__tools_write_page(p->prog, out, r);
  if (!rc) fputs(json ? r->json : r->summary, to_stdout ? stderr : stdout); /* the summary, out of the page's way */
  mn_report_free(r);
  return rc;
}
