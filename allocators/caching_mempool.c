/* allocators/caching_mempool.c: memory pools of the caching allocator (mnemo/mempool.h):
 * create/destroy, the per-thread current pool, routing of allocations (captures first, then
 * the thread's pool), per-pool statistics, snapshots and empty_cache, use_on_oom, and the
 * segment and free-memory callbacks. Threading: pools and routes under the allocator lock;
 * the per-thread use stack is thread-local; callback lists under cb_lock (a reader while
 * callbacks run, so remove waits for running ones); callbacks run with no allocator lock. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/hostmem.h"
#include "runtime/stream_hold.h"

static void lock(mn__caching_t *a) { mn__caching_lock(a); }
static void unlock(mn__caching_t *a) { mn__caching_unlock(a); }

static _Atomic uint64_t next_pool_id = 1;

/* One mn_mempool_use not yet ended: the thread's stack, innermost first. */
typedef struct use_s {
  mn__caching_t *a;
  mn_mempool_t *mp;
  struct use_s *next;
} use_t;
static _Thread_local use_t *tls_uses;

static void pool_half_init(mn__pool_t *p, mn_mempool_t *mp, bool small, size_t max_block) {
  *p = (mn__pool_t){.is_small = small, .kind = small ? MN_POOL_SMALL : MN_POOL_LARGE, .mp = mp};
  mn__fset_init(&p->fs, max_block);
}

mn_status mn_mempool_create(mn_allocator_t *al, const mn_mempool_options_t *opts, mn_mempool_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn__caching_t *a = NULL;
  if (!al) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "allocator must not be NULL");
  if (mn__caching_checked(__func__, al, &a) != MN_OK)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "memory pools need an allocator from mn_caching_allocator_create, not \"%s\"",
                     mn_allocator_name(al));
  mn_mempool_options_t o = opts ? *opts : (mn_mempool_options_t){0};
  if (o.source && (!o.source->alloc || !o.source->free))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "a source needs both alloc and free");
  mn_mempool_t *mp = mn__calloc(1, sizeof *mp);
  if (!mp) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mp->a = a;
  mp->id = atomic_fetch_add(&next_pool_id, 1);
  if (o.source) mp->src = *o.source;
  mp->no_split = o.no_split;
  mp->use_on_oom = o.use_on_oom;
  mp->stats.size = (uint32_t)sizeof mp->stats;
  mp->stats.version = MN_ALLOC_STATS_VERSION;
  lock(a);
  pool_half_init(&mp->small, mp, true, MN__SMALL_BUFFER);
  /* a plain segment is at most the device (no expandable ranges in pools) */
  pool_half_init(&mp->large, mp, false, a->total_memory + MN__ROUND_LARGE);
  mp->next = a->mempools;
  if (a->mempools) a->mempools->prev = mp;
  a->mempools = mp;
  a->nmempools++;
  unlock(a);
  *out = mp;
  return MN_OK;
}

static void mempool_free(mn_mempool_t *mp) {
  mn__fset_fini(&mp->small.fs);
  mn__fset_fini(&mp->large.fs);
  free(mp);
}

/* Why the pool cannot go now (with_blocks: its blocks counted), or NULL. pre: lock held. */
static const char *busy_reason(const mn_mempool_t *mp, bool with_blocks) {
  if (mp->users) return "it is a thread's current pool (mn_mempool_use without unuse)";
  if (mp->captures) return "a capture into it is under way";
  if (mp->graphs) return "a graph captured into it is alive (destroy the graph first)";
  if (with_blocks && mn__stat_all_current(&mp->stats, active) > 0)
    return "it has live blocks or blocks whose free waits for stream events";
  return NULL;
}

mn_status mn_mempool_destroy(mn_mempool_t *mp) {
  if (!mp) return MN_OK;
  mn__caching_t *a = mp->a;
  lock(a);
  const char *why = busy_reason(mp, false);
  if (!why) {
    /* pending frees first (they may be the pool's last active blocks), then its cache */
    mn_status st = mn__release_cached(a, mp);
    why = busy_reason(mp, true);
    if (!why && mn__stat_all_current(&mp->stats, segment) > 0) {
      long long left = (long long)mn__stat_all_current(&mp->stats, segment);
      bool capturing = a->ncaptures != 0;
      unlock(a);
      if (st != MN_OK) return mn__error_wrap(st, __func__); /* the release's own message */
      return mn__error(MN_ERR_BUSY, __func__, "memory pool %llu: %lld segments could not be given back%s",
                       (unsigned long long)mp->id, left,
                       capturing ? " (a capture is under way on its allocator: nothing is freed until it ends)" : "");
    }
  }
  if (why) {
    unlock(a);
    return mn__error(MN_ERR_BUSY, __func__, "memory pool %llu cannot be destroyed: %s", (unsigned long long)mp->id,
                     why);
  }
  if (mp->prev) mp->prev->next = mp->next;
  else a->mempools = mp->next;
  if (mp->next) mp->next->prev = mp->prev;
  a->nmempools--;
  unlock(a);
  mempool_free(mp);
  return MN_OK;
}

void mn__mempools_free_all(mn__caching_t *a) {
  while (a->mempools) {
    mn_mempool_t *mp = a->mempools;
    a->mempools = mp->next;
    mempool_free(mp);
  }
  a->nmempools = 0;
  while (a->routes) {
    mn__capture_route_t *r = a->routes;
    a->routes = r->next;
    free(r);
  }
}

uint64_t mn_mempool_id(const mn_mempool_t *mp) { return mp ? mp->id : 0; }

mn_allocator_t *mn_mempool_allocator(const mn_mempool_t *mp) { return mp ? &mp->a->base : NULL; }

/* ---- the current pool of a thread ------------------------------------------------------ */

mn_status mn_mempool_use(mn_mempool_t *mp) {
  MN__CHECK_ARG(mp != NULL, "pool must not be NULL");
  use_t *u = mn__malloc(sizeof *u);
  if (!u) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mn__caching_t *a = mp->a;
  lock(a);
  mp->users++;
  a->nroutes++;
  unlock(a);
  *u = (use_t){.a = a, .mp = mp, .next = tls_uses};
  tls_uses = u;
  return MN_OK;
}

mn_status mn_mempool_unuse(mn_mempool_t *mp) {
  MN__CHECK_ARG(mp != NULL, "pool must not be NULL");
  use_t **pu = &tls_uses;
  while (*pu && (*pu)->a != mp->a) pu = &(*pu)->next;
  if (!*pu || (*pu)->mp != mp)
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "memory pool %llu is not this thread's innermost current pool of its allocator%s",
                     (unsigned long long)mp->id, *pu ? "" : " (no use of it is under way)");
  use_t *u = *pu;
  *pu = u->next;
  free(u);
  mn__caching_t *a = mp->a;
  lock(a);
  mp->users--;
  a->nroutes--;
  unlock(a);
  return MN_OK;
}

/* Caches the deferred blocks of `stream` whose every use stream it has
 * joined since the free (PyTorch's graph_capture_record_stream_reuse): in
 * the captured order their last use precedes whatever comes next on it. */
static void deferred_poll(mn__caching_t *a, mn_stream_t *stream, uint64_t sid) {
  mn__block_t **pb = &a->deferred;
  while (*pb) {
    mn__block_t *b = *pb;
    bool joined = b->stream_id == sid;
    for (uint32_t i = 0; joined && i < b->nuses; i++) {
      bool reached = false;
      joined = b->uses[i].marker && mn__capture_reaches(stream, b->uses[i].marker, &reached) == MN_OK && reached;
    }
    if (!joined) {
      pb = &b->spare_next;
      continue;
    }
    *pb = b->spare_next;
    b->spare_next = NULL;
    b->deferred = false;
    for (uint32_t i = 0; i < b->nuses; i++) mn__stream_unhold(b->uses[i].stream);
    a->nuses_total -= b->nuses;
    b->nuses = 0;
    mn__free_block(a, b);
  }
}

mn_mempool_t *mn__mempool_route(mn__caching_t *a, mn_stream_t *stream) {
  MN__ASSERT_LOCKED(a);
  MN__ASSERT(a->nroutes > 0, "a pool route asked for with no route set (check a->nroutes first)");
  if (a->routes && stream) {
    uint64_t cid = 0;
    if (mn__stream_capture_id(stream, &cid) == MN_OK && cid) {
      if (a->deferred) deferred_poll(a, stream, mn_stream_id(stream));
      for (mn__capture_route_t *r = a->routes; r; r = r->next)
        if (r->capture_id == cid) return r->mp;
    }
  }
  for (use_t *u = tls_uses; u; u = u->next)
    if (u->a == a) return u->mp;
  return NULL;
}

mn__block_t *mn__mempool_oom_block(mn__caching_t *a, uint64_t stream, size_t size, mn__pool_t **pool) {
  MN__ASSERT_LOCKED(a);
  for (mn_mempool_t *mp = a->mempools; mp; mp = mp->next) {
    if (!mp->use_on_oom || mp->captures || mp->graphs) continue;
    mn__pool_t *p = mn__pool_for(a, mp, size);
    mn__block_t *b = mn__get_free_block(a, p, stream, size);
    if (b) {
      *pool = p;
      return b;
    }
  }
  return NULL;
}

/* ---- per-pool statistics, snapshot, empty_cache ------------------------------------------ */

mn_status mn_mempool_get_stats(mn_mempool_t *mp, mn_alloc_stats_t *out) {
  MN__CHECK_ARG(mp != NULL && out != NULL, "pool and out must not be NULL");
  mn__caching_t *a = mp->a;
  lock(a);
  mn__stats_copy(&mp->stats, out);
  unlock(a);
  size_t m = a->cfg.max_split_size;
  out->max_split_size = m == SIZE_MAX ? -1 : m > (size_t)INT64_MAX ? INT64_MAX : (int64_t)m;
  return MN_OK;
}

mn_status mn_mempool_snapshot(mn_mempool_t *mp, mn_snapshot_t **out) {
  MN__CHECK_ARG(mp != NULL && out != NULL, "pool and out must not be NULL");
  return mn__caching_snapshot_of(mp->a, mp->id, true, out);
}

mn_status mn_mempool_empty_cache(mn_mempool_t *mp) {
  MN__CHECK_ARG(mp != NULL, "pool must not be NULL");
  mn__caching_t *a = mp->a;
  lock(a);
  if (mp->captures || mp->graphs) {
    unlock(a);
    return mn__error(MN_ERR_BUSY, __func__, "memory pool %llu: %s", (unsigned long long)mp->id,
                     mp->captures ? "a capture into it is under way"
                                  : "a graph captured into it is alive: its replays use the cached memory");
  }
  mn_status st = mn__release_cached(a, mp);
  unlock(a);
  mn__callbacks_flush(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- callbacks ----------------------------------------------------------------------- */

/* Adds or removes (fn, user) in a list under cb_lock. */
static mn_status cb_edit(const char *func, mn__caching_t *a, bool seg, void (*fn)(void), void *user, bool add) {
  if (!fn) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "fn must not be NULL");
  mn__callback_t **list = seg ? &a->seg_cbs : &a->mem_cbs;
  size_t *n = seg ? &a->nseg_cbs : &a->nmem_cbs;
  mn_status st = MN_OK;
  pthread_rwlock_wrlock(&a->cb_lock);
  size_t i = 0;
  while (i < *n && ((*list)[i].fn != fn || (*list)[i].user != user)) i++;
  if (add && i < *n) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "this (fn, user) pair is already registered");
  } else if (!add && i == *n) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "this (fn, user) pair is not registered");
  } else if (add) {
    mn__callback_t *grown = mn__realloc(*list, (*n + 1) * sizeof *grown);
    if (!grown) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
    } else {
      *list = grown;
      grown[(*n)++] = (mn__callback_t){fn, user};
    }
  } else {
    memmove(&(*list)[i], &(*list)[i + 1], (*n - i - 1) * sizeof **list);
    (*n)--;
  }
  /* what the allocator reads under its own lock */
  lock(a);
  if (seg) atomic_store_explicit(&a->has_seg_cbs, a->nseg_cbs > 0, memory_order_relaxed);
  else a->any_mem_cbs = a->nmem_cbs > 0;
  unlock(a);
  pthread_rwlock_unlock(&a->cb_lock);
  return st;
}

mn_status mn_caching_allocator_add_segment_callback(mn_allocator_t *al, mn_segment_callback_fn fn, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  return st != MN_OK ? st : cb_edit(__func__, a, true, (void (*)(void))fn, user, true);
}

mn_status mn_caching_allocator_remove_segment_callback(mn_allocator_t *al, mn_segment_callback_fn fn, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  return st != MN_OK ? st : cb_edit(__func__, a, true, (void (*)(void))fn, user, false);
}

mn_status mn_caching_allocator_add_free_memory_callback(mn_allocator_t *al, mn_free_memory_fn fn, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  return st != MN_OK ? st : cb_edit(__func__, a, false, (void (*)(void))fn, user, true);
}

mn_status mn_caching_allocator_remove_free_memory_callback(mn_allocator_t *al, mn_free_memory_fn fn, void *user) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  return st != MN_OK ? st : cb_edit(__func__, a, false, (void (*)(void))fn, user, false);
}

void mn__segment_event_queue(mn__caching_t *a, mn_segment_event ev, uintptr_t addr, size_t size, uint64_t pool_id,
                             uint64_t stream) {
  MN__ASSERT_LOCKED(a);
  if (a->ncbq == a->cap_cbq) {
    size_t cap = a->cap_cbq ? 2 * a->cap_cbq : 16;
    mn_segment_info_t *grown = mn__realloc(a->cbq, cap * sizeof *grown);
    if (!grown) return; /* no host memory: the event is not told (the allocator itself is unaffected) */
    a->cbq = grown;
    a->cap_cbq = cap;
  }
  a->cbq[a->ncbq++] = (mn_segment_info_t){.event = ev, .device = a->base.device, .address = addr, .size = size,
                                          .pool_id = pool_id, .stream_id = stream};
  atomic_store_explicit(&a->cbq_nonempty, true, memory_order_release);
}

void mn__callbacks_flush_slow(mn__caching_t *a) {
  pthread_rwlock_rdlock(&a->cb_lock);
  lock(a);
  mn_segment_info_t *events = a->cbq;
  size_t n = a->ncbq;
  a->cbq = NULL;
  a->ncbq = a->cap_cbq = 0;
  atomic_store_explicit(&a->cbq_nonempty, false, memory_order_relaxed);
  unlock(a);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < a->nseg_cbs; k++)
      ((mn_segment_callback_fn)a->seg_cbs[k].fn)(a->seg_cbs[k].user, &events[i]);
  pthread_rwlock_unlock(&a->cb_lock);
  free(events);
}

bool mn__free_memory_callbacks(mn__caching_t *a, size_t requested) {
  bool freed = false;
  pthread_rwlock_rdlock(&a->cb_lock);
  for (size_t k = 0; k < a->nmem_cbs; k++)
    freed |= ((mn_free_memory_fn)a->mem_cbs[k].fn)(a->mem_cbs[k].user, a->base.device, requested);
  pthread_rwlock_unlock(&a->cb_lock);
  return freed;
}

/* ---- capture into a pool -------------------------------------------------------------- */

static mn_status check_stream(const char *func, const mn_mempool_t *mp, mn_stream_t *stream) {
  if (!mp || !stream) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "pool and stream must not be NULL");
  mn_device_t sd = mn_stream_device(stream), pd = mp->a->base.device;
  if (!mn_device_equal(sd, pd)) {
    char s1[32], s2[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the stream is on %s, memory pool %llu on %s",
                     mn_device_format(sd, s1, sizeof s1), (unsigned long long)mp->id,
                     mn_device_format(pd, s2, sizeof s2));
  }
  return MN_OK;
}

mn_status mn_mempool_capture_begin(mn_mempool_t *mp, mn_stream_t *stream) {
  mn_status st = check_stream(__func__, mp, stream);
  if (st != MN_OK) return st;
  mn__capture_route_t *r = mn__calloc(1, sizeof *r);
  if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mn__caching_t *a = mp->a;
  /* counted before the capture starts: from here on no event is queried or recorded */
  lock(a);
  mp->captures++;
  a->ncaptures++;
  unlock(a);
  uint64_t cid = 0;
  st = mn_stream_begin_capture(stream);
  if (st == MN_OK) {
    st = mn__stream_capture_id(stream, &cid);
    if (st == MN_OK && cid == 0) st = mn__error(MN_ERR_INTERNAL, __func__, "a capturing stream reports no capture id");
    if (st != MN_OK) { /* undo the capture: its error is the one reported */
      mn_graph_t *g = NULL;
      if (mn_stream_end_capture(stream, &g) == MN_OK) mn__ignore(mn_graph_destroy(g));
    }
  }
  lock(a);
  if (st == MN_OK) {
    *r = (mn__capture_route_t){.capture_id = cid, .mp = mp, .next = a->routes};
    a->routes = r;
    a->nroutes++;
  } else {
    mp->captures--;
    a->ncaptures--;
  }
  unlock(a);
  if (st != MN_OK) {
    free(r);
    return mn__error_wrap(st, __func__);
  }
  return MN_OK;
}

/* Records the events of the deferred blocks (the captures are over), or
 * synchronizes a use stream whose event cannot be had (lock held: a failure
 * path). pre: lock held, a->ncaptures == 0. */
static void deferred_to_events(mn__caching_t *a) {
  while (a->deferred) {
    mn__block_t *b = a->deferred;
    a->deferred = b->spare_next;
    b->spare_next = NULL;
    b->deferred = false;
    for (uint32_t i = 0; i < b->nuses; i++) {
      mn_event_t *e = NULL;
      mn__pending_t *p = NULL;
      if (mn__use_event_record(a, b->uses[i].stream, &e, &p)) {
        *p = (mn__pending_t){.event = e, .block = b, .stream_id = b->uses[i].id};
        mn__pending_append(a, p);
        b->event_count++;
      } else {
        mn__ignore(mn_stream_synchronize(b->uses[i].stream)); /* failed: the block's later reuse is what is left */
      }
      mn__stream_unhold(b->uses[i].stream);
    }
    a->nuses_total -= b->nuses;
    b->nuses = 0;
    if (b->event_count == 0) mn__free_block(a, b);
  }
}

mn_status mn__free_deferred(mn__caching_t *a, mn__block_t *b, mn__lane_t *lane, mn__addrmap_entry_t *live) {
  MN__ASSERT_LOCKED(a);
  MN__ASSERT(a->ncaptures > 0 && b->nuses > 0, "a deferred free with no capture under way (%u) or no stream use (%u)",
             (unsigned)a->ncaptures, (unsigned)b->nuses);
  MN__ASSERT(live != NULL && live->data == b, "a deferred free whose map entry is not its block's");
  for (uint32_t i = 0; i < b->nuses; i++) {
    uint64_t cid = 0, m = 0;
    if (mn__stream_capture_id(b->uses[i].stream, &cid) == MN_OK && cid &&
        mn__capture_marker(b->uses[i].stream, &m) != MN_OK)
      m = 0; /* no marker: reused only once the captures end */
    b->uses[i].marker = m;
  }
  mn__addrmap_remove_entry(&lane->live, live);
  mn__unallocate(a, b);
  b->deferred = true;
  b->spare_next = a->deferred;
  a->deferred = b;
  unlock(a);
  return MN_OK;
}

/* A graph captured into mp is destroyed: the last one gives the pool's
 * unused cached segments back (outside captures). */
static void graph_released(void *arg) {
  mn_mempool_t *mp = arg;
  mn__caching_t *a = mp->a;
  lock(a);
  mp->graphs--;
  if (mp->graphs == 0 && mp->captures == 0 && a->ncaptures == 0) mn__ignore(mn__release_cached(a, mp));
  unlock(a);
  mn__callbacks_flush(a);
}

mn_status mn_mempool_capture_end(mn_mempool_t *mp, mn_stream_t *stream, mn_graph_t **out) {
  mn_status st = check_stream(__func__, mp, stream);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn__caching_t *a = mp->a;
  uint64_t cid = 0;
  st = mn__stream_capture_id(stream, &cid);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  lock(a);
  mn__capture_route_t **pr = &a->routes;
  while (*pr && ((*pr)->capture_id != cid || (*pr)->mp != mp || cid == 0)) pr = &(*pr)->next;
  bool found = *pr != NULL;
  unlock(a);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "the stream is not capturing into memory pool %llu",
                     (unsigned long long)mp->id);
  mn_graph_t *g = NULL;
  st = mn_stream_end_capture(stream, &g);
  if (st != MN_OK) {
    uint64_t now = 0; /* refused with the capture still going (ended on a joined stream...): routing stays */
    if (mn__stream_capture_id(stream, &now) == MN_OK && now == cid) return mn__error_wrap(st, __func__);
  }
  if (st == MN_OK) {
    st = mn__graph_on_destroy(g, graph_released, mp);
    if (st != MN_OK) {
      mn__ignore(mn_graph_destroy(g)); /* the hook's failure is what is reported */
      g = NULL;
    }
  }
  lock(a);
  pr = &a->routes; /* other captures may have come and gone meanwhile */
  while (*pr && ((*pr)->capture_id != cid || (*pr)->mp != mp)) pr = &(*pr)->next;
  mn__capture_route_t *r = *pr;
  *pr = r->next;
  free(r);
  a->nroutes--;
  mp->captures--;
  a->ncaptures--;
  if (st == MN_OK) mp->graphs++;
  if (a->ncaptures == 0) deferred_to_events(a);
  unlock(a);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = g;
  return MN_OK;
}
