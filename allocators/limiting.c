/* allocators/limiting.c: the limiting adaptor: a cap on the bytes live through
 * it; reserve first, call upstream, roll back on failure. Thread-safe: one
 * mutex guards the reservation count and the pointer map; upstream runs unlocked. */
#include <pthread.h>
#include <stdlib.h>

#include "allocators/ptrmap.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"

typedef struct limit_adaptor {
  mn_allocator_t base; /* first: the vtable header */
  mn_allocator_t *upstream;
  bool owns_upstream;
  size_t limit;
  pthread_mutex_t lock;
  size_t used;       /* bytes reserved: live + in flight */
  mn__addrmap_t live; /* address -> bytes asked */
} limit_adaptor;

static limit_adaptor *self_of(mn_allocator_t *a) { return (limit_adaptor *)a; }

static void unreserve(limit_adaptor *l, size_t n) {
  pthread_mutex_lock(&l->lock);
  l->used -= n;
  pthread_mutex_unlock(&l->lock);
}

static mn_status limit_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->lock);
  size_t used = l->used;
  bool fits = nbytes <= l->limit - used; /* used <= limit always holds */
  if (fits) l->used += nbytes;
  pthread_mutex_unlock(&l->lock);
  if (!fits) {
    char dev[32];
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "%s limit of %zu bytes reached: %zu bytes in use, %zu bytes asked",
                     mn_device_format(a->device, dev, sizeof dev), l->limit, used, nbytes);
  }
  void *p = NULL;
  mn_status st = mn_allocator_alloc(l->upstream, nbytes, stream, &p);
  if (st != MN_OK) {
    unreserve(l, nbytes); /* roll back: the bytes were never used */
    return st;
  }
  pthread_mutex_lock(&l->lock);
  st = mn__addrmap_insert(&l->live, (uintptr_t)p, nbytes, NULL);
  if (st != MN_OK) l->used -= nbytes;
  pthread_mutex_unlock(&l->lock);
  if (st != MN_OK) {
    (void)mn_allocator_free(l->upstream, p);
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

static mn_status limit_free(mn_allocator_t *a, void *ptr) {
  limit_adaptor *l = self_of(a);
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&l->lock);
  bool found = mn__addrmap_remove(&l->live, (uintptr_t)ptr, &e);
  pthread_mutex_unlock(&l->lock);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated through this limiting adaptor (or is freed already)", ptr);
  /* The bytes stay reserved until upstream has taken the memory back. */
  mn_status st = mn_allocator_free(l->upstream, ptr);
  pthread_mutex_lock(&l->lock);
  if (st == MN_OK)
    l->used -= e.size;
  else if (mn__addrmap_insert(&l->live, e.key, e.size, NULL) != MN_OK)
    l->used -= e.size; /* cannot track it any more: stop counting it */
  pthread_mutex_unlock(&l->lock);
  return st;
}

static mn_status limit_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->lock);
  bool known = mn__addrmap_find(&l->live, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&l->lock);
  if (!known)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%p is not a live allocation of this limiting adaptor", ptr);
  return mn_allocator_record_stream(l->upstream, ptr, stream);
}

static mn_status limit_empty_cache(mn_allocator_t *a) { return mn_allocator_empty_cache(self_of(a)->upstream); }
static mn_status limit_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  return mn_allocator_get_stats(self_of(a)->upstream, out);
}
static mn_status limit_reset_peak(mn_allocator_t *a) { return mn_allocator_reset_peak(self_of(a)->upstream); }
static mn_status limit_snapshot(mn_allocator_t *a, mn_snapshot_t **out) {
  return mn_allocator_snapshot(self_of(a)->upstream, out);
}

static mn_status limit_check_invariants(mn_allocator_t *a) {
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->lock);
  size_t bytes = 0;
  for (size_t i = 0; i < l->live.cap; i++)
    if (l->live.slots[i].key) bytes += l->live.slots[i].size;
  size_t used = l->used;
  pthread_mutex_unlock(&l->lock);
  /* used may exceed the live bytes only by allocations and frees in flight. */
  if (used > l->limit || bytes > used)
    return mn__error(MN_ERR_INTERNAL, __func__, "limiting adaptor: %zu bytes reserved, %zu live, limit %zu",
                     used, bytes, l->limit);
  return mn_allocator_check_invariants(l->upstream);
}

static void limit_destroy(mn_allocator_t *a) {
  limit_adaptor *l = self_of(a);
  if (l->owns_upstream) mn_allocator_destroy(l->upstream);
  mn__addrmap_fini(&l->live);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

static const mn_allocator_vtable_t limit_vtable = {
    .name = "limiting",
    .alloc = limit_alloc,
    .free = limit_free,
    .record_stream = limit_record_stream,
    .empty_cache = limit_empty_cache,
    .get_stats = limit_get_stats,
    .reset_peak = limit_reset_peak,
    .snapshot = limit_snapshot,
    .check_invariants = limit_check_invariants,
    .destroy = limit_destroy,
};

mn_status mn_limiting_adaptor_create(mn_allocator_t *upstream, size_t limit_bytes, unsigned flags,
                                     mn_allocator_t **out) {
  MN__CHECK_ARG(upstream != NULL && out != NULL, "upstream and out must not be NULL");
  MN__CHECK_ARG((flags & ~(unsigned)MN_ADAPTOR_OWNS_UPSTREAM) == 0, "flags=0x%x: only MN_ADAPTOR_OWNS_UPSTREAM applies", flags);
  limit_adaptor *l = calloc(1, sizeof *l);
  if (!l) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  l->base.vtable = &limit_vtable;
  l->base.device = mn_allocator_device(upstream);
  l->upstream = upstream;
  l->owns_upstream = (flags & MN_ADAPTOR_OWNS_UPSTREAM) != 0;
  l->limit = limit_bytes;
  pthread_mutex_init(&l->lock, NULL);
  mn__addrmap_init(&l->live);
  *out = &l->base;
  return MN_OK;
}

mn_status mn_limiting_adaptor_usage(mn_allocator_t *a, size_t *used_bytes, size_t *limit_bytes) {
  MN__CHECK_ARG(a != NULL && used_bytes != NULL && limit_bytes != NULL, "arguments must not be NULL");
  MN__CHECK_ARG(a->vtable == &limit_vtable, "the %s allocator is not a limiting adaptor", mn_allocator_name(a));
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->lock);
  *used_bytes = l->used;
  pthread_mutex_unlock(&l->lock);
  *limit_bytes = l->limit;
  return MN_OK;
}
