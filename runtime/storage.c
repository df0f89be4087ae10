/* runtime/storage.c: storages, ref-counted byte buffers owned by an allocator.
 * The count is atomic; the last release frees the bytes through the allocator. */
#include <stdatomic.h>
#include <stdlib.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"

struct mn_storage_s {
  atomic_long refcount;
  mn_device_t device;
  size_t nbytes;
  void *data;
  mn_allocator_t *allocator;
  mn_storage_deleter_t deleter; /* foreign memory (mn_storage_from_buffer) */
  void *deleter_ctx;
};

mn_status mn_storage_create(mn_device_t dev, size_t nbytes, mn_allocator_t *allocator, mn_stream_t *stream,
                            mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!allocator) {
    st = mn_allocator_get_default(dev, &allocator);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  } else if (!mn_device_equal(mn_allocator_device(allocator), dev)) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "allocator belongs to another device");
  }
  mn_storage_t *s = calloc(1, sizeof *s);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  st = mn_allocator_alloc(allocator, nbytes, stream, &s->data);
  if (st != MN_OK) {
    free(s);
    return mn__error_wrap(st, __func__);
  }
  atomic_init(&s->refcount, 1);
  s->device = dev;
  s->nbytes = nbytes;
  s->allocator = allocator;
  *out = s;
  return MN_OK;
}

mn_status mn_storage_from_buffer(mn_device_t dev, void *data, size_t nbytes, mn_storage_deleter_t deleter, void *ctx,
                                 mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(data != NULL || nbytes == 0, "data must not be NULL for %zu bytes", nbytes);
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_storage_t *s = calloc(1, sizeof *s);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  atomic_init(&s->refcount, 1);
  s->device = dev;
  s->nbytes = nbytes;
  s->data = data;
  s->deleter = deleter;
  s->deleter_ctx = ctx;
  *out = s;
  return MN_OK;
}

mn_storage_t *mn_storage_retain(mn_storage_t *s) {
  if (s) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
  return s;
}

void mn_storage_release(mn_storage_t *s) {
  if (!s) return;
  if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
  /* A failed free cannot be reported to anyone here; the allocator keeps its
   * own error statistics. */
  if (s->allocator) mn_allocator_free(s->allocator, s->data);
  else if (s->deleter) s->deleter(s->deleter_ctx, s->data);
  free(s);
}

size_t mn_storage_nbytes(const mn_storage_t *s) { return s->nbytes; }
void *mn_storage_data(const mn_storage_t *s) { return s->data; }
mn_device_t mn_storage_device(const mn_storage_t *s) { return s->device; }
mn_allocator_t *mn_storage_allocator(const mn_storage_t *s) { return s->allocator; }
long mn_storage_refcount(const mn_storage_t *s) { return atomic_load(&s->refcount); }
