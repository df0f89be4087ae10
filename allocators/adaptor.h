/* allocators/adaptor.h: the header every RMM-style adaptor starts with (upstream,
 * ownership, lock, live-pointer map) and its shared slots; callers of the map hold `lock`. */
#ifndef MNEMO_ALLOCATORS_ADAPTOR_H
#define MNEMO_ALLOCATORS_ADAPTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/ptrmap.h"
#include "mnemo/mnemo.h"

typedef struct mn__adaptor_s {
  mn_allocator_t base;      /* first: the vtable header */
  mn_allocator_t *upstream;
  bool owns_upstream;       /* MN_ADAPTOR_OWNS_UPSTREAM: destroyed with the adaptor */
  pthread_mutex_t lock;     /* guards `live` and the adaptor's own fields */
  mn__addrmap_t live;       /* address -> bytes asked (+ the adaptor's payload) */
} mn__adaptor_t;

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
