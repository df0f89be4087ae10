/* runtime/sim_share.c: sharing SIM memory with other processes through memfds:
 * export moves a range's granules into a memfd in place, import maps such
 * pieces at a new range of the importing device, close unmaps them.
 * Thread-safe: each slot takes the device lock. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- sharing with other processes (memfd) ---------------------------------
 * Export moves the granules a block covers into a memfd of the range's size,
 * in place (contents copied, then the memfd mapped MAP_SHARED over the same
 * addresses); import maps such pieces at a new range of the importing
 * device, flagged `import` (not counted in its memory, not freeable). */
#define SIM_SHARE_NAME "mnemo-sim-share"
#define SIM_SHARE_LINK "/memfd:" SIM_SHARE_NAME " (deleted)"

static mn_status share_memfd(sim_device *d, int index, sim_range *r) {
  (void)d;
  if (r->has_share) return MN_OK;
  size_t ng = r->size / mn__sim_cfg.granularity;
  uint8_t *shared = mn__calloc(ng, 1); /* a raw range is moved whole, a reservation granule by granule */
  if (!shared) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  int fd = memfd_create(SIM_SHARE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)r->size) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    free(shared);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: a memfd of %zu bytes for sharing: %s", index,
                     r->size, strerror(e));
  }
  r->share_fd = fd;
  r->shared = shared;
  r->has_share = true;
  return MN_OK;
}

/* Moves [off, off + n) of r (mapped, granule-aligned) into r's memfd. */
static mn_status share_move(int index, sim_range *r, size_t off, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t w = pwrite(r->share_fd, (const char *)(r->start + off) + done, n - done, (off_t)(off + done));
    if (w <= 0)
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: copying %zu bytes into the memfd: %s", index, n,
                       w < 0 ? strerror(errno) : "short write");
    done += (size_t)w;
  }
  if (mmap((void *)(r->start + off), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->share_fd, (off_t)off) ==
      MAP_FAILED)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mapping the memfd: %s", index, strerror(errno));
  return MN_OK;
}

mn_status mn__sim_share_export(int index, void *ptr, size_t nbytes, mn__share_mem_t *out) {
  SIM_LOCKED(index, d);
  sim_range *r = mn__sim_range_find(d, (uintptr_t)ptr);
  if (nbytes == 0 || !mn__sim_range_is_mapped(d, ptr, nbytes) || r->pool || r->import)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: [%p, +%zu) is not mapped memory of a raw allocation or reservation",
                                   index, ptr, nbytes));
  size_t g = mn__sim_cfg.granularity, off = (uintptr_t)ptr - r->start;
  size_t a0 = r->mapped ? off / g * g : 0, a1 = r->mapped ? (off + nbytes + g - 1) / g * g : r->size;
  mn_status st = share_memfd(d, index, r);
  for (size_t k = a0 / g; st == MN_OK && k < a1 / g; k++) {
    if (r->shared[k]) continue;
    st = share_move(index, r, k * g, g);
    if (st == MN_OK) r->shared[k] = 1;
  }
  int fd = st == MN_OK ? fcntl(r->share_fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (st == MN_OK && fd < 0)
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: dup of the memfd: %s", index, strerror(errno));
  /* a failure leaves what was moved in the memfd: the same bytes, still ours */
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  memset(out, 0, sizeof *out);
  out->npieces = 1;
  out->fds[0] = fd;
  out->piece_offset[0] = a0;
  out->piece_length[0] = a1 - a0;
  out->offset = off - a0;
  for (unsigned i = 1; i < MN__SHARE_MAX_PIECES; i++) out->fds[i] = -1;
  return mn__sim_unlock_ret(d, MN_OK);
}

/* Refuses fd unless it is SIM's shared memory: a sealed memfd of that name
 * holding [off, off + len). */
static mn_status share_check_fd(int index, int fd, uint64_t off, uint64_t len) {
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn__sim_share_import", "sim:%d: descriptor %d is not SIM shared memory (not a memfd)", index, fd);
  char self[40], link[256];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(self, link, sizeof link - 1);
  link[n < 0 ? 0 : n] = '\0';
  if (strcmp(link, SIM_SHARE_LINK) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn__sim_share_import",
                     "sim:%d: descriptor %d is '%.100s', not SIM shared memory (a sealed memfd " SIM_SHARE_NAME ")",
                     index, fd, link);
  /* A file the sender can still shrink would kill us with SIGBUS when it
   * does (mapped below); one it can grow or reseal is not the one exported. */
  int seals = fcntl(fd, F_GET_SEALS), need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (seals < 0 || (seals & need) != need)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn__sim_share_import",
                     "sim:%d: descriptor %d is not sealed against shrinking, growing and resealing (seals 0x%x): "
                     "refused, its sender could truncate it under the mapping",
                     index, fd, seals < 0 ? 0 : (unsigned)seals);
  long page = sysconf(_SC_PAGESIZE);
  if (len == 0 || off % (uint64_t)page || len % (uint64_t)page || off > (uint64_t)sb.st_size ||
      len > (uint64_t)sb.st_size - off)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn__sim_share_import",
                     "sim:%d: piece [%llu, +%llu) is not page-aligned inside the %lld-byte shared memory", index,
                     (unsigned long long)off, (unsigned long long)len, (long long)sb.st_size);
  return MN_OK;
}

mn_status mn__sim_share_import(int index, const mn__share_mem_t *in, void **base, size_t *size) {
  if (in->npieces == 0 || in->npieces > MN__SHARE_MAX_PIECES)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %u memory pieces (1..%d)", index, in->npieces,
                     MN__SHARE_MAX_PIECES);
  uint64_t total = 0;
  for (unsigned i = 0; i < in->npieces; i++) {
    mn_status st = share_check_fd(index, in->fds[i], in->piece_offset[i], in->piece_length[i]);
    if (st != MN_OK) return st;
    if (in->piece_length[i] > ((uint64_t)1 << 44) - total)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: the pieces are too large", index);
    total += in->piece_length[i];
  }
  SIM_LOCKED(index, d);
  size_t rounded = mn__sim_round_gran((size_t)total);
  sim_range *r = NULL;
  mn_status st = mn__sim_range_insert(d, index, rounded, false, &r);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  r->import = true;
  size_t pos = 0;
  for (unsigned i = 0; i < in->npieces && st == MN_OK; i++) {
    if (mmap((void *)(r->start + pos), in->piece_length[i], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             in->fds[i], (off_t)in->piece_offset[i]) == MAP_FAILED)
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: mapping piece %u: %s", index, i, strerror(errno));
    pos += in->piece_length[i];
  }
  if (st != MN_OK) {
    mn__sim_share_unmap((void *)r->start, r->size);
    mn__sim_range_remove(d, r);
    return mn__sim_unlock_ret(d, st);
  }
  d->stats.maps++;
  *base = (void *)r->start;
  *size = (size_t)total;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_share_close(int index, void *base) {
  SIM_LOCKED(index, d);
  sim_range *r = mn__sim_range_find(d, (uintptr_t)base);
  if (!r || r->start != (uintptr_t)base || !r->import)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %p is not an imported mapping",
                                   index, base));
  mn__sim_device_sync(d); /* as an unmap: queued work may touch it */
  mn__sim_share_unmap(base, r->size);
  mn__sim_range_remove(d, r);
  d->stats.unmaps++;
  return mn__sim_unlock_ret(d, MN_OK);
}
