/* runtime/sim_memory.c: the SIM device's memory: its address ranges (raw
 * allocations, VMM reservations, pool chunks) in one first-fit tree over a
 * lazily backed host reservation, and the backend slots that allocate, free,
 * reserve, map, unmap and set access. Thread-safe: each slot takes the device
 * lock; the range helpers run with it held. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- address ranges ----------------------------------------------------- */

/* Index of the last of n records (each `stride` bytes, sorted by a leading
 * `uintptr_t start` field) whose start <= p, or -1. */
long mn__sim_starts_find(const void *records, size_t n, size_t stride, uintptr_t p) {
  long lo = 0, hi = (long)n - 1, found = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    uintptr_t start;
    memcpy(&start, (const char *)records + (size_t)mid * stride, sizeof start);
    if (start <= p) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

int mn__sim_range_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  uintptr_t x = ((const sim_range *)a)->start, y = ((const sim_range *)b)->start;
  return x < y ? -1 : x > y;
}

static int range_key(const void *key, const mn__avl_node *n) {
  uintptr_t x = *(const uintptr_t *)key, y = ((const sim_range *)n)->start;
  return x < y ? -1 : x > y;
}

size_t mn__sim_range_max_gap(const mn__avl_node *n) { return n ? ((const sim_range *)n)->max_gap : 0; }

bool mn__sim_range_update(mn__avl_node *n) {
  sim_range *r = (sim_range *)n;
  size_t m = r->gap, l = mn__sim_range_max_gap(n->left), g = mn__sim_range_max_gap(n->right);
  if (l > m) m = l;
  if (g > m) m = g;
  bool changed = m != r->max_gap;
  r->max_gap = m;
  return changed;
}

sim_range *mn__sim_range_next(const sim_range *r) { return (sim_range *)mn__avl_next(&r->node); }

/* The range with the last start <= p, or NULL. */
sim_range *mn__sim_range_find(const sim_device *d, uintptr_t p) {
  return (sim_range *)mn__avl_floor(&d->ranges, &p, range_key);
}

/* The lowest range whose gap holds `size` bytes, or NULL (then only the
 * space after the last range may). */
static sim_range *gap_first_fit(const sim_device *d, size_t size) {
  mn__avl_node *n = d->ranges.root;
  if (mn__sim_range_max_gap(n) < size) return NULL;
  for (;;) {
    if (mn__sim_range_max_gap(n->left) >= size) n = n->left;
    else if (((sim_range *)n)->gap >= size) return (sim_range *)n;
    else n = n->right; /* its max_gap holds size: n's subtree does and the rest does not */
  }
}

/* First fit: the lowest free gap of `size` bytes in the address space, as a
 * scan of the ranges in address order would find it; inserts the range. */
mn_status mn__sim_range_insert(sim_device *d, int index, size_t size, bool reserved, sim_range **out) {
  uintptr_t base = (uintptr_t)d->base, end = base + d->va_size, start;
  sim_range *succ = gap_first_fit(d, size);
  if (succ) {
    start = succ->start - succ->gap;
  } else {
    const sim_range *last = (const sim_range *)mn__avl_last(&d->ranges);
    start = last ? last->start + last->size : base;
    if (end - start < size)
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: address space exhausted (%zu bytes asked)",
                       index, size);
  }
  sim_range *r = mn__calloc(1, sizeof *r);
  if (r && reserved) {
    r->mapped = mn__calloc(size / mn__sim_cfg.granularity, 1);
    r->access = r->mapped ? mn__calloc(size / mn__sim_cfg.granularity, sizeof *r->access) : NULL;
  }
  if (!r || (reserved && !r->access)) {
    if (r) free(r->mapped);
    free(r);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  r->start = start;
  r->size = size;
  r->gap = 0; /* it begins its gap */
  if (succ) {
    succ->gap -= size;
    mn__avl_update_path(&d->ranges, &succ->node);
  }
  mn__avl_insert(&d->ranges, &r->node);
  *out = r;
  return MN_OK;
}

/* Takes r out; its bytes and gap join its successor's gap. */
void mn__sim_range_remove(sim_device *d, sim_range *r) {
  sim_range *succ = mn__sim_range_next(r);
  if (succ) {
    succ->gap += r->gap + r->size;
    mn__avl_update_path(&d->ranges, &succ->node);
  }
  mn__avl_remove(&d->ranges, &r->node);
  if (r->has_share) close(r->share_fd);
  free(r->shared);
  free(r->mapped);
  free(r->access);
  free(r);
}

/* Whether [p, p+n) is device memory that is mapped right now. pre: lock held. */
bool mn__sim_range_is_mapped(const sim_device *d, const void *ptr, size_t n) {
  uintptr_t p = (uintptr_t)ptr;
  const sim_range *r = mn__sim_range_find(d, p);
  if (!r) return false;
  if (n > r->size || p - r->start > r->size - n) return false;
  if (!r->mapped) return true;
  size_t g = mn__sim_cfg.granularity;
  for (size_t k = (p - r->start) / g; k <= (p - r->start + n - 1) / g; k++)
    if (!r->mapped[k]) return false;
  return true;
}

void mn__sim_phys_add(sim_device *d, size_t n) {
  d->stats.mapped_bytes += n;
  if (d->stats.mapped_bytes > d->stats.peak_mapped_bytes) d->stats.peak_mapped_bytes = d->stats.mapped_bytes;
}

static mn_status check_capacity(sim_device *d, int index, const char *func, size_t asked, size_t rounded) {
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_RAW_ALLOC))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "sim:%d: injected fault: raw allocation of %zu bytes failed",
                     index, asked);
  if (rounded > mn__sim_cfg.capacity - d->stats.mapped_bytes)
    return mn__error(MN_ERR_OUT_OF_MEMORY, func,
                     "sim:%d out of memory: asked %zu bytes (%zu rounded), %zu of %zu in use", index, asked,
                     rounded, d->stats.mapped_bytes, mn__sim_cfg.capacity);
  return MN_OK;
}

size_t mn__sim_round_gran(size_t n) {
  size_t g = mn__sim_cfg.granularity;
  return n > SIZE_MAX - g ? 0 : (n + g - 1) / g * g;
}

/* ---- backend slots: raw memory, VMM reservations and mappings ------------- */

mn_status mn__sim_raw_alloc(int index, size_t nbytes, void **out) {
  SIM_LOCKED(index, d);
  size_t rounded = mn__sim_round_gran(nbytes);
  mn_status st = check_capacity(d, index, __func__, nbytes, rounded ? rounded : SIZE_MAX);
  sim_range *r = NULL;
  if (st == MN_OK) st = mn__sim_range_insert(d, index, rounded, false, &r);
  if (st == MN_OK && mprotect((void *)r->start, rounded, PROT_READ | PROT_WRITE) != 0) {
    mn__sim_range_remove(d, r);
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  }
  if (st == MN_OK) {
    mn__sim_phys_add(d, rounded);
    d->stats.raw_allocs++;
    *out = (void *)r->start;
  }
  return mn__sim_unlock_ret(d, st);
}

/* Gives pages back to the OS and makes them inaccessible again. */
void mn__sim_pages_release(void *p, size_t n) {
  madvise(p, n, MADV_DONTNEED);
  mprotect(p, n, PROT_NONE);
}

/* Puts private, inaccessible address space back over shared pages (their
 * memfd keeps them for other processes that map it). */
void mn__sim_share_unmap(void *p, size_t n) {
  if (mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    mn__sim_pages_release(p, n); /* cannot happen for a range we own; at least make it inaccessible */
}

mn_status mn__sim_raw_free(int index, void *ptr) {
  SIM_LOCKED(index, d);
  uintptr_t p = (uintptr_t)ptr;
  sim_range *r = mn__sim_range_find(d, p);
  for (int pass = 0; pass < 2; pass++) {
    if (!r || r->start != p || r->mapped || r->pool || r->import)
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                     "sim:%d: %p is not a live raw allocation", index, ptr));
    if (pass == 1) break;
    if (d->captures) return mn__sim_unlock_ret(d, mn__sim_capture_refuse_device(d, index, __func__, "a raw free"));
    /* As cudaFree, freeing synchronizes the device first; then looks again
     * (a host function it ran may have freed the range). */
    mn__sim_device_sync(d);
    r = mn__sim_range_find(d, p);
  }
  size_t size = r->size;
  if (r->has_share) mn__sim_share_unmap(ptr, size); /* importers keep their own mapping of the memfd */
  else mn__sim_pages_release(ptr, size);
  mn__sim_range_remove(d, r);
  d->stats.mapped_bytes -= size;
  d->stats.raw_frees++;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_va_reserve(int index, size_t nbytes, void **base) {
  SIM_LOCKED(index, d);
  size_t rounded = mn__sim_round_gran(nbytes);
  sim_range *r = NULL;
  mn_status st = rounded ? mn__sim_range_insert(d, index, rounded, true, &r)
                         : mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: %zu bytes is too large", index, nbytes);
  if (st == MN_OK) {
    d->stats.live_reservations++;
    *base = (void *)r->start;
  }
  return mn__sim_unlock_ret(d, st);
}

/* Finds the reservation holding [addr, addr+n), granule-aligned. */
static mn_status find_reserved(sim_device *d, int index, const char *func, void *addr, size_t n,
                               sim_range **out) {
  uintptr_t p = (uintptr_t)addr;
  size_t g = mn__sim_cfg.granularity;
  if (p % g || n % g)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: addr=%p and nbytes=%zu must be multiples of %zu",
                     index, addr, n, g);
  sim_range *r = mn__sim_range_find(d, p);
  if (!r || !r->mapped || n > r->size || p - r->start > r->size - n)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: [%p, +%zu) is not inside a reserved range",
                     index, addr, n);
  *out = r;
  return MN_OK;
}

mn_status mn__sim_va_release(int index, void *base, size_t nbytes) {
  SIM_LOCKED(index, d);
  sim_range *r = mn__sim_range_find(d, (uintptr_t)base);
  if (!r || r->start != (uintptr_t)base || !r->mapped || (nbytes && mn__sim_round_gran(nbytes) != r->size))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %p (+%zu) is not a live reservation", index, base, nbytes));
  for (size_t k = 0; k < r->size / mn__sim_cfg.granularity; k++)
    if (r->mapped[k])
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                     "sim:%d: reservation %p still has mapped pages", index, base));
  mn__sim_range_remove(d, r);
  d->stats.live_reservations--;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_mem_map(int index, void *addr, size_t nbytes) {
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_reserved(d, index, __func__, addr, nbytes, &r);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  size_t g = mn__sim_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  for (size_t k = first; k < first + count; k++)
    if (r->mapped[k])
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: page %p is already mapped",
                                     index, (void *)(r->start + k * g)));
  st = check_capacity(d, index, __func__, nbytes, nbytes);
  if (st == MN_OK && mprotect(addr, nbytes, PROT_READ | PROT_WRITE) != 0)
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  memset(r->mapped + first, 1, count);
  /* the device only, as cuMemMap + cuMemSetAccess for it: peers need mem_set_access */
  for (size_t k = first; k < first + count; k++) r->access[k] = (uint16_t)(1u << index);
  mn__sim_phys_add(d, nbytes);
  d->stats.maps++;
  return mn__sim_unlock_ret(d, MN_OK);
}

/* The reservation holding [addr, addr+n), every page of it mapped. */
static mn_status find_mapped(sim_device *d, int index, const char *func, void *addr, size_t n, sim_range **out) {
  sim_range *r = NULL;
  mn_status st = find_reserved(d, index, func, addr, n, &r);
  if (st != MN_OK) return st;
  size_t g = mn__sim_cfg.granularity, first = ((uintptr_t)addr - r->start) / g;
  for (size_t k = first; k < first + n / g; k++)
    if (!r->mapped[k])
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: page %p is not mapped", index,
                       (void *)(r->start + k * g));
  *out = r;
  return MN_OK;
}

/* As cuMemSetAccess: `peer` may reach the mapped pages [addr, addr+nbytes) of
 * `index` until they are unmapped. */
mn_status mn__sim_mem_set_access(int index, void *addr, size_t nbytes, int peer) {
  if (peer < 0 || peer >= SIM_MAX_DEVICES || peer == index)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d cannot be granted memory of sim:%d", peer, index);
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_mapped(d, index, __func__, addr, nbytes, &r);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  size_t g = mn__sim_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  for (size_t k = first; k < first + count; k++) r->access[k] |= (uint16_t)(1u << peer);
  return mn__sim_unlock_ret(d, MN_OK);
}

/* As CUDA's mem_unmap: synchronizes the device first unless the caller did. */
mn_status mn__sim_mem_unmap(int index, void *addr, size_t nbytes, bool synced) {
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_mapped(d, index, __func__, addr, nbytes, &r);
  if (st == MN_OK && d->captures) return mn__sim_unlock_ret(d, mn__sim_capture_refuse_device(d, index, __func__, "an unmap"));
  if (st == MN_OK && !synced) {
    mn__sim_device_sync(d);
    /* the work it ran (host functions, pool frees) may have moved the ranges */
    st = find_mapped(d, index, __func__, addr, nbytes, &r);
  }
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  size_t g = mn__sim_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  mn__sim_pages_release(addr, nbytes);
  if (r->shared)
    for (size_t k = first; k < first + count; k++)
      if (r->shared[k]) { /* its bytes leave the memfd too */
        mn__sim_share_unmap((void *)(r->start + k * g), g);
        if (fallocate(r->share_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(k * g), (off_t)g) != 0) {
          /* the memfd keeps those bytes until the reservation is released */
        }
        r->shared[k] = 0;
      }
  memset(r->mapped + first, 0, count);
  memset(r->access + first, 0, count * sizeof *r->access);
  d->stats.mapped_bytes -= nbytes;
  d->stats.unmaps++;
  return mn__sim_unlock_ret(d, MN_OK);
}
