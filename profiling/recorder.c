/* profiling/recorder.c: the bounded trace recorder: a ring buffer of allocator
 * events under one mutex (any thread, any allocator), turned into a trace on demand or at exit. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/events.h"
#include "runtime/hostmem.h"

#define MN__RECORDER_MAX_DEVICES 64

struct mn_trace_recorder_s {
  pthread_mutex_t lock;
  mn_trace_event_t *ring;
  size_t capacity, head, held; /* the oldest event is ring[head] */
  uint64_t recorded, overwritten;
};

mn_status mn_trace_recorder_create(size_t capacity, mn_trace_recorder_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(capacity >= 1 && capacity <= SIZE_MAX / sizeof(mn_trace_event_t), "capacity %zu is not 1.. %zu",
                capacity, SIZE_MAX / sizeof(mn_trace_event_t));
  mn_trace_recorder_t *r = mn__calloc(1, sizeof *r);
  if (r) r->ring = mn__malloc(capacity * sizeof *r->ring);
  if (!r || !r->ring) {
    free(r);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu events", capacity);
  }
  if (pthread_mutex_init(&r->lock, NULL) != 0) {
    free(r->ring);
    free(r);
    return mn__error(MN_ERR_INTERNAL, __func__, "pthread_mutex_init failed");
  }
  r->capacity = capacity;
  *out = r;
  return MN_OK;
}

void mn_trace_recorder_destroy(mn_trace_recorder_t *rec) {
  if (!rec) return;
  pthread_mutex_destroy(&rec->lock);
  free(rec->ring);
  free(rec);
}

void mn_trace_recorder_sink_fn(void *user, const mn_trace_event_t *event) {
  mn_trace_recorder_t *r = user;
  if (!r || !event) return;
  pthread_mutex_lock(&r->lock);
  r->recorded++;
  if (r->held < r->capacity) {
    r->ring[(r->head + r->held) % r->capacity] = *event;
    r->held++;
  } else { /* full: the oldest goes */
    r->ring[r->head] = *event;
    r->head = (r->head + 1) % r->capacity;
    r->overwritten++;
  }
  pthread_mutex_unlock(&r->lock);
}

mn_status mn_trace_recorder_get_stats(mn_trace_recorder_t *rec, mn_trace_recorder_stats_t *out) {
  MN__CHECK_ARG(rec != NULL && out != NULL, "rec and out must not be NULL");
  pthread_mutex_lock(&rec->lock);
  out->recorded = rec->recorded;
  out->overwritten = rec->overwritten;
  out->held = rec->held;
  out->capacity = rec->capacity;
  pthread_mutex_unlock(&rec->lock);
  return MN_OK;
}

void mn_trace_recorder_clear(mn_trace_recorder_t *rec) {
  if (!rec) return;
  pthread_mutex_lock(&rec->lock);
  rec->head = rec->held = 0;
  rec->recorded = rec->overwritten = 0;
  pthread_mutex_unlock(&rec->lock);
}

typedef struct mn__live_s {
  uint32_t device;
  uint64_t address;
  size_t index; /* event index of the alloc */
} mn__live_t;

static int live_cmp(const void *a, const void *b) {
  const mn__live_t *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->address != y->address) return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Which free_requested events free an allocation made before the window:
 * those whose (device, address) has no earlier alloc in the window that is
 * still live. pre_of[i] is set for them. */
static mn_status find_pre(const mn_trace_event_t *ev, const uint32_t *dev, size_t n, bool *pre_of) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m += ev[i].action == MN_TRACE_ALLOC || ev[i].action == MN_TRACE_FREE_REQUESTED;
  mn__live_t *refs = mn__malloc((m ? m : 1) * sizeof *refs);
  if (!refs) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_recorder_to_trace", "out of host memory");
  m = 0;
  for (size_t i = 0; i < n; i++)
    if (ev[i].action == MN_TRACE_ALLOC || ev[i].action == MN_TRACE_FREE_REQUESTED)
      refs[m++] = (mn__live_t){dev[i], (uint64_t)ev[i].address, i};
  qsort(refs, m, sizeof *refs, live_cmp);
  for (size_t k = 0; k < m;) {
    size_t j = k;
    bool live = false;
    for (; j < m && refs[j].device == refs[k].device && refs[j].address == refs[k].address; j++) {
      size_t i = refs[j].index;
      if (ev[i].action == MN_TRACE_ALLOC) live = true;
      else if (live) live = false;
      else pre_of[i] = true;
    }
    k = j;
  }
  free(refs);
  return MN_OK;
}

mn_status mn_trace_recorder_to_trace(mn_trace_recorder_t *rec, mn_trace_t **out) {
  MN__CHECK_ARG(rec != NULL && out != NULL, "rec and out must not be NULL");
  pthread_mutex_lock(&rec->lock);
  size_t n = rec->held;
  mn_trace_event_t *ev = mn__malloc((n ? n : 1) * sizeof *ev);
  if (ev)
    for (size_t i = 0; i < n; i++) ev[i] = rec->ring[(rec->head + i) % rec->capacity];
  uint64_t overwritten = rec->overwritten;
  pthread_mutex_unlock(&rec->lock);
  uint32_t *dev = mn__malloc((n ? n : 1) * sizeof *dev);
  bool *pre_of = mn__calloc(n ? n : 1, sizeof *pre_of);
  mn_trace_t *t = NULL;
  mn_status st = MN_OK;
  if (!ev || !dev || !pre_of) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu events", n);
    goto done;
  }
  /* Device indices in order of first appearance. */
  mn_device_t devices[MN__RECORDER_MAX_DEVICES];
  uint32_t ndev = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t d = 0;
    while (d < ndev && !mn_device_equal(devices[d], ev[i].device)) d++;
    if (d == ndev) {
      if (ndev == MN__RECORDER_MAX_DEVICES) {
        st = mn__error(MN_ERR_NOT_SUPPORTED, __func__, "events from more than %d devices", MN__RECORDER_MAX_DEVICES);
        goto done;
      }
      devices[ndev++] = ev[i].device;
    }
    dev[i] = d;
  }
  if ((st = find_pre(ev, dev, n, pre_of)) != MN_OK) goto done;
  if ((st = mn_trace_create(&t)) != MN_OK) goto done;
  uint64_t origin = n ? ev[0].time_ns : 0;
  char buf[64 * (MN__RECORDER_MAX_DEVICES + 1)], one[40];
  size_t used = 0;
  buf[0] = '\0';
  for (uint32_t d = 0; d < ndev; d++) {
    mn_device_format(devices[d], one, sizeof one);
    used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", d ? " " : "", one);
  }
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, origin / 1000);
  st = mn_trace_meta_set(t, "recorded_by", "mnemo");
  if (st == MN_OK) st = mn_trace_meta_set(t, "device", ndev ? buf : "none");
  if (st == MN_OK && ndev > 1) st = mn_trace_meta_set(t, "device_names", buf);
  if (st == MN_OK) st = mn_trace_meta_set(t, "time_origin_us", num);
  snprintf(num, sizeof num, "%" PRIu64, overwritten);
  if (st == MN_OK) st = mn_trace_meta_set(t, "recorder_overwritten", num);
  /* Pre allocations first (made before the window, freed in it), then the events. */
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    if (!pre_of[i]) continue;
    mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .pre = true, .stream = ev[i].stream_id,
                          .address = (uint64_t)ev[i].address,
                          .size = ev[i].requested_size ? ev[i].requested_size : ev[i].size,
                          .block_size = ev[i].size, .device = dev[i]};
    if (e.size == 0) e.size = 1;
    st = mn_trace_append(t, &e);
  }
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    const mn_trace_event_t *x = &ev[i];
    if ((unsigned)x->action >= MN_TRACE_ACTION_COUNT) continue;
    if (x->action == MN_TRACE_ALLOC && x->size == 0 && x->requested_size == 0) continue;
    mn_trace_entry_t e = {.action = x->action, .time_us = x->time_ns > origin ? (x->time_ns - origin) / 1000 : 0,
                          .stream = x->stream_id, .address = (uint64_t)x->address, .size = x->size,
                          .device = dev[i]};
    bool block_event = x->action == MN_TRACE_ALLOC || x->action == MN_TRACE_FREE_REQUESTED ||
                       x->action == MN_TRACE_FREE_COMPLETED;
    if (block_event && x->requested_size) e.size = x->requested_size;
    if (x->action == MN_TRACE_ALLOC) e.block_size = x->size;
    st = mn_trace_append(t, &e);
  }
  if (st == MN_OK) st = mn_trace_validate(t);
done:
  free(ev);
  free(dev);
  free(pre_of);
  if (st != MN_OK) {
    mn_trace_destroy(t);
    return mn__error_wrap(st, __func__);
  }
  *out = t;
  return MN_OK;
}

mn_status mn_trace_recorder_write(mn_trace_recorder_t *rec, const char *path) {
  MN__CHECK_ARG(rec != NULL && path != NULL, "rec and path must not be NULL");
  mn_trace_t *t = NULL;
  mn_status st = mn_trace_recorder_to_trace(rec, &t);
  if (st == MN_OK) st = mn_trace_write(t, path);
  mn_trace_destroy(t);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- the process-wide recorder (MNEMO_TRACE) ------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static mn_trace_recorder_t *g_rec;
static char *g_path;

static void write_at_exit(void) {
  if (!g_rec || !g_path) return;
  if (mn_trace_recorder_write(g_rec, g_path) != MN_OK)
    fprintf(stderr, "mnemo: MNEMO_TRACE: %s\n", mn_last_error());
}

static void global_init(void) {
  const char *path = mn__env(MN__ENV_TRACE);
  if (!path || !path[0]) return;
  size_t cap = 1000000;
  const char *c = mn__env(MN__ENV_TRACE_CAPACITY);
  if (c && c[0]) {
    char *end = NULL;
    unsigned long long v = strtoull(c, &end, 10);
    if (*end || v == 0 || v > SIZE_MAX / sizeof(mn_trace_event_t)) {
      fprintf(stderr, "mnemo: MNEMO_TRACE_CAPACITY=\"%s\" is not an event count; using %zu\n", c, cap);
    } else {
      cap = (size_t)v;
    }
  }
  g_path = mn__malloc(strlen(path) + 1);
  if (!g_path || mn_trace_recorder_create(cap, &g_rec) != MN_OK) {
    fprintf(stderr, "mnemo: MNEMO_TRACE: cannot make the recorder: %s\n", g_path ? mn_last_error() : "out of memory");
    free(g_path);
    g_path = NULL;
    return;
  }
  strcpy(g_path, path);
  atexit(write_at_exit);
}

mn_trace_recorder_t *mn_trace_recorder_global(void) {
  pthread_once(&g_once, global_init);
  return g_rec;
}

/* The default-sink provider (runtime/events.h): every new caching allocator
 * asks it, so MNEMO_TRACE records all of them. Registered when the library is
 * loaded; the recorder itself is made on the first ask. */
void mn__trace_recorder_autoload(void);
static bool global_sink(mn_trace_sink_fn *fn, void **user) {
  mn_trace_recorder_t *rec = mn_trace_recorder_global();
  if (!rec) return false;
  *fn = mn_trace_recorder_sink_fn;
  *user = rec;
  return true;
}

/* Runs when the library loads; a static link keeps this object through the
 * linker flag --undefined=mn__trace_recorder_autoload (the mnemo_static CMake
 * target and mnemo.pc carry it). */
__attribute__((constructor)) void mn__trace_recorder_autoload(void) { mn__event_sink_set_provider(global_sink); }
