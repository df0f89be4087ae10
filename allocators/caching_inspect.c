/* allocators/caching_inspect.c: caching-allocator statistics, snapshots, invariant checks and
 * the OOM message. Threading: each entry takes the allocator lock (the OOM message expects it). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

static mn__caching_t *as_caching(mn_allocator_t *self) { return (mn__caching_t *)self; }

void mn__caching_stats_copy(const mn__caching_t *a, mn_alloc_stats_t *out) {
  MN__ASSERT_LOCKED((mn__caching_t *)a);
  mn__stats_copy(&a->stats, out);
}

void mn__stats_copy(const mn_alloc_stats_t *kept, mn_alloc_stats_t *out) {
  *out = *kept;
  for (int k = MN_POOL_SMALL; k <= MN_POOL_LARGE; k++) { /* caching_internal.h: not kept */
    out->active[k].allocated = out->allocation[k].allocated;
    out->active_bytes[k].allocated = out->allocated_bytes[k].allocated;
  }
#define MN__SUM_POOLS(name, text)                                                                  \
  out->name[MN_POOL_ALL].current = mn__stat_all_current(out, name);                              \
  out->name[MN_POOL_ALL].allocated = out->name[MN_POOL_SMALL].allocated + out->name[MN_POOL_LARGE].allocated; \
  for (int k = 0; k < MN_POOL_COUNT; k++) out->name[k].freed = out->name[k].allocated - out->name[k].current;
  MN_ALLOC_STATS_MAP(MN__SUM_POOLS)
#undef MN__SUM_POOLS
}

mn_status mn__caching_get_stats(mn_allocator_t *self, mn_alloc_stats_t *out) {
  mn__caching_t *a = as_caching(self);
  uint32_t size = out->size, version = out->version;
  mn__caching_lock(a);
  mn__caching_stats_copy(a, out);
  mn__caching_unlock(a);
  out->size = size;
  out->version = version;
  size_t m = a->cfg.max_split_size;
  out->max_split_size = m == SIZE_MAX ? -1 : m > (size_t)INT64_MAX ? INT64_MAX : (int64_t)m;
  return MN_OK;
}

static void reset_peaks(mn_alloc_stats_t *s) {
  for (int k = 0; k < MN_POOL_COUNT; k++) {
#define MN__RESET_PEAK(name, text) s->name[k].peak = k == MN_POOL_ALL ? mn__stat_all_current(s, name) : s->name[k].current;
    MN_ALLOC_STATS_MAP(MN__RESET_PEAK)
#undef MN__RESET_PEAK
  }
  s->oversize_allocations.peak = s->oversize_allocations.current;
  s->oversize_segments.peak = s->oversize_segments.current;
}

mn_status mn__caching_reset_peak(mn_allocator_t *self) {
  mn__caching_t *a = as_caching(self);
  mn__caching_lock(a);
  reset_peaks(&a->stats);
  for (mn_mempool_t *mp = a->mempools; mp; mp = mp->next) reset_peaks(&mp->stats);
  mn__caching_unlock(a);
  return MN_OK;
}

/* ---- snapshot ------------------------------------------------------------------------- */

static mn_block_state state_of(const mn__block_t *b) {
  if (b->allocated) return MN_BLOCK_ACTIVE;
  if (b->event_count > 0 || b->nuses > 0 || mn__block_parked(b)) return MN_BLOCK_ACTIVE_PENDING_FREE;
  return MN_BLOCK_INACTIVE;
}

static int by_address(const void *x, const void *y) {
  const mn_snapshot_segment_t *a = x, *b = y;
  return a->address < b->address ? -1 : a->address > b->address;
}

/* One snapshot segment from the run of mapped blocks starting at b (a raw
 * segment is one run; an expandable one has a run per mapped stretch, as PyTorch). */
static bool snap_run(const mn__caching_t *a, const mn__block_t *b, mn_snapshot_segment_t *out) {
  size_t n = 0;
  for (const mn__block_t *x = b; x && x->mapped; x = x->next) n++;
  *out = (mn_snapshot_segment_t){.device = a->base.device, .address = b->addr, .stream_id = b->stream_id,
                                 .is_large = !b->pool->is_small, .is_expandable = b->seg->expandable,
                                 .pool_id = b->seg->pool_id};
  out->blocks = mn__calloc(n, sizeof *out->blocks);
  if (!out->blocks) return false;
  for (const mn__block_t *x = b; x && x->mapped; x = x->next) {
    mn_snapshot_block_t *sb = &out->blocks[out->nblocks++];
    sb->address = x->addr;
    sb->size = x->size;
    sb->state = state_of(x);
    sb->requested_size = sb->state == MN_BLOCK_INACTIVE ? 0 : x->requested;
    out->total_size += x->size;
    if (sb->state == MN_BLOCK_ACTIVE) out->allocated_size += x->size;
    if (sb->state != MN_BLOCK_INACTIVE) {
      out->active_size += x->size;
      out->requested_size += x->requested;
    }
  }
  return true;
}

mn_status mn__caching_snapshot(mn_allocator_t *self, mn_snapshot_t **out) {
  return mn__caching_snapshot_of(as_caching(self), 0, false, out);
}

mn_status mn__caching_snapshot_of(mn__caching_t *a, uint64_t pool_id, bool filter, mn_snapshot_t **out) {
  mn_snapshot_t *snap = mn__calloc(1, sizeof *snap);
  if (!snap) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mn__caching_lock(a);
  size_t runs = 0;
  for (mn__segment_t *s = a->segments; s; s = s->next_seg)
    for (mn__block_t *b = s->head; b && (!filter || s->pool_id == pool_id); b = b->next)
      runs += b->mapped && (!b->prev || !b->prev->mapped);
  snap->segments = mn__calloc(runs ? runs : 1, sizeof *snap->segments);
  bool ok = snap->segments != NULL;
  for (mn__segment_t *s = a->segments; ok && s; s = s->next_seg)
    for (mn__block_t *b = s->head; ok && b && (!filter || s->pool_id == pool_id); b = b->next)
      if (b->mapped && (!b->prev || !b->prev->mapped)) ok = snap_run(a, b, &snap->segments[snap->nsegments++]);
  mn__caching_unlock(a);
  if (!ok) {
    mn_snapshot_free(snap);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  qsort(snap->segments, snap->nsegments, sizeof *snap->segments, by_address);
  *out = snap;
  return MN_OK;
}

/* ---- invariants ------------------------------------------------------------------------ */

typedef struct tally_s {
#define MN__TALLY_FIELD(name, text) int64_t name[MN_POOL_COUNT];
  MN_ALLOC_STATS_MAP(MN__TALLY_FIELD)
#undef MN__TALLY_FIELD
  int64_t oversize_allocations, oversize_segments;
  size_t allocated, events, segments, exp_segments, deferred;
  size_t uses; /* stream uses listed by the blocks */
} tally_t;

#define BROKEN(...) return mn__error(MN_ERR_INTERNAL, "check_invariants", __VA_ARGS__)

static void add(int64_t *field, int kind, int64_t v) {
  field[MN_POOL_ALL] += v;
  field[kind] += v;
}

static mn_status check_block(const mn__caching_t *a, const mn__segment_t *s, const mn__block_t *b, tally_t *t) {
  const mn__pool_t *pool = s->pool;
  unsigned long addr = (unsigned long)b->addr;
  int kind = pool->kind;
  if (b->seg != s || b->pool != pool || b->stream_id != s->stream_id)
    BROKEN("block %#lx: segment, pool or stream differ from its segment's", addr);
  if (b->size == 0 || (b->mapped && b->size % MN__MIN_BLOCK))
    BROKEN("block %#lx: size %zu is not a positive multiple of 512", addr, b->size);
  if (!b->mapped && !s->expandable) BROKEN("block %#lx: unmapped inside a raw segment", addr);
  t->uses += b->nuses;
  if (b->allocated || b->event_count > 0 || b->deferred || mn__block_parked(b)) {
    if (b->where != MN__IN_NONE) BROKEN("block %#lx: active but in a free set", addr);
    if (!b->mapped) BROKEN("block %#lx: active but unmapped", addr);
    add(t->active, kind, 1);
    add(t->active_bytes, kind, (int64_t)b->size);
    add(t->requested_bytes, kind, (int64_t)b->requested);
  }
  if (b->allocated) {
    if (b->event_count) BROKEN("block %#lx: allocated with %d pending events", addr, b->event_count);
    if (!b->freeing && mn__live_block(a, b->addr) != b) BROKEN("block %#lx: allocated but not in the pointer map", addr);
    t->allocated++;
    add(t->allocation, kind, 1);
    add(t->allocated_bytes, kind, (int64_t)b->size);
    if (b->size >= a->cfg.max_split_size) t->oversize_allocations++;
  } else if (b->event_count > 0) {
    if (b->nuses) BROKEN("block %#lx: pending free still lists %u stream uses", addr, b->nuses);
    t->events += (size_t)b->event_count;
  } else if (b->deferred) {
    if (!b->nuses) BROKEN("block %#lx: deferred (freed in a capture) without stream uses", addr);
    t->deferred++;
  } else if (mn__block_parked(b)) {
    if (b->nuses) BROKEN("block %#lx: parked for its importers but lists %u stream uses", addr, b->nuses);
  } else {
    if (b->nuses) BROKEN("block %#lx: free but lists %u stream uses", addr, b->nuses);
    if (b->requested) BROKEN("block %#lx: free but keeps requested size %zu", addr, b->requested);
    mn__key_t key = {b->stream_id, b->mapped ? b->size : 0, b->addr};
    if (b->where != (b->mapped ? MN__IN_FREE : MN__IN_UNMAPPED) || mn__key_cmp(&b->node.key, &key) != 0 ||
        !s->sb || s->sb->stream != s->stream_id ||
        !(b->mapped ? mn__fset_contains(&pool->fs, s->sb, &b->node) : mn__tree_contains(&s->sb->unmapped, &b->node)))
      BROKEN("block %#lx (size %zu, stream %llu): free but not in its %s set under its key", addr, b->size,
             (unsigned long long)b->stream_id, b->mapped ? "free" : "unmapped");
    if (b->mapped && !s->expandable && (b->prev || b->next)) {
      add(t->inactive_split, kind, 1);
      add(t->inactive_split_bytes, kind, (int64_t)b->size);
    }
    if (b->prev && mn__block_inactive(b->prev) && b->prev->mapped == b->mapped)
      BROKEN("blocks %#lx and %#lx: two neighbouring free blocks were not merged", (unsigned long)b->prev->addr, addr);
  }
  if (s->expandable) {
    size_t off = b->addr - s->base, p0 = off / s->page, p1 = (off + b->size - 1) / s->page;
    if (!b->mapped && (off % s->page || b->size % s->page))
      BROKEN("block %#lx: unmapped range not page-aligned", addr);
    for (size_t k = p0; k <= p1; k++)
      if (s->page_mapped[k] != b->mapped)
        BROKEN("block %#lx: page %zu is %smapped but the block is %smapped", addr, k, s->page_mapped[k] ? "" : "un",
               b->mapped ? "" : "un");
  }
  return MN_OK;
}

static mn_status check_segment(const mn__caching_t *a, const mn__segment_t *s, tally_t *t) {
  unsigned long base = (unsigned long)s->base;
  bool known = s->pool == &a->small || s->pool == &a->large;
  for (const mn_mempool_t *mp = a->mempools; mp && !known; mp = mp->next)
    known = s->pool == &mp->small || s->pool == &mp->large;
  if (!known) BROKEN("segment %#lx: unknown pool", base);
  if (s->pool_id != (s->pool->mp ? s->pool->mp->id : 0))
    BROKEN("segment %#lx: pool id %llu is not its pool's", base, (unsigned long long)s->pool_id);
  if (s->pool->mp && s->expandable) BROKEN("segment %#lx: an expandable segment in a memory pool", base);
  if (!s->head || s->head->prev) BROKEN("segment %#lx: bad first block", base);
  if (!s->sb || s->sb->stream != s->stream_id || s->sb->nsegs == 0)
    BROKEN("segment %#lx: its stream's free-set record is missing or another stream's", base);
  uintptr_t cursor = s->base;
  const mn__block_t *prev = NULL;
  for (const mn__block_t *b = s->head; b; prev = b, b = b->next) {
    if (b->prev != prev) BROKEN("segment %#lx: block %#lx has a wrong prev link", base, (unsigned long)b->addr);
    if (b->addr != cursor)
      BROKEN("segment %#lx: block at %#lx where %#lx was expected (gap or overlap)", base, (unsigned long)b->addr,
             (unsigned long)cursor);
    if (b->size > s->base + s->size - cursor) BROKEN("segment %#lx: block %#lx runs past its end", base, (unsigned long)b->addr);
    mn_status st = check_block(a, s, b, t);
    if (st != MN_OK) return st;
    cursor += b->size;
  }
  if (cursor != s->base + s->size)
    BROKEN("segment %#lx: blocks cover %zu of its %zu bytes", base, (size_t)(cursor - s->base), s->size);
  int kind = s->pool->kind;
  if (s->expandable) {
    size_t mapped = 0;
    for (size_t k = 0; k < s->npages; k++) mapped += s->page_mapped[k];
    if (mapped != s->mapped_pages) BROKEN("segment %#lx: %zu pages mapped, %zu counted", base, mapped, s->mapped_pages);
    add(t->reserved_bytes, kind, (int64_t)(mapped * s->page));
    t->exp_segments++;
  } else {
    add(t->segment, kind, 1);
    add(t->reserved_bytes, kind, (int64_t)s->size);
    if (s->size >= a->cfg.max_split_size) t->oversize_segments++;
  }
  t->segments++;
  return MN_OK;
}

static mn_status compare(const char *name, int64_t kept, int64_t recomputed) {
  if (kept != recomputed)
    BROKEN("statistic %s[-] is %lld but the blocks add up to %lld", name, (long long)kept, (long long)recomputed);
  return MN_OK;
}

/* Every pooled counter's current value against the blocks' tally; `whose`
 * names the statistics in the message ("" for the allocator's). */
static mn_status compare_pooled(const char *whose, const mn_alloc_stats_t *s, const tally_t *t) {
  static const char *pools[MN_POOL_COUNT] = {"all", "small", "large"};
  for (int k = 0; k < MN_POOL_COUNT; k++) {
#define MN__CMP(name, text)                                                                                 \
  if (s->name[k].current != t->name[k])                                                                     \
    BROKEN("%sstatistic %s[%s] is %lld but the blocks add up to %lld", whose, #name, pools[k],             \
           (long long)s->name[k].current, (long long)t->name[k]);
    MN_ALLOC_STATS_MAP(MN__CMP)
#undef MN__CMP
  }
  return MN_OK;
}

/* A memory pool's statistics against its own segments. */
static mn_status check_mempool(const mn__caching_t *a, const mn_mempool_t *mp) {
  tally_t t;
  memset(&t, 0, sizeof t);
  mn_status st = MN_OK;
  for (const mn__segment_t *s = a->segments; s && st == MN_OK; s = s->next_seg)
    if (s->pool->mp == mp) st = check_segment(a, s, &t);
  char whose[48];
  snprintf(whose, sizeof whose, "memory pool %llu: ", (unsigned long long)mp->id);
  mn_alloc_stats_t stats; /* with the ALL pool's sums */
  mn__stats_copy(&mp->stats, &stats);
  return st != MN_OK ? st : compare_pooled(whose, &stats, &t);
}

static mn_status check_locked(const mn__caching_t *a) {
  tally_t t;
  memset(&t, 0, sizeof t);
  mn_status st = MN_OK;
  for (const mn__segment_t *s = a->segments; s && st == MN_OK; s = s->next_seg) st = check_segment(a, s, &t);
  if (st != MN_OK) return st;
  if (t.segments != a->nsegments || t.exp_segments != a->exp_segments)
    BROKEN("%zu segments listed, %zu counted (%zu expandable, %zu counted)", t.segments, a->nsegments, t.exp_segments,
           a->exp_segments);
  char why[256];
  size_t npools = 2 + 2 * a->nmempools, i = 0;
  for (const mn_mempool_t *mp = a->mempools; mp; mp = mp->next) i++;
  if (i != a->nmempools) BROKEN("%zu memory pools listed, %zu counted", i, a->nmempools);
  for (i = 0; i < npools; i++) {
    const mn_mempool_t *mp = a->mempools;
    for (size_t k = 2; k + 1 < i; k += 2) mp = mp->next;
    const mn__pool_t *p = i == 0 ? &a->small : i == 1 ? &a->large : i % 2 == 0 ? &mp->small : &mp->large;
    mn_status ts = mn__fset_check(&p->fs, why, sizeof why);
    if (ts != MN_OK) /* broken (internal error) or no host memory to check with */
      return mn__error(ts, "check_invariants", "%s pool: %s", p->is_small ? "small" : "large", why);
    size_t whole = 0, nfree_blocks = 0, nunmapped_blocks = 0;
    for (const mn__segment_t *s = a->segments; s; s = s->next_seg)
      for (const mn__block_t *b = s->head; s->pool == p && b; b = b->next) {
        nfree_blocks += b->where == MN__IN_FREE;
        nunmapped_blocks += b->where == MN__IN_UNMAPPED;
        bool want = b->where == MN__IN_FREE && mn__whole_raw_segment(b);
        if (b->in_whole != want)
          BROKEN("block %#lx: %s its stream's list of whole free segments", (unsigned long)b->addr,
                 want ? "missing from" : "wrongly in");
        whole += want;
      }
    size_t listed = 0;
    for (size_t k = 0; k < p->fs.cap; k++) {
      const mn__sbins_t *sb = p->fs.slots[k];
      if (!sb) continue;
      for (const mn__block_t *b = sb->whole; b && listed <= whole; b = b->whole_next) {
        if (b->pool != p || b->seg->sb != sb || (b->whole_next && b->whole_next->whole_prev != b))
          BROKEN("%s pool: stream %llu's list of whole free segments is broken at %#lx",
                 p->is_small ? "small" : "large", (unsigned long long)sb->stream, (unsigned long)b->addr);
        listed++;
      }
      size_t largest = 0;
      for (const mn__segment_t *s = a->segments; s; s = s->next_seg)
        for (const mn__block_t *b = s->head; s->sb == sb && b; b = b->next)
          if (b->where == MN__IN_FREE && b->size > largest) largest = b->size;
      if (!sb->largest_dirty && sb->largest_free != largest)
        BROKEN("%s pool: stream %llu's largest free block kept as %zu, the blocks say %zu",
               p->is_small ? "small" : "large", (unsigned long long)sb->stream, sb->largest_free, largest);
    }
    if (listed != whole)
      BROKEN("%s pool: %zu whole free segments listed, %zu counted", p->is_small ? "small" : "large", listed, whole);
    size_t nfree, nunmapped;
    mn__fset_counts(&p->fs, &nfree, &nunmapped);
    if (nfree != nfree_blocks || nunmapped != nunmapped_blocks)
      BROKEN("%s pool: free set holds %zu (%zu free blocks), unmapped set %zu (%zu unmapped blocks)",
             p->is_small ? "small" : "large", nfree, nfree_blocks, nunmapped, nunmapped_blocks);
  }
  size_t freeing = 0;
  for (const mn__segment_t *s = a->segments; s; s = s->next_seg)
    for (const mn__block_t *b = s->head; b; b = b->next) freeing += b->freeing;
  size_t live = mn__live_count(a);
  if (live + freeing != t.allocated)
    BROKEN("pointer maps hold %zu entries for %zu allocated blocks", live, t.allocated);
  if (mn__lanes_check(a, why, sizeof why) != MN_OK) BROKEN("%s", why);
  size_t events = 0, nqueues = 0;
  const mn__pending_t *h = a->queues;
  for (size_t q = 0; h && q < a->qmap.count; q++, h = h->qnext) {
    if (h->qnext->qprev != h || h->qprev->qnext != h)
      BROKEN("stream %llu's pending queue is badly linked in the ring", (unsigned long long)h->stream_id);
    const mn__addrmap_entry_t *e = mn__addrmap_find(&a->qmap, (uintptr_t)h->stream_id + 1);
    if (!e || e->data != h) /* one head per stream id: no stream has two queues */
      BROKEN("stream %llu's pending queue is not the one its map entry names", (unsigned long long)h->stream_id);
    nqueues++;
    for (const mn__pending_t *p = h; p; p = p->next) {
      if (p->block->allocated || p->block->event_count <= 0)
        BROKEN("pending event for block %#lx which is not pending free", (unsigned long)p->block->addr);
      if (p->stream_id != h->stream_id)
        BROKEN("a pending event of stream %llu is in stream %llu's queue", (unsigned long long)p->stream_id,
               (unsigned long long)h->stream_id);
      if (!p->next && p != h->qtail) BROKEN("stream %llu's pending queue has a wrong tail", (unsigned long long)h->stream_id);
      events++;
    }
  }
  if (h != a->queues || nqueues != a->qmap.count)
    BROKEN("the ring of pending queues does not close after the %zu queues of its map", a->qmap.count);
  if (t.uses != a->nuses_total) BROKEN("%zu stream uses listed by blocks, %zu counted", t.uses, a->nuses_total);
  if ((a->qmap.count + a->nuses_total) * 4 > a->qmap.cap * 3)
    BROKEN("the queue map has no room kept for the queues of %zu stream uses", a->nuses_total);
  if (events != a->npending) BROKEN("%zu pending events queued, %zu counted", events, a->npending);
  size_t deferred = 0;
  for (const mn__block_t *b = a->deferred; b && deferred <= t.deferred; b = b->spare_next) {
    if (!b->deferred) BROKEN("block %#lx on the deferred list is not deferred", (unsigned long)b->addr);
    deferred++;
  }
  if (deferred != t.deferred) BROKEN("%zu deferred blocks listed, %zu counted", deferred, t.deferred);
  if (a->deferred && !a->ncaptures) BROKEN("deferred blocks with no capture under way");
  if (events + a->pending_waited != t.events)
    BROKEN("%zu pending events listed (and %zu being waited for), blocks count %zu", events, a->pending_waited,
           t.events);
  mn_alloc_stats_t copy; /* with the ALL pool's sums */
  mn__stats_copy(&a->stats, &copy);
  const mn_alloc_stats_t *s = &copy;
  st = compare_pooled("", s, &t);
  if (st == MN_OK) st = compare("reserved (internal)", (int64_t)a->reserved, t.reserved_bytes[MN_POOL_ALL]);
  if (st == MN_OK) st = compare("oversize_allocations", s->oversize_allocations.current, t.oversize_allocations);
  if (st == MN_OK) st = compare("oversize_segments", s->oversize_segments.current, t.oversize_segments);
  for (const mn_mempool_t *mp = a->mempools; mp && st == MN_OK; mp = mp->next) st = check_mempool(a, mp);
  return st;
}

mn_status mn__caching_check_invariants(mn_allocator_t *self) {
  mn__caching_t *a = as_caching(self);
  mn__caching_lock(a);
  mn_status st = check_locked(a);
  mn__caching_unlock(a);
  return st;
}

/* ---- the OOM message ---------------------------------------------------------------- */

void mn__caching_oom_message(mn__caching_t *a, size_t requested, size_t rounded, size_t alloc_size, char *buf,
                             size_t bufsize) {
  MN__ASSERT_LOCKED(a);
  char dev[32], req[32], seg[32], tot[32], fr[32], allowed[48] = "", al[32], un[32], rs[32], big[32];
  size_t free_b = 0, total = a->total_memory;
  if (mn_device_mem_info(a->base.device, &free_b, &total) != MN_OK) free_b = 0;
  size_t largest = mn__pool_largest_free(a, &a->small), large = mn__pool_largest_free(a, &a->large);
  if (large > largest) largest = large;
  int64_t allocated = mn__stat_all_current(&a->stats, allocated_bytes);
  int64_t reserved = mn__stat_all_current(&a->stats, reserved_bytes);
  size_t unallocated = reserved > allocated ? (size_t)(reserved - allocated) : 0;
  mn_device_format(a->base.device, dev, sizeof dev);
  if (a->set_fraction) {
    char cap[32];
    snprintf(allowed, sizeof allowed, "%s allowed; ", mn__format_size(a->allowed_max, cap, sizeof cap));
  }
  /* Fragmentation: the cache holds enough bytes, but not in one piece. */
  bool hint = !a->expandable && unallocated >= rounded;
  snprintf(buf, bufsize,
           "%s out of memory. Tried to allocate %s (a %s segment). %s has a total capacity of %s of which %s "
           "is free. %sOf the allocated memory %s is allocated by mnemo, and %s is reserved by mnemo but "
           "unallocated (%s reserved in all); the largest free cached block is %s.%s",
           dev, mn__format_size(requested, req, sizeof req), mn__format_size(alloc_size, seg, sizeof seg), dev,
           mn__format_size(total, tot, sizeof tot), mn__format_size(free_b, fr, sizeof fr), allowed,
           mn__format_size((size_t)(allocated > 0 ? allocated : 0), al, sizeof al),
           mn__format_size(unallocated, un, sizeof un),
           mn__format_size((size_t)(reserved > 0 ? reserved : 0), rs, sizeof rs), mn__format_size(largest, big, sizeof big),
           hint ? " If reserved but unallocated memory is large try setting expandable_segments:True in "
                  "MNEMO_ALLOC_CONF to avoid fragmentation."
                : "");
}
