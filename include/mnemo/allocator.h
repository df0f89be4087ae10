/* mnemo/allocator.h: the composable allocator interface (a vtable first in the
 * struct, one public dispatch per slot), the per-device default, and the naive allocator. */
#ifndef MNEMO_ALLOCATOR_H
#define MNEMO_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_allocator_s mn_allocator_t;

/* ---- statistics -------------------------------------------------------------
 * Each counter is {current, peak, allocated (total added), freed (total
 * removed)}, kept for all memory and for the small and large pools, as
 * PyTorch's memory_stats(). */
typedef struct mn_stat_s {
  int64_t current, peak, allocated, freed;
} mn_stat_t;

typedef enum mn_pool_kind { MN_POOL_ALL = 0, MN_POOL_SMALL = 1, MN_POOL_LARGE = 2, MN_POOL_COUNT = 3 } mn_pool_kind;

/* One row per pooled counter: name and what it counts. */
#define MN_ALLOC_STATS_MAP(X)                                                 \
  X(allocation, "live allocations (count)")                                   \
  X(segment, "segments reserved from the device (count)")                     \
  X(active, "blocks in use or pending free (count)")                          \
  X(inactive_split, "free blocks inside partly used segments (count)")        \
  X(allocated_bytes, "bytes of live allocations (rounded sizes)")             \
  X(reserved_bytes, "bytes reserved from the device")                         \
  X(active_bytes, "bytes of active blocks")                                   \
  X(inactive_split_bytes, "bytes of free blocks inside partly used segments") \
  X(requested_bytes, "bytes the callers asked for (unrounded)")

#define MN_ALLOC_STATS_VERSION 1

typedef struct mn_alloc_stats_s {
  uint32_t size;    /* sizeof(mn_alloc_stats_t), set by mnemo */
  uint32_t version; /* MN_ALLOC_STATS_VERSION */
#define MN__STAT_FIELD(name, text) mn_stat_t name[MN_POOL_COUNT];
  MN_ALLOC_STATS_MAP(MN__STAT_FIELD)
#undef MN__STAT_FIELD
  mn_stat_t oversize_allocations; /* allocations >= max_split_size */
  mn_stat_t oversize_segments;
  int64_t num_alloc_retries;    /* allocations that freed cache and retried */
  int64_t num_ooms;             /* allocations that failed for want of memory */
  int64_t num_sync_all_streams; /* synchronizations forced by memory pressure */
  int64_t num_device_alloc;     /* raw allocations (or page maps) */
  int64_t num_device_free;
  int64_t max_split_size; /* bytes; -1 when unlimited */
} mn_alloc_stats_t;

/* ---- snapshots ----------------------------------------------------------------
 * Every segment an allocator holds, with its blocks in address order. */
typedef enum mn_block_state {
  MN_BLOCK_ACTIVE = 0,              /* allocated */
  MN_BLOCK_ACTIVE_PENDING_FREE = 1, /* freed, waiting for stream events */
  MN_BLOCK_INACTIVE = 2             /* free, reusable */
} mn_block_state;

typedef struct mn_snapshot_block_s {
  uintptr_t address;
  size_t size;           /* bytes */
  size_t requested_size; /* bytes asked for; 0 when inactive */
  mn_block_state state;
} mn_snapshot_block_t;

typedef struct mn_snapshot_segment_s {
  mn_device_t device;
  uintptr_t address;
  /* bytes */
  size_t total_size, allocated_size, active_size, requested_size;
  uint64_t stream_id; /* mn_stream_id of the stream it belongs to */
  bool is_large;      /* large pool (false: small pool) */
  bool is_expandable;
  uint64_t pool_id; /* mn_mempool_id of its pool; 0: the allocator's own pools */
  size_t nblocks;
  mn_snapshot_block_t *blocks;
} mn_snapshot_segment_t;

typedef struct mn_snapshot_s {
  size_t nsegments;
  mn_snapshot_segment_t *segments; /* sorted by address */
} mn_snapshot_t;

/* ---- trace events ---------------------------------------------------------
 * What allocators and the tracing adaptor report to a sink (the profiling
 * layer records them; docs/TRACE_FORMAT.md writes them to files). Values are
 * stable. */
typedef enum mn_trace_action {
  MN_TRACE_ALLOC = 0,          /* a block handed out: address, size, requested_size */
  MN_TRACE_FREE_REQUESTED = 1, /* the caller freed it (may wait for stream events) */
  MN_TRACE_FREE_COMPLETED = 2, /* the block is reusable */
  MN_TRACE_SEGMENT_ALLOC = 3,  /* raw device allocation */
  MN_TRACE_SEGMENT_FREE = 4,   /* raw device free */
  MN_TRACE_SEGMENT_MAP = 5,    /* pages mapped into an expandable segment */
  MN_TRACE_SEGMENT_UNMAP = 6,  /* pages unmapped from an expandable segment */
  MN_TRACE_EMPTY_CACHE = 7,
  MN_TRACE_OOM = 8, /* size = requested bytes that could not be had */
  MN_TRACE_ACTION_COUNT = 9
} mn_trace_action;

typedef struct mn_trace_event_s {
  mn_trace_action action;
  uint64_t time_ns; /* CLOCK_MONOTONIC ns (through the TSC where it is invariant: docs/PROFILING.md) */
  mn_device_t device;
  uint64_t stream_id; /* mn_stream_id; 0 when none */
  uintptr_t address;
  size_t size;           /* bytes */
  size_t requested_size; /* bytes; alloc events */
} mn_trace_event_t;

/* Called synchronously, possibly with allocator locks held: it must not call
 * back into the allocator. */
typedef void (*mn_trace_sink_fn)(void *user, const mn_trace_event_t *event);
/* "alloc", "free_requested", ... (PyTorch's trace action names); "invalid". */
MN_API const char *mn_trace_action_name(mn_trace_action action);

/* The layout version of mn_allocator_vtable_t (1: size and version in front). */
#define MN_ALLOCATOR_VTABLE_VERSION 1

/* The slots an allocator implements. Like mn_alloc_stats_t the vtable starts
 * with its own size and version: set .size = sizeof(mn_allocator_vtable_t) and
 * .version = MN_ALLOCATOR_VTABLE_VERSION (MN_ALLOCATOR_VTABLE_HEADER does both).
 * Slots are only ever appended, so a vtable compiled against an older header
 * (a smaller size) stays valid: every slot that lies beyond its `size` is
 * treated as absent, exactly as a NULL optional slot. name, alloc and free are
 * required, so `size` must cover at least MN_ALLOCATOR_VTABLE_MIN_SIZE bytes.
 * mn_allocator_init and mn_allocator_set_default refuse (MN_ERR_INVALID_ARGUMENT,
 * with a message) a vtable whose size is smaller than that, whose version is 0
 * or newer than MN_ALLOCATOR_VTABLE_VERSION, or whose name, alloc or free is
 * NULL; every dispatch below refuses an allocator with such a vtable the same
 * way. A NULL record_stream or empty_cache means "nothing to do". Slots are
 * called only through the mn_allocator_* functions, which validate arguments first. */
typedef struct mn_allocator_vtable_s {
  uint32_t size;    /* sizeof(mn_allocator_vtable_t) as the allocator was compiled */
  uint32_t version; /* MN_ALLOCATOR_VTABLE_VERSION as the allocator was compiled */
  const char *name;
  mn_status (*alloc)(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out);
  mn_status (*free)(mn_allocator_t *self, void *ptr);
  mn_status (*record_stream)(mn_allocator_t *self, void *ptr, mn_stream_t *stream);
  mn_status (*empty_cache)(mn_allocator_t *self);
  /* Optional (NULL: not supported): statistics, peak reset, snapshot, and an
   * invariant check that returns MN_ERR_INTERNAL with a message when broken. */
  mn_status (*get_stats)(mn_allocator_t *self, mn_alloc_stats_t *out);
  mn_status (*reset_peak)(mn_allocator_t *self);
  mn_status (*snapshot)(mn_allocator_t *self, mn_snapshot_t **out);
  mn_status (*check_invariants)(mn_allocator_t *self);
  void (*destroy)(mn_allocator_t *self);
  /* Optional (NULL: unknown): the bytes of the live block at ptr (0 when ptr
   * is not one of this allocator's), for the payload of NVTX free ranges.
   * Added after destroy: a vtable whose size ends at destroy has none. */
  size_t (*size_of)(mn_allocator_t *self, const void *ptr);
  /* New slots go here, after the last one, with a new MN_ALLOCATOR_VTABLE_VERSION. */
} mn_allocator_vtable_t;

/* The smallest valid vtable size: size, version and the required slots (name,
 * alloc, free). */
#define MN_ALLOCATOR_VTABLE_MIN_SIZE \
  (offsetof(mn_allocator_vtable_t, free) + sizeof(((mn_allocator_vtable_t *)0)->free))
/* The first two members of a vtable initializer of this header's layout:
 * static const mn_allocator_vtable_t my_vtable = {MN_ALLOCATOR_VTABLE_HEADER, .name = ...}; */
#define MN_ALLOCATOR_VTABLE_HEADER \
  .size = (uint32_t)sizeof(mn_allocator_vtable_t), .version = MN_ALLOCATOR_VTABLE_VERSION

/* Every allocator struct begins with this header. */
struct mn_allocator_s {
  const mn_allocator_vtable_t *vtable;
  mn_device_t device;
};

/* Fills the header of a user-implemented allocator (a struct that begins with
 * mn_allocator_t) with `vtable` and `device`, after checking the vtable as
 * described above and that the device exists; `a` is untouched on failure.
 * The vtable must outlive the allocator. The allocator is then used through
 * the mn_allocator_* calls, and may be a device's default or an adaptor's upstream. */
MN_API MN_NODISCARD mn_status mn_allocator_init(mn_allocator_t *a, const mn_allocator_vtable_t *vtable,
                                                mn_device_t device);

/* Allocates nbytes (> 0) of device memory usable on `stream` (NULL: the
 * device's default stream). Host allocators (whose device is the CPU, such as
 * the pinned pool) accept a stream of any device, here and in record_stream. nbytes == 0 succeeds with *out = NULL, as
 * PyTorch. *out is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_allocator_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out);
/* Frees memory from this allocator; NULL is a no-op. */
MN_API MN_NODISCARD mn_status mn_allocator_free(mn_allocator_t *a, void *ptr);
/* Marks `ptr` as used by `stream`, so it is not reused before that stream's
 * work queued so far has completed. The allocator holds the stream until the
 * block is freed: mn_stream_destroy on it is MN_ERR_BUSY until then. */
MN_API MN_NODISCARD mn_status mn_allocator_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream);
/* Returns cached, unused memory to the backend. */
MN_API MN_NODISCARD mn_status mn_allocator_empty_cache(mn_allocator_t *a);
/* Statistics (MN_ERR_NOT_SUPPORTED where the allocator keeps none). */
MN_API MN_NODISCARD mn_status mn_allocator_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out);
/* Sets every peak to its current value. */
MN_API MN_NODISCARD mn_status mn_allocator_reset_peak(mn_allocator_t *a);
/* A snapshot the caller frees with mn_snapshot_free. */
MN_API MN_NODISCARD mn_status mn_allocator_snapshot(mn_allocator_t *a, mn_snapshot_t **out);
MN_API void mn_snapshot_free(mn_snapshot_t *snap);
/* MN_OK when the allocator's internal invariants hold (or it has no checker). */
MN_API MN_NODISCARD mn_status mn_allocator_check_invariants(mn_allocator_t *a);
/* Destroys an allocator made by a mn_*_allocator_create call (for a user
 * allocator: calls its destroy slot; nothing when absent or the vtable is invalid). */
MN_API void mn_allocator_destroy(mn_allocator_t *a);
/* The vtable's name; "none" for NULL, "invalid" when the vtable is refused. */
MN_API const char *mn_allocator_name(const mn_allocator_t *a);
MN_API mn_device_t mn_allocator_device(const mn_allocator_t *a);
/* The bytes of the live block at ptr through the size_of slot; 0 when the
 * allocator cannot tell (no slot) or ptr is not one of its blocks. */
MN_API size_t mn_allocator_size_of(mn_allocator_t *a, const void *ptr);

/* The naive allocator: every alloc is a raw backend allocation, every free a
 * raw free; nothing is cached and streams are ignored. It knows its live
 * pointers: freeing any other (twice, interior, foreign) is
 * MN_ERR_INVALID_ARGUMENT and never reaches the backend. */
MN_API MN_NODISCARD mn_status mn_naive_allocator_create(mn_device_t dev, mn_allocator_t **out);

/* The allocator storages use on a device when none is given. Made on first
 * use (the naive allocator until a better default is set); owned by mnemo. */
MN_API MN_NODISCARD mn_status mn_allocator_get_default(mn_device_t dev, mn_allocator_t **out);
/* Replaces the device's default (NULL restores the built-in one). The caller
 * keeps ownership of `a` and must keep it alive while it is the default. */
MN_API MN_NODISCARD mn_status mn_allocator_set_default(mn_device_t dev, mn_allocator_t *a);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_ALLOCATOR_H */
