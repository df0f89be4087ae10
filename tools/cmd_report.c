/* tools/cmd_report.c: `mnemo report`: the command line around mn_report_build
 * (profiling/report.c, which replays the trace on the SIM device and builds the
 * page; its top comment describes the page's data): parses the options, reads the
 * trace (or imports a PyTorch snapshot), prints the report's notes on stderr,
 * writes the page (-o FILE, or stdout) and prints its summary (stdout, or stderr
 * when the page went to stdout; --json: as one JSON object). Two inputs go to the
 * comparison page (cmd_diff_page, tools/cmd_diff.c). Single-threaded (the CLI's
 * main thread). */
#include <stdbool.h>
#include <stdio.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "profiling/pages.h"
#include "trace_input.h"

const char cmd_report_about[] =
    "Replays the trace (or a PyTorch snapshot .pickle, imported on the fly) on the\n"
    "SIM device (the first --config, default: as recorded, for the timeline and the\n"
    "segment map at the peak; every --config in the comparison) and writes one\n"
    "self-contained HTML page (-o FILE, or -o - for stdout); prints its summary on\n"
    "stdout (on stderr when the page goes to stdout; --json: as one JSON object).\n"
    "With two inputs A B: their comparison as a page (`mnemo diff --help`), taking\n"
    "-o, --title, one --config, --trace-device, --max-decompressed-size and --json\n"
    "(`diff --json`'s object, with the page's path and size).\n";

enum { O_OUTPUT = 1, O_CONFIG, O_CAPACITY, O_TRACE_DEVICE, O_TITLE, O_MAX_DECOMPRESSED, O_NO_CACHE, O_PROGRESS,
       O_NO_PROGRESS, O_JSON };

const mn__cli_opt_t cmd_report_opts[] = {
    {"output", 'o', "FILE", O_OUTPUT, "the HTML page to write (required; - for stdout)"},
    {"config", 0, "ALLOC_CONF", O_CONFIG,
     "allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax, \"\" for mnemo's defaults); repeat it to compare "
     "several (at most 16; default: as recorded)"},
    {"capacity", 0, "BYTES", O_CAPACITY, "the SIM device's size (e.g. 80G); OOMs beyond it"},
    {"trace-device", 0, "N", O_TRACE_DEVICE, "the trace's (or snapshot's) device to replay (0..1000)"},
    {"title", 0, "TEXT", O_TITLE, "the page's title (default: the trace's name)"},
    MN__TOOLS_OPT_MAX_DECOMPRESSED(O_MAX_DECOMPRESSED),
    MN__TOOLS_OPT_NO_CACHE(O_NO_CACHE),
    {"progress", 0, NULL, O_PROGRESS,
     "what it is doing, on stderr (default: when stderr is a terminal and the trace has 100,000 entries or more)"},
    {"no-progress", 0, NULL, O_NO_PROGRESS, "nothing on stderr but errors and notes"},
    {"json", 0, NULL, O_JSON,
     "the summary as one JSON object (its numbers per device and config, and its text as \"summary\")"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_report(int argc, char **argv) {
  const char *out_path = NULL, *title = NULL, *configs[MN_REPORT_MAX_CONFIGS];
  size_t nconfigs = 0, capacity = 0;
  int trace_device = -1, progress = -1;
  bool json = false;
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  int id;
  long n = 0;
  while ((id = mn__cli_next(&p, &v)) > 0) {
    switch (id) {
    case O_OUTPUT: out_path = v; break;
    case O_TITLE: title = v; break;
    case O_PROGRESS: progress = 1; break;
    case O_NO_PROGRESS: progress = 0; break;
    case O_JSON: json = true; break;
    case O_CONFIG:
      if (nconfigs == MN_REPORT_MAX_CONFIGS) return mn__cli_error(&p, "at most %d --config", MN_REPORT_MAX_CONFIGS);
      configs[nconfigs++] = v;
      break;
    case O_CAPACITY:
      if (mn__cli_bytes(&p, v, &capacity)) return 2;
      break;
    case O_TRACE_DEVICE:
      if (mn__cli_int(&p, v, 0, 1000, &n)) return 2;
      trace_device = (int)n;
      break;
    case O_MAX_DECOMPRESSED:
      if (mn__tools_set_max_decompressed(&p, v)) return 2;
      break;
    case O_NO_CACHE: mn__tools_set_no_cache(); break;
    }
  }
  if (id < 0) return p.rc;
  if (p.nargs == 2) { /* two inputs: their comparison as a page (tools/cmd_diff.c) */
    if (capacity || nconfigs > 1)
      return mn__cli_error(&p, "with two inputs (a comparison): -o, --title, one --config, --trace-device, "
                               "--max-decompressed-size, --json");
    if (!out_path) return mn__cli_error(&p, "missing -o FILE (the page to write; - for stdout)");
    return cmd_diff_page(&p, p.args[0], p.args[1], out_path, title, nconfigs ? configs[0] : NULL, trace_device,
                         json);
  }
  if (mn__cli_want_args(&p, 1, 1, "trace")) return 2;
  const char *path = p.args[0];
  if (!out_path) return mn__cli_error(&p, "missing -o FILE (the page to write; - for stdout)");
  if (!*out_path) return mn__cli_error(&p, "-o needs a file name (or - for stdout)");
  bool to_stdout = mn__cli_is_stdout(out_path);
  FILE *out_sum = to_stdout ? stderr : stdout; /* the summary, out of the page's way */
  mn_report_options_t o = mn_report_options_default();
  o.configs = configs;
  o.nconfigs = nconfigs;
  o.capacity = capacity;
  o.trace_device = trace_device;
  o.name = path;
  o.title = title;
  o.output = to_stdout ? NULL : out_path;
  /* the options checked before a snapshot is imported (a long run) */
  mn_status st = mn__report_check_options(&o);
  if (st != MN_OK) return mn__tools_lib_failed("mnemo report", st);
  mn_trace_t *t = NULL;
  /* a snapshot: every device imported (or the one asked for) */
  int rc = mn__tools_trace_load("mnemo report", path, trace_device >= 0 ? trace_device : MN__TOOLS_ALL_DEVICES, &t);
  if (rc) return rc;
  bool stage = mn__tools_stage_on(progress, t->nentries);
  if (stage) {
    o.on_progress = mn__tools_stage_fn;
    o.progress_user = (void *)"mnemo report";
  }
  mn_report_t *r = NULL;
  st = mn_report_build(t, &o, &r);
  mn_trace_destroy(t);
  mn__tools_stage_clear(stage && (st != MN_OK || *r->notes));
  if (st != MN_OK) return mn__tools_lib_failed("mnemo report", st);
  mn__tools_print_notes("mnemo report", r->notes); /* recorded settings refused... */
  rc = mn__tools_write_page("mnemo report", out_path, r);
  mn__tools_stage_clear(stage);
  /* the summary on stdout (stderr when the page went there); --json: as one
   * JSON object, the summary's text in it */
  if (!rc) fputs(json ? r->json : r->summary, out_sum);
  mn_report_free(r);
  return rc;
}
