/* allocators/tracking.c: the tracking adaptor: records every live allocation
 * (size, stream, thread tag, optional backtrace) and reports leaks. Thread-safe:
 * one mutex guards the map of records; tags are thread-local; upstream runs unlocked. */
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/adaptor.h"
#include "mnemo/adaptors.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

typedef struct track_record {
  uint64_t seq;       /* allocation number through this adaptor, from 1 */
  size_t size;        /* bytes asked */
  uint64_t stream_id;
  char tag[MN_TRACKING_TAG_MAX];
  int nframes;
  void *frames[MN_TRACKING_MAX_FRAMES];
} track_record;

typedef struct track_adaptor {
  mn__adaptor_t ad; /* first: upstream, ownership, lock, live map */
  bool backtraces;
  uint64_t default_stream_id;
  uint64_t next_seq;
  size_t live_bytes;
} track_adaptor;

static _Thread_local char g_tag[MN_TRACKING_TAG_MAX];

void mn_tracking_set_tag(const char *tag) {
  size_t n = tag ? strnlen(tag, MN_TRACKING_TAG_MAX - 1) : 0;
  memcpy(g_tag, tag ? tag : "", n);
  g_tag[n] = '\0';
}

const char *mn_tracking_get_tag(void) { return g_tag; }

static track_adaptor *self_of(mn_allocator_t *a) { return (track_adaptor *)a; }

static mn_status track_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  track_adaptor *t = self_of(a);
  /* Made before upstream is asked, so a failure here costs no device call. */
  track_record *r = mn__calloc(1, sizeof *r);
  if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a tracking record");
  r->size = nbytes;
  r->stream_id = stream ? mn_stream_id(stream) : t->default_stream_id;
  memcpy(r->tag, g_tag, sizeof r->tag);
  if (t->backtraces) r->nframes = backtrace(r->frames, MN_TRACKING_MAX_FRAMES);
  void *p = NULL;
  mn_status st = mn_allocator_alloc(t->ad.upstream, nbytes, stream, &p);
  if (st != MN_OK) {
    free(r);
    return st;
  }
  pthread_mutex_lock(&t->ad.lock);
  st = mn__adaptor_map_insert(&t->ad, (uintptr_t)p, nbytes, r);
  if (st == MN_OK) {
    r->seq = ++t->next_seq;
    t->live_bytes += nbytes;
  }
  pthread_mutex_unlock(&t->ad.lock);
  if (st != MN_OK) {
    free(r);
    mn__ignore(mn_allocator_free(t->ad.upstream, p)); /* rollback: the failure being reported comes first */
    return mn__error(st, __func__, "cannot record %zu-byte allocation %p (out of host memory)", nbytes, p);
  }
  *out = p;
  return MN_OK;
}

static mn_status track_free(mn_allocator_t *a, void *ptr) {
  track_adaptor *t = self_of(a);
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&t->ad.lock);
  bool found = mn__adaptor_map_remove(&t->ad, (uintptr_t)ptr, &e);
  if (found) t->live_bytes -= e.size;
  pthread_mutex_unlock(&t->ad.lock);
  if (!found)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "%p was not allocated through this tracking adaptor (or is freed already)", ptr);
  mn_status st = mn_allocator_free(t->ad.upstream, ptr);
  if (st == MN_OK) {
    free(e.data);
    return MN_OK;
  }
  pthread_mutex_lock(&t->ad.lock);
  if (mn__adaptor_map_insert(&t->ad, e.key, e.size, e.data) == MN_OK)
    t->live_bytes += e.size;
  else
    free(e.data); /* cannot track it any more */
  pthread_mutex_unlock(&t->ad.lock);
  return st;
}



static mn_status track_check_invariants(mn_allocator_t *a) {
  track_adaptor *t = self_of(a);
  pthread_mutex_lock(&t->ad.lock);
  size_t n = 0, bytes = 0;
  bool ok = true;
  for (size_t i = 0; i < t->ad.live.cap; i++) {
    const mn__addrmap_entry_t *e = &t->ad.live.slots[i];
    if (!e->key) continue;
    const track_record *r = e->data;
    n++, bytes += e->size;
    ok = ok && r && r->size == e->size && r->seq >= 1 && r->seq <= t->next_seq;
  }
  ok = ok && n == t->ad.live.count && bytes == t->live_bytes;
  size_t want = t->live_bytes;
  pthread_mutex_unlock(&t->ad.lock);
  if (!ok)
    return mn__error(MN_ERR_INTERNAL, __func__, "tracking adaptor: %zu records of %zu bytes, %zu bytes counted",
                     n, bytes, want);
  return mn_allocator_check_invariants(t->ad.upstream);
}

static void track_destroy(mn_allocator_t *a) {
  track_adaptor *t = self_of(a);
  for (size_t i = 0; i < t->ad.live.cap; i++)
    if (t->ad.live.slots[i].key) free(t->ad.live.slots[i].data);
  mn__adaptor_delete(&t->ad);
}

static const mn_allocator_vtable_t track_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "tracking",
    .alloc = track_alloc,
    .free = track_free,
    .record_stream = mn__adaptor_record_stream,
    .empty_cache = mn__adaptor_empty_cache,
    .get_stats = mn__adaptor_get_stats,
    .reset_peak = mn__adaptor_reset_peak,
    .snapshot = mn__adaptor_snapshot,
    .check_invariants = track_check_invariants,
    .destroy = track_destroy,
    .size_of = mn__adaptor_size_of,
};

mn_status mn_tracking_adaptor_create(mn_allocator_t *upstream, unsigned flags, mn_allocator_t **out) {
  MN__CHECK_ARG(upstream != NULL && out != NULL, "upstream and out must not be NULL");
  MN__CHECK_ARG((flags & ~(unsigned)(MN_ADAPTOR_OWNS_UPSTREAM | MN_ADAPTOR_CAPTURE_BACKTRACES)) == 0,
                "flags=0x%x: only MN_ADAPTOR_OWNS_UPSTREAM and MN_ADAPTOR_CAPTURE_BACKTRACES apply", flags);
  mn_stream_t *def = NULL;
  mn_status st = mn_stream_default(mn_allocator_device(upstream), &def);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__adaptor_t *ad = NULL;
  st = mn__adaptor_new(__func__, sizeof(track_adaptor), &track_vtable, upstream, flags, &ad);
  if (st != MN_OK) return st;
  track_adaptor *t = (track_adaptor *)ad;
  t->backtraces = (flags & MN_ADAPTOR_CAPTURE_BACKTRACES) != 0;
  t->default_stream_id = mn_stream_id(def);
  if (t->backtraces) {
    /* backtrace() loads its unwinder on first use; do that now, not inside an alloc. */
    void *warm[1];
    (void)backtrace(warm, 1);
  }
  *out = &t->ad.base;
  return MN_OK;
}

static mn_status tracking_arg(const char *func, mn_allocator_t *a) {
  if (!a) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "allocator must not be NULL");
  if (a->vtable != &track_vtable)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the %s allocator is not a tracking adaptor", mn_allocator_name(a));
  return MN_OK;
}

mn_status mn_tracking_adaptor_live(mn_allocator_t *a, size_t *count, size_t *bytes) {
  mn_status st = tracking_arg(__func__, a);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(count != NULL && bytes != NULL, "count and bytes must not be NULL");
  track_adaptor *t = self_of(a);
  pthread_mutex_lock(&t->ad.lock);
  *count = t->ad.live.count;
  *bytes = t->live_bytes;
  pthread_mutex_unlock(&t->ad.lock);
  return MN_OK;
}

typedef struct report_row {
  uintptr_t address;
  track_record rec;
} report_row;

static int row_by_seq(const void *x, const void *y) {
  uint64_t a = ((const report_row *)x)->rec.seq, b = ((const report_row *)y)->rec.seq;
  return (a > b) - (a < b);
}

/* Copies the records under the lock, then writes them without it. */
mn_status mn_tracking_adaptor_report(mn_allocator_t *a, FILE *out) {
  mn_status st = tracking_arg(__func__, a);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  track_adaptor *t = self_of(a);
  pthread_mutex_lock(&t->ad.lock);
  size_t n = t->ad.live.count, bytes = t->live_bytes, k = 0;
  report_row *rows = n ? mn__malloc(n * sizeof *rows) : NULL;
  if (rows) {
    for (size_t i = 0; i < t->ad.live.cap; i++)
      if (t->ad.live.slots[i].key)
        rows[k++] = (report_row){t->ad.live.slots[i].key, *(const track_record *)t->ad.live.slots[i].data};
  }
  pthread_mutex_unlock(&t->ad.lock);
  if (n && !rows) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu report rows", n);
  if (k > 1) qsort(rows, k, sizeof *rows, row_by_seq);
  char dev[32];
  int bad = fprintf(out, "mnemo tracking %s: %zu live allocation%s, %zu bytes\n",
                    mn_device_format(a->device, dev, sizeof dev), n, n == 1 ? "" : "s", bytes) < 0;
  for (size_t i = 0; i < k && !bad; i++) {
    const track_record *r = &rows[i].rec;
    bad |= fprintf(out, "  #%" PRIu64 " %p %zu bytes stream %" PRIu64 " tag \"%s\"\n", r->seq,
                   (void *)rows[i].address, r->size, r->stream_id, r->tag) < 0;
    if (r->nframes <= 0) continue;
    char **names = backtrace_symbols(r->frames, r->nframes);
    for (int f = 0; f < r->nframes && !bad; f++) {
      if (names)
        bad |= fprintf(out, "      %2d %s\n", f, names[f]) < 0;
      else
        bad |= fprintf(out, "      %2d %p\n", f, r->frames[f]) < 0;
    }
    free(names);
  }
  free(rows);
  if (bad || fflush(out) != 0) return mn__error(MN_ERR_IO, __func__, "writing the tracking report failed");
  return MN_OK;
}
