/* allocators/caching_expandable.c: expandable segments: a reserved range per (stream, pool),
 * pages mapped on demand and unmapped when free, granted to the allocator's peers.
 * Threading: allocator lock held by callers (mn_caching_allocator_enable_peer_access takes it). */
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

static mn_status expandable_grant_peers(mn__caching_t *a, uintptr_t addr, size_t nbytes);

static bool allocatable(const mn__block_t *b) {
  return b && !b->allocated && b->event_count == 0 && b->nuses == 0 && !b->share; /* share set: exported, maybe parked */
}

/* Whether free and unmapped blocks from b on add up to `size` bytes. */
static bool has_room(const mn__block_t *b, size_t size) {
  size_t bytes = 0;
  while (bytes < size && allocatable(b)) {
    bytes += b->size;
    b = b->next;
  }
  return bytes >= size;
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Page size: PyTorch's 2 MiB (small pool) or 20 MiB (large pool), rounded up
 * to the device granularity. */
static size_t page_size(const mn__caching_t *a, const mn__pool_t *pool) {
  return round_up(pool->is_small ? MN__SMALL_BUFFER : MN__LARGE_BUFFER, a->granularity);
}

/* A new segment of one unmapped block. A large-pool range is 1 1/8 of the device
 * memory, as PyTorch; a small-pool range 1/8 (PyTorch: also 1 1/8; a small pool
 * that outgrows it gets a second range). When the address space cannot give that
 * much, halves down to the request. */
static mn__block_t *new_segment(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size,
                                mn_status *st, bool *no_va) {
  size_t page = page_size(a, pool);
  size_t need = round_up(size, page);
  size_t va = round_up(pool->is_small ? a->total_memory / 8 : a->total_memory + a->total_memory / 8, page);
  if (va < need) va = need;
  void *base = NULL;
  for (;;) {
    *st = mn_device_va_reserve(a->base.device, va, &base);
    if (*st == MN_OK || *st != MN_ERR_OUT_OF_MEMORY || va == need) break;
    va = round_up(va / 2, page);
    if (va < need) va = need;
  }
  if (*st != MN_OK) {
    *no_va = *st == MN_ERR_OUT_OF_MEMORY;
    return NULL;
  }
  mn__segment_t *s = mn__calloc_lines(sizeof *s);
  uint8_t *pages = mn__calloc(va / page, 1);
  mn_status sp = mn__spare_reserve(a, 1);
  mn__sbins_t *sb = NULL;
  if (sp == MN_OK && s && pages) sp = mn__fset_acquire(&pool->fs, stream, &sb);
  if (!s || !pages || sp != MN_OK) {
    free(s);
    free(pages);
    mn__ignore(mn_device_va_release(a->base.device, base, va)); /* rollback: the out-of-memory is reported */
    *st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for an expandable segment");
    return NULL;
  }
  mn__block_t *b = mn__block_take(a);
  *s = (mn__segment_t){.base = (uintptr_t)base, .size = va, .pool = pool, .stream_id = stream, .expandable = true,
                       .page = page, .npages = va / page, .page_mapped = pages, .head = b, .sb = sb};
  *b = (mn__block_t){.addr = (uintptr_t)base, .size = va, .stream_id = stream, .pool = pool, .seg = s,
                     .mapped = false};
  mn__segment_link(a, s);
  a->exp_segments++;
  mn__pool_insert(pool, b);
  return b;
}

/* PyTorch's find_expandable_block: the lowest address on this stream where free
 * and unmapped room adds up to `size`, else a new segment. */
static mn__block_t *find_block(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size, mn_status *st,
                               bool *no_va) {
  const mn__sbins_t *sb = mn__fset_find(&pool->fs, stream);
  for (mn__tnode_t *n = sb ? sb->unmapped.min : NULL; n; n = mn__tree_next(n)) {
    mn__block_t *c = (mn__block_t *)n;
    if (allocatable(c->prev)) c = c->prev;
    if (has_room(c, size)) return c;
  }
  return new_segment(a, stream, pool, size, st, no_va);
}

/* Maps the pages covering the first `size` bytes of unmapped block b; the rest
 * stays an unmapped block. The mapped part merges with free neighbours and is
 * cached. false (and nothing changed) when the device has no memory. */
static bool map_block(mn__caching_t *a, mn__block_t *b, size_t size, mn_status *st) {
  MN__ASSERT_LOCKED(a);
  mn__segment_t *s = b->seg;
  size_t first = (b->addr - s->base) / s->page, count = (size + s->page - 1) / s->page;
  size_t bytes = count * s->page;
  *st = mn__spare_reserve(a, 1);
  if (*st != MN_OK) return false;
  for (size_t k = 0; k < count; k++) {
    *st = mn_device_mem_map(a->base.device, (void *)(s->base + (first + k) * s->page), s->page);
    if (*st != MN_OK) {
      /* rollback of a partial map: the map failure is what the caller hears; no
       * work can touch pages mapped just now, so no synchronize is needed */
      while (k--)
        mn__ignore(mn__device_mem_unmap_synced(a->base.device, (void *)(s->base + (first + k) * s->page), s->page));
      return false;
    }
  }
  if (a->peers) {
    *st = expandable_grant_peers(a, s->base + first * s->page, bytes);
    if (*st != MN_OK) {
      /* rollback, as above: the grant failure is what the caller hears */
      for (size_t k = 0; k < count; k++)
        mn__ignore(mn__device_mem_unmap_synced(a->base.device, (void *)(s->base + (first + k) * s->page), s->page));
      return false;
    }
  }
  memset(s->page_mapped + first, 1, count);
  s->mapped_pages += count;
  mn__pool_t *pool = b->pool;
  mn__pool_remove(pool, b);
  b->mapped = true;
  if (bytes < b->size) {
    mn__block_t *rest = mn__block_take(a);
    *rest = (mn__block_t){.addr = b->addr + bytes, .size = b->size - bytes, .stream_id = b->stream_id,
                          .pool = pool, .seg = s, .mapped = false, .prev = b, .next = b->next};
    if (b->next) b->next->prev = rest;
    b->next = rest;
    mn__pool_insert(pool, rest);
    b->size = bytes;
  }
  uintptr_t at = s->base + first * s->page;
  mn__try_merge(a, b, b->prev);
  mn__try_merge(a, b, b->next);
  mn__pool_insert(pool, b);
  a->reserved += bytes;
  MN__STAT_ADD(a, reserved_bytes, pool, (int64_t)bytes);
  a->stats.num_device_alloc++;
  mn__trace(a, MN_TRACE_SEGMENT_MAP, b->stream_id, at, bytes, 0);
  mn__segment_event(a, MN_SEGMENT_MAP, at, bytes, s->pool_id, b->stream_id);
  return true;
}

mn__block_t *mn__expandable_alloc(mn__caching_t *a, uint64_t stream, mn__pool_t *pool, size_t size,
                                  mn_status *st, bool *no_va) {
  *st = MN_OK;
  *no_va = false;
  mn__block_t *c = find_block(a, stream, pool, size, st, no_va);
  if (!c) return NULL;
  if (!c->mapped && !map_block(a, c, c->size < size ? c->size : size, st)) return NULL;
  while (c->size < size) {
    /* c is free and mapped, followed by unmapped room (has_room said so). */
    mn__block_t *next = c->next;
    if (!next || next->mapped) {
      *st = mn__error(MN_ERR_INTERNAL, __func__, "expandable segment at %#lx: no unmapped room after a free block",
                      (unsigned long)c->seg->base);
      return NULL;
    }
    size_t want = size - c->size;
    if (!map_block(a, next, want < next->size ? want : next->size, st)) return NULL;
    c = next; /* it absorbed c */
  }
  mn__pool_remove(pool, c);
  return c;
}

/* The whole pages inside inactive block b: [*first, *end) page indexes. */
static bool whole_pages(const mn__block_t *b, size_t *first, size_t *end) {
  const mn__segment_t *s = b->seg;
  size_t off = b->addr - s->base;
  *first = (off + s->page - 1) / s->page;
  *end = (off + b->size) / s->page;
  return *first < *end;
}

bool mn__expandable_has_unmappable(mn__caching_t *a) {
  size_t first, end;
  for (mn__segment_t *s = a->segments; s; s = s->next_seg) {
    if (!s->expandable) continue;
    for (mn__block_t *b = s->head; b; b = b->next)
      if (b->mapped && allocatable(b) && whole_pages(b, &first, &end)) return true;
  }
  return false;
}

/* PyTorch's unmap_block: unmap the whole free pages of b, leaving free mapped
 * blocks before and after them. pre: the device was synchronized (once for the
 * whole release: the pages are unmapped without a synchronize each). */
static void unmap_block(mn__caching_t *a, mn__block_t *b) {
  MN__ASSERT_LOCKED(a);
  size_t first, end;
  if (!whole_pages(b, &first, &end) || mn__spare_reserve(a, 2) != MN_OK) return;
  mn__segment_t *s = b->seg;
  for (size_t k = first; k < end; k++)
    if (mn__device_mem_unmap_synced(a->base.device, (void *)(s->base + k * s->page), s->page) != MN_OK) {
      end = k; /* the rest stays mapped (and cached) */
      break;
    }
  if (end == first) return;
  memset(s->page_mapped + first, 0, end - first);
  s->mapped_pages -= end - first;
  mn__pool_t *pool = b->pool;
  mn__pool_remove(pool, b);
  uintptr_t ustart = s->base + first * s->page;
  size_t ubytes = (end - first) * s->page, before = ustart - b->addr, after = b->size - before - ubytes;
  if (before) {
    mn__block_t *f = mn__block_take(a);
    *f = (mn__block_t){.addr = b->addr, .size = before, .stream_id = b->stream_id, .pool = pool, .seg = s,
                       .mapped = true, .prev = b->prev, .next = b};
    if (f->prev) f->prev->next = f;
    else s->head = f;
    b->prev = f;
    mn__pool_insert(pool, f);
  }
  if (after) {
    mn__block_t *f = mn__block_take(a);
    *f = (mn__block_t){.addr = ustart + ubytes, .size = after, .stream_id = b->stream_id, .pool = pool, .seg = s,
                       .mapped = true, .prev = b, .next = b->next};
    if (f->next) f->next->prev = f;
    b->next = f;
    mn__pool_insert(pool, f);
  }
  b->addr = ustart;
  b->size = ubytes;
  b->mapped = false;
  mn__try_merge(a, b, b->prev);
  mn__try_merge(a, b, b->next);
  mn__pool_insert(pool, b);
  a->reserved -= ubytes;
  MN__STAT_SUB(a, reserved_bytes, pool, (int64_t)ubytes);
  a->stats.num_device_free++;
  mn__trace(a, MN_TRACE_SEGMENT_UNMAP, b->stream_id, ustart, ubytes, 0);
  mn__segment_event(a, MN_SEGMENT_UNMAP, ustart, ubytes, s->pool_id, b->stream_id);
}

void mn__expandable_unmap_free(mn__caching_t *a, mn__release_t *rel, bool unmap_pages) {
  if (unmap_pages) {
    /* Gather first: unmapping reshapes the block lists. */
    size_t n = 0, cap = 0;
    mn__block_t **todo = NULL;
    for (mn__segment_t *s = a->segments; s; s = s->next_seg) {
      if (!s->expandable) continue;
      for (mn__block_t *b = s->head; b; b = b->next) {
        size_t first, end;
        if (!b->mapped || !allocatable(b) || !whole_pages(b, &first, &end)) continue;
        if (n == cap) {
          size_t c2 = cap ? 2 * cap : 32;
          mn__block_t **grown = mn__realloc(todo, c2 * sizeof *grown);
          if (!grown) break;
          todo = grown;
          cap = c2;
        }
        todo[n++] = b;
      }
    }
    for (size_t i = 0; i < n; i++) unmap_block(a, todo[i]);
    free(todo);
  }
  for (mn__segment_t *s = a->segments, *next; s; s = next) {
    next = s->next_seg;
    mn__block_t *b = s->head;
    if (!s->expandable || b->mapped || b->next) continue;
    mn__pool_remove(b->pool, b);
    mn__block_put(a, b);
    mn__segment_unlink(a, s);
    mn__fset_release(&s->pool->fs, s->sb);
    s->sb = NULL;
    a->exp_segments--;
    s->head = NULL;
    s->next_seg = rel->va;
    rel->va = s;
  }
}

void mn__expandable_segment_free(mn__caching_t *a, mn__segment_t *s) {
  free(s->page_mapped);
  free(s);
}

/* ---- peers ------------------------------------------------------------------------
 * As PyTorch's expandable segments: mapped pages are reachable from exactly the
 * devices granted with cuMemSetAccess (mn_device_mem_set_access), so the
 * allocator keeps its peers and grants them every page it maps; a new peer is
 * granted every page mapped so far. Maps, unmaps and the grants happen under
 * the allocator's lock, so no page misses a peer. */

static mn_status expandable_grant_peers(mn__caching_t *a, uintptr_t addr, size_t nbytes) {
  MN__ASSERT_LOCKED(a);
  for (int p = 0; p < 64; p++) {
    if (!(a->peers >> p & 1)) continue;
    mn_device_t peer = {.type = a->base.device.type, .index = p};
    mn_status st = mn_device_mem_set_access(a->base.device, (void *)addr, nbytes, peer);
    if (st != MN_OK) return st;
  }
  return MN_OK;
}

/* Grants `peer` every mapped page of every expandable segment, one call per
 * run of mapped pages. pre: lock held. */
static mn_status grant_mapped(mn__caching_t *a, mn_device_t peer) {
  for (mn__segment_t *s = a->segments; s; s = s->next_seg) {
    if (!s->expandable || !s->mapped_pages) continue;
    for (size_t k = 0; k < s->npages;) {
      if (!s->page_mapped[k]) {
        k++;
        continue;
      }
      size_t end = k;
      while (end < s->npages && s->page_mapped[end]) end++;
      mn_status st = mn_device_mem_set_access(a->base.device, (void *)(s->base + k * s->page), (end - k) * s->page,
                                              peer);
      if (st != MN_OK) return st;
      k = end;
    }
  }
  return MN_OK;
}

mn_status mn_caching_allocator_enable_peer_access(mn_allocator_t *al, mn_device_t peer) {
  mn__caching_t *a = NULL;
  mn_status st = mn__caching_checked(__func__, al, &a);
  if (st != MN_OK) return st;
  mn_device_t dev = al->device;
  char x[32], y[32];
  mn_device_format(peer, x, sizeof x);
  mn_device_format(dev, y, sizeof y);
  if (peer.type != dev.type || peer.index == dev.index)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%s is not a peer of %s (another device of its type)", x, y);
  st = mn_device_check(peer);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (peer.index >= 64)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "peers past index 63 are not supported (%s)", x);
  bool can = false;
  st = mn_device_can_access_peer(peer, dev, &can);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!can) return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "%s cannot access the memory of %s", x, y);
  /* raw segments, as cudaDeviceEnablePeerAccess (enabling twice succeeds) */
  st = mn_device_enable_peer_access(peer, dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__caching_lock(a);
  uint64_t bit = UINT64_C(1) << peer.index;
  if (!(a->peers & bit)) {
    st = grant_mapped(a, peer);
    if (st == MN_OK) a->peers |= bit; /* else a retry grants again; pages granted stay granted */
  }
  mn__caching_unlock(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
