/* allocators/caching.c: the caching device allocator (PyTorch's malloc/free/empty_cache rules).
 * Threading: a stream's cached pairs under its lane's lock alone (caching_lanes.c); the rest
 * under the full lock (the allocator lock and every lane's), dropped around raw alloc/free
 * and every synchronize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "allocators/allocator_internal.h"
#include "runtime/clock.h"
#include "runtime/device_internal.h"
#include "runtime/debug.h"
#include "runtime/events.h"
#include "runtime/hostmem.h"
#include "runtime/nvtx.h"
#include "runtime/error.h"
#include "runtime/stream_hold.h"


static const mn_allocator_vtable_t caching_vtable;

static mn__caching_t *as_caching(mn_allocator_t *self) { return (mn__caching_t *)self; }
static void lock(mn__caching_t *a) { mn__caching_lock(a); }
static void unlock(mn__caching_t *a) { mn__caching_unlock(a); }

/* ---- small helpers shared with the other caching files ----------------------------- */

void mn__trace_emit(mn__caching_t *a, mn_trace_action action, uint64_t stream, uintptr_t addr, size_t size,
                    size_t requested) {
  mn_trace_event_t ev = {.action = action,
                         .time_ns = mn__clock_ns(),
                         .device = a->base.device,
                         .stream_id = stream,
                         .address = addr,
                         .size = size,
                         .requested_size = requested};
  a->sink(a->sink_user, &ev);
}

size_t mn__pool_largest_free(const mn__caching_t *a, mn__pool_t *p) {
  size_t largest = 0;
  for (size_t i = 0; i < p->fs.cap; i++) {
    mn__sbins_t *sb = p->fs.slots[i];
    if (!sb) continue;
    if (sb->largest_dirty) {
      size_t l = 0;
      for (const mn__segment_t *s = a->segments; s; s = s->next_seg)
        if (s->sb == sb)
          for (const mn__block_t *b = s->head; b; b = b->next)
            if (b->where == MN__IN_FREE && b->size > l) l = b->size;
      sb->largest_free = l;
      sb->largest_dirty = false;
    }
    if (sb->largest_free > largest) largest = sb->largest_free;
  }
  return largest;
}


void mn__segment_link(mn__caching_t *a, mn__segment_t *s) {
  s->prev_seg = NULL;
  s->next_seg = a->segments;
  if (a->segments) a->segments->prev_seg = s;
  a->segments = s;
  a->nsegments++;
}

void mn__segment_unlink(mn__caching_t *a, mn__segment_t *s) {
  if (s->prev_seg) s->prev_seg->next_seg = s->next_seg;
  else a->segments = s->next_seg;
  if (s->next_seg) s->next_seg->prev_seg = s->prev_seg;
  s->prev_seg = s->next_seg = NULL;
  a->nsegments--;
}

/* ---- the malloc path ------------------------------------------------------------------ */

/* The lane this thread used last, kept per thread: a thread that stays on its
 * stream finds its lane without a walk. Its address is taken once per call
 * (in a shared library each thread-local access may be a call). */
typedef struct lane_hint_s {
  uint64_t gen; /* 0: none (an allocator's address may be reused, its generation never is) */
  uint64_t stream;
  mn__lane_t *lane;
} lane_hint_t;
static _Thread_local lane_hint_t t_lane;
static _Atomic uint64_t g_gen;
#define LANE_SPARES_MAX MN__SPARE_BLOCKS_MAX /* block records a lane keeps for its splits */

/* The lane this thread used last on a, or NULL. */
static inline mn__lane_t *hint_lane(const mn__caching_t *a) {
  const lane_hint_t *h = &t_lane;
  return h->gen == a->gen ? h->lane : NULL;
}

typedef struct params_s {
  uint64_t stream;
  size_t size;       /* rounded request */
  size_t alloc_size; /* segment size for a new segment */
  mn__pool_t *pool;
  mn_status err;
} params_t;


static size_t expandable_size(const mn__block_t *b) {
  return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* mn__pool_remove, its common case (a mapped block not on the list of whole segments) inline. */
static inline __attribute__((always_inline)) void take_out(mn__pool_t *pool, mn__block_t *b) {
  if (__builtin_expect(b->where == MN__IN_FREE && !b->in_whole, 1)) {
    mn__sbins_t *sb = b->seg->sb;
    mn__fset_remove(&pool->fs, sb, &b->node);
    mn__largest_shrink(sb, b->size);
    b->where = MN__IN_NONE;
  } else {
    mn__pool_remove(pool, b);
  }
}

/* PyTorch's get_free_block: best fit on the same stream, with the oversize rules. */
/* inpool: pool may be a memory pool's (a constant false on the hot path, so its test folds away).
 * keep_hot: a block that is its stream's hot node is left in the free set
 * (alloc_found_block takes it out, or splits it in place). */
static inline __attribute__((always_inline)) mn__block_t *get_free_block_in(mn__caching_t *a, mn__pool_t *pool,
                                                                            uint64_t stream, size_t size,
                                                                            bool inpool, bool keep_hot) {
  if (mn__gc_enabled(a)) pool->get_free_calls++;
  mn__sbins_t *sb = mn__fset_find(&pool->fs, stream);
  mn__tnode_t *n = mn__fset_lower_bound(&pool->fs, sb, size);
  if (!n) return NULL;
  if (((mn__block_t *)n)->seg->expandable) {
    /* Best fit counts the unmapped room after an expandable block as its size. */
    mn__tnode_t *next = mn__fset_next(&pool->fs, sb, n);
    while (((mn__block_t *)n)->seg->expandable && next &&
           expandable_size((mn__block_t *)next) < expandable_size((mn__block_t *)n)) {
      n = next;
      next = mn__fset_next(&pool->fs, sb, next);
    }
  }
  mn__block_t *b = (mn__block_t *)n;
  size_t max_split = a->cfg.max_split_size;
  if (size < max_split && b->size >= max_split) return NULL;
  if ((size >= max_split || (inpool && pool->mp && pool->mp->no_split)) &&
      b->size - size >= a->cfg.max_non_split_rounding)
    return NULL;
  if (keep_hot && sb->hot == n) return b;
  take_out(pool, b);
  return b;
}

mn__block_t *mn__get_free_block(mn__caching_t *a, mn__pool_t *pool, uint64_t stream, size_t size) {
  MN__ASSERT_LOCKED(a);
  return get_free_block_in(a, pool, stream, size, true, false);
}

static mn__block_t *get_free_block(mn__caching_t *a, params_t *p) {
  return get_free_block_in(a, p->pool, p->stream, p->size, p->pool->mp != NULL, false);
}

/* A new segment (or mapped pages); pre: lock held, dropped around the raw allocation. */
static mn__block_t *alloc_block(mn__caching_t *a, params_t *p, bool is_retry) {
  MN__ASSERT_LOCKED(a);
  size_t size = p->alloc_size;
  if (is_retry) a->stats.num_alloc_retries++;
  size_t used = a->reserved + a->inflight;
  if (a->set_fraction && (used > a->allowed_max || size > a->allowed_max - used)) {
    p->err = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "%zu bytes would pass the memory fraction cap of %zu",
                       size, a->allowed_max);
    return NULL;
  }
  mn_mempool_t *mp = p->pool->mp;
  if (a->expandable && !mp) { /* memory pools use plain segments, as PyTorch's private pools */
    bool no_va = false;
    mn__block_t *b = mn__expandable_alloc(a, p->stream, p->pool, p->size, &p->err, &no_va);
    if (b || !no_va) return b;
    /* The address space is exhausted (SIM has 4x its capacity; ranges of 1 1/8
     * of the device per stream can pass that): fall back to a plain segment. */
  }
  mn__segment_t *s = mn__calloc_lines(sizeof *s);
  mn__block_t *b = mn__calloc_lines(sizeof *b);
  mn__sbins_t *sb = NULL;
  if (!s || !b || mn__fset_acquire(&p->pool->fs, p->stream, &sb) != MN_OK) {
    free(s);
    free(b);
    p->err = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a segment record");
    return NULL;
  }
  void *ptr = NULL;
  /* the pool cannot go meanwhile (it is in use or captured into), but copy anyway */
  mn_mempool_source_t src = mp ? mp->src : (mn_mempool_source_t){0};
  a->inflight += size;
  unlock(a);
  mn_status st;
  if (src.alloc) {
    st = src.alloc(src.user, a->base.device, size, &ptr);
    if (st == MN_OK && (!ptr || (uintptr_t)ptr % MN__MIN_BLOCK)) {
      /* unusable: give it back (its error is not the one to report) */
      if (ptr) mn__ignore(src.free(src.user, a->base.device, ptr, size));
      st = mn__error(MN_ERR_INVALID_ARGUMENT, "caching_alloc",
                     "memory pool %llu: its source returned %p for %zu bytes (NULL or not 512-byte aligned)",
                     (unsigned long long)mp->id, ptr, size);
    } else if (st != MN_OK && st != MN_ERR_OUT_OF_MEMORY) {
      st = mn__error_wrap(st, "caching_alloc");
    }
  } else {
    st = mn_device_raw_alloc(a->base.device, size, &ptr);
  }
  lock(a);
  a->inflight -= size;
  if (st != MN_OK) {
    mn__fset_release(&p->pool->fs, sb);
    free(s);
    free(b);
    p->err = st;
    return NULL;
  }
  a->reserved += size;
  *s = (mn__segment_t){.base = (uintptr_t)ptr, .size = size, .pool = p->pool, .stream_id = p->stream, .head = b,
                       .sb = sb, .pool_id = mp ? mp->id : 0, .src = src};
  mn__segment_link(a, s);
  *b = (mn__block_t){.addr = (uintptr_t)ptr, .size = size, .stream_id = p->stream, .pool = p->pool, .seg = s,
                     .mapped = true};
  MN__STAT_ADD(a, segment, p->pool, 1);
  MN__STAT_ADD(a, reserved_bytes, p->pool, (int64_t)size);
  if (size >= a->cfg.max_split_size) mn__stat_inc(&a->stats.oversize_segments, 1);
  a->stats.num_device_alloc++;
  mn__trace(a, MN_TRACE_SEGMENT_ALLOC, p->stream, s->base, size, 0);
  mn__segment_event(a, MN_SEGMENT_ALLOC, s->base, size, s->pool_id, p->stream);
  p->err = MN_OK;
  return b;
}

static inline bool should_split(const mn__caching_t *a, const mn__block_t *b, size_t size, bool inpool) {
  if (inpool && b->pool->mp && b->pool->mp->no_split) return false;
  size_t remaining = b->size - size;
  if (b->pool->is_small || a->expandable) return remaining >= MN__MIN_BLOCK;
  return size < a->cfg.max_split_size && remaining > MN__SMALL_SIZE;
}

/* A counter change on a lane's path: into the lane's deltas (its room was
 * checked before anything changed). */
static inline void lane_inc(mn__lane_t *l, int f, int kind, int64_t amount) {
  l->left[f][kind - 1] -= amount;
  l->left[f][2] -= amount;
  l->add[f][kind - 1] += amount;
}
static inline void lane_dec(mn__lane_t *l, int f, int kind, int64_t amount) {
  l->left[f][kind - 1] += amount;
  l->left[f][2] += amount;
}
/* Whether the lane may raise counter f of pool `kind` by amount (and the sum of both pools). */
static inline bool lane_fits(const mn__lane_t *l, int f, int kind, int64_t amount) {
  return amount <= l->left[f][kind - 1] && amount <= l->left[f][2];
}
/* An operation's counter change: to the lane when on its path (fast, a
 * constant at every call, so the test folds away), else to the allocator's
 * statistics and the memory pool's (ps). */
#define MN__CSTAT_ADD(fast, field, amount)                                             \
  do {                                                                                 \
    if (fast) lane_inc((fast), MN__LF_##field, kind, (int64_t)(amount));               \
    else MN__STAT2_ADD(a, ps, field, kind, (int64_t)(amount));                         \
  } while (0)
#define MN__CSTAT_SUB(fast, field, amount)                                             \
  do {                                                                                 \
    if (fast) lane_dec((fast), MN__LF_##field, kind, (int64_t)(amount));               \
    else MN__STAT2_SUB(a, ps, field, kind, (int64_t)(amount));                         \
  } while (0)

/* PyTorch's alloc_found_block; pre: a spare block and a slot in lane's
 * pointer map reserved. inpool: the block may be a memory pool's (constant
 * false on the hot path). fast: the lane whose path this is (its lock held,
 * the counters' room checked, its own spares), or NULL under the full lock.
 * b may still be in the free set as its stream's hot node (get_free_block_in's
 * keep_hot): split, the remainder stays there, its key changed in place (what
 * taking it out and putting it back would do, without the two); else it is
 * taken out first. */
static inline __attribute__((always_inline)) mn__block_t *alloc_found_block(mn__caching_t *a, mn__lane_t *lane,
                                                                            mn__lane_t *fast, mn__block_t *b,
                                                                            const params_t *p, size_t requested,
                                                                            bool inpool) {
  if (!fast) {
    MN__ASSERT_LOCKED(a);
    MN__ASSERT(a->spares.n >= 1, "no spare block reserved before alloc_found_block");
  }
  bool already_split = mn__block_is_split(b), expandable = b->seg->expandable;
  mn_alloc_stats_t *ps = inpool ? MN__POOL_STATS(p->pool) : NULL;
  int kind = p->pool->kind;
  bool in_set = b->where != MN__IN_NONE;
  if (should_split(a, b, p->size, inpool)) {
    mn__block_t *rest = b;
    b = mn__spares_take(fast ? &fast->spares : &a->spares);
    mn__block_init_active(b, rest->addr, p->size, p->stream, p->pool, rest->seg, rest->prev, rest);
    if (b->prev) b->prev->next = b;
    else b->seg->head = b;
    rest->prev = b;
    if (in_set) { /* mn__pool_remove and mn__pool_insert of the hot node, in place */
      mn__pool_t *pool = rest->pool;
      mn__sbins_t *sb = rest->seg->sb;
      mn__largest_shrink(sb, rest->size); /* it shrinks */
      if (rest->in_whole) mn__whole_unlink(sb, rest); /* split now: off the list of whole segments */
      rest->addr += p->size;
      rest->size -= p->size;
      rest->node.key.addr = rest->addr;
      rest->node.key.size = rest->size;
      rest->gc_count_base = pool->get_free_calls;
    } else {
      rest->addr += p->size;
      rest->size -= p->size;
      mn__pool_insert(p->pool, rest);
    }
    if (!expandable && already_split) {
      MN__CSTAT_SUB(fast, inactive_split_bytes, b->size);
    } else if (!expandable) {
      MN__CSTAT_ADD(fast, inactive_split_bytes, rest->size);
      MN__CSTAT_ADD(fast, inactive_split, 1);
    }
  } else {
    if (in_set) take_out(b->pool, b);
    if (already_split && !expandable) {
      MN__CSTAT_SUB(fast, inactive_split_bytes, b->size);
      MN__CSTAT_SUB(fast, inactive_split, 1);
    }
  }
  b->allocated = true;
  b->requested = requested;
  mn__addrmap_put(&lane->live, b->addr, 0, b);
  mn__trace(a, MN_TRACE_ALLOC, b->stream_id, b->addr, b->size, requested);
  if (fast) {
    lane_inc(fast, MN__LF_count, kind, 1);
    lane_inc(fast, MN__LF_bytes, kind, (int64_t)b->size);
    lane_inc(fast, MN__LF_requested, kind, (int64_t)requested);
    fast->dirty = true;
    return b; /* no oversize or expandable block on a lane's path */
  }
  /* one test of ps for the five, not five */
#define MN__FOUND_STATS(st)                                          \
  do {                                                               \
    MN__STAT_ADD_TO(st, allocation, kind, 1);                         \
    MN__STAT_ADD_TO(st, allocated_bytes, kind, (int64_t)b->size);     \
    MN__STAT_ADD_ACTIVE(st, active, kind, 1);                         \
    MN__STAT_ADD_ACTIVE(st, active_bytes, kind, (int64_t)b->size);    \
    MN__STAT_ADD_TO(st, requested_bytes, kind, (int64_t)requested);   \
  } while (0)
  MN__FOUND_STATS(&a->stats);
  if (__builtin_expect(ps != NULL, 0)) MN__FOUND_STATS(ps);
#undef MN__FOUND_STATS
  if (b->size >= a->cfg.max_split_size) mn__stat_inc(&a->stats.oversize_allocations, 1);
  if (expandable) a->exp_epoch++;
  return b;
}

/* Counts the OOM, tells the sink and the observer (lock dropped), sets the message. */
static mn_status out_of_memory(mn__caching_t *a, size_t nbytes, size_t rounded, size_t alloc_size) {
  char msg[768];
  a->stats.num_ooms++;
  mn__trace(a, MN_TRACE_OOM, 0, 0, rounded, nbytes);
  mn__caching_oom_message(a, nbytes, rounded, alloc_size, msg, sizeof msg);
  mn_alloc_stats_t stats;
  mn__caching_stats_copy(a, &stats);
  stats.size = (uint32_t)sizeof stats;
  stats.version = MN_ALLOC_STATS_VERSION;
  mn_oom_observer_fn fn = a->oom_fn;
  void *user = a->oom_user;
  unlock(a);
  if (fn) fn(user, a->base.device, nbytes, &stats);
  return mn__error(MN_ERR_OUT_OF_MEMORY, "caching_alloc", "%s", msg);
}

/* The cache had no block: a new segment, and when the device is out of
 * memory PyTorch's retries (release what fits, then the free-memory
 * callbacks, then everything cached) and last a use_on_oom pool's block.
 * Nothing is released while a capture is under way. pre: lock held (dropped
 * around raw allocations, releases and callbacks). */
static __attribute__((noinline)) mn__block_t *alloc_slow(mn__caching_t *a, params_t *p, mn_mempool_t *mp) {
  /* With more than MN__POLL_ALL_MAX streams holding pending frees, this
   * allocation polled at most one (mn__process_events); before memory is
   * asked for, every completed one is reclaimed (PyTorch's process_events at
   * the start of every malloc: this lookup then sees the free set PyTorch's
   * would; the garbage collector counts the two lookups as PyTorch's one,
   * made after the events). With fewer, the allocation polled them all. */
  if (a->qmap.count > MN__POLL_ALL_MAX && !a->ncaptures) {
    bool gc = mn__gc_enabled(a);
    if (gc) p->pool->get_free_calls--;
    bool any = mn__process_events_all(a);
    mn__block_t *cached = any ? get_free_block(a, p) : NULL;
    if (gc && !any) p->pool->get_free_calls++;
    if (cached) return cached;
  }
  bool capturing = a->ncaptures != 0;
  /* a graph's pool keeps its segments: its replays write to them */
  bool may_release = !capturing && !(mp && mp->graphs);
  if (mn__gc_enabled(a) && !capturing) mn__garbage_collect(a);
  mn__block_t *b = alloc_block(a, p, false);
  if (b || p->err != MN_ERR_OUT_OF_MEMORY) return b;
  mn__nvtx_push("mnemo.oom_recovery", p->size);
  if (may_release) {
    mn__release_t rel = {NULL, NULL};
    bool released = mn__release_available(a, p->stream, p->pool, p->size, &rel);
    mn__do_release(a, &rel);
    if (released) b = alloc_block(a, p, false);
  }
  if (!b && p->err == MN_ERR_OUT_OF_MEMORY && a->any_mem_cbs) {
    unlock(a);
    bool freed = mn__free_memory_callbacks(a, p->size);
    lock(a);
    if (freed) {
      b = get_free_block(a, p);
      if (!b) b = alloc_block(a, p, false);
    }
  }
  if (!b && p->err == MN_ERR_OUT_OF_MEMORY && !capturing) {
    mn__release_cached(a, NULL);
    b = alloc_block(a, p, true);
  }
  if (!b && p->err == MN_ERR_OUT_OF_MEMORY && !mp && a->mempools) {
    mn__pool_t *pool = NULL;
    b = mn__mempool_oom_block(a, p->stream, p->size, &pool);
    if (b) {
      p->pool = pool;
      p->err = MN_OK;
    }
  }
  mn__nvtx_pop();
  return b;
}

/* A spare block record and a pointer-map slot could not be had: the block
 * goes back to the cache. pre: lock held; unlocks. */
static __attribute__((noinline)) mn_status reserve_failed(mn__caching_t *a, params_t *p, mn__block_t *b,
                                                          mn_status st) {
  if (b->where == MN__IN_NONE) mn__pool_insert(p->pool, b); /* still whole and free: back in the cache */
  unlock(a);
  mn__callbacks_flush(a);
  return mn__error_wrap(st, "caching_alloc");
}

/* The cache missed: a new segment or the out-of-memory path, then the block
 * is handed out. pre: lock held; unlocks. */
static __attribute__((noinline)) mn_status alloc_missed(mn__caching_t *a, size_t nbytes, params_t *p,
                                                        mn_mempool_t *mp, void **out) {
  mn__block_t *b = alloc_slow(a, p, mp);
  if (!b && p->err != MN_ERR_OUT_OF_MEMORY) {
    unlock(a);
    mn__callbacks_flush(a);
    return mn__error_wrap(p->err, "caching_alloc");
  }
  if (!b) return out_of_memory(a, nbytes, p->size, p->alloc_size);
  mn__lane_t *lane = NULL;
  mn_status st = mn__spare_reserve(a, 1);
  if (st == MN_OK) st = mn__lane_reserve(a, p->stream, hint_lane(a), &lane);
  if (st != MN_OK) return reserve_failed(a, p, b, st);
  b = alloc_found_block(a, lane, NULL, b, p, nbytes, p->pool->mp != NULL); /* use_on_oom may give a pool's block */
  *out = (void *)b->addr;
  unlock(a);
  mn__callbacks_flush(a); /* a new segment's callbacks run before its first block is handed out */
  return MN_OK;
}

/* The allocation from mp (NULL: the allocator's own pools; a literal NULL on
 * the hot path, where every memory-pool test then folds away). pre: lock
 * held; unlocks. */
static inline __attribute__((always_inline)) mn_status alloc_from(mn__caching_t *a, size_t nbytes, uint64_t sid,
                                                                  mn_mempool_t *mp, void **out) {
  mn__process_events(a);
  params_t p = {.stream = sid, .err = MN_OK};
  p.size = mn__round_size(&a->cfg, nbytes);
  p.pool = mn__pool_for(a, mp, p.size);
  p.alloc_size = mp && mp->no_split ? (p.size + a->granularity - 1) / a->granularity * a->granularity
                                    : mn__allocation_size(p.size);
  mn__block_t *b = get_free_block_in(a, p.pool, sid, p.size, mp != NULL, true);
  if (__builtin_expect(b == NULL, 0)) return alloc_missed(a, nbytes, &p, mp, out);
  mn__lane_t *lane = NULL;
  mn_status st = mn__spare_reserve(a, 1);
  if (st == MN_OK) st = mn__lane_reserve(a, sid, hint_lane(a), &lane);
  if (st != MN_OK) return reserve_failed(a, &p, b, st);
  b = alloc_found_block(a, lane, NULL, b, &p, nbytes, mp != NULL);
  *out = (void *)b->addr;
  unlock(a); /* a cached block: no segment event to tell */
  return MN_OK;
}

/* A use or capture is under way: the pool it routes to. pre: lock held; unlocks. */
static __attribute__((noinline)) mn_status alloc_routed(mn__caching_t *a, size_t nbytes, mn_stream_t *stream,
                                                        uint64_t sid, void **out) {
  return alloc_from(a, nbytes, sid, mn__mempool_route(a, stream), out);
}

/* ---- the lanes' paths (caching_lanes.c) ---------------------------------------------- */

/* The lane of stream sid, or NULL (the full path makes it). Lock-free: lanes
 * are published once made and live as long as the allocator. */
static inline mn__lane_t *lane_lookup(mn__caching_t *a, lane_hint_t *h, uint64_t sid) {
  if (h->gen == a->gen && h->stream == sid) return h->lane;
  mn__lane_t *l = atomic_load_explicit(&a->lanes, memory_order_acquire);
  while (l && atomic_load_explicit(&l->stream, memory_order_relaxed) != sid)
    l = atomic_load_explicit(&l->next, memory_order_acquire);
  if (l) *h = (lane_hint_t){a->gen, sid, l};
  return l;
}

/* A cached pair's allocation on the lane's path: best fit among the stream's
 * own blocks, split as the full path would. NULL, with nothing changed, for
 * whatever the full path must do (no cached block, an oversize, expandable or
 * memory pool's block, a counter past its room, no host memory for records).
 * pre: l's lock held, MN__FAST_ALLOC in a->fast. */
static inline __attribute__((always_inline)) mn__block_t *lane_alloc(mn__caching_t *a, mn__lane_t *l, size_t nbytes,
                                                                     uint64_t sid) {
  if (nbytes > a->total_memory) return NULL;
  params_t p = {.stream = sid, .err = MN_OK};
  p.size = mn__round_size(&a->cfg, nbytes);
  bool small = p.size <= MN__SMALL_SIZE;
  p.pool = small ? &a->small : &a->large;
  mn__sbins_t *sb = l->sb[!small];
  mn__tnode_t *n = mn__fset_lower_bound(&p.pool->fs, sb, p.size);
  if (!n) return NULL;
  mn__block_t *b = (mn__block_t *)n;
  size_t max_split = a->cfg.max_split_size;
  if (b->seg->expandable || p.size >= max_split || b->size >= max_split) return NULL;
  int kind = p.pool->kind;
  bool split = should_split(a, b, p.size, false);
  int64_t bytes = (int64_t)(split ? p.size : b->size);
  if (!lane_fits(l, MN__LF_count, kind, 1) || !lane_fits(l, MN__LF_bytes, kind, bytes) ||
      !lane_fits(l, MN__LF_requested, kind, (int64_t)nbytes))
    return NULL;
  if (split && !mn__block_is_split(b) &&
      (!lane_fits(l, MN__LF_inactive_split, kind, 1) ||
       !lane_fits(l, MN__LF_inactive_split_bytes, kind, (int64_t)(b->size - p.size))))
    return NULL;
  if (split && l->spares.n == 0) {
    mn__block_t *r = mn__calloc_lines(sizeof *r);
    if (!r) return NULL; /* the full path tries again and reports */
    mn__spares_put(&l->spares, r, LANE_SPARES_MAX);
  }
  if ((l->live.count + 1) * 4 > l->live.cap * 3) { /* the map grows: an error here is the full path's to report */
    mn__error_saved_t saved;
    mn__error_save(&saved);
    mn_status st = mn__addrmap_reserve_slow(&l->live, 1);
    mn__error_restore(&saved);
    if (st != MN_OK) return NULL;
  }
  if (sb->hot != n) take_out(p.pool, b);
  return alloc_found_block(a, l, l, b, &p, nbytes, false);
}

/* The free of a live block of lane l on its path: no stream uses, never
 * exported, a split block of a plain segment of the allocator's own pools,
 * with at most one free neighbour, its counters within their room; else
 * false, nothing changed. pre: l's lock held, e is b's entry in l's map. */
static inline bool lane_free(mn__caching_t *a, mn__lane_t *l, mn__addrmap_entry_t *e);

/* The allocation: a cached block on the stream's lane when it can, else the
 * full lock (the "mnemo.alloc" range is the dispatch's). */
static mn_status caching_alloc(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out) {
  mn__caching_t *a = as_caching(self);
  uint64_t sid = stream ? mn_stream_id(stream) : a->default_stream;
  lane_hint_t *h = &t_lane;
  mn__lane_t *l = atomic_load_explicit(&a->fast, memory_order_relaxed) & MN__FAST_ALLOC ? lane_lookup(a, h, sid) : NULL;
  if (__builtin_expect(l != NULL, 1)) {
    mn__lock(&l->lock);
    mn__block_t *b = NULL;
    if (__builtin_expect(l->retired, 0) || atomic_load_explicit(&l->stream, memory_order_relaxed) != sid)
      h->gen = 0; /* retired (or recycled for another stream) since it was found */
    else if ((atomic_load_explicit(&a->fast, memory_order_relaxed) & MN__FAST_ALLOC) &&
             (!a->fast_quiet || mn__device_progress(a->base.device) == a->fast_quiet))
      b = lane_alloc(a, l, nbytes, sid);
    if (__builtin_expect(b != NULL, 1)) *out = (void *)b->addr;
    mn__unlock(&l->lock);
    if (__builtin_expect(b != NULL, 1)) return MN_OK;
  }
  lock(a);
  if (nbytes > a->total_memory) return out_of_memory(a, nbytes, nbytes, nbytes);
  if (__builtin_expect(a->nroutes != 0, 0)) return alloc_routed(a, nbytes, stream, sid, out);
  return alloc_from(a, nbytes, sid, NULL, out);
}

/* ---- free and record_stream ---------------------------------------------------------- */

static mn_status not_ours(mn__caching_t *a, const char *func, const void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  for (mn__segment_t *s = a->segments; s; s = s->next_seg)
    if (p >= s->base && p - s->base < s->size) {
      unlock(a);
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "%p is inside a segment of this allocator but is not a live allocation "
                       "(already freed, or not the start of one)", ptr);
    }
  unlock(a);
  return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%p was not allocated by this allocator", ptr);
}

/* One stream use of a block being freed: an event recorded on it, or (when the
 * event cannot be had) a stream synchronize done with the lock dropped. */
typedef struct use_end_s {
  mn_event_t *event;
  mn__pending_t *entry;
} use_end_t;

/* Takes the block out of the allocated counts (its events, if any, follow). */
static inline void unallocate(mn__caching_t *a, mn__block_t *b) {
  b->allocated = false;
  mn_alloc_stats_t *ps = MN__POOL_STATS(b->pool);
  int kind = b->pool->kind;
  MN__STAT2_SUB(a, ps, allocation, kind, 1);
  MN__STAT2_SUB(a, ps, allocated_bytes, kind, (int64_t)b->size);
  if (b->size >= a->cfg.max_split_size) mn__stat_dec(&a->stats.oversize_allocations, 1);
  mn__trace(a, MN_TRACE_FREE_REQUESTED, b->stream_id, b->addr, b->size, b->requested);
}

void mn__unallocate(mn__caching_t *a, mn__block_t *b) { unallocate(a, b); }

static mn_status free_with_uses(mn__caching_t *a, mn__block_t *b, mn__lane_t *lane, mn__addrmap_entry_t *live);

/* Whether x may merge with a block being freed (mn__free_plan's first test). */
static inline bool may_merge(const mn__block_t *x) { return x && x->where != MN__IN_NONE; }

/* The two events of a free that completes at once (unallocate's
 * free_requested, then mn__free_block's free_completed), one clock read. */
static __attribute__((noinline)) void trace_free_pair(mn__caching_t *a, const mn__block_t *b) {
  mn_trace_event_t ev = {.action = MN_TRACE_FREE_REQUESTED,
                         .time_ns = mn__clock_ns(),
                         .device = a->base.device,
                         .stream_id = b->stream_id,
                         .address = b->addr,
                         .size = b->size,
                         .requested_size = b->requested};
  a->sink(a->sink_user, &ev);
  ev.action = MN_TRACE_FREE_COMPLETED;
  a->sink(a->sink_user, &ev);
}

/* The counters an allocated block gives back when it is freed (unallocate's
 * part of the common frees below); fast: the lane on whose path (else NULL). */
static inline void count_unallocated(mn__caching_t *a, mn__lane_t *fast, const mn__block_t *b, int kind,
                                     int64_t size, int64_t requested) {
  if (fast) {
    lane_dec(fast, MN__LF_count, kind, 1);
    lane_dec(fast, MN__LF_bytes, kind, size);
    lane_dec(fast, MN__LF_requested, kind, requested);
    fast->dirty = true;
    return;
  }
  mn_alloc_stats_t *st = &a->stats;
  if (b->size >= a->cfg.max_split_size) mn__stat_dec(&st->oversize_allocations, 1);
  MN__STAT_SUB_FROM(st, allocation, kind, 1);
  MN__STAT_SUB_FROM(st, allocated_bytes, kind, size);
  MN__STAT_SUB_FROM(st, active, kind, 1);
  MN__STAT_SUB_FROM(st, active_bytes, kind, size);
  MN__STAT_SUB_FROM(st, requested_bytes, kind, requested);
}

/* unallocate and mn__free_block for the common free: a split block of a plain
 * segment of the allocator's own pools, no free neighbour, never exported.
 * The same counters, inline and updated once each; the same events. fast:
 * the lane on whose path (its room checked), else NULL (the full lock). */
static inline __attribute__((always_inline)) void free_plain(mn__caching_t *a, mn__lane_t *fast, mn__block_t *b) {
  if (a->sink) trace_free_pair(a, b);
  mn__pool_t *pool = b->pool;
  mn_alloc_stats_t *ps = NULL;
  int kind = pool->kind;
  int64_t size = (int64_t)b->size, requested = (int64_t)b->requested;
  b->allocated = false;
  b->requested = 0;
  count_unallocated(a, fast, b, kind, size, requested);
  MN__CSTAT_ADD(fast, inactive_split, 1);
  MN__CSTAT_ADD(fast, inactive_split_bytes, size);
  /* mn__pool_insert of a mapped block that is not a whole segment */
  mn__sbins_t *sb = b->seg->sb;
  mn__fset_insert(&pool->fs, sb, &b->node, b->size, b->addr);
  b->where = MN__IN_FREE;
  b->gc_count_base = pool->get_free_calls;
  mn__largest_grow(sb, b->size);
}

/* unallocate and mn__free_block for a free with exactly one free neighbour m
 * (the other not free), under free_plain's other conditions. The counters are
 * PyTorch's (b absorbs m); the record that stays is m's, which takes b's
 * bytes and keeps its place in the free set: as the hot node its key is
 * changed in place, else it is taken out and put back. b's record is spare. */
static inline __attribute__((always_inline)) void free_merge_one(mn__caching_t *a, mn__lane_t *fast, mn__block_t *b,
                                                                 mn__block_t *m) {
  if (a->sink) trace_free_pair(a, b);
  mn__pool_t *pool = b->pool;
  mn_alloc_stats_t *ps = NULL;
  int kind = pool->kind;
  int64_t size = (int64_t)b->size, requested = (int64_t)b->requested, absorbed = (int64_t)m->size;
  count_unallocated(a, fast, b, kind, size, requested);
  mn__sbins_t *sb = m->seg->sb;
  bool hot = sb->hot == &m->node;
  if (!hot) mn__fset_remove(&pool->fs, sb, &m->node);
  mn__block_unlink_into(m, b);
  m->size += b->size;
  if (hot) {
    m->node.key.size = m->size;
    m->node.key.addr = m->addr;
  } else {
    mn__fset_insert(&pool->fs, sb, &m->node, m->size, m->addr);
  }
  m->gc_count_base = pool->get_free_calls; /* as if cached now */
  mn__largest_grow(sb, m->size);
  /* net change of inactive split blocks: m is absorbed; the merged block counts when still split */
  if (mn__block_is_split(m)) {
    MN__CSTAT_ADD(fast, inactive_split_bytes, size);
  } else {
    MN__CSTAT_SUB(fast, inactive_split, 1);
    MN__CSTAT_SUB(fast, inactive_split_bytes, absorbed);
    mn__whole_push(sb, m); /* mn__pool_insert's list of whole segments */
  }
  if (fast) mn__spares_put(&fast->spares, b, LANE_SPARES_MAX);
  else mn__block_put(a, b);
}

/* m when it is the only one of b's neighbours that is free (and free_merge_one may take it), else NULL. */
static inline mn__block_t *one_free_neighbour(const mn__block_t *b) {
  mn__block_t *p = b->prev, *n = b->next;
  bool pf = may_merge(p), nf = may_merge(n);
  mn__block_t *m = pf && !nf ? p : nf && !pf ? n : NULL;
  return mn__absorbs(b, m) ? m : NULL;
}

/* mn__free_block on a lane's path, for the frees free_plain and
 * free_merge_one do not make (both neighbours free, or a whole segment):
 * the same merges, counters and free-set insertion. false when a counter's
 * room is short (nothing changed). pre: lane_free's conditions. */
static __attribute__((noinline)) bool lane_free_general(mn__caching_t *a, mn__lane_t *l, mn__block_t *b,
                                                        mn__addrmap_entry_t *e) {
  mn__free_plan_t f = mn__free_plan(b);
  int kind = b->pool->kind;
  int64_t size = (int64_t)b->size, requested = (int64_t)b->requested;
  int64_t net_blocks = f.net_blocks, net_bytes = f.net_bytes;
  if ((net_blocks > 0 && !lane_fits(l, MN__LF_split, kind, net_blocks)) ||
      (net_bytes > 0 && !lane_fits(l, MN__LF_split_bytes, kind, net_bytes)))
    return false;
  mn__addrmap_remove_entry(&l->live, e);
  if (a->sink) trace_free_pair(a, b); /* unallocate's free_requested, mn__free_block's free_completed */
  b->allocated = false;
  count_unallocated(a, l, b, kind, size, requested);
  mn__free_merge(b, &f, &l->spares, LANE_SPARES_MAX);
  b->requested = 0;
  mn__pool_insert(b->pool, b);
  if (net_blocks > 0) lane_inc(l, MN__LF_split, kind, net_blocks);
  else if (net_blocks < 0) lane_dec(l, MN__LF_split, kind, -net_blocks);
  if (net_bytes > 0) lane_inc(l, MN__LF_split_bytes, kind, net_bytes);
  else if (net_bytes < 0) lane_dec(l, MN__LF_split_bytes, kind, -net_bytes);
  return true;
}

static inline bool lane_free(mn__caching_t *a, mn__lane_t *l, mn__addrmap_entry_t *e) {
  mn__block_t *b = e->data;
  if (b->nuses || b->share || b->pool->mp || b->seg->expandable || b->size >= a->cfg.max_split_size) return false;
  if (__builtin_expect(!mn__block_is_split(b), 0)) return lane_free_general(a, l, b, e);
  int kind = b->pool->kind;
  int64_t size = (int64_t)b->size;
  mn__block_t *m = NULL;
  if (!may_merge(b->prev) && !may_merge(b->next)) {
    if (!lane_fits(l, MN__LF_inactive_split, kind, 1) || !lane_fits(l, MN__LF_inactive_split_bytes, kind, size))
      return false;
  } else if ((m = one_free_neighbour(b)) != NULL) {
    bool still_split = m == b->prev ? (m->prev || b->next) : (b->prev || m->next);
    if (still_split && !lane_fits(l, MN__LF_inactive_split_bytes, kind, size)) return false;
  } else {
    return lane_free_general(a, l, b, e);
  }
  mn__addrmap_remove_entry(&l->live, e);
  if (m) free_merge_one(a, l, b, m);
  else free_plain(a, l, b);
  return true;
}

/* addr's free on lane l when l holds it: 1 done, 0 left to the full path, -1 not l's. */
static inline int free_in_lane(mn__caching_t *a, mn__lane_t *l, uintptr_t addr) {
  mn__lock(&l->lock);
  mn__addrmap_entry_t *e = l->retired ? NULL : mn__addrmap_find(&l->live, addr);
  int r = !e ? -1 : (atomic_load_explicit(&a->fast, memory_order_relaxed) & MN__FAST_FREE) && lane_free(a, l, e);
  mn__unlock(&l->lock);
  return r;
}

/* The lane path of a free: the lane this thread used last first, then the
 * others, one lock at a time. false: the full path's (not found, or not a
 * free the lane's path makes). */
static inline bool free_on_lane(mn__caching_t *a, uintptr_t addr) {
  if (!(atomic_load_explicit(&a->fast, memory_order_relaxed) & MN__FAST_FREE)) return false; /* again under the lock */
  mn__lane_t *hint = hint_lane(a);
  int r;
  if (hint && (r = free_in_lane(a, hint, addr)) >= 0) return r;
  for (mn__lane_t *l = atomic_load_explicit(&a->lanes, memory_order_acquire); l;
       l = atomic_load_explicit(&l->next, memory_order_acquire))
    if (l != hint && (r = free_in_lane(a, l, addr)) >= 0) return r;
  return false;
}

static mn_status caching_free(mn_allocator_t *self, void *ptr) {
  mn__caching_t *a = as_caching(self);
  if (__builtin_expect(free_on_lane(a, (uintptr_t)ptr), 1)) return MN_OK;
  lock(a);
  mn__lane_t *lane;
  mn__addrmap_entry_t *live = mn__live_find(a, (uintptr_t)ptr, &lane);
  if (!live) return not_ours(a, __func__, ptr);
  mn__block_t *b = live->data;
  if (b->nuses) return free_with_uses(a, b, lane, live); /* record_stream was called: events first */
  mn__addrmap_remove_entry(&lane->live, live);
  mn__block_t *m;
  if (__builtin_expect(b->pool->mp || b->share || !mn__block_is_split(b) || b->seg->expandable, 0)) {
    unallocate(a, b);
    mn__free_block(a, b);
  } else if (!may_merge(b->prev) && !may_merge(b->next)) {
    free_plain(a, NULL, b);
  } else if ((m = one_free_neighbour(b)) != NULL) {
    free_merge_one(a, NULL, b, m);
  } else {
    unallocate(a, b);
    mn__free_block(a, b);
  }
  unlock(a);
  return MN_OK;
}

/* The free of a block used on other streams: an event recorded on each (or,
 * when one cannot be had, that stream synchronized with the lock dropped);
 * the block is cached when they complete. pre: lock held; unlocks. */
static __attribute__((noinline)) mn_status free_with_uses(mn__caching_t *a, mn__block_t *b, mn__lane_t *lane,
                                                          mn__addrmap_entry_t *live) {
  if (a->ncaptures) return mn__free_deferred(a, b, lane, live); /* no event records during a capture */
  uint32_t n = b->nuses;
  use_end_t local[8], *ends = local;
  if (n > 8 && !(ends = mn__calloc(n, sizeof *ends))) {
    unlock(a);
    return mn__error(MN_ERR_OUT_OF_MEMORY, "caching_free", "out of host memory for %u stream events", n);
  }
  bool need_sync = false;
  for (uint32_t i = 0; i < n; i++) {
    if (mn__use_event_record(a, b->uses[i].stream, &ends[i].event, &ends[i].entry)) continue;
    ends[i].event = NULL;
    ends[i].entry = NULL;
    need_sync = true;
  }
  mn__addrmap_remove_entry(&lane->live, live); /* a concurrent double free now fails cleanly */
  if (need_sync) {
    b->freeing = true;
    unlock(a);
    mn_status st = MN_OK;
    for (uint32_t i = 0; i < n && st == MN_OK; i++)
      if (!ends[i].event) st = mn_stream_synchronize(b->uses[i].stream);
    lock(a);
    b->freeing = false;
    if (st != MN_OK) { /* nothing changed: the block stays allocated */
      for (uint32_t i = 0; i < n; i++)
        if (ends[i].event) {
          mn__event_put(a, ends[i].event);
          mn__pending_put(a, ends[i].entry);
        }
      (void)mn__addrmap_reserve(&lane->live, 1); /* the map never fills: put cannot fail */
      mn__addrmap_put(&lane->live, b->addr, 0, b);
      unlock(a);
      if (ends != local) free(ends);
      return mn__error_wrap(st, "caching_free");
    }
  }
  unallocate(a, b);
  for (uint32_t i = 0; i < n; i++) {
    if (!ends[i].event) continue;
    *ends[i].entry = (mn__pending_t){.event = ends[i].event, .block = b, .stream_id = b->uses[i].id};
    mn__pending_append(a, ends[i].entry);
    b->event_count++;
  }
  /* The events (or the synchronizes) have taken each use: its stream is no
   * longer needed, and may be destroyed from here on (ids are never reused,
   * so the pending entries' stream_id can name no other stream). */
  for (uint32_t i = 0; i < n; i++) mn__stream_unhold(b->uses[i].stream);
  a->nuses_total -= n;
  b->nuses = 0;
  if (b->event_count == 0) mn__free_block(a, b);
  unlock(a);
  if (ends != local) free(ends);
  return MN_OK;
}

static mn_status caching_record_stream(mn_allocator_t *self, void *ptr, mn_stream_t *stream) {
  mn__caching_t *a = as_caching(self);
  uint64_t id = mn_stream_id(stream);
  lock(a);
  mn__block_t *b = mn__live_block(a, (uintptr_t)ptr);
  if (!b) return not_ours(a, __func__, ptr);
  if (id == b->stream_id) goto done; /* uses on the allocating stream need nothing */
  for (uint32_t i = 0; i < b->nuses; i++)
    if (b->uses[i].id == id) goto done;
  /* Room in the queue map for the queue this use's event may start at free
   * (room for one per use held: mn__pending_append cannot fail), and for the
   * queues of events a synchronize took off the map while it waits with the
   * lock dropped: the ones whose wait fails are appended again. */
  if (mn__addrmap_reserve(&a->qmap, a->nuses_total + a->pending_waited + 1) != MN_OK) {
    unlock(a);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a stream use");
  }
  if (b->nuses == b->cap_uses) {
    uint32_t cap = b->cap_uses ? 2 * b->cap_uses : 2;
    mn__use_t *grown = mn__realloc(b->uses, cap * sizeof *grown);
    if (!grown) {
      unlock(a);
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a stream use");
    }
    b->uses = grown;
    b->cap_uses = cap;
  }
  mn__stream_hold(stream); /* the pointer is kept until free records its event */
  b->uses[b->nuses++] = (mn__use_t){id, stream, 0};
  a->nuses_total++;
done:
  unlock(a);
  return MN_OK;
}

static mn_status caching_empty_cache(mn_allocator_t *self) {
  mn__caching_t *a = as_caching(self);
  lock(a);
  mn__trace(a, MN_TRACE_EMPTY_CACHE, 0, 0, 0, 0);
  mn_status st = mn__release_cached(a, NULL);
  /* Pooled events go too, so an idle allocator holds no device objects. */
  mn_event_t **events = a->events;
  size_t nevents = a->nevents;
  a->events = NULL;
  a->nevents = a->cap_events = 0;
  mn__lanes_trim(a); /* and the spare block records: the lanes' paths and the full one pass them between them */
  unlock(a);
  /* pooled, idle events: a failed destroy leaves nothing of ours to undo */
  for (size_t i = 0; i < nevents; i++) mn__ignore(mn_event_destroy(events[i]));
  free(events);
  mn__callbacks_flush(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- create and destroy ----------------------------------------------------------------- */

/* The largest block the large pool can hold: an expandable range is 1 1/8 of
 * the device (plus a page), a plain segment at most the device. */
static size_t large_max_block(size_t total) {
  return total > SIZE_MAX / 4 ? SIZE_MAX : 2 * total + ((size_t)1 << 30);
}

/* Frees everything, live allocations included: the caller must not use any
 * pointer from this allocator afterwards, nor call it concurrently. */
static void caching_destroy(mn_allocator_t *self) {
  mn__caching_t *a = as_caching(self);
  if (a->share) mn__share_destroy(a); /* exports and parked blocks go with the segments */
  mn__pending_t *pending = mn__pending_detach_all(a);
  while (pending) {
    mn__pending_t *p = pending;
    pending = p->next;
    /* destroy returns nothing: a failing device gets its memory freed anyway */
    mn__ignore(mn_event_synchronize(p->event));
    mn__ignore(mn_event_destroy(p->event));
    free(p);
  }
  if (a->exp_segments) mn__ignore(mn_device_synchronize(self->device)); /* destroy cannot report; unmapping follows */
  while (a->segments) {
    mn__segment_t *s = a->segments;
    mn__segment_unlink(a, s);
    for (mn__block_t *b = s->head; b;) {
      mn__block_t *next = b->next;
      for (uint32_t i = 0; i < b->nuses; i++) mn__stream_unhold(b->uses[i].stream); /* live blocks' uses */
      free(b->uses);
      free(b);
      b = next;
    }
    if (s->expandable) {
      for (size_t k = 0; k < s->npages; k++)
        if (s->page_mapped[k]) /* synchronized above, once */
          mn__ignore(mn__device_mem_unmap_synced(self->device, (void *)(s->base + k * s->page), s->page));
      mn__ignore(mn_device_va_release(self->device, (void *)s->base, s->size)); /* destroy cannot report */
      free(s->page_mapped);
    } else if (s->src.alloc) {
      mn__ignore(mn_device_synchronize(self->device)); /* a source's free expects it; destroy cannot report */
      mn__ignore(s->src.free(s->src.user, self->device, (void *)s->base, s->size));
    } else {
      mn__ignore(mn_device_raw_free(self->device, (void *)s->base)); /* destroy cannot report */
    }
    free(s);
  }
  mn__mempools_free_all(a);
  for (size_t i = 0; i < a->nevents; i++) mn__ignore(mn_event_destroy(a->events[i])); /* destroy cannot report */
  free(a->events);
  mn__spares_free(&a->spares);
  mn__lanes_free(a);
  while (a->spare_pending) {
    mn__pending_t *p = a->spare_pending;
    a->spare_pending = p->next;
    free(p);
  }
  mn__addrmap_fini(&a->qmap);
  mn__fset_fini(&a->small.fs);
  mn__fset_fini(&a->large.fs);
  pthread_rwlock_destroy(&a->cb_lock);
  free(a->seg_cbs);
  free(a->mem_cbs);
  free(a->cbq);
  free(a);
}

static size_t caching_size_of(mn_allocator_t *self, const void *ptr) {
  mn__caching_t *a = as_caching(self);
  lock(a);
  mn__block_t *b = mn__live_block(a, (uintptr_t)ptr);
  size_t size = b ? b->size : 0;
  unlock(a);
  return size;
}

static const mn_allocator_vtable_t caching_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "caching",
    .alloc = caching_alloc,
    .free = caching_free,
    .record_stream = caching_record_stream,
    .empty_cache = caching_empty_cache,
    .get_stats = mn__caching_get_stats,
    .reset_peak = mn__caching_reset_peak,
    .snapshot = mn__caching_snapshot,
    .check_invariants = mn__caching_check_invariants,
    .destroy = caching_destroy,
    .size_of = caching_size_of,
};

mn_status mn_caching_allocator_create(mn_device_t dev, const mn_caching_config_t *config, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_caching_config_t cfg = config ? *config : mn_caching_config_default();
  mn_status st = mn__caching_config_validate(__func__, &cfg);
  if (st != MN_OK) return st;
  mn_device_props_t props;
  st = mn_device_get_properties(dev, &props);
  mn_stream_t *def = NULL;
  if (st == MN_OK) st = mn_stream_default(dev, &def);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  /* 64-byte aligned: the lock's cache line is its own (caching_internal.h) */
  size_t asize = (sizeof(mn__caching_t) + 63) / 64 * 64;
  mn__caching_t *a = mn__aligned_alloc(64, asize);
  if (!a) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  memset(a, 0, sizeof *a);
  mn__lock_init(&a->lock);
  if (pthread_rwlock_init(&a->cb_lock, NULL) != 0) {
    free(a);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "cannot make the callback lock");
  }
  a->gen = atomic_fetch_add_explicit(&g_gen, 1, memory_order_relaxed) + 1;
  a->base.vtable = &caching_vtable;
  mn__allocator_vtable_trust(&caching_vtable); /* the dispatch's fast path (allocator.c) */
  a->base.device = dev;
  a->cfg = cfg;
  a->expandable = cfg.expandable_segments && props.supports_vmm; /* else plain segments, silently */
  a->total_memory = props.total_memory;
  a->default_stream = mn_stream_id(def);
  a->granularity = props.alloc_granularity ? props.alloc_granularity : MN__SMALL_BUFFER;
  a->set_fraction = cfg.per_process_memory_fraction < 1.0;
  a->allowed_max = (size_t)(cfg.per_process_memory_fraction * (double)props.total_memory);
  a->small = (mn__pool_t){.is_small = true, .kind = MN_POOL_SMALL};
  a->large = (mn__pool_t){.is_small = false, .kind = MN_POOL_LARGE};
  mn__fset_init(&a->small.fs, MN__SMALL_BUFFER);
  mn__fset_init(&a->large.fs, large_max_block(a->total_memory));
  a->stats.size = (uint32_t)sizeof a->stats;
  a->stats.version = MN_ALLOC_STATS_VERSION;
  /* MNEMO_TRACE=path: the profiling layer's recorder, when registered, records every allocator */
  mn__event_sink_default(&a->sink, &a->sink_user);
  a->sink_concurrent = mn__event_sink_is_concurrent(a->sink);
  *out = &a->base;
  return MN_OK;
}

mn_status mn_caching_allocator_create_sharded(mn_device_t dev, const mn_caching_config_t *config, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_caching_allocator_create(dev, config, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

bool mn__is_caching(const mn_allocator_t *al) { return al && al->vtable == &caching_vtable; }

mn_status mn__caching_checked(const char *func, mn_allocator_t *a, mn__caching_t **out) {
  if (!a || a->vtable != &caching_vtable)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "not a caching allocator (%s)", mn_allocator_name(a));
  *out = (mn__caching_t *)a;
  return MN_OK;
}

/* Whether the allocator holds anything on its device; pre: lock held. */
static bool holds_device(const mn__caching_t *a) {
  return a->segments || a->queues || a->nevents || mn__stat_all_current(&a->stats, allocation) > 0;
}

mn_status mn__caching_release_device(mn_allocator_t *al, const char *func) {
  if (al && al->vtable != &caching_vtable) { /* e.g. the async allocator: its own empty_cache */
    mn_status st = mn_allocator_empty_cache(al);
    return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
  }
  if (!al) return MN_OK;
  mn__caching_t *a = as_caching(al);
  char dev[32];
  mn_device_format(al->device, dev, sizeof dev);
  mn_status st = caching_empty_cache(al);
  if (st != MN_OK) return mn__error_wrap(st, func);
  lock(a);
  bool held = holds_device(a);
  unlock(a);
  if (held)
    return mn__error(MN_ERR_INVALID_STATE, func, "the default allocator of %s still holds memory (live allocations)",
                     dev);
  return MN_OK;
}

mn_status mn__caching_refresh_device(mn_allocator_t *al, const char *func) {
  if (!al || al->vtable != &caching_vtable) return MN_OK;
  mn__caching_t *a = as_caching(al);
  mn_device_props_t props;
  mn_stream_t *def = NULL;
  mn_status st = mn_device_get_properties(al->device, &props);
  if (st == MN_OK) st = mn_stream_default(al->device, &def);
  if (st != MN_OK) return mn__error_wrap(st, func);
  lock(a);
  if (!holds_device(a)) {
    a->expandable = a->cfg.expandable_segments && props.supports_vmm;
    a->total_memory = props.total_memory;
    mn__fset_fini(&a->large.fs); /* no segment, so no stream's record */
    mn__fset_init(&a->large.fs, large_max_block(a->total_memory));
    a->lanes_epoch = UINT64_MAX; /* the epoch restarted: the lanes look their sets up again */
    a->default_stream = mn_stream_id(def);
    a->granularity = props.alloc_granularity ? props.alloc_granularity : MN__SMALL_BUFFER;
    a->allowed_max = (size_t)(a->cfg.per_process_memory_fraction * (double)props.total_memory);
    a->peers = 0; /* the devices changed: peers are enabled again (SIM forgets them too) */
  }
  unlock(a);
  return MN_OK;
}

mn_status mn_caching_allocator_set_oom_observer(mn_allocator_t *al, mn_oom_observer_fn fn, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  if (st != MN_OK) return st;
  lock(a);
  a->oom_fn = fn;
  a->oom_user = user;
  unlock(a);
  return MN_OK;
}

mn_status mn_caching_allocator_set_trace_sink(mn_allocator_t *al, mn_trace_sink_fn sink, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  if (st != MN_OK) return st;
  lock(a);
  a->sink = sink;
  a->sink_user = user;
  a->sink_concurrent = mn__event_sink_is_concurrent(sink);
  unlock(a);
  return MN_OK;
}
