/* allocators/adaptor.h: the header every RMM-style adaptor starts with (upstream,
 * ownership, lock, live-pointer map) and its shared slots; callers of the map hold `lock`
 * (the mn__adaptor_map_* calls assert it at MNEMO_DEBUG >= 1). */
#ifndef MNEMO_ALLOCATORS_ADAPTOR_H
#define MNEMO_ALLOCATORS_ADAPTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/debug.h"
#include "runtime/ptrmap.h"
#include "mnemo/mnemo.h"

typedef struct mn__adaptor_s {
  mn_allocator_t base;      /* first: the vtable header */
  mn_allocator_t *upstream;
  bool owns_upstream;       /* MN_ADAPTOR_OWNS_UPSTREAM: destroyed with the adaptor */
  pthread_mutex_t lock;     /* guards `live` and the adaptor's own fields */
  mn__addrmap_t live;       /* address -> bytes asked (+ the adaptor's payload) */
} mn__adaptor_t;

/* MNEMO_DEBUG >= 1: asserts the adaptor's lock is held. trylock cannot tell
 * which thread holds it; it catches a use made with the lock not held at all. */
#if MNEMO_DEBUG >= 1
static inline bool mn__adaptor_lock_held(mn__adaptor_t *ad) {
  if (pthread_mutex_trylock(&ad->lock) != 0) return true;
  pthread_mutex_unlock(&ad->lock);
  return false;
}
#define MN__ASSERT_ADAPTOR_LOCKED(ad) MN__ASSERT(mn__adaptor_lock_held(ad), "the adaptor's live map used without its lock")
#else
#define MN__ASSERT_ADAPTOR_LOCKED(ad) ((void)0)
#endif

/* The live map's insert, remove and find (runtime/ptrmap.h). pre: ad->lock held. */
static inline mn_status mn__adaptor_map_insert(mn__adaptor_t *ad, uintptr_t key, size_t size, void *data) {
  MN__ASSERT_ADAPTOR_LOCKED(ad);
  return mn__addrmap_insert(&ad->live, key, size, data);
}
static inline bool mn__adaptor_map_remove(mn__adaptor_t *ad, uintptr_t key, mn__addrmap_entry_t *out) {
  MN__ASSERT_ADAPTOR_LOCKED(ad);
  return mn__addrmap_remove(&ad->live, key, out);
}
static inline mn__addrmap_entry_t *mn__adaptor_map_find(mn__adaptor_t *ad, uintptr_t key) {
  MN__ASSERT_ADAPTOR_LOCKED(ad);
  return mn__addrmap_find(&ad->live, key);
}

/* Allocates `size` zeroed bytes (an adaptor struct that begins with
 * mn__adaptor_t) and fills the header for `upstream`. The caller has
 * validated its arguments; `func` names it in the out-of-memory message. */
mn_status mn__adaptor_new(const char *func, size_t size, const mn_allocator_vtable_t *vtable,
                          mn_allocator_t *upstream, unsigned flags, mn__adaptor_t **out);
/* Destroys the upstream if owned, frees the map (not its payloads), the lock and the struct. */
void mn__adaptor_delete(mn__adaptor_t *ad);

/* Shared slots. record_stream refuses pointers the adaptor did not hand out,
 * then forwards; the others forward to the upstream unchanged. */
mn_status mn__adaptor_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream);
mn_status mn__adaptor_empty_cache(mn_allocator_t *a);
mn_status mn__adaptor_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out);
mn_status mn__adaptor_reset_peak(mn_allocator_t *a);
mn_status mn__adaptor_snapshot(mn_allocator_t *a, mn_snapshot_t **out);
mn_status mn__adaptor_check_invariants(mn_allocator_t *a);
size_t mn__adaptor_size_of(mn_allocator_t *a, const void *ptr);

#endif /* MNEMO_ALLOCATORS_ADAPTOR_H */
