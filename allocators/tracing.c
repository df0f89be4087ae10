/* allocators/tracing.c: the tracing adaptor: reports allocs, frees, OOMs and
 * empty_cache calls to a trace sink. Thread-safe: one mutex orders events; it
 * is held across upstream frees so a free is reported before its reuse. */
#include <pthread.h>
#include <stdlib.h>

#include "allocators/adaptor.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/clock.h"
#include "runtime/error.h"

typedef struct trace_adaptor {
  mn__adaptor_t ad; /* first: upstream, ownership, lock, live map */
  mn_trace_sink_fn sink;
  void *user;
  uint64_t default_stream_id;
} trace_adaptor;

static trace_adaptor *self_of(mn_allocator_t *a) { return (trace_adaptor *)a; }

/* pre: t->ad.lock held. */
static void emit(trace_adaptor *t, mn_trace_action action, uint64_t stream_id, void *ptr, size_t size) {
  mn_trace_event_t ev = {
      .action = action,
      .time_ns = mn__clock_ns(),
      .device = t->ad.base.device,
      .stream_id = stream_id,
      .address = (uintptr_t)ptr,
      .size = size,
      .requested_size = action == MN_TRACE_ALLOC ? size : 0,
  };
  t->sink(t->user, &ev);
}

static mn_status trace_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  trace_adaptor *t = self_of(a);
  uint64_t sid = stream ? mn_stream_id(stream) : t->default_stream_id;
  void *p = NULL;
  mn_status st = mn_allocator_alloc(t->ad.upstream, nbytes, stream, &p);
  if (st != MN_OK) {
    if (st == MN_ERR_OUT_OF_MEMORY) {
      pthread_mutex_lock(&t->ad.lock);
      emit(t, MN_TRACE_OOM, sid, NULL, nbytes);
      pthread_mutex_unlock(&t->ad.lock);
    }
    return st;
  }
  pthread_mutex_lock(&t->ad.lock);
  /* The stream id rides in the data word. */
  st = mn__adaptor_map_insert(&t->ad, (uintptr_t)p, nbytes, (void *)(uintptr_t)sid);
  if (st == MN_OK) emit(t, MN_TRACE_ALLOC, sid, p, nbytes);
  pthread_mutex_unlock(&t->ad.lock);
  if (st != MN_OK) {
    mn__ignore(mn_allocator_free(t->ad.upstream, p)); /* rollback: the failure being reported comes first */
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

static mn_status trace_free(mn_allocator_t *a, void *ptr) {
  trace_adaptor *t = self_of(a);
  pthread_mutex_lock(&t->ad.lock);
  mn__addrmap_entry_t *e = mn__adaptor_map_find(&t->ad, (uintptr_t)ptr);
  if (!e) {
    pthread_mutex_unlock(&t->ad.lock);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated through this tracing adaptor (or is freed already)", ptr);
  }
  mn_status st = mn_allocator_free(t->ad.upstream, ptr);
  if (st == MN_OK) {
    mn__addrmap_entry_t gone;
    mn__adaptor_map_remove(&t->ad, (uintptr_t)ptr, &gone);
    emit(t, MN_TRACE_FREE_REQUESTED, (uint64_t)(uintptr_t)gone.data, ptr, gone.size);
  }
  pthread_mutex_unlock(&t->ad.lock);
  return st;
}


static mn_status trace_empty_cache(mn_allocator_t *a) {
  trace_adaptor *t = self_of(a);
  mn_status st = mn_allocator_empty_cache(t->ad.upstream);
  if (st != MN_OK) return st;
  pthread_mutex_lock(&t->ad.lock);
  emit(t, MN_TRACE_EMPTY_CACHE, 0, NULL, 0);
  pthread_mutex_unlock(&t->ad.lock);
  return MN_OK;
}


static void trace_destroy(mn_allocator_t *a) { mn__adaptor_delete(&self_of(a)->ad); }

static const mn_allocator_vtable_t trace_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "tracing",
    .alloc = trace_alloc,
    .free = trace_free,
    .record_stream = mn__adaptor_record_stream,
    .empty_cache = trace_empty_cache,
    .get_stats = mn__adaptor_get_stats,
    .reset_peak = mn__adaptor_reset_peak,
    .snapshot = mn__adaptor_snapshot,
    .check_invariants = mn__adaptor_check_invariants,
    .destroy = trace_destroy,
    .size_of = mn__adaptor_size_of,
};

mn_status mn_tracing_adaptor_create(mn_allocator_t *upstream, mn_trace_sink_fn sink, void *user,
                                    unsigned flags, mn_allocator_t **out) {
  MN__CHECK_ARG(upstream != NULL && sink != NULL && out != NULL, "upstream, sink and out must not be NULL");
  MN__CHECK_ARG((flags & ~(unsigned)MN_ADAPTOR_OWNS_UPSTREAM) == 0, "flags=0x%x: only MN_ADAPTOR_OWNS_UPSTREAM applies", flags);
  mn_stream_t *def = NULL;
  mn_status st = mn_stream_default(mn_allocator_device(upstream), &def);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__adaptor_t *ad = NULL;
  st = mn__adaptor_new(__func__, sizeof(trace_adaptor), &trace_vtable, upstream, flags, &ad);
  if (st != MN_OK) return st;
  trace_adaptor *t = (trace_adaptor *)ad;
  t->sink = sink;
  t->user = user;
  t->default_stream_id = mn_stream_id(def);
  *out = &ad->base;
  return MN_OK;
}
