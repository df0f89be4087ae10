/* allocators/pluggable.c: the entry points PyTorch and CuPy load from
 * libmnemo.so, over each device's default allocator. Thread-safe: the cache of
 * wrapped native streams has its own mutex; the device type is atomic. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/ptrmap.h"
#include "mnemo/mnemo.h"
#include "mnemo/pluggable.h"
#include "runtime/error.h"

#define MN__PLUG_MAX_DEVICES 64

static atomic_int g_type = MN_DEVICE_CUDA;
static pthread_mutex_t g_streams_lock = PTHREAD_MUTEX_INITIALIZER;
/* Per device: native handle -> its wrapper (data). Wrappers live for the
 * process: a framework may free with a stream long after allocating with it. */
static mn__addrmap_t g_streams[MN__PLUG_MAX_DEVICES];

mn_status mn_pluggable_set_device_type(mn_device_type type) {
  MN__CHECK_ARG(type == MN_DEVICE_CUDA || type == MN_DEVICE_SIM, "type=%d: only cuda or sim can serve the entry points",
                (int)type);
  atomic_store(&g_type, (int)type);
  return MN_OK;
}

static mn_status device_of(const char *func, int index, mn_device_t *out) {
  mn_device_t dev = {(mn_device_type)atomic_load(&g_type), index};
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (index >= MN__PLUG_MAX_DEVICES)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "device index %d >= %d", index, MN__PLUG_MAX_DEVICES);
  *out = dev;
  return MN_OK;
}

/* The mn_stream_t for a framework's stream argument. */
static mn_status stream_of(const char *func, mn_device_t dev, void *native, mn_stream_t **out) {
  if (!native) return mn_stream_default(dev, out);
  if (dev.type != MN_DEVICE_CUDA) { /* test mode: already an mn_stream_t */
    *out = native;
    return MN_OK;
  }
  pthread_mutex_lock(&g_streams_lock);
  mn__addrmap_t *m = &g_streams[dev.index];
  mn__addrmap_entry_t *e = mn__addrmap_find(m, (uintptr_t)native);
  mn_stream_t *s = e ? e->data : NULL;
  mn_status st = MN_OK;
  if (!s) {
    st = mn_stream_wrap(dev, native, &s);
    if (st == MN_OK) {
      st = mn__addrmap_insert(m, (uintptr_t)native, 0, s);
      if (st != MN_OK) {
        mn__ignore(mn_stream_destroy(s)); /* a wrapper of the caller's stream: nothing of ours is lost */
        s = NULL;
      }
    }
  }
  pthread_mutex_unlock(&g_streams_lock);
  if (st != MN_OK) return mn__error_wrap(st, func);
  *out = s;
  return MN_OK;
}

/* The device and the allocator serving it (the override, checked, or the default). */
static mn_status target_of(const char *func, mn_allocator_t *override, int device, mn_device_t *dev,
                           mn_allocator_t **out) {
  mn_status st = device_of(func, device, dev);
  if (st != MN_OK) return st;
  if (override && !mn_device_equal(mn_allocator_device(override), *dev)) {
    char x[32], y[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "allocator of %s given for %s",
                     mn_device_format(mn_allocator_device(override), x, sizeof x),
                     mn_device_format(*dev, y, sizeof y));
  }
  if (override) {
    *out = override;
    return MN_OK;
  }
  st = mn_allocator_get_default(*dev, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

static void *alloc_on(const char *func, mn_allocator_t *override, size_t size, int device, void *native) {
  mn_device_t dev;
  mn_allocator_t *a = NULL;
  mn_stream_t *s = NULL;
  void *p = NULL;
  mn_status st = target_of(func, override, device, &dev, &a);
  if (st == MN_OK) st = stream_of(func, dev, native, &s);
  if (st != MN_OK) return NULL; /* the message names func already */
  st = mn_allocator_alloc(a, size, s, &p);
  if (st != MN_OK) {
    mn__error_wrap(st, func);
    return NULL;
  }
  return p;
}

static void free_on(const char *func, mn_allocator_t *override, void *ptr, int device) {
  if (!ptr) return;
  mn_device_t dev;
  mn_allocator_t *a = NULL;
  mn_status st = target_of(func, override, device, &dev, &a);
  if (st == MN_OK && mn_allocator_free(a, ptr) != MN_OK) mn__error_wrap(mn_last_status(), func);
}

void *mnemo_torch_alloc(size_t size, int device, void *stream) {
  return alloc_on(__func__, NULL, size, device, stream);
}

void mnemo_torch_free(void *ptr, size_t size, int device, void *stream) {
  (void)size, (void)stream;
  free_on(__func__, NULL, ptr, device);
}

void *mnemo_cupy_malloc(void *param, size_t size, int device) {
  return alloc_on(__func__, param, size, device, NULL);
}

void mnemo_cupy_free(void *param, void *ptr, int device) { free_on(__func__, param, ptr, device); }

int mnemo_empty_cache(int device) {
  mn_device_t dev;
  mn_allocator_t *a = NULL;
  mn_status st = device_of(__func__, device, &dev);
  if (st == MN_OK) st = mn_allocator_get_default(dev, &a);
  if (st == MN_OK) st = mn_allocator_empty_cache(a);
  return (int)st;
}
