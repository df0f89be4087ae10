/* storage/serialize_io.c: the byte paths of save and load
 * (storage/serialize_util.h): the sink a save streams into (a temporary
 * file written with writev, short writes resumed, or one exact-size buffer)
 * and the source a load reads from (a buffer, a file read with pread, or a
 * counted MAP_PRIVATE mapping of the file that CPU storages keep as their
 * bytes). A file sink has the disk start writing as it goes
 * (sync_file_range). Sinks and sources belong to one call; a mapping's count
 * is atomic, so its storages may be released on any threads. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kernels/pool.h"
#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"
#include "runtime/meta.h"
#include "storage/crc32.h"
#include "storage/serialize_util.h"

#define SMALL_BYTES ((size_t)64 << 10)     /* a file sink gathers pieces up to this size */
#define CHUNK_BYTES ((size_t)1 << 20)      /* checksummed, then written or read, while in cache */
#define STAGE_BYTES ((size_t)4 << 20)      /* device bytes staged on the host at a time */
#define WRITEBACK_BYTES ((size_t)8 << 20) /* a file sink starts the disk writing every this many bytes */
#define PART_BYTES ((size_t)4 << 20)      /* a copying read's share for one thread at a time */

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* ---- sink ------------------------------------------------------------------------ */

/* A sink writing fd from its current offset (MN_ERR_OUT_OF_MEMORY when its
 * buffer cannot be had), or filling mem. sink_close frees what they hold
 * (not fd, not mem). */
static mn_status sink_open_file(mn__sink_t *s, const char *func, int fd) {
  *s = (mn__sink_t){.func = func, .fd = fd};
  s->small = mn__malloc(SMALL_BYTES);
  if (!s->small) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  return MN_OK;
}

static void sink_open_memory(mn__sink_t *s, const char *func, unsigned char *mem) {
  *s = (mn__sink_t){.func = func, .fd = -1, .mem = mem};
}

static void sink_close(mn__sink_t *s) {
  free(s->small);
  free(s->stage);
  s->small = s->stage = NULL;
}

/* Writes the iovecs whole: resumes after short writes and EINTR; records the
 * errno of a failure (EIO for a write that makes no progress). */
static void write_all(mn__sink_t *s, struct iovec *iov, int cnt) {
  while (cnt > 0 && s->err == 0) {
    ssize_t w = writev(s->fd, iov, cnt);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s->err = w < 0 && errno ? errno : EIO;
      return;
    }
    size_t done = (size_t)w;
    while (cnt > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      iov++;
      cnt--;
    }
    if (cnt > 0) {
      iov->iov_base = (char *)iov->iov_base + done;
      iov->iov_len -= done;
    }
  }
}

/* Has the disk start writing what is written so far and not yet started
 * (Linux: sync_file_range), so the fsync that ends a save finds most bytes
 * already on their way: the write-out overlaps the rest of the save. Only
 * a start: nothing is waited for, and the fsync stays the guarantee. */
static void start_writeback(mn__sink_t *s, uint64_t written) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
  if (s->err == 0 && written - s->kicked >= WRITEBACK_BYTES) {
    (void)sync_file_range(s->fd, (off_t)s->kicked, (off_t)(written - s->kicked), SYNC_FILE_RANGE_WRITE);
    s->kicked = written;
  }
#else
  (void)s;
  (void)written;
#endif
}

/* Writes everything pending. */
static void sink_flush(mn__sink_t *s) {
  if (s->fd < 0 || s->nsmall == 0) return;
  struct iovec iov = {s->small, s->nsmall};
  write_all(s, &iov, 1);
  s->nsmall = 0;
}

void mn__sink_put(mn__sink_t *s, const void *p, size_t n) {
  if (n == 0) return;
  if (s->fd < 0) {
    memcpy(s->mem + s->pos, p, n);
  } else if (n <= SMALL_BYTES - s->nsmall) {
    memcpy(s->small + s->nsmall, p, n);
    s->nsmall += n;
  } else { /* what is pending and this piece in one call */
    struct iovec iov[2] = {{s->small, s->nsmall}, {(void *)p, n}};
    write_all(s, s->nsmall ? iov : iov + 1, s->nsmall ? 2 : 1);
    s->nsmall = 0;
    start_writeback(s, s->pos + n);
  }
  s->pos += n;
}

void mn__sink_zeros(mn__sink_t *s, size_t n) {
  static const unsigned char zeros[256];
  while (n) {
    size_t k = min_size(n, sizeof zeros);
    mn__sink_put(s, zeros, k);
    n -= k;
  }
}

void mn__sink_patch(mn__sink_t *s, uint64_t at, const void *p, size_t n) {
  if (s->fd < 0) {
    memcpy(s->mem + at, p, n);
    return;
  }
  sink_flush(s);
  const unsigned char *b = p;
  while (n && s->err == 0) {
    ssize_t w = pwrite(s->fd, b, n, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s->err = w < 0 && errno ? errno : EIO;
      return;
    }
    b += w;
    at += (uint64_t)w;
    n -= (size_t)w;
  }
}

mn_status mn__sink_put_storage(mn__sink_t *s, const mn_storage_t *st, size_t off, size_t n, uint32_t *crc) {
  mn_device_t dev = mn_storage_device(st);
  const unsigned char *src = (const unsigned char *)mn_storage_data(st) + off;
  if (n == 0) return MN_OK;
  if (dev.type == MN_DEVICE_CPU) {
    /* each chunk checksummed, then written while it is still in cache */
    for (size_t o = 0; o < n && s->err == 0; o += CHUNK_BYTES) {
      size_t k = min_size(CHUNK_BYTES, n - o);
      if (crc) *crc = mn__crc32(*crc, src + o, k);
      mn__sink_put(s, src + o, k);
    }
    return MN_OK;
  }
  if (s->fd < 0) { /* memory: straight into place */
    mn_status r = mn_copy_bytes(mn_device_cpu(), s->mem + s->pos, dev, src, n, NULL, 0);
    if (r != MN_OK) return mn__error_wrap(r, s->func);
    if (crc) *crc = mn__crc32(*crc, s->mem + s->pos, n);
    s->pos += n;
    return MN_OK;
  }
  if (!s->stage && !(s->stage = mn__malloc(STAGE_BYTES)))
    return mn__error(MN_ERR_OUT_OF_MEMORY, s->func, "out of host memory (a %zu-byte staging buffer)", STAGE_BYTES);
  for (size_t o = 0; o < n && s->err == 0; o += STAGE_BYTES) {
    size_t k = min_size(STAGE_BYTES, n - o);
    mn_status r = mn_copy_bytes(mn_device_cpu(), s->stage, dev, src + o, k, NULL, 0);
    if (r != MN_OK) return mn__error_wrap(r, s->func);
    if (crc) *crc = mn__crc32(*crc, s->stage, k);
    mn__sink_put(s, s->stage, k);
  }
  return MN_OK;
}

mn_status mn__save_file(const char *func, const char *path, mn__emit_fn emit, void *plan) {
  mn__atomic_file_t f;
  mn_status st = mn__file_atomic_begin(func, path, &f);
  if (st != MN_OK) return st;
  mn__sink_t s;
  st = sink_open_file(&s, func, f.fd);
  if (st == MN_OK) st = emit(plan, &s);
  if (st == MN_OK) sink_flush(&s);
  sink_close(&s);
  if (st != MN_OK) {
    mn__file_atomic_abort(&f);
    return st;
  }
  return mn__file_atomic_end(&f, s.err);
}

mn_status mn__save_buffer(const char *func, uint64_t size, mn__emit_fn emit, void *plan, void **data, size_t *out_size) {
  if (size > SIZE_MAX) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "a %llu-byte file does not fit this host's memory",
                                        (unsigned long long)size);
  unsigned char *mem = mn__malloc(size ? (size_t)size : 1);
  if (!mem) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory (%llu bytes)", (unsigned long long)size);
  mn__sink_t s;
  sink_open_memory(&s, func, mem);
  mn_status st = emit(plan, &s);
  sink_close(&s);
  if (st != MN_OK) {
    free(mem);
    return st;
  }
  *data = mem;
  *out_size = (size_t)size;
  return MN_OK;
}

/* ---- source ------------------------------------------------------------------------ */

struct mn__map_s {
  atomic_long refs; /* the source's and one per storage over it */
  void *base;
  size_t len;
};

static void map_drop(mn__map_t *m) {
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  munmap(m->base, m->len);
  free(m);
}

/* The deleter of a storage over the mapping (mn_storage_from_buffer). */
static void map_storage_deleter(void *ctx, void *data) {
  (void)data;
  map_drop(ctx);
}

static mn_status src_truncated(mn__src_t *src, uint64_t at, size_t n, size_t got) {
  return mn__error(MN_ERR_FORMAT, src->func,
                   "truncated: the file ends at byte %llu, inside the %zu bytes at %llu it had when opened "
                   "(it changed during the load)",
                   (unsigned long long)(at + got), n, (unsigned long long)at);
}

/* pread of n bytes of fd at `at` into dst, resumed after short reads and
 * EINTR: 0 with *got = n, 0 with *got < n where the file ends, or the errno
 * of a failed read (*got: what was read before it). Makes no error text: any
 * thread may call it. */
static int pread_full(int fd, uint64_t at, size_t n, void *dst, size_t *got) {
  for (*got = 0; *got < n;) {
    ssize_t r = pread(fd, (char *)dst + *got, n - *got, (off_t)(at + *got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return 0;
    *got += (size_t)r;
  }
  return 0;
}

/* pread_full as a status: MN_ERR_IO, or MN_ERR_FORMAT "truncated". */
static mn_status src_pread(mn__src_t *src, uint64_t at, size_t n, void *dst) {
  size_t got = 0;
  int err = pread_full(src->fd, at, n, dst, &got);
  if (err) return mn__error(MN_ERR_IO, src->func, "cannot read the file: %s", strerror(err));
  return got < n ? src_truncated(src, at, n, got) : MN_OK;
}

/* A source over the regular file at path for a load onto dev with MN_LOAD_*
 * flags (checked): on the CPU, unless MN_LOAD_COPY, a private mapping of the
 * whole file (storages may keep it); else reads. Errors as
 * mn__file_open_regular's (MN_ERR_NOT_FOUND, ...), or MN_ERR_INVALID_ARGUMENT
 * for bad flags. src_close undoes it (storages keep the mapping alive). */
static mn_status src_open_file(mn__src_t *src, const char *func, const char *path, mn_device_t dev, unsigned flags) {
  if (flags & ~(unsigned)MN_LOAD_FLAGS_ALL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "unknown flags 0x%x", flags & ~(unsigned)MN_LOAD_FLAGS_ALL);
  if ((flags & MN_LOAD_MAP) && (flags & MN_LOAD_COPY))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "MN_LOAD_MAP and MN_LOAD_COPY exclude each other");
  int fd = -1;
  size_t size = 0;
  mn_status st = mn__file_open_regular(func, path, O_RDONLY, 0, &fd, &size);
  if (st != MN_OK) return st;
  *src = (mn__src_t){.func = func, .fd = fd, .size = size, .verify = !(flags & MN_LOAD_NO_VERIFY)};
  if (dev.type != MN_DEVICE_CPU || (flags & MN_LOAD_COPY) || size == 0) return MN_OK;
  /* Private and writable: writes to the storages copy the page (they never
   * reach the file). A file system that cannot map: read it instead. */
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return MN_OK;
  mn__map_t *m = mn__malloc(sizeof *m);
  if (!m) {
    munmap(p, size);
    close(fd);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  atomic_init(&m->refs, 1);
  m->base = p;
  m->len = size;
  src->map = m;
  src->data = p;
  return MN_OK;
}

static void src_open_buffer(mn__src_t *src, const char *func, const void *data, size_t size) {
  *src = (mn__src_t){.func = func, .fd = -1, .data = data, .size = size, .verify = true};
}

static void src_close(mn__src_t *src) {
  if (src->fd >= 0) close(src->fd);
  if (src->map) map_drop(src->map);
  src->fd = -1;
  src->map = NULL;
  src->data = NULL;
}

mn_status mn__src_bytes(mn__src_t *src, uint64_t at, size_t n, const unsigned char **p, unsigned char **owned) {
  *owned = NULL;
  if (src->fd < 0) {
    *p = src->data + at;
    return MN_OK;
  }
  unsigned char *b = mn__malloc(n ? n : 1);
  if (!b) return mn__error(MN_ERR_OUT_OF_MEMORY, src->func, "out of host memory (%zu bytes)", n);
  mn_status st = src_pread(src, at, n, b);
  if (st != MN_OK) {
    free(b);
    return st;
  }
  *p = b;
  *owned = b;
  return MN_OK;
}

mn_status mn__src_zeros(mn__src_t *src, uint64_t at, size_t n, bool *zero) {
  unsigned char buf[64];
  const unsigned char *p = buf;
  if (n > sizeof buf) return mn__error(MN_ERR_INVALID_ARGUMENT, src->func, "internal: %zu padding bytes", n);
  if (src->data) p = src->data + at; /* compared with zero only: the mapping will do */
  else {
    mn_status st = src_pread(src, at, n, buf);
    if (st != MN_OK) return st;
  }
  *zero = true;
  for (size_t i = 0; i < n; i++) *zero &= p[i] == 0;
  return MN_OK;
}

/* ---- host bytes in parts: copying reads and checksums ----------------------------
 * Read (or, for bytes already in memory, only checksummed) in parts of
 * PART_BYTES, each part chunk by chunk, a chunk checksummed right after its
 * read while in cache. Several parts are shared by the kernels' pool and the
 * caller: the kernel's copy out of the page cache, the first touch of new
 * pages and the CRC run on every core; the parts' CRCs are combined in file
 * order. A part reports errno or a short read; the caller makes the error
 * (error text is per thread). */

typedef struct host_part {
  uint32_t crc;
  int err;    /* errno of a failed pread, 0 */
  size_t got; /* bytes read of the part: < its length after an error or a short read */
} host_part_t;

typedef struct host_job {
  int fd; /* pread into dst from the file at `at`; -1: bytes are in memory */
  uint64_t at;
  unsigned char *dst;         /* NULL when only checksumming */
  const unsigned char *bytes; /* what is checksummed: dst, or the bytes in memory */
  size_t n;
  bool crc;
  host_part_t *parts;
} host_job_t;

static void host_part(void *ctx, int64_t t) {
  const host_job_t *c = ctx;
  host_part_t *p = &c->parts[t];
  const size_t o = (size_t)t * PART_BYTES, end = min_size(o + PART_BYTES, c->n);
  for (size_t k = o; k < end;) {
    size_t want = min_size(CHUNK_BYTES, end - k), got = want;
    if (c->dst && ((p->err = pread_full(c->fd, c->at + k, want, c->dst + k, &got)) != 0 || got < want)) {
      p->got = k + got - o;
      return;
    }
    if (c->crc) p->crc = mn__crc32(p->crc, c->bytes + k, want);
    k += want;
  }
  p->got = end - o;
}

/* Runs job c (n, dst or bytes, fd, at set) over its parts, folding the bytes'
 * CRC into *crc when crc is not NULL. */
static mn_status host_parts(mn__src_t *src, host_job_t *c, uint32_t *crc) {
  const size_t n = c->n, nparts = (n + PART_BYTES - 1) / PART_BYTES;
  host_part_t one = {0}, *parts = nparts <= 1 ? &one : mn__calloc(nparts, sizeof *parts);
  if (!parts) return mn__error(MN_ERR_OUT_OF_MEMORY, src->func, "out of host memory");
  c->crc = crc != NULL;
  c->parts = parts;
  mn__pool_run(host_part, c, (int64_t)nparts); /* one part: on this thread */
  mn_status st = MN_OK;
  uint32_t whole = 0; /* x^(8 PART_BYTES) mod P, made when needed */
  for (size_t t = 0; t < nparts && st == MN_OK; t++) {
    size_t len = min_size(PART_BYTES, n - t * PART_BYTES);
    if (parts[t].err) {
      st = mn__error(MN_ERR_IO, src->func, "cannot read the file: %s", strerror(parts[t].err));
    } else if (parts[t].got < len) {
      st = src_truncated(src, c->at + t * PART_BYTES, len, parts[t].got);
    } else if (crc && *crc == 0) { /* nothing before it (or CRC 0): the part's CRC is the running one */
      *crc = parts[t].crc;
    } else if (crc) {
      if (len == PART_BYTES && !whole) whole = mn__crc32_shift(PART_BYTES);
      *crc = mn__crc32_combine(*crc, parts[t].crc, len == PART_BYTES ? whole : mn__crc32_shift(len));
    }
  }
  if (parts != &one) free(parts);
  return st;
}

/* Reads n bytes at `at` into the storage's memory at dst (host memory when
 * dev is the CPU, else through a staging buffer), folding them into *crc
 * when crc is not NULL. */
static mn_status src_read_into(mn__src_t *src, mn_device_t dev, uint64_t at, size_t n, unsigned char *dst,
                               uint32_t *crc) {
  if (dev.type == MN_DEVICE_CPU)
    return host_parts(src, &(host_job_t){.fd = src->fd, .at = at, .dst = dst, .bytes = dst, .n = n}, crc);
  size_t cap = min_size(STAGE_BYTES, n);
  unsigned char *stage = mn__malloc(cap);
  if (!stage) return mn__error(MN_ERR_OUT_OF_MEMORY, src->func, "out of host memory (a %zu-byte staging buffer)", cap);
  mn_status st = MN_OK;
  for (size_t o = 0; o < n && st == MN_OK; o += cap) {
    size_t k = min_size(cap, n - o);
    st = src_pread(src, at + o, k, stage);
    if (st != MN_OK) break;
    if (crc) *crc = mn__crc32(*crc, stage, k);
    st = mn_copy_bytes(dev, dst + o, mn_device_cpu(), stage, k, NULL, 0);
    if (st != MN_OK) st = mn__error_wrap(st, src->func);
  }
  free(stage);
  return st;
}

mn_status mn__src_storage(mn__src_t *src, mn_device_t dev, uint64_t at, size_t n, size_t align, const uint32_t *crc,
                          const char *what, mn_storage_t **out) {
  bool check = crc && src->verify;
  mn_status st = MN_OK;
  if (mn__is_meta(dev)) { /* load to meta: sizes only, no byte read (nor checked) */
    st = mn_storage_create(dev, n, NULL, NULL, out);
    return st == MN_OK ? MN_OK : mn__error_wrap(st, src->func);
  }
  if (src->data || n == 0) {
    const unsigned char *p = n ? src->data + at : NULL;
    uint32_t got = 0;
    if (check && (st = host_parts(src, &(host_job_t){.fd = -1, .bytes = p, .n = n}, &got)) != MN_OK) return st;
    if (check && got != *crc)
      return mn__error(MN_ERR_FORMAT, src->func, "%s checksum mismatch: the file is corrupt", what);
    if (src->map && n && dev.type == MN_DEVICE_CPU && (uintptr_t)p % (align ? align : 1) == 0) {
      atomic_fetch_add_explicit(&src->map->refs, 1, memory_order_relaxed);
      st = mn_storage_from_buffer(dev, (void *)p, n, map_storage_deleter, src->map, out);
      if (st != MN_OK) map_drop(src->map); /* the deleter does not run on failure */
    } else {
      st = mn_storage_from_buffer_copy(dev, p, n, out);
    }
    return st == MN_OK ? MN_OK : mn__error_wrap(st, src->func);
  }
  mn_storage_t *s = NULL;
  st = mn_storage_create(dev, n, NULL, NULL, &s);
  if (st != MN_OK) return mn__error_wrap(st, src->func);
  uint32_t got = 0;
  st = src_read_into(src, dev, at, n, mn_storage_data(s), check ? &got : NULL);
  if (st == MN_OK && check && got != *crc)
    st = mn__error(MN_ERR_FORMAT, src->func, "%s checksum mismatch: the file is corrupt", what);
  if (st != MN_OK) {
    mn_storage_release(s);
    return st;
  }
  *out = s;
  return MN_OK;
}

mn_status mn__load_path(const char *func, const char *path, mn_device_t dev, unsigned flags, mn__load_fn load,
                        mn_named_views_t **out) {
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, func);
  mn__src_t src;
  st = src_open_file(&src, func, path, dev, flags);
  if (st != MN_OK) return st;
  st = load(func, &src, dev, out);
  src_close(&src);
  return st;
}

mn_status mn__load_buffer(const char *func, const void *data, size_t size, mn_device_t dev, mn__load_fn load,
                          mn_named_views_t **out) {
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, func);
  mn__src_t src;
  src_open_buffer(&src, func, data, size);
  return load(func, &src, dev, out);
}
