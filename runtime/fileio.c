/* runtime/fileio.c: opening by path without blocking, regular files only, and
 * whole-file reads (runtime/fileio.h). No shared state, any thread. */
#include "runtime/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/random.h"

#ifndef O_NOCTTY
#define O_NOCTTY 0
#endif

static mn_status not_regular(const char *func, const char *path) {
  return mn__error(MN_ERR_INVALID_ARGUMENT, func, "'%s' is not a regular file", path);
}

mn_status mn__file_open_regular(const char *func, const char *path, int flags, mode_t mode, int *fd, size_t *size) {
  /* A first look without opening: a device or FIFO is refused before open()
   * can have any effect on it; the fstat below is the check that counts. */
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return not_regular(func, path);
  int f;
  do {
    f = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
  } while (f < 0 && errno == EINTR);
  if (f < 0) {
    int err = errno;
    /* a folder opened for writing, a FIFO with no reader opened for writing, a socket */
    if (err == EISDIR || err == ENXIO) return not_regular(func, path);
    mn_status code = err == ENOENT || err == ENOTDIR ? MN_ERR_NOT_FOUND : err == ENOMEM ? MN_ERR_OUT_OF_MEMORY : MN_ERR_IO;
    return mn__error(code, func, "cannot open '%s': %s", path, strerror(err));
  }
  if (fstat(f, &sb) != 0) {
    int err = errno;
    close(f);
    return mn__error(MN_ERR_IO, func, "cannot stat '%s': %s", path, strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return not_regular(func, path);
  }
  if (sb.st_size < 0 || (uintmax_t)sb.st_size > SIZE_MAX) {
    close(f);
    return mn__error(MN_ERR_IO, func, "'%s' has a size of %jd bytes, which this host cannot address", path,
                     (intmax_t)sb.st_size);
  }
  int fl = fcntl(f, F_GETFL);
  if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int err = errno;
    close(f);
    return mn__error(MN_ERR_IO, func, "cannot set '%s' blocking: %s", path, strerror(err));
  }
  *fd = f;
  if (size) *size = (size_t)sb.st_size;
  return MN_OK;
}

mn_status mn__file_read_all(const char *func, const char *path, void **buf, size_t *len) {
  int fd = -1;
  size_t size = 0;
  mn_status st = mn__file_open_regular(func, path, O_RDONLY, 0, &fd, &size);
  if (st != MN_OK) return st;
  /* room for the size fstat gave and one byte more, which the read that
   * finds the end of file uses: no second allocation unless the file grew */
  size_t cap = size < SIZE_MAX ? size + 1 : size, n = 0;
  unsigned char *b = mn__malloc(cap);
  if (!b) {
    close(fd);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory reading '%s' (%zu bytes)", path, size);
  }
  for (;;) {
    if (n == cap) {
      size_t nc = cap <= SIZE_MAX / 2 ? cap * 2 : SIZE_MAX;
      unsigned char *nb = nc > cap ? mn__realloc(b, nc) : NULL;
      if (!nb) {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory reading '%s' (%zu bytes)", path, n);
        break;
      }
      b = nb;
      cap = nc;
    }
    ssize_t got = read(fd, b + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      st = mn__error(MN_ERR_IO, func, "cannot read '%s': %s", path, strerror(errno));
      break;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  close(fd);
  if (st != MN_OK) {
    free(b);
    return st;
  }
  *buf = b;
  *len = n;
  return MN_OK;
}

mn_status mn__file_check_destination(const char *func, const char *path) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) return not_regular(func, path);
  return MN_OK;
}

static bool file_exists_now(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* The file a save to `path` replaces: `path` itself, or where its chain of
 * symbolic links ends (the final component followed as open() follows it; a
 * relative link read from the link's folder), whether that exists or not (a
 * dangling link: the file it names is created). Into out[PATH_MAX]. */
static mn_status resolve_links(const char *func, const char *path, char *out) {
  size_t len = strlen(path);
  if (len >= PATH_MAX) return mn__error(MN_ERR_IO, func, "cannot create '%s': %s", path, strerror(ENAMETOOLONG));
  memcpy(out, path, len + 1);
  char link[PATH_MAX];
  for (int hops = 0;; hops++) {
    struct stat sb;
    if (lstat(out, &sb) != 0 || !S_ISLNK(sb.st_mode)) return MN_OK;
    if (hops == 40) return mn__error(MN_ERR_IO, func, "cannot create '%s': %s", path, strerror(ELOOP));
    ssize_t k = readlink(out, link, sizeof link);
    if (k < 0 || (size_t)k >= sizeof link) {
      int err = k < 0 ? errno : ENAMETOOLONG;
      return mn__error(MN_ERR_IO, func, "cannot create '%s': reading the link '%s': %s", path, out, strerror(err));
    }
    link[k] = '\0';
    const char *slash = strrchr(out, '/');
    size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - out) + 1;
    if (keep + (size_t)k >= PATH_MAX)
      return mn__error(MN_ERR_IO, func, "cannot create '%s': %s", path, strerror(ENAMETOOLONG));
    memcpy(out + keep, link, (size_t)k + 1);
  }
}

/* Gives the new file `fd` what the file it replaces had (sb): its owner and
 * group where this process may set them (root; the group when the saver
 * belongs to it), and its permission bits; when the group cannot be kept, the
 * saver's group gets no more than everyone else had. Set-id and sticky bits
 * are not carried (write() on the old file would have cleared the set-ids). */
static mn_status keep_owner_and_mode(const char *func, const char *path, int fd, const struct stat *sb) {
  struct stat now;
  mode_t mode = sb->st_mode & 0777;
  if (fstat(fd, &now) == 0 && (now.st_uid != sb->st_uid || now.st_gid != sb->st_gid)) {
    bool group_kept = fchown(fd, sb->st_uid, sb->st_gid) == 0 || now.st_gid == sb->st_gid ||
                      fchown(fd, (uid_t)-1, sb->st_gid) == 0;
    if (!group_kept) mode = (mode & ~(mode_t)070) | (mode & ((mode & 07) << 3));
  }
  if (fchmod(fd, mode) != 0)
    return mn__error(MN_ERR_IO, func, "cannot create '%s': cannot set its mode %03o: %s", path, (unsigned)mode,
                     strerror(errno));
  return MN_OK;
}

mn_status mn__file_atomic_begin(const char *func, const char *path, mn__atomic_file_t *f) {
  char target[PATH_MAX];
  mn_status st = resolve_links(func, path, target);
  if (st != MN_OK) return st;
  /* never rename over a folder, FIFO or device (/dev/null stays a device) */
  st = mn__file_check_destination(func, target);
  if (st != MN_OK) return st;
  struct stat old;
  bool replaces = lstat(target, &old) == 0 && S_ISREG(old.st_mode);
  /* one block: the temporary name, then the target's */
  size_t tlen = strlen(target), n = tlen + 48;
  char *tmp = mn__malloc(n + tlen + 1);
  if (!tmp) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  char *tgt = tmp + n;
  memcpy(tgt, target, tlen + 1);
  /* An unpredictable name beside the target (so the rename stays in one file
   * system) created exclusively (O_EXCL, O_NOFOLLOW): nothing planted in the
   * folder beforehand (a link, a FIFO) is written through or makes the save
   * fail; a name taken by chance is drawn again. A new file gets 0666 less the
   * umask, as open(O_CREAT) gives; a replacement starts private (0600) and
   * takes the old file's owner and mode before any byte is written. */
  int fd = -1;
  for (int attempt = 0; attempt < 16; attempt++) {
    snprintf(tmp, n, "%s.tmp%ld.%016llx", target, (long)getpid(), (unsigned long long)mn__random_u64());
    st = mn__file_open_regular(func, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, replaces ? 0600 : 0666, &fd, NULL);
    if (st == MN_OK || !file_exists_now(tmp)) break; /* EEXIST: draw another name */
  }
  if (st != MN_OK) {
    free(tmp);
    if (st == MN_ERR_OUT_OF_MEMORY) return st;
    char why[600];
    snprintf(why, sizeof why, "%s", mn__last_error_detail());
    return mn__error(st, func, "cannot create '%s': %s", path, why);
  }
  if (replaces && (st = keep_owner_and_mode(func, path, fd, &old)) != MN_OK) {
    close(fd);
    unlink(tmp);
    free(tmp);
    return st;
  }
  *f = (mn__atomic_file_t){fd, tmp, tgt, func, path};
  return MN_OK;
}

mn_status mn__file_atomic_end(mn__atomic_file_t *f, int write_err) {
  bool ok = write_err == 0;
  int err = write_err;
  /* on disk before it is renamed into place: a crash leaves the old file or
   * the whole new one */
  if (ok && fsync(f->fd) != 0) {
    ok = false;
    err = errno;
  }
  if (close(f->fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(f->tmp, f->target) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) unlink(f->tmp);
  free(f->tmp);
  f->tmp = f->target = NULL;
  f->fd = -1;
  if (!ok) return mn__error(MN_ERR_IO, f->func, "writing '%s' failed: %s", f->path, strerror(err));
  return MN_OK;
}

void mn__file_atomic_abort(mn__atomic_file_t *f) {
  close(f->fd);
  unlink(f->tmp);
  free(f->tmp);
  f->tmp = f->target = NULL;
  f->fd = -1;
}

mn_status mn__file_write_atomic(const char *func, const char *path, const void *data, size_t size) {
  mn__atomic_file_t f;
  mn_status st = mn__file_atomic_begin(func, path, &f);
  if (st != MN_OK) return st;
  const unsigned char *p = data;
  size_t done = 0;
  int err = 0;
  while (err == 0 && done < size) {
    ssize_t w = write(f.fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) err = w < 0 && errno ? errno : EIO;
    else done += (size_t)w;
  }
  return mn__file_atomic_end(&f, err);
}

ssize_t mn__file_read_small(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t got;
  do got = read(fd, buf, cap - 1);
  while (got < 0 && errno == EINTR);
  close(fd);
  buf[got > 0 ? got : 0] = '\0';
  return got;
}
