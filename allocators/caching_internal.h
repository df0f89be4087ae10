/* allocators/caching_internal.h: the caching allocator's internal types (blocks, segments,
 * pools, free sets, pointer map). Threading: all of it is guarded by mn__caching_t.lock. */
#ifndef MNEMO_ALLOCATORS_CACHING_INTERNAL_H
#define MNEMO_ALLOCATORS_CACHING_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/debug.h"
#include "runtime/ptrmap.h"
#include "allocators/stat.h"
#include "mnemo/mnemo.h"

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp), in bytes. */
#define MN__MIN_BLOCK ((size_t)512)              /* every size is a multiple of this */
#define MN__SMALL_SIZE ((size_t)1 << 20)         /* largest small-pool request */
#define MN__SMALL_BUFFER ((size_t)2 << 20)       /* small-pool segment (and page) size */
#define MN__LARGE_BUFFER ((size_t)20 << 20)      /* 1-10 MiB requests share 20 MiB segments */
#define MN__MIN_LARGE_ALLOC ((size_t)10 << 20)   /* from here a segment fits its request */
#define MN__ROUND_LARGE ((size_t)2 << 20)        /* large segments round up to this */

/* ---- the ordered set: an intrusive treap keyed by (stream, size, address) ----
 * Iterative split/merge, O(log n) expected per operation. The key is copied in
 * at insertion, so a block may change size only while it is out of the set. */
typedef struct mn__key_s {
  uint64_t stream;
  size_t size; /* 0 in the address-ordered (unmapped) sets */
  uintptr_t addr;
} mn__key_t;

typedef struct mn__tnode_s {
  struct mn__tnode_s *left, *right;
  uint64_t prio;
  mn__key_t key;
} mn__tnode_t;

typedef struct mn__tree_s {
  mn__tnode_t *root;
  size_t count;
  uint64_t rng;
} mn__tree_t;

int mn__key_cmp(const mn__key_t *a, const mn__key_t *b);
void mn__tree_init(mn__tree_t *t, uint64_t seed);
void mn__tree_insert(mn__tree_t *t, mn__tnode_t *n, mn__key_t key);
/* Removes n (found by its key); false when n is not in the set. */
bool mn__tree_remove(mn__tree_t *t, mn__tnode_t *n);
bool mn__tree_contains(const mn__tree_t *t, const mn__tnode_t *n);
/* First node whose key >= k (lower_bound), or NULL. */
mn__tnode_t *mn__tree_lower_bound(const mn__tree_t *t, const mn__key_t *k);
/* Next / previous node in key order, or NULL. */
mn__tnode_t *mn__tree_next(const mn__tree_t *t, const mn__tnode_t *n);
mn__tnode_t *mn__tree_prev(const mn__tree_t *t, const mn__tnode_t *n);
mn__tnode_t *mn__tree_first(const mn__tree_t *t);
/* Checks order, heap property and count; writes why on failure. */
mn_status mn__tree_check(const mn__tree_t *t, char *why, size_t whysize);


/* ---- blocks, segments, pools ----------------------------------------------- */
typedef struct mn__segment_s mn__segment_t;
typedef struct mn__pool_s mn__pool_t;

typedef enum mn__where { MN__IN_NONE = 0, MN__IN_FREE = 1, MN__IN_UNMAPPED = 2 } mn__where;

typedef struct mn__use_s {
  uint64_t id;
  mn_stream_t *stream;
} mn__use_t;

typedef struct mn__block_s {
  mn__tnode_t node;               /* membership in pool->free or pool->unmapped */
  uintptr_t addr;
  size_t size;                    /* bytes */
  size_t requested;               /* bytes the caller asked for (active blocks) */
  uint64_t stream_id;             /* the allocating stream */
  mn__pool_t *pool;
  mn__segment_t *seg;
  struct mn__block_s *prev, *next; /* address neighbours inside the segment */
  bool allocated;                 /* handed out and not freed */
  bool freeing;                   /* allocated, out of the pointer map while free() waits */
  bool mapped;                    /* false: unmapped pages of an expandable segment */
  uint8_t where;                  /* mn__where */
  int event_count;                /* outstanding stream events (pending free) */
  int64_t gc_count_base;          /* pool->get_free_calls when cached */
  uint32_t nuses, cap_uses;
  mn__use_t *uses;                /* record_stream streams other than stream_id, each held
                                   * (runtime/stream_hold.h) until free has recorded its event */
  struct mn__block_s *spare_next; /* link in the spare list */
  /* In pool->whole while a free block that is a whole raw segment (what
   * mn__release_cached frees), so releasing walks those only. */
  struct mn__block_s *whole_prev, *whole_next;
  bool in_whole;
} mn__block_t;

struct mn__segment_s {
  uintptr_t base;
  size_t size;                    /* raw segment: its bytes; expandable: the reserved range */
  mn__pool_t *pool;
  uint64_t stream_id;
  bool expandable;
  size_t page;                    /* expandable: bytes per mapped page */
  size_t npages, mapped_pages;
  uint8_t *page_mapped;           /* expandable: one flag per page */
  mn__block_t *head;              /* lowest-address block */
  mn__segment_t *prev_seg, *next_seg;
};

struct mn__pool_s {
  mn__tree_t free;     /* inactive mapped blocks by (stream, size, addr) */
  mn__tree_t unmapped; /* unmapped expandable ranges by (stream, addr) */
  bool is_small;
  int kind;            /* MN_POOL_SMALL or MN_POOL_LARGE */
  int64_t get_free_calls;
  mn__block_t *whole;  /* the free blocks that are whole raw segments, any order */
  /* The largest block in `free` (0 when empty), exact unless largest_dirty:
   * the OOM message asks for it on every failed allocation, so it is kept
   * instead of walking every block each time; removing the largest marks it
   * dirty and the next ask recomputes it (mn__pool_largest_free). */
  size_t largest_free;
  bool largest_dirty;
};

/* An outstanding event of a pending-free block; one list in record order. */
typedef struct mn__pending_s {
  mn_event_t *event;
  mn__block_t *block;
  uint64_t stream_id; /* the stream the event was recorded on */
  bool failed;        /* its synchronize failed (synchronize_and_free_events) */
  struct mn__pending_s *next;
} mn__pending_t;

typedef struct mn__caching_s {
  mn_allocator_t base;
  pthread_mutex_t lock;
  mn_caching_config_t cfg;
  bool expandable;          /* cfg.expandable_segments and the device supports VMM */
  size_t total_memory;      /* device bytes */
  uint64_t default_stream;  /* id of the device's default stream (alloc with stream NULL) */
  size_t granularity;       /* device allocation granularity */
  bool set_fraction;        /* per_process_memory_fraction < 1 */
  size_t allowed_max;       /* fraction * total */
  mn__pool_t small, large;
  mn__segment_t *segments;  /* every segment, unordered */
  size_t nsegments;
  size_t exp_segments;      /* how many of them are expandable */
  mn__addrmap_t live;       /* allocated blocks by address; data = the block */
  mn__pending_t *pending_head, *pending_tail;
  size_t pending_waited;    /* events taken off the list while a synchronize waits on them */
  mn__pending_t *spare_pending;
  mn_event_t **events;      /* the event pool */
  size_t nevents, cap_events;
  mn__block_t *spare_blocks;
  size_t nspare;
  size_t reserved;          /* bytes held from the device (PyTorch's total_allocated_memory) */
  size_t inflight;          /* bytes being raw-allocated while the lock is dropped */
  uint64_t exp_epoch;       /* bumped whenever an expandable block is handed out or freed */
  mn_alloc_stats_t stats;
  mn_oom_observer_fn oom_fn;
  void *oom_user;
  mn_trace_sink_fn sink;
  void *sink_user;
} mn__caching_t;

/* A list of segments taken out of the allocator, to free with the lock dropped. */
typedef struct mn__release_s {
  mn__segment_t *raw; /* raw segments to mn_device_raw_free, linked by next_seg */
  mn__segment_t *va;  /* expandable segments with no mapped page, to va_release */
} mn__release_t;

/* ---- caching_config.c --------------------------------------------------------- */
mn_status mn__caching_config_validate(const char *func, const mn_caching_config_t *c);
size_t mn__round_size(const mn_caching_config_t *c, size_t size);
size_t mn__roundup_power2_next_division(size_t size, size_t divisions);
size_t mn__allocation_size(size_t size);
/* "20.00 MiB", as PyTorch's format_size. */
const char *mn__format_size(size_t bytes, char *buf, size_t bufsize);

/* ---- caching.c ------------------------------------------------------------------ */

/* For mn_sim_configure, through the default-allocator table (allocator.c).
 * Release: empties the cache (segments, pending frees, pooled events), then
 * MN_ERR_INVALID_STATE naming the device if anything is still held; another
 * allocator only gets mn_allocator_empty_cache (refresh leaves it alone). Refresh: re-reads the device's properties
 * (size, granularity, VMM, default stream) into an allocator that holds nothing. */
mn_status mn__caching_release_device(mn_allocator_t *al, const char *func);
mn_status mn__caching_refresh_device(mn_allocator_t *al, const char *func);

/* Adds `amount` to the named counter of the ALL pool and of pool `kind`. */
#define MN__STAT_ADD(a, field, kind, amount)                  \
  do {                                                        \
    mn__stat_inc(&(a)->stats.field[MN_POOL_ALL], (amount));   \
    mn__stat_inc(&(a)->stats.field[(kind)], (amount));        \
  } while (0)
#define MN__STAT_SUB(a, field, kind, amount)                  \
  do {                                                        \
    mn__stat_dec(&(a)->stats.field[MN_POOL_ALL], (amount));   \
    mn__stat_dec(&(a)->stats.field[(kind)], (amount));        \
  } while (0)
void mn__trace(mn__caching_t *a, mn_trace_action action, uint64_t stream, uintptr_t addr, size_t size,
               size_t requested);
/* MNEMO_DEBUG >= 1: asserts the allocator lock is held (a precondition of
 * most functions here). trylock cannot tell which thread holds it; it catches
 * a call made with the lock not held at all. */
#if MNEMO_DEBUG >= 1
static inline bool mn__caching_lock_held(mn__caching_t *a) {
  if (pthread_mutex_trylock(&a->lock) != 0) return true;
  pthread_mutex_unlock(&a->lock);
  return false;
}
#define MN__ASSERT_LOCKED(a) MN__ASSERT(mn__caching_lock_held(a), "called without the allocator lock")
#else
#define MN__ASSERT_LOCKED(a) ((void)0)
#endif

/* Spare block structs: reserve first (may fail), then take (never fails). */
mn_status mn__spare_reserve(mn__caching_t *a, size_t n);
mn__block_t *mn__block_take(mn__caching_t *a);
void mn__block_put(mn__caching_t *a, mn__block_t *b);
void mn__pool_insert(mn__pool_t *p, mn__block_t *b);
void mn__pool_remove(mn__pool_t *p, mn__block_t *b);
/* The largest block in p's free set (recomputed, walking a's segments, when
 * the largest was removed since the last ask). */
size_t mn__pool_largest_free(const mn__caching_t *a, mn__pool_t *p);
/* Merges src into dst when src is an inactive block of the same mapping;
 * returns the bytes absorbed (0: no merge). src is freed. */
size_t mn__try_merge(mn__caching_t *a, mn__block_t *dst, mn__block_t *src);
bool mn__block_is_split(const mn__block_t *b);
void mn__segment_link(mn__caching_t *a, mn__segment_t *s);
void mn__segment_unlink(mn__caching_t *a, mn__segment_t *s);

bool mn__block_inactive(const mn__block_t *b);
bool mn__whole_raw_segment(const mn__block_t *b);

/* ---- caching_release.c: pending frees and releasing memory -------------------------------- */
mn_event_t *mn__event_get(mn__caching_t *a);
void mn__event_put(mn__caching_t *a, mn_event_t *e);
mn__pending_t *mn__pending_take(mn__caching_t *a);
void mn__pending_put(mn__caching_t *a, mn__pending_t *p);
void mn__pending_append(mn__caching_t *a, mn__pending_t *p);
/* PyTorch's free_block: merge with free neighbours, cache, update the counters. */
void mn__free_block(mn__caching_t *a, mn__block_t *b);
/* Retires completed events without blocking. */
void mn__process_events(mn__caching_t *a);
/* Takes a whole unused raw segment out of the books, onto rel. */
void mn__release_block(mn__caching_t *a, mn__block_t *b, mn__release_t *rel);
/* Gives rel's segments back to the device, lock dropped meanwhile. */
mn_status mn__do_release(mn__caching_t *a, mn__release_t *rel);
bool mn__release_available(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size, mn__release_t *rel);
/* Waits for all pending frees, then releases every whole cached segment and free page. */
mn_status mn__release_cached(mn__caching_t *a);
void mn__garbage_collect(mn__caching_t *a);

/* ---- caching_expandable.c --------------------------------------------------- */
/* Maps pages so that a block of `size` bytes is available on `stream` in `pool`;
 * returns it out of the free set, or NULL (*st says why: out of memory or other;
 * *no_va when no address range could be reserved for a new segment). */
mn__block_t *mn__expandable_alloc(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size,
                                  mn_status *st, bool *no_va);
/* Whether any inactive block of an expandable segment covers a whole page. */
bool mn__expandable_has_unmappable(mn__caching_t *a);
/* With unmap_pages (the device was synchronized by the caller), unmaps every
 * whole page of inactive expandable blocks; then moves segments left with
 * nothing mapped to rel->va. */
void mn__expandable_unmap_free(mn__caching_t *a, mn__release_t *rel, bool unmap_pages);
/* Frees an expandable segment's bookkeeping after its range was released. */
void mn__expandable_segment_free(mn__caching_t *a, mn__segment_t *s);

/* ---- caching_inspect.c ----------------------------------------------------------- */
mn_status mn__caching_get_stats(mn_allocator_t *self, mn_alloc_stats_t *out);
mn_status mn__caching_reset_peak(mn_allocator_t *self);
mn_status mn__caching_snapshot(mn_allocator_t *self, mn_snapshot_t **out);
mn_status mn__caching_check_invariants(mn_allocator_t *self);
/* The OOM message, PyTorch's wording adapted; pre: lock held. */
void mn__caching_oom_message(mn__caching_t *a, size_t requested, size_t rounded, size_t alloc_size,
                             char *buf, size_t bufsize);

/* The allocated block at `addr`, or NULL. pre: lock held. */
static inline mn__block_t *mn__live_block(const mn__caching_t *a, uintptr_t addr) {
  mn__addrmap_entry_t *e = mn__addrmap_find(&a->live, addr);
  return e ? (mn__block_t *)e->data : NULL;
}

#endif /* MNEMO_ALLOCATORS_CACHING_INTERNAL_H */
