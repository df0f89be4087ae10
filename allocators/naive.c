/* allocators/naive.c: the naive allocator: each alloc and free goes straight to
 * the device backend (no caching, streams ignored). It keeps the set of its live
 * pointers, so that a free of anything else (a double free, an interior or a
 * foreign pointer) is refused before the backend sees it: cudaFree of a pointer
 * freed before may release memory that was handed out again since.
 * Thread-safe: one mutex guards the live set; backend calls run outside it. */
#include <pthread.h>
#include <stdlib.h>

#include "runtime/ptrmap.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

typedef struct naive_s {
  mn_allocator_t base; /* first: the allocator header */
  pthread_mutex_t lock;
  mn__addrmap_t live; /* address -> bytes asked */
} naive_t;

static mn_status naive_alloc(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out) {
  (void)stream;
  naive_t *a = (naive_t *)self;
  void *p = NULL;
  mn_status st = mn_device_raw_alloc(self->device, nbytes, &p);
  if (st != MN_OK) return st;
  pthread_mutex_lock(&a->lock);
  st = mn__addrmap_insert(&a->live, (uintptr_t)p, nbytes, NULL);
  pthread_mutex_unlock(&a->lock);
  if (st != MN_OK) { /* the map could not grow, or the backend handed out a live address twice */
    mn__ignore(mn_device_raw_free(self->device, p)); /* rollback: the map failure is reported */
    return st == MN_ERR_OUT_OF_MEMORY
               ? mn__error(st, "naive allocator", "out of host memory for the live-pointer map")
               : mn__error(MN_ERR_INTERNAL, "naive allocator", "the backend returned %p, which is still live", p);
  }
  *out = p;
  return MN_OK;
}

/* Safe against queued work: a raw free waits for the device first (backend contract). */
static mn_status naive_free(mn_allocator_t *self, void *ptr) {
  naive_t *a = (naive_t *)self;
  mn__addrmap_entry_t e;
  pthread_mutex_lock(&a->lock);
  bool known = mn__addrmap_remove(&a->live, (uintptr_t)ptr, &e);
  pthread_mutex_unlock(&a->lock);
  if (!known)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "naive allocator",
                     "%p was not allocated by this allocator, or was freed already", ptr);
  mn_status st = mn_device_raw_free(self->device, ptr);
  if (st != MN_OK) { /* the backend kept it: it stays live */
    pthread_mutex_lock(&a->lock);
    mn__addrmap_put(&a->live, e.key, e.size, e.data); /* cannot fail: re-inserting what was just removed */
    pthread_mutex_unlock(&a->lock);
  }
  return st;
}

static size_t naive_size_of(mn_allocator_t *self, const void *ptr) {
  naive_t *a = (naive_t *)self;
  pthread_mutex_lock(&a->lock);
  mn__addrmap_entry_t *e = mn__addrmap_find(&a->live, (uintptr_t)ptr);
  size_t n = e ? e->size : 0;
  pthread_mutex_unlock(&a->lock);
  return n;
}

static void naive_destroy(mn_allocator_t *self) {
  naive_t *a = (naive_t *)self;
  mn__addrmap_fini(&a->live);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

static const mn_allocator_vtable_t naive_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "naive",
    .alloc = naive_alloc,
    .free = naive_free,
    .destroy = naive_destroy,
    .size_of = naive_size_of,
};

mn_status mn_naive_allocator_create(mn_device_t dev, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  naive_t *a = mn__calloc(1, sizeof *a);
  if (!a) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  pthread_mutex_init(&a->lock, NULL);
  mn__addrmap_init(&a->live);
  a->base.vtable = &naive_vtable;
  a->base.device = dev;
  *out = &a->base;
  return MN_OK;
}
