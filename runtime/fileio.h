/* runtime/fileio.h: the one way mnemo opens a file it was given by path:
 * never blocking in open() (a FIFO with no writer, a device), only regular
 * files accepted, a whole-file read into a heap buffer for the text loaders
 * (what they validate is what they use: no mapping that can shrink under
 * them), the atomic write (temporary file renamed into place), whole or
 * streamed, and the silent read of a small system file (sysfs probes). No
 * shared state, any thread. */
#ifndef MNEMO_RUNTIME_FILEIO_H
#define MNEMO_RUNTIME_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "mnemo/status.h"

/* Opens path with `flags` (O_RDONLY, O_RDWR | O_CREAT, ...; `mode` for
 * O_CREAT) plus O_NONBLOCK | O_CLOEXEC | O_NOCTTY, so open() never waits;
 * refuses anything but a regular file, then clears O_NONBLOCK. *fd the open
 * descriptor (the caller closes it), *size (when not NULL) its size now.
 * Errors, the message prefixed with func: MN_ERR_NOT_FOUND (no such file or
 * folder), MN_ERR_INVALID_ARGUMENT "'<path>' is not a regular file" (a
 * folder, FIFO, socket or device), MN_ERR_OUT_OF_MEMORY, else MN_ERR_IO. */
mn_status mn__file_open_regular(const char *func, const char *path, int flags, mode_t mode, int *fd, size_t *size);

/* Reads the regular file at path whole into *buf (malloc'd through
 * runtime/hostmem.h, never NULL on success, one spare byte after the data;
 * the caller frees it), *len bytes: the bytes read() returned up to the end
 * of file, so a file that changes meanwhile gives a short or longer buffer,
 * never a fault. Errors as mn__file_open_regular's, MN_ERR_IO when a read fails. */
mn_status mn__file_read_all(const char *func, const char *path, void **buf, size_t *len);

/* Reads up to cap - 1 bytes of a small system file (sysfs, procfs) into buf
 * (cap >= 1), NUL-terminated: the bytes read, or -1 when it cannot be opened
 * or read (buf is then ""). Makes no error text: a probe any thread may run. */
ssize_t mn__file_read_small(const char *path, char *buf, size_t cap);

/* Refuses an existing `path` that is not a regular file (a folder, FIFO,
 * device...) with MN_ERR_INVALID_ARGUMENT, before a writer renames a new
 * file over it; a missing path is fine. */
mn_status mn__file_check_destination(const char *func, const char *path);

/* Writes size bytes of data to `path` through "<target>.tmp<pid>.<random>"
 * written, fsync'd and renamed into place (a reader never sees half a file),
 * after mn__file_check_destination. The target is `path`, or, when `path` is
 * a symbolic link, the file its links end at (created when missing), so the
 * link stays a link. A file replaced keeps its permission bits (and its owner
 * and group where this process may set them); a new file gets 0666 less the
 * umask. The temporary name is unpredictable and created exclusively, without
 * following a link or blocking.
 * Errors: those of the checks and of creating the temporary file ("cannot
 * create '<path>': ..."), MN_ERR_IO "writing '<path>' failed" (the
 * temporary file removed). */
mn_status mn__file_write_atomic(const char *func, const char *path, const void *data, size_t size);

/* The same in steps, for writers that stream a file: begin creates the
 * temporary file (errors as above; *f untouched on failure), the caller
 * writes f->fd, then end closes it and renames it into place, or removes it:
 * when write_err (the errno of a failed write; 0: none) is set, or the close
 * or the rename fails, MN_ERR_IO "writing '<path>' failed: ...". abort
 * removes it and sets no error (the caller's own failure stands). */
typedef struct mn__atomic_file_s {
  int fd;
  char *tmp;    /* the temporary file (owns the block target lies in) */
  char *target; /* what the rename replaces: path, or where its links end */
  const char *func, *path;
} mn__atomic_file_t;
mn_status mn__file_atomic_begin(const char *func, const char *path, mn__atomic_file_t *f);
mn_status mn__file_atomic_end(mn__atomic_file_t *f, int write_err);
void mn__file_atomic_abort(mn__atomic_file_t *f);

#endif /* MNEMO_RUNTIME_FILEIO_H */
