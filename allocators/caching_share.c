/* allocators/caching_share.c: caching-allocator blocks shared with other processes
 * (mnemo/share.h). Every export has its own reference file: a memfd the
 * exporter fills (token, device, kind, offset, sizes, pieces and their
 * inodes, a state word) through its own mapping, then seals against
 * shrinking, growing, any later write and further seals (F_SEAL_FUTURE_WRITE
 * keeps the exporter's mapping the only writable one). The handle carries a
 * read-only description of it; the importer reopens its own description and
 * holds an open file description read lock (F_OFD_SETLK) on the whole file
 * while it maps the block, and checks the handle against the file.
 * The exporter releases an export by taking the write lock on its own
 * description (which succeeds only when no importer holds a read lock), then
 * writing RELEASED into the state word and closing it; an importer checks the
 * state after its lock is granted, so none opens a released export. A block
 * is held while any of its exports is. A SIGKILLed importer's lock goes with
 * its descriptors. An importer writes nothing the exporter reads: it can keep
 * its own exports held (by locking), nothing more (docs/ALLOCATOR.md
 * "Sharing across processes", the trust model).
 * Threading: the exporter's side runs under the allocator lock; the import
 * registry and the peer policy under their own mutexes. */
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
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/random.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

#define REF_NAME "mnemo-share-ref"
#define REF_LINK "/memfd:" REF_NAME " (deleted)"
#define REF_SIZE ((size_t)4096)
#define REF_MAGIC UINT64_C(0x31464552484e4d4d) /* "MMNHREF1" */
#define REF_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define REF_LIVE 1u
#define REF_RELEASED 2u
/* parked exports checked per allocation (empty_cache and the OOM path check all) */
#define RETRY_BUDGET 8

/* The reference file's contents (what the exporter exported). */
typedef struct ref_file_s {
  uint64_t magic;
  uint32_t layout; /* MN_SHARE_HANDLE_VERSION */
  _Atomic uint32_t state;
  uint64_t token;
  int64_t pid;
  int32_t device_type, device_index;
  uint32_t kind, nfds;
  uint64_t segment_size, offset, nbytes;
  uint8_t ipc[64];
  uint64_t piece_offset[MN_SHARE_MAX_FDS], piece_length[MN_SHARE_MAX_FDS];
  uint64_t piece_dev[MN_SHARE_MAX_FDS], piece_ino[MN_SHARE_MAX_FDS];
} ref_file_t;
_Static_assert(sizeof(ref_file_t) <= REF_SIZE, "a reference file fits its size");

/* One export of a block (one reference file) in the exporter. */
typedef struct ref_s {
  struct ref_s *next;
  int fd;          /* the exporter's own description (its write lock lives on it) */
  ref_file_t *map; /* the one writable mapping */
} ref_t;

typedef struct mn__share_rec_s {
  mn__block_t *block;
  ref_t *refs;                         /* its live exports */
  struct mn__share_rec_s *prev, *next; /* the parked list */
  bool parked;
} mn__share_rec_t;

typedef struct mn__share_state_s {
  mn__share_rec_t *parked, *parked_tail; /* freed blocks importers still hold */
} mn__share_state_t;

/* ---- the exporter: reference files, parking ------------------------------------------ */

static mn_status state_create(const char *func, mn__caching_t *a) {
  if (a->share) return MN_OK;
  mn__share_state_t *st = mn__calloc(1, sizeof *st);
  if (!st) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  a->share = st;
  return MN_OK;
}

/* Marks export r released (no importer may open it from now on; those that
 * have it keep their mapping) and frees the exporter's side of it. */
static void ref_release(ref_t *r) {
  atomic_store_explicit(&r->map->state, REF_RELEASED, memory_order_release);
  munmap(r->map, REF_SIZE);
  close(r->fd);
  free(r);
}

/* Releases export r if no importer holds it (true: r is freed): the write
 * lock on the exporter's description is granted only without readers. */
static bool ref_try_release(ref_t *r) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0, .l_pid = 0};
  if (fcntl(r->fd, F_OFD_SETLK, &l) != 0) return false; /* held (or cannot tell: kept) */
  ref_release(r); /* under the write lock: an importer whose read lock comes later sees it released */
  return true;
}

/* Releases the exports of rec that no importer holds, at most *budget of
 * them (NULL: all); true when none is left (then rec is freed). */
static bool rec_try_release(mn__share_rec_t *rec, int *budget) {
  for (ref_t **p = &rec->refs; *p;) {
    if (budget && (*budget)-- <= 0) return false;
    ref_t *r = *p, *next = r->next;
    if (ref_try_release(r)) *p = next;
    else p = &r->next;
  }
  if (rec->refs) return false;
  rec->block->share = NULL;
  free(rec);
  return true;
}

static void parked_unlink(mn__share_state_t *st, mn__share_rec_t *rec) {
  if (rec->prev) rec->prev->next = rec->next;
  else st->parked = rec->next;
  if (rec->next) rec->next->prev = rec->prev;
  else st->parked_tail = rec->prev;
  rec->prev = rec->next = NULL;
  rec->parked = false;
}

static void parked_append(mn__share_state_t *st, mn__share_rec_t *rec) {
  rec->parked = true;
  rec->next = NULL;
  rec->prev = st->parked_tail;
  if (rec->prev) rec->prev->next = rec;
  else st->parked = rec;
  st->parked_tail = rec;
}

bool mn__share_park(mn__caching_t *a, mn__block_t *b) {
  mn__share_rec_t *rec = b->share;
  if (rec->parked) return true; /* mn__share_retry unparks before freeing */
  if (rec_try_release(rec, NULL)) return false;
  parked_append(a->share, rec);
  return true;
}

void mn__share_retry(mn__caching_t *a, bool deep) {
  mn__share_state_t *st = a->share;
  /* each check is one system call: an allocation checks a few parked exports
   * (round robin: a block still held goes to the back), deep checks all */
  int budget = RETRY_BUDGET;
  mn__share_rec_t *last = st->parked_tail;
  for (mn__share_rec_t *rec = st->parked, *next; rec; rec = next) {
    next = rec->next;
    bool was_last = rec == last;
    mn__block_t *b = rec->block;
    parked_unlink(st, rec);
    if (rec_try_release(rec, deep ? NULL : &budget)) mn__free_block(a, b);
    else parked_append(st, rec);
    if (was_last || (!deep && budget <= 0)) break;
  }
}

void mn__share_destroy(mn__caching_t *a) {
  for (mn__segment_t *s = a->segments; s; s = s->next_seg)
    for (mn__block_t *b = s->head; b; b = b->next)
      if (b->share) {
        mn__share_rec_t *rec = b->share;
        for (ref_t *r = rec->refs, *next; r; r = next) {
          next = r->next;
          ref_release(r); /* the block goes with the allocator */
        }
        free(rec);
        b->share = NULL;
      }
  free(a->share);
  a->share = NULL;
}

/* A new reference file describing h (filled but for ref_fd), sealed; *out
 * gets the exporter's record and h->ref_fd the read-only description sent. */
static mn_status ref_create(const char *func, mn_share_handle_t *h, ref_t **out) {
  ref_file_t f;
  memset(&f, 0, sizeof f);
  f.magic = REF_MAGIC;
  f.layout = MN_SHARE_HANDLE_VERSION;
  atomic_init(&f.state, REF_LIVE);
  f.token = h->token;
  f.pid = h->pid;
  f.device_type = h->device_type;
  f.device_index = h->device_index;
  f.kind = h->kind;
  f.nfds = h->nfds;
  f.segment_size = h->segment_size;
  f.offset = h->offset;
  f.nbytes = h->nbytes;
  memcpy(f.ipc, h->ipc, sizeof f.ipc);
  for (uint32_t i = 0; i < h->nfds; i++) {
    struct stat sb;
    if (fstat(h->fds[i], &sb) != 0)
      return mn__error(MN_ERR_IO, func, "fstat of memory descriptor %d: %s", h->fds[i], strerror(errno));
    f.piece_offset[i] = h->piece_offset[i];
    f.piece_length[i] = h->piece_length[i];
    f.piece_dev[i] = (uint64_t)sb.st_dev;
    f.piece_ino[i] = (uint64_t)sb.st_ino;
  }
  ref_t *r = mn__calloc(1, sizeof *r);
  if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  r->map = MAP_FAILED;
  int fd = memfd_create(REF_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING), sent = -1;
  if (fd >= 0 && ftruncate(fd, (off_t)REF_SIZE) == 0)
    r->map = mmap(NULL, REF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r->map != MAP_FAILED) {
    /* a child forked from this process gets no writable copy of it */
    (void)madvise(r->map, REF_SIZE, MADV_DONTFORK);
    memcpy(r->map, &f, sizeof f);
    char self[40];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    /* no write after this but through r->map; then a description of its own
     * for the receivers (so none of them shares the exporter's locks) */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0)
      sent = open(self, O_RDONLY | O_CLOEXEC);
  }
  if (sent < 0) {
    int e = errno;
    if (r->map != MAP_FAILED) munmap(r->map, REF_SIZE);
    if (fd >= 0) close(fd);
    free(r);
    return mn__error(e == ENOMEM ? MN_ERR_OUT_OF_MEMORY : MN_ERR_IO, func,
                     "cannot make the export's reference file: %s%s", strerror(e),
                     e == EMFILE ? " (each live export keeps one descriptor: raise RLIMIT_NOFILE)" : "");
  }
  r->fd = fd;
  h->ref_fd = sent;
  *out = r;
  return MN_OK;
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
  unsigned sharing = mn__device_sharing(al->device.type);
  char dev[32];
  mn_device_format(al->device, dev, sizeof dev);
  if (!sharing)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "%s memory cannot be shared with another process", dev);
  mn__caching_lock(a);
  mn__block_t *b = mn__live_block(a, (uintptr_t)ptr);
  if (!b) {
    mn__caching_unlock(a);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%p is not the start of a live block of this allocator (%s)",
                     ptr, dev);
  }
  mn_share_handle_t h;
  handle_init(&h);
  mn_status st = state_create(__func__, a);
  mn__share_rec_t *rec = b->share;
  bool fresh = !rec;
  if (st == MN_OK && fresh) {
    rec = mn__calloc(1, sizeof *rec);
    if (!rec) st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    else rec->block = b;
  }
  if (st == MN_OK) {
    h.kind = b->seg->expandable ? MN_SHARE_EXPANDABLE : MN_SHARE_RAW;
    if (!b->seg->expandable && (sharing & MN__SHARING_IPC)) { /* CUDA: the segment's IPC handle */
      size_t off = 0;
      st = mn__device_ipc_export(al->device, ptr, h.ipc, &off);
      h.offset = off;
      h.segment_size = b->seg->size;
    } else if (sharing & MN__SHARING_MEM) {
      mn__share_mem_t m;
      st = mn__device_share_export(al->device, ptr, b->size, &m);
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
  h.device_type = (int32_t)al->device.type;
  h.device_index = al->device.index;
  h.pid = (int64_t)getpid();
  h.nbytes = b->requested;
  do h.token = mn__random_u64();
  while (h.token == 0);
  ref_t *r = NULL;
  if (st == MN_OK) st = ref_create(__func__, &h, &r);
  if (st != MN_OK) {
    mn_share_handle_close(&h);
    if (fresh) free(rec);
    mn__caching_unlock(a);
    return mn__error_wrap(st, __func__);
  }
  r->next = rec->refs;
  rec->refs = r;
  b->share = rec;
  mn__caching_unlock(a);
  *out = h;
  return MN_OK;
}

/* ---- the handle on the wire -------------------------------------------------------------- */

static pthread_mutex_t g_policy_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_share_peer_policy_fn g_policy;
static void *g_policy_ctx;

void mn_share_set_peer_policy(mn_share_peer_policy_fn fn, void *ctx) {
  pthread_mutex_lock(&g_policy_lock);
  g_policy = fn;
  g_policy_ctx = fn ? ctx : NULL;
  pthread_mutex_unlock(&g_policy_lock);
}

/* Whether the peer at the other end of sock may be served (the policy, or
 * by default: the same effective uid as this process). */
static mn_status check_peer(const char *func, int sock, bool sending) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  memset(&cr, 0, sizeof cr);
  int rc = getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len);
  if (rc != 0 || len != sizeof cr || cr.pid <= 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "socket %d: cannot tell which process is at the other end (%s): a connected Unix socket is needed",
                     sock, rc != 0 ? strerror(errno) : "no peer credentials");
  mn_share_peer_t peer = {.pid = (int64_t)cr.pid, .uid = (uint32_t)cr.uid, .gid = (uint32_t)cr.gid};
  pthread_mutex_lock(&g_policy_lock);
  mn_share_peer_policy_fn fn = g_policy;
  void *ctx = g_policy_ctx;
  pthread_mutex_unlock(&g_policy_lock);
  uint32_t me = (uint32_t)geteuid();
  if (fn ? fn(&peer, sending, ctx) : peer.uid == me) return MN_OK;
  if (fn)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "socket %d: the peer policy refuses the peer (pid %" PRId64
                     ", uid %u, gid %u)", sock, peer.pid, peer.uid, peer.gid);
  return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                   "socket %d: the peer (pid %" PRId64 ", uid %u) is another user than this process (uid %u); "
                   "mn_share_set_peer_policy can allow it", sock, peer.pid, peer.uid, me);
}

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
  mn_status pst = check_peer(__func__, sock, true);
  if (pst != MN_OK) return pst;
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
  mn_status pst = check_peer(__func__, sock, false);
  if (pst != MN_OK) return pst;
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
  mn_device_t dev;
  int ref_fd;      /* this import's own open file description (its read lock lives on it) */
  bool shared_mem; /* share_import (else ipc_open) */
  void *base;      /* the mapping */
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

/* Everything but the memory mapping; the registry entry too. */
static void import_drop(mn__share_import_t *imp) {
  if (imp->ref_fd >= 0) close(imp->ref_fd); /* drops the lock: the exporter may release */
  reg_remove(imp);
  free(imp);
}

/* Refuses fd unless it is a reference file (a memfd of that name and size)
 * sealed so that nobody can shrink, grow or rewrite it and no seal can be
 * taken off: what the importer reads from it cannot change under it. */
static mn_status check_ref_fd(const char *func, int fd) {
  struct stat sb;
  char self[40], link[256];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = fd >= 0 ? readlink(self, link, sizeof link - 1) : -1;
  link[n < 0 ? 0 : n] = '\0';
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || strcmp(link, REF_LINK) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's reference descriptor %d is '%.100s', not a mnemo reference file (memfd " REF_NAME ")",
                     fd, link);
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & REF_SEALS) != REF_SEALS || !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's reference file is not sealed against shrinking, growing, writing and resealing "
                     "(seals 0x%x): the sender could change or truncate it",
                     seals < 0 ? 0 : (unsigned)seals);
  if ((uint64_t)sb.st_size != REF_SIZE)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's reference file has %lld bytes, not %zu",
                     (long long)sb.st_size, REF_SIZE);
  return MN_OK;
}

/* Whether the handle says what the exporter wrote in the reference file. */
static mn_status check_bound(const char *func, const mn_share_handle_t *h, const ref_file_t *f) {
  if (f->magic != REF_MAGIC || f->layout != MN_SHARE_HANDLE_VERSION)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's reference file is not a version %u export record",
                     MN_SHARE_HANDLE_VERSION);
  if (atomic_load_explicit(&f->state, memory_order_acquire) != REF_LIVE)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stale handle: the exporter has released the block");
  if (f->token != h->token)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "forged or stale handle: its token does not match its reference file");
  const char *field = NULL;
  if (f->device_type != h->device_type || f->device_index != h->device_index) field = "device";
  else if (f->kind != h->kind) field = "kind";
  else if (f->offset != h->offset) field = "offset";
  else if (f->nbytes != h->nbytes) field = "nbytes";
  else if (f->segment_size != h->segment_size) field = "segment_size";
  else if (f->nfds != h->nfds) field = "nfds";
  else if (memcmp(f->ipc, h->ipc, sizeof f->ipc) != 0) field = "ipc";
  for (uint32_t i = 0; !field && i < h->nfds; i++)
    if (f->piece_offset[i] != h->piece_offset[i] || f->piece_length[i] != h->piece_length[i]) field = "pieces";
  if (field)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's %s is not what was exported (block [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64
                     " bytes exported; the handle says [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64 ")",
                     field, f->offset, f->nbytes, f->segment_size, h->offset, h->nbytes, h->segment_size);
  return MN_OK;
}

/* Whether each memory descriptor is the file that was exported. */
static mn_status check_pieces(const char *func, const mn_share_handle_t *h, const ref_file_t *f) {
  for (uint32_t i = 0; i < h->nfds; i++) {
    struct stat sb;
    if (fstat(h->fds[i], &sb) != 0 || (uint64_t)sb.st_dev != f->piece_dev[i] || (uint64_t)sb.st_ino != f->piece_ino[i])
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "the handle's memory descriptor %u (%d) is not the one that was exported", i, h->fds[i]);
  }
  return MN_OK;
}

mn_status mn__share_open(const char *func, mn_device_t dev, const mn_share_handle_t *h, mn__share_import_t **out,
                         void **data) {
  char name[32];
  mn_device_format(dev, name, sizeof name);
  if (h->version != MN_SHARE_HANDLE_VERSION || h->reserved != 0 || h->kind > MN_SHARE_EXPANDABLE)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "not a version %u share handle (version %u, kind %u)",
                     MN_SHARE_HANDLE_VERSION, h->version, h->kind);
  if (h->device_type != (int32_t)dev.type || h->device_index != dev.index)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle is for device type %d index %d, not %s",
                     h->device_type, h->device_index, name);
  if (h->nbytes == 0 || h->offset > h->segment_size || h->nbytes > h->segment_size - h->offset ||
      h->nfds > MN_SHARE_MAX_FDS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "the handle's block [%" PRIu64 ", +%" PRIu64 ") is not inside its %" PRIu64 "-byte segment "
                     "(or %u descriptors)", h->offset, h->nbytes, h->segment_size, h->nfds);
  uint64_t total = 0;
  for (uint32_t i = 0; i < h->nfds; i++) {
    if (h->piece_length[i] > UINT64_MAX - total)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's pieces overflow 64 bits");
    total += h->piece_length[i];
  }
  if (h->nfds && total != h->segment_size)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the handle's pieces add up to %" PRIu64 " bytes, not %" PRIu64,
                     total, h->segment_size);
  unsigned sharing = mn__device_sharing(dev.type);
  if (!(sharing & (h->nfds ? MN__SHARING_MEM : MN__SHARING_IPC)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s cannot open a handle of this kind (%s)", name,
                     h->nfds ? "memory descriptors" : "a CUDA IPC handle");
  mn_status st = check_ref_fd(func, h->ref_fd);
  if (st != MN_OK) return st;

  mn__share_import_t *imp = mn__calloc(1, sizeof *imp);
  if (!imp) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  imp->token = h->token;
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
  /* Our own open file description, read-only: an OFD lock belongs to it,
   * not to the description that SCM_RIGHTS shares with every receiver of
   * this handle, and closing it (or dying) drops exactly this import's lock. */
  char self[40];
  snprintf(self, sizeof self, "/proc/self/fd/%d", h->ref_fd);
  imp->ref_fd = open(self, O_RDONLY | O_CLOEXEC);
  struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0, .l_pid = 0};
  if (imp->ref_fd < 0) {
    st = mn__error(MN_ERR_IO, func, "cannot open the reference file: %s", strerror(errno));
    import_drop(imp);
    return st;
  }
  if (fcntl(imp->ref_fd, F_OFD_SETLK, &l) != 0) {
    int e = errno;
    import_drop(imp);
    if (e == EAGAIN || e == EACCES) /* the exporter's write lock: it is releasing, or released, the block */
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stale handle: the exporter has released the block");
    return mn__error(MN_ERR_IO, func, "cannot lock the reference file: %s", strerror(e));
  }
  /* Held from here: the exporter cannot release the export until we close.
   * The file is sealed, so what we read is what the exporter wrote. */
  ref_file_t f;
  ssize_t got = pread(imp->ref_fd, &f, sizeof f, 0);
  if (got != (ssize_t)sizeof f) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "cannot read the reference file (%zd bytes: %s)", got,
                   got < 0 ? strerror(errno) : "short");
    import_drop(imp);
    return st;
  }
  st = check_bound(func, h, &f);
  if (st != MN_OK) {
    import_drop(imp);
    return st;
  }
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
    st = mn__device_share_import(dev, &m, &imp->base, &size); /* checks each piece is sealed */
    imp->shared_mem = true;
    if (st == MN_OK) {
      st = check_pieces(func, h, &f);
      if (st != MN_OK) mn__ignore(mn__device_share_close(dev, imp->base));
    }
  } else {
    st = mn__device_ipc_open(dev, h->ipc, &imp->base, &size);
  }
  if (st == MN_OK && (h->offset > size || h->nbytes > size - h->offset)) {
    mn__ignore(h->nfds ? mn__device_share_close(dev, imp->base) : mn__device_ipc_close(dev, imp->base));
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
  /* close cannot report: the mapping goes before the lock, so the exporter
   * never reuses memory we still map */
  mn__ignore(imp->shared_mem ? mn__device_share_close(imp->dev, imp->base) : mn__device_ipc_close(imp->dev, imp->base));
  import_drop(imp);
}
