/* allocators/caching_share.c: caching-allocator blocks shared with other processes
 * (mnemo/share.h). The exporter keeps a reference file (a memfd) with one slot
 * per exported block; an importer counts itself in the slot and holds an open
 * file description lock (F_OFD_SETLK, read) on the slot's bytes while it maps
 * the block. The exporter treats a block as held while the slot's count is
 * above 0 AND another description holds a lock on the slot: a SIGKILLed
 * importer's count stays, but its lock goes with its descriptors, so its
 * block is released at the next check (docs/ALLOCATOR.md).
 * Slot word: generation << 32 | count; the exporter releases a slot by a
 * compare-and-swap of the word it checked to 0, and an importer counts itself
 * by a compare-and-swap that keeps the generation, so no importer can count
 * itself into a released or reused slot.
 * Threading: the exporter's side runs under the allocator lock; the import
 * registry under its own mutex; the slot words are atomics shared across
 * processes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "allocators/caching_internal.h"
#include "allocators/caching_share.h"
#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/random.h"

#define REF_NAME "mnemo-share-ref"
#define REF_LINK "/memfd:" REF_NAME " (deleted)"
#define REF_SLOTS ((uint32_t)1 << 16) /* live exports per allocator; the file is sparse */

typedef struct ref_slot_s {
  _Atomic uint64_t token;
  _Atomic uint64_t word; /* generation << 32 | count; 0: free */
} ref_slot_t;
_Static_assert(sizeof(ref_slot_t) == 16, "a slot is 16 bytes");

#define WORD_GEN(w) ((uint32_t)((w) >> 32))
#define WORD_COUNT(w) ((uint32_t)(w))

typedef struct mn__share_rec_s {
  mn__block_t *block;
  uint32_t slot, generation;
  uint64_t token;
  struct mn__share_rec_s *prev, *next; /* the parked list */
  bool parked;
} mn__share_rec_t;

typedef struct mn__share_state_s {
  int ref_fd;
  ref_slot_t *slots;       /* REF_SLOTS of them, MAP_SHARED */
  uint32_t *free_slots;    /* slots given back, reused first */
  uint32_t nfree, next_slot;
  uint32_t next_gen;
  mn__share_rec_t *parked; /* freed blocks importers still hold */
} mn__share_state_t;

static off_t slot_offset(uint32_t slot) { return (off_t)slot * (off_t)sizeof(ref_slot_t); }

/* ---- the exporter: reference file, slots, parking ------------------------------------- */

static mn_status state_create(const char *func, mn__caching_t *a) {
  if (a->share) return MN_OK;
  mn__share_state_t *st = mn__calloc(1, sizeof *st);
  uint32_t *free_slots = mn__calloc(REF_SLOTS, sizeof *free_slots);
  size_t size = (size_t)REF_SLOTS * sizeof(ref_slot_t);
  int fd = memfd_create(REF_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *map = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)size) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!st || !free_slots || map == MAP_FAILED) {
    int e = errno;
    if (fd >= 0) close(fd);
    free(st);
    free(free_slots);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "cannot make the sharing reference file: %s", strerror(e));
  }
  st->ref_fd = fd;
  st->slots = map;
  st->free_slots = free_slots;
  st->next_gen = 1;
  a->share = st;
  return MN_OK;
}

/* Whether some importer holds rec's block: a count, and a lock of another
 * description on the slot (a dead importer's count has no lock behind it). */
static bool rec_held(const mn__share_state_t *st, const mn__share_rec_t *rec, uint64_t *word) {
  *word = atomic_load(&st->slots[rec->slot].word);
  if (WORD_GEN(*word) != rec->generation || WORD_COUNT(*word) == 0) return false;
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_offset(rec->slot),
                    .l_len = (off_t)sizeof(ref_slot_t), .l_pid = 0};
  if (fcntl(st->ref_fd, F_OFD_GETLK, &l) != 0) return true; /* cannot tell: keep it */
  return l.l_type != F_UNLCK;
}

/* Releases rec's slot if no importer holds it (true), and frees rec. */
static bool rec_try_release(mn__caching_t *a, mn__share_rec_t *rec) {
  mn__share_state_t *st = a->share;
  ref_slot_t *slot = &st->slots[rec->slot];
  for (;;) {
    uint64_t word;
    if (rec_held(st, rec, &word)) return false;
    /* an importer counting itself in meanwhile makes this fail: checked again */
    if (atomic_compare_exchange_strong(&slot->word, &word, 0)) break;
  }
  atomic_store(&slot->token, 0);
  st->free_slots[st->nfree++] = rec->slot;
  rec->block->share = NULL;
  free(rec);
  return true;
}

bool mn__share_park(mn__caching_t *a, mn__block_t *b) {
  mn__share_rec_t *rec = b->share;
  if (rec->parked) return true; /* mn__share_retry unparks before freeing */
  if (rec_try_release(a, rec)) return false;
  rec->parked = true;
  rec->prev = NULL;
  rec->next = a->share->parked;
  if (rec->next) rec->next->prev = rec;
  a->share->parked = rec;
  return true;
}

void mn__share_retry(mn__caching_t *a, bool deep) {
  mn__share_state_t *st = a->share;
  for (mn__share_rec_t *rec = st->parked, *next; rec; rec = next) {
    next = rec->next;
    mn__block_t *b = rec->block;
    /* cheap first: a count of 0 needs no system call; the lock query (which
     * finds importers that died holding it) only when deep */
    uint64_t w = atomic_load(&st->slots[rec->slot].word);
    if (WORD_COUNT(w) != 0 && WORD_GEN(w) == rec->generation) {
      if (!deep) continue;
      uint64_t word;
      if (rec_held(st, rec, &word)) continue;
    }
    if (rec->prev) rec->prev->next = rec->next;
    else st->parked = rec->next;
    if (rec->next) rec->next->prev = rec->prev;
    rec->parked = false;
    if (rec_try_release(a, rec)) mn__free_block(a, b);
    else mn__share_park(a, b); /* counted in again meanwhile */
  }
}

void mn__share_destroy(mn__caching_t *a) {
  mn__share_state_t *st = a->share;
  for (mn__segment_t *s = a->segments; s; s = s->next_seg)
    for (mn__block_t *b = s->head; b; b = b->next)
      if (b->share) {
        free(b->share);
        b->share = NULL;
      }
  munmap(st->slots, (size_t)REF_SLOTS * sizeof(ref_slot_t));
  close(st->ref_fd);
  free(st->free_slots);
  free(st);
  a->share = NULL;
}

/* A new export record and slot for b. pre: lock held, a->share made. */
static mn_status rec_create(const char *func, mn__caching_t *a, mn__block_t *b) {
  mn__share_state_t *st = a->share;
  if (st->nfree == 0 && st->next_slot == REF_SLOTS)
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "%u blocks of this allocator are exported already", REF_SLOTS);
  mn__share_rec_t *rec = mn__calloc(1, sizeof *rec);
  if (!rec) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  rec->slot = st->nfree ? st->free_slots[--st->nfree] : st->next_slot++;
  rec->generation = st->next_gen++;
  if (st->next_gen == 0) st->next_gen = 1;
  uint64_t token;
  do token = mn__random_u64();
  while (token == 0);
  rec->token = token;
  rec->block = b;
  atomic_store(&st->slots[rec->slot].token, token);
  atomic_store(&st->slots[rec->slot].word, (uint64_t)rec->generation << 32);
  b->share = rec;
  return MN_OK;
}

/* Undoes rec_create for an export that failed (no importer can know the token). */
static void rec_drop(mn__caching_t *a, mn__block_t *b) {
  mn__share_state_t *st = a->share;
  mn__share_rec_t *rec = b->share;
  atomic_store(&st->slots[rec->slot].word, 0);
  atomic_store(&st->slots[rec->slot].token, 0);
  st->free_slots[st->nfree++] = rec->slot;
  b->share = NULL;
  free(rec);
}

static void handle_init(mn_share_handle_t *h) {
  memset(h, 0, sizeof *h);
  h->version = MN_SHARE_HANDLE_VERSION;
  for (int i = 0; i < MN_SHARE_MAX_FDS; i++) h->fds[i] = -1;
  h->ref_fd = -1;
}

mn_status mn_caching_share_export(mn_allocator_t *al, void *ptr, mn_share_handle_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  if (!mn__is_caching(al))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "not a caching allocator (%s)",
                     al ? mn_allocator_name(al) : "NULL");
  mn__caching_t *a = (mn__caching_t *)al;
  const mn__backend_t *be = mn__backend_for(al->device.type);
  char dev[32];
  mn_device_format(al->device, dev, sizeof dev);
  if (!be->share_export && !be->ipc_export)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "%s memory cannot be shared with another process", dev);
  mn__lock(&a->lock);
  mn__block_t *b = mn__live_block(a, (uintptr_t)ptr);
  mn_status st = MN_OK;
  if (!b) {
    mn__unlock(&a->lock);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%p is not the start of a live block of this allocator (%s)",
                     ptr, dev);
  }
  bool fresh = !b->share;
  st = state_create(__func__, a);
  if (st == MN_OK && fresh) st = rec_create(__func__, a, b);
  mn_share_handle_t h;
  handle_init(&h);
  if (st == MN_OK) {
    h.kind = b->seg->expandable ? MN_SHARE_EXPANDABLE : MN_SHARE_RAW;
    if (!b->seg->expandable && be->ipc_export) { /* CUDA: the segment's IPC handle */
      size_t off = 0;
      st = be->ipc_export(al->device.index, ptr, h.ipc, &off);
      h.offset = off;
      h.segment_size = b->seg->size;
    } else if (be->share_export) {
      mn__share_mem_t m;
      st = be->share_export(al->device.index, ptr, b->size, &m);
      if (st == MN_OK) {
        h.nfds = m.npieces;
        h.offset = m.offset;
        for (unsigned i = 0; i < m.npieces; i++) {
          h.fds[i] = m.fds[i];
          h.piece_offset[i] = m.piece_offset[i];
          h.piece_length[i] = m.piece_length[i];
          h.segment_size += m.piece_length[i];
        }
      }
    } else {
      st = mn__error(MN_ERR_NOT_SUPPORTED, __func__, "%s cannot share blocks of expandable segments", dev);
    }
  }
  if (st == MN_OK) {
    h.ref_fd = fcntl(a->share->ref_fd, F_DUPFD_CLOEXEC, 0);
    if (h.ref_fd < 0) st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "dup of the reference file: %s", strerror(errno));
  }
  if (st != MN_OK) {
    mn_share_handle_close(&h);
    if (fresh && b->share) rec_drop(a, b);
    mn__unlock(&a->lock);
    return mn__error_wrap(st, __func__);
  }
  h.device_type = (int32_t)al->device.type;
  h.device_index = al->device.index;
  h.pid = (int64_t)getpid();
  h.token = b->share->token;
  h.slot = b->share->slot;
  h.generation = b->share->generation;
  h.nbytes = b->requested;
  mn__unlock(&a->lock);
  *out = h;
  return MN_OK;
}

/* ---- the handle on the wire -------------------------------------------------------------- */

void mn_share_handle_close(mn_share_handle_t *h) {
  if (!h) return;
  for (int i = 0; i < MN_SHARE_MAX_FDS; i++)
    if (h->fds[i] >= 0) {
      close(h->fds[i]);
      h->fds[i] = -1;
    }
  if (h->ref_fd >= 0) close(h->ref_fd);
  h->ref_fd = -1;
}

mn_status mn_share_handle_send(int sock, const mn_share_handle_t *h) {
  MN__CHECK_ARG(h != NULL, "h must not be NULL");
  MN__CHECK_ARG(h->version == MN_SHARE_HANDLE_VERSION, "handle version %u, not %u", h->version,
                MN_SHARE_HANDLE_VERSION);
  MN__CHECK_ARG(h->nfds <= MN_SHARE_MAX_FDS && h->ref_fd >= 0, "a handle with %u memory descriptors and reference "
                "descriptor %d (closed?)", h->nfds, h->ref_fd);
  int fds[MN_SHARE_MAX_FDS + 1];
  fds[0] = h->ref_fd;
  for (uint32_t i = 0; i < h->nfds; i++) fds[1 + i] = h->fds[i];
  size_t nfd = 1 + h->nfds;
  union {
    char buf[CMSG_SPACE(sizeof(int) * (MN_SHARE_MAX_FDS + 1))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof *h};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * nfd)};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * nfd);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * nfd);
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof *h)
    return mn__error(MN_ERR_IO, __func__, "sendmsg on socket %d: %s", sock, n < 0 ? strerror(errno) : "short write");
  return MN_OK;
}

mn_status mn_share_handle_recv(int sock, mn_share_handle_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_share_handle_t h;
  union {
    char buf[CMSG_SPACE(sizeof(int) * (MN_SHARE_MAX_FDS + 1))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {.iov_base = &h, .iov_len = sizeof h};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return mn__error(MN_ERR_IO, __func__, "recvmsg on socket %d: %s", sock, strerror(errno));
  int fds[MN_SHARE_MAX_FDS + 1];
  size_t nfd = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (nfd < MN_SHARE_MAX_FDS + 1) fds[nfd++] = fd;
        else close(fd);
      }
    }
  const char *why = NULL;
  if (n != (ssize_t)sizeof h) why = "a short message";
  else if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) why = "a truncated message or descriptor list";
  else if (h.version != MN_SHARE_HANDLE_VERSION) why = "another handle version";
  else if (h.nfds > MN_SHARE_MAX_FDS || nfd != 1 + (size_t)h.nfds) why = "a descriptor count that does not match";
  if (why) {
    for (size_t i = 0; i < nfd; i++) close(fds[i]);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "socket %d: %s (%zd bytes, %zu descriptors)", sock, why, n,
                     nfd);
  }
  h.ref_fd = fds[0];
  for (int i = 0; i < MN_SHARE_MAX_FDS; i++) h.fds[i] = (uint32_t)i < h.nfds ? fds[1 + i] : -1;
  *out = h;
  return MN_OK;
}

/* ---- the importer ---------------------------------------------------------------------- */

struct mn__share_import_s {
  mn__share_import_t *next; /* the registry */
  uint64_t token;
  uint32_t slot, generation;
  mn_device_t dev;
  int ref_fd;          /* this import's own open file description (its lock lives on it) */
  void *page;          /* the mapped page of the reference file holding the slot */
  size_t page_len;
  ref_slot_t *slot_ptr;
  bool counted;        /* counted in the slot */
  bool shared_mem;     /* share_import (else ipc_open) */
  void *base;          /* the mapping */
};

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static mn__share_import_t *g_reg; /* the open imports of this process */

static bool reg_has(uint64_t token) {
  for (mn__share_import_t *i = g_reg; i; i = i->next)
    if (i->token == token) return true;
  return false;
}

static void reg_remove(mn__share_import_t *imp) {
  pthread_mutex_lock(&g_reg_lock);
  for (mn__share_import_t **p = &g_reg; *p; p = &(*p)->next)
    if (*p == imp) {
      *p = imp->next;
      break;
    }
  pthread_mutex_unlock(&g_reg_lock);
}

/* Takes the import out of the slot's count (only the generation it counted in). */
static void uncount(mn__share_import_t *imp) {
  if (!imp->counted) return;
  uint64_t w = atomic_load(&imp->slot_ptr->word);
  while (WORD_GEN(w) == imp->generation && WORD_COUNT(w) > 0 &&
         !atomic_compare_exchange_weak(&imp->slot_ptr->word, &w, w - 1)) {
  }
  imp->counted = false;
}

/* Everything but the memory mapping; the registry entry too. */
static void import_drop(mn__share_import_t *imp) {
  uncount(imp);
  if (imp->page) munmap(imp->page, imp->page_len);
  if (imp->ref_fd >= 0) close(imp->ref_fd); /* drops the lock */
  reg_remove(imp);
  free(imp);
}

static mn_status check_ref_fd(const char *func, int fd, uint32_t slot) {
  struct stat sb;
  char self[40], link[256];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = fd >= 0 ? readlink(self, link, sizeof link - 1) : -1;
  link[n < 0 ? 0 : n] = '\0';
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || strcmp(link, REF_LINK) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's reference descriptor %d is '%.100s', not a mnemo reference file (memfd " REF_NAME ")",
                     fd, link);
  if ((uint64_t)sb.st_size < (uint64_t)slot_offset(slot) + sizeof(ref_slot_t))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's slot %u is outside the reference file", slot);
  return MN_OK;
}

mn_status mn__share_open(const char *func, mn_device_t dev, const mn_share_handle_t *h, mn__share_import_t **out,
                         void **data) {
  char name[32];
  mn_device_format(dev, name, sizeof name);
  if (h->version != MN_SHARE_HANDLE_VERSION || h->reserved != 0 || h->kind > MN_SHARE_EXPANDABLE)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "not a share handle (version %u, kind %u)", h->version, h->kind);
  if (h->device_type != (int32_t)dev.type || h->device_index != dev.index)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle is for device type %d index %d, not %s",
                     h->device_type, h->device_index, name);
  if (h->nbytes == 0 || h->offset > h->segment_size || h->nbytes > h->segment_size - h->offset ||
      h->nfds > MN_SHARE_MAX_FDS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's block [%" PRIu64 ", +%" PRIu64 ") is not inside its %" PRIu64 "-byte segment "
                     "(or %u descriptors)", h->offset, h->nbytes, h->segment_size, h->nfds);
  uint64_t total = 0;
  for (uint32_t i = 0; i < h->nfds; i++) total += h->piece_length[i];
  if (h->nfds && total != h->segment_size)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's pieces add up to %" PRIu64 " bytes, not %" PRIu64,
                     total, h->segment_size);
  const mn__backend_t *be = mn__backend_for(dev.type);
  if (h->nfds ? !be->share_import : !be->ipc_open)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s cannot open a handle of this kind (%s)", name,
                     h->nfds ? "memory descriptors" : "a CUDA IPC handle");
  if (h->slot >= REF_SLOTS) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "slot %u is out of range", h->slot);
  mn_status st = check_ref_fd(func, h->ref_fd, h->slot);
  if (st != MN_OK) return st;

  mn__share_import_t *imp = mn__calloc(1, sizeof *imp);
  if (!imp) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  imp->token = h->token;
  imp->slot = h->slot;
  imp->generation = h->generation;
  imp->dev = dev;
  imp->ref_fd = -1;
  pthread_mutex_lock(&g_reg_lock);
  bool twice = reg_has(h->token);
  if (!twice) {
    imp->next = g_reg;
    g_reg = imp;
  }
  pthread_mutex_unlock(&g_reg_lock);
  if (twice) {
    free(imp);
    return mn__error(MN_ERR_INVALID_STATE, func, "this handle (token %016" PRIx64 ") is already open in this process",
                     h->token);
  }
  /* Our own open file description: an OFD lock belongs to it, not to the
   * exporter's description that SCM_RIGHTS shares, and closing it (or dying)
   * drops exactly this import's lock. */
  char self[40];
  snprintf(self, sizeof self, "/proc/self/fd/%d", h->ref_fd);
  imp->ref_fd = open(self, O_RDWR | O_CLOEXEC);
  long pagesz = sysconf(_SC_PAGESIZE);
  off_t off = slot_offset(h->slot), page_off = off / pagesz * pagesz;
  if (imp->ref_fd >= 0) {
    imp->page_len = (size_t)pagesz;
    imp->page = mmap(NULL, imp->page_len, PROT_READ | PROT_WRITE, MAP_SHARED, imp->ref_fd, page_off);
    if (imp->page == MAP_FAILED) imp->page = NULL;
  }
  struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = (off_t)sizeof(ref_slot_t),
                    .l_pid = 0};
  if (!imp->page || fcntl(imp->ref_fd, F_OFD_SETLK, &l) != 0) {
    st = mn__error(MN_ERR_IO, func, "cannot map or lock the reference file: %s", strerror(errno));
    import_drop(imp);
    return st;
  }
  imp->slot_ptr = (ref_slot_t *)((char *)imp->page + (off - page_off));
  /* Count ourselves in while the generation is the handle's (the lock is
   * already held: the exporter sees a count only with a lock behind it). */
  uint64_t w = atomic_load(&imp->slot_ptr->word);
  for (;;) {
    if (WORD_GEN(w) != h->generation) {
      import_drop(imp);
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "stale handle: the exporter has released block slot %u (generation %u, now %u)", h->slot,
                       h->generation, WORD_GEN(w));
    }
    if (atomic_load(&imp->slot_ptr->token) != h->token) {
      import_drop(imp);
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "forged or stale handle: its token does not match slot %u",
                       h->slot);
    }
    if (atomic_compare_exchange_weak(&imp->slot_ptr->word, &w, w + 1)) break;
  }
  imp->counted = true;
  size_t size = 0;
  if (h->nfds) {
    mn__share_mem_t m;
    memset(&m, 0, sizeof m);
    m.npieces = h->nfds;
    m.offset = h->offset;
    for (uint32_t i = 0; i < h->nfds; i++) {
      m.fds[i] = h->fds[i];
      m.piece_offset[i] = h->piece_offset[i];
      m.piece_length[i] = h->piece_length[i];
    }
    st = be->share_import(dev.index, &m, &imp->base, &size);
    imp->shared_mem = true;
  } else {
    st = be->ipc_open(dev.index, h->ipc, &imp->base, &size);
  }
  if (st == MN_OK && (h->offset > size || h->nbytes > size - h->offset)) {
    mn__ignore(h->nfds ? be->share_close(dev.index, imp->base) : be->ipc_close(dev.index, imp->base));
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's block runs past the %zu bytes it maps", size);
  }
  if (st != MN_OK) {
    import_drop(imp);
    return mn__error_wrap(st, func);
  }
  *out = imp;
  *data = (char *)imp->base + h->offset;
  return MN_OK;
}

void mn__share_close(mn__share_import_t *imp) {
  if (!imp) return;
  const mn__backend_t *be = mn__backend_for(imp->dev.type);
  /* close cannot report: the mapping goes before the count, so the exporter
   * never reuses memory we still map */
  mn__ignore(imp->shared_mem ? be->share_close(imp->dev.index, imp->base) : be->ipc_close(imp->dev.index, imp->base));
  import_drop(imp);
}
