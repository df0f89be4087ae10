/* runtime/sim_pool.c: the SIM device's stream-ordered pools (the
 * cudaMallocAsync emulation; the block states are described in
 * runtime/sim_internal.h): fitting, freeing on a stream, merging, releasing
 * unused chunks, the pool slots and the pools' invariant check. Thread-safe:
 * each slot takes the device lock; the helpers run with it held. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- the stream-ordered pool ------------------------------------------------ */

#define POOL_ALIGN 512 /* blocks are multiples of this */

/* The avail key: FREE blocks under stream 0, PENDING ones under their stream. */
typedef struct avail_key {
  uintptr_t stream;
  size_t size;
  uintptr_t start;
} avail_key;

static int avail_key_cmp(const avail_key *x, const avail_key *y) {
  if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

static avail_key avail_key_of(const pool_block *b) {
  return (avail_key){.stream = (uintptr_t)b->stream, .size = b->size, .start = b->start};
}

static int avail_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  avail_key x = avail_key_of((const pool_block *)a), y = avail_key_of((const pool_block *)b);
  return avail_key_cmp(&x, &y);
}

static int avail_key_fn(const void *key, const mn__avl_node *n) {
  avail_key y = avail_key_of((const pool_block *)n);
  return avail_key_cmp(key, &y);
}

static int live_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  uintptr_t x = ((const pool_block *)a)->start, y = ((const pool_block *)b)->start;
  return x < y ? -1 : x > y;
}

static int live_key_fn(const void *key, const mn__avl_node *n) {
  uintptr_t x = *(const uintptr_t *)key, y = ((const pool_block *)n)->start;
  return x < y ? -1 : x > y;
}

void mn__sim_pool_init(sim_pool *pool) {
  mn__avl_init(&pool->live, live_cmp, NULL);
  mn__avl_init(&pool->avail, avail_cmp, NULL);
}

/* ---- a stream's pending list ---- */

static void pending_append(pool_block *b) {
  sim_stream *s = b->stream;
  b->pnext = NULL;
  b->pprev = s->pend_tail;
  if (s->pend_tail) s->pend_tail->pnext = b;
  else s->pend_head = b;
  s->pend_tail = b;
}

static void pending_remove(pool_block *b) {
  sim_stream *s = b->stream;
  if (b->pprev) b->pprev->pnext = b->pnext;
  else s->pend_head = b->pnext;
  if (b->pnext) b->pnext->pprev = b->pprev;
  else s->pend_tail = b->pprev;
  b->pprev = b->pnext = NULL;
}

/* `to` takes b's place on b's stream's pending list (same target). */
static void pending_replace(pool_block *b, pool_block *to) {
  sim_stream *s = b->stream;
  to->pprev = b->pprev;
  to->pnext = b->pnext;
  if (b->pprev) b->pprev->pnext = to;
  else s->pend_head = to;
  if (b->pnext) b->pnext->pprev = to;
  else s->pend_tail = to;
  b->pprev = b->pnext = NULL;
}

/* ---- unused chunks (their one block FREE): what release may give back ---- */

static void unused_add(sim_pool *pool, pool_chunk *c) {
  c->unused = true;
  c->uprev = NULL;
  c->unext = pool->unused;
  if (pool->unused) pool->unused->uprev = c;
  pool->unused = c;
}

static void unused_remove(sim_pool *pool, pool_chunk *c) {
  if (c->uprev) c->uprev->unext = c->unext;
  else pool->unused = c->unext;
  if (c->unext) c->unext->uprev = c->uprev;
  c->uprev = c->unext = NULL;
  c->unused = false;
}

/* Unlinks b (not the chunk's only block) from its chunk and frees it. */
static void block_unlink(pool_block *b) {
  if (b->prev) b->prev->next = b->next;
  else b->chunk->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
  free(b);
}

/* Whether n is an avail neighbour b may merge with: both FREE, or both
 * PENDING on one stream. */
static bool mergeable(const pool_block *b, const pool_block *n) {
  return n && n->state == b->state && n->state != PB_USED && n->stream == b->stream;
}

/* Merges b (in no tree) with its mergeable neighbours, which leave the avail
 * tree and their pending lists; b keeps its own target (the later one when
 * PENDING: it was freed last). */
static void block_merge(sim_pool *pool, pool_block *b) {
  pool_block *n = b->prev;
  if (mergeable(b, n)) {
    mn__avl_remove(&pool->avail, &n->node);
    if (n->state == PB_PENDING) pending_remove(n);
    b->start = n->start;
    b->size += n->size;
    block_unlink(n);
  }
  n = b->next;
  if (mergeable(b, n)) {
    mn__avl_remove(&pool->avail, &n->node);
    if (n->state == PB_PENDING) pending_remove(n);
    b->size += n->size;
    block_unlink(n);
  }
}

/* The frees queued on s up to its op number `target` have run: the blocks
 * they freed (the front of s's pending list) become FREE. */
void mn__sim_pool_complete_frees(sim_stream *s, uint64_t target) {
  while (s->pend_head && s->pend_head->target <= target) {
    pool_block *b = s->pend_head;
    sim_pool *pool = b->chunk->pool;
    pending_remove(b);
    mn__avl_remove(&pool->avail, &b->node);
    pool->used -= b->size;
    b->state = PB_FREE;
    b->stream = NULL;
    b->target = 0;
    block_merge(pool, b);
    mn__avl_insert(&pool->avail, &b->node);
    if (b->size == b->chunk->size) unused_add(pool, b->chunk);
  }
}

/* Gives an unused chunk back to the device. */
static void chunk_release(sim_device *d, sim_pool *pool, pool_chunk *c) {
  unused_remove(pool, c);
  if (c->prev) c->prev->next = c->next;
  else pool->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  mn__avl_remove(&pool->avail, &c->blocks->node);
  mn__sim_pages_release((void *)c->start, c->size);
  mn__sim_range_remove(d, mn__sim_range_find(d, c->start));
  d->stats.mapped_bytes -= c->size;
  d->stats.raw_frees++;
  pool->reserved -= c->size;
  free(c->blocks);
  free(c);
}

/* Releases unused chunks while more than keep bytes are reserved. */
static void pool_release(sim_device *d, sim_pool *pool, size_t keep) {
  while (pool->reserved > keep && pool->unused) chunk_release(d, pool, pool->unused);
}

/* A new, unused chunk of at least n bytes (a granularity multiple). */
static mn_status pool_grow(sim_device *d, sim_pool *pool, int index, size_t n, pool_chunk **out) {
  size_t size = mn__sim_round_gran(n);
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_RAW_ALLOC))
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: injected fault: pool growth by %zu bytes failed",
                     index, size);
  if (size == 0 || size > mn__sim_cfg.capacity - d->stats.mapped_bytes) pool_release(d, pool, 0);
  if (size == 0 || size > mn__sim_cfg.capacity - d->stats.mapped_bytes)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "sim:%d out of memory: the pool asked %zu bytes (%zu rounded), %zu of %zu in use", index, n,
                     size, d->stats.mapped_bytes, mn__sim_cfg.capacity);
  pool_chunk *c = mn__calloc(1, sizeof *c);
  pool_block *b = mn__calloc(1, sizeof *b);
  sim_range *r = NULL;
  mn_status st = c && b ? mn__sim_range_insert(d, index, size, false, &r)
                        : mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (st == MN_OK && mprotect((void *)r->start, size, PROT_READ | PROT_WRITE) != 0) {
    mn__sim_range_remove(d, r);
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  }
  if (st != MN_OK) {
    free(c);
    free(b);
    return st;
  }
  r->pool = true;
  mn__sim_phys_add(d, size);
  d->stats.raw_allocs++;
  *b = (pool_block){.chunk = c, .start = r->start, .size = size, .state = PB_FREE};
  *c = (pool_chunk){.next = pool->chunks, .pool = pool, .start = r->start, .size = size, .blocks = b};
  if (pool->chunks) pool->chunks->prev = c;
  pool->chunks = c;
  unused_add(pool, c);
  mn__avl_insert(&pool->avail, &b->node);
  pool->reserved += size;
  if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
  *out = c;
  return MN_OK;
}

/* The smallest avail block of at least n bytes under this stream key, or NULL. */
static pool_block *avail_fit(const sim_pool *pool, const sim_stream *key, size_t n) {
  avail_key k = {.stream = (uintptr_t)key, .size = n, .start = 0};
  pool_block *b = (pool_block *)mn__avl_lower_bound(&pool->avail, &k, avail_key_fn);
  return b && b->stream == key ? b : NULL;
}

/* Best fit of n bytes for stream s: the smallest FREE block, or block
 * PENDING on s, that holds n (the lower address among equal sizes; s's own
 * block on a tie, keeping FREE memory for every stream). O(log n). */
static pool_block *pool_fit(const sim_pool *pool, const sim_stream *s, size_t n) {
  pool_block *f = avail_fit(pool, NULL, n), *p = avail_fit(pool, s, n);
  if (!f) return p;
  if (!p) return f;
  return p->size <= f->size ? p : f;
}

static sim_pool *pool_of(sim_device *d, void *pool) { return pool ? (sim_pool *)pool : &d->pool; }

/* Stream-ordered allocation is not captured on SIM (CUDA records it as
 * memory nodes); refused without touching the capture. */
static mn_status pool_refuse_capture(int index, const char *func) {
  return mn__error(MN_ERR_NOT_SUPPORTED, func,
                   "sim:%d: stream-ordered pool allocations and frees on a capturing stream are not simulated",
                   index);
}

/* A new pool; the device's list keeps it until pool_destroy. */
mn_status mn__sim_pool_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_pool *p = mn__calloc(1, sizeof *p);
  if (!p) return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  mn__sim_pool_init(p);
  p->next = d->pools;
  d->pools = p;
  *out = p;
  return mn__sim_unlock_ret(d, MN_OK);
}

/* Refused while a block is in use or its queued free has not run. */
mn_status mn__sim_pool_destroy(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_pool *p = handle, **link = &d->pools;
  while (*link && *link != p) link = &(*link)->next;
  if (!*link)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %p is not a pool of this device",
                                   index, handle));
  if (p->used)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_BUSY, __func__,
                                   "sim:%d: pool %p still has %zu bytes allocated or waiting for their queued free",
                                   index, handle, p->used));
  pool_release(d, p, 0); /* nothing used: every chunk is unused */
  *link = p->next;
  free(p);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_alloc_async(int index, void *handle_pool, size_t nbytes, void *handle, void **out) {
  SIM_LOCKED(index, d);
  if (mn__sim_stream_of(d, handle)->cap) return mn__sim_unlock_ret(d, pool_refuse_capture(index, __func__));
  sim_pool *pool = pool_of(d, handle_pool);
  pool_release(d, pool, pool->release_threshold);
  size_t n = nbytes > SIZE_MAX - POOL_ALIGN ? 0 : (nbytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  sim_stream *s = mn__sim_stream_of(d, handle);
  pool_block *b = n ? pool_fit(pool, s, n) : NULL;
  if (!b) {
    pool_chunk *c = NULL;
    mn_status st = pool_grow(d, pool, index, n ? n : SIZE_MAX, &c);
    if (st != MN_OK) return mn__sim_unlock_ret(d, st);
    b = c->blocks;
  }
  pool_block *rest = NULL;
  if (b->size > n && !(rest = mn__calloc(1, sizeof *rest)))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  mn__avl_remove(&pool->avail, &b->node);
  if (b->chunk->unused) unused_remove(pool, b->chunk);
  if (rest) { /* split: the rest keeps b's state (and b's place on its stream's pending list) */
    *rest = (pool_block){.prev = b, .next = b->next, .chunk = b->chunk, .start = b->start + n, .size = b->size - n,
                         .state = b->state, .stream = b->stream, .target = b->target};
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = n;
    if (b->state == PB_PENDING) pending_replace(b, rest);
    mn__avl_insert(&pool->avail, &rest->node);
  } else if (b->state == PB_PENDING) {
    pending_remove(b);
  }
  if (b->state == PB_FREE) pool->used += n; /* a PENDING block was counted already */
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  b->state = PB_USED;
  b->stream = NULL;
  b->target = 0;
  mn__avl_insert(&pool->live, &b->node);
  *out = (void *)b->start;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_free_async(int index, void *handle_pool, void *ptr, void *handle) {
  SIM_LOCKED(index, d);
  if (mn__sim_stream_of(d, handle)->cap) return mn__sim_unlock_ret(d, pool_refuse_capture(index, __func__));
  sim_pool *pool = pool_of(d, handle_pool);
  uintptr_t p = (uintptr_t)ptr;
  pool_block *b = (pool_block *)mn__avl_floor(&pool->live, &p, live_key_fn);
  if (!b || b->start != p)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %p is not a live stream-ordered allocation of %s", index, ptr,
                                   handle_pool ? "this pool" : "the default pool"));
  sim_op *op = NULL;
  mn_status st = mn__sim_new_op(OP_POOL_FREE, &op);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  sim_stream *s = mn__sim_stream_of(d, handle);
  mn__avl_remove(&pool->live, &b->node);
  /* PENDING until s runs this op: s may reuse it at once, others after. */
  b->state = PB_PENDING;
  b->stream = s;
  b->target = op->wait_target = s->queued + 1;
  pending_append(b);
  block_merge(pool, b);
  mn__avl_insert(&pool->avail, &b->node);
  return mn__sim_unlock_ret(d, mn__sim_enqueue(d, s, op)); /* eager devices complete it at once */
}

mn_status mn__sim_pool_trim(int index, void *handle_pool, size_t keep_bytes) {
  SIM_LOCKED(index, d);
  pool_release(d, pool_of(d, handle_pool), keep_bytes);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_pool_stats(int index, void *handle_pool, size_t *reserved_current, size_t *reserved_high,
                                size_t *used_current, size_t *used_high) {
  SIM_LOCKED(index, d);
  sim_pool *pool = pool_of(d, handle_pool);
  pool_release(d, pool, pool->release_threshold); /* a synchronization point, as on CUDA */
  *reserved_current = pool->reserved;
  *reserved_high = pool->reserved_high;
  *used_current = pool->used;
  *used_high = pool->used_high;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_pool_set_release_threshold(int index, void *handle_pool, size_t bytes) {
  SIM_LOCKED(index, d);
  pool_of(d, handle_pool)->release_threshold = bytes;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_pool_reset_peak(int index, void *handle_pool) {
  SIM_LOCKED(index, d);
  sim_pool *pool = pool_of(d, handle_pool);
  pool->reserved_high = pool->reserved;
  pool->used_high = pool->used;
  return mn__sim_unlock_ret(d, MN_OK);
}

#define POOL_BROKEN(...) mn__error(MN_ERR_INTERNAL, "mn_sim_check_invariants", __VA_ARGS__)

/* One pool: chunks are pool ranges tiled by their blocks; no two mergeable
 * blocks side by side; each block in the tree its state names, found there by
 * its key; the unused list is exactly the chunks of one FREE block; the
 * counts equal the sums. *chunks and *pending += this pool's. pre: lock held. */
static mn_status pool_check_one(sim_device *d, int index, const sim_pool *pool, size_t *chunks, size_t *pending) {
  size_t reserved = 0, used = 0, nlive = 0, navail = 0, nunused = 0;
  if (!mn__avl_check(&pool->live, NULL) || !mn__avl_check(&pool->avail, NULL))
    return POOL_BROKEN("sim:%d: pool %p: a block tree is broken", index, (void *)pool);
  for (const pool_chunk *c = pool->chunks; c; c = c->next, (*chunks)++) {
    const sim_range *r = mn__sim_range_find(d, c->start);
    if (!r || !r->pool || r->start != c->start || r->size != c->size || c->pool != pool ||
        (c->next && c->next->prev != c) || (c->prev == NULL) != (c == pool->chunks))
      return POOL_BROKEN("sim:%d: pool chunk %p has no pool range or is mislinked", index, (void *)c->start);
    uintptr_t at = c->start;
    for (const pool_block *b = c->blocks; b; b = b->next) {
      bool linked = (b->prev == NULL) == (b == c->blocks) && (!b->next || b->next->prev == b) && b->chunk == c;
      bool state = b->state == PB_USED || b->state == PB_FREE || (b->state == PB_PENDING && b->stream);
      if (b->start != at || b->size == 0 || b->size % POOL_ALIGN || !linked || !state || mergeable(b, b->next) ||
          (b->state != PB_PENDING && b->stream))
        return POOL_BROKEN("sim:%d: pool block %p in chunk %p is broken", index, (void *)b->start,
                           (void *)c->start);
      const mn__avl_node *found;
      if (b->state == PB_USED) {
        nlive++;
        found = mn__avl_floor(&pool->live, &b->start, live_key_fn);
      } else {
        navail++;
        avail_key k = avail_key_of(b);
        found = mn__avl_floor(&pool->avail, &k, avail_key_fn);
      }
      if (found != &b->node)
        return POOL_BROKEN("sim:%d: pool block %p is not in its tree", index, (void *)b->start);
      at += b->size;
      if (b->state != PB_FREE) used += b->size;
      *pending += b->state == PB_PENDING;
    }
    if (at != c->start + c->size)
      return POOL_BROKEN("sim:%d: pool chunk %p is not tiled by its blocks", index, (void *)c->start);
    if (c->unused != (c->blocks->state == PB_FREE && !c->blocks->next))
      return POOL_BROKEN("sim:%d: pool chunk %p: unused flag is wrong", index, (void *)c->start);
    nunused += c->unused;
    reserved += c->size;
  }
  size_t listed = 0;
  for (const pool_chunk *c = pool->unused; c; c = c->unext, listed++)
    if (!c->unused || c->pool != pool || (c->unext && c->unext->uprev != c) || listed > nunused)
      return POOL_BROKEN("sim:%d: pool %p: the unused chunk list is broken", index, (void *)pool);
  if (listed != nunused || nlive != pool->live.count || navail != pool->avail.count)
    return POOL_BROKEN("sim:%d: pool %p: %zu unused chunks listed of %zu, %zu/%zu blocks in trees of %zu/%zu",
                       index, (void *)pool, listed, nunused, pool->live.count, pool->avail.count, nlive, navail);
  if (reserved != pool->reserved || used != pool->used || used > reserved)
    return POOL_BROKEN("sim:%d: pool %p counts %zu reserved / %zu used bytes; found %zu / %zu", index,
                       (void *)pool, pool->reserved, pool->used, reserved, used);
  return MN_OK;
}

/* A stream's pending list: PENDING blocks of this stream, targets in order,
 * each still ahead of the stream. *n += its length. */
static mn_status pending_check(int index, const sim_stream *s, size_t *n) {
  uint64_t last = 0;
  for (const pool_block *b = s->pend_head; b; b = b->pnext, (*n)++) {
    if (b->state != PB_PENDING || b->stream != s || b->target < last || b->target <= s->completed ||
        b->target > s->queued || (b->pnext ? b->pnext->pprev != b : s->pend_tail != b) ||
        (b->pprev == NULL) != (b == s->pend_head))
      return POOL_BROKEN("sim:%d: a stream's pending pool blocks are broken at %p", index, (void *)b->start);
    last = b->target;
  }
  return MN_OK;
}

/* Every pool, and every stream's pending list against the PENDING blocks. */
mn_status mn__sim_pool_check(sim_device *d, int index) {
  size_t chunks = 0, pool_ranges = 0, pending = 0, listed = 0;
  for (const sim_range *r = (const sim_range *)mn__avl_first(&d->ranges); r; r = mn__sim_range_next(r))
    pool_ranges += r->pool;
  mn_status st = pool_check_one(d, index, &d->pool, &chunks, &pending);
  for (const sim_pool *p = d->pools; p && st == MN_OK; p = p->next) st = pool_check_one(d, index, p, &chunks, &pending);
  if (st == MN_OK) st = pending_check(index, &d->default_stream, &listed);
  for (const sim_stream *s = d->streams; s && st == MN_OK; s = s->next) st = pending_check(index, s, &listed);
  if (st != MN_OK) return st;
  if (chunks != pool_ranges)
    return POOL_BROKEN("sim:%d: %zu pool chunks but %zu pool ranges", index, chunks, pool_ranges);
  if (pending != listed)
    return POOL_BROKEN("sim:%d: %zu PENDING pool blocks but %zu on streams' pending lists", index, pending,
                       listed);
  return MN_OK;
}
