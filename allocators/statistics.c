/* allocators/statistics.c: the statistics adaptor: counts current, peak and
 * total allocations and bytes for any upstream. Thread-safe: one mutex guards
 * the pointer map and the counters; upstream is called without it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/adaptor.h"
#include "allocators/stat.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"

typedef struct stats_adaptor {
  mn__adaptor_t ad; /* first: upstream, ownership, lock, live map */
  mn_stat_t count, bytes;
  int64_t num_ooms;
} stats_adaptor;

static stats_adaptor *self_of(mn_allocator_t *a) { return (stats_adaptor *)a; }

static mn_status stats_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  stats_adaptor *s = self_of(a);
  void *p = NULL;
  mn_status st = mn_allocator_alloc(s->ad.upstream, nbytes, stream, &p);
  if (st != MN_OK) {
    if (st == MN_ERR_OUT_OF_MEMORY) {
      pthread_mutex_lock(&s->ad.lock);
      s->num_ooms++;
      pthread_mutex_unlock(&s->ad.lock);
    }
    return st; /* upstream's message, prefixed by its dispatch */
  }
  pthread_mutex_lock(&s->ad.lock);
  st = mn__adaptor_map_insert(&s->ad, (uintptr_t)p, nbytes, NULL);
  if (st == MN_OK) {
    mn__stat_inc(&s->count, 1);
    mn__stat_inc(&s->bytes, (int64_t)nbytes);
  }
  pthread_mutex_unlock(&s->ad.lock);
  if (st != MN_OK) {
    mn__ignore(mn_allocator_free(s->ad.upstream, p)); /* give it back: we could not count it; that is reported */
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

/* Takes the pointer out first (so a concurrent double free fails cleanly),
 * frees upstream, and puts it back if upstream refuses. */
static mn_status stats_free(mn_allocator_t *a, void *ptr) {
  stats_adaptor *s = self_of(a);
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&s->ad.lock);
  bool found = mn__adaptor_map_remove(&s->ad, (uintptr_t)ptr, &e);
  if (found) {
    mn__stat_dec(&s->count, 1);
    mn__stat_dec(&s->bytes, (int64_t)e.size);
  }
  pthread_mutex_unlock(&s->ad.lock);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated through this statistics adaptor (or is freed already)", ptr);
  mn_status st = mn_allocator_free(s->ad.upstream, ptr);
  if (st == MN_OK) return MN_OK;
  pthread_mutex_lock(&s->ad.lock);
  if (mn__adaptor_map_insert(&s->ad, e.key, e.size, NULL) == MN_OK) {
    s->count.current++, s->count.freed--;
    s->bytes.current += (int64_t)e.size, s->bytes.freed -= (int64_t)e.size;
  }
  pthread_mutex_unlock(&s->ad.lock);
  return st;
}



static mn_status stats_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  stats_adaptor *s = self_of(a);
  pthread_mutex_lock(&s->ad.lock);
  out->allocation[MN_POOL_ALL] = s->count;
  out->allocated_bytes[MN_POOL_ALL] = s->bytes;
  out->requested_bytes[MN_POOL_ALL] = s->bytes;
  out->num_ooms = s->num_ooms;
  pthread_mutex_unlock(&s->ad.lock);
  return MN_OK;
}

static mn_status stats_reset_peak(mn_allocator_t *a) {
  stats_adaptor *s = self_of(a);
  pthread_mutex_lock(&s->ad.lock);
  s->count.peak = s->count.current;
  s->bytes.peak = s->bytes.current;
  pthread_mutex_unlock(&s->ad.lock);
  return MN_OK;
}


/* The counters equal what the map holds, then upstream's own check. */
static mn_status stats_check_invariants(mn_allocator_t *a) {
  stats_adaptor *s = self_of(a);
  pthread_mutex_lock(&s->ad.lock);
  size_t n = 0, bytes = 0;
  for (size_t i = 0; i < s->ad.live.cap; i++)
    if (s->ad.live.slots[i].key) n++, bytes += s->ad.live.slots[i].size;
  bool ok = n == s->ad.live.count && (int64_t)n == s->count.current && (int64_t)bytes == s->bytes.current &&
            s->count.allocated - s->count.freed == s->count.current &&
            s->bytes.allocated - s->bytes.freed == s->bytes.current && s->count.peak >= s->count.current &&
            s->bytes.peak >= s->bytes.current;
  int64_t cur_n = s->count.current, cur_b = s->bytes.current;
  pthread_mutex_unlock(&s->ad.lock);
  if (!ok)
    return mn__error(MN_ERR_INTERNAL, __func__,
                     "statistics adaptor counts %lld allocations / %lld bytes but tracks %zu / %zu",
                     (long long)cur_n, (long long)cur_b, n, bytes);
  return mn_allocator_check_invariants(s->ad.upstream);
}

static void stats_destroy(mn_allocator_t *a) { mn__adaptor_delete(&self_of(a)->ad); }

static const mn_allocator_vtable_t stats_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "statistics",
    .alloc = stats_alloc,
    .free = stats_free,
    .record_stream = mn__adaptor_record_stream,
    .empty_cache = mn__adaptor_empty_cache,
    .get_stats = stats_get_stats,
    .reset_peak = stats_reset_peak,
    .snapshot = mn__adaptor_snapshot,
    .check_invariants = stats_check_invariants,
    .destroy = stats_destroy,
    .size_of = mn__adaptor_size_of,
};

mn_status mn_statistics_adaptor_create(mn_allocator_t *upstream, unsigned flags, mn_allocator_t **out) {
  MN__CHECK_ARG(upstream != NULL && out != NULL, "upstream and out must not be NULL");
  MN__CHECK_ARG((flags & ~(unsigned)MN_ADAPTOR_OWNS_UPSTREAM) == 0, "flags=0x%x: only MN_ADAPTOR_OWNS_UPSTREAM applies", flags);
  mn__adaptor_t *ad = NULL;
  mn_status st = mn__adaptor_new(__func__, sizeof(stats_adaptor), &stats_vtable, upstream, flags, &ad);
  if (st == MN_OK) *out = &ad->base;
  return st;
}
