/* allocators/naive.c: the naive allocator: each alloc and free goes straight to
 * the device backend (no caching, streams ignored). Thread-safe: it holds no state. */
#include <stdlib.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"

static mn_status naive_alloc(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out) {
  return mn_device_raw_alloc(self->device, nbytes, out);
}

/* Safe against queued work: a raw free waits for the device first (backend contract). */
static mn_status naive_free(mn_allocator_t *self, void *ptr) {
  return mn_device_raw_free(self->device, ptr);
}

static void naive_destroy(mn_allocator_t *self) { free(self); }

static const mn_allocator_vtable_t naive_vtable = {
    .name = "naive",
    .alloc = naive_alloc,
    .free = naive_free,
    .destroy = naive_destroy,
};

mn_status mn_naive_allocator_create(mn_device_t dev, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_allocator_t *a = calloc(1, sizeof *a);
  if (!a) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  a->vtable = &naive_vtable;
  a->device = dev;
  *out = a;
  return MN_OK;
}
