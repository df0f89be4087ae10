/* tools/trace_input.h: what the mnemo CLI's commands share about their input: a
 * trace or a PyTorch snapshot read in one step, the recorded allocator settings, and
 * where the installed (or build-tree) helper scripts and sample traces are.
 * Single-threaded (the CLI's main thread); nothing here keeps state between calls. */
#ifndef MNEMO_TOOLS_TRACE_INPUT_H
#define MNEMO_TOOLS_TRACE_INPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "mnemo/trace.h"

/* Reads `path`: a mnemo trace, or a PyTorch memory snapshot (a pickle, gzip'ed or
 * not: told by its first bytes) that it imports on the fly through
 * import_torch_snapshot.py into a temporary trace (removed afterwards). device:
 * the snapshot's CUDA device to import (-1: the importer's default, the first device
 * with events). On failure prints "<prog>: <message>" on stderr and returns the
 * exit status (1: I/O or a tool missing, 2: a malformed file); 0 and *out on success. */
int mn__tools_trace_load(const char *prog, const char *path, int device, mn_trace_t **out);

/* Whether `path` starts like a PyTorch snapshot (pickle protocol 2+ or gzip). */
bool mn__tools_is_snapshot(const char *path);

/* The allocator settings the trace was recorded with (its `meta config`, in
 * PYTORCH_CUDA_ALLOC_CONF syntax), which replays use when no --config is given;
 * "" when the trace has none or mnemo's parser refuses it (then, with prog not
 * NULL, a warning says so on stderr). */
const char *mn__tools_recorded_config(const char *prog, const mn_trace_t *t);

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

#endif /* MNEMO_TOOLS_TRACE_INPUT_H */
