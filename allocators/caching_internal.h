/* allocators/caching_internal.h: the caching allocator's internal types (blocks, segments,
 * pools, free sets, lanes and their pointer maps). Threading: all of it is guarded by the
 * full lock (mn__caching_lock: the allocator lock and every lane's); a lane's lock alone
 * guards its stream's free sets, segments' blocks, map, spares and counts (mn__lane_t). */
#ifndef MNEMO_ALLOCATORS_CACHING_INTERNAL_H
#define MNEMO_ALLOCATORS_CACHING_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/debug.h"
#include "runtime/hostmem.h"
#include "runtime/lock.h"
#include "runtime/ptrmap.h"
#include "allocators/stat.h"
#include "mnemo/mnemo.h"
#include "mnemo/mempool.h"

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp), in bytes. */
#define MN__MIN_BLOCK ((size_t)512)              /* every size is a multiple of this */
#define MN__SMALL_SIZE ((size_t)1 << 20)         /* largest small-pool request */
#define MN__SMALL_BUFFER ((size_t)2 << 20)       /* small-pool segment (and page) size */
#define MN__LARGE_BUFFER ((size_t)20 << 20)      /* 1-10 MiB requests share 20 MiB segments */
#define MN__MIN_LARGE_ALLOC ((size_t)10 << 20)   /* from here a segment fits its request */
#define MN__ROUND_LARGE ((size_t)2 << 20)        /* large segments round up to this */

/* ---- the free sets (caching_tree.c) --------------------------------------------------
 * A treap with parent pointers keyed by (stream, size, address): O(log n)
 * expected search, O(1) expected removal of a known node and O(1) insertion
 * of a new minimum. The key is copied in at insertion, so a block may change
 * size only while it is out of the set. */
typedef struct mn__key_s {
  uint64_t stream;
  size_t size; /* 0 in the address-ordered (unmapped) sets */
  uintptr_t addr;
} mn__key_t;

static inline int mn__key_cmp(const mn__key_t *a, const mn__key_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
  return 0;
}

typedef struct mn__tnode_s {
  struct mn__tnode_s *left, *right, *parent;
  uint64_t prio;
  mn__key_t key;
} mn__tnode_t;

typedef struct mn__tree_s {
  mn__tnode_t *root, *min; /* min: the leftmost node, kept */
} mn__tree_t;

void mn__tree_insert_slow(mn__tree_t *t, mn__tnode_t *n); /* a walk from the root */
void mn__tree_remove_slow(mn__tree_t *t, mn__tnode_t *n); /* rotations down first */
bool mn__tree_contains(const mn__tree_t *t, const mn__tnode_t *n);
/* Next node in key order, or NULL (through the parent pointers). */
mn__tnode_t *mn__tree_next(const mn__tnode_t *n);

static inline mn__tnode_t *mn__tree_leftmost(mn__tnode_t *x) {
  while (x->left) x = x->left;
  return x;
}

/* Inline: into an empty tree, or a new minimum that needs no rotation (the
 * steady state of a cached alloc/free pair); else the walk. */
static inline void mn__tree_insert(mn__tree_t *t, mn__tnode_t *n, mn__key_t key, uint64_t prio) {
  n->key = key;
  n->prio = prio;
  n->left = n->right = NULL;
  mn__tnode_t *m = t->min;
  if (!m) {
    n->parent = NULL;
    t->root = t->min = n;
  } else if (m->prio >= prio && mn__key_cmp(&key, &m->key) < 0) {
    m->left = n;
    n->parent = m;
    t->min = n;
  } else {
    mn__tree_insert_slow(t, n);
  }
}

/* pre: n is in t. Inline when n has at most one child. */
static inline void mn__tree_remove(mn__tree_t *t, mn__tnode_t *n) {
  MN__ASSERT(n->parent != NULL || t->root == n, "a node removed from a tree it is not in");
  if (n->left && n->right) {
    mn__tree_remove_slow(t, n);
    return;
  }
  mn__tnode_t *c = n->left ? n->left : n->right, *p = n->parent;
  if (t->min == n) t->min = n->right ? mn__tree_leftmost(n->right) : p; /* n->left is NULL */
  if (c) c->parent = p;
  if (!p) t->root = c;
  else if (p->left == n) p->left = c;
  else p->right = c;
  n->left = n->right = n->parent = NULL;
}

/* Size bins: exact below 64 KiB (one per multiple of 512), then 64 per power
 * of two; a bitmap with a summary word finds the next non-empty bin in O(1).
 * Monotonic in size, so bins in order hold the keys in order. */
#define MN__MAX_BINS 3200u /* mn__bin_of(SIZE_MAX) + 1 */
#define MN__BIN_WORDS ((MN__MAX_BINS + 63u) / 64u)
static inline unsigned mn__bin_of(size_t size) {
  size_t u = size >> 9;
  if (u < 128) return (unsigned)u;
  unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)u);
  return 128u + (e - 7u) * 64u + (unsigned)((u >> (e - 6u)) & 63u);
}

/* One stream's part of a pool's free set. It lives while a segment of that
 * stream in that pool does (nsegs), so a block's record is always there.
 * The hot node: the block inserted last, held out of its bin (its key set,
 * its links NULL) while no later insertion displaced it; a member of the set
 * like the others (counted in count, found by lower_bound), so the pair of a
 * free and the allocation that takes the same block back touches no treap
 * and no bitmap. The ordered walks (next, prev, last) put it in its bin first. */
typedef struct mn__sbins_s {
  uint64_t stream;
  size_t nsegs;                    /* segments of this stream in the pool */
  size_t count, nunmapped;         /* free blocks (bins and hot), unmapped ranges */
  mn__tnode_t *hot;                /* the hot node, or NULL */
  /* The stream's free blocks that are whole raw segments (what releasing
   * frees), any order; and its largest free block (0 when none), exact
   * unless largest_dirty (removing the largest marks it; mn__pool_largest_free
   * recomputes). Per stream, so a lane's pairs write nothing pool-wide. */
  struct mn__block_s *whole;
  size_t largest_free;
  bool largest_dirty;
  mn__tree_t unmapped;             /* unmapped expandable ranges by address */
  uint64_t summary;                /* bit w: bits[w] != 0 */
  uint64_t bits[MN__BIN_WORDS];    /* bit b: bins[b] is not empty */
  mn__tree_t bins[];               /* nbins of them, by (size, address) */
} mn__sbins_t;

typedef struct mn__fset_s {
  mn__sbins_t **slots;   /* open addressing by stream id */
  size_t cap, nstreams;
  mn__sbins_t *last;     /* the last one found */
  unsigned nbins;
  uint64_t epoch;        /* bumped when a stream's record is made or freed (lanes refresh theirs) */
} mn__fset_t;

static inline unsigned mn__bin_clamped(const mn__fset_t *fs, size_t size) {
  unsigned b = mn__bin_of(size);
  return b < fs->nbins ? b : fs->nbins - 1; /* the last bin takes every larger size */
}

/* The first non-empty bin >= from, or nbins. */
static inline unsigned mn__first_bin_from(const mn__fset_t *fs, const mn__sbins_t *sb, unsigned from) {
  if (from >= fs->nbins) return fs->nbins;
  unsigned w = from >> 6;
  uint64_t m = sb->bits[w] & (~UINT64_C(0) << (from & 63));
  if (!m) {
    uint64_t s = w + 1 < 64 ? sb->summary & (~UINT64_C(0) << (w + 1)) : 0;
    if (!s) return fs->nbins;
    w = (unsigned)__builtin_ctzll(s);
    m = sb->bits[w];
  }
  return (w << 6) + (unsigned)__builtin_ctzll(m);
}

static inline void mn__bit_set(mn__sbins_t *sb, unsigned b) {
  sb->bits[b >> 6] |= UINT64_C(1) << (b & 63);
  sb->summary |= UINT64_C(1) << (b >> 6);
}

static inline void mn__bit_clear(mn__sbins_t *sb, unsigned b) {
  sb->bits[b >> 6] &= ~(UINT64_C(1) << (b & 63));
  if (!sb->bits[b >> 6]) sb->summary &= ~(UINT64_C(1) << (b >> 6));
}

/* A node's treap priority: a hash of its address (a free block's address is
 * unique in its pool), so runs are reproducible and no state is kept. */
static inline uint64_t mn__fset_prio(uintptr_t addr) {
  uint64_t h = (uint64_t)addr * UINT64_C(0x9E3779B97F4A7C15);
  return h ^ (h >> 31);
}

/* Bins enough for blocks up to max_block bytes (larger ones share the last). */
void mn__fset_init(mn__fset_t *fs, size_t max_block);
void mn__fset_fini(mn__fset_t *fs);
mn__sbins_t *mn__fset_find_slow(mn__fset_t *fs, uint64_t stream);
/* The stream's record, or NULL. */
static inline mn__sbins_t *mn__fset_find(mn__fset_t *fs, uint64_t stream) {
  return fs->last && fs->last->stream == stream ? fs->last : mn__fset_find_slow(fs, stream);
}
/* For a new segment of the stream: its record, made when needed. */
mn_status mn__fset_acquire(mn__fset_t *fs, uint64_t stream, mn__sbins_t **out);
/* When that segment goes: the record goes with the stream's last segment. */
void mn__fset_release(mn__fset_t *fs, mn__sbins_t *sb);

/* n (its key set) into its bin's treap. */
static inline void mn__fset_bin_insert(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n) {
  unsigned b = mn__bin_clamped(fs, n->key.size);
  mn__tree_insert(&sb->bins[b], n, n->key, mn__fset_prio(n->key.addr));
  mn__bit_set(sb, b);
}

/* n becomes the hot node; the one it displaces goes to its bin. */
static inline void mn__fset_insert(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n, size_t size, uintptr_t addr) {
  n->key = (mn__key_t){sb->stream, size, addr};
  n->left = n->right = n->parent = NULL;
  if (sb->hot) mn__fset_bin_insert(fs, sb, sb->hot);
  sb->hot = n;
  sb->count++;
}

/* Puts the hot node in its bin (before an ordered walk). */
static inline void mn__fset_settle(mn__fset_t *fs, mn__sbins_t *sb) {
  if (sb->hot) {
    mn__fset_bin_insert(fs, sb, sb->hot);
    sb->hot = NULL;
  }
}

static inline void mn__fset_remove(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n) {
  sb->count--;
  if (n == sb->hot) {
    sb->hot = NULL;
    return;
  }
  unsigned b = mn__bin_clamped(fs, n->key.size);
  mn__tree_remove(&sb->bins[b], n);
  if (!sb->bins[b].root) mn__bit_clear(sb, b);
}

mn__tnode_t *mn__fset_lower_bound_slow(const mn__fset_t *fs, const mn__sbins_t *sb, size_t size);
/* Best fit: the first block of the stream by (size, address) with size >= size,
 * over the bins and the hot node. Inline when the size's own bin has the bins'
 * answer at its minimum (always so in the exact bins below 64 KiB), or when
 * the hot node has the exact size and the size's exact bin is empty. */
static inline mn__tnode_t *mn__fset_lower_bound(const mn__fset_t *fs, const mn__sbins_t *sb, size_t size) {
  if (!sb || !sb->count) return NULL;
  unsigned b = mn__bin_clamped(fs, size);
  const mn__tnode_t *m = sb->bins[b].min, *h = sb->hot, *t;
  if (m && m->key.size >= size) {
    t = m;
  } else if (h && h->key.size == size && (size >> 9) < 128 && b == (unsigned)(size >> 9)) {
    return (mn__tnode_t *)h; /* an exact bin: no block of the bins has its size */
  } else {
    t = sb->count > (h != NULL) ? mn__fset_lower_bound_slow(fs, sb, size) : NULL;
  }
  if (h && h->key.size >= size && (!t || mn__key_cmp(&h->key, &t->key) < 0)) return (mn__tnode_t *)h;
  return (mn__tnode_t *)t;
}
/* The ordered walks: the hot node is settled in its bin first. */
mn__tnode_t *mn__fset_next(mn__fset_t *fs, mn__sbins_t *sb, const mn__tnode_t *n);
mn__tnode_t *mn__fset_prev(mn__fset_t *fs, mn__sbins_t *sb, const mn__tnode_t *n);
mn__tnode_t *mn__fset_last(mn__fset_t *fs, mn__sbins_t *sb);
bool mn__fset_contains(const mn__fset_t *fs, const mn__sbins_t *sb, const mn__tnode_t *n);
void mn__fset_insert_unmapped(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n, uintptr_t addr);
void mn__fset_remove_unmapped(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n);
mn_status mn__fset_check(const mn__fset_t *fs, char *why, size_t whysize);
/* Free blocks and unmapped ranges over every stream (the streams' counts summed). */
void mn__fset_counts(const mn__fset_t *fs, size_t *free_blocks, size_t *unmapped);

/* ---- blocks, segments, pools ----------------------------------------------- */
typedef struct mn__segment_s mn__segment_t;
typedef struct mn__pool_s mn__pool_t;

typedef enum mn__where { MN__IN_NONE = 0, MN__IN_FREE = 1, MN__IN_UNMAPPED = 2 } mn__where;

typedef struct mn__use_s {
  uint64_t id;
  mn_stream_t *stream;
  /* A block freed during a capture: the marker made on this (capturing)
   * stream at the free, 0 when the stream was not capturing. */
  uint64_t marker;
} mn__use_t;

typedef struct mn__block_s {
  mn__tnode_t node;               /* membership in the pool's free set (bins or unmapped) */
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
  bool deferred;                  /* freed during a capture with stream uses: on a->deferred */
  uint8_t where;                  /* mn__where */
  int event_count;                /* outstanding stream events (pending free) */
  int64_t gc_count_base;          /* pool->get_free_calls when cached */
  uint32_t nuses, cap_uses;
  mn__use_t *uses;                /* record_stream streams other than stream_id, each held
                                   * (runtime/stream_hold.h) until free has recorded its event */
  struct mn__block_s *spare_next; /* link in the spare list */
  /* In its stream's sbins->whole while a free block that is a whole raw
   * segment (what mn__release_cached frees), so releasing walks those only. */
  struct mn__block_s *whole_prev, *whole_next;
  bool in_whole;
  struct mn__share_rec_s *share;  /* its exports to other processes (caching_share.c), or NULL */
} mn__block_t;

struct mn__segment_s {
  uintptr_t base;
  uint64_t pool_id;               /* its pool's mn_mempool_id (0: the allocator's own) */
  /* A memory pool's source, copied (the pool may go while the segment is
   * being freed with the lock dropped); alloc NULL: raw device memory. */
  mn_mempool_source_t src;
  size_t size;                    /* raw segment: its bytes; expandable: the reserved range */
  mn__pool_t *pool;
  uint64_t stream_id;
  bool expandable;
  size_t page;                    /* expandable: bytes per mapped page */
  size_t npages, mapped_pages;
  uint8_t *page_mapped;           /* expandable: one flag per page */
  mn__block_t *head;              /* lowest-address block */
  mn__sbins_t *sb;                /* its stream's part of the pool's free set */
  mn__segment_t *prev_seg, *next_seg;
};

struct mn__pool_s {
  mn__fset_t fs;
  mn_mempool_t *mp;    /* the memory pool this is half of; NULL: the allocator's own */       /* inactive mapped blocks by (stream, size, addr); unmapped ranges by (stream, addr) */
  bool is_small;
  int kind;            /* MN_POOL_SMALL or MN_POOL_LARGE */
  int64_t get_free_calls;
  /* The whole free segments and the largest free block are kept per stream
   * (mn__sbins_t): the OOM message asks for the largest on every failed
   * allocation (mn__pool_largest_free: the streams' maximum). */
};

/* A memory pool (mnemo/mempool.h): its own small and large free sets, its
 * own statistics, never expandable segments (as PyTorch's private pools). */
struct mn_mempool_s {
  struct mn__caching_s *a;
  uint64_t id;
  mn_mempool_source_t src;   /* alloc NULL: raw device memory */
  bool no_split, use_on_oom;
  mn__pool_t small, large;
  mn_alloc_stats_t stats;    /* this pool's part of the allocator's */
  uint32_t users;            /* threads' uses (mn_mempool_use) not yet ended */
  uint32_t captures;         /* captures routed into it */
  uint32_t graphs;           /* live graphs captured into it */
  struct mn_mempool_s *prev, *next; /* the allocator's pools */
};

/* A capture routed into a pool (mn_mempool_capture_begin). */
typedef struct mn__capture_route_s {
  uint64_t capture_id;
  mn_mempool_t *mp;
  struct mn__capture_route_s *next;
} mn__capture_route_t;

/* A registered callback: (fn, user). */
typedef struct mn__callback_s {
  void (*fn)(void);
  void *user;
} mn__callback_t;

/* An outstanding event of a pending-free block. One queue per stream the
 * events were recorded on, in record order: a stream's events complete in
 * that order, so only each queue's head needs asking (as PyTorch's per-stream
 * deques). A queue is its head entry: the heads form a ring (qnext, qprev),
 * the order in which allocations poll them, and keep the tail, so queues cost
 * no allocation. */
typedef struct mn__pending_s {
  mn_event_t *event;
  mn__block_t *block;
  uint64_t stream_id; /* the stream the event was recorded on */
  bool failed;        /* its synchronize failed (synchronize_and_free_events) */
  uint64_t quiet;     /* the device's progress count when a query found it not done (0: none did) */
  struct mn__pending_s *next;  /* the next in this stream's queue (or spare list) */
  struct mn__pending_s *qnext; /* heads only: the next stream's queue in the ring */
  struct mn__pending_s *qprev; /* heads only: the previous one */
  struct mn__pending_s *qtail; /* heads only: this queue's last entry */
} mn__pending_t;

#define MN__FAST_FREE 1u  /* frees: no recorder (events are serialized per allocator) */
#define MN__FAST_ALLOC 2u /* allocations: nor routing, captures, a collector, exports, or a poll to make */

/* A list of spare block records. */
typedef struct mn__spares_s {
  mn__block_t *head;
  size_t n;
} mn__spares_t;

/* ---- lanes (caching_lanes.c) ----------------------------------------------------------
 * One per stream the allocator has served. A stream's cached pairs (best fit,
 * split, merge with free neighbours, within its own segments) run under its
 * lane's lock alone: a segment belongs to one stream, its blocks merge only
 * with each other, and the free sets are per stream, so two threads on their
 * own streams share no lock and write no common cache line. Everything else
 * (new segments, pending frees, record_stream, memory pools and captures, the
 * recorder, statistics read out, empty_cache, the OOM path) holds the full
 * lock: the allocator lock, then every lane's (mn__caching_lock).
 * A lane counts its statistics in deltas, folded into a->stats when the full
 * lock is taken. Peaks stay exact: when the full lock is dropped, each
 * counter's room (peak - current, per pool and for their sum) is dealt out to
 * the lanes, and an operation whose increase would pass its lane's share is
 * left to the full path; so no sum passes a peak unseen. */
/* A lane's counters: on its paths allocation and active move together (its
 * frees complete at once), as do allocated_bytes and active_bytes; so five,
 * each folded into one or two of the statistics' fields (the first keeps
 * `allocated`, the second, when another, does not: see MN__STAT_ADD_ACTIVE). */
#define MN__LANE_FIELDS(X)                                    \
  X(count, allocation, active)                                \
  X(bytes, allocated_bytes, active_bytes)                     \
  X(requested, requested_bytes, requested_bytes)              \
  X(split, inactive_split, inactive_split)                    \
  X(split_bytes, inactive_split_bytes, inactive_split_bytes)
enum {
#define MN__LF_ENUM(lane, first, second) MN__LF_##lane,
  MN__LANE_FIELDS(MN__LF_ENUM)
#undef MN__LF_ENUM
  MN__LF_COUNT,
  /* by the statistics' names */
  MN__LF_allocation = MN__LF_count, MN__LF_active = MN__LF_count,
  MN__LF_allocated_bytes = MN__LF_bytes, MN__LF_active_bytes = MN__LF_bytes,
  MN__LF_requested_bytes = MN__LF_requested,
  MN__LF_inactive_split = MN__LF_split, MN__LF_inactive_split_bytes = MN__LF_split_bytes
};

typedef struct mn__lane_s {
  _Alignas(64) mn__lock_t lock;
  /* Written under the full lock and this lane's lock (a recycled lane takes
   * a new stream), read without a lock by the lookups: atomic. */
  _Atomic uint64_t stream;
  _Atomic(struct mn__lane_s *) next; /* the next live lane (kept by a retired one, so a walk goes on) */
  /* Guarded by the lane lock (and so by the full lock): */
  bool retired;                     /* on a->retired: no stream, no block, nothing in its map */
  mn__sbins_t *sb[2];               /* the stream's part of a->small's / a->large's free set, or NULL */
  mn__addrmap_t live;               /* the stream's allocated blocks by address; data = the block */
  mn__spares_t spares;
  bool dirty;                       /* counted something since the last fold */
  /* Since the fold: how far each counter may still rise (small, large, their
   * sum), out of its dealt room (the change of current is room - left), and
   * what was added to allocated. */
  int64_t left[MN__LF_COUNT][3];
  int64_t room[MN__LF_COUNT][3];
  int64_t add[MN__LF_COUNT][2];
  int64_t need[MN__LF_COUNT][3];    /* at the fold, what the lane had given back (it may want it again) */
  struct mn__lane_s *retired_next;  /* on a->retired (full lock) */
} mn__lane_t;

typedef struct mn__caching_s {
  mn_allocator_t base;
  /* On a cache line of its own: a waiter spinning on it never slows the
   * holder's stores to the fields around it. */
  _Alignas(64) mn__lock_t lock;
  _Alignas(64) mn_caching_config_t cfg;
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
  /* The lanes, newest first (published for the lock-free lookups; changed
   * under the full lock only), how many, and the free sets' epochs when the
   * lanes' sb were last set. */
  _Atomic(mn__lane_t *) lanes;
  size_t nlanes;
  /* Lanes whose stream held no segment and no block any more: kept (a
   * lookup may still hold one; it finds it retired and takes the full path)
   * and given to the next new stream, so streams made and dropped by the
   * thousand cost no lane each. */
  mn__lane_t *retired;
  uint64_t lanes_epoch;
  uint64_t gen;             /* unique per allocator made: the threads' cached lane names it */
  /* What the lanes may do now (MN__FAST_*): set when the full lock is
   * dropped (every lane's lock held), read under a lane's lock, and ahead of
   * it (relaxed) to skip a lane that would only hand over to the full path.
   * fast_quiet: while frees are pending, the device's progress count at the
   * last poll that retired nothing; a lane allocates only while the device
   * still shows it (the poll PyTorch makes at every allocation would retire
   * nothing then either). 0: no pending frees. */
  _Atomic unsigned fast;
  uint64_t fast_quiet;
  mn__pending_t *queues;    /* the ring of per-stream pending queues, at the next one to poll */
  mn__addrmap_t qmap;       /* stream id + 1 -> its queue's head (count: queues in the ring); room kept for every
                             * stream use not yet freed (nuses_total), so appends cannot fail */
  size_t nuses_total;       /* stream uses (record_stream) held by blocks, summed */
  uint32_t poll_wait;       /* allocations left before the next poll of the ring */
  uint64_t poll_quiet;      /* the device's progress count (runtime/device_internal.h) when a poll of
                             * every queue retired nothing, 0 once a queue grew since: while it is
                             * unchanged, the next such poll would retire nothing either (kept only
                             * when every query of the poll answered) */
  bool query_failed;        /* a query of the current poll failed (counts as not done) */
  uint32_t poll_every;      /* the polls' interval in allocations: 1, doubled by each poll
                             * that retires nothing (up to MN__POLL_EVERY_MAX) */
  size_t npending;          /* entries in them */
  size_t pending_waited;    /* events taken off the list while a synchronize waits on them */
  mn__pending_t *spare_pending;
  mn_event_t **events;      /* the event pool */
  size_t nevents, cap_events;
  mn__spares_t spares;      /* the full path's spare block records */
  size_t reserved;          /* bytes held from the device (PyTorch's total_allocated_memory) */
  size_t inflight;          /* bytes being raw-allocated while the lock is dropped */
  uint64_t exp_epoch;       /* bumped whenever an expandable block is handed out or freed */
  mn_alloc_stats_t stats;
  mn_oom_observer_fn oom_fn;
  void *oom_user;
  mn_trace_sink_fn sink;
  void *sink_user;
  bool sink_concurrent;     /* the sink may be called by several lanes at once (runtime/events.h) */
  /* Peers (bit p: device p of this type) that every mapped page of the
   * expandable segments is granted to (mn_caching_allocator_enable_peer_access). */
  uint64_t peers;
  /* ---- memory pools and routing (caching_mempool.c) ---- */
  mn_mempool_t *mempools;   /* every pool of this allocator */
  size_t nmempools;
  /* Uses and captures under way: while 0, allocations skip routing (one test). */
  uint32_t nroutes;
  mn__capture_route_t *routes;
  uint32_t ncaptures;       /* captures under way: no event queries, records or releases */
  /* Blocks freed in a capture with stream uses: cached once the capture ends
   * (or, with markers, once their stream joined the uses), linked by spare_next. */
  mn__block_t *deferred;
  /* ---- callbacks (caching_mempool.c): the lists under cb_lock (held for
   * reading while callbacks run, so a removed one is never called after) ---- */
  pthread_rwlock_t cb_lock;
  mn__callback_t *seg_cbs, *mem_cbs;
  size_t nseg_cbs, nmem_cbs;
  bool any_mem_cbs;          /* nmem_cbs > 0, read under the allocator lock */
  _Atomic bool has_seg_cbs;  /* seg_cbs non-empty: segment events are queued */
  mn_segment_info_t *cbq;   /* segment events waiting to be told (lock held to add/take) */
  size_t ncbq, cap_cbq;
  _Atomic bool cbq_nonempty;
  struct mn__share_state_s *share; /* sharing with other processes (caching_share.c): NULL until a first export */
} mn__caching_t;

/* A list of segments taken out of the allocator, to free with the lock dropped. */
typedef struct mn__release_s {
  mn__segment_t *raw; /* raw segments to mn_device_raw_free, linked by next_seg */
  mn__segment_t *va;  /* expandable segments with no mapped page, to va_release */
} mn__release_t;

/* ---- caching_config.c --------------------------------------------------------- */
mn_status mn__caching_config_validate(const char *func, const mn_caching_config_t *c);
size_t mn__roundup_power2_next_division(size_t size, size_t divisions);
/* PyTorch's round_size; inline (every allocation asks). pre: size <= the device total. */
static inline size_t mn__round_size(const mn_caching_config_t *c, size_t size) {
  if (size < MN__MIN_BLOCK) return MN__MIN_BLOCK;
  size_t divisions = c->roundup_power2_divisions[63u - (unsigned)__builtin_clzll((unsigned long long)size)];
  if (divisions > 1 && size > MN__MIN_BLOCK * divisions) return mn__roundup_power2_next_division(size, divisions);
  return MN__MIN_BLOCK * ((size + MN__MIN_BLOCK - 1) / MN__MIN_BLOCK);
}
/* PyTorch's get_allocation_size: the segment for a rounded request. */
static inline size_t mn__allocation_size(size_t size) {
  if (size <= MN__SMALL_SIZE) return MN__SMALL_BUFFER;
  if (size < MN__MIN_LARGE_ALLOC) return MN__LARGE_BUFFER;
  return MN__ROUND_LARGE * ((size + MN__ROUND_LARGE - 1) / MN__ROUND_LARGE);
}
/* "20.00 MiB", as PyTorch's format_size. */
const char *mn__format_size(size_t bytes, char *buf, size_t bufsize);

/* ---- caching.c ------------------------------------------------------------------ */

/* Whether the garbage collector runs (its clock, get_free_calls, ticks at every allocation). */
static inline bool mn__gc_enabled(const mn__caching_t *a) { return a->cfg.garbage_collection_threshold > 0.0; }

/* For mn_sim_configure, through the default-allocator table (defaults.c).
 * Release: empties the cache (segments, pending frees, pooled events), then
 * MN_ERR_INVALID_STATE naming the device if anything is still held; another
 * allocator only gets mn_allocator_empty_cache (refresh leaves it alone). Refresh: re-reads the device's properties
 * (size, granularity, VMM, default stream) into an allocator that holds nothing. */
mn_status mn__caching_release_device(mn_allocator_t *al, const char *func);
mn_status mn__caching_refresh_device(mn_allocator_t *al, const char *func);

/* Adds `amount` to the named counter of pool `kind` (small or large). The
 * ALL pool keeps only its peak here: its current and allocated are the sums
 * of the two pools' (mn__stat_all_current; filled in by mn__stats_copy), and
 * its peak is raised from that sum on each increase, as a kept current would.
 * No counter's `freed` is kept: with no reset of the accumulated counts,
 * freed = allocated - current, filled in by mn__stats_copy. Nor are active's
 * and active_bytes' allocated: they grow with allocation's and
 * allocated_bytes' (each allocation adds the same to both). */
#define mn__stat_all_current(st, field) ((st)->field[MN_POOL_SMALL].current + (st)->field[MN_POOL_LARGE].current)
static inline void mn__stat_all_peak(mn_stat_t *all, int64_t current) {
  if (current > all->peak) all->peak = current;
}
#define MN__STAT_ADD_TO(st, field, kind, amount)                                   \
  do {                                                                             \
    mn__stat_inc(&(st)->field[(kind)], (amount));                                  \
    mn__stat_all_peak(&(st)->field[MN_POOL_ALL], mn__stat_all_current(st, field)); \
  } while (0)
/* The same for active and active_bytes at an allocation: current and peak. */
#define MN__STAT_ADD_ACTIVE(st, field, kind, amount)                               \
  do {                                                                             \
    mn_stat_t *s_ = &(st)->field[(kind)];                                          \
    s_->current += (amount);                                                       \
    if (s_->current > s_->peak) s_->peak = s_->current;                            \
    mn__stat_all_peak(&(st)->field[MN_POOL_ALL], mn__stat_all_current(st, field)); \
  } while (0)
#define MN__STAT_SUB_FROM(st, field, kind, amount) ((st)->field[(kind)].current -= (amount))
/* The memory pool's statistics of a free-set half, or NULL (the allocator's own). */
#define MN__POOL_STATS(pool) ((pool)->mp ? &(pool)->mp->stats : NULL)
/* The hot paths: the allocator's counter, then the pool's when ps (from
 * MN__POOL_STATS, in a register) is not NULL. */
#define MN__STAT2_ADD(a, ps, field, kind, amount)                                   \
  do {                                                                               \
    MN__STAT_ADD_TO(&(a)->stats, field, kind, (amount));                             \
    if (__builtin_expect((ps) != NULL, 0)) MN__STAT_ADD_TO((ps), field, kind, (amount)); \
  } while (0)
#define MN__STAT2_SUB(a, ps, field, kind, amount)                                    \
  do {                                                                                \
    MN__STAT_SUB_FROM(&(a)->stats, field, kind, (amount));                            \
    if (__builtin_expect((ps) != NULL, 0)) MN__STAT_SUB_FROM((ps), field, kind, (amount)); \
  } while (0)
/* The allocator's counter, and the memory pool's when `pool` is one's. */
#define MN__STAT_ADD(a, field, pool, amount)                                                       \
  do {                                                                                             \
    MN__STAT_ADD_TO(&(a)->stats, field, (pool)->kind, (amount));                                  \
    if (__builtin_expect((pool)->mp != NULL, 0)) MN__STAT_ADD_TO(&(pool)->mp->stats, field, (pool)->kind, (amount)); \
  } while (0)
#define MN__STAT_SUB(a, field, pool, amount)                                                        \
  do {                                                                                              \
    MN__STAT_SUB_FROM(&(a)->stats, field, (pool)->kind, (amount));                                 \
    if (__builtin_expect((pool)->mp != NULL, 0)) MN__STAT_SUB_FROM(&(pool)->mp->stats, field, (pool)->kind, (amount)); \
  } while (0)
/* The statistics as users see them (ALL's allocated and freed summed); pre: lock held. */
void mn__caching_stats_copy(const mn__caching_t *a, mn_alloc_stats_t *out);
/* The same for any kept statistics (a memory pool's). */
void mn__stats_copy(const mn_alloc_stats_t *kept, mn_alloc_stats_t *out);
void mn__trace_emit(mn__caching_t *a, mn_trace_action action, uint64_t stream, uintptr_t addr, size_t size,
                    size_t requested);
/* An allocator event to the sink, when one is set (the check inline). */
static inline void mn__trace(mn__caching_t *a, mn_trace_action action, uint64_t stream, uintptr_t addr, size_t size,
                             size_t requested) {
  if (a->sink) mn__trace_emit(a, action, stream, addr, size, requested);
}
/* MNEMO_DEBUG >= 1: asserts the allocator lock is held (a precondition of
 * most functions here). trylock cannot tell which thread holds it; it catches
 * a call made with the lock not held at all. */
#if MNEMO_DEBUG >= 1
static inline bool mn__caching_lock_held(mn__caching_t *a) {
  if (!mn__trylock(&a->lock)) return true;
  mn__unlock(&a->lock);
  return false;
}
#define MN__ASSERT_LOCKED(a) MN__ASSERT(mn__caching_lock_held(a), "called without the allocator lock")
#else
#define MN__ASSERT_LOCKED(a) ((void)0)
#endif

/* Zeroed host memory on whole cache lines of its own, for the records a
 * lane writes on its pairs (blocks, segments, free sets): two lanes never
 * write one line through neighbouring records. NULL: out of host memory. */
static inline size_t mn__lines_of(size_t n) { return (n + 63) / 64 * 64; }
static inline void *mn__zero_lines(void *p, size_t n) {
  if (p) memset(p, 0, mn__lines_of(n));
  return p;
}
#define mn__calloc_lines(n) mn__zero_lines(mn__aligned_alloc(64, mn__lines_of(n)), (n))

/* Spare block records: reserve first (may fail), then take (never fails).
 * The allocator keeps a list for the full path, each lane one for its own. */
/* The full path's: taken from the lanes' lists first (pre: full lock). */
mn_status mn__spare_reserve_slow(mn__caching_t *a, size_t n);
static inline mn_status mn__spare_reserve(mn__caching_t *a, size_t n) {
  return a->spares.n >= n ? MN_OK : mn__spare_reserve_slow(a, n);
}
/* A spare block record, not zeroed (the caller sets every field). */
static inline mn__block_t *mn__spares_take(mn__spares_t *sp) {
  MN__ASSERT(sp->head != NULL && sp->n > 0, "a block taken without one reserved (reserve first)");
  mn__block_t *b = sp->head;
  sp->head = b->spare_next;
  sp->n--;
  return b;
}
static inline mn__block_t *mn__block_take_raw(mn__caching_t *a) { return mn__spares_take(&a->spares); }
/* Fills a record from mn__block_take_raw as `(mn__block_t){.addr, .size,
 * .stream_id, .pool, .seg, .prev, .next, .mapped = true}` would, field by
 * field (the free-set node left as it was: an active block is in no set). */
static inline void mn__block_init_active(mn__block_t *b, uintptr_t addr, size_t size, uint64_t stream,
                                         mn__pool_t *pool, mn__segment_t *seg, mn__block_t *prev,
                                         mn__block_t *next) {
  b->addr = addr;
  b->size = size;
  b->requested = 0;
  b->stream_id = stream;
  b->pool = pool;
  b->seg = seg;
  b->prev = prev;
  b->next = next;
  b->allocated = b->freeing = b->deferred = b->in_whole = false;
  b->mapped = true;
  b->where = MN__IN_NONE;
  b->event_count = 0;
  b->gc_count_base = 0;
  b->nuses = b->cap_uses = 0;
  b->uses = NULL;
  b->spare_next = b->whole_prev = b->whole_next = NULL;
  b->share = NULL;
}
/* A spare block record, zeroed. */
static inline mn__block_t *mn__block_take(mn__caching_t *a) {
  mn__block_t *b = mn__block_take_raw(a);
  memset(b, 0, sizeof *b);
  return b;
}
#define MN__SPARE_BLOCKS_MAX 1024
static inline void mn__spares_put(mn__spares_t *sp, mn__block_t *b, size_t max) {
  free(b->uses);
  if (sp->n >= max) {
    free(b);
    return;
  }
  b->uses = NULL;
  b->spare_next = sp->head;
  sp->head = b;
  sp->n++;
}
static inline void mn__block_put(mn__caching_t *a, mn__block_t *b) { mn__spares_put(&a->spares, b, MN__SPARE_BLOCKS_MAX); }
/* Moves up to n records from src to dst (records pass between the lanes and the full path). */
static inline void mn__spares_move(mn__spares_t *dst, mn__spares_t *src, size_t n) {
  for (; n > 0 && src->head; n--) {
    mn__block_t *b = src->head;
    src->head = b->spare_next;
    src->n--;
    b->spare_next = dst->head;
    dst->head = b;
    dst->n++;
  }
}
/* Frees every record of the list. */
void mn__spares_free(mn__spares_t *sp);
/* The largest block in p's free set, over its streams (a stream's recomputed,
 * walking a's segments, when its largest was removed since the last ask). */
size_t mn__pool_largest_free(const mn__caching_t *a, mn__pool_t *p);
static inline bool mn__block_is_split(const mn__block_t *b) { return b->prev != NULL || b->next != NULL; }
void mn__segment_link(mn__caching_t *a, mn__segment_t *s);
void mn__segment_unlink(mn__caching_t *a, mn__segment_t *s);

static inline bool mn__block_inactive(const mn__block_t *b) {
  return !b->allocated && b->event_count == 0 && b->nuses == 0 && !b->share;
}
static inline bool mn__whole_raw_segment(const mn__block_t *b) { return !b->seg->expandable && !mn__block_is_split(b); }

/* b onto / off its stream's list of whole free segments. */
static inline void mn__whole_push(mn__sbins_t *sb, mn__block_t *b) {
  b->whole_prev = NULL;
  b->whole_next = sb->whole;
  if (sb->whole) sb->whole->whole_prev = b;
  sb->whole = b;
  b->in_whole = true;
}
static inline void mn__whole_unlink(mn__sbins_t *sb, mn__block_t *b) {
  if (b->whole_prev) b->whole_prev->whole_next = b->whole_next;
  else sb->whole = b->whole_next;
  if (b->whole_next) b->whole_next->whole_prev = b->whole_prev;
  b->whole_prev = b->whole_next = NULL;
  b->in_whole = false;
}
/* A free block of `size` joined sb / one of `size` left it. */
static inline void mn__largest_grow(mn__sbins_t *sb, size_t size) {
  if (!sb->largest_dirty && size > sb->largest_free) sb->largest_free = size;
}
static inline void mn__largest_shrink(mn__sbins_t *sb, size_t size) {
  if (size >= sb->largest_free) sb->largest_dirty = true;
}

static inline void mn__pool_insert(mn__pool_t *p, mn__block_t *b) {
  mn__sbins_t *sb = b->seg->sb;
  if (b->mapped) {
    mn__fset_insert(&p->fs, sb, &b->node, b->size, b->addr);
    b->where = MN__IN_FREE;
    b->gc_count_base = p->get_free_calls;
    mn__largest_grow(sb, b->size);
    if (mn__whole_raw_segment(b)) mn__whole_push(sb, b); /* a free block is never split or merged in place */
  } else {
    mn__fset_insert_unmapped(&p->fs, sb, &b->node, b->addr);
    b->where = MN__IN_UNMAPPED;
  }
}

static inline void mn__pool_remove(mn__pool_t *p, mn__block_t *b) {
  mn__sbins_t *sb = b->seg->sb;
  if (b->where == MN__IN_FREE) {
    mn__fset_remove(&p->fs, sb, &b->node);
    mn__largest_shrink(sb, b->size);
  } else if (b->where == MN__IN_UNMAPPED) {
    mn__fset_remove_unmapped(&p->fs, sb, &b->node);
  }
  if (b->in_whole) mn__whole_unlink(sb, b);
  b->where = MN__IN_NONE;
}

/* dst, a neighbour of src in their segment, takes src's place in the
 * segment's address list (and its start address when src comes first); the
 * sizes are the caller's. */
static inline void mn__block_unlink_into(mn__block_t *dst, const mn__block_t *src) {
  if (dst->prev == src) {
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    else dst->seg->head = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
}

/* Merges src into dst when src is an inactive block of the same mapping;
 * returns the bytes absorbed (0: no merge). src is freed. */
static inline size_t mn__try_merge(mn__caching_t *a, mn__block_t *dst, mn__block_t *src) {
  if (!src || !mn__block_inactive(src) || dst->mapped != src->mapped) return 0;
  mn__pool_remove(src->pool, src);
  mn__block_unlink_into(dst, src);
  size_t absorbed = src->size;
  dst->size += absorbed;
  mn__block_put(a, src);
  return absorbed;
}

/* Whether freeing b merges its neighbour x into it: x is cached (in a free
 * set), inactive and in the same mapping. */
static inline bool mn__absorbs(const mn__block_t *b, const mn__block_t *x) {
  return x && x->where != MN__IN_NONE && mn__block_inactive(x) && x->mapped == b->mapped;
}

/* What freeing b merges (PyTorch's free_block): each neighbour mn__absorbs
 * takes (absorb[0] the previous one, absorb[1] the next, else NULL), and the
 * net change the merges and b make to the inactive split blocks and their
 * bytes (b counts, with the bytes it absorbs, when it is still split once
 * merged). Changes nothing: the lanes check their room against it first. */
typedef struct mn__free_plan_s {
  mn__block_t *absorb[2];
  int64_t net_blocks, net_bytes;
} mn__free_plan_t;
static inline mn__free_plan_t mn__free_plan(const mn__block_t *b) {
  mn__free_plan_t f = {{NULL, NULL}, 0, 0};
  mn__block_t *nb[2] = {b->prev, b->next};
  int64_t size = (int64_t)b->size;
  for (int i = 0; i < 2; i++) {
    mn__block_t *x = nb[i];
    if (!mn__absorbs(b, x)) continue;
    f.absorb[i] = x;
    f.net_blocks--;
    f.net_bytes -= (int64_t)x->size;
    size += (int64_t)x->size;
  }
  if ((f.absorb[0] ? f.absorb[0]->prev : b->prev) || (f.absorb[1] ? f.absorb[1]->next : b->next)) {
    f.net_blocks++;
    f.net_bytes += size;
  }
  return f;
}
/* The plan's merges: b takes each absorbed neighbour's place in the free set
 * and the segment, and its bytes; the neighbours' records go to sp (at most
 * max kept). */
static inline void mn__free_merge(mn__block_t *b, const mn__free_plan_t *f, mn__spares_t *sp, size_t max) {
  for (int i = 0; i < 2; i++) {
    mn__block_t *x = f->absorb[i];
    if (!x) continue;
    mn__pool_remove(x->pool, x);
    mn__block_unlink_into(b, x);
    b->size += x->size;
    mn__spares_put(sp, x, max);
  }
}

/* ---- caching_release.c: pending frees and releasing memory -------------------------------- */
void mn__event_put(mn__caching_t *a, mn_event_t *e);
/* An event from the pool and a pending entry for it, the event recorded on
 * `stream`; false (nothing taken) when either cannot be had or the record
 * fails. The entry is not filled in or queued. */
bool mn__use_event_record(mn__caching_t *a, mn_stream_t *stream, mn_event_t **event, mn__pending_t **entry);
void mn__pending_put(mn__caching_t *a, mn__pending_t *p);
/* Appends p to its stream's queue (a new queue joins the ring just before
 * the next one to poll): O(1). pre: p's use is still counted in nuses_total
 * (the map's room for a new queue). */
void mn__pending_append(mn__caching_t *a, mn__pending_t *p);
/* Takes every queue out, as one list linked by next (queue after queue). */
mn__pending_t *mn__pending_detach_all(mn__caching_t *a);
/* PyTorch's free_block: merge with free neighbours, cache, update the counters. */
void mn__free_block(mn__caching_t *a, mn__block_t *b);
/* While at most this many streams hold pending frees, every allocation polls
 * them all (PyTorch's process_events, exactly). */
#define MN__POLL_ALL_MAX 16u
/* Beyond, the longest interval, in allocations, between two polls. */
#define MN__POLL_EVERY_MAX 64u
/* An allocation's poll. With at most MN__POLL_ALL_MAX streams in the ring:
 * all of them, and the next allocation polls again. With more: the next
 * stream of the ring (one event query when nothing completed), its completed
 * events retired, the ring turned by one; the next poll comes with the next
 * allocation when this one retired an event, else after twice as many
 * allocations as this one waited (at most MN__POLL_EVERY_MAX). */
void mn__poll_events_slow(mn__caching_t *a);
/* Retires the completed events of every stream (PyTorch's process_events):
 * O(streams with pending events). Whether any event was retired. */
bool mn__process_events_all(mn__caching_t *a);
/* ---- caching_share.c: blocks shared with other processes -----------------------------
 * A freed block whose importers still hold it is parked: active, pending free
 * (as a block waiting for events), retried with the pending events, by
 * empty_cache and before an OOM; released, it goes through mn__free_block. */
/* From mn__free_block: true when b is still held by importers (then parked). */
bool mn__share_park(mn__caching_t *a, mn__block_t *b);
/* Frees the parked blocks that no importer holds any more (no lock on any of
 * their exports' reference files: closed, or died): every allocation checks a
 * few exports (one system call each, round robin), `deep` (empty_cache, the
 * out-of-memory path) all of them. */
void mn__share_retry(mn__caching_t *a, bool deep);
/* The allocator's destroy: marks every export released and drops its records. */
void mn__share_destroy(mn__caching_t *a);
/* Whether b is freed but parked for its importers. */
static inline bool mn__block_parked(const mn__block_t *b) { return b->share && !b->allocated && !b->event_count; }
/* Whether al is a caching allocator (caching.c). */
bool mn__is_caching(const mn_allocator_t *al);
/* ---- end of the sharing hooks ---- */

/* An allocation's share of retiring completed events, without blocking
 * (nothing pending, or not its turn: inline): every stream's while few hold
 * pending frees, else at most one stream's, in turn, so the work per
 * allocation does not grow with the streams. The allocation that misses the
 * cache retires every stream's (mn__process_events_all) before it asks the
 * device for memory. */
static inline void mn__process_events(mn__caching_t *a) {
  if (a->queues && a->poll_wait-- == 0) mn__poll_events_slow(a);
  if (__builtin_expect(a->share != NULL, 0)) mn__share_retry(a, false);
}
/* Gives rel's segments back to the device, lock dropped meanwhile. */
mn_status mn__do_release(mn__caching_t *a, mn__release_t *rel);
bool mn__release_available(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size, mn__release_t *rel);
/* Waits for all pending frees, then releases every whole cached segment and
 * free page: of memory pool `only` when given, else of the allocator's own
 * pools (as PyTorch, a live pool keeps its cache until its own empty_cache).
 * Nothing while a capture is under way (freeing would break it). */
mn_status mn__release_cached(mn__caching_t *a, mn_mempool_t *only);
void mn__garbage_collect(mn__caching_t *a);

/* ---- caching_lanes.c ---- */
/* The full lock: the allocator lock, then every lane's (in list order), the
 * lanes' counts folded into a->stats. Unlock deals out the peaks' room, sets
 * the lanes' free-set pointers and a->fast, then drops them all. */
void mn__caching_lock(mn__caching_t *a);
void mn__caching_unlock(mn__caching_t *a);
/* The lane of a stream (hint when it is that lane, else looked up), made
 * (held, as the full lock holds every lane) when there is none; with room
 * for one more live block. pre: full lock. */
mn_status mn__lane_reserve(mn__caching_t *a, uint64_t stream, mn__lane_t *hint, mn__lane_t **out);
/* The live block at addr and its lane's map entry, or NULL. pre: full lock. */
mn__addrmap_entry_t *mn__live_find(const mn__caching_t *a, uintptr_t addr, mn__lane_t **lane);
/* Live blocks over every lane. pre: full lock. */
size_t mn__live_count(const mn__caching_t *a);
/* The lanes' own invariants (counts folded, free-set pointers current, live
 * blocks on their lane's stream). pre: full lock. */
mn_status mn__lanes_check(const mn__caching_t *a, char *why, size_t whysize);
/* Frees the spare block records (the allocator's and every lane's). pre: full lock. */
void mn__lanes_trim(mn__caching_t *a);
/* The allocator's destroy: frees the lanes. */
void mn__lanes_free(mn__caching_t *a);

/* a as a caching allocator (made by mn_caching_allocator_create), else
 * MN_ERR_INVALID_ARGUMENT naming func (caching.c). */
mn_status mn__caching_checked(const char *func, mn_allocator_t *a, mn__caching_t **out);

/* ---- caching_mempool.c: memory pools, routing, callbacks ------------------------------ */
/* The pool this allocation goes to (a capture's, else the thread's current
 * pool), or NULL. pre: lock held, a->nroutes > 0. */
mn_mempool_t *mn__mempool_route(mn__caching_t *a, mn_stream_t *stream);
/* The half of mp (NULL: the allocator's own pools) for a rounded size. */
static inline mn__pool_t *mn__pool_for(mn__caching_t *a, mn_mempool_t *mp, size_t size) {
  if (__builtin_expect(mp != NULL, 0)) return size <= MN__SMALL_SIZE ? &mp->small : &mp->large;
  return size <= MN__SMALL_SIZE ? &a->small : &a->large;
}
/* Queues a segment event for the callbacks (told by mn__callbacks_flush,
 * outside the lock). pre: lock held. */
void mn__segment_event_queue(mn__caching_t *a, mn_segment_event ev, uintptr_t addr, size_t size, uint64_t pool_id,
                             uint64_t stream);
static inline void mn__segment_event(mn__caching_t *a, mn_segment_event ev, uintptr_t addr, size_t size,
                                     uint64_t pool_id, uint64_t stream) {
  if (atomic_load_explicit(&a->has_seg_cbs, memory_order_relaxed))
    mn__segment_event_queue(a, ev, addr, size, pool_id, stream);
}
/* Tells the callbacks the queued segment events. pre: lock NOT held. */
void mn__callbacks_flush_slow(mn__caching_t *a);
static inline void mn__callbacks_flush(mn__caching_t *a) {
  if (atomic_load_explicit(&a->cbq_nonempty, memory_order_acquire)) mn__callbacks_flush_slow(a);
}
/* Asks the free-memory callbacks; true when one freed something. pre: lock NOT held. */
bool mn__free_memory_callbacks(mn__caching_t *a, size_t requested);
/* A use_on_oom pool's cached block for the request (removed from its free
 * set), its half in *pool; NULL when none fits. pre: lock held. */
mn__block_t *mn__mempool_oom_block(mn__caching_t *a, uint64_t stream, size_t size, mn__pool_t **pool);
/* The free of a block with stream uses while a capture is under way: no
 * event can be recorded, so the block waits on a->deferred (reusable in the
 * capture once its stream joined every use, else when the captures end).
 * pre: lock held, a->ncaptures > 0, b->nuses > 0, live is b's entry in lane's map; unlocks. */
mn_status mn__free_deferred(mn__caching_t *a, mn__block_t *b, mn__lane_t *lane, mn__addrmap_entry_t *live);
/* Takes a block out of the allocated counts (caching.c). */
void mn__unallocate(mn__caching_t *a, mn__block_t *b);
/* Frees every memory pool's record (allocator destroy; segments already gone). */
void mn__mempools_free_all(mn__caching_t *a);
/* Best fit in `pool` for (stream, size) under the oversize rules, removed from
 * the free set; NULL when none (caching.c). pre: lock held. */
mn__block_t *mn__get_free_block(mn__caching_t *a, mn__pool_t *pool, uint64_t stream, size_t size);

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
/* The segments of pool `pool_id` (with `filter`; else all of them). */
mn_status mn__caching_snapshot_of(mn__caching_t *a, uint64_t pool_id, bool filter, mn_snapshot_t **out);
mn_status mn__caching_check_invariants(mn_allocator_t *self);
/* The OOM message, PyTorch's wording adapted; pre: lock held. */
void mn__caching_oom_message(mn__caching_t *a, size_t requested, size_t rounded, size_t alloc_size,
                             char *buf, size_t bufsize);

/* The allocated block at `addr`, or NULL. pre: lock held. */
static inline mn__block_t *mn__live_block(const mn__caching_t *a, uintptr_t addr) {
  MN__ASSERT_LOCKED((mn__caching_t *)a);
  mn__lane_t *lane;
  mn__addrmap_entry_t *e = mn__live_find(a, addr, &lane);
  return e ? (mn__block_t *)e->data : NULL;
}

#endif /* MNEMO_ALLOCATORS_CACHING_INTERNAL_H */
