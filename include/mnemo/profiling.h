/* mnemo/profiling.h: NVTX ranges switch, the bounded trace recorder (a ring
 * buffer of allocator events, thread-safe), importers and text summaries. */
#ifndef MNEMO_PROFILING_H
#define MNEMO_PROFILING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mnemo/allocator.h"
#include "mnemo/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- NVTX ---------------------------------------------------------------------
 * mnemo opens NVTX ranges in the domain "mnemo" around allocations, frees,
 * empty_cache (of every allocator: mn_allocator_alloc/free/empty_cache), OOM
 * recovery, copies, casts and fills, with the byte count as the range's uint64
 * payload (a free's block size where the allocator can tell: the caching
 * allocator and the adaptors over it; 0 elsewhere) ("mnemo.alloc", "mnemo.free", ...; docs/PROFILING.md).
 * They are off by default (MNEMO_NVTX=1 in the environment switches them on at
 * the first range); when off a range costs one relaxed atomic load. Builds
 * without CUDA have no NVTX: the switch and the counters still work. */
MN_API void mn_nvtx_set_enabled(bool on);
MN_API bool mn_nvtx_enabled(void);

/* Ranges opened and closed since the process started, while enabled (all
 * threads), and the calling thread's open ranges. For tests and sanity checks:
 * pushes == pops once every thread is idle. */
typedef struct mn_nvtx_counters_s {
  uint64_t pushes, pops;
  int thread_depth;
  /* The calling thread's most recent range while enabled: name and payload. */
  const char *thread_last_name;
  uint64_t thread_last_nbytes;
} mn_nvtx_counters_t;
MN_API void mn_nvtx_get_counters(mn_nvtx_counters_t *out);

/* ---- trace recorder --------------------------------------------------------------
 * A bounded ring buffer of allocator events (every mn_trace_action: alloc,
 * free_requested, free_completed (a free_requested whose free_completed comes
 * later was deferred for pending stream uses), segment alloc/free/map/unmap,
 * empty_cache, oom) with time, device, stream, address, size and requested
 * size. When full, the oldest events are overwritten (counted). Thread-safe:
 * any number of allocators, on any devices, may feed one recorder at once. */
typedef struct mn_trace_recorder_s mn_trace_recorder_t;

/* capacity: events kept (>= 1). */
MN_API MN_NODISCARD mn_status mn_trace_recorder_create(size_t capacity, mn_trace_recorder_t **out);
MN_API void mn_trace_recorder_destroy(mn_trace_recorder_t *rec);
/* The mn_trace_sink_fn to pass with the recorder as `user` (caching allocator:
 * mn_caching_allocator_set_trace_sink; any allocator: mn_tracing_adaptor_create). */
MN_API void mn_trace_recorder_sink_fn(void *user, const mn_trace_event_t *event);

typedef struct mn_trace_recorder_stats_s {
  uint64_t recorded;    /* events received */
  uint64_t overwritten; /* oldest events lost to the bound */
  size_t held;          /* events in the buffer now */
  size_t capacity;
  unsigned max_frames; /* mn_trace_recorder_set_stacks (0: off) */
  size_t stacks;       /* distinct raw stacks kept (the table's bound: 262,144) */
  size_t stack_pcs;    /* return addresses they hold (bound: 2,097,152, 16 MiB) */
  uint64_t stackless;  /* events recorded with stacks on whose stack the full table could not keep (stack 0) */
} mn_trace_recorder_stats_t;
MN_API MN_NODISCARD mn_status mn_trace_recorder_get_stats(mn_trace_recorder_t *rec, mn_trace_recorder_stats_t *out);
MN_API void mn_trace_recorder_clear(mn_trace_recorder_t *rec);

/* C call stacks: with max_frames > 0 the sink takes each event's stack
 * (glibc backtrace(), on the calling thread, outside the recorder's lock) and
 * keeps an id of it per event: the raw return addresses are interned in a
 * table bounded at 2^18 distinct stacks and 2^21 addresses (about 20 MiB);
 * once full, events with a new stack get none (stats.stackless). Only
 * mn_trace_recorder_to_trace / _write symbolize them (dladdr): frame file =
 * the module's path, name = the nearest exported symbol or "0x<offset in the
 * module>" (addr2line -e <file> <offset>), line 0; the recorder's and the
 * allocator's own frames are cut, so a stack starts at the caller of
 * mn_allocator_alloc / free (needs symbols: libmnemo.so, or a static link
 * with -rdynamic), and keeps max_frames frames. The trace is then version 3.
 * 0 (the default) switches it off; max_frames <= MN_TRACE_RECORDER_STACK_MAX.
 * MNEMO_TRACE_STACKS=1 (16 frames) or =N does it for the MNEMO_TRACE recorder.
 * Cost: glibc's unwinder takes about 0.25 us per frame, several us per event
 * (docs/PROFILING.md has the figures); without stacks the sink costs ~35 ns. */
#define MN_TRACE_RECORDER_STACK_MAX 64
MN_API MN_NODISCARD mn_status mn_trace_recorder_set_stacks(mn_trace_recorder_t *rec, unsigned max_frames);

/* The held events as a trace (docs/TRACE_FORMAT.md), oldest first, times in
 * microseconds since the oldest held event. Allocations freed in the window
 * but made before it (overwritten) become `pre alloc` lines, so the trace is
 * valid and replayable. Several devices: each entry keeps its device index and
 * the trace is version 2 (meta device_types lists each index's type). */
MN_API MN_NODISCARD mn_status mn_trace_recorder_to_trace(mn_trace_recorder_t *rec, mn_trace_t **out);
/* mn_trace_recorder_to_trace + mn_trace_write. */
MN_API MN_NODISCARD mn_status mn_trace_recorder_write(mn_trace_recorder_t *rec, const char *path);

/* The process-wide recorder, made on first use when MNEMO_TRACE=path is set
 * (MNEMO_TRACE_CAPACITY=events, default 1,000,000; MNEMO_TRACE_STACKS=1 or a
 * frame count: C stacks, mn_trace_recorder_set_stacks); it is written to that path
 * at exit. Every caching allocator created while it exists and that has no
 * sink of its own feeds it. NULL (no error) when MNEMO_TRACE is unset. */
MN_API mn_trace_recorder_t *mn_trace_recorder_global(void);

/* ---- importers --------------------------------------------------------------------
 * RMM's logging_resource_adaptor CSV log (header "Thread,Time,Action,Pointer,
 * Size,Stream"; older RMM writes "Thread,Time,Action,Pointer,Size,Stream" too,
 * newer ones may add columns, which are ignored; actions allocate, free,
 * allocate failure). Errors are MN_ERR_FORMAT "<name>:<line>: <what>";
 * a truncated last line is reported, never guessed. */
MN_API MN_NODISCARD mn_status mn_trace_import_rmm_csv(const char *text, size_t len, const char *name, mn_trace_t **out);
/* Reads the file and imports it. */
MN_API MN_NODISCARD mn_status mn_trace_import_rmm_csv_file(const char *path, mn_trace_t **out);

/* ---- text summaries ------------------------------------------------------------------
 * A table of statistics like torch.cuda.memory_summary(): current, peak,
 * total allocated and total freed of every counter, for all / large / small
 * pools, plus the event counters. Writes at most bufsize bytes (NUL
 * included); *needed (may be NULL) gets the full length. MN_ERR_OVERFLOW when
 * the buffer is too small (it then holds a cut, NUL-terminated text). */
MN_API MN_NODISCARD mn_status mn_memory_summary(const mn_alloc_stats_t *stats, const char *title, char *buf,
                                                size_t bufsize, size_t *needed);
/* mn_allocator_get_stats + mn_memory_summary. */
MN_API MN_NODISCARD mn_status mn_allocator_memory_summary(mn_allocator_t *a, char *buf, size_t bufsize, size_t *needed);
/* A table of a snapshot: one row per segment (address, stream, pool, size,
 * allocated, active, free bytes, largest free block, blocks, fragmentation =
 * 1 - largest free / free), its blocks when `blocks` is true, and totals. */
MN_API MN_NODISCARD mn_status mn_snapshot_print(const mn_snapshot_t *snap, bool blocks, FILE *out);

/* ---- report pages ----------------------------------------------------------------
 * The self-contained HTML pages of `mnemo report` (inline CSS and script, no
 * network), built in memory with their summary as text and as one JSON object
 * (docs/PROFILING.md, "Reports": the fields), from a trace the caller read
 * (mn_trace_read; a PyTorch snapshot is imported by the CLI or mnemo.profiling).
 * One trace: every device (or one) replayed on the SIM device under each
 * setting, the timeline, active memory, who holds the peak, the allocator's
 * state at any entry. Two traces: their comparison (the peaks, who holds each
 * peak grouped by first user frame, the segment sizes only one holds, both
 * timelines on one scale). The SIM device is configured for each replay and
 * restored as found on return, on success and on failure: no other thread may
 * use the SIM device meanwhile. */
#define MN_REPORT_MAX_CONFIGS 16

/* What a long report is doing ("cuda:0: replaying 1000000 entries (config 1 of
 * 2)..."), on the calling thread. */
typedef void (*mn_report_progress_fn)(void *user, const char *what);

typedef struct mn_report_options_s {
  /* Allocator settings to replay with and compare (PYTORCH_CUDA_ALLOC_CONF
   * syntax; "" for mnemo's defaults), at most MN_REPORT_MAX_CONFIGS; the first
   * draws the timeline and the segment map. NULL / 0: the trace's recorded
   * settings (`meta config`, "as recorded"), else the defaults. */
  const char *const *configs;
  size_t nconfigs;
  size_t capacity;   /* the SIM device's bytes (OOMs beyond); 0: each device as recorded */
  int trace_device;  /* the recorded device to show (0..1000); -1: every device of the trace */
  const char *name;  /* the input's name: the page's default title; NULL: "trace" */
  const char *title; /* the page's title; NULL: name */
  /* The page's name in the summary ("report <output>: ...") and the JSON's
   * "path"; NULL: "(stdout)" and null. Nothing is written there: mn_report_write. */
  const char *output;
  mn_report_progress_fn on_progress; /* NULL: none */
  void *progress_user;
} mn_report_options_t;
MN_API mn_report_options_t mn_report_options_default(void);

/* A built page and its summary; every text NUL-terminated, owned by the report. */
typedef struct mn_report_s {
  char *page;       /* the HTML page (NULL for a diff built without one) */
  size_t page_size; /* its bytes */
  char *summary;    /* the summary as `mnemo report` (or `mnemo diff`) prints it */
  char *json;       /* the summary as one JSON object, as with --json (a newline at its end) */
  char *notes;      /* warnings and notes, one per line ("warning: ...", "note: ..."); "" for none */
} mn_report_t;

/* Builds the report of one trace (the page `mnemo report TRACE -o FILE` writes).
 * options NULL: mn_report_options_default(). MN_ERR_INVALID_ARGUMENT for a bad
 * setting, capacity or device; MN_ERR_OUT_OF_MEMORY; a replay's failure as it
 * came. *out untouched on failure; free with mn_report_free. */
MN_API MN_NODISCARD mn_status mn_report_build(const mn_trace_t *trace, const mn_report_options_t *options,
                                              mn_report_t **out);

typedef struct mn_diff_options_s {
  const char *config; /* one setting for both replays; NULL: each as recorded */
  int trace_device;   /* the recorded device compared in both (0..1000); -1: each one's lowest */
  /* The inputs' names (file names: both holding rank<N> label them "rank N");
   * NULL: "A", "B". */
  const char *name_a, *name_b;
  bool page;          /* also build the page (the summary is then the page's) */
  const char *title;  /* the page's title; NULL: "<name_a> vs <name_b>" */
  const char *output; /* as mn_report_options_t.output */
  size_t top;         /* rows of groups and segment sizes in the text; 0: 15 */
  mn_report_progress_fn on_progress;
  void *progress_user;
} mn_diff_options_t;
MN_API mn_diff_options_t mn_diff_options_default(void);

/* Compares two traces (`mnemo diff A B`; with options->page the page of `mnemo
 * report A B -o FILE`): summary is `mnemo diff`'s text (with a page: the page's
 * summary), json its --json object (with a page: "path" and "bytes" first).
 * Errors as mn_report_build. */
MN_API MN_NODISCARD mn_status mn_diff_build(const mn_trace_t *a, const mn_trace_t *b, const mn_diff_options_t *options,
                                            mn_report_t **out);

/* Writes the report's page to path (atomically: a temporary file renamed into
 * place; a FIFO or device is refused). MN_ERR_INVALID_ARGUMENT when it has no
 * page, MN_ERR_IO. */
MN_API MN_NODISCARD mn_status mn_report_write(const mn_report_t *report, const char *path);
MN_API void mn_report_free(mn_report_t *report);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_PROFILING_H */
