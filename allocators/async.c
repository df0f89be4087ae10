/* allocators/async.c: the stream-ordered pool allocator (backend:cudaMallocAsync)
 * over a pool of its own (runtime/device_internal.h: mn__device_pool_*; the device's
 * default pool is left alone), with record_stream by events. A free is
 * ordered on the allocating stream (after its recorded streams' work): as
 * cudaFreeAsync, the memory is reusable at once by later allocations on that
 * stream and by other streams once the stream has run the free, which the
 * pool asks without waiting (on SIM: once the stream was advanced past it; no
 * synchronize is needed); the pool keeps freed memory until empty_cache.
 * Every call is O(1) here (the pointer map) plus the pool's O(log n) on SIM.
 * Thread-safe: one mutex guards the pointer map and counters; device calls
 * run unlocked. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ptrmap.h"
#include "allocators/stat.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/stream_hold.h"

/* What the allocator remembers per live allocation. Every stream in it is
 * held (runtime/stream_hold.h) until use_free: the free is ordered on them. */
typedef struct async_use {
  mn_stream_t *stream;   /* allocated on, freed on */
  size_t nrecorded, cap;
  mn_stream_t **recorded; /* other streams that used it (record_stream) */
} async_use;

typedef struct async_alloc {
  mn_allocator_t base; /* first: the vtable header */
  mn_stream_t *default_stream;
  void *pool; /* the device pool it allocates from (its own) */
  pthread_mutex_t lock;
  mn__addrmap_t live; /* address -> bytes asked; data = async_use * */
  mn_stat_t count, bytes;
  /* Frees in flight: out of the map, still counted until the device free
   * returns (the lock is dropped around it). */
  size_t freeing, freeing_bytes;
  int64_t num_ooms, num_allocs, num_frees;
} async_alloc;

static async_alloc *self_of(mn_allocator_t *a) { return (async_alloc *)a; }

/* Drops the use and its holds on its streams. */
static void use_free(async_use *u) {
  if (!u) return;
  for (size_t i = 0; i < u->nrecorded; i++) mn__stream_unhold(u->recorded[i]);
  if (u->stream) mn__stream_unhold(u->stream);
  free(u->recorded);
  free(u);
}

static mn_status async_alloc_fn(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  async_alloc *x = self_of(a);
  mn_stream_t *s = stream ? stream : x->default_stream;
  async_use *u = mn__calloc(1, sizeof *u);
  if (!u) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  u->stream = s;
  mn__stream_hold(s);
  void *p = NULL;
  mn_status st = mn__device_pool_alloc(a->device, x->pool, nbytes, s, &p);
  if (st != MN_OK) {
    use_free(u);
    if (st == MN_ERR_OUT_OF_MEMORY) {
      pthread_mutex_lock(&x->lock);
      x->num_ooms++;
      pthread_mutex_unlock(&x->lock);
    }
    return mn__error_wrap(st, __func__);
  }
  pthread_mutex_lock(&x->lock);
  st = mn__addrmap_insert(&x->live, (uintptr_t)p, nbytes, u);
  if (st == MN_OK) {
    mn__stat_inc(&x->count, 1);
    mn__stat_inc(&x->bytes, (int64_t)nbytes);
    x->num_allocs++;
  }
  pthread_mutex_unlock(&x->lock);
  if (st != MN_OK) {
    mn__ignore(mn__device_pool_free(a->device, x->pool, p, s)); /* rollback: the failure being reported comes first */
    use_free(u);
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

/* Makes `s` wait for the work queued so far on each recorded stream. */
static mn_status wait_for_recorded(mn_device_t dev, mn_stream_t *s, const async_use *u) {
  if (u->nrecorded == 0) return MN_OK;
  mn_event_t *e = NULL;
  mn_status st = mn_event_create(dev, &e);
  for (size_t i = 0; st == MN_OK && i < u->nrecorded; i++) {
    st = mn_event_record(e, u->recorded[i]);
    if (st == MN_OK) st = mn_stream_wait_event(s, e); /* captures the point now: e can be re-recorded */
  }
  if (e) mn__ignore(mn_event_destroy(e)); /* cleanup of a spare event: nothing to report to */
  return st;
}

static mn_status async_free_fn(mn_allocator_t *a, void *ptr) {
  async_alloc *x = self_of(a);
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&x->lock);
  bool found = mn__addrmap_remove(&x->live, (uintptr_t)ptr, &e);
  if (found) x->freeing++, x->freeing_bytes += e.size;
  pthread_mutex_unlock(&x->lock);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated by this stream-ordered allocator (or is freed already)", ptr);
  async_use *u = e.data;
  mn_status st = wait_for_recorded(a->device, u->stream, u);
  if (st == MN_OK) st = mn__device_pool_free(a->device, x->pool, ptr, u->stream);
  pthread_mutex_lock(&x->lock);
  x->freeing--, x->freeing_bytes -= e.size;
  if (st == MN_OK) {
    mn__stat_dec(&x->count, 1);
    mn__stat_dec(&x->bytes, (int64_t)e.size);
    x->num_frees++;
  } else if (mn__addrmap_insert(&x->live, e.key, e.size, u) != MN_OK) {
    u = NULL; /* cannot keep it; forget it (freed below) */
    mn__stat_dec(&x->count, 1);
    mn__stat_dec(&x->bytes, (int64_t)e.size);
  }
  pthread_mutex_unlock(&x->lock);
  if (st == MN_OK) {
    use_free(u);
    return MN_OK;
  }
  if (!u) use_free(e.data);
  return mn__error_wrap(st, __func__);
}

static mn_status async_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  async_alloc *x = self_of(a);
  mn_status st = MN_OK;
  pthread_mutex_lock(&x->lock);
  mn__addrmap_entry_t *e = mn__addrmap_find(&x->live, (uintptr_t)ptr);
  async_use *u = e ? e->data : NULL;
  if (!u) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%p is not a live allocation of this stream-ordered allocator",
                   ptr);
  } else if (mn_stream_id(stream) != mn_stream_id(u->stream)) {
    bool seen = false;
    for (size_t i = 0; i < u->nrecorded && !seen; i++) seen = mn_stream_id(u->recorded[i]) == mn_stream_id(stream);
    if (!seen && u->nrecorded == u->cap) {
      size_t cap = u->cap ? u->cap * 2 : 4;
      mn_stream_t **r = mn__realloc(u->recorded, cap * sizeof *r);
      if (r) {
        u->recorded = r;
        u->cap = cap;
      } else {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
      }
    }
    if (!seen && st == MN_OK) {
      mn__stream_hold(stream);
      u->recorded[u->nrecorded++] = stream;
    }
  }
  pthread_mutex_unlock(&x->lock);
  return st;
}

/* Waits for all queued frees, then gives every unused pool byte back. */
static mn_status async_empty_cache(mn_allocator_t *a) {
  mn_status st = mn_device_synchronize(a->device);
  if (st == MN_OK) st = mn__device_pool_trim_to(a->device, self_of(a)->pool, 0);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status async_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  async_alloc *x = self_of(a);
  mn_device_pool_stats_t ps;
  mn_status st = mn__device_pool_stats_of(a->device, x->pool, &ps);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  pthread_mutex_lock(&x->lock);
  out->allocation[MN_POOL_ALL] = x->count;
  out->allocated_bytes[MN_POOL_ALL] = x->bytes;
  out->requested_bytes[MN_POOL_ALL] = x->bytes;
  out->active[MN_POOL_ALL] = x->count;
  out->active_bytes[MN_POOL_ALL] = x->bytes;
  out->num_ooms = x->num_ooms;
  out->num_device_alloc = x->num_allocs;
  out->num_device_free = x->num_frees;
  pthread_mutex_unlock(&x->lock);
  out->reserved_bytes[MN_POOL_ALL].current = (int64_t)ps.reserved_current;
  out->reserved_bytes[MN_POOL_ALL].peak = (int64_t)ps.reserved_high;
  return MN_OK;
}

static mn_status async_reset_peak(mn_allocator_t *a) {
  async_alloc *x = self_of(a);
  mn_status st = mn__device_pool_reset_peak_of(a->device, x->pool);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  pthread_mutex_lock(&x->lock);
  x->count.peak = x->count.current;
  x->bytes.peak = x->bytes.current;
  pthread_mutex_unlock(&x->lock);
  return MN_OK;
}

static mn_status async_check_invariants(mn_allocator_t *a) {
  async_alloc *x = self_of(a);
  pthread_mutex_lock(&x->lock);
  size_t n = 0, bytes = 0;
  bool ok = true;
  for (size_t i = 0; i < x->live.cap; i++) {
    const mn__addrmap_entry_t *e = &x->live.slots[i];
    if (!e->key) continue;
    const async_use *u = e->data;
    n++, bytes += e->size;
    ok = ok && u && u->stream && u->nrecorded <= u->cap;
  }
  n += x->freeing, bytes += x->freeing_bytes;
  ok = ok && (int64_t)n == x->count.current && (int64_t)bytes == x->bytes.current &&
       x->count.allocated - x->count.freed == x->count.current;
  pthread_mutex_unlock(&x->lock);
  if (!ok)
    return mn__error(MN_ERR_INTERNAL, __func__, "stream-ordered allocator: map and frees in flight hold %zu "
                     "allocations / %zu bytes, counters disagree", n, bytes);
  return MN_OK;
}

/* Frees the live allocations (each on its stream, after its recorded
 * streams' work), waits for the device and destroys the pool; their uses are
 * dropped, and with them the holds on their streams. destroy cannot report: a
 * failing device keeps what it could not free (CUDA releases a destroyed
 * pool's memory once its frees have run). */
static void async_destroy(mn_allocator_t *a) {
  async_alloc *x = self_of(a);
  for (size_t i = 0; i < x->live.cap; i++) {
    mn__addrmap_entry_t *e = &x->live.slots[i];
    if (!e->key) continue;
    async_use *u = e->data;
    if (wait_for_recorded(a->device, u->stream, u) == MN_OK)
      mn__ignore(mn__device_pool_free(a->device, x->pool, (void *)e->key, u->stream)); /* destroy cannot report */
    use_free(u);
  }
  mn__ignore(mn_device_synchronize(a->device)); /* destroy cannot report; the queued frees run */
  mn__ignore(mn__device_pool_destroy(a->device, x->pool));
  mn__addrmap_fini(&x->live);
  pthread_mutex_destroy(&x->lock);
  free(x);
}

static const mn_allocator_vtable_t async_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "async",
    .alloc = async_alloc_fn,
    .free = async_free_fn,
    .record_stream = async_record_stream,
    .empty_cache = async_empty_cache,
    .get_stats = async_get_stats,
    .reset_peak = async_reset_peak,
    .check_invariants = async_check_invariants,
    .destroy = async_destroy,
};

mn_status mn_async_allocator_create(mn_device_t dev, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_stream_t *def = NULL;
  void *pool = NULL;
  mn_status st = mn_stream_default(dev, &def);
  /* A pool of its own (NOT_SUPPORTED where the device has none) that keeps
   * freed memory until empty_cache (PyTorch sets the same threshold). */
  if (st == MN_OK) st = mn__device_pool_create(dev, &pool);
  if (st == MN_OK) st = mn__device_pool_set_threshold(dev, pool, SIZE_MAX);
  async_alloc *x = st == MN_OK ? mn__calloc(1, sizeof *x) : NULL;
  if (st == MN_OK && !x) st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (st != MN_OK) {
    if (pool) mn__ignore(mn__device_pool_destroy(dev, pool)); /* rollback: the failure is reported */
    return mn__error_wrap(st, __func__);
  }
  x->base.vtable = &async_vtable;
  x->base.device = dev;
  x->default_stream = def;
  x->pool = pool;
  pthread_mutex_init(&x->lock, NULL);
  mn__addrmap_init(&x->live);
  *out = &x->base;
  return MN_OK;
}
