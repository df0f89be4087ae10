/* runtime/device_internal.h: what mnemo's own layers (allocators, storage)
 * need of the device layer beyond the public API (mnemo/device.h): pools of
 * their own, the synced unmap, the range check, CUDA IPC and shareable
 * memory. Implemented in runtime/device.c, which validates the device and
 * dispatches to its backend: the backend contract (runtime/backend.h) stays
 * inside runtime/. A missing backend slot is MN_ERR_NOT_SUPPORTED naming the
 * backend and the slot. Threading: as the public device calls (any thread;
 * handles and pointers belong to the caller). */
#ifndef MNEMO_RUNTIME_DEVICE_INTERNAL_H
#define MNEMO_RUNTIME_DEVICE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"

/* Device indices of a type stay below this (mn_device_parse, default streams). */
#define MN__MAX_DEVICES 64

/* MN_ERR_NO_DEVICE from func for dev when `count` devices of its type are
 * present: "no device sim:3 (2 sim devices present)", with "; built without
 * CUDA" for a CUDA device in a build without it. The one wording of a missing
 * device, for device.c and the backends (runtime/device_id.c, below both). */
mn_status mn__device_missing(const char *func, mn_device_t dev, int count);

/* mn_device_mem_unmap for mnemo's allocators, which synchronize the device
 * once and then unmap page after page: the backend's mem_unmap with synced
 * (no synchronize per page). pre: no work queued since the last synchronize
 * of `dev` touches [addr, addr + nbytes). */
mn_status mn__device_mem_unmap_synced(mn_device_t dev, void *addr, size_t nbytes);

/* Stream-ordered pools of mnemo's own (the async allocator's): the public
 * mn_device_alloc_async / mn_device_pool_* calls on `pool` (from
 * mn__device_pool_create; NULL: the device's default pool, as the public
 * calls). MN_ERR_NOT_SUPPORTED where the device has no pools. */
mn_status mn__device_pool_create(mn_device_t dev, void **pool);
mn_status mn__device_pool_destroy(mn_device_t dev, void *pool);
mn_status mn__device_pool_alloc(mn_device_t dev, void *pool, size_t nbytes, mn_stream_t *stream, void **out);
mn_status mn__device_pool_free(mn_device_t dev, void *pool, void *ptr, mn_stream_t *stream);
mn_status mn__device_pool_trim_to(mn_device_t dev, void *pool, size_t keep_bytes);
mn_status mn__device_pool_stats_of(mn_device_t dev, void *pool, mn_device_pool_stats_t *out);
mn_status mn__device_pool_set_threshold(mn_device_t dev, void *pool, size_t bytes);
mn_status mn__device_pool_reset_peak_of(mn_device_t dev, void *pool);

/* Whether [ptr, ptr + nbytes) is memory of `dev` mapped now: MN_OK, else
 * MN_ERR_INVALID_ARGUMENT with the backend's message (the caller wraps it).
 * MN_OK where the backend cannot tell (CPU: any host memory; CUDA) and for
 * nbytes == 0. Used to refuse a foreign pointer wrapped as device memory. */
mn_status mn__device_check_range(mn_device_t dev, const void *ptr, size_t nbytes);

/* What a device type's backend can hand to another process (bits):
 * MN__SHARING_IPC: CUDA IPC handles (mn__device_ipc_*); MN__SHARING_MEM:
 * memory as descriptors (mn__device_share_*). 0 for an invalid type. */
#define MN__SHARING_IPC 1u
#define MN__SHARING_MEM 2u
unsigned mn__device_sharing(mn_device_type type);

/* The calls below validate `dev` and the slot, then return the backend's
 * status with its message unwrapped (the caller names itself, as before).
 *   ipc_export: the IPC handle (MN_IPC_HANDLE_BYTES bytes into handle) of
 *     the allocation holding ptr and ptr's offset from its base.
 *   ipc_open: maps a handle of another process; *base is the allocation's
 *     base and *size its bytes (what a handle's offset + nbytes must fit).
 *   ipc_close: unmaps a base from ipc_open. */
mn_status mn__device_ipc_export(mn_device_t dev, const void *ptr, void *handle, size_t *offset);
mn_status mn__device_ipc_open(mn_device_t dev, const void *handle, void **base, size_t *size);
mn_status mn__device_ipc_close(mn_device_t dev, void *base);

/* Memory of one device as pieces another process maps (mnemo/share.h). */
#define MN__SHARE_MAX_PIECES 16 /* MN_SHARE_MAX_FDS */
typedef struct mn__share_mem_s {
  unsigned npieces;
  int fds[MN__SHARE_MAX_PIECES];
  uint64_t piece_offset[MN__SHARE_MAX_PIECES]; /* in the descriptor's file */
  uint64_t piece_length[MN__SHARE_MAX_PIECES];
  uint64_t offset; /* of the shared bytes in the pieces mapped one after the other */
} mn__share_mem_t;

/*   share_export: makes [ptr, ptr + nbytes) (inside one raw allocation, or
 *     mapped pages of one reservation) mappable by another process: fills
 *     out's pieces (new descriptors the caller owns) and out->offset.
 *   share_import: maps the pieces of another process contiguously as memory
 *     of `dev`; *base and *size: the mapping. The descriptors stay the caller's.
 *   share_close: unmaps a base from share_import. */
mn_status mn__device_share_export(mn_device_t dev, void *ptr, size_t nbytes, mn__share_mem_t *out);
mn_status mn__device_share_import(mn_device_t dev, const mn__share_mem_t *in, void **base, size_t *size);
mn_status mn__device_share_close(mn_device_t dev, void *base);

/* A count that changes whenever an event of e's device may have become
 * complete (never 0), or 0 when the device cannot tell: an event found not
 * done need not be asked again while the count is unchanged (SIM, whose
 * streams run only when mnemo runs them). */
uint64_t mn__event_progress(const mn_event_t *e);
/* The same count for a device (0: it cannot tell, or no such device). */
uint64_t mn__device_progress(mn_device_t dev);

#endif /* MNEMO_RUNTIME_DEVICE_INTERNAL_H */
