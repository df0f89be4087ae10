/* mnemo/share.h: sharing caching-allocator blocks across processes (PyTorch's
 * CUDA IPC tensors and expandable segments shared through POSIX descriptors).
 * A block is exported as a handle, the handle travels over a Unix socket
 * (its descriptors by SCM_RIGHTS), and another process opens it as a storage
 * (mn_storage_from_share_handle, mnemo/storage.h). Each export has its own
 * reference file, which the exporter writes and seals and the importer only
 * locks: the exporting block is not reused while an importer holds such a
 * lock, and a SIGKILLed importer's lock goes with it. Who may connect, what
 * an importer can and cannot do and what the descriptors reach:
 * docs/ALLOCATOR.md "Sharing across processes" (the trust model).
 * Linux only (MN_ERR_NOT_SUPPORTED elsewhere). Thread-safe. */
#ifndef MNEMO_SHARE_H
#define MNEMO_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "mnemo/allocator.h"
#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: per-export reference files (version 1 had one reference file per
 * allocator, with slot and generation fields). */
#define MN_SHARE_HANDLE_VERSION 2u
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
  uint32_t version;    /* MN_SHARE_HANDLE_VERSION */
  uint32_t kind;       /* mn_share_kind */
  int32_t device_type; /* mn_device_type of the exporting device */
  int32_t device_index;
  int64_t pid;           /* the exporting process (informative) */
  uint64_t token;        /* random: names this export (its reference file holds it too) */
  uint64_t segment_size; /* bytes that the memory pieces (or the IPC handle) name */
  uint64_t offset;       /* of the block's first byte in them */
  uint64_t nbytes;       /* the block's size */
  /* CUDA IPC (plain CUDA segments; nfds == 0): cudaIpcMemHandle_t bytes. */
  uint8_t ipc[64];
  /* Memory pieces, mapped one after the other (nfds of them; SIM: memfd,
   * CUDA expandable: one POSIX descriptor per page): piece i maps
   * piece_length[i] bytes of fds[i] from piece_offset[i]. */
  uint32_t nfds;
  uint32_t reserved; /* 0 */
  uint64_t piece_offset[MN_SHARE_MAX_FDS];
  uint64_t piece_length[MN_SHARE_MAX_FDS];
  int32_t fds[MN_SHARE_MAX_FDS]; /* -1 past nfds */
  /* This export's reference file (a memfd the exporter wrote and sealed; it
   * holds what was exported: token, device, offset, sizes, pieces); -1 when
   * closed. The importer checks every field above against it. */
  int32_t ref_fd;
} mn_share_handle_t;

/* Exports the live block at `ptr` (the start of an allocation) of caching
 * allocator `a`. Every call makes a new export (its own token and reference
 * file): export once per receiving process (a handle sent to two processes
 * shares one reference, so either can keep the block held). Each live export
 * keeps one descriptor open in this process until the block is released.
 * The handle's descriptors are new ones the caller closes
 * (mn_share_handle_close). A pointer that is not a live block
 * start of `a`, or an allocator that is not a caching one:
 * MN_ERR_INVALID_ARGUMENT. A device with nothing to share with:
 * MN_ERR_NOT_SUPPORTED (the CPU). The block stays the caller's: freeing it
 * while importers hold it parks it (active, pending free) until they close. */
MN_API MN_NODISCARD mn_status mn_caching_share_export(mn_allocator_t *a, void *ptr, mn_share_handle_t *out);

/* The process at the other end of a Unix socket, as the kernel reports it
 * (SO_PEERCRED: the credentials it had when it connected, or when it made
 * the socketpair: a pair made before fork() names its maker). */
typedef struct mn_share_peer_s {
  int64_t pid;
  uint32_t uid; /* effective uid */
  uint32_t gid; /* effective gid */
} mn_share_peer_t;
/* A peer policy: true serves `peer`. `sending`: called by mn_share_handle_send
 * (else by mn_share_handle_recv). ctx: what mn_share_set_peer_policy was given. */
typedef bool (*mn_share_peer_policy_fn)(const mn_share_peer_t *peer, bool sending, void *ctx);
/* Sets the process-wide peer policy that mn_share_handle_send and
 * mn_share_handle_recv apply before anything crosses the socket. NULL (the
 * default): serve only a peer whose uid is this process's effective uid. A
 * policy replaces that rule (compare with geteuid() yourself to keep it).
 * Thread-safe: the pair (fn, ctx) is swapped under a lock; a send or receive
 * already under way may still call the previous pair, so keep ctx alive
 * until those calls return. fn may run on any thread, concurrently. */
MN_API void mn_share_set_peer_policy(mn_share_peer_policy_fn fn, void *ctx);

/* Sends a handle over a connected Unix socket (one message; the descriptors
 * by SCM_RIGHTS). The handle keeps its own descriptors. A peer the policy
 * refuses (by default: another user), or a socket whose peer cannot be told
 * (not a connected Unix socket): MN_ERR_INVALID_ARGUMENT, nothing sent. */
MN_API MN_NODISCARD mn_status mn_share_handle_send(int sock, const mn_share_handle_t *h);
/* Receives one handle; its descriptors are new ones of this process (close
 * them with mn_share_handle_close). A peer the policy refuses:
 * MN_ERR_INVALID_ARGUMENT, nothing read (the message stays queued). A short
 * message, a wrong version or a descriptor count that does not match:
 * MN_ERR_INVALID_ARGUMENT, and every descriptor that came is closed. */
MN_API MN_NODISCARD mn_status mn_share_handle_recv(int sock, mn_share_handle_t *out);
/* Closes the handle's descriptors (and sets them to -1). NULL: no-op. */
MN_API void mn_share_handle_close(mn_share_handle_t *h);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_SHARE_H */
