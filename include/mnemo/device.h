/* mnemo/device.h: devices (CPU, CUDA, SIM), their properties, streams and
 * events. Streams and events are thread-safe handles owned by the caller. */
#ifndef MNEMO_DEVICE_H
#define MNEMO_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mn_device_type {
  MN_DEVICE_CPU = 0,
  MN_DEVICE_CUDA = 1,
  MN_DEVICE_SIM = 2,  /* the simulated GPU (see mnemo/sim.h) */
  MN_DEVICE_META = 3, /* shapes and sizes without bytes (PyTorch's meta; below) */
  MN_DEVICE_TYPE_COUNT = 4
} mn_device_type;

typedef struct mn_device_s {
  mn_device_type type;
  int index; /* 0 for the CPU */
} mn_device_t;

#define MN_DEVICE_NAME_MAX 96

typedef struct mn_device_props_s {
  mn_device_t device;
  char name[MN_DEVICE_NAME_MAX]; /* "NVIDIA H100 80GB HBM3", "sim", "cpu" */
  size_t total_memory;           /* bytes */
  int cc_major, cc_minor;        /* compute capability; 0.0 off CUDA */
  int multiprocessors;           /* SMs on CUDA; cores on CPU */
  size_t alloc_granularity;      /* bytes; raw allocations are multiples of it */
  bool supports_vmm;             /* address reserve + map (expandable segments) */
  bool is_host_accessible;       /* memory readable by host code (CPU, SIM) */
} mn_device_props_t;

MN_API mn_device_t mn_device_cpu(void);
MN_API mn_device_t mn_device_cuda(int index);
MN_API mn_device_t mn_device_sim(int index);
/* The meta device (PyTorch's "meta"), index 0: storages that have a size and
 * no bytes (mn_storage_data is NULL), views with every view operation, and
 * no data access: reading, copying out of meta and kernels on it are refused
 * with MN_ERR_NOT_SUPPORTED and a message; writes into meta are no-ops once
 * their arguments are checked. Its raw allocations hand out addresses that
 * are never mapped, so any allocator (the caching one included) runs on it
 * as a dry run: what a sequence of allocations would reserve, without a
 * device. Streams and events exist and are always complete. */
MN_API mn_device_t mn_device_meta(void);
/* Bytes the meta device's raw allocations may hold at once; beyond it they
 * fail with MN_ERR_OUT_OF_MEMORY as a full device would (so a dry run sees
 * the caching allocator's OOM path). 0 (the default) means unlimited; the
 * reported total_memory is then 2^50. MN_ERR_BUSY when more is held now. */
MN_API MN_NODISCARD mn_status mn_device_meta_set_capacity(size_t bytes);
MN_API bool mn_device_equal(mn_device_t a, mn_device_t b);
/* "cpu", "cuda", "sim", "meta". */
MN_API const char *mn_device_type_name(mn_device_type type);
/* Parses "cpu", "cuda", "cuda:1", "sim:0", "meta" (index defaults to 0). */
MN_API MN_NODISCARD mn_status mn_device_parse(const char *text, mn_device_t *out);
/* Writes "cuda:0" etc. into buf (always NUL-terminated); returns buf. */
MN_API const char *mn_device_format(mn_device_t dev, char *buf, size_t bufsize);

/* Number of devices of a type: 1 for CPU; 0 for CUDA when the build has no
 * CUDA, no driver or no GPU is present (a normal answer, not an error). */
MN_API MN_NODISCARD mn_status mn_device_count(mn_device_type type, int *count);
/* MN_ERR_NO_DEVICE when the device does not exist. */
MN_API MN_NODISCARD mn_status mn_device_check(mn_device_t dev);
MN_API MN_NODISCARD mn_status mn_device_get_properties(mn_device_t dev, mn_device_props_t *props);
/* Free and total device memory in bytes (host RAM for the CPU). */
MN_API MN_NODISCARD mn_status mn_device_mem_info(mn_device_t dev, size_t *free_bytes, size_t *total_bytes);
/* Waits for all work on every stream of the device. */
MN_API MN_NODISCARD mn_status mn_device_synchronize(mn_device_t dev);
/* The best device present: CUDA 0 if any, else the CPU. */
MN_API mn_device_t mn_device_best(void);
/* Parses a byte count: decimal digits with an optional K, M, G or T suffix
 * (powers of 1024; "KiB", "MB" and "M" all mean 2^20 for M). MN_ERR_INVALID_ARGUMENT
 * for anything else or on overflow; *out untouched on failure. */
MN_API MN_NODISCARD mn_status mn_bytes_parse(const char *text, size_t *out);
/* Whether this build was compiled with CUDA support. */
MN_API bool mn_build_has_cuda(void);

/* ---- Streams ---------------------------------------------------------------
 * A stream is an ordered queue of device work. Every device has a default
 * stream (never destroyed). On the CPU, work runs at once. On SIM, work waits
 * until the stream is advanced (mnemo/sim.h) or synchronized. */
typedef struct mn_stream_s mn_stream_t;

MN_API MN_NODISCARD mn_status mn_stream_create(mn_device_t dev, mn_stream_t **out);
/* Wraps a native stream (cudaStream_t on CUDA) without taking ownership. */
MN_API MN_NODISCARD mn_status mn_stream_wrap(mn_device_t dev, void *native, mn_stream_t **out);
/* The default stream of a device (NULL stream on CUDA). */
MN_API MN_NODISCARD mn_status mn_stream_default(mn_device_t dev, mn_stream_t **out);
/* Destroys a stream made by create or wrap; the default stream is refused.
 * MN_ERR_BUSY (the stream left intact) while an allocator still holds it: a
 * live block recorded on it (mn_allocator_record_stream) or a stream-ordered
 * allocation made on it; free those first (docs/ALLOCATOR.md, "Streams and
 * their lifetime"). Queued work completes, as with cudaStreamDestroy. */
MN_API MN_NODISCARD mn_status mn_stream_destroy(mn_stream_t *stream);
MN_API mn_device_t mn_stream_device(const mn_stream_t *stream);
/* A process-unique id (default streams included), stable for the stream's life. */
MN_API uint64_t mn_stream_id(const mn_stream_t *stream);
/* The backend's handle (cudaStream_t on CUDA). */
MN_API void *mn_stream_native(const mn_stream_t *stream);
/* *done = true when all work queued so far has completed. */
MN_API MN_NODISCARD mn_status mn_stream_query(mn_stream_t *stream, bool *done);
MN_API MN_NODISCARD mn_status mn_stream_synchronize(mn_stream_t *stream);
/* Later work on `stream` waits until `event` completes. */
typedef struct mn_event_s mn_event_t;
MN_API MN_NODISCARD mn_status mn_stream_wait_event(mn_stream_t *stream, mn_event_t *event);

/* ---- Events ---------------------------------------------------------------
 * An event marks a point in a stream. Before any record it reports complete. */
MN_API MN_NODISCARD mn_status mn_event_create(mn_device_t dev, mn_event_t **out);
MN_API MN_NODISCARD mn_status mn_event_destroy(mn_event_t *event);
MN_API MN_NODISCARD mn_status mn_event_record(mn_event_t *event, mn_stream_t *stream);
/* *done = true when the stream has reached the last recorded point. */
MN_API MN_NODISCARD mn_status mn_event_query(mn_event_t *event, bool *done);
MN_API MN_NODISCARD mn_status mn_event_synchronize(mn_event_t *event);
MN_API mn_device_t mn_event_device(const mn_event_t *event);

/* ---- Raw memory -------------------------------------------------------------
 * Direct backend allocations (cudaMalloc on CUDA), no caching: what allocators
 * are built on. Sizes in bytes. */
MN_API MN_NODISCARD mn_status mn_device_raw_alloc(mn_device_t dev, size_t nbytes, void **out);
MN_API MN_NODISCARD mn_status mn_device_raw_free(mn_device_t dev, void *ptr);

/* Virtual memory (devices whose props say supports_vmm): reserve an address
 * range with no memory behind it, then map and unmap physical memory into it
 * in multiples of alloc_granularity. Unmapping frees the physical memory. */
MN_API MN_NODISCARD mn_status mn_device_va_reserve(mn_device_t dev, size_t nbytes, void **base);
MN_API MN_NODISCARD mn_status mn_device_va_release(mn_device_t dev, void *base, size_t nbytes);
MN_API MN_NODISCARD mn_status mn_device_mem_map(mn_device_t dev, void *addr, size_t nbytes);
MN_API MN_NODISCARD mn_status mn_device_mem_unmap(mn_device_t dev, void *addr, size_t nbytes);
/* Lets `peer` (another device of dev's type) read and write the mapped pages
 * [addr, addr + nbytes) of `dev` (cuMemSetAccess). Mapped memory is reachable
 * from its own device and from the peers granted here only:
 * mn_device_enable_peer_access covers raw memory, not mapped pages (as CUDA).
 * Unmapping a page forgets its grants; a page mapped later is not granted.
 * The caching allocator grants its expandable segments through
 * mn_caching_allocator_enable_peer_access. */
MN_API MN_NODISCARD mn_status mn_device_mem_set_access(mn_device_t dev, void *addr, size_t nbytes, mn_device_t peer);

/* Byte copies ordered on `stream` (whose device must be one of the two; a
 * CPU<->CPU copy may pass any stream or NULL). The call returns when the copy
 * is queued; host memory involved must stay valid until the stream reaches it.
 * On CUDA, pageable host memory makes the copy synchronous, as cudaMemcpyAsync. */
MN_API MN_NODISCARD mn_status mn_memcpy_async(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src,
                                              size_t nbytes, mn_stream_t *stream);
/* Sets nbytes bytes at dst to `value` (low 8 bits), ordered on `stream`. */
MN_API MN_NODISCARD mn_status mn_memset_async(mn_device_t dev, void *dst, int value, size_t nbytes,
                                              mn_stream_t *stream);
/* Runs fn(arg) on the host once the stream reaches this point (at once on the
 * CPU; when advanced on SIM; cudaLaunchHostFunc on CUDA). */
typedef void (*mn_host_fn)(void *arg);
MN_API MN_NODISCARD mn_status mn_stream_launch_host(mn_stream_t *stream, mn_host_fn fn, void *arg);

/* ---- Stream-ordered pool -------------------------------------------------------
 * The device's stream-ordered memory pool (cudaMallocAsync on CUDA, using the
 * device's default pool; emulated on SIM; MN_ERR_NOT_SUPPORTED on the CPU).
 * An allocation is usable by work queued on `stream` after the call (NULL:
 * the device's default stream). A free is queued on `stream`: later
 * allocations on that stream may reuse the memory at once, other streams only
 * once `stream` has reached the free. Sizes in bytes. */
MN_API MN_NODISCARD mn_status mn_device_alloc_async(mn_device_t dev, size_t nbytes, mn_stream_t *stream, void **out);
MN_API MN_NODISCARD mn_status mn_device_free_async(mn_device_t dev, void *ptr, mn_stream_t *stream);
/* Releases unused pool memory until at most keep_bytes stay reserved. Memory
 * whose free the device has not reached yet stays. */
MN_API MN_NODISCARD mn_status mn_device_pool_trim(mn_device_t dev, size_t keep_bytes);

typedef struct mn_device_pool_stats_s {
  size_t reserved_current, reserved_high; /* bytes the pool holds from the device */
  size_t used_current, used_high;         /* bytes of it allocated (not yet freed back) */
} mn_device_pool_stats_t;

MN_API MN_NODISCARD mn_status mn_device_pool_stats(mn_device_t dev, mn_device_pool_stats_t *out);
/* Reserved bytes the pool keeps at synchronization points instead of releasing
 * them (CUDA's default is 0; SIZE_MAX keeps everything until a trim). */
MN_API MN_NODISCARD mn_status mn_device_pool_set_release_threshold(mn_device_t dev, size_t bytes);
/* Sets reserved_high and used_high to their current values. */
MN_API MN_NODISCARD mn_status mn_device_pool_reset_peak(mn_device_t dev);

/* ---- Pinned host memory and peer access ------------------------------------
 * Page-locked ("pinned") host memory lets a device copy to and from the host
 * asynchronously. `dev` names the backend that pins it: CUDA (cudaHostAlloc /
 * cudaHostRegister, portable: every CUDA device sees it as pinned), SIM
 * (ordinary memory recorded as pinned for every SIM device) or the CPU (plain
 * memory, never reported pinned). Most code wants the caching pool of
 * mnemo/pinned.h rather than these raw calls. Sizes in bytes. */
MN_API MN_NODISCARD mn_status mn_device_host_alloc(mn_device_t dev, size_t nbytes, void **out);
/* Frees memory from mn_device_host_alloc of the same device type; NULL is a no-op. */
MN_API MN_NODISCARD mn_status mn_device_host_free(mn_device_t dev, void *ptr);
/* Page-locks existing host memory [ptr, ptr + nbytes) (cudaHostRegister);
 * unregister takes the same ptr. Overlapping registrations are refused. */
MN_API MN_NODISCARD mn_status mn_device_host_register(mn_device_t dev, void *ptr, size_t nbytes);
MN_API MN_NODISCARD mn_status mn_device_host_unregister(mn_device_t dev, void *ptr);
/* *pinned = true when ptr lies in host memory page-locked by dev's backend
 * (cudaPointerGetAttributes on CUDA); false for NULL and for device memory. */
MN_API MN_NODISCARD mn_status mn_device_host_is_pinned(mn_device_t dev, const void *ptr, bool *pinned);
/* *can = whether `dev` can access `peer`'s memory directly
 * (cudaDeviceCanAccessPeer); false for the same device or different types. */
MN_API MN_NODISCARD mn_status mn_device_can_access_peer(mn_device_t dev, mn_device_t peer, bool *can);
/* Lets `dev` access `peer`'s memory (cudaDeviceEnablePeerAccess); enabling
 * an already enabled pair succeeds. */
MN_API MN_NODISCARD mn_status mn_device_enable_peer_access(mn_device_t dev, mn_device_t peer);
/* A copy between the memories of two devices of one type
 * (cudaMemcpyPeerAsync), ordered on `stream`, a stream of either device
 * (NULL: dst's default stream). Returns when queued. */
MN_API MN_NODISCARD mn_status mn_memcpy_peer_async(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src,
                                                   size_t nbytes, mn_stream_t *stream);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_DEVICE_H */
