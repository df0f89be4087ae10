/* mnemo/storage.h: storages, untyped ref-counted byte buffers on one device,
 * owned by an allocator and shared by any number of views. Ref counts are atomic. */
#ifndef MNEMO_STORAGE_H
#define MNEMO_STORAGE_H

#include <stddef.h>

#include "mnemo/allocator.h"
#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_storage_s mn_storage_t;

/* A new storage of nbytes on `dev`, from `allocator` (NULL: the device's
 * default), ordered on `stream` (NULL: default stream). Contents undefined.
 * The caller holds one reference. */
mn_status mn_storage_create(mn_device_t dev, size_t nbytes, mn_allocator_t *allocator,
                            mn_stream_t *stream, mn_storage_t **out);
/* A storage over foreign memory `data` of nbytes on `dev` (no allocator:
 * mn_storage_allocator returns NULL). The last release calls
 * deleter(ctx, data) (NULL: nothing). The caller holds one reference. */
typedef void (*mn_storage_deleter_t)(void *ctx, void *data);
mn_status mn_storage_from_buffer(mn_device_t dev, void *data, size_t nbytes, mn_storage_deleter_t deleter, void *ctx,
                                 mn_storage_t **out);
/* Adds a reference; returns the storage. */
mn_storage_t *mn_storage_retain(mn_storage_t *s);
/* Drops a reference; the last one frees the bytes. NULL is a no-op. */
void mn_storage_release(mn_storage_t *s);
size_t mn_storage_nbytes(const mn_storage_t *s);
void *mn_storage_data(const mn_storage_t *s);
mn_device_t mn_storage_device(const mn_storage_t *s);
mn_allocator_t *mn_storage_allocator(const mn_storage_t *s);
/* Current reference count (for tests and debugging). */
long mn_storage_refcount(const mn_storage_t *s);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_STORAGE_H */
