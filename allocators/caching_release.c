/* allocators/caching_release.c: pending frees (stream events: polled, waited for) and giving
 * memory back (release, garbage collection). Threading: allocator lock held; dropped to wait or free. */
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

#define SYNC_RETRIES 3

static void lock(mn__caching_t *a) { mn__caching_lock(a); }
static void unlock(mn__caching_t *a) { mn__caching_unlock(a); }

/* ---- events ------------------------------------------------------------------------ */

static mn_event_t *event_get(mn__caching_t *a) {
  if (a->nevents) return a->events[--a->nevents];
  mn_event_t *e = NULL;
  return mn_event_create(a->base.device, &e) == MN_OK ? e : NULL;
}

void mn__event_put(mn__caching_t *a, mn_event_t *e) {
  if (a->nevents == a->cap_events) {
    size_t cap = a->cap_events ? 2 * a->cap_events : 16;
    mn_event_t **grown = mn__realloc(a->events, cap * sizeof *grown);
    if (!grown) {
      mn__ignore(mn_event_destroy(e)); /* no room to pool it: a spare, idle event */
      return;
    }
    a->events = grown;
    a->cap_events = cap;
  }
  a->events[a->nevents++] = e;
}

static mn__pending_t *pending_take(mn__caching_t *a) {
  mn__pending_t *p = a->spare_pending;
  if (p) a->spare_pending = p->next;
  else p = mn__malloc(sizeof *p);
  return p;
}

void mn__pending_put(mn__caching_t *a, mn__pending_t *p) {
  p->next = a->spare_pending;
  a->spare_pending = p;
}

bool mn__use_event_record(mn__caching_t *a, mn_stream_t *stream, mn_event_t **event, mn__pending_t **entry) {
  mn_event_t *e = event_get(a);
  mn__pending_t *p = e ? pending_take(a) : NULL;
  if (p && mn_event_record(e, stream) == MN_OK) {
    *event = e;
    *entry = p;
    return true;
  }
  if (e) mn__event_put(a, e);
  if (p) mn__pending_put(a, p);
  return false;
}

/* The queue map's key of a stream (never 0, which marks an empty slot). */
static uintptr_t qkey(uint64_t stream_id) { return (uintptr_t)stream_id + 1; }

void mn__pending_append(mn__caching_t *a, mn__pending_t *p) {
  p->next = NULL;
  a->poll_quiet = 0; /* a new event may be done already */
  a->npending++;
  mn__addrmap_entry_t *e = mn__addrmap_find(&a->qmap, qkey(p->stream_id));
  if (e) {
    mn__pending_t *h = e->data;
    h->qtail->next = p;
    h->qtail = p;
    return;
  }
  /* The first of its stream: a new queue, polled after the others. Room
   * was kept when the use was recorded (nuses_total counts it still). */
  mn__pending_t *first = a->queues;
  MN__ASSERT((a->qmap.count + 1) * 4 <= a->qmap.cap * 3, "no room kept for a new pending queue");
  mn__addrmap_put(&a->qmap, qkey(p->stream_id), 0, p);
  p->qtail = p;
  if (!first) { /* the first pending free: polled by the next allocation */
    p->qnext = p->qprev = p;
    a->queues = p;
    a->poll_every = 1;
    a->poll_wait = 0;
    return;
  }
  p->qnext = first;
  p->qprev = first->qprev;
  first->qprev->qnext = p;
  first->qprev = p;
}

/* Takes the queue head h off the ring, or (nh: its queue's next entry) puts
 * nh in its place. */
static void queue_replace(mn__caching_t *a, mn__pending_t *h, mn__pending_t *nh) {
  bool alone = h->qnext == h;
  mn__addrmap_entry_t *e = mn__addrmap_find(&a->qmap, qkey(h->stream_id));
  if (nh) {
    e->data = nh;
    nh->qtail = h->qtail;
    if (alone) {
      nh->qnext = nh->qprev = nh;
    } else {
      nh->qnext = h->qnext;
      nh->qprev = h->qprev;
      nh->qprev->qnext = nh;
      nh->qnext->qprev = nh;
    }
    if (a->queues == h) a->queues = nh;
    return;
  }
  mn__addrmap_remove_entry(&a->qmap, e);
  if (alone) {
    a->queues = NULL;
    return;
  }
  h->qprev->qnext = h->qnext;
  h->qnext->qprev = h->qprev;
  if (a->queues == h) a->queues = h->qnext;
}

mn__pending_t *mn__pending_detach_all(mn__caching_t *a) {
  mn__pending_t *list = NULL, **end = &list;
  for (size_t i = 0, n = a->qmap.count; i < n; i++) {
    mn__pending_t *h = a->queues;
    a->queues = h->qnext;
    (void)mn__addrmap_remove(&a->qmap, qkey(h->stream_id), NULL);
    *end = h;
    end = &h->qtail->next;
  }
  a->queues = NULL;
  a->npending = 0;
  return list;
}

/* PyTorch's free_block: merge with free neighbours, cache, update the counters. */
void mn__free_block(mn__caching_t *a, mn__block_t *b) {
  MN__ASSERT_LOCKED(a);
  if (b->share && mn__share_park(a, b)) return; /* importers still hold it: parked */
  mn__trace(a, MN_TRACE_FREE_COMPLETED, b->stream_id, b->addr, b->size, b->requested);
  size_t orig_size = b->size, requested = b->requested;
  mn__free_plan_t f = mn__free_plan(b);
  int64_t net_blocks = f.net_blocks, net_bytes = f.net_bytes;
  mn__free_merge(b, &f, &a->spares, MN__SPARE_BLOCKS_MAX);
  b->requested = 0;
  mn__pool_insert(b->pool, b);
  mn_alloc_stats_t *ps = MN__POOL_STATS(b->pool);
  int kind = b->pool->kind;
  /* As PyTorch, expandable segments are left out of inactive_split. */
  if (!b->seg->expandable) {
    if (net_blocks > 0) MN__STAT2_ADD(a, ps, inactive_split, kind, net_blocks);
    else if (net_blocks < 0) MN__STAT2_SUB(a, ps, inactive_split, kind, -net_blocks);
    if (net_bytes > 0) MN__STAT2_ADD(a, ps, inactive_split_bytes, kind, net_bytes);
    else if (net_bytes < 0) MN__STAT2_SUB(a, ps, inactive_split_bytes, kind, -net_bytes);
  } else {
    a->exp_epoch++;
  }
#define MN__FREED_STATS(st)                                                \
  do {                                                                     \
    MN__STAT_SUB_FROM(st, active, kind, 1);                                 \
    MN__STAT_SUB_FROM(st, active_bytes, kind, (int64_t)orig_size);          \
    MN__STAT_SUB_FROM(st, requested_bytes, kind, (int64_t)requested);       \
  } while (0)
  MN__FREED_STATS(&a->stats);
  if (__builtin_expect(ps != NULL, 0)) MN__FREED_STATS(ps); /* one test for the three */
#undef MN__FREED_STATS
}

/* Retires the completed events at the head of queue h, in record order,
 * stopping at the first not done (a failed query counts as not done yet).
 * Whether any was retired. */
static bool queue_retire(mn__caching_t *a, mn__pending_t *h) {
  bool any = false;
  for (;;) {
    bool done = false;
    /* not done when last asked, and nothing ran on the device since: not done */
    uint64_t progress = mn__event_progress(h->event);
    if (progress && progress == h->quiet) return any;
    if (mn_event_query(h->event, &done) != MN_OK) {
      a->query_failed = true; /* "not yet", but not known: asked again at the next poll */
      return any;
    }
    if (!done) {
      h->quiet = progress;
      return any;
    }
    mn__pending_t *nh = h->next; /* the queue's new head, or the queue goes */
    queue_replace(a, h, nh);
    a->npending--;
    mn__block_t *b = h->block;
    mn__event_put(a, h->event);
    mn__pending_put(a, h);
    if (--b->event_count == 0) mn__free_block(a, b);
    any = true;
    if (!nh) return true;
    h = nh;
  }
}

/* Polls back off while they find nothing, and come back to every allocation
 * as soon as an event is retired or few streams are left. */
static void poll_interval(mn__caching_t *a, bool retired) {
  if (retired || a->qmap.count <= MN__POLL_ALL_MAX) a->poll_every = 1;
  else if (a->poll_every < MN__POLL_EVERY_MAX) a->poll_every = a->poll_every ? 2 * a->poll_every : 1;
  a->poll_wait = a->poll_every - 1;
}

/* Few streams: all of them. Else one, in turn: the ring turns first, so the
 * next poll asks the next stream whatever this one retires. O(1 + events
 * retired) beyond MN__POLL_ALL_MAX streams. */
void mn__poll_events_slow(mn__caching_t *a) {
  if (a->ncaptures) { /* no event queries while a capture is under way (as PyTorch) */
    poll_interval(a, false);
    return;
  }
  if (a->qmap.count <= MN__POLL_ALL_MAX) {
    uint64_t progress = mn__device_progress(a->base.device);
    if (!progress || progress != a->poll_quiet) { /* else nothing could have completed */
      a->query_failed = false;
      bool any = mn__process_events_all(a);
      a->poll_quiet = any || a->query_failed ? 0 : progress;
    }
    poll_interval(a, true);
    return;
  }
  mn__pending_t *h = a->queues;
  a->queues = h->qnext;
  poll_interval(a, queue_retire(a, h));
}

/* Every stream once, from the next to poll. Retiring a queue changes only its
 * own place in the ring (its new head, or it leaves), so the successor taken
 * before stays valid. O(streams with pending events + events retired). */
bool mn__process_events_all(mn__caching_t *a) {
  if (a->ncaptures || !a->queues) return false; /* no event queries during a capture (as PyTorch) */
  bool any = false;
  mn__pending_t *h = a->queues;
  for (size_t i = 0, n = a->qmap.count; i < n; i++) {
    mn__pending_t *next = h->qnext;
    any |= queue_retire(a, h);
    h = next;
  }
  if (any) poll_interval(a, true);
  return any;
}

/* Waits for every outstanding event (lock dropped while waiting), then frees
 * their blocks. A failed wait leaves its block pending and is reported. */
static mn_status sync_and_free_events(mn__caching_t *a) {
  a->stats.num_sync_all_streams++;
  mn__pending_t *list = mn__pending_detach_all(a);
  if (!list) return MN_OK;
  size_t n = 0;
  for (mn__pending_t *p = list; p; p = p->next) n++;
  a->pending_waited += n;
  unlock(a);
  mn_status first = MN_OK;
  for (mn__pending_t *p = list; p; p = p->next) {
    p->failed = mn_event_synchronize(p->event) != MN_OK;
    if (p->failed && first == MN_OK) first = mn_last_status();
  }
  lock(a);
  a->pending_waited -= n;
  while (list) {
    mn__pending_t *p = list;
    list = p->next;
    if (p->failed) {
      mn__pending_append(a, p);
      continue;
    }
    mn__block_t *b = p->block;
    mn__event_put(a, p->event);
    mn__pending_put(a, p);
    if (--b->event_count == 0) mn__free_block(a, b);
  }
  return first;
}

/* ---- releasing segments ------------------------------------------------------------ */

/* Takes a whole, unused raw segment out of the allocator (freed later by do_release). */
static void release_block(mn__caching_t *a, mn__block_t *b, mn__release_t *rel) {
  mn__segment_t *s = b->seg;
  mn__pool_remove(b->pool, b);
  a->stats.num_device_free++;
  mn__trace(a, MN_TRACE_SEGMENT_FREE, s->stream_id, s->base, s->size, 0);
  mn__segment_event(a, MN_SEGMENT_FREE, s->base, s->size, s->pool_id, s->stream_id);
  a->reserved -= s->size;
  MN__STAT_SUB(a, segment, b->pool, 1);
  MN__STAT_SUB(a, reserved_bytes, b->pool, (int64_t)s->size);
  if (s->size >= a->cfg.max_split_size) mn__stat_dec(&a->stats.oversize_segments, 1);
  mn__segment_unlink(a, s);
  mn__fset_release(&s->pool->fs, s->sb);
  s->sb = NULL;
  /* the segment's record goes with it (alloc_block makes a fresh pair), so
   * the spare list does not grow by one block per segment released */
  free(b->uses);
  free(b);
  s->head = NULL;
  s->next_seg = rel->raw;
  rel->raw = s;
}

/* Gives the released segments back to the device; pre: lock held, dropped inside. */
mn_status mn__do_release(mn__caching_t *a, mn__release_t *rel) {
  MN__ASSERT_LOCKED(a);
  if (!rel->raw && !rel->va) return MN_OK;
  mn__segment_t *raw = rel->raw, *va = rel->va;
  rel->raw = rel->va = NULL;
  unlock(a);
  mn__callbacks_flush(a); /* the segments' free callbacks run before the memory goes */
  mn_status first = MN_OK;
  bool synced = false;
  while (raw) {
    mn__segment_t *s = raw;
    raw = s->next_seg;
    mn_status st;
    if (s->src.alloc) { /* a memory pool's source: the device synchronized first, as cudaFree would */
      st = synced ? MN_OK : mn_device_synchronize(a->base.device);
      synced = st == MN_OK;
      if (st == MN_OK) {
        st = s->src.free(s->src.user, a->base.device, (void *)s->base, s->size);
        if (st != MN_OK) st = mn__error_wrap(st, "mempool source free");
      }
    } else {
      st = mn_device_raw_free(a->base.device, (void *)s->base);
    }
    if (st != MN_OK && first == MN_OK) first = st;
    free(s);
  }
  while (va) {
    mn__segment_t *s = va;
    va = s->next_seg;
    mn_status st = mn_device_va_release(a->base.device, (void *)s->base, s->size);
    if (st != MN_OK && first == MN_OK) first = st;
    mn__expandable_segment_free(a, s);
  }
  lock(a);
  return first;
}


/* Frees cached oversize blocks on the request's stream: one that is big enough,
 * else the largest ones until their sizes add up (PyTorch's release_available_cached_blocks). */
bool mn__release_available(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size,
                              mn__release_t *rel) {
  size_t max_split = a->cfg.max_split_size;
  if (max_split == SIZE_MAX) return false;
  size_t want = size < max_split ? max_split : size;
  mn__sbins_t *sb = mn__fset_find(&pool->fs, stream);
  if (!sb) return false;
  mn__tnode_t *n = mn__fset_lower_bound(&pool->fs, sb, want);
  if (n) {
    mn__block_t *b = (mn__block_t *)n;
    if (!mn__whole_raw_segment(b)) return false;
    release_block(a, b, rel);
    return true;
  }
  /* none big enough: the largest ones, from the stream's last block down */
  mn__tnode_t *m = mn__fset_last(&pool->fs, sb);
  size_t released = 0;
  while (m && released < want && m->key.size >= max_split) {
    mn__tnode_t *cur = m;
    m = mn__fset_prev(&pool->fs, sb, m); /* before cur goes, and with it maybe sb */
    mn__block_t *b = (mn__block_t *)cur;
    if (!mn__whole_raw_segment(b)) continue;
    released += b->size;
    release_block(a, b, rel);
  }
  return released >= want;
}

/* Unmaps whole free pages of expandable segments; the device is synchronized
 * first (lock dropped) and the unmap happens only if no expandable block was
 * handed out or freed meanwhile. Raw segments in rel are freed in that window. */
static mn_status release_expandable(mn__caching_t *a, mn__release_t *rel) {
  mn_status first = MN_OK;
  bool synced = false;
  for (int tries = 0; tries < SYNC_RETRIES && !synced && mn__expandable_has_unmappable(a); tries++) {
    uint64_t epoch = a->exp_epoch;
    mn_status st = mn__do_release(a, rel); /* drops the lock; raw frees drain the device too */
    if (st != MN_OK && first == MN_OK) first = st;
    unlock(a);
    st = mn_device_synchronize(a->base.device);
    lock(a);
    if (st != MN_OK) {
      if (first == MN_OK) first = st;
      break;
    }
    synced = a->exp_epoch == epoch;
  }
  mn__expandable_unmap_free(a, rel, synced);
  return first;
}

/* PyTorch's release_cached_blocks: wait for pending frees, then give back every
 * whole cached segment and every free page. pre: lock held (dropped inside). */
/* Moves every whole free raw segment of p onto rel. */
static void release_whole(mn__caching_t *a, mn__pool_t *p, mn__release_t *rel) {
  /* the whole free segments only, stream by stream: O(those), not O(every free block).
   * Releasing a stream's last segment frees its record: the slot is read again. */
  for (size_t i = 0; i < p->fs.cap; i++) {
    mn__sbins_t *sb;
    while ((sb = p->fs.slots[i]) != NULL && sb->whole) release_block(a, sb->whole, rel);
  }
}

mn_status mn__release_cached(mn__caching_t *a, mn_mempool_t *only) {
  if (a->ncaptures) return MN_OK; /* a capture under way: freeing memory would break it */
  if (a->share) mn__share_retry(a, true); /* parked blocks their importers let go of (or died holding) */
  mn_status first = sync_and_free_events(a);
  mn__release_t rel = {NULL, NULL};
  if (only) {
    release_whole(a, &only->large, &rel);
    release_whole(a, &only->small, &rel);
    mn_status st = mn__do_release(a, &rel);
    return first != MN_OK ? first : st;
  }
  release_whole(a, &a->large, &rel);
  release_whole(a, &a->small, &rel);
  if (a->exp_segments) {
    mn_status st = release_expandable(a, &rel);
    if (st != MN_OK && first == MN_OK) first = st;
  }
  mn_status st = mn__do_release(a, &rel);
  return first != MN_OK ? first : st;
}

/* PyTorch's garbage_collect_cached_blocks: above threshold * allowed memory,
 * free whole large cached segments, oldest (least recently reusable) first. */
void mn__garbage_collect(mn__caching_t *a) {
  size_t allowed = a->set_fraction ? a->allowed_max : a->total_memory;
  size_t threshold = (size_t)(a->cfg.garbage_collection_threshold * (double)allowed);
  if (a->reserved <= threshold) return;
  size_t target = a->reserved - threshold, reclaimed = 0;
  mn__pool_t *pool = &a->large;
  double total_age = 0;
  size_t count = 0;
  /* Only whole raw segments can go, and the order does not matter: a pass
   * releases every one at least as old as the average. They are listed per
   * stream; a pass takes them out onto `cand` first (a release may free a
   * stream's record and move the others' slots). */
  for (size_t i = 0; i < pool->fs.cap; i++)
    for (const mn__block_t *b = pool->fs.slots[i] ? pool->fs.slots[i]->whole : NULL; b; b = b->whole_next) {
      total_age += (double)(pool->get_free_calls - b->gc_count_base);
      count++;
    }
  mn__release_t rel = {NULL, NULL};
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    double age_threshold = total_age / (double)count;
    freed = false;
    mn__block_t *cand = NULL;
    for (size_t i = 0; i < pool->fs.cap; i++)
      for (mn__block_t *b = pool->fs.slots[i] ? pool->fs.slots[i]->whole : NULL; b; b = b->whole_next)
        if ((double)(pool->get_free_calls - b->gc_count_base) >= age_threshold) {
          b->spare_next = cand; /* unused while the block is free */
          cand = b;
        }
    while (cand) {
      mn__block_t *b = cand;
      cand = b->spare_next;
      b->spare_next = NULL;
      double age = (double)(pool->get_free_calls - b->gc_count_base);
      freed = true;
      reclaimed += b->size;
      total_age -= age;
      count--;
      release_block(a, b, &rel);
    }
  }
  mn__do_release(a, &rel);
}

