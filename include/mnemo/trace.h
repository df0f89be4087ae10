/* mnemo/trace.h: allocation traces (docs/TRACE_FORMAT.md): read, write and
 * record them, and replay one against any allocator to measure its memory. */
#ifndef MNEMO_TRACE_H
#define MNEMO_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest version; mn_trace_write writes 4 when the trace holds
 * annotations, else 3 when it holds frames (stacks), else 1 when every entry
 * is on device 0, else 2. */
#define MN_TRACE_FORMAT_VERSION 4
#define MN_TRACE_LINE_MAX 4096   /* bytes per line, newline excluded */
#define MN_TRACE_META_KEY_MAX 63 /* bytes per meta key */
#define MN_TRACE_STACK_MAX 128   /* frames per stack that writers keep (the innermost) */

/* One pre or event line of a trace file. */
typedef struct mn_trace_entry_s {
  mn_trace_action action;
  bool pre;            /* state before recording began (a "pre" line) */
  uint64_t time_us;    /* microseconds since the trace's origin; 0 for pre lines */
  uint64_t stream;     /* the trace's opaque stream id */
  uint64_t address;    /* start address on the recording device */
  uint64_t size;       /* bytes (requested bytes for alloc and frees) */
  uint64_t block_size; /* bytes the recording allocator gave; 0 when unknown */
  uint32_t device;     /* the trace's device index (version 2; 0 in version 1 files) */
  uint32_t line;       /* line in the file it was read from; 0 when not read */
  uint32_t stack;      /* stack id (version 3): 1..nstacks of the trace; 0: none */
} mn_trace_entry_t;

/* One source location of a call stack (a `frame` line, version 3). */
typedef struct mn_trace_frame_s {
  char *file;    /* decoded; "" when unknown */
  char *name;    /* decoded (function name, may hold blanks); may be "" */
  uint32_t line; /* 0 when unknown */
} mn_trace_frame_t;

/* The stage of an annotation (version 4): a point in time, or the start or
 * end of a named range (PyTorch's `annotate` trace events, stage START/END). */
typedef enum { MN_TRACE_ANNOTATION_MARK, MN_TRACE_ANNOTATION_START, MN_TRACE_ANNOTATION_END } mn_trace_annotation_stage;

/* One `annotate` line (version 4): a user's label at a moment of the trace.
 * Not an entry: replay never sees it. */
typedef struct mn_trace_annotation_s {
  uint64_t time_us; /* microseconds since the trace's origin, like an event's */
  size_t entry;     /* index of the first entry after it (nentries if none) */
  uint32_t device;  /* the trace's device index */
  uint32_t stack;   /* stack id (1..nstacks), 0: none */
  mn_trace_annotation_stage stage;
  char *name; /* decoded; any bytes but NUL, may be "" */
} mn_trace_annotation_t;

typedef struct mn_trace_meta_s {
  char *key;   /* [A-Za-z0-9_.-]{1,63} */
  char *value; /* may be empty */
} mn_trace_meta_t;

/* A trace in memory. Fields are read-only for callers: change it through
 * the functions below, which keep the arrays valid. */
typedef struct mn_trace_s {
  unsigned version; /* the version read (1 to 4); 1 for a new trace */
  size_t nentries;  /* pre lines first, then events, in file order */
  mn_trace_entry_t *entries;
  size_t nmeta;
  mn_trace_meta_t *meta; /* in file order */
  size_t capacity, meta_capacity;
  uint64_t origin_ns; /* recorder: clock value of time 0 */
  uint64_t dropped;   /* recorder: events lost for want of host memory */
  /* Version 3: interned frames and stacks (read-only; add them with
   * mn_trace_frame_add / mn_trace_stack_add). */
  size_t nframes; /* frames[i] has id i + 1 */
  mn_trace_frame_t *frames;
  size_t nstacks;        /* stack id s (1..nstacks) holds the frame ids
                            stack_frames[stack_start[s-1] .. stack_start[s]-1],
                            innermost (most recent call) first */
  uint32_t *stack_start; /* nstacks + 1 offsets, stack_start[0] = 0 (NULL while nstacks = 0) */
  uint32_t *stack_frames;
  /* Version 4: annotations in file order, entry non-decreasing (read-only;
   * add them with mn_trace_annotation_add). */
  size_t nannotations;
  mn_trace_annotation_t *annotations;
  struct mn__trace_intern_s *intern_; /* private: capacities and the intern hash tables */
} mn_trace_t;

/* An empty trace; free it with mn_trace_destroy. */
MN_API MN_NODISCARD mn_status mn_trace_create(mn_trace_t **out);
MN_API void mn_trace_destroy(mn_trace_t *trace);

/* Reads a trace file. Errors: MN_ERR_IO (cannot open or read),
 * MN_ERR_INVALID_ARGUMENT (not a regular file: a FIFO, folder or device is
 * refused without blocking), MN_ERR_FORMAT
 * with "<path>:<line>: <what>" for anything the format does not allow,
 * including a truncated file. *out is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_trace_read(const char *path, mn_trace_t **out);
/* Parses a trace held in memory (len bytes, need not be NUL-terminated);
 * `name` (may be NULL: "<memory>") prefixes error messages. */
MN_API MN_NODISCARD mn_status mn_trace_parse(const char *text, size_t len, const char *name, mn_trace_t **out);
/* Writes the trace in the format (version line, meta, frames, stacks, pre
 * lines, events with the annotations among them, end line; version 4 when the
 * trace has annotations, else 3 when the trace has frames, else 2 when
 * an entry is on a device other than 0, else 1); fails with MN_ERR_INVALID_ARGUMENT, writing nothing, when an entry or
 * meta key breaks the format's rules. Writes through a temporary file renamed
 * over `path`. */
MN_API MN_NODISCARD mn_status mn_trace_write(const mn_trace_t *trace, const char *path);
/* The same text into a malloc'ed, NUL-terminated buffer (*len without the NUL). */
MN_API MN_NODISCARD mn_status mn_trace_format(const mn_trace_t *trace, char **text, size_t *len);

/* Appends an entry (its `line` is ignored and set to 0). Pre entries must
 * come before the first event entry (MN_ERR_INVALID_STATE otherwise). Only
 * syntax is checked here (its `stack` must be 0 or an existing stack id:
 * MN_ERR_INVALID_ARGUMENT); liveness is checked by mn_trace_validate. */
MN_API MN_NODISCARD mn_status mn_trace_append(mn_trace_t *trace, const mn_trace_entry_t *entry);
/* Sets (or replaces) a meta key; the value must hold no newline or NUL. */
MN_API MN_NODISCARD mn_status mn_trace_meta_set(mn_trace_t *trace, const char *key, const char *value);
/* The value of a meta key, or NULL when absent. */
MN_API const char *mn_trace_meta_get(const mn_trace_t *trace, const char *key);
/* A meta value read as a decimal (MN_ERR_NOT_FOUND when absent, MN_ERR_FORMAT
 * when not a decimal that fits). *out is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_trace_meta_get_u64(const mn_trace_t *trace, const char *key, uint64_t *out);
/* ---- frames and stacks (version 3) ---------------------------------------------
 * Interns a frame: the same file, line and name give the same id; *id from 1.
 * file and name are C strings of any bytes but NUL (the writer percent-encodes
 * them); file NULL or "" is unknown. MN_ERR_INVALID_ARGUMENT when its frame
 * line would be over MN_TRACE_LINE_MAX bytes or ids would pass UINT32_MAX. */
MN_API MN_NODISCARD mn_status mn_trace_frame_add(mn_trace_t *t, const char *file, uint32_t line, const char *name,
                                                 uint32_t *id);
/* Interns a stack of frame ids, innermost first: the same sequence gives the
 * same id; n >= 1 and every id must exist (MN_ERR_INVALID_ARGUMENT); *id from 1.
 * Any n is kept; writers write the innermost MN_TRACE_STACK_MAX that fit a line. */
MN_API MN_NODISCARD mn_status mn_trace_stack_add(mn_trace_t *t, const uint32_t *frame_ids, size_t n, uint32_t *id);
/* The frame ids of stack `id`, innermost first (*frame_ids points into the
 * trace, valid until it changes; may be NULL); returns their count, 0 for id 0
 * or an unknown id. */
MN_API size_t mn_trace_stack_get(const mn_trace_t *t, uint32_t id, const uint32_t **frame_ids);
/* Frame `id` (1..nframes), or NULL. */
MN_API const mn_trace_frame_t *mn_trace_frame_get(const mn_trace_t *t, uint32_t id);

/* ---- annotations (version 4) ----------------------------------------------------
 * Appends an annotation at the current end of the trace: its `entry` is
 * ignored and set to nentries (the entries appended later come after it), so
 * a writer interleaves mn_trace_append and mn_trace_annotation_add in file
 * order. The name is copied (NULL: ""). MN_ERR_INVALID_ARGUMENT for a stage
 * that is not a mn_trace_annotation_stage, a device over INT32_MAX, a stack
 * that is neither 0 nor a stack id, or a name whose line would pass
 * MN_TRACE_LINE_MAX bytes; the trace is unchanged on failure. */
MN_API MN_NODISCARD mn_status mn_trace_annotation_add(mn_trace_t *t, const mn_trace_annotation_t *a);
/* "mark", "start" or "end" (NULL for any other value). */
MN_API const char *mn_trace_annotation_stage_name(mn_trace_annotation_stage stage);

/* Checks the liveness rules (an address is allocated at most once at a time,
 * frees free a live address); the message names the line (or entry index). */
MN_API MN_NODISCARD mn_status mn_trace_validate(const mn_trace_t *trace);
/* Parses an action name ("alloc", "free_requested", ...). */
MN_API MN_NODISCARD mn_status mn_trace_action_parse(const char *name, mn_trace_action *out);

/* ---- recording -------------------------------------------------------------
 * A mn_trace_sink_fn that appends each allocator event to the mn_trace_t
 * passed as `user`: times become microseconds since the first event
 * (origin_ns keeps its clock value), alloc sizes the requested bytes (the
 * block size goes to block_size). Never fails: events it cannot store are
 * counted in trace->dropped. Not thread-safe across allocators: give each
 * allocator its own trace (an allocator's lock serializes its own events). */
MN_API void mn_trace_recorder_sink(void *user, const mn_trace_event_t *event);

/* ---- replay ------------------------------------------------------------------
 * Drives an allocator through a trace: the pre allocations first, in order,
 * then every alloc / free_requested / empty_cache event, in order. Trace stream ids map to
 * streams of the allocator's device: the first id seen (or 0) to the default
 * stream, each other id to a stream created for the replay. Trace addresses
 * map to the pointers the allocator returns. An allocation that fails for
 * want of memory is counted (ooms) and its later free skipped (recorded oom
 * lines: see replay_ooms); other
 * failures stop the replay with the trace line named. At the end every live
 * allocation is freed and the created streams destroyed. */
typedef struct mn_replay_step_s {
  size_t entry;                /* index in the trace of the entry just replayed */
  int64_t allocated, reserved; /* allocator's current bytes (-1: unknown) */
  int64_t requested;           /* bytes asked for and live */
} mn_replay_step_t;

/* An out-of-memory of a replay (mn_replay_options_t.on_oom). */
typedef struct mn_replay_oom_s {
  size_t entry;    /* index in the trace of the alloc or oom line */
  uint64_t size;   /* bytes asked */
  bool recorded;   /* the entry is a recorded oom line (replay_ooms) */
  bool reproduced; /* recorded: the replay ran out of memory there too; else true */
} mn_replay_oom_t;

typedef struct mn_replay_options_s {
  bool skip_pre; /* leave out the pre allocations (their frees are then skipped) */
  /* Leave out the trace's empty_cache lines (by default each one calls
   * mn_allocator_empty_cache, as the recorded program did). */
  bool skip_empty_cache;
  /* Trace device to replay (version 2 traces may hold several): -1 (the
   * default) replays the lowest device index in the trace. */
  int trace_device;
  /* On an allocation that fails for want of memory: up to this many times,
   * empty the allocator's cache and try again (counted in retries). */
  unsigned oom_retries;
  /* Called after every replayed alloc and free (NULL: none); may not call the allocator. */
  void (*on_step)(void *user, const mn_replay_step_t *step);
  void *on_step_user;
  /* Stop after this entry index of the trace (SIZE_MAX: run to the end) and call at_stop
   * with the allocator in that state (e.g. to take a snapshot), before the
   * live allocations are freed. */
  size_t stop_after;
  void (*at_stop)(void *user, mn_allocator_t *allocator);
  void *at_stop_user;
  /* By default the trace's pre segments (segment_alloc lines: the device memory
   * the recording allocator held when recording began) are reserved as
   * recorded before the pre allocations: each one a segment of its size, the
   * live pre allocations at their offsets in it, the rest cached free blocks,
   * so the replay starts from the recording allocator's warm cache. Where the
   * replayed allocator cannot lay a segment out so (other rounding, another
   * pool), that segment stays reserved, free, and its allocations replay as
   * usual. true: leave the pre segments out (a cold cache: only the pre
   * allocations are replayed, in segments the allocator makes for them). */
  bool skip_pre_segments;
  /* NULL, or trace->nentries slots the replay fills when it stops (before
   * at_stop; at the end when it runs to the end, before the live allocations
   * are freed): for each alloc entry still live, the pointer the allocator gave
   * it; NULL for every other entry. Maps the blocks of a snapshot taken in
   * at_stop back to the trace lines (and stacks) that allocated them. */
  void **live_ptrs;
  /* Replay the trace's `oom` lines (an allocation the recording allocator could
   * not make: it has no alloc line of its own; size = the bytes asked): at each,
   * ask the allocator for those bytes on the line's stream (with oom_retries as
   * for an alloc) and free them at once when it had room. Whether it ran out of
   * memory there too is counted in ooms_reproduced. false (the default): oom
   * lines are only counted (recorded_ooms). */
  bool replay_ooms;
  /* Called (NULL: none) for every allocation of the replay that fails for want
   * of memory and, with replay_ooms, for every recorded oom line, reproduced or
   * not; may not call the allocator. */
  void (*on_oom)(void *user, const mn_replay_oom_t *oom);
  void *on_oom_user;
} mn_replay_options_t;

MN_API mn_replay_options_t mn_replay_options_default(void);

typedef struct mn_replay_result_s {
  uint64_t allocs, frees; /* replayed event operations (pre allocs excluded) */
  uint64_t pre_allocs;    /* pre allocations replayed */
  uint64_t ooms;          /* allocations that failed for want of memory */
  uint64_t skipped_frees; /* frees of allocations that had failed */
  uint64_t retries;       /* empty_cache-and-retry rounds (oom_retries) */
  uint64_t empty_caches;  /* empty_cache lines replayed */
  uint32_t trace_device;  /* the trace device replayed */
  uint32_t trace_devices; /* distinct devices in the trace */
  size_t streams;         /* distinct trace streams */
  /* Bytes; over the whole replay, pre allocations included. From the
   * allocator's statistics when it keeps them (stats_from_allocator), else
   * allocated = requested bytes (rounded by nothing) and reserved = the
   * device's mapped bytes (SIM only; -1 elsewhere). */
  int64_t peak_allocated, peak_reserved;
  int64_t peak_requested;     /* peak of the bytes asked for (the trace's own figure) */
  int64_t reserved_after_pre; /* reserved bytes once the pre allocations are in (-1: unknown) */
  int64_t allocated_after_pre;
  double ratio;                 /* peak_reserved / peak_allocated (0 when unknown) */
  int64_t device_allocs;        /* raw allocations (or page maps) over the whole replay */
  int64_t device_allocs_events; /* of which during the events (after the pre allocations) */
  int64_t device_frees;         /* raw frees (or page unmaps) over the whole replay; -1: unknown */
  /* SIM only: the peak of the device's mapped bytes above what was mapped
   * before the replay, sampled after every call (an independent check of
   * peak_reserved); -1 on other devices. */
  int64_t peak_device_mapped;
  uint64_t op_ns;   /* host time inside alloc/free calls (CLOCK_MONOTONIC), events only */
  double ns_per_op; /* op_ns / (allocs + frees) */
  bool stats_from_allocator;
  uint64_t pre_segments;          /* pre segments reserved as recorded (skip_pre_segments unset) */
  uint64_t pre_segments_laid_out; /* of which with their pre allocations at the recorded offsets */
  uint64_t recorded_ooms;         /* the trace's oom lines on the device replayed (up to stop_after) */
  uint64_t ooms_reproduced;       /* replay_ooms: of those, where the replay ran out of memory too */
} mn_replay_result_t;

/* options NULL: the defaults. The allocator should be fresh (its peaks are
 * reset first when it supports that). *out is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_trace_replay(const mn_trace_t *trace, mn_allocator_t *allocator,
                                              const mn_replay_options_t *options, mn_replay_result_t *out);

/* One device of a trace, as `mnemo replay` and mnemo.profiling.replay replay
 * it (mn_trace_devices). */
typedef struct mn_trace_device_s {
  uint32_t index; /* the entries' device field (mn_replay_options_t.trace_device) */
  /* The recorded device's number: its index in a trace of several devices
   * (`meta devices`: the importer's CUDA indices), else the trace's `meta
   * device` for index 0 (a one-device import of device N), else its index. */
  uint64_t label;
  bool host;         /* label is `meta host_device`: pinned host memory, not device memory */
  size_t entries;    /* its entries */
  size_t pre_allocs; /* of which pre alloc lines */
  size_t oom_lines;  /* its recorded oom lines */
  /* The device's size as recorded, 0 when the trace does not say: at its first
   * oom line, the reserved bytes then (pre segments and the segment lines
   * before it) + the free bytes the line reports (its address field; a line of
   * mnemo's recorder says 0, used only in a trace recorded_by pytorch). */
  uint64_t oom_capacity;
  /* Without an oom line: the least capacity (>= the peak reserved) that makes
   * a caching allocator free its cache where the recording did for want of
   * memory: runs of segment frees that no empty_cache line precedes and that a
   * segment_alloc follows (PyTorch's partial release of its cache). 0: none,
   * inconsistent, or the garbage collector on (meta config
   * garbage_collection_threshold: it frees without a failure). */
  uint64_t release_capacity;
  size_t partial_releases; /* those runs */
} mn_trace_device_t;

/* The devices of a trace with entries, lowest index first (*n 0 and *out NULL
 * for a trace without entries); free with mn_trace_devices_free. *out and *n
 * are untouched on failure. */
MN_API MN_NODISCARD mn_status mn_trace_devices(const mn_trace_t *trace, mn_trace_device_t **out, size_t *n);
MN_API void mn_trace_devices_free(mn_trace_device_t *devices);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_TRACE_H */
