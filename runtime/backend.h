/* runtime/backend.h: the contract every device backend (CPU, CUDA, SIM, meta)
 * implements; the only place the device layer learns about a device type.
 * Included from runtime/ only: the layers above reach devices through the
 * public API and runtime/device_internal.h (tests/test_layers.py checks). */
#ifndef MNEMO_RUNTIME_BACKEND_H
#define MNEMO_RUNTIME_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"
#include "mnemo/graph.h"
#include "runtime/device_internal.h" /* mn__share_mem_t */

/* Contract for every slot:
 *   pre:  `index` is a valid device index of this backend (checked by the
 *         caller in runtime/device.c); handles come from this backend.
 *   post: on failure, the slot set the thread's error message (mn__error)
 *         and changed nothing visible; outputs untouched.
 * Slots may be NULL where stated; the dispatcher then answers NOT_SUPPORTED.
 * A backend built without its device (CUDA without CUDA) leaves every slot
 * NULL: device_count NULL is 0 devices, and runtime/device.c answers any other
 * required slot with MN_ERR_NO_DEVICE ("built without CUDA: no CUDA device
 * exists", the backend's name in capitals).
 * Streams and events are backend handles (void *); NULL is the default stream. */
typedef enum mn__copy_kind {
  MN__COPY_H2H = 0,
  MN__COPY_H2D = 1,
  MN__COPY_D2H = 2,
  MN__COPY_D2D = 3
} mn__copy_kind;

typedef struct mn__backend_s {
  const char *name;
  mn_device_type type;
  mn_status (*device_count)(int *count);
  mn_status (*get_properties)(int index, mn_device_props_t *props);
  mn_status (*mem_info)(int index, size_t *free_bytes, size_t *total_bytes);
  mn_status (*synchronize)(int index);

  mn_status (*raw_alloc)(int index, size_t nbytes, void **out);
  /* Like cudaFree: waits for all work queued on the device, then frees. */
  mn_status (*raw_free)(int index, void *ptr);
  /* VMM; all five NULL when the backend never supports it (a backend may
   * also answer MN_ERR_NOT_SUPPORTED per device, as CUDA does). */
  mn_status (*va_reserve)(int index, size_t nbytes, void **base);
  mn_status (*va_release)(int index, void *base, size_t nbytes);
  mn_status (*mem_map)(int index, void *addr, size_t nbytes);
  /* Unmaps (and frees) [addr, addr + nbytes). Work still queued may touch the
   * range, so the backend synchronizes the device first, as cudaFree does;
   * with `synced` the caller says it synchronized the device after the last
   * work on the range (an allocator unmapping many pages after one
   * synchronize), and the backend does not. */
  mn_status (*mem_unmap)(int index, void *addr, size_t nbytes, bool synced);
  /* Lets device `peer` (of this backend, != index) read and write the mapped
   * pages [addr, addr + nbytes) of device `index` (cuMemSetAccess). A map
   * grants only its own device: mapped memory is reachable from exactly the
   * devices granted here, whatever enable_peer_access says (that covers raw
   * memory). Unmapping forgets the grants. NULL where there is no VMM. */
  mn_status (*mem_set_access)(int index, void *addr, size_t nbytes, int peer);

  mn_status (*stream_create)(int index, void **out);
  mn_status (*stream_destroy)(int index, void *stream);
  mn_status (*stream_query)(int index, void *stream, bool *done);
  mn_status (*stream_synchronize)(int index, void *stream);
  mn_status (*stream_wait_event)(int index, void *stream, void *event);
  mn_status (*launch_host)(int index, void *stream, mn_host_fn fn, void *arg);

  mn_status (*event_create)(int index, void **out);
  mn_status (*event_destroy)(int index, void *event);
  mn_status (*event_record)(int index, void *event, void *stream);
  mn_status (*event_query)(int index, void *event, bool *done);
  mn_status (*event_synchronize)(int index, void *event);
  /* A count that changes whenever an event of device `index` may have become
   * complete (work ran on one of its streams), never 0; or 0 when the backend
   * cannot tell (its work runs on its own: CUDA). NULL: the same as 0. */
  uint64_t (*progress)(int index);

  /* Ordered copies and sets on `stream` of this backend's device. */
  mn_status (*memcpy_async)(int index, void *dst, const void *src, size_t nbytes,
                            mn__copy_kind kind, void *stream);
  mn_status (*memset_async)(int index, void *dst, int value, size_t nbytes, void *stream);

  /* Stream-ordered allocation from a pool (cudaMallocAsync); all eight NULL
   * when the backend has no pool (the CPU). `pool` is a handle from
   * pool_create, or NULL for the device's default pool (which only the public
   * mn_device_pool_* calls use: mnemo's allocators make pools of their own and
   * never change the default pool's settings).
   *   pool_create: a new, empty pool of device `index`.
   *   pool_destroy: a pool whose allocations are all freed and whose queued
   *     frees have run (the caller synchronized); else MN_ERR_BUSY (SIM) or
   *     whatever the backend does with the rest (CUDA releases it later).
   *   alloc_async: nbytes > 0 from the pool, usable in `stream` order.
   *   free_async: ptr (from alloc_async) goes back to the pool in `stream`
   *     order: reusable at once by later allocations on `stream`, by other
   *     streams once `stream` has reached the free. Unknown ptr: INVALID_ARGUMENT.
   *   pool_trim: releases unused pool memory until at most keep_bytes stay
   *     reserved (or nothing more can be released).
   *   pool_stats: reserved and used bytes, now and at their high marks.
   *   pool_set_release_threshold: reserved bytes the pool keeps at a
   *     synchronization point instead of releasing them.
   *   pool_reset_peak: sets both high marks to their current values. */
  mn_status (*pool_create)(int index, void **pool);
  mn_status (*pool_destroy)(int index, void *pool);
  mn_status (*alloc_async)(int index, void *pool, size_t nbytes, void *stream, void **out);
  mn_status (*free_async)(int index, void *pool, void *ptr, void *stream);
  mn_status (*pool_trim)(int index, void *pool, size_t keep_bytes);
  mn_status (*pool_stats)(int index, void *pool, size_t *reserved_current, size_t *reserved_high,
                          size_t *used_current, size_t *used_high);
  mn_status (*pool_set_release_threshold)(int index, void *pool, size_t bytes);
  mn_status (*pool_reset_peak)(int index, void *pool);

  /* ---- pinned host memory and peer access -----------------------
   * Page-locked host memory that every device of this backend can copy to and
   * from asynchronously: CUDA pins with cudaHostAlloc/cudaHostRegister
   * (portable); SIM records ordinary host ranges in a process-wide registry;
   * the CPU hands out plain memory and reports nothing as pinned. Any slot of
   * this block may be NULL: the dispatcher then answers NOT_SUPPORTED. */
  mn_status (*host_alloc)(int index, size_t nbytes, void **out);
  mn_status (*host_free)(int index, void *ptr);
  mn_status (*host_register)(int index, void *ptr, size_t nbytes);
  mn_status (*host_unregister)(int index, void *ptr);
  /* *pinned = whether ptr lies inside host memory this backend page-locked. */
  mn_status (*host_is_pinned)(int index, const void *ptr, bool *pinned);
  /* pre: peer != index, both valid. */
  mn_status (*can_access_peer)(int index, int peer, bool *can);
  mn_status (*enable_peer_access)(int index, int peer);
  /* A copy between devices dst_index and src_index (different) of this
   * backend, ordered on `stream` of device `index` (one of the two). */
  mn_status (*memcpy_peer_async)(int index, void *dst, int dst_index, const void *src,
                                 int src_index, size_t nbytes, void *stream);
  /* Whether [ptr, ptr + nbytes) is memory of device `index` that is mapped
   * now: MN_OK, else MN_ERR_INVALID_ARGUMENT with a message. NULL where the
   * backend cannot tell (CPU: any host memory; CUDA: not checked). Used to
   * refuse a foreign pointer wrapped as device memory (storage from_buffer). */
  mn_status (*check_range)(int index, const void *ptr, size_t nbytes);
  /* ---- CUDA IPC: NULL where not supported (CPU, SIM) ----------
   *   ipc_export: the IPC handle (MN_IPC_HANDLE_BYTES bytes into handle) of
   *     the allocation holding ptr and ptr's offset from its base.
   *   ipc_open: maps a handle of another process; *base is the allocation's
   *     base and *size its bytes (what a handle's offset + nbytes must fit).
   *   ipc_close: unmaps a base from ipc_open. */
  mn_status (*ipc_export)(int index, const void *ptr, void *handle, size_t *offset);
  mn_status (*ipc_open)(int index, const void *handle, void **base, size_t *size);
  mn_status (*ipc_close)(int index, void *base);
  /* ---- stream capture and graphs (mnemo/graph.h): all NULL where not
   * supported (the CPU; the dispatcher answers NOT_SUPPORTED). `stream` is a
   * created stream's handle, never the default stream's (runtime/graph.c
   * answers for those), except in capture_id.
   *   capture_begin: starts capturing (CUDA's global mode); INVALID_STATE
   *     when the stream already captures.
   *   capture_end: ends the capture begun on `stream`; *graph = a backend
   *     graph handle ready to launch, *nodes = its operations (copies, sets,
   *     host functions, event nodes; not marker nodes). An invalidated or
   *     unjoined capture: INVALID_STATE, no graph; either way no stream
   *     captures afterwards (out of host memory: the capture goes on).
   *   capture_status: NONE / ACTIVE / INVALIDATED and the capture id (0: none).
   *   capture_id: the capture id only (0: none); lock-free where it can be,
   *     the caching allocator asks it on every allocation during captures.
   *   capture_marker: an empty node depending on the stream's frontier
   *     becomes its frontier; *marker = its id (unique in the capture, not 0).
   *   capture_reaches: whether node `marker` of the stream's capture is in or
   *     an ancestor of the stream's frontier.
   *   graph_launch: queues the graph's work on `stream` (not capturing).
   *   graph_destroy: frees the graph; launches already queued complete. */
  mn_status (*capture_begin)(int index, void *stream);
  mn_status (*capture_end)(int index, void *stream, void **graph, size_t *nodes);
  mn_status (*capture_status)(int index, void *stream, mn_capture_status *status, uint64_t *id);
  mn_status (*capture_id)(int index, void *stream, uint64_t *id);
  mn_status (*capture_marker)(int index, void *stream, uint64_t *marker);
  mn_status (*capture_reaches)(int index, void *stream, uint64_t marker, bool *reached);
  mn_status (*graph_launch)(int index, void *graph, void *stream);
  mn_status (*graph_destroy)(int index, void *graph);
  /* ---- shareable memory (mnemo/share.h): NULL where not supported (CPU) ----
   *   share_export: makes [ptr, ptr + nbytes) (inside one raw allocation, or
   *     mapped pages of one reservation) mappable by another process: fills
   *     out's pieces (new descriptors the caller owns) and out->offset, ptr's
   *     offset in the pieces mapped one after the other. CUDA: reservations
   *     only (raw allocations use ipc_export).
   *   share_import: maps the pieces of another process contiguously as memory
   *     of device `index`; *base and *size: the mapping. The descriptors stay
   *     the caller's. Bad pieces (not the right kind of descriptor, outside
   *     the file): MN_ERR_INVALID_ARGUMENT, nothing mapped.
   *   share_close: unmaps a base from share_import. */
  mn_status (*share_export)(int index, void *ptr, size_t nbytes, struct mn__share_mem_s *out);
  mn_status (*share_import)(int index, const struct mn__share_mem_s *in, void **base, size_t *size);
  mn_status (*share_close)(int index, void *base);
} mn__backend_t;

extern const mn__backend_t mn__cpu_backend;
extern const mn__backend_t mn__sim_backend;
extern const mn__backend_t mn__cuda_backend; /* answers 0 devices without CUDA */
extern const mn__backend_t mn__meta_backend; /* sizes without bytes (runtime/meta_backend.c) */

/* The backend of a device type (never NULL for a valid type). */
const mn__backend_t *mn__backend_for(mn_device_type type);

/* Stream and event objects as the runtime sees them. */
struct mn_stream_s {
  mn_device_t device;
  void *handle;       /* backend handle; NULL = default stream */
  uint64_t id;
  bool is_default;
  bool owned;         /* false for wrapped native streams */
  /* Allocator uses that keep this stream's pointer (runtime/stream_hold.h);
   * mn_stream_destroy answers MN_ERR_BUSY while it is not 0. */
  _Atomic uint32_t holds;
};

struct mn_event_s {
  mn_device_t device;
  void *handle;
};

#endif /* MNEMO_RUNTIME_BACKEND_H */
