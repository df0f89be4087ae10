/* mnemo/storage.h: storages, untyped ref-counted byte buffers on one device
 * (PyTorch's UntypedStorage): allocator-owned, foreign, mmap'd files, shared
 * memory and CUDA IPC imports. Ref counts are atomic; resize and
 * share_memory change the storage in place and must not race other uses of
 * it (as in PyTorch). docs/STORAGE.md describes kinds and lifetimes. */
#ifndef MNEMO_STORAGE_H
#define MNEMO_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mnemo/allocator.h"
#include "mnemo/device.h"
#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_storage_s mn_storage_t;

/* Where a storage's bytes come from (values are stable). Only allocator-owned
 * storages are resizable. */
typedef enum mn_storage_kind {
  MN_STORAGE_ALLOCATOR = 0, /* from an mn_allocator_t (resizable) */
  MN_STORAGE_FOREIGN = 1,   /* caller memory wrapped by mn_storage_from_buffer */
  MN_STORAGE_FILE = 2,      /* an mmap'd file (mn_storage_from_file) */
  MN_STORAGE_SHARED = 3,    /* POSIX shared memory (share_memory, from_shm_*) */
  MN_STORAGE_IPC = 4        /* CUDA memory of another process (from_ipc_handle) */
} mn_storage_kind;

/* "allocator", "foreign", "file", "shared", "ipc"; "invalid" otherwise. */
MN_API const char *mn_storage_kind_name(mn_storage_kind kind);

/* A new storage of nbytes on `dev`, from `allocator` (NULL: the device's
 * default), ordered on `stream` (NULL: default stream). Contents undefined.
 * The caller holds one reference. */
MN_API MN_NODISCARD mn_status mn_storage_create(mn_device_t dev, size_t nbytes, mn_allocator_t *allocator,
                                                mn_stream_t *stream, mn_storage_t **out);
/* Adds a reference; returns the storage. */
MN_API mn_storage_t *mn_storage_retain(mn_storage_t *s);
/* Drops a reference; the last one frees the bytes (allocator free, deleter,
 * munmap, ...). NULL is a no-op. */
MN_API void mn_storage_release(mn_storage_t *s);
MN_API size_t mn_storage_nbytes(const mn_storage_t *s);
MN_API void *mn_storage_data(const mn_storage_t *s);
MN_API mn_device_t mn_storage_device(const mn_storage_t *s);
/* The owning allocator; NULL for every kind but MN_STORAGE_ALLOCATOR. */
MN_API mn_allocator_t *mn_storage_allocator(const mn_storage_t *s);
/* Current reference count (for tests and debugging). */
MN_API long mn_storage_refcount(const mn_storage_t *s);
MN_API mn_storage_kind mn_storage_get_kind(const mn_storage_t *s);
/* Whether mn_storage_resize may change the size (allocator-owned storages). */
MN_API bool mn_storage_is_resizable(const mn_storage_t *s);
/* Whether the bytes are page-locked host memory (a pinned pool block or
 * memory the SIM/CUDA backend reports pinned); false off the CPU. */
MN_API bool mn_storage_is_pinned(const mn_storage_t *s);
/* The path of an mmap'd file storage; NULL for other kinds. */
MN_API const char *mn_storage_filename(const mn_storage_t *s);
/* Whether the storage lives in memory another process can map: shared
 * memory, a MAP_SHARED file, or a CUDA IPC import. */
MN_API bool mn_storage_is_shared(const mn_storage_t *s);

/* ---- foreign memory ----------------------------------------------------------- */
typedef void (*mn_storage_deleter_t)(void *ctx, void *data);
/* Wraps nbytes of caller memory at `data` (memory of `dev`) without a copy;
 * not resizable. `deleter` (NULL: the caller keeps ownership) runs once,
 * deleter(ctx, data), when the last reference goes. On failure the deleter
 * does not run (the caller still owns data). On SIM, [data, data + nbytes)
 * must be mapped memory of that device (MN_ERR_INVALID_ARGUMENT otherwise);
 * CPU takes any host memory and CUDA pointers are not checked. */
MN_API MN_NODISCARD mn_status mn_storage_from_buffer(mn_device_t dev, void *data, size_t nbytes,
                                                     mn_storage_deleter_t deleter, void *ctx, mn_storage_t **out);
/* A new storage on `dev` (default allocator) holding a copy of nbytes of host
 * memory at `data`; returns once the copy is complete. */
MN_API MN_NODISCARD mn_status mn_storage_from_buffer_copy(mn_device_t dev, const void *data, size_t nbytes,
                                                          mn_storage_t **out);

/* ---- size and contents -------------------------------------------------------
 * `stream` (NULL: the device's default stream) orders device work; calls
 * return once it is queued (at once on the CPU). */

/* Grows or shrinks an allocator-owned storage to nbytes keeping the common
 * prefix (new bytes are undefined): allocates the new block on `stream`,
 * copies the prefix on it, then frees the old block (recorded on `stream`).
 * MN_ERR_INVALID_STATE for other kinds, and while any view of the storage
 * lives (the message counts them): the bytes move to a new block, which a
 * view could reach past the end of, and pointers handed out through views
 * (mn_view_data, DLPack, numpy) would dangle. PyTorch allows it and crashes
 * on the next write through such a view; destroy the views first, or resize
 * a clone. A resize to the same size does nothing and is always allowed.
 * Pointers from mn_storage_data taken before a resize are invalid after it.
 * On any failure the storage keeps its old bytes and size. */
MN_API MN_NODISCARD mn_status mn_storage_resize(mn_storage_t *s, size_t nbytes, mn_stream_t *stream);
/* Sets every byte to `value` (low 8 bits). */
MN_API MN_NODISCARD mn_status mn_storage_fill(mn_storage_t *s, int value, mn_stream_t *stream);
/* Writes `value` converted to `dtype` into every element (nbytes must be a
 * multiple of the dtype's item size). */
MN_API MN_NODISCARD mn_status mn_storage_fill_typed(mn_storage_t *s, mn_dtype dtype, mn_scalar_t value,
                                                    mn_stream_t *stream);
/* Copies src into dst (same nbytes, any two devices) through the copy
 * engine; blocking unless non_blocking (then ordered on `stream`, see
 * mn_copy_bytes). */
MN_API MN_NODISCARD mn_status mn_storage_copy(mn_storage_t *dst, const mn_storage_t *src, bool non_blocking,
                                              mn_stream_t *stream);
/* A new storage with the same bytes on the same device (the same allocator
 * for allocator-owned storages, else the device's default), copied on `stream`. */
MN_API MN_NODISCARD mn_status mn_storage_clone(const mn_storage_t *s, mn_stream_t *stream, mn_storage_t **out);
/* The storage on `dev`: `s` itself, retained, when it is already there (as
 * PyTorch); else a copy in the device's default allocator. A non_blocking
 * copy from a device to the CPU lands in pinned memory (the source device's
 * pinned pool) so it can be asynchronous; wait on `stream` before reading. */
MN_API MN_NODISCARD mn_status mn_storage_to(const mn_storage_t *s, mn_device_t dev, bool non_blocking,
                                            mn_stream_t *stream, mn_storage_t **out);
/* A pinned copy of a CPU storage from the default pinned pool of
 * `pin_device` (the CUDA or SIM device that will copy it; the CPU gives plain
 * memory). MN_ERR_INVALID_ARGUMENT for storages off the CPU. */
MN_API MN_NODISCARD mn_status mn_storage_pin_memory(const mn_storage_t *s, mn_device_t pin_device, mn_storage_t **out);
/* Reverses the byte order of every item_size-byte item (1: nothing to do; 2,
 * 4, 8, 16). nbytes must be a multiple of item_size. Host-accessible
 * storages are swapped in place ordered on `stream`; CUDA storages through a
 * host copy (blocking). */
MN_API MN_NODISCARD mn_status mn_storage_byteswap(mn_storage_t *s, size_t item_size, mn_stream_t *stream);
/* byteswap for elements of `dtype`: complex dtypes swap each of the two
 * parts (PyTorch's UntypedStorage.byteswap(dtype)). */
MN_API MN_NODISCARD mn_status mn_storage_byteswap_dtype(mn_storage_t *s, mn_dtype dtype, mn_stream_t *stream);
/* Reinterprets the bytes as src_dtype elements and converts them to a new
 * storage of dst_dtype elements on the same device (mn_kernel_cast), as
 * PyTorch's storage.float(), .half(), ... nbytes must be a multiple of
 * src_dtype's item size. Quantized dtypes (either side) are refused
 * (MN_ERR_INVALID_ARGUMENT): use quantize / dequantize (mnemo/quantized.h). */
MN_API MN_NODISCARD mn_status mn_storage_convert(const mn_storage_t *s, mn_dtype src_dtype, mn_dtype dst_dtype,
                                                 mn_stream_t *stream, mn_storage_t **out);

/* ---- files and shared memory ---------------------------------------------------
 * All on the CPU device; none is resizable. */

/* Maps nbytes of the file at `path`. shared: MAP_SHARED, read-write; the
 * file is created (0644) or extended to nbytes as needed and writes reach it.
 * !shared: MAP_PRIVATE; the file must exist and hold at least nbytes; writes
 * stay private. nbytes == 0 maps the file's whole current size. */
MN_API MN_NODISCARD mn_status mn_storage_from_file(const char *path, bool shared, size_t nbytes, mn_storage_t **out);

/* Moves a CPU storage into shared memory in place (PyTorch's share_memory_):
 * new shared memory is made, the bytes are copied, the old memory is freed
 * and the storage becomes MN_STORAGE_SHARED (not resizable). A no-op for
 * storages already shared (shared memory, MAP_SHARED files) and for CUDA
 * storages (use mn_storage_ipc_export). MN_ERR_NOT_SUPPORTED on SIM.
 * The memory has no name in /dev/shm at any time (docs/STORAGE.md), so no
 * entry can outlive the processes that map it. */
MN_API MN_NODISCARD mn_status mn_storage_share_memory(mn_storage_t *s);
/* The descriptor of a shared-memory storage (owned by the storage; pass it
 * to another process by SCM_RIGHTS or fork). MN_ERR_INVALID_STATE for other kinds. */
MN_API MN_NODISCARD mn_status mn_storage_shm_fd(const mn_storage_t *s, int *fd);
/* A shared-memory storage over nbytes of the shared-memory descriptor `fd`
 * (duplicated; the caller keeps fd). Only memory mnemo created is accepted:
 * a sealed (fixed-size, writable) memfd named "mnemo-shm" of at least nbytes,
 * open read-write; anything else (a file, another memfd, a pipe) is
 * MN_ERR_INVALID_ARGUMENT (docs/STORAGE.md). */
MN_API MN_NODISCARD mn_status mn_storage_from_shm_fd(int fd, size_t nbytes, mn_storage_t **out);

#define MN_SHM_HANDLE_MAX 64
/* A text handle "mnemo-shm:<pid>:<fd>:<nbytes>" another process of the same
 * user opens with mn_storage_from_shm_handle while this storage lives (it
 * names /proc/<pid>/fd/<fd>). bufsize >= MN_SHM_HANDLE_MAX is always enough.
 * Opening checks the target as mn_storage_from_shm_fd does, and that its size
 * is exactly nbytes: a handle grants read-write access to that one storage's
 * bytes, to processes allowed to read the owner's /proc/<pid>/fd (ptrace
 * rules), and nothing else; it is not a secret (Linux only:
 * MN_ERR_NOT_SUPPORTED elsewhere). */
MN_API MN_NODISCARD mn_status mn_storage_shm_handle(const mn_storage_t *s, char *buf, size_t bufsize);
MN_API MN_NODISCARD mn_status mn_storage_from_shm_handle(const char *handle, mn_storage_t **out);

/* ---- CUDA IPC -------------------------------------------------------------------- */
#define MN_IPC_HANDLE_BYTES 64
typedef struct mn_ipc_handle_s {
  uint8_t bytes[MN_IPC_HANDLE_BYTES]; /* cudaIpcMemHandle_t of the allocation's base */
  uint64_t offset;                    /* of the storage's first byte from that base */
  uint64_t nbytes;
  int32_t device_index; /* the exporting process's CUDA ordinal */
  uint32_t reserved;    /* 0 */
} mn_ipc_handle_t;

/* Exports a CUDA storage for another process: the handle of the allocation
 * holding it (a caching-allocator segment is exported whole) and its offset.
 * The exporter must keep the storage alive while importers use it.
 * MN_ERR_NOT_SUPPORTED for CPU storages (use shared memory), SIM storages
 * and expandable (VMM) segments. */
MN_API MN_NODISCARD mn_status mn_storage_ipc_export(const mn_storage_t *s, mn_ipc_handle_t *out);
/* Opens a handle exported by another process on cuda:<dev.index>; the
 * storage (MN_STORAGE_IPC) closes the mapping when released. */
MN_API MN_NODISCARD mn_status mn_storage_from_ipc_handle(mn_device_t dev, const mn_ipc_handle_t *handle,
                                                         mn_storage_t **out);

/* ---- caching-allocator blocks of another process (mnemo/share.h) ---------------- */
typedef struct mn_share_handle_s mn_share_handle_t;
/* Opens a handle from mn_caching_share_export (of another process, or of
 * this one) on `dev` (the handle's device type and index): the storage
 * (MN_STORAGE_IPC, not resizable) maps the block and holds it; releasing the
 * last reference unmaps it and lets the exporter reuse the block. The
 * handle's descriptors stay the caller's. A handle already open in this
 * process: MN_ERR_INVALID_STATE; a stale handle (the block was released),
 * a forged or edited one (token, offset, sizes, pieces or device not what was
 * exported; a descriptor that is not the exported file, or not sealed):
 * MN_ERR_INVALID_ARGUMENT. Trust model: docs/ALLOCATOR.md. */
MN_API MN_NODISCARD mn_status mn_storage_from_share_handle(mn_device_t dev, const mn_share_handle_t *h,
                                                           mn_storage_t **out);

/* ---- debug print -------------------------------------------------------------------- */
/* Writes "storage(cpu, 16 bytes, allocator 'naive', refcount 1, not pinned)
 * as float32 [1, 2, 3, 4]" into buf (always NUL-terminated, truncated to
 * bufsize): device, nbytes, kind, refcount, flags and at most max_items
 * elements of `dtype` ("..." after them). Device memory is copied to the
 * host first (blocking). *len (may be NULL) gets the full text length. */
MN_API MN_NODISCARD mn_status mn_storage_format(const mn_storage_t *s, mn_dtype dtype, size_t max_items, char *buf,
                                                size_t bufsize, size_t *len);
/* mn_storage_format to `f` (NULL: stdout) with a newline. */
MN_API MN_NODISCARD mn_status mn_storage_print(const mn_storage_t *s, mn_dtype dtype, size_t max_items, FILE *f);
/* Reads up to `max` elements of `dtype` from the start into out (as
 * mn_scalar_from_bytes); *count gets how many (PyTorch's tolist). Blocking. */
MN_API MN_NODISCARD mn_status mn_storage_tolist(const mn_storage_t *s, mn_dtype dtype, mn_scalar_t *out, size_t max,
                                                size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_STORAGE_H */
