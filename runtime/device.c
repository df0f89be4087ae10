/* runtime/device.c: the public device, stream, event and raw-memory API, and
 * what allocators and storage need beyond it (runtime/device_internal.h); it
 * validates arguments, then dispatches to the device type's backend (the only
 * caller of the backend tables besides runtime/graph.c). Device values and
 * names live below it, in runtime/device_id.c. Thread-safe. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/backend.h"
#include "runtime/debug.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/stream_hold.h"

const mn__backend_t *mn__backend_for(mn_device_type type) {
  switch (type) {
    case MN_DEVICE_CPU: return &mn__cpu_backend;
    case MN_DEVICE_CUDA: return &mn__cuda_backend;
    case MN_DEVICE_SIM: return &mn__sim_backend;
    case MN_DEVICE_META: return &mn__meta_backend;
    default: return NULL;
  }
}

/* A backend built without its device leaves its slots NULL (runtime/backend.h):
 * no device_count is 0 devices; any other required slot answers NO_DEVICE as
 * the no-CUDA backend's stubs did ("built without CUDA: no CUDA device exists"). */
static mn_status backend_count(const mn__backend_t *b, int *n) {
  if (!b->device_count) {
    *n = 0;
    return MN_OK;
  }
  return b->device_count(n);
}

static mn_status slot_missing(const char *func, const mn__backend_t *b) {
  char up[16];
  size_t i = 0;
  for (; b->name[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)b->name[i]);
  up[i] = '\0';
  return mn__error(MN_ERR_NO_DEVICE, func, "built without %s: no %s device exists", up, up);
}

/* Calls a required slot, or answers NO_DEVICE when the backend left it NULL. */
#define SLOT_CALL(func, b, slot, ...) ((b)->slot ? (b)->slot(__VA_ARGS__) : slot_missing((func), (b)))

mn_status mn_device_count(mn_device_type type, int *count) {
  MN__CHECK_ARG(count != NULL, "count must not be NULL");
  const mn__backend_t *b = mn__backend_for(type);
  if (!b) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "invalid device type %d", (int)type);
  int n = 0;
  mn_status st = backend_count(b, &n);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *count = n;
  return MN_OK;
}

/* Validates a device and returns its backend through *out. */
static mn_status device_backend(const char *func, mn_device_t dev, const mn__backend_t **out) {
  const mn__backend_t *b = mn__backend_for(dev.type);
  if (!b) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid device type %d", (int)dev.type);
  int n = 0;
  mn_status st = backend_count(b, &n);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (dev.index < 0 || dev.index >= n) return mn__device_missing(func, dev, n);
  *out = b;
  return MN_OK;
}

mn_status mn_device_check(mn_device_t dev) {
  const mn__backend_t *b;
  return device_backend(__func__, dev, &b);
}

mn_status mn_device_get_properties(mn_device_t dev, mn_device_props_t *props) {
  MN__CHECK_ARG(props != NULL, "props must not be NULL");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  mn_device_props_t p;
  st = SLOT_CALL(__func__, b, get_properties, dev.index, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  p.device = dev;
  *props = p;
  return MN_OK;
}

mn_status mn_device_mem_info(mn_device_t dev, size_t *free_bytes, size_t *total_bytes) {
  MN__CHECK_ARG(free_bytes != NULL && total_bytes != NULL, "outputs must not be NULL");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  size_t f = 0, t = 0;
  st = SLOT_CALL(__func__, b, mem_info, dev.index, &f, &t);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *free_bytes = f;
  *total_bytes = t;
  return MN_OK;
}

mn_status mn_device_synchronize(mn_device_t dev) {
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  st = SLOT_CALL(__func__, b, synchronize, dev.index);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_device_t mn_device_best(void) {
  int n = 0;
  if (mn_device_count(MN_DEVICE_CUDA, &n) == MN_OK && n > 0) return mn_device_cuda(0);
  mn_clear_error();
  return mn_device_cpu();
}

/* ---- raw memory --------------------------------------------------------- */

mn_status mn_device_raw_alloc(mn_device_t dev, size_t nbytes, void **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(nbytes > 0, "nbytes must be > 0");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = SLOT_CALL(__func__, b, raw_alloc, dev.index, nbytes, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = p;
  return MN_OK;
}

mn_status mn_device_raw_free(mn_device_t dev, void *ptr) {
  if (!ptr) return MN_OK;
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  st = SLOT_CALL(__func__, b, raw_free, dev.index, ptr);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status vmm_backend(const char *func, mn_device_t dev, const mn__backend_t **out) {
  mn_status st = device_backend(func, dev, out);
  if (st != MN_OK) return st;
  if (!(*out)->va_reserve) {
    char name[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "device %s has no virtual memory management",
                     mn_device_format(dev, name, sizeof name));
  }
  return MN_OK;
}

mn_status mn_device_va_reserve(mn_device_t dev, size_t nbytes, void **base) {
  MN__CHECK_ARG(base != NULL && nbytes > 0, "base must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  const mn__backend_t *b;
  mn_status st = vmm_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = b->va_reserve(dev.index, nbytes, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *base = p;
  return MN_OK;
}

mn_status mn_device_va_release(mn_device_t dev, void *base, size_t nbytes) {
  MN__CHECK_ARG(base != NULL, "base must not be NULL");
  const mn__backend_t *b;
  mn_status st = vmm_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  st = b->va_release(dev.index, base, nbytes);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_device_mem_map(mn_device_t dev, void *addr, size_t nbytes) {
  MN__CHECK_ARG(addr != NULL && nbytes > 0, "addr must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  const mn__backend_t *b;
  mn_status st = vmm_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  st = b->mem_map(dev.index, addr, nbytes);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status unmap_range(const char *func, mn_device_t dev, void *addr, size_t nbytes, bool synced) {
  if (addr == NULL || nbytes == 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "addr must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  const mn__backend_t *b;
  mn_status st = vmm_backend(func, dev, &b);
  if (st != MN_OK) return st;
  st = b->mem_unmap(dev.index, addr, nbytes, synced);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

mn_status mn_device_mem_unmap(mn_device_t dev, void *addr, size_t nbytes) {
  return unmap_range(__func__, dev, addr, nbytes, false);
}

mn_status mn_device_mem_set_access(mn_device_t dev, void *addr, size_t nbytes, mn_device_t peer) {
  MN__CHECK_ARG(addr != NULL && nbytes > 0, "addr must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  const mn__backend_t *b;
  mn_status st = vmm_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  if (peer.type != dev.type || peer.index == dev.index) {
    char x[32], y[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%s is not a peer of %s (another device of its type)",
                     mn_device_format(peer, x, sizeof x), mn_device_format(dev, y, sizeof y));
  }
  st = mn_device_check(peer);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!b->mem_set_access) {
    char x[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "device %s cannot grant peers its mapped memory",
                     mn_device_format(dev, x, sizeof x));
  }
  st = b->mem_set_access(dev.index, addr, nbytes, peer.index);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn__device_mem_unmap_synced(mn_device_t dev, void *addr, size_t nbytes) {
  return unmap_range(__func__, dev, addr, nbytes, true);
}

/* ---- streams ------------------------------------------------------------- */

/* Default streams live in static storage, one per (type, index), never freed.
 * Their ids are small and fixed; created streams count up from 1 << 20. */
static struct mn_stream_s default_streams[MN_DEVICE_TYPE_COUNT][MN__MAX_DEVICES];
/* Set once a slot is initialized; read lock-free afterwards. */
static atomic_bool default_ready[MN_DEVICE_TYPE_COUNT][MN__MAX_DEVICES];
static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t next_stream_id = 1u << 20;

mn_status mn_stream_default(mn_device_t dev, mn_stream_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  if (dev.index >= MN__MAX_DEVICES)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "device index %d >= %d", dev.index, MN__MAX_DEVICES);
  struct mn_stream_s *s = &default_streams[dev.type][dev.index];
  atomic_bool *ready = &default_ready[dev.type][dev.index];
  if (!atomic_load_explicit(ready, memory_order_acquire)) {
    pthread_mutex_lock(&default_lock);
    if (!atomic_load_explicit(ready, memory_order_relaxed)) {
      s->device = dev;
      s->handle = NULL;
      s->id = 1 + (uint64_t)dev.type * MN__MAX_DEVICES + (uint64_t)dev.index;
      s->is_default = true;
      s->owned = false;
      atomic_store_explicit(ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&default_lock);
  }
  *out = s;
  return MN_OK;
}

static mn_status stream_new(mn_device_t dev, void *handle, bool owned, mn_stream_t **out) {
  struct mn_stream_s *s = mn__calloc(1, sizeof *s);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a stream");
  s->device = dev;
  s->handle = handle;
  s->id = atomic_fetch_add(&next_stream_id, 1);
  s->owned = owned;
  *out = s;
  return MN_OK;
}

mn_status mn_stream_create(mn_device_t dev, mn_stream_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  void *h = NULL;
  st = SLOT_CALL(__func__, b, stream_create, dev.index, &h);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = stream_new(dev, h, true, out);
  if (st != MN_OK) mn__ignore(SLOT_CALL(__func__, b,
                                        stream_destroy, dev.index, h)); /* rollback: the failure is reported */
  return st;
}

mn_status mn_stream_wrap(mn_device_t dev, void *native, mn_stream_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(dev.type == MN_DEVICE_CUDA, "only CUDA streams can be wrapped (device type %s)",
                mn_device_type_name(dev.type));
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  if (native == NULL) return mn_stream_default(dev, out);
  return stream_new(dev, native, false, out);
}

/* ---- holds (runtime/stream_hold.h) ---- */

void mn__stream_hold(mn_stream_t *s) {
  if (s->is_default) return;
  uint32_t was = atomic_fetch_add_explicit(&s->holds, 1, memory_order_relaxed);
  MN__ASSERT(was < UINT32_MAX, "stream %llu: hold count overflows", (unsigned long long)s->id);
  (void)was;
}

void mn__stream_unhold(mn_stream_t *s) {
  if (s->is_default) return;
  /* release: the holder's last use of the stream comes before its destroy */
  uint32_t was = atomic_fetch_sub_explicit(&s->holds, 1, memory_order_release);
  MN__ASSERT(was > 0, "stream %llu: unhold without a hold", (unsigned long long)s->id);
  (void)was;
}

uint32_t mn__stream_holds(const mn_stream_t *s) {
  return s->is_default ? 0 : atomic_load_explicit(&((mn_stream_t *)s)->holds, memory_order_acquire);
}

/* A held stream is refused rather than freed under its holders (the
 * caching allocator and the pinned pool keep a block's record_stream uses
 * until the block is freed; the stream-ordered allocator keeps a live
 * allocation's stream and its recorded streams). CUDA lets a stream with
 * queued work be destroyed (the work completes): so do we, holds aside. */
mn_status mn_stream_destroy(mn_stream_t *s) {
  MN__CHECK_ARG(s != NULL, "stream must not be NULL");
  MN__CHECK_ARG(!s->is_default, "the default stream of a device cannot be destroyed");
  uint32_t holds = mn__stream_holds(s);
  if (holds != 0) {
    char dev[32];
    return mn__error(MN_ERR_BUSY, __func__,
                     "stream %llu of %s is still used by %u allocator block%s (blocks recorded on it with "
                     "mn_allocator_record_stream, or stream-ordered allocations made on it); free %s first, "
                     "then destroy the stream",
                     (unsigned long long)s->id, mn_device_format(s->device, dev, sizeof dev), holds,
                     holds == 1 ? "" : "s", holds == 1 ? "it" : "them");
  }
  if (s->owned) {
    mn_status st = SLOT_CALL(__func__, mn__backend_for(s->device.type), stream_destroy, s->device.index, s->handle);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  }
  free(s);
  return MN_OK;
}

mn_device_t mn_stream_device(const mn_stream_t *s) { return s->device; }
uint64_t mn_stream_id(const mn_stream_t *s) { return s->id; }
void *mn_stream_native(const mn_stream_t *s) { return s->handle; }

mn_status mn_stream_query(mn_stream_t *s, bool *done) {
  MN__CHECK_ARG(s != NULL && done != NULL, "stream and done must not be NULL");
  bool d = false;
  mn_status st = SLOT_CALL(__func__, mn__backend_for(s->device.type), stream_query, s->device.index, s->handle, &d);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *done = d;
  return MN_OK;
}

mn_status mn_stream_synchronize(mn_stream_t *s) {
  MN__CHECK_ARG(s != NULL, "stream must not be NULL");
  mn_status st = SLOT_CALL(__func__, mn__backend_for(s->device.type), stream_synchronize, s->device.index, s->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_stream_wait_event(mn_stream_t *s, mn_event_t *e) {
  MN__CHECK_ARG(s != NULL && e != NULL, "stream and event must not be NULL");
  MN__CHECK_ARG(s->device.type == e->device.type,
                "stream on %s cannot wait for an event on %s", mn_device_type_name(s->device.type),
                mn_device_type_name(e->device.type));
  mn_status st = SLOT_CALL(__func__, mn__backend_for(s->device.type),
                           stream_wait_event, s->device.index, s->handle, e->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_stream_launch_host(mn_stream_t *s, mn_host_fn fn, void *arg) {
  MN__CHECK_ARG(s != NULL && fn != NULL, "stream and fn must not be NULL");
  mn_status st = SLOT_CALL(__func__, mn__backend_for(s->device.type), launch_host, s->device.index, s->handle, fn, arg);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- events --------------------------------------------------------------- */

mn_status mn_event_create(mn_device_t dev, mn_event_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  struct mn_event_s *e = mn__calloc(1, sizeof *e);
  if (!e) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for an event");
  st = SLOT_CALL(__func__, b, event_create, dev.index, &e->handle);
  if (st != MN_OK) {
    free(e);
    return mn__error_wrap(st, __func__);
  }
  e->device = dev;
  *out = e;
  return MN_OK;
}

mn_status mn_event_destroy(mn_event_t *e) {
  if (!e) return MN_OK;
  mn_status st = SLOT_CALL(__func__, mn__backend_for(e->device.type), event_destroy, e->device.index, e->handle);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  free(e);
  return MN_OK;
}

mn_status mn_event_record(mn_event_t *e, mn_stream_t *s) {
  MN__CHECK_ARG(e != NULL && s != NULL, "event and stream must not be NULL");
  if (!mn_device_equal(e->device, s->device)) {
    char a[32], b[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "event of %s recorded on a stream of %s",
                     mn_device_format(e->device, a, sizeof a), mn_device_format(s->device, b, sizeof b));
  }
  mn_status st = SLOT_CALL(__func__, mn__backend_for(e->device.type),
                           event_record, e->device.index, e->handle, s->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_event_query(mn_event_t *e, bool *done) {
  MN__CHECK_ARG(e != NULL && done != NULL, "event and done must not be NULL");
  bool d = false;
  mn_status st = SLOT_CALL(__func__, mn__backend_for(e->device.type), event_query, e->device.index, e->handle, &d);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *done = d;
  return MN_OK;
}

uint64_t mn__device_progress(mn_device_t dev) {
  const mn__backend_t *b = mn__backend_for(dev.type);
  return b && b->progress ? b->progress(dev.index) : 0;
}

uint64_t mn__event_progress(const mn_event_t *e) { return mn__device_progress(e->device); }

mn_status mn_event_synchronize(mn_event_t *e) {
  MN__CHECK_ARG(e != NULL, "event must not be NULL");
  mn_status st = SLOT_CALL(__func__, mn__backend_for(e->device.type), event_synchronize, e->device.index, e->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_device_t mn_event_device(const mn_event_t *e) { return e->device; }

/* ---- copies ------------------------------------------------------------- */

/* Picks the stream a copy between two devices runs on: the given one, which
 * must belong to the non-CPU side, or that side's default stream. */
static mn_status copy_stream(const char *func, mn_device_t dst_dev, mn_device_t src_dev,
                                 mn_stream_t *given, mn_stream_t **out) {
  mn_device_t side = dst_dev.type != MN_DEVICE_CPU ? dst_dev : src_dev;
  if (given) {
    bool ok = side.type == MN_DEVICE_CPU; /* host-only copies may be ordered on any stream */
    if (!ok && given->device.type == side.type)
      ok = (dst_dev.type != MN_DEVICE_CPU && given->device.index == dst_dev.index) ||
           (src_dev.type != MN_DEVICE_CPU && given->device.index == src_dev.index);
    if (!ok) {
      char a[32], b[32], c[32];
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream of %s cannot order a copy %s -> %s",
                       mn_device_format(given->device, a, sizeof a),
                       mn_device_format(src_dev, b, sizeof b), mn_device_format(dst_dev, c, sizeof c));
    }
    *out = given;
    return MN_OK;
  }
  return mn_stream_default(side, out);
}

mn_status mn_memcpy_async(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src,
                          size_t nbytes, mn_stream_t *stream) {
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dst_dev, &b);
  if (st == MN_OK) st = device_backend(__func__, src_dev, &b);
  if (st != MN_OK) return st;
  if (nbytes == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL (nbytes=%zu)", nbytes);
  bool dst_host = dst_dev.type == MN_DEVICE_CPU, src_host = src_dev.type == MN_DEVICE_CPU;
  if (!dst_host && !src_host && dst_dev.type != src_dev.type) {
    char a[32], c[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "no direct copy %s -> %s; stage through the CPU",
                     mn_device_format(src_dev, a, sizeof a), mn_device_format(dst_dev, c, sizeof c));
  }
  mn_stream_t *s = NULL;
  st = copy_stream(__func__, dst_dev, src_dev, stream, &s);
  if (st != MN_OK) return st;
  mn__copy_kind kind = dst_host ? (src_host ? MN__COPY_H2H : MN__COPY_D2H)
                                : (src_host ? MN__COPY_H2D : MN__COPY_D2D);
  st = SLOT_CALL(__func__, mn__backend_for(s->device.type),
                 memcpy_async, s->device.index, dst, src, nbytes, kind, s->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_memset_async(mn_device_t dev, void *dst, int value, size_t nbytes, mn_stream_t *stream) {
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  if (nbytes == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL, "dst must not be NULL (nbytes=%zu)", nbytes);
  mn_stream_t *s = NULL;
  st = copy_stream(__func__, dev, dev, stream, &s);
  if (st != MN_OK) return st;
  st = SLOT_CALL(__func__, mn__backend_for(s->device.type),
                 memset_async, s->device.index, dst, value, nbytes, s->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- stream-ordered pool ------------------------------------------------- */

static mn_status pool_backend(const char *func, mn_device_t dev, const mn__backend_t **out) {
  mn_status st = device_backend(func, dev, out);
  if (st != MN_OK) return st;
  if (!(*out)->alloc_async) {
    char name[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "device %s has no stream-ordered memory pool",
                     mn_device_format(dev, name, sizeof name));
  }
  return MN_OK;
}

/* The stream's backend handle, after checking it belongs to dev (NULL: default). */
static mn_status pool_stream(const char *func, mn_device_t dev, mn_stream_t *s, void **handle) {
  if (s && !mn_device_equal(s->device, dev)) {
    char a[32], b[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream of %s used for the pool of %s",
                     mn_device_format(s->device, a, sizeof a), mn_device_format(dev, b, sizeof b));
  }
  *handle = s ? s->handle : NULL;
  return MN_OK;
}

static mn_status pool_alloc(const char *func, mn_device_t dev, void *pool, size_t nbytes, mn_stream_t *stream,
                                void **out) {
  if (out == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "out must not be NULL");
  if (nbytes == 0) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "nbytes must be > 0");
  const mn__backend_t *b;
  void *h = NULL;
  mn_status st = pool_backend(func, dev, &b);
  if (st == MN_OK) st = pool_stream(func, dev, stream, &h);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = b->alloc_async(dev.index, pool, nbytes, h, &p);
  if (st != MN_OK) return mn__error_wrap(st, func);
  *out = p;
  return MN_OK;
}

static mn_status pool_free(const char *func, mn_device_t dev, void *pool, void *ptr, mn_stream_t *stream) {
  const mn__backend_t *b;
  void *h = NULL;
  mn_status st = pool_backend(func, dev, &b);
  if (st == MN_OK) st = pool_stream(func, dev, stream, &h);
  if (st != MN_OK) return st;
  if (!ptr) return MN_OK;
  st = b->free_async(dev.index, pool, ptr, h);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

static mn_status pool_trim_to(const char *func, mn_device_t dev, void *pool, size_t keep_bytes) {
  const mn__backend_t *b;
  mn_status st = pool_backend(func, dev, &b);
  if (st != MN_OK) return st;
  st = b->pool_trim(dev.index, pool, keep_bytes);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

static mn_status pool_stats_of(const char *func, mn_device_t dev, void *pool, mn_device_pool_stats_t *out) {
  if (out == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = pool_backend(func, dev, &b);
  if (st != MN_OK) return st;
  mn_device_pool_stats_t s = {0};
  st = b->pool_stats(dev.index, pool, &s.reserved_current, &s.reserved_high, &s.used_current, &s.used_high);
  if (st != MN_OK) return mn__error_wrap(st, func);
  *out = s;
  return MN_OK;
}

static mn_status pool_threshold(const char *func, mn_device_t dev, void *pool, size_t bytes) {
  const mn__backend_t *b;
  mn_status st = pool_backend(func, dev, &b);
  if (st != MN_OK) return st;
  st = b->pool_set_release_threshold(dev.index, pool, bytes);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

static mn_status pool_reset(const char *func, mn_device_t dev, void *pool) {
  const mn__backend_t *b;
  mn_status st = pool_backend(func, dev, &b);
  if (st != MN_OK) return st;
  st = b->pool_reset_peak(dev.index, pool);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* The public calls: the device's default pool. */
mn_status mn_device_alloc_async(mn_device_t dev, size_t nbytes, mn_stream_t *stream, void **out) {
  return pool_alloc(__func__, dev, NULL, nbytes, stream, out);
}
mn_status mn_device_free_async(mn_device_t dev, void *ptr, mn_stream_t *stream) {
  return pool_free(__func__, dev, NULL, ptr, stream);
}
mn_status mn_device_pool_trim(mn_device_t dev, size_t keep_bytes) {
  return pool_trim_to(__func__, dev, NULL, keep_bytes);
}
mn_status mn_device_pool_stats(mn_device_t dev, mn_device_pool_stats_t *out) {
  return pool_stats_of(__func__, dev, NULL, out);
}
mn_status mn_device_pool_set_release_threshold(mn_device_t dev, size_t bytes) {
  return pool_threshold(__func__, dev, NULL, bytes);
}
mn_status mn_device_pool_reset_peak(mn_device_t dev) { return pool_reset(__func__, dev, NULL); }

/* mnemo's own pools (runtime/device_internal.h). */
mn_status mn__device_pool_create(mn_device_t dev, void **pool) {
  MN__CHECK_ARG(pool != NULL, "pool must not be NULL");
  const mn__backend_t *b;
  mn_status st = pool_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = b->pool_create(dev.index, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *pool = p;
  return MN_OK;
}
mn_status mn__device_pool_destroy(mn_device_t dev, void *pool) {
  MN__CHECK_ARG(pool != NULL, "the device's default pool cannot be destroyed");
  const mn__backend_t *b;
  mn_status st = pool_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  st = b->pool_destroy(dev.index, pool);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
mn_status mn__device_pool_alloc(mn_device_t dev, void *pool, size_t nbytes, mn_stream_t *stream, void **out) {
  return pool_alloc(__func__, dev, pool, nbytes, stream, out);
}
mn_status mn__device_pool_free(mn_device_t dev, void *pool, void *ptr, mn_stream_t *stream) {
  return pool_free(__func__, dev, pool, ptr, stream);
}
mn_status mn__device_pool_trim_to(mn_device_t dev, void *pool, size_t keep_bytes) {
  return pool_trim_to(__func__, dev, pool, keep_bytes);
}
mn_status mn__device_pool_stats_of(mn_device_t dev, void *pool, mn_device_pool_stats_t *out) {
  return pool_stats_of(__func__, dev, pool, out);
}
mn_status mn__device_pool_set_threshold(mn_device_t dev, void *pool, size_t bytes) {
  return pool_threshold(__func__, dev, pool, bytes);
}
mn_status mn__device_pool_reset_peak_of(mn_device_t dev, void *pool) { return pool_reset(__func__, dev, pool); }

/* ---- pinned host memory and peer access ----------------------- */

/* Validates dev and returns its backend when it has `slot`. */
#define MN__HOST_BACKEND(func, dev, slot, out)                                                    \
  do {                                                                                            \
    mn_status st_ = device_backend((func), (dev), &(out));                                    \
    if (st_ != MN_OK) return st_;                                                                 \
    if (!(out)->slot)                                                                             \
      return mn__error(MN_ERR_NOT_SUPPORTED, (func), "the %s backend has no %s", (out)->name, #slot); \
  } while (0)

mn_status mn_device_host_alloc(mn_device_t dev, size_t nbytes, void **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(nbytes > 0, "nbytes must be > 0");
  const mn__backend_t *b;
  MN__HOST_BACKEND(__func__, dev, host_alloc, b);
  void *p = NULL;
  mn_status st = b->host_alloc(dev.index, nbytes, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = p;
  return MN_OK;
}

mn_status mn_device_host_free(mn_device_t dev, void *ptr) {
  if (!ptr) return MN_OK;
  const mn__backend_t *b;
  MN__HOST_BACKEND(__func__, dev, host_free, b);
  mn_status st = b->host_free(dev.index, ptr);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_device_host_register(mn_device_t dev, void *ptr, size_t nbytes) {
  MN__CHECK_ARG(ptr != NULL && nbytes > 0, "ptr must not be NULL and nbytes > 0 (ptr=%p, nbytes=%zu)", ptr,
                nbytes);
  const mn__backend_t *b;
  MN__HOST_BACKEND(__func__, dev, host_register, b);
  mn_status st = b->host_register(dev.index, ptr, nbytes);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_device_host_unregister(mn_device_t dev, void *ptr) {
  MN__CHECK_ARG(ptr != NULL, "ptr must not be NULL");
  const mn__backend_t *b;
  MN__HOST_BACKEND(__func__, dev, host_unregister, b);
  mn_status st = b->host_unregister(dev.index, ptr);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_device_host_is_pinned(mn_device_t dev, const void *ptr, bool *pinned) {
  MN__CHECK_ARG(pinned != NULL, "pinned must not be NULL");
  const mn__backend_t *b;
  MN__HOST_BACKEND(__func__, dev, host_is_pinned, b);
  bool p = false;
  if (ptr) {
    mn_status st = b->host_is_pinned(dev.index, ptr, &p);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  }
  *pinned = p;
  return MN_OK;
}

/* Validates both devices of a peer call; *out = the first one's backend. */
static mn_status peer_pair(const char *func, mn_device_t a, mn_device_t b, const mn__backend_t **out) {
  const mn__backend_t *bb;
  mn_status st = device_backend(func, a, out);
  if (st == MN_OK) st = device_backend(func, b, &bb);
  return st;
}

mn_status mn_device_can_access_peer(mn_device_t dev, mn_device_t peer, bool *can) {
  MN__CHECK_ARG(can != NULL, "can must not be NULL");
  const mn__backend_t *b;
  mn_status st = peer_pair(__func__, dev, peer, &b);
  if (st != MN_OK) return st;
  bool c = false;
  if (dev.type == peer.type && dev.index != peer.index && b->can_access_peer) {
    st = b->can_access_peer(dev.index, peer.index, &c);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  }
  *can = c;
  return MN_OK;
}

mn_status mn_device_enable_peer_access(mn_device_t dev, mn_device_t peer) {
  const mn__backend_t *b;
  mn_status st = peer_pair(__func__, dev, peer, &b);
  if (st != MN_OK) return st;
  if (dev.type != peer.type || dev.index == peer.index || !b->enable_peer_access) {
    char x[32], y[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "no peer access from %s to %s",
                     mn_device_format(dev, x, sizeof x), mn_device_format(peer, y, sizeof y));
  }
  st = b->enable_peer_access(dev.index, peer.index);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_memcpy_peer_async(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src,
                               size_t nbytes, mn_stream_t *stream) {
  const mn__backend_t *b;
  mn_status st = peer_pair(__func__, dst_dev, src_dev, &b);
  if (st != MN_OK) return st;
  char x[32], y[32], z[32];
  if (dst_dev.type != src_dev.type || dst_dev.type == MN_DEVICE_CPU)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "a peer copy needs two devices of one non-CPU type (%s -> %s)",
                     mn_device_format(src_dev, x, sizeof x), mn_device_format(dst_dev, y, sizeof y));
  if (nbytes == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL (nbytes=%zu)", nbytes);
  if (dst_dev.index == src_dev.index) return mn_memcpy_async(dst_dev, dst, src_dev, src, nbytes, stream);
  mn_stream_t *s = stream;
  if (!s) {
    st = mn_stream_default(dst_dev, &s);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  } else if (!mn_device_equal(s->device, dst_dev) && !mn_device_equal(s->device, src_dev)) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "stream of %s cannot order a copy %s -> %s",
                     mn_device_format(s->device, z, sizeof z), mn_device_format(src_dev, x, sizeof x),
                     mn_device_format(dst_dev, y, sizeof y));
  }
  if (!b->memcpy_peer_async)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "the %s backend has no peer copies", b->name);
  st = b->memcpy_peer_async(s->device.index, dst, dst_dev.index, src, src_dev.index, nbytes, s->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- sharing with other processes, range checks (runtime/device_internal.h) ---- */

/* Validates dev; *out = its backend when it has `slot`, else NOT_SUPPORTED. */
static mn_status slot_backend(const char *func, mn_device_t dev, const char *slot, bool has,
                              const mn__backend_t **out) {
  mn_status st = device_backend(func, dev, out);
  if (st != MN_OK) return st;
  if (!has) return mn__error(MN_ERR_NOT_SUPPORTED, func, "the %s backend has no %s", (*out)->name, slot);
  return MN_OK;
}
#define SLOT_BACKEND(func, dev, slot, out) \
  slot_backend((func), (dev), #slot, mn__backend_for((dev).type) && mn__backend_for((dev).type)->slot, (out))

mn_status mn__device_check_range(mn_device_t dev, const void *ptr, size_t nbytes) {
  const mn__backend_t *b;
  mn_status st = device_backend(__func__, dev, &b);
  if (st != MN_OK) return st;
  if (nbytes == 0 || !b->check_range) return MN_OK;
  return b->check_range(dev.index, ptr, nbytes);
}

unsigned mn__device_sharing(mn_device_type type) {
  const mn__backend_t *b = mn__backend_for(type);
  if (!b) return 0;
  unsigned bits = 0;
  if (b->ipc_export && b->ipc_open && b->ipc_close) bits |= MN__SHARING_IPC;
  if (b->share_export && b->share_import && b->share_close) bits |= MN__SHARING_MEM;
  return bits;
}

mn_status mn__device_ipc_export(mn_device_t dev, const void *ptr, void *handle, size_t *offset) {
  MN__CHECK_ARG(handle != NULL && offset != NULL, "handle and offset must not be NULL");
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, ipc_export, &b);
  return st != MN_OK ? st : b->ipc_export(dev.index, ptr, handle, offset);
}

mn_status mn__device_ipc_open(mn_device_t dev, const void *handle, void **base, size_t *size) {
  MN__CHECK_ARG(handle != NULL && base != NULL && size != NULL, "handle, base and size must not be NULL");
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, ipc_open, &b);
  return st != MN_OK ? st : b->ipc_open(dev.index, handle, base, size);
}

mn_status mn__device_ipc_close(mn_device_t dev, void *base) {
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, ipc_close, &b);
  return st != MN_OK ? st : b->ipc_close(dev.index, base);
}

mn_status mn__device_share_export(mn_device_t dev, void *ptr, size_t nbytes, mn__share_mem_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, share_export, &b);
  return st != MN_OK ? st : b->share_export(dev.index, ptr, nbytes, out);
}

mn_status mn__device_share_import(mn_device_t dev, const mn__share_mem_t *in, void **base, size_t *size) {
  MN__CHECK_ARG(in != NULL && base != NULL && size != NULL, "in, base and size must not be NULL");
  MN__CHECK_ARG(in->npieces <= MN__SHARE_MAX_PIECES, "%u pieces (at most %d)", in->npieces, MN__SHARE_MAX_PIECES);
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, share_import, &b);
  return st != MN_OK ? st : b->share_import(dev.index, in, base, size);
}

mn_status mn__device_share_close(mn_device_t dev, void *base) {
  const mn__backend_t *b;
  mn_status st = SLOT_BACKEND(__func__, dev, share_close, &b);
  return st != MN_OK ? st : b->share_close(dev.index, base);
}
