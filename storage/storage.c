/* storage/storage.c: a storage's lifetime: ref-counted byte buffers of five
 * kinds (allocator, foreign, file, shared memory, CUDA IPC): creation,
 * retain/release, the queries, moving into shared memory, and the handles
 * other processes open. The operations on a storage's bytes (resize, fill,
 * copy, clone, to, byteswap, convert, print) are storage/storage_ops.c, a
 * floor above (docs/ARCHITECTURE.md). Storages on the meta device have a
 * size and no data (mn_storage_data is NULL; the allocator's address is kept
 * in meta_block to free it). The count is atomic; share_memory must not race
 * other uses of a storage. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "allocators/caching_share.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"
#include "runtime/meta.h"
#include "storage/storage_internal.h"

/* The block the allocator handed out for an ALLOCATOR storage. */
static void *alloc_block(const mn_storage_t *s) { return mn__is_meta(s->device) ? s->meta_block : s->data; }

const char *mn_storage_kind_name(mn_storage_kind kind) {
  switch (kind) {
    case MN_STORAGE_ALLOCATOR: return "allocator";
    case MN_STORAGE_FOREIGN: return "foreign";
    case MN_STORAGE_FILE: return "file";
    case MN_STORAGE_SHARED: return "shared";
    case MN_STORAGE_IPC: return "ipc";
    default: return "invalid";
  }
}

static mn_storage_t *storage_new(mn_device_t dev, mn_storage_kind kind) {
  mn_storage_t *s = mn__calloc(1, sizeof *s);
  if (!s) return NULL;
  atomic_init(&s->refcount, 1);
  atomic_init(&s->views, 0);
  s->device = dev;
  s->kind = kind;
  s->fd = -1;
  return s;
}

mn_status mn_storage_create(mn_device_t dev, size_t nbytes, mn_allocator_t *allocator, mn_stream_t *stream,
                            mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (!allocator) {
    st = mn_allocator_get_default(dev, &allocator);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  } else if (!mn_device_equal(mn_allocator_device(allocator), dev)) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "allocator belongs to another device");
  }
  mn_storage_t *s = storage_new(dev, MN_STORAGE_ALLOCATOR);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  st = mn_allocator_alloc(allocator, nbytes, stream, mn__is_meta(dev) ? &s->meta_block : &s->data);
  if (st != MN_OK) {
    free(s);
    return mn__error_wrap(st, __func__);
  }
  s->nbytes = nbytes;
  s->allocator = allocator;
  *out = s;
  return MN_OK;
}

mn_storage_t *mn_storage_retain(mn_storage_t *s) {
  if (s) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
  return s;
}

mn_storage_t *mn__storage_view_attach(mn_storage_t *s) {
  atomic_fetch_add_explicit(&s->views, 1, memory_order_relaxed);
  return mn_storage_retain(s);
}

void mn__storage_view_detach(mn_storage_t *s) {
  atomic_fetch_sub_explicit(&s->views, 1, memory_order_relaxed);
  mn_storage_release(s);
}

/* Frees what the storage's bytes hold, by kind (not the struct). Failures
 * cannot be reported from release; allocators keep their own statistics. */
static void storage_free_bytes(mn_storage_t *s) {
  switch (s->kind) {
    case MN_STORAGE_ALLOCATOR:
      mn__ignore(mn_allocator_free(s->allocator, alloc_block(s))); /* release returns nothing (see above) */
      break;
    case MN_STORAGE_FOREIGN:
      if (s->deleter) s->deleter(s->ctx, s->data);
      break;
    case MN_STORAGE_FILE:
    case MN_STORAGE_SHARED:
      if (s->map_len) munmap(s->data, s->map_len);
      if (s->fd >= 0) close(s->fd);
      break;
    case MN_STORAGE_IPC: {
      if (s->share) mn__share_close(s->share);
      else if (mn__device_sharing(s->device.type) & MN__SHARING_IPC)
        mn__ignore(mn__device_ipc_close(s->device, s->ipc_base)); /* release returns nothing */
      break;
    }
  }
}

void mn_storage_release(mn_storage_t *s) {
  if (!s) return;
  if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1) return;
  storage_free_bytes(s);
  free(s->filename);
  free(s);
}

size_t mn_storage_nbytes(const mn_storage_t *s) { return s->nbytes; }
void *mn_storage_data(const mn_storage_t *s) { return s->data; }
mn_device_t mn_storage_device(const mn_storage_t *s) { return s->device; }
mn_allocator_t *mn_storage_allocator(const mn_storage_t *s) { return s->allocator; }
long mn_storage_refcount(const mn_storage_t *s) { return atomic_load(&s->refcount); }
mn_storage_kind mn_storage_get_kind(const mn_storage_t *s) { return s->kind; }
bool mn_storage_is_resizable(const mn_storage_t *s) { return s->kind == MN_STORAGE_ALLOCATOR; }
const char *mn_storage_filename(const mn_storage_t *s) { return s->kind == MN_STORAGE_FILE ? s->filename : NULL; }

bool mn_storage_is_pinned(const mn_storage_t *s) {
  return s->device.type == MN_DEVICE_CPU && s->data != NULL && mn_is_pinned(s->data);
}

bool mn_storage_is_shared(const mn_storage_t *s) {
  return s->kind == MN_STORAGE_SHARED || s->kind == MN_STORAGE_IPC ||
         (s->kind == MN_STORAGE_FILE && s->file_shared);
}

/* ---- foreign memory ---------------------------------------------------------- */

mn_status mn_storage_from_buffer(mn_device_t dev, void *data, size_t nbytes, mn_storage_deleter_t deleter,
                                 void *ctx, mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(data != NULL || nbytes == 0, "data must not be NULL (nbytes=%zu)", nbytes);
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (mn__is_meta(dev) && data != NULL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "the meta device holds no data: wrap no buffer on it (use mn_storage_create)");
  if ((st = mn__device_check_range(dev, data, nbytes)) != MN_OK)
    return mn__error_wrap(st, __func__); /* a pointer the device does not own */
  mn_storage_t *s = storage_new(dev, MN_STORAGE_FOREIGN);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  s->data = data;
  s->nbytes = nbytes;
  s->deleter = deleter;
  s->ctx = ctx;
  *out = s;
  return MN_OK;
}

/* ---- files ------------------------------------------------------------------------ */

static mn_status errno_error(const char *func, int err, const char *what, const char *path) {
  mn_status code = err == ENOENT ? MN_ERR_NOT_FOUND : err == ENOMEM ? MN_ERR_OUT_OF_MEMORY : MN_ERR_IO;
  return mn__error(code, func, "%s '%s' failed: %s", what, path, strerror(err));
}

mn_status mn_storage_from_file(const char *path, bool shared, size_t nbytes, mn_storage_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  /* regular files only, and open() never waits (a FIFO, a device) */
  int fd = -1;
  size_t size = 0;
  mn_status st = mn__file_open_regular(__func__, path, shared ? O_RDWR | O_CREAT : O_RDONLY, 0644, &fd, &size);
  if (st != MN_OK) return st;
  void *p = NULL;
  if (nbytes == 0) nbytes = size;
  if (size < nbytes) {
    if (!shared) {
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "file '%s' has %zu bytes, fewer than the %zu a private mapping needs", path, size, nbytes);
      goto fail;
    }
    if ((off_t)nbytes < 0 || ftruncate(fd, (off_t)nbytes) != 0) {
      st = errno_error(__func__, (off_t)nbytes < 0 ? EFBIG : errno, "extending", path);
      goto fail;
    }
  }
  if (nbytes) {
    p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      p = NULL;
      st = errno_error(__func__, errno, "mmap of", path);
      goto fail;
    }
  }
  close(fd);
  fd = -1;
  mn_storage_t *s = storage_new(mn_device_cpu(), MN_STORAGE_FILE);
  char *name = mn__strdup(path);
  if (!s || !name) {
    free(s);
    free(name);
    if (p) munmap(p, nbytes);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  s->data = p;
  s->nbytes = nbytes;
  s->map_len = p ? nbytes : 0;
  s->filename = name;
  s->file_shared = shared;
  *out = s;
  return MN_OK;
fail:
  if (fd >= 0) close(fd);
  return st;
}

/* ---- shared memory -------------------------------------------------------------------
 * Linux: memfd_create("mnemo-shm"), an anonymous tmpfs file that never has a
 * name in /dev/shm, sized and then sealed (F_SEAL_SHRINK | F_SEAL_GROW |
 * F_SEAL_SEAL): its size never changes again, so no mapping of it can raise
 * SIGBUS. A descriptor or handle is opened only when it is such memory: a
 * regular file whose /proc link is "/memfd:mnemo-shm (deleted)", sealed
 * against shrinking and growing, open read-write (shm_check_origin,
 * shm_check_open). Elsewhere: shm_open of a unique name, unlinked at once;
 * nothing can be sealed or told apart there, and handles are refused. */

#define MN__SHM_NAME "mnemo-shm"
#ifdef __linux__
#define MN__SHM_LINK "/memfd:" MN__SHM_NAME " (deleted)"
#endif

static mn_status shm_make(const char *func, size_t nbytes, int *fd_out) {
  int fd;
#ifdef __linux__
  fd = memfd_create(MN__SHM_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return mn__error(MN_ERR_IO, func, "memfd_create failed: %s", strerror(errno));
#else
  static atomic_ulong counter;
  char name[64];
  for (;;) {
    snprintf(name, sizeof name, "/mnemo-%ld-%lu", (long)getpid(), atomic_fetch_add(&counter, 1));
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) return mn__error(MN_ERR_IO, func, "shm_open failed: %s", strerror(errno));
  shm_unlink(name);
#endif
  if (nbytes && ((off_t)nbytes < 0 || ftruncate(fd, (off_t)nbytes) != 0)) {
    int err = (off_t)nbytes < 0 ? EFBIG : errno;
    close(fd);
    return mn__error(err == ENOSPC || err == ENOMEM ? MN_ERR_OUT_OF_MEMORY : MN_ERR_IO, func,
                     "sizing shared memory to %zu bytes failed: %s", nbytes, strerror(err));
  }
#ifdef __linux__
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int err = errno;
    close(fd);
    return mn__error(MN_ERR_IO, func, "sealing shared memory against size changes failed: %s", strerror(err));
  }
#endif
  *fd_out = fd;
  return MN_OK;
}

static const char *file_type_name(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a pipe or FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
                          : "not a regular file";
}

/* Refuses descriptor fd (`what` names it in messages; fd may be O_PATH)
 * unless it is mnemo's shared memory: a regular file, on Linux the memfd
 * named mnemo-shm. What it is goes into the message. */
static mn_status shm_check_origin(const char *func, int fd, const char *what) {
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s: fstat failed: %s", what, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s is %s, not mnemo shared memory; refused", what,
                     file_type_name(sb.st_mode));
#ifdef __linux__
  char self[40], link[256];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(self, link, sizeof link - 1);
  if (n < 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "%s: cannot tell whether it is mnemo shared memory (readlink %s: %s); refused", what, self,
                     strerror(errno));
  link[n] = '\0';
  if (strcmp(link, MN__SHM_LINK) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "%s is '%.120s', not mnemo shared memory (a memfd named " MN__SHM_NAME "); refused", what, link);
#endif
  return MN_OK;
}

/* Whether open flags (F_GETFL, or fdinfo's "flags:") allow reading and
 * writing: O_RDWR, and not an O_PATH descriptor. */
static bool flags_read_write(unsigned long flags) {
  bool rw = (flags & O_ACCMODE) == O_RDWR;
#ifdef O_PATH
  if (flags & O_PATH) rw = false;
#endif
  return rw;
}

/* Refuses descriptor fd (checked by shm_check_origin) unless it is open
 * read-write, (Linux) sealed against shrinking and growing and not against
 * writes, and holds exactly (exact) or at least nbytes. */
static mn_status shm_check_open(const char *func, int fd, size_t nbytes, bool exact, const char *what) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || !flags_read_write((unsigned long)fl)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s is not open for reading and writing", what);
#ifdef __linux__
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "%s is not sealed against shrinking and growing as mnemo's shared memory is (not a memfd "
                     "mnemo made, or memory that can shrink under a mapping and raise SIGBUS); refused",
                     what);
  int write_seals = F_SEAL_WRITE;
#ifdef F_SEAL_FUTURE_WRITE
  write_seals |= F_SEAL_FUTURE_WRITE;
#endif
  if (seals & write_seals)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s is sealed against writes; mnemo shared memory never is",
                     what);
#endif
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s: fstat failed: %s", what, strerror(errno));
  unsigned long long size = (unsigned long long)sb.st_size;
  if (exact && size != nbytes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "%s holds %llu bytes, not the %zu the handle names (a stale or forged handle); refused", what,
                     size, nbytes);
  if (size < nbytes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "shared memory of %s has %llu bytes, fewer than %zu", what,
                     size, nbytes);
  return MN_OK;
}

/* Maps nbytes of shared-memory descriptor fd (owned by the caller). */
static mn_status shm_map(const char *func, int fd, size_t nbytes, void **out) {
  *out = NULL;
  if (!nbytes) return MN_OK;
  void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return mn__error(MN_ERR_IO, func, "mmap of %zu shared bytes failed: %s", nbytes, strerror(errno));
  *out = p;
  return MN_OK;
}

mn_status mn_storage_share_memory(mn_storage_t *s) {
  MN__CHECK_ARG(s != NULL, "s must not be NULL");
  if (mn_storage_is_shared(s) || s->device.type == MN_DEVICE_CUDA) return MN_OK;
  if (mn__is_meta(s->device)) return meta_refuse(__func__, "share_memory");
  if (s->device.type != MN_DEVICE_CPU) {
    char name[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "storages on %s cannot move to shared memory",
                     mn_device_format(s->device, name, sizeof name));
  }
  int fd = -1;
  mn_status st = shm_make(__func__, s->nbytes, &fd);
  if (st != MN_OK) return st;
  void *p = NULL;
  st = shm_map(__func__, fd, s->nbytes, &p);
  if (st != MN_OK) {
    close(fd);
    return st;
  }
  if (s->nbytes) memcpy(p, s->data, s->nbytes);
  storage_free_bytes(s);
  free(s->filename);
  s->filename = NULL;
  s->allocator = NULL;
  s->deleter = NULL;
  s->ctx = NULL;
  s->kind = MN_STORAGE_SHARED;
  s->data = p;
  s->map_len = p ? s->nbytes : 0;
  s->fd = fd;
  return MN_OK;
}

mn_status mn_storage_shm_fd(const mn_storage_t *s, int *fd) {
  MN__CHECK_ARG(s != NULL && fd != NULL, "s and fd must not be NULL");
  if (s->kind != MN_STORAGE_SHARED)
    return mn__error(MN_ERR_INVALID_STATE, __func__, "storage of kind '%s' is not in shared memory",
                     mn_storage_kind_name(s->kind));
  *fd = s->fd;
  return MN_OK;
}

/* Maps nbytes of checked descriptor `own` into a new shared-memory storage,
 * which takes `own` over; closes it on failure. */
static mn_status shm_adopt(const char *func, int own, size_t nbytes, mn_storage_t **out) {
  void *p = NULL;
  mn_status st = shm_map(func, own, nbytes, &p);
  if (st != MN_OK) {
    close(own);
    return st;
  }
  mn_storage_t *s = storage_new(mn_device_cpu(), MN_STORAGE_SHARED);
  if (!s) {
    if (p) munmap(p, nbytes);
    close(own);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  s->data = p;
  s->nbytes = nbytes;
  s->map_len = p ? nbytes : 0;
  s->fd = own;
  *out = s;
  return MN_OK;
}

mn_status mn_storage_from_shm_fd(int fd, size_t nbytes, mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(fd >= 0, "fd=%d is not a descriptor", fd);
  char what[32];
  snprintf(what, sizeof what, "fd=%d", fd);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    int err = errno;
    return mn__error(err == EBADF ? MN_ERR_INVALID_ARGUMENT : MN_ERR_IO, __func__, "dup of fd=%d failed: %s", fd,
                     strerror(err));
  }
  mn_status st = shm_check_origin(__func__, own, what);
  if (st == MN_OK) st = shm_check_open(__func__, own, nbytes, false, what);
  if (st != MN_OK) {
    close(own);
    return st;
  }
  return shm_adopt(__func__, own, nbytes, out);
}

mn_status mn_storage_shm_handle(const mn_storage_t *s, char *buf, size_t bufsize) {
  MN__CHECK_ARG(s != NULL && buf != NULL, "s and buf must not be NULL");
  int fd = -1;
  mn_status st = mn_storage_shm_fd(s, &fd);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  int n = snprintf(buf, bufsize, "mnemo-shm:%ld:%d:%zu", (long)getpid(), fd, s->nbytes);
  if (n < 0 || (size_t)n >= bufsize) {
    if (bufsize) buf[0] = '\0';
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "bufsize=%zu is too small (%d needed)", bufsize, n + 1);
  }
  return MN_OK;
}

/* Parses a decimal number of at most 19 digits ending at `end` char. */
static bool parse_u64(const char **p, char end, unsigned long long *out) {
  const char *q = *p;
  unsigned long long v = 0;
  int digits = 0;
  while (*q >= '0' && *q <= '9') {
    if (++digits > 19) return false;
    v = v * 10 + (unsigned long long)(*q++ - '0');
  }
  if (!digits || *q != end) return false;
  *p = end ? q + 1 : q;
  *out = v;
  return true;
}

#ifdef __linux__
/* A handle grants what the owner's descriptor grants: reopening through /proc
 * would make a read-only (or O_PATH) descriptor writable, so the owner's
 * open flags (/proc/<pid>/fdinfo/<fd>) must be read-write, as
 * mn_storage_from_shm_fd requires of a descriptor handed over directly. */
static mn_status shm_check_owner_mode(const char *func, int pid, int fd, const char *what) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/%d/fdinfo/%d", pid, fd);
  FILE *f = fopen(path, "re");
  if (!f) return mn__error(MN_ERR_IO, func, "%s: cannot read %s: %s", what, path, strerror(errno));
  unsigned long flags = 0;
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "flags: %lo", &flags) == 1;
  fclose(f);
  if (!found || !flags_read_write(flags))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "%s: the owner's descriptor is not open for reading and writing (flags %lo); refused", what,
                     flags);
  return MN_OK;
}
#endif

mn_status mn_storage_from_shm_handle(const char *handle, mn_storage_t **out) {
  MN__CHECK_ARG(handle != NULL && out != NULL, "handle and out must not be NULL");
  const char *p = handle;
  unsigned long long pid = 0, fd = 0, nbytes = 0;
  if (strncmp(p, "mnemo-shm:", 10) != 0 || (p += 10, !parse_u64(&p, ':', &pid)) || !parse_u64(&p, ':', &fd) ||
      !parse_u64(&p, '\0', &nbytes) || pid == 0 || pid > INT32_MAX || fd > INT32_MAX || nbytes > SIZE_MAX)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "'%.80s' is not a handle of the form mnemo-shm:<pid>:<fd>:<nbytes>", handle);
#ifndef __linux__
  return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                   "handle '%s': shared-memory handles need Linux's /proc/<pid>/fd and sealed memfds; pass the "
                   "descriptor instead (mn_storage_shm_fd, SCM_RIGHTS)",
                   handle);
#else
  char path[64], what[192];
  snprintf(path, sizeof path, "/proc/%llu/fd/%llu", pid, fd);
  snprintf(what, sizeof what, "handle %s (%s)", handle, path);
  /* O_PATH: nothing is opened for real (no device open, no FIFO wait) before
   * the descriptor is known to be mnemo's shared memory. */
  int pf = open(path, O_PATH | O_CLOEXEC);
  if (pf < 0) {
    int err = errno;
    if (err == EACCES || err == EPERM)
      return mn__error(MN_ERR_IO, __func__, "cannot open %s: %s (another user's process, or one not ptrace-readable)",
                       path, strerror(err));
    return mn__error(err == ENOENT ? MN_ERR_NOT_FOUND : MN_ERR_IO, __func__,
                     "cannot open %s (has the creating process exited or released the storage?): %s", path,
                     strerror(err));
  }
  mn_status st = shm_check_origin(__func__, pf, what);
  if (st == MN_OK) st = shm_check_owner_mode(__func__, (int)pid, (int)fd, what);
  int f = -1;
  if (st == MN_OK) {
    char self[40];
    snprintf(self, sizeof self, "/proc/self/fd/%d", pf);
    f = open(self, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (f < 0) st = mn__error(MN_ERR_IO, __func__, "cannot open %s read-write: %s", path, strerror(errno));
  }
  close(pf);
  if (st == MN_OK) st = shm_check_open(__func__, f, (size_t)nbytes, true, what);
  if (st != MN_OK) {
    if (f >= 0) close(f);
    return st;
  }
  return shm_adopt(__func__, f, (size_t)nbytes, out);
#endif
}

/* ---- CUDA IPC ----------------------------------------------------------------------- */

static mn_status ipc_backend(const char *func, mn_device_t dev) {
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (!(mn__device_sharing(dev.type) & MN__SHARING_IPC)) {
    char name[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "%s memory has no CUDA IPC handles%s",
                     mn_device_format(dev, name, sizeof name),
                     dev.type == MN_DEVICE_CPU ? " (use mn_storage_share_memory)" : "");
  }
  return MN_OK;
}

mn_status mn_storage_ipc_export(const mn_storage_t *s, mn_ipc_handle_t *out) {
  MN__CHECK_ARG(s != NULL && out != NULL, "s and out must not be NULL");
  if (mn__is_meta(s->device)) return meta_refuse(__func__, "an IPC handle");
  mn_status st = ipc_backend(__func__, s->device);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(s->data != NULL, "an empty storage has no memory to export");
  mn_ipc_handle_t h;
  memset(&h, 0, sizeof h);
  size_t off = 0;
  st = mn__device_ipc_export(s->device, s->data, h.bytes, &off);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  h.offset = off;
  h.nbytes = s->nbytes;
  h.device_index = s->device.index;
  *out = h;
  return MN_OK;
}

mn_status mn_storage_from_ipc_handle(mn_device_t dev, const mn_ipc_handle_t *handle, mn_storage_t **out) {
  MN__CHECK_ARG(handle != NULL && out != NULL, "handle and out must not be NULL");
  MN__CHECK_ARG(handle->reserved == 0, "handle.reserved=%u is not 0", handle->reserved);
  MN__CHECK_ARG(handle->nbytes <= SIZE_MAX && handle->offset <= SIZE_MAX - handle->nbytes,
                "handle offset %" PRIu64 " + nbytes %" PRIu64 " overflow", handle->offset, handle->nbytes);
  mn_status st = ipc_backend(__func__, dev);
  if (st != MN_OK) return st;
  mn_storage_t *s = storage_new(dev, MN_STORAGE_IPC);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  size_t size = 0;
  st = mn__device_ipc_open(dev, handle->bytes, &s->ipc_base, &size);
  if (st != MN_OK) {
    free(s);
    return mn__error_wrap(st, __func__);
  }
  if (handle->offset + handle->nbytes > size) { /* a stale or forged handle: nothing outside the allocation */
    mn__ignore(mn__device_ipc_close(dev, s->ipc_base)); /* the refusal is what is reported */
    free(s);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "handle offset %" PRIu64 " + nbytes %" PRIu64 " exceeds the %zu-byte allocation it names",
                     handle->offset, handle->nbytes, size);
  }
  s->data = (char *)s->ipc_base + handle->offset;
  s->nbytes = (size_t)handle->nbytes;
  *out = s;
  return MN_OK;
}

/* ---- caching-allocator blocks of another process (mnemo/share.h) ------------------------ */

mn_status mn_storage_from_share_handle(mn_device_t dev, const mn_share_handle_t *h, mn_storage_t **out) {
  MN__CHECK_ARG(h != NULL && out != NULL, "h and out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_storage_t *s = storage_new(dev, MN_STORAGE_IPC);
  if (!s) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  st = mn__share_open(__func__, dev, h, &s->share, &s->data);
  if (st != MN_OK) {
    free(s);
    return st;
  }
  s->nbytes = (size_t)h->nbytes;
  *out = s;
  return MN_OK;
}
