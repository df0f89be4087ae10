/* mnemo/mempool.h: memory pools of a caching allocator (torch.cuda.MemPool),
 * routing of allocations into them (per thread, or by stream while a graph is
 * captured), and the allocator's segment and free-memory callbacks.
 * Threading: every call is thread-safe; the "current pool" is per thread. */
#ifndef MNEMO_MEMPOOL_H
#define MNEMO_MEMPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/allocator.h"
#include "mnemo/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_mempool_s mn_mempool_t;

/* Where a pool's segments come from. NULL source: the device's raw
 * allocation (mn_device_raw_alloc / raw_free). alloc returns nbytes of device
 * memory of `dev` (or an error status, MN_ERR_OUT_OF_MEMORY when there is
 * none); free gets the pointer and size alloc returned, after the allocator
 * synchronized the device. Called with no mnemo lock held. */
typedef struct mn_mempool_source_s {
  mn_status (*alloc)(void *user, mn_device_t dev, size_t nbytes, void **out);
  mn_status (*free)(void *user, mn_device_t dev, void *ptr, size_t nbytes);
  void *user;
} mn_mempool_source_t;

typedef struct mn_mempool_options_s {
  const mn_mempool_source_t *source; /* copied; NULL: raw device memory */
  /* Blocks are never split: an allocation takes a cached block less than
   * max_non_split_rounding larger, or a segment of its own (the rounded
   * request rounded up to the device's granularity), so that every buffer
   * is a segment (e.g. one NCCL registration each). */
  bool no_split;
  /* When an allocation outside any pool runs out of memory, it may take a
   * cached block of this pool before failing (PyTorch's use_on_oom). */
  bool use_on_oom;
} mn_mempool_options_t;

/* A new, empty pool of caching allocator `a` (made by
 * mn_caching_allocator_create; others: MN_ERR_NOT_SUPPORTED). Its blocks never move to another pool, and it uses
 * plain segments only (never expandable ones, as PyTorch's private pools).
 * As PyTorch, the allocator's empty_cache and out-of-memory retries leave a
 * pool's cache alone: mn_mempool_empty_cache (or destroy) gives it back.
 * Destroying the allocator frees its pools too (their handles die with it);
 * destroy graphs captured into its pools before it. opts NULL: defaults. */
MN_API MN_NODISCARD mn_status mn_mempool_create(mn_allocator_t *a, const mn_mempool_options_t *opts,
                                                mn_mempool_t **out);
/* Destroys an empty pool: its cache is given back first. MN_ERR_BUSY (the
 * pool untouched) while it has live or pending-free blocks, is some thread's
 * current pool, is being captured into, or a graph holds it. NULL: no-op. */
MN_API MN_NODISCARD mn_status mn_mempool_destroy(mn_mempool_t *pool);
/* > 0, unique in the process; the default pool (no pool) is 0. Snapshots name
 * a segment's pool with it (mn_snapshot_segment_t.pool_id). */
MN_API uint64_t mn_mempool_id(const mn_mempool_t *pool);
MN_API mn_allocator_t *mn_mempool_allocator(const mn_mempool_t *pool);

/* Makes `pool` the calling thread's current pool for its allocator: this
 * thread's allocations from that allocator come from the pool until the
 * matching unuse. Nestable (a stack per thread and allocator). A thread
 * must end its uses before it exits (a use left open keeps the pool busy). */
MN_API MN_NODISCARD mn_status mn_mempool_use(mn_mempool_t *pool);
/* Ends the innermost use; MN_ERR_INVALID_STATE when `pool` is not this
 * thread's innermost current pool. */
MN_API MN_NODISCARD mn_status mn_mempool_unuse(mn_mempool_t *pool);

/* The pool's own statistics and segments (MN_POOL_ALL/SMALL/LARGE as the
 * allocator's; the allocator's statistics include the pool's). */
MN_API MN_NODISCARD mn_status mn_mempool_get_stats(mn_mempool_t *pool, mn_alloc_stats_t *out);
MN_API MN_NODISCARD mn_status mn_mempool_snapshot(mn_mempool_t *pool, mn_snapshot_t **out);
/* Gives the pool's unused cached segments back (waits for the allocator's
 * pending frees first). MN_ERR_BUSY while a capture into it is under way or
 * a graph captured into it lives (its replays write to that memory). */
MN_API MN_NODISCARD mn_status mn_mempool_empty_cache(mn_mempool_t *pool);

/* ---- stream capture into a pool (CUDA graphs' private pools) -------------------
 * Begins capturing `stream` (mn_stream_begin_capture) and routes every
 * allocation made on a stream of that capture (any thread) to `pool`, before
 * any thread's current pool. While a capture is under way the allocator
 * neither queries nor records events nor releases memory: a block freed in
 * the capture with record_stream uses is reused in the capture once its
 * allocating stream has joined every use stream after the free, else after
 * the capture ends. */
MN_API MN_NODISCARD mn_status mn_mempool_capture_begin(mn_mempool_t *pool, mn_stream_t *stream);
/* Ends the capture; *out = the graph, which holds the pool: the pool cannot
 * be destroyed while a graph captured into it lives, and when the last one is
 * destroyed the pool's unused cached segments go back to the device. On an
 * invalidated capture the routing ends too, and the error is returned; an end
 * the runtime refuses with the capture still going (`stream` only joined it)
 * keeps the routing. `stream` not capturing into `pool`: INVALID_ARGUMENT. */
MN_API MN_NODISCARD mn_status mn_mempool_capture_end(mn_mempool_t *pool, mn_stream_t *stream, mn_graph_t **out);

/* ---- callbacks ---------------------------------------------------------------- */
typedef enum mn_segment_event {
  MN_SEGMENT_ALLOC = 0, /* a segment was allocated (before any block of it is handed out) */
  MN_SEGMENT_FREE = 1,  /* a segment is about to be freed (nothing of it is allocated) */
  MN_SEGMENT_MAP = 2,   /* pages mapped into an expandable segment: [address, address + size) */
  MN_SEGMENT_UNMAP = 3  /* pages were unmapped from one (told after, as PyTorch's trace) */
} mn_segment_event;

typedef struct mn_segment_info_s {
  mn_segment_event event;
  mn_device_t device;
  uintptr_t address;
  size_t size;      /* bytes */
  uint64_t pool_id; /* mn_mempool_id; 0: the allocator's own pools */
  uint64_t stream_id;
} mn_segment_info_t;

/* Called outside the allocator's lock, on a thread that allocated or freed
 * (ALLOC and MAP before the allocation that caused them returns; FREE before
 * the memory goes); it may call the allocator, but not add or remove
 * callbacks. Destroying the allocator tells nothing. */
typedef void (*mn_segment_callback_fn)(void *user, const mn_segment_info_t *info);
/* Asked, outside the lock, to free memory when an allocation ran out of
 * device memory (after the oversize blocks were released, before the whole
 * cache is); returns true when it freed something: the allocation then looks
 * in the cache and tries the device again. */
typedef bool (*mn_free_memory_fn)(void *user, mn_device_t dev, size_t requested);

/* Registers (fn, user) on caching allocator `a`; the pair again is
 * MN_ERR_INVALID_ARGUMENT. Remove takes the same pair (unknown: INVALID_ARGUMENT). */
MN_API MN_NODISCARD mn_status mn_caching_allocator_add_segment_callback(mn_allocator_t *a, mn_segment_callback_fn fn,
                                                                        void *user);
MN_API MN_NODISCARD mn_status mn_caching_allocator_remove_segment_callback(mn_allocator_t *a, mn_segment_callback_fn fn,
                                                                           void *user);
MN_API MN_NODISCARD mn_status mn_caching_allocator_add_free_memory_callback(mn_allocator_t *a, mn_free_memory_fn fn,
                                                                            void *user);
MN_API MN_NODISCARD mn_status mn_caching_allocator_remove_free_memory_callback(mn_allocator_t *a, mn_free_memory_fn fn,
                                                                               void *user);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_MEMPOOL_H */
