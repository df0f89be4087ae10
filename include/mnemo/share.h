/* mnemo/share.h: sharing caching-allocator blocks across processes (PyTorch's
 * CUDA IPC tensors and expandable segments shared through POSIX descriptors).
 * A block is exported as a handle, the handle travels over a Unix socket
 * (its descriptors by SCM_RIGHTS), and another process opens it as a storage
 * (mn_storage_from_share_handle, mnemo/storage.h). The exporting block is not
 * reused while an importer holds it (docs/ALLOCATOR.md "Sharing across
 * processes": the reference file and the rule for a SIGKILLed importer).
 * Linux only (MN_ERR_NOT_SUPPORTED elsewhere). Thread-safe. */
#ifndef MNEMO_SHARE_H
#define MNEMO_SHARE_H

#include <stdint.h>

#include "mnemo/allocator.h"
#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MN_SHARE_HANDLE_VERSION 1u
/* The most memory descriptors one handle carries (one per exported piece: a
 * CUDA expandable segment exports each page it covers). */
#define MN_SHARE_MAX_FDS 16

typedef enum mn_share_kind {
  MN_SHARE_RAW = 0,       /* a block of a plain segment */
  MN_SHARE_EXPANDABLE = 1 /* a block of an expandable segment (mapped pages) */
} mn_share_kind;

/* A shared block. Plain data except the descriptors, which are this
 * process's: mn_share_handle_send passes them (as new descriptors of the
 * receiver) and mn_share_handle_close closes them. Copying the struct copies
 * the numbers, not the descriptors: close one copy only. */
typedef struct mn_share_handle_s {
  uint32_t version;       /* MN_SHARE_HANDLE_VERSION */
  uint32_t kind;          /* mn_share_kind */
  int32_t device_type;    /* mn_device_type of the exporting device */
  int32_t device_index;
  int64_t pid;            /* the exporting process (informative) */
  uint64_t token;         /* random: names the export in the reference file */
  uint32_t slot;          /* the export's slot in the exporter's reference file */
  uint32_t generation;    /* the slot's use; a reused slot has another */
  uint64_t segment_size;  /* bytes that the memory pieces (or the IPC handle) name */
  uint64_t offset;        /* of the block's first byte in them */
  uint64_t nbytes;        /* the block's size */
  /* CUDA IPC (plain CUDA segments; nfds == 0): cudaIpcMemHandle_t bytes. */
  uint8_t ipc[64];
  /* Memory pieces, mapped one after the other (nfds of them; SIM: memfd,
   * CUDA expandable: one POSIX descriptor per page): piece i maps
   * piece_length[i] bytes of fds[i] from piece_offset[i]. */
  uint32_t nfds;
  uint32_t reserved;      /* 0 */
  uint64_t piece_offset[MN_SHARE_MAX_FDS];
  uint64_t piece_length[MN_SHARE_MAX_FDS];
  int32_t fds[MN_SHARE_MAX_FDS]; /* -1 past nfds */
  int32_t ref_fd;                /* the exporter's reference file; -1 when closed */
} mn_share_handle_t;

/* Exports the live block at `ptr` (the start of an allocation) of caching
 * allocator `a`. Exporting the same block again gives the same token (every
 * importer shares one count). The handle's descriptors are new ones the
 * caller closes (mn_share_handle_close). A pointer that is not a live block
 * start of `a`, or an allocator that is not a caching one:
 * MN_ERR_INVALID_ARGUMENT. A device with nothing to share with:
 * MN_ERR_NOT_SUPPORTED (the CPU). The block stays the caller's: freeing it
 * while importers hold it parks it (active, pending free) until they close. */
MN_API MN_NODISCARD mn_status mn_caching_share_export(mn_allocator_t *a, void *ptr, mn_share_handle_t *out);

/* Sends a handle over a connected Unix socket (one message; the descriptors
 * by SCM_RIGHTS). The handle keeps its own descriptors. */
MN_API MN_NODISCARD mn_status mn_share_handle_send(int sock, const mn_share_handle_t *h);
/* Receives one handle; its descriptors are new ones of this process (close
 * them with mn_share_handle_close). A short message, a wrong version or a
 * descriptor count that does not match: MN_ERR_INVALID_ARGUMENT, and every
 * descriptor that came is closed. */
MN_API MN_NODISCARD mn_status mn_share_handle_recv(int sock, mn_share_handle_t *out);
/* Closes the handle's descriptors (and sets them to -1). NULL: no-op. */
MN_API void mn_share_handle_close(mn_share_handle_t *h);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_SHARE_H */
