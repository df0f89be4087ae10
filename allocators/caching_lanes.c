/* allocators/caching_lanes.c: the caching allocator's lanes (caching_internal.h): one per
 * stream, its lock alone guarding that stream's cached pairs; the full lock (the allocator
 * lock, then every lane's), the fold of the lanes' counts into the statistics and the
 * dealing out of the peaks' room that keeps the peaks exact.
 * Threading: mn__caching_lock/unlock take and drop every lock; the other functions need
 * the full lock held. Lock order: the allocator lock, then the lanes in list order; a lane's
 * own path holds one lane lock and nothing else. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

static inline mn__lane_t *lane_next(const mn__lane_t *l) {
  return atomic_load_explicit(&((mn__lane_t *)l)->next, memory_order_relaxed);
}
static inline mn__lane_t *lanes_head(const mn__caching_t *a) {
  return atomic_load_explicit(&((mn__caching_t *)a)->lanes, memory_order_relaxed);
}

static mn_status spares_fill(mn__spares_t *sp, size_t n) {
  while (sp->n < n) {
    mn__block_t *b = mn__calloc_lines(sizeof *b);
    if (!b) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for block records");
    b->spare_next = sp->head;
    sp->head = b;
    sp->n++;
  }
  return MN_OK;
}

mn_status mn__spare_reserve_slow(mn__caching_t *a, size_t n) {
  for (mn__lane_t *l = lanes_head(a); l && a->spares.n < n; l = lane_next(l))
    mn__spares_move(&a->spares, &l->spares, n - a->spares.n);
  return spares_fill(&a->spares, n);
}

void mn__spares_free(mn__spares_t *sp) {
  while (sp->head) {
    mn__block_t *b = sp->head;
    sp->head = b->spare_next;
    free(b);
  }
  sp->n = 0;
}

/* Where the one or two statistics' fields of lane counter f lie in mn_alloc_stats_t. */
static const size_t first_off[MN__LF_COUNT] = {
#define MN__LF_OFF(lane, first, second) offsetof(mn_alloc_stats_t, first),
    MN__LANE_FIELDS(MN__LF_OFF)
#undef MN__LF_OFF
};
static const size_t second_off[MN__LF_COUNT] = {
#define MN__LF_OFF(lane, first, second) offsetof(mn_alloc_stats_t, second),
    MN__LANE_FIELDS(MN__LF_OFF)
#undef MN__LF_OFF
};
static inline mn_stat_t *stat_at(mn_alloc_stats_t *st, size_t off) { return (mn_stat_t *)((char *)st + off); }

/* The lane's counts into a->stats; what it had given back since the last
 * fold is remembered as its need (the next deal gives it that first). */
static void fold(mn__caching_t *a, mn__lane_t *l) {
  for (int f = 0; f < MN__LF_COUNT; f++) {
    mn_stat_t *s = stat_at(&a->stats, first_off[f]), *t = stat_at(&a->stats, second_off[f]);
    int64_t c0 = l->room[f][0] - l->left[f][0], c1 = l->room[f][1] - l->left[f][1], sum = c0 + c1;
    s[MN_POOL_SMALL].current += c0;
    s[MN_POOL_LARGE].current += c1;
    s[MN_POOL_SMALL].allocated += l->add[f][0];
    s[MN_POOL_LARGE].allocated += l->add[f][1];
    if (t != s) {
      t[MN_POOL_SMALL].current += c0;
      t[MN_POOL_LARGE].current += c1;
    }
    l->need[f][0] = c0 < 0 ? -c0 : 0;
    l->need[f][1] = c1 < 0 ? -c1 : 0;
    l->need[f][2] = sum < 0 ? -sum : 0;
  }
  memset(l->left, 0, sizeof l->left);
  memset(l->room, 0, sizeof l->room);
  memset(l->add, 0, sizeof l->add);
  l->dirty = false;
}

/* Room under the peaks of a stats field: small, large, their sum. */
static inline void slack_of(const mn_stat_t *s, int64_t out[3]) {
  int64_t cs = s[MN_POOL_SMALL].current, cl = s[MN_POOL_LARGE].current;
  out[0] = s[MN_POOL_SMALL].peak - cs;
  out[1] = s[MN_POOL_LARGE].peak - cl;
  out[2] = s[MN_POOL_ALL].peak - (cs + cl);
}

/* Each counter's room under its peaks, dealt to the lanes: a lane gets what
 * it gave back before the fold (its need) while room lasts, the rest is
 * shared evenly (a lane alone gets all of it). */
static void deal(mn__caching_t *a, mn__lane_t *head) {
  for (int f = 0; f < MN__LF_COUNT; f++) {
    int64_t slack[3], other[3];
    slack_of(stat_at(&a->stats, first_off[f]), slack);
    if (second_off[f] != first_off[f]) { /* the two move together on a lane: the smaller room */
      slack_of(stat_at(&a->stats, second_off[f]), other);
      for (int k = 0; k < 3; k++)
        if (other[k] < slack[k]) slack[k] = other[k];
    }
    if (a->nlanes == 1) {
      for (int k = 0; k < 3; k++) head->left[f][k] = head->room[f][k] = slack[k] > 0 ? slack[k] : 0;
      continue;
    }
    for (int k = 0; k < 3; k++) {
      int64_t left = slack[k] > 0 ? slack[k] : 0;
      for (mn__lane_t *l = head; l; l = lane_next(l)) {
        int64_t give = l->need[f][k] < left ? l->need[f][k] : left;
        l->room[f][k] = give;
        left -= give;
      }
      int64_t share = left / (int64_t)a->nlanes, rest = left % (int64_t)a->nlanes;
      for (mn__lane_t *l = head; l; l = lane_next(l)) {
        l->room[f][k] += share + rest;
        l->left[f][k] = l->room[f][k];
        rest = 0;
      }
    }
  }
}

void mn__caching_lock(mn__caching_t *a) {
  mn__lock(&a->lock);
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l)) {
    mn__lock(&l->lock);
    if (l->dirty) fold(a, l);
  }
}

#define SPARES_KEPT 8  /* block records the full path keeps; the rest go to lanes with fewer than */
#define SPARES_LANE 64

/* Moves the lanes whose stream holds no segment and no block from the list
 * onto a->retired (their locks still held). pre: full lock. */
static void retire_idle(mn__caching_t *a) {
  _Atomic(mn__lane_t *) *link = &a->lanes;
  mn__lane_t *l;
  while ((l = atomic_load_explicit(link, memory_order_relaxed)) != NULL) {
    if (l->sb[0] || l->sb[1] || l->live.count) {
      link = &l->next;
      continue;
    }
    /* off the list; its own next is kept, so a walk standing on it goes on */
    atomic_store_explicit(link, lane_next(l), memory_order_release);
    l->retired = true;
    l->retired_next = a->retired;
    a->retired = l;
    a->nlanes--;
  }
}

void mn__caching_unlock(mn__caching_t *a) {
  mn__lane_t *head = lanes_head(a);
  mn__lane_t *kept = a->retired; /* the lanes retired now (a->retired up to kept) are still locked */
  if (head) {
    uint64_t epoch = a->small.fs.epoch + a->large.fs.epoch;
    if (epoch != a->lanes_epoch) {
      for (mn__lane_t *l = head; l; l = lane_next(l)) {
        uint64_t sid = atomic_load_explicit(&l->stream, memory_order_relaxed);
        l->sb[0] = mn__fset_find(&a->small.fs, sid);
        l->sb[1] = mn__fset_find(&a->large.fs, sid);
      }
      a->lanes_epoch = epoch;
      retire_idle(a);
      head = lanes_head(a);
    }
    /* What a lane's path leaves to this one: routing (captures, memory
     * pools), pending frees to poll, the collector's clock, the recorder,
     * exported blocks to retry. */
    unsigned fast = 0;
    if (a->sink == NULL || a->sink_concurrent) {
      fast = MN__FAST_FREE;
      /* pending frees: only while few streams hold them (every allocation
       * polls all) and the last poll found the device idle since */
      bool quiet = a->queues == NULL ||
                   (a->qmap.count <= MN__POLL_ALL_MAX && a->poll_quiet != 0 && a->poll_wait == 0);
      if (quiet && a->nroutes == 0 && a->ncaptures == 0 && !mn__gc_enabled(a) && a->share == NULL) fast |= MN__FAST_ALLOC;
    }
    a->fast_quiet = a->queues ? a->poll_quiet : 0;
    atomic_store_explicit(&a->fast, fast, memory_order_relaxed);
    if (head && fast) deal(a, head); /* while not fast, no lane counts: dealt when it is again */
    /* Block records flow from the lanes' splits to the full path's merges:
     * what the full path gathered goes back to lanes running short. */
    for (mn__lane_t *l = head; l && a->spares.n > SPARES_KEPT; l = lane_next(l))
      if (l->spares.n < SPARES_LANE)
        mn__spares_move(&l->spares, &a->spares, SPARES_LANE - l->spares.n < a->spares.n - SPARES_KEPT
                                                    ? SPARES_LANE - l->spares.n
                                                    : a->spares.n - SPARES_KEPT);
    for (mn__lane_t *l = head; l; l = lane_next(l)) mn__unlock(&l->lock);
    for (mn__lane_t *l = a->retired; l != kept; l = l->retired_next) mn__unlock(&l->lock);
  }
  mn__unlock(&a->lock);
}

static mn__lane_t *lane_find(const mn__caching_t *a, uint64_t stream) {
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l))
    if (atomic_load_explicit(&l->stream, memory_order_relaxed) == stream) return l;
  return NULL;
}

mn_status mn__lane_reserve(mn__caching_t *a, uint64_t stream, mn__lane_t *hint, mn__lane_t **out) {
  MN__ASSERT_LOCKED(a);
  mn__lane_t *l = hint && !hint->retired && atomic_load_explicit(&hint->stream, memory_order_relaxed) == stream
                      ? hint
                      : lane_find(a, stream);
  bool listed = l != NULL;
  if (!l && a->retired) { /* a retired lane takes the stream */
    l = a->retired;
    mn__lock(&l->lock); /* a lookup may hold it (and find it retired) */
    a->retired = l->retired_next;
    l->retired_next = NULL;
    l->retired = false;
    memset(l->need, 0, sizeof l->need);
    memset(l->room, 0, sizeof l->room);
    memset(l->left, 0, sizeof l->left);
  } else if (!l) {
    l = mn__aligned_alloc(64, (sizeof *l + 63) / 64 * 64);
    if (!l) return mn__error(MN_ERR_OUT_OF_MEMORY, "caching_alloc", "out of host memory for a stream's lane");
    memset(l, 0, sizeof *l);
    mn__lock_init(&l->lock);
    mn__lock(&l->lock); /* held as every lane is under the full lock; its unlock drops it */
  }
  if (!listed) {
    atomic_store_explicit(&l->stream, stream, memory_order_relaxed);
    l->sb[0] = mn__fset_find(&a->small.fs, stream);
    l->sb[1] = mn__fset_find(&a->large.fs, stream);
    atomic_store_explicit(&l->next, lanes_head(a), memory_order_relaxed);
    atomic_store_explicit(&a->lanes, l, memory_order_release);
    a->nlanes++;
  }
  mn_status st = mn__addrmap_reserve(&l->live, 1);
  if (st != MN_OK) return mn__error_wrap(st, "caching_alloc");
  /* Block records flow from the lanes' splits to the full path's merges and
   * back: a lane out of them gets half of the full path's. */
  if (!l->spares.n && a->spares.n > 1) mn__spares_move(&l->spares, &a->spares, a->spares.n / 2);
  *out = l;
  return MN_OK;
}

mn__addrmap_entry_t *mn__live_find(const mn__caching_t *a, uintptr_t addr, mn__lane_t **lane) {
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l)) {
    mn__addrmap_entry_t *e = mn__addrmap_find(&l->live, addr);
    if (e) {
      *lane = l;
      return e;
    }
  }
  *lane = NULL;
  return NULL;
}

size_t mn__live_count(const mn__caching_t *a) {
  size_t n = 0;
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l)) n += l->live.count;
  return n;
}

mn_status mn__lanes_check(const mn__caching_t *a, char *why, size_t whysize) {
  size_t n = 0;
  for (const mn__lane_t *r = a->retired; r; r = r->retired_next)
    if (!r->retired || r->live.count || r->sb[0] || r->sb[1]) {
      snprintf(why, whysize, "a retired lane holds blocks or a free set");
      return MN_ERR_INTERNAL;
    }
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l)) {
    n++;
    uint64_t sid = atomic_load_explicit(&l->stream, memory_order_relaxed);
    if (l->retired) {
      snprintf(why, whysize, "stream %llu's lane is listed and retired", (unsigned long long)sid);
      return MN_ERR_INTERNAL;
    }
    for (int f = 0; f < MN__LF_COUNT; f++)
      for (int k = 0; k < 3; k++)
        if (l->left[f][k] != l->room[f][k] || (k < 2 && l->add[f][k])) {
          snprintf(why, whysize, "stream %llu's lane holds counts not folded into the statistics",
                   (unsigned long long)sid);
          return MN_ERR_INTERNAL;
        }
    for (int k = 0; k < 2; k++) {
      const mn__fset_t *fs = k ? &a->large.fs : &a->small.fs;
      const mn__sbins_t *want = NULL;
      for (size_t i = 0; i < fs->cap; i++)
        if (fs->slots[i] && fs->slots[i]->stream == sid) want = fs->slots[i];
      if (l->sb[k] != want) {
        snprintf(why, whysize, "stream %llu's lane names a stale %s free set", (unsigned long long)sid,
                 k ? "large" : "small");
        return MN_ERR_INTERNAL;
      }
    }
    for (size_t i = 0; i < l->live.cap; i++) {
      const mn__addrmap_entry_t *e = &l->live.slots[i];
      if (!e->key) continue;
      const mn__block_t *b = e->data;
      if (b->addr != e->key || b->stream_id != sid || !b->allocated) {
        snprintf(why, whysize, "stream %llu's lane maps %#lx to a block that is not its live block there",
                 (unsigned long long)sid, (unsigned long)e->key);
        return MN_ERR_INTERNAL;
      }
    }
  }
  if (n != a->nlanes) {
    snprintf(why, whysize, "%zu lanes listed, %zu counted", n, a->nlanes);
    return MN_ERR_INTERNAL;
  }
  return MN_OK;
}

void mn__lanes_trim(mn__caching_t *a) {
  mn__spares_free(&a->spares);
  for (mn__lane_t *l = lanes_head(a); l; l = lane_next(l)) mn__spares_free(&l->spares);
  for (mn__lane_t *r = a->retired; r; r = r->retired_next) {
    mn__lock(&r->lock); /* not held by the full lock; a stale lookup may hold it */
    mn__spares_free(&r->spares);
    mn__unlock(&r->lock);
  }
}

static void lane_free(mn__lane_t *l) {
  mn__addrmap_fini(&l->live);
  mn__spares_free(&l->spares);
  free(l);
}

void mn__lanes_free(mn__caching_t *a) {
  mn__lane_t *l = lanes_head(a);
  while (l) {
    mn__lane_t *next = lane_next(l);
    lane_free(l);
    l = next;
  }
  while (a->retired) {
    mn__lane_t *r = a->retired;
    a->retired = r->retired_next;
    lane_free(r);
  }
  atomic_store_explicit(&a->lanes, NULL, memory_order_relaxed);
  a->nlanes = 0;
}
