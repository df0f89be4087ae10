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
#include "mnemo/trace.h"

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

/* The allocator settings the trace was recorded with (its `meta config`, in
 * PYTORCH_CUDA_ALLOC_CONF syntax), which every command replays with when no
 * --config is given; *as_recorded says it had them (the row is then labelled
 * "as recorded"). "" and false when the trace has none or mnemo's parser refuses
 * them (then, with prog not NULL, a warning says so on stderr). */
const char *mn__tools_recorded_config(const char *prog, const mn_trace_t *t, bool *as_recorded);

/* The bytes the recording allocator counted for an alloc entry: its recorded
 * block size, or the request rounded up to PyTorch's 512 B when none was recorded
 * (a request within 511 B of 2^64 as it is). */
uint64_t mn__tools_recorded_block(const mn_trace_entry_t *e);
/* Makes room for one more element in a growing array: `items` is the address of
 * the array's pointer (any object pointer type, e.g. &steps), n its elements in
 * use; when n == *cap, doubles *cap (first: `first` elements) and reallocates
 * the array (elements of `size` bytes). false, with the pointer and *cap
 * unchanged, when host memory runs out. */
bool mn__tools_grow(void *items, size_t n, size_t *cap, size_t size, size_t first);
/* The one device of t that a single-device command (snapshot, diff) works on.
 * want: the recorded device number (--trace-device), -1 for the lowest device
 * that is not pinned host memory (with a note on stderr naming `path` when t holds
 * several). *index: the trace device index to replay (mn_replay_options_t
 * .trace_device; -1 for a one-device trace: the replay's default); *number: the
 * recorded device number; *multi: whether t is a several-device trace (its
 * PyTorch figures under devN.torch_*). 0, or 2 after a message on stderr: no such
 * device, or the pinned host memory (meta host_device), which is not replayed.
 * `what` ends the note ("comparing", "showing"). */
int mn__tools_pick_device(const char *prog, const char *path, const mn_trace_t *t, int want, const char *what,
                          int *index, uint64_t *number, bool *multi);

/* What a long command is doing, on a terminal: mn__tools_stage prints
 * "\r<prog>: <text>" over the line (nothing when `on` is false), and
 * mn__tools_stage_clear wipes it before the command's own output. `on` comes
 * from mn__tools_stage_on: --progress / --no-progress when given (forced = 1 / 0),
 * else stderr is a terminal and the trace has at least 100,000 entries (about a
 * second of work). */
bool mn__tools_stage_on(int forced, size_t entries);
void mn__tools_stage(bool on, const char *prog, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void mn__tools_stage_clear(bool on);
/* a + b, UINT64_MAX where it would wrap (sizes are user data: sums saturate). */
uint64_t mn__tools_sat_add_u64(uint64_t a, uint64_t b);

/* Sorts idx[0..n) (entry indices of t) by the entries' size, largest first (ties:
 * the earlier entry first). */
void mn__tools_sort_by_size(const mn_trace_t *t, size_t *idx, size_t n);

/* A group of live allocations that one stack allocated ("who holds the memory"). */
typedef struct mn__tools_holder_s {
  uint32_t stack; /* trace stack id, 0: none (grouped by key: the stack holding the most bytes) */
  int kind;       /* 0: with a stack; 1: no stack, allocated before recording; 2: no stack recorded */
  size_t count;
  uint64_t bytes, block_bytes; /* asked for; recorded block bytes (mn__tools_recorded_block); saturated sums */
  uint32_t key;   /* the stack's first user frame (mn__tools_stack_key, tools/stacks.h); 0: none */
  size_t nstacks; /* distinct stacks in the group (1 when grouped by stack, 0 without one) */
} mn__tools_holder_t;

/* Sorts live[0..n) (indices of alloc entries of t) largest request first, and
 * groups them by the stack that allocated them into *groups (malloc'ed, the most
 * bytes first; *ngroups). false (nothing allocated) for want of host memory. */
bool mn__tools_holders(const mn_trace_t *t, size_t *live, size_t n, mn__tools_holder_t **groups, size_t *ngroups);

/* Merges groups[0..*ngroups) that mn__tools_holders made by stack into groups by
 * their first user frame (`key`; stacks without one stay apart), in place: sums
 * their counts and bytes, keeps the stack of the most bytes, the most bytes
 * first; *ngroups becomes the new count. The rule: tools/stacks.h. */
void mn__tools_holders_by_key(mn__tools_holder_t *groups, size_t *ngroups);

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
