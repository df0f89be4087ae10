/* storage/serialize_util.h: internals the two file formats share: little-endian
 * integers for headers (into runtime/strbuf.h's growing buffer), the sink a
 * save streams into (a temporary file or one exact-size buffer), the source a
 * load reads from (a buffer, a file read through its descriptor, or a private
 * mapping of it that storages keep), and result building. Each object belongs
 * to the one call using it. */
#ifndef MNEMO_STORAGE_SERIALIZE_UTIL_H
#define MNEMO_STORAGE_SERIALIZE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/serialize.h"
#include "mnemo/storage.h"
#include "runtime/strbuf.h"

/* The little-endian uint64 at p. */
uint64_t mn__le64(const unsigned char *p);

/* ---- saving: the sink ----------------------------------------------------------
 * Bytes go out in file order, with no copy of the whole file anywhere: to a
 * file descriptor (small pieces gathered in a 64 KiB buffer, large ones
 * written straight from where they are, one writev with what is pending), or
 * into a buffer the caller sized exactly. A failed write is kept in `err`
 * (its errno; later puts do nothing) for mn__file_atomic_end to report. */
typedef struct mn__sink_s {
  const char *func;
  int fd;               /* file sinks; -1 for memory */
  unsigned char *mem;   /* memory sinks: the output */
  uint64_t pos;         /* bytes put so far */
  unsigned char *small; /* file sinks: pending small pieces */
  size_t nsmall;
  unsigned char *stage; /* device bytes on their way to the host (first use) */
  int err;              /* errno of the first failed write; 0: none */
  uint64_t kicked;      /* file sinks: bytes whose write-out to disk has been started */
} mn__sink_t;

/* Appends n bytes (mn__save_* open and close the sinks). */
void mn__sink_put(mn__sink_t *s, const void *p, size_t n);
void mn__sink_zeros(mn__sink_t *s, size_t n);
/* Puts bytes [off, off + n) of storage st, whatever its device (CPU storages
 * straight from their memory, device storages through a bounded staging
 * buffer, blocking), and folds them into *crc (CRC32, mn__crc32) when crc is
 * not NULL. Fails (device copy, staging memory) with the message set. */
mn_status mn__sink_put_storage(mn__sink_t *s, const mn_storage_t *st, size_t off, size_t n, uint32_t *crc);
/* Writes everything pending (file sinks), then n bytes at `at` (before pos):
 * a header whose checksums were only known at the end. */
void mn__sink_patch(mn__sink_t *s, uint64_t at, const void *p, size_t n);

/* Puts one format's file, planned beforehand (checks done, size known). */
typedef mn_status (*mn__emit_fn)(void *plan, mn__sink_t *sink);
/* mn_save / mn_safetensors_save: emit streams the file into a temporary file
 * renamed into place (runtime/fileio.h); nothing is left on failure. */
mn_status mn__save_file(const char *func, const char *path, mn__emit_fn emit, void *plan);
/* mn_save_buffer / mn_safetensors_save_buffer: emit fills one malloc'd
 * buffer of exactly `size` bytes, handed to *data. */
mn_status mn__save_buffer(const char *func, uint64_t size, mn__emit_fn emit, void *plan, void **data, size_t *out_size);

/* ---- loading: the source -------------------------------------------------------- */

typedef struct mn__map_s mn__map_t; /* a file's MAP_PRIVATE mapping, counted */

typedef struct mn__src_s {
  const char *func;
  int fd;                    /* files: open for reading; -1 for buffers */
  const unsigned char *data; /* every byte in memory (the buffer, or the mapping); NULL: read through fd */
  size_t size;               /* bytes of input (a file's size when it was opened) */
  mn__map_t *map;            /* the mapping, when storages may be made of it */
  bool verify;               /* check the checksums of storages' bytes */
} mn__src_t;

/* A format's reader over an opened source. */
typedef mn_status (*mn__load_fn)(const char *func, mn__src_t *src, mn_device_t dev, mn_named_views_t **out);
/* Checks dev, opens `path` (MN_LOAD_* flags) or the buffer, runs `load`, closes. */
mn_status mn__load_path(const char *func, const char *path, mn_device_t dev, unsigned flags, mn__load_fn load,
                        mn_named_views_t **out);
mn_status mn__load_buffer(const char *func, const void *data, size_t size, mn_device_t dev, mn__load_fn load,
                          mn_named_views_t **out);
/* The n bytes at `at` (which the caller checked lie within size): for a
 * buffer a pointer into it; for a file read into *owned (malloc'd; the caller
 * frees it), never from the mapping, so what a header parser validates cannot
 * change under it. MN_ERR_FORMAT "truncated" when the file got shorter. */
mn_status mn__src_bytes(mn__src_t *src, uint64_t at, size_t n, const unsigned char **p, unsigned char **owned);
/* Whether the n (<= 64) bytes at `at` are all zero (padding). */
mn_status mn__src_zeros(mn__src_t *src, uint64_t at, size_t n, bool *zero);
/* A storage on dev holding input bytes [at, at + n): the file's mapping
 * itself (no copy) when the source has one, dev is the CPU and the bytes'
 * address is a multiple of `align`; else a copy in dev's default allocator
 * (files are read straight into CPU storages, through a bounded staging
 * buffer into device ones). With `crc` set and verification on, the bytes'
 * CRC32 must equal *crc: else MN_ERR_FORMAT "<what> checksum mismatch: the
 * file is corrupt" and no storage. */
mn_status mn__src_storage(mn__src_t *src, mn_device_t dev, uint64_t at, size_t n, size_t align, const uint32_t *crc,
                          const char *what, mn_storage_t **out);

/* Refuses NULL, empty or duplicate names and NULL views. */
mn_status mn__check_names(const char *func, size_t count, const char *const *names, const mn_view_t *const *views);
/* An empty result with room for `count` views (zeroed). */
mn_status mn__named_views_new(const char *func, size_t count, mn_named_views_t **out);
/* Ends a load: on MN_OK hands res to *out, else frees it; returns st. */
mn_status mn__named_views_finish(mn_status st, mn_named_views_t *res, mn_named_views_t **out);

#endif /* MNEMO_STORAGE_SERIALIZE_UTIL_H */
