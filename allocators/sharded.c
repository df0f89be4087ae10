/* allocators/sharded.c: the caching allocator split by stream, for threads that each work on
 * their own streams. A caching allocator keeps a block on the stream it was allocated on, so
 * one caching allocator per stream (a shard) hands out exactly the blocks one allocator would;
 * what they no longer share is the lock. Which shard owns a pointer is kept in 64 striped maps
 * (each its own lock, on its own cache line), so two threads on two streams touch no common
 * word on the hot path. Threading: any thread; shards are added under a mutex, found without
 * one (a published list, never shortened before destroy), and each is a caching allocator with
 * its own lock. Lock order: a stripe, then a shard (only the invariant check holds both); the
 * other paths hold one at a time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/lock.h"
#include "runtime/ptrmap.h"

#define NSTRIPES 64

typedef struct shard_s {
  uint64_t stream_id;
  mn_allocator_t *inst; /* a caching allocator */
  struct shard_s *next;
} shard_t;

typedef struct stripe_s {
  mn__lock_t lock;
  mn__addrmap_t map; /* live pointer -> its shard */
} __attribute__((aligned(64))) stripe_t; /* one cache line each */

typedef struct mn__sharded_s {
  mn_allocator_t base;
  uint64_t gen;         /* unique per allocator made: the threads' cached shard names it */
  mn_caching_config_t cfg;
  uint64_t default_stream;
  pthread_mutex_t grow; /* adding a shard */
  _Atomic(shard_t *) shards;
  stripe_t stripes[NSTRIPES];
} mn__sharded_t;

static const mn_allocator_vtable_t sharded_vtable;

static mn__sharded_t *as_sharded(mn_allocator_t *self) { return (mn__sharded_t *)self; }

static stripe_t *stripe_of(mn__sharded_t *a, const void *ptr) {
  uint64_t h = (uint64_t)(uintptr_t)ptr * UINT64_C(0x9E3779B97F4A7C15);
  return &a->stripes[h >> 58];
}

/* The shard of a stream, made on first use. The last one found is kept per
 * thread, so a thread that stays on its stream walks nothing. */
static _Thread_local struct {
  uint64_t gen; /* 0: none (an allocator's address may be reused, its generation never is) */
  uint64_t stream_id;
  shard_t *shard;
} t_last;
static _Atomic uint64_t g_gen;

static mn_status shard_of(mn__sharded_t *a, uint64_t sid, shard_t **out) {
  if (t_last.gen == a->gen && t_last.stream_id == sid) {
    *out = t_last.shard;
    return MN_OK;
  }
  shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire);
  while (s && s->stream_id != sid) s = s->next;
  if (!s) {
    pthread_mutex_lock(&a->grow);
    for (s = atomic_load_explicit(&a->shards, memory_order_relaxed); s && s->stream_id != sid;) s = s->next;
    if (!s) {
      shard_t *n = mn__calloc(1, sizeof *n);
      mn_status st = n ? mn_caching_allocator_create(a->base.device, &a->cfg, &n->inst)
                       : mn__error(MN_ERR_OUT_OF_MEMORY, "mn_sharded", "out of host memory for a shard");
      if (st != MN_OK) {
        pthread_mutex_unlock(&a->grow);
        free(n);
        return mn__error_wrap(st, "mn_sharded");
      }
      n->stream_id = sid;
      n->next = atomic_load_explicit(&a->shards, memory_order_relaxed);
      atomic_store_explicit(&a->shards, n, memory_order_release);
      s = n;
    }
    pthread_mutex_unlock(&a->grow);
  }
  t_last.gen = a->gen;
  t_last.stream_id = sid;
  t_last.shard = s;
  *out = s;
  return MN_OK;
}

/* The shard that owns live ptr, or NULL. */
static shard_t *owner_of(mn__sharded_t *a, const void *ptr) {
  stripe_t *sp = stripe_of(a, ptr);
  mn__lock(&sp->lock);
  mn__addrmap_entry_t *e = mn__addrmap_find(&sp->map, (uintptr_t)ptr);
  shard_t *s = e ? e->data : NULL;
  mn__unlock(&sp->lock);
  return s;
}

static mn_status sharded_empty_cache(mn_allocator_t *self);

static mn_status sharded_alloc(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out) {
  mn__sharded_t *a = as_sharded(self);
  shard_t *s = NULL;
  mn_status st = shard_of(a, stream ? mn_stream_id(stream) : a->default_stream, &s);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = s->inst->vtable->alloc(s->inst, nbytes, stream, &p);
  if (st == MN_ERR_OUT_OF_MEMORY) {
    /* As one allocator would: give back every stream's cache, then once more. */
    mn__error_saved_t oom;
    mn__error_save(&oom);
    if (sharded_empty_cache(self) == MN_OK) st = s->inst->vtable->alloc(s->inst, nbytes, stream, &p);
    if (st == MN_ERR_OUT_OF_MEMORY) mn__error_restore(&oom);
  }
  if (st != MN_OK) return st;
  stripe_t *sp = stripe_of(a, p);
  mn__lock(&sp->lock);
  st = mn__addrmap_reserve(&sp->map, 1);
  if (st == MN_OK) mn__addrmap_put(&sp->map, (uintptr_t)p, 0, s);
  mn__unlock(&sp->lock);
  if (st != MN_OK) {
    mn__ignore(s->inst->vtable->free(s->inst, p)); /* rollback of what was just handed out */
    return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_sharded", "out of host memory for the pointer map");
  }
  *out = p;
  return MN_OK;
}

static mn_status sharded_free(mn_allocator_t *self, void *ptr) {
  mn__sharded_t *a = as_sharded(self);
  stripe_t *sp = stripe_of(a, ptr);
  mn__lock(&sp->lock);
  mn__addrmap_entry_t *e = mn__addrmap_find(&sp->map, (uintptr_t)ptr);
  if (!e) {
    mn__unlock(&sp->lock);
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_sharded", "%p is not a live allocation of this allocator", ptr);
  }
  shard_t *s = e->data;
  mn__addrmap_remove_entry(&sp->map, e); /* a racing double free now fails cleanly */
  mn__unlock(&sp->lock);
  mn_status st = s->inst->vtable->free(s->inst, ptr);
  if (st != MN_OK) { /* still allocated in its shard: back in the map (the table never shrinks) */
    mn__lock(&sp->lock);
    mn__ignore(mn__addrmap_reserve(&sp->map, 1));
    mn__addrmap_put(&sp->map, (uintptr_t)ptr, 0, s);
    mn__unlock(&sp->lock);
  }
  return st;
}

static mn_status sharded_record_stream(mn_allocator_t *self, void *ptr, mn_stream_t *stream) {
  shard_t *s = owner_of(as_sharded(self), ptr);
  if (!s) return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_sharded", "%p is not a live allocation of this allocator", ptr);
  return s->inst->vtable->record_stream(s->inst, ptr, stream);
}

static size_t sharded_size_of(mn_allocator_t *self, const void *ptr) {
  shard_t *s = owner_of(as_sharded(self), ptr);
  return s ? s->inst->vtable->size_of(s->inst, ptr) : 0;
}

static mn_status sharded_empty_cache(mn_allocator_t *self) {
  mn__sharded_t *a = as_sharded(self);
  mn_status first = MN_OK;
  for (shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire); s; s = s->next) {
    mn_status st = s->inst->vtable->empty_cache(s->inst);
    if (st != MN_OK && first == MN_OK) first = st;
  }
  return first;
}

static void add_stat(mn_stat_t *to, const mn_stat_t *from) {
  to->current += from->current;
  to->peak += from->peak;
  to->allocated += from->allocated;
  to->freed += from->freed;
}

/* Sums over the shards: currents and totals exact; a peak is the sum of the
 * streams' peaks, which bounds the peak of the sum from above (equal when the
 * streams' peaks coincide, e.g. when one stream is used). */
static mn_status sharded_get_stats(mn_allocator_t *self, mn_alloc_stats_t *out) {
  mn__sharded_t *a = as_sharded(self);
  uint32_t size = out->size, version = out->version;
  mn_alloc_stats_t sum;
  memset(&sum, 0, sizeof sum);
  for (shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire); s; s = s->next) {
    mn_alloc_stats_t x;
    memset(&x, 0, sizeof x);
    x.size = (uint32_t)sizeof x;
    x.version = MN_ALLOC_STATS_VERSION;
    mn_status st = s->inst->vtable->get_stats(s->inst, &x);
    if (st != MN_OK) return st;
    for (int k = 0; k < MN_POOL_COUNT; k++) {
#define MN__ADD_STAT(name, text) add_stat(&sum.name[k], &x.name[k]);
      MN_ALLOC_STATS_MAP(MN__ADD_STAT)
#undef MN__ADD_STAT
    }
    add_stat(&sum.oversize_allocations, &x.oversize_allocations);
    add_stat(&sum.oversize_segments, &x.oversize_segments);
    sum.num_alloc_retries += x.num_alloc_retries;
    sum.num_ooms += x.num_ooms;
    sum.num_sync_all_streams += x.num_sync_all_streams;
    sum.num_device_alloc += x.num_device_alloc;
    sum.num_device_free += x.num_device_free;
  }
  size_t m = a->cfg.max_split_size;
  sum.max_split_size = m == SIZE_MAX ? -1 : m > (size_t)INT64_MAX ? INT64_MAX : (int64_t)m;
  *out = sum;
  out->size = size;
  out->version = version;
  return MN_OK;
}

static mn_status sharded_reset_peak(mn_allocator_t *self) {
  mn__sharded_t *a = as_sharded(self);
  for (shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire); s; s = s->next) {
    mn_status st = s->inst->vtable->reset_peak(s->inst);
    if (st != MN_OK) return st;
  }
  return MN_OK;
}

static int by_address(const void *x, const void *y) {
  uintptr_t p = ((const mn_snapshot_segment_t *)x)->address, q = ((const mn_snapshot_segment_t *)y)->address;
  return p < q ? -1 : p > q;
}

/* Every shard's segments in one snapshot, sorted by address. */
static mn_status sharded_snapshot(mn_allocator_t *self, mn_snapshot_t **out) {
  mn__sharded_t *a = as_sharded(self);
  mn_snapshot_t *all = mn__calloc(1, sizeof *all);
  if (!all) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_sharded", "out of host memory for a snapshot");
  for (shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire); s; s = s->next) {
    mn_snapshot_t *one = NULL;
    mn_status st = s->inst->vtable->snapshot(s->inst, &one);
    mn_snapshot_segment_t *grown = NULL;
    if (st == MN_OK && one->nsegments) {
      grown = mn__realloc(all->segments, (all->nsegments + one->nsegments) * sizeof *grown);
      if (!grown) st = mn__error(MN_ERR_OUT_OF_MEMORY, "mn_sharded", "out of host memory for a snapshot");
    }
    if (st != MN_OK) {
      mn_snapshot_free(one);
      mn_snapshot_free(all);
      return st;
    }
    if (one->nsegments) {
      all->segments = grown;
      memcpy(all->segments + all->nsegments, one->segments, one->nsegments * sizeof *grown);
      all->nsegments += one->nsegments;
    }
    free(one->segments); /* the blocks moved with their segments */
    free(one);
  }
  if (all->nsegments) qsort(all->segments, all->nsegments, sizeof *all->segments, by_address);
  *out = all;
  return MN_OK;
}

/* Each shard's own checks, then the pointer maps: every entry, under its
 * stripe's lock, names a shard of this allocator that holds that pointer live
 * (true at every moment: a pointer is mapped after its shard hands it out and
 * unmapped before its shard takes it back). That every live block is mapped
 * holds only between operations, so it is not asked here: the counts are
 * compared by whoever knows nothing runs (test_caching_threads, after joining). */
static mn_status sharded_check_invariants(mn_allocator_t *self) {
  mn__sharded_t *a = as_sharded(self);
  for (shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire); s; s = s->next) {
    mn_status st = s->inst->vtable->check_invariants(s->inst);
    if (st != MN_OK) return st;
  }
  for (int i = 0; i < NSTRIPES; i++) {
    stripe_t *sp = &a->stripes[i];
    mn__lock(&sp->lock);
    for (size_t k = 0; k < sp->map.cap; k++) {
      const mn__addrmap_entry_t *e = &sp->map.slots[k];
      if (!e->key) continue;
      const shard_t *s = e->data;
      if (stripe_of(a, (const void *)e->key) != sp || !s || s->inst->vtable->size_of(s->inst, (const void *)e->key) == 0) {
        mn__unlock(&sp->lock);
        return mn__error(MN_ERR_INTERNAL, "check_invariants", "sharded: %#lx is mapped to a shard that does not hold it",
                         (unsigned long)e->key);
      }
    }
    mn__unlock(&sp->lock);
  }
  return MN_OK;
}

/* Frees everything, live allocations included (as the caching allocator's destroy). */
static void sharded_destroy(mn_allocator_t *self) {
  mn__sharded_t *a = as_sharded(self);
  shard_t *s = atomic_load_explicit(&a->shards, memory_order_acquire);
  while (s) {
    shard_t *next = s->next;
    s->inst->vtable->destroy(s->inst);
    free(s);
    s = next;
  }
  for (int i = 0; i < NSTRIPES; i++) mn__addrmap_fini(&a->stripes[i].map);
  pthread_mutex_destroy(&a->grow);
  free(a);
}

static const mn_allocator_vtable_t sharded_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "caching_sharded",
    .alloc = sharded_alloc,
    .free = sharded_free,
    .record_stream = sharded_record_stream,
    .empty_cache = sharded_empty_cache,
    .get_stats = sharded_get_stats,
    .reset_peak = sharded_reset_peak,
    .snapshot = sharded_snapshot,
    .check_invariants = sharded_check_invariants,
    .destroy = sharded_destroy,
    .size_of = sharded_size_of,
};

mn_status mn_caching_allocator_create_sharded(mn_device_t dev, const mn_caching_config_t *config, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_caching_config_t cfg = config ? *config : mn_caching_config_default();
  mn_status st = mn__caching_config_validate(__func__, &cfg);
  if (st != MN_OK) return st;
  /* Both need one view of the device's reserved memory, which shards do not share. */
  if (cfg.per_process_memory_fraction < 1.0)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "per_process_memory_fraction=%g: a cap on the whole device is not kept across streams' shards "
                     "(use mn_caching_allocator_create)", cfg.per_process_memory_fraction);
  if (cfg.garbage_collection_threshold > 0.0)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "garbage_collection_threshold=%g: the threshold on the whole device's reserved memory is not kept "
                     "across streams' shards (use mn_caching_allocator_create)", cfg.garbage_collection_threshold);
  mn_stream_t *def = NULL;
  st = mn_stream_default(dev, &def);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__sharded_t *a = mn__aligned_alloc(64, (sizeof(mn__sharded_t) + 63) / 64 * 64); /* the stripes' lines */
  if (!a) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  memset(a, 0, sizeof *a);
  if (pthread_mutex_init(&a->grow, NULL) != 0) {
    free(a);
    return mn__error(MN_ERR_INTERNAL, __func__, "pthread_mutex_init failed");
  }
  a->base.vtable = &sharded_vtable;
  a->base.device = dev;
  a->cfg = cfg;
  a->default_stream = mn_stream_id(def);
  a->gen = atomic_fetch_add(&g_gen, 1) + 1;
  atomic_init(&a->shards, NULL);
  for (int i = 0; i < NSTRIPES; i++) mn__lock_init(&a->stripes[i].lock);
  *out = &a->base;
  return MN_OK;
}
