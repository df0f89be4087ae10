/* allocators/adaptor.c: construction, destruction and the forwarding slots
 * shared by the statistics, limiting, tracing and tracking adaptors. Thread-safe. */
#include <stdlib.h>

#include "allocators/adaptor.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

static mn__adaptor_t *adaptor_of(mn_allocator_t *a) { return (mn__adaptor_t *)a; }

mn_status mn__adaptor_new(const char *func, size_t size, const mn_allocator_vtable_t *vtable,
                          mn_allocator_t *upstream, unsigned flags, mn__adaptor_t **out) {
  MN__ASSERT(upstream != NULL && vtable != NULL && size >= sizeof(mn__adaptor_t),
             "%s: arguments not validated (upstream %p, size %zu)", func, (void *)upstream, size);
  mn__adaptor_t *ad = mn__calloc(1, size);
  if (!ad) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  ad->base.vtable = vtable;
  ad->base.device = mn_allocator_device(upstream);
  ad->upstream = upstream;
  ad->owns_upstream = (flags & MN_ADAPTOR_OWNS_UPSTREAM) != 0;
  pthread_mutex_init(&ad->lock, NULL);
  mn__addrmap_init(&ad->live);
  *out = ad;
  return MN_OK;
}

void mn__adaptor_delete(mn__adaptor_t *ad) {
  if (ad->owns_upstream) mn_allocator_destroy(ad->upstream);
  mn__addrmap_fini(&ad->live);
  pthread_mutex_destroy(&ad->lock);
  free(ad);
}

mn_status mn__adaptor_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  mn__adaptor_t *ad = adaptor_of(a);
  pthread_mutex_lock(&ad->lock);
  bool known = mn__adaptor_map_find(ad, (uintptr_t)ptr) != NULL;
  pthread_mutex_unlock(&ad->lock);
  if (!known)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%p is not a live allocation of this %s adaptor", ptr,
                     a->vtable->name);
  return mn_allocator_record_stream(ad->upstream, ptr, stream);
}

mn_status mn__adaptor_empty_cache(mn_allocator_t *a) { return mn_allocator_empty_cache(adaptor_of(a)->upstream); }

mn_status mn__adaptor_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  return mn_allocator_get_stats(adaptor_of(a)->upstream, out);
}

mn_status mn__adaptor_reset_peak(mn_allocator_t *a) { return mn_allocator_reset_peak(adaptor_of(a)->upstream); }

mn_status mn__adaptor_snapshot(mn_allocator_t *a, mn_snapshot_t **out) {
  return mn_allocator_snapshot(adaptor_of(a)->upstream, out);
}

mn_status mn__adaptor_check_invariants(mn_allocator_t *a) {
  return mn_allocator_check_invariants(adaptor_of(a)->upstream);
}

size_t mn__adaptor_size_of(mn_allocator_t *a, const void *ptr) {
  return mn_allocator_size_of(adaptor_of(a)->upstream, ptr); /* 0 where the upstream's vtable has no size_of */
}
