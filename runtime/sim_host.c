/* runtime/sim_host.c: pinned host memory and peer access on the SIM devices:
 * one process-wide registry of pinned host ranges (its own lock, never held
 * together with a device lock), peer enabling, peer copies and the range check
 * slot. Thread-safe. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- pinned host memory and peer access ------------------------
 * "Pinned" SIM memory is ordinary host memory recorded in one process-wide
 * registry, pinned for every SIM device (as cudaHostAllocPortable memory is
 * for every CUDA device). The registry has its own lock, never held together
 * with a device lock. SIM copies read and write host memory when the stream
 * runs them whether it is pinned or not (an ideal DMA engine); the copy engine
 * (storage/copy.c) gives pageable memory its CUDA-like meaning. */

typedef struct sim_pin {
  uintptr_t start; /* first: mn__sim_starts_find reads it */
  size_t size;
  bool owned;      /* from host_alloc (freed by host_free); false: registered */
} sim_pin;

static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_pin *g_pins; /* sorted by start, disjoint */
static size_t g_npins, g_cap_pins;

#define SIM_HOST_ALIGN 4096

/* Records [start, start+size); refuses overlaps. pre: g_pin_lock held. */
static mn_status pin_insert(int index, const char *func, uintptr_t start, size_t size, bool owned) {
  long i = mn__sim_starts_find(g_pins, g_npins, sizeof *g_pins, start);
  size_t pos = (size_t)(i + 1);
  if ((i >= 0 && g_pins[i].start + g_pins[i].size > start) || (pos < g_npins && g_pins[pos].start < start + size))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: host range [%p, +%zu) overlaps pinned memory",
                     index, (void *)start, size);
  if (g_npins == g_cap_pins) {
    size_t cap = g_cap_pins ? g_cap_pins * 2 : 64;
    sim_pin *r = mn__realloc(g_pins, cap * sizeof *r);
    if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
    g_pins = r;
    g_cap_pins = cap;
  }
  memmove(&g_pins[pos + 1], &g_pins[pos], (g_npins - pos) * sizeof *g_pins);
  g_pins[pos] = (sim_pin){.start = start, .size = size, .owned = owned};
  g_npins++;
  return MN_OK;
}

/* Removes the record starting at ptr made with the same `owned`. */
static mn_status pin_remove(int index, const char *func, void *ptr, bool owned) {
  pthread_mutex_lock(&g_pin_lock);
  long i = mn__sim_starts_find(g_pins, g_npins, sizeof *g_pins, (uintptr_t)ptr);
  mn_status st = MN_OK;
  if (i < 0 || g_pins[i].start != (uintptr_t)ptr || g_pins[i].owned != owned) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: %p is not %s", index, ptr,
                   owned ? "pinned memory from mn_device_host_alloc" : "the start of a registered host range");
  } else {
    memmove(&g_pins[i], &g_pins[i + 1], (g_npins - (size_t)i - 1) * sizeof *g_pins);
    if (--g_npins == 0) { /* the last record: the table goes too (the next pin makes a new one) */
      free(g_pins);
      g_pins = NULL;
      g_cap_pins = 0;
    }
  }
  pthread_mutex_unlock(&g_pin_lock);
  return st;
}

mn_status mn__sim_host_alloc(int index, size_t nbytes, void **out) {
  SIM_LOCKED(index, d);
  bool fail = mn__sim_fault_fires(d, MN_SIM_FAULT_RAW_ALLOC);
  pthread_mutex_unlock(&d->lock);
  if (fail)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: injected fault: pinning %zu bytes failed", index,
                     nbytes);
  if (nbytes > SIZE_MAX - SIM_HOST_ALIGN)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: cannot pin %zu bytes", index, nbytes);
  size_t rounded = (nbytes + SIM_HOST_ALIGN - 1) / SIM_HOST_ALIGN * SIM_HOST_ALIGN;
  void *p = mn__aligned_alloc(SIM_HOST_ALIGN, rounded);
  if (!p)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: out of host memory pinning %zu bytes", index, nbytes);
  pthread_mutex_lock(&g_pin_lock);
  mn_status st = pin_insert(index, __func__, (uintptr_t)p, rounded, true);
  pthread_mutex_unlock(&g_pin_lock);
  if (st != MN_OK) {
    free(p);
    return st;
  }
  *out = p;
  return MN_OK;
}

mn_status mn__sim_host_free(int index, void *ptr) {
  mn_status st = pin_remove(index, __func__, ptr, true);
  if (st == MN_OK) free(ptr);
  return st;
}

mn_status mn__sim_host_register(int index, void *ptr, size_t nbytes) {
  pthread_mutex_lock(&g_pin_lock);
  mn_status st = pin_insert(index, __func__, (uintptr_t)ptr, nbytes, false);
  pthread_mutex_unlock(&g_pin_lock);
  return st;
}

mn_status mn__sim_host_unregister(int index, void *ptr) { return pin_remove(index, __func__, ptr, false); }

mn_status mn__sim_host_is_pinned(int index, const void *ptr, bool *pinned) {
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&g_pin_lock);
  long i = mn__sim_starts_find(g_pins, g_npins, sizeof *g_pins, p);
  *pinned = i >= 0 && p - g_pins[i].start < g_pins[i].size;
  pthread_mutex_unlock(&g_pin_lock);
  return MN_OK;
}

/* SIM devices share the host address space: every pair can reach each other
 * unless configured not to (to exercise the paths of machines without peer access). */
mn_status mn__sim_can_access_peer(int index, int peer, bool *can) {
  pthread_mutex_lock(&mn__sim_lock);
  *can = !mn__sim_cfg.no_peer_access;
  pthread_mutex_unlock(&mn__sim_lock);
  return MN_OK;
}

/* `index` may access `peer`'s raw memory from now on (as
 * cudaDeviceEnablePeerAccess); mapped VMM pages stay reachable only from the
 * devices mem_set_access granted (as memory mapped with cuMemMap). */
mn_status mn__sim_enable_peer_access(int index, int peer) {
  SIM_LOCKED(peer, d);
  d->peers |= (uint16_t)(1u << index);
  return mn__sim_unlock_ret(d, MN_OK);
}

/* The other device's side is checked when queued (its lock is taken and
 * dropped before this device's: the two locks are never held together); this
 * device's side is checked when the copy runs, as for any copy. */
mn_status mn__sim_memcpy_peer_async(int index, void *dst, int dst_index, const void *src, int src_index,
                                       size_t nbytes, void *handle) {
  int remote = index == dst_index ? src_index : dst_index;
  const void *rp = index == dst_index ? src : dst;
  sim_device *r = NULL;
  mn_status st = mn__sim_get(remote, &r);
  if (st != MN_OK) return st;
  pthread_mutex_lock(&r->lock);
  bool ok = mn__sim_range_is_mapped(r, rp, nbytes);
  pthread_mutex_unlock(&r->lock);
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: [%p, +%zu) is not mapped memory of sim:%d", index,
                     rp, nbytes, remote);
  /* The remote side counts as host memory for the run-time check. */
  return mn__sim_memcpy_async(index, dst, src, nbytes, index == dst_index ? MN__COPY_H2D : MN__COPY_D2H, handle);
}

mn_status mn__sim_check_range(int index, const void *ptr, size_t nbytes) {
  SIM_LOCKED(index, d);
  bool ok = mn__sim_range_is_mapped(d, ptr, nbytes);
  pthread_mutex_unlock(&d->lock);
  if (ok) return MN_OK;
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) is not mapped memory of sim:%d", ptr, nbytes,
                   index);
}
