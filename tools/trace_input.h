/* tools/trace_input.h: what the mnemo CLI's commands share about their input: a
 * trace or a PyTorch snapshot read in one step, the recorded allocator settings,
 * where the installed (or build-tree) helper scripts and sample traces are; and,
 * for their output, the one JSON string writer.
 * Single-threaded (the CLI's main thread); nothing here keeps state between calls. */
#ifndef MNEMO_TOOLS_TRACE_INPUT_H
#define MNEMO_TOOLS_TRACE_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "mnemo/profiling.h"
#include "mnemo/trace.h"
#include "profiling/analysis.h"

/* Reads `path`: a mnemo trace, or a PyTorch memory snapshot (a pickle, gzip'ed or
 * not: told by its first bytes) that it imports on the fly through
 * import_torch_snapshot.py into a temporary trace (removed afterwards), or takes
 * from the import cache (docs/PROFILING.md, Scale: the user's cache folder, keyed
 * by the snapshot's bytes, the importer's and the import options; the importer's
 * stderr repeated on a hit; off with MNEMO_CACHE=0 or mn__tools_set_no_cache). device:
 * the snapshot's CUDA device to import (-1: the importer's default, the first device
 * with events; MN__TOOLS_ALL_DEVICES: every device, `--device all`). On failure prints "<prog>: <message>" on stderr and returns the
 * exit status (1: I/O or a tool missing, 2: a malformed file); 0 and *out on success. */
#define MN__TOOLS_ALL_DEVICES (-2)
int mn__tools_trace_load(const char *prog, const char *path, int device, mn_trace_t **out);

/* The option every command that may import a PyTorch snapshot takes and hands
 * to import_torch_snapshot.py: `--max-decompressed-size BYTES` (the most bytes a
 * .pickle.gz may inflate to), a row of the command's option table. */
#define MN__TOOLS_OPT_MAX_DECOMPRESSED(id)                                                    \
  {"max-decompressed-size", 0, "BYTES", (id),                                                 \
   "the most bytes a .pickle.gz may inflate to (default 4G; a byte count such as 8G)"}

/* Takes that option's value (a byte count as mn_bytes_parse reads it), kept for
 * the importer runs that follow: 0, or 2 after a usage error. */
int mn__tools_set_max_decompressed(const mn__cli_t *p, const char *value);

/* `--no-cache`, a row of the option table of every command that reads a trace
 * through mn__tools_trace_load; mn__tools_set_no_cache turns the import cache off
 * for this process (as MNEMO_CACHE=0). */
#define MN__TOOLS_OPT_NO_CACHE(id)                                                            \
  {"no-cache", 0, NULL, (id), "import a PyTorch snapshot again, not from the import cache, and keep nothing " \
   "(as MNEMO_CACHE=0)"}
void mn__tools_set_no_cache(void);

/* Appends what mn__tools_set_max_decompressed kept to args[n..] (room for 2 more)
 * and returns the new count. */
int mn__tools_import_args(char **args, int n);

/* Whether `path` starts like a PyTorch snapshot (pickle protocol 2+ or gzip). */
bool mn__tools_is_snapshot(const char *path);

/* mn__trace_recorded_config (profiling/analysis.h) with its warning, if any, on
 * stderr as "<prog>: warning: ..." (prog NULL: none). */
const char *mn__tools_recorded_config(const char *prog, const mn_trace_t *t, bool *as_recorded);

/* mn__trace_pick_device (profiling/analysis.h) for a command: its note on
 * stderr as "<prog>: note: ..."; 0, or 2 after "<prog>: <why>" on stderr. */
int mn__tools_pick_device(const char *prog, const char *path, const mn_trace_t *t, int want, const char *what,
                          int *index, uint64_t *number, bool *multi);

/* What a long command is doing, on a terminal: a stage (mn__tools_stage_fn)
 * prints "\r<prog>: <text>" over the line (nothing when `on` is false), and
 * mn__tools_stage_clear wipes it before the command's own output. `on` comes
 * from mn__tools_stage_on: --progress / --no-progress when given (forced = 1 / 0),
 * else stderr is a terminal and the trace has at least 100,000 entries (about a
 * second of work). */
bool mn__tools_stage_on(int forced, size_t entries);
void mn__tools_stage_clear(bool on);

 
/* What the commands around the library's report builders (report, diff) share:
 * mn__tools_print_notes prints each line of a report's notes (or any such
 * text; NULL: none) on stderr as "<prog>: <line>"; mn__tools_stage_fn is the
 * mn_report_progress_fn that shows a stage (user: prog, a const char *; set it
 * only when mn__tools_stage_on said so); mn__tools_lib_failed prints the
 * library's failure as "<prog>: <detail>" and returns the exit status (2 for
 * MN_ERR_INVALID_ARGUMENT: a bad option; else 1); mn__tools_write_page writes
 * r's page to `out` ("-": stdout; else atomically, a FIFO or device refused)
 * and returns 0, or 1 after a message. */
void mn__tools_print_notes(const char *prog, const char *notes);
void mn__tools_stage_fn(void *prog, const char *what);
int mn__tools_lib_failed(const char *prog, mn_status st);
int mn__tools_write_page(const char *prog, const char *out, const mn_report_t *r);

/* Where the CLI finds what it ships: MN__TOOLS_SCRIPT for import_torch_snapshot.py
 * and export_torch_snapshot.py, MN__TOOLS_DATA for the sample traces' folder
 * (holding traces/). Looked up in this order: the environment (MNEMO_TOOLS_DIR,
 * MNEMO_DATA_DIR); <the executable's folder>/../share/mnemo (the installed layout,
 * wherever the prefix was moved); the source tree, only when the executable is the
 * one in the build tree. Writes the path of `name` (a file or folder inside it) to
 * buf and returns true when it exists; else writes the first place looked at and
 * returns false. */
typedef enum mn__tools_kind { MN__TOOLS_SCRIPT, MN__TOOLS_DATA } mn__tools_kind;
bool mn__tools_find(mn__tools_kind kind, const char *name, char *buf, size_t size);

/* Runs `python3 <script> args...` (script found with mn__tools_find) and returns its
 * exit status (1 when the script or python3 is missing, with a message). */
int mn__tools_run_script(const char *prog, const char *script, char *const *args, int nargs);

/* Writes s as a JSON string to f: UTF-8 passes through when valid (else U+FFFD),
 * control bytes and DEL as \u escapes, and '<' as \u003c so that data embedded
 * in an HTML page never closes its script element (the same value to a JSON reader). */
void mn__tools_json_str(FILE *f, const char *s);

#endif /* MNEMO_TOOLS_TRACE_INPUT_H */
