/* storage/storage_internal.h: what the two files of a storage share: its
 * struct (storage.c owns its lifetime, storage_ops.c the operations on its
 * bytes) and the meta refusal. Internal to those two files; views and the
 * copy engine see a storage only through mnemo/storage.h and
 * storage/storage.h. Threads: as mnemo/storage.h (the count is atomic). */
#ifndef MNEMO_STORAGE_STORAGE_INTERNAL_H
#define MNEMO_STORAGE_STORAGE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "allocators/caching_share.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "storage/storage.h"

struct mn_storage_s {
  atomic_long refcount;
  mn_device_t device;
  size_t nbytes;
  void *data;
  mn_storage_kind kind;
  mn_allocator_t *allocator;    /* ALLOCATOR */
  mn_storage_deleter_t deleter; /* FOREIGN (may be NULL) */
  void *ctx;                    /* FOREIGN */
  char *filename;               /* FILE */
  bool file_shared;             /* FILE: MAP_SHARED */
  size_t map_len;               /* FILE, SHARED: bytes mapped at data (0: nothing mapped) */
  int fd;                       /* SHARED: the shared-memory descriptor; -1 otherwise */
  void *ipc_base;               /* IPC: the base ipc_open returned */
  mn__share_import_t *share;    /* IPC from a share handle (mnemo/share.h): the import */
  void *meta_block;             /* ALLOCATOR on meta: the allocator's address (data stays NULL) */
  atomic_long views;            /* live views of this storage (each also holds a reference) */
};

/* The refusal of an operation that reads a meta storage's bytes (storage.c's
 * share_memory and IPC export, storage_ops.c's byteswap and convert). */
static inline mn_status meta_refuse(const char *func, const char *what) {
  return mn__error(MN_ERR_NOT_SUPPORTED, func, "%s is not available for a storage on the meta device: it has no data",
                   what);
}

#endif /* MNEMO_STORAGE_STORAGE_INTERNAL_H */
