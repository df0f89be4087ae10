/* allocators/limiting.c: the limiting adaptor: a cap on the bytes live through
 * it; reserve first, call upstream, roll back on failure. Thread-safe: one
 * mutex guards the reservation count and the pointer map; upstream runs unlocked. */
#include <pthread.h>
#include <stdlib.h>

#include "allocators/adaptor.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"

typedef struct limit_adaptor {
  mn__adaptor_t ad; /* first: upstream, ownership, lock, live map */
  size_t limit;
  size_t used;       /* bytes reserved: live + in flight */
} limit_adaptor;

static limit_adaptor *self_of(mn_allocator_t *a) { return (limit_adaptor *)a; }

static void unreserve(limit_adaptor *l, size_t n) {
  pthread_mutex_lock(&l->ad.lock);
  l->used -= n;
  pthread_mutex_unlock(&l->ad.lock);
}

static mn_status limit_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->ad.lock);
  size_t used = l->used;
  bool fits = nbytes <= l->limit - used; /* used <= limit always holds */
  if (fits) l->used += nbytes;
  pthread_mutex_unlock(&l->ad.lock);
  if (!fits) {
    char dev[32];
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "%s limit of %zu bytes reached: %zu bytes in use, %zu bytes asked",
                     mn_device_format(a->device, dev, sizeof dev), l->limit, used, nbytes);
  }
  void *p = NULL;
  mn_status st = mn_allocator_alloc(l->ad.upstream, nbytes, stream, &p);
  if (st != MN_OK) {
    unreserve(l, nbytes); /* roll back: the bytes were never used */
    return st;
  }
  pthread_mutex_lock(&l->ad.lock);
  st = mn__adaptor_map_insert(&l->ad, (uintptr_t)p, nbytes, NULL);
  if (st != MN_OK) l->used -= nbytes;
  pthread_mutex_unlock(&l->ad.lock);
  if (st != MN_OK) {
    mn__ignore(mn_allocator_free(l->ad.upstream, p)); /* rollback: the refusal is reported */
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

static mn_status limit_free(mn_allocator_t *a, void *ptr) {
  limit_adaptor *l = self_of(a);
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&l->ad.lock);
  bool found = mn__adaptor_map_remove(&l->ad, (uintptr_t)ptr, &e);
  pthread_mutex_unlock(&l->ad.lock);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated through this limiting adaptor (or is freed already)", ptr);
  /* The bytes stay reserved until upstream has taken the memory back. */
  mn_status st = mn_allocator_free(l->ad.upstream, ptr);
  pthread_mutex_lock(&l->ad.lock);
  if (st == MN_OK)
    l->used -= e.size;
  else if (mn__adaptor_map_insert(&l->ad, e.key, e.size, NULL) != MN_OK)
    l->used -= e.size; /* cannot track it any more: stop counting it */
  pthread_mutex_unlock(&l->ad.lock);
  return st;
}



static mn_status limit_check_invariants(mn_allocator_t *a) {
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->ad.lock);
  size_t bytes = 0;
  for (size_t i = 0; i < l->ad.live.cap; i++)
    if (l->ad.live.slots[i].key) bytes += l->ad.live.slots[i].size;
  size_t used = l->used;
  pthread_mutex_unlock(&l->ad.lock);
  /* used may exceed the live bytes only by allocations and frees in flight. */
  if (used > l->limit || bytes > used)
    return mn__error(MN_ERR_INTERNAL, __func__, "limiting adaptor: %zu bytes reserved, %zu live, limit %zu",
                     used, bytes, l->limit);
  return mn_allocator_check_invariants(l->ad.upstream);
}

static void limit_destroy(mn_allocator_t *a) { mn__adaptor_delete(&self_of(a)->ad); }

static const mn_allocator_vtable_t limit_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "limiting",
    .alloc = limit_alloc,
    .free = limit_free,
    .record_stream = mn__adaptor_record_stream,
    .empty_cache = mn__adaptor_empty_cache,
    .get_stats = mn__adaptor_get_stats,
    .reset_peak = mn__adaptor_reset_peak,
    .snapshot = mn__adaptor_snapshot,
    .check_invariants = limit_check_invariants,
    .destroy = limit_destroy,
    .size_of = mn__adaptor_size_of,
};

mn_status mn_limiting_adaptor_create(mn_allocator_t *upstream, size_t limit_bytes, unsigned flags,
                                     mn_allocator_t **out) {
  MN__CHECK_ARG(upstream != NULL && out != NULL, "upstream and out must not be NULL");
  MN__CHECK_ARG((flags & ~(unsigned)MN_ADAPTOR_OWNS_UPSTREAM) == 0, "flags=0x%x: only MN_ADAPTOR_OWNS_UPSTREAM applies", flags);
  mn__adaptor_t *ad = NULL;
  mn_status st = mn__adaptor_new(__func__, sizeof(limit_adaptor), &limit_vtable, upstream, flags, &ad);
  if (st != MN_OK) return st;
  ((limit_adaptor *)ad)->limit = limit_bytes;
  *out = &ad->base;
  return MN_OK;
}

mn_status mn_limiting_adaptor_usage(mn_allocator_t *a, size_t *used_bytes, size_t *limit_bytes) {
  MN__CHECK_ARG(a != NULL && used_bytes != NULL && limit_bytes != NULL, "arguments must not be NULL");
  MN__CHECK_ARG(a->vtable == &limit_vtable, "the %s allocator is not a limiting adaptor", mn_allocator_name(a));
  limit_adaptor *l = self_of(a);
  pthread_mutex_lock(&l->ad.lock);
  *used_bytes = l->used;
  pthread_mutex_unlock(&l->ad.lock);
  *limit_bytes = l->limit;
  return MN_OK;
}
