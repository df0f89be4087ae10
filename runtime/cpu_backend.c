/* runtime/cpu_backend.c: the CPU backend: host memory from the C library,
 * known by a set of live allocations so that a double, interior or foreign
 * free is refused (as SIM and cudaFree do) instead of reaching free();
 * streams that run work at once, events that are always complete.
 * Thread-safe: one mutex guards the live set, held for the map operation only. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/ptrmap.h"

/* Host allocations are aligned like CUDA's (256 bytes) so that vectorized
 * kernels see the same alignment on every device. */
#define MN__CPU_ALIGN 256

/* A non-NULL token stands for created streams and events: they hold no state. */
static char cpu_token;

static mn_status cpu_device_count(int *count) {
  *count = 1;
  return MN_OK;
}

static size_t cpu_total_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return (pages > 0 && psize > 0) ? (size_t)pages * (size_t)psize : 0;
}

static mn_status cpu_get_properties(int index, mn_device_props_t *p) {
  memset(p, 0, sizeof *p);
  p->device = mn_device_cpu();
  strcpy(p->name, "cpu");
  p->total_memory = cpu_total_memory();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  p->multiprocessors = cores > 0 ? (int)cores : 1;
  p->alloc_granularity = MN__CPU_ALIGN;
  p->is_host_accessible = true;
  return MN_OK;
}

static mn_status cpu_mem_info(int index, size_t *free_bytes, size_t *total_bytes) {
  long avail = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  *free_bytes = (avail > 0 && psize > 0) ? (size_t)avail * (size_t)psize : 0;
  *total_bytes = cpu_total_memory();
  return MN_OK;
}

static mn_status cpu_nothing(int index) { return MN_OK; }

/* Allocations of at least 4 MiB have the 2 MiB-aligned pages inside them
 * advised to use transparent huge pages, as numpy does for its large arrays:
 * where THP is in "madvise" mode this halves TLB misses of streaming kernels.
 * The block itself is only MN__CPU_ALIGN-aligned, from a plain malloc (see
 * cpu_raw_alloc): an over-aligned request is served by fresh memory every
 * time (a 2 MiB-aligned one by a new mmap: the C library's dynamic mmap
 * threshold never covers it), so a loop that allocates a large result per
 * call (an index_select) would pay the page faults of new memory each time,
 * where a plain malloc reuses the freed block. MNEMO_CPU_HUGEPAGES=0 turns
 * the advice off. */
#define MN__CPU_HUGE_MIN ((size_t)4 << 20)
#define MN__CPU_HUGE_ALIGN ((size_t)2 << 20)

static bool cpu_hugepages_wanted(void) {
  static atomic_int wanted = -1; /* every thread computes the same value */
  int w = atomic_load_explicit(&wanted, memory_order_relaxed);
  if (w < 0) {
    const char *e = mn__env(MN__ENV_CPU_HUGEPAGES);
    w = !(e && e[0] == '0');
    atomic_store_explicit(&wanted, w, memory_order_relaxed);
  }
  return w == 1;
}

/* ---- the live set: address -> bytes asked, for raw and host allocations alike
 * (both are plain host memory here, so either free takes either). One map and
 * one mutex, as the naive allocator above it has: the table only grows (at
 * 3/4 load), so a workload run twice allocates for it only the first time
 * (the host-fault sweep counts on that). It lives for the process. */
static pthread_mutex_t cpu_live_lock = PTHREAD_MUTEX_INITIALIZER;
static mn__addrmap_t cpu_live;

/* Records p (inside the C library's block `base`) as live; false when the
 * set cannot grow (p is then not recorded). */
static bool cpu_live_add(void *p, size_t nbytes, void *base) {
  pthread_mutex_lock(&cpu_live_lock);
  mn__addrmap_entry_t *e = mn__addrmap_find(&cpu_live, (uintptr_t)p);
  bool ok = true;
  if (e) /* the C library handed p out again: it was freed behind our back (free(), not raw_free) */
    *e = (mn__addrmap_entry_t){.key = (uintptr_t)p, .size = nbytes, .data = base};
  else
    ok = mn__addrmap_insert(&cpu_live, (uintptr_t)p, nbytes, base) == MN_OK;
  pthread_mutex_unlock(&cpu_live_lock);
  return ok;
}

/* Takes p out of the live set: the C library's block it lies in, or NULL
 * when p is not there. */
static void *cpu_live_remove(void *p) {
  mn__addrmap_entry_t e = {0};
  pthread_mutex_lock(&cpu_live_lock);
  bool found = mn__addrmap_remove(&cpu_live, (uintptr_t)p, &e);
  pthread_mutex_unlock(&cpu_live_lock);
  return found ? e.data : NULL;
}

static mn_status cpu_raw_alloc(int index, size_t nbytes, void **out) {
  if (nbytes > SIZE_MAX - MN__CPU_HUGE_ALIGN)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "cpu: cannot allocate %zu bytes", nbytes);
  bool huge = nbytes >= MN__CPU_HUGE_MIN && cpu_hugepages_wanted();
  size_t rounded = (nbytes + MN__CPU_ALIGN - 1) / MN__CPU_ALIGN * MN__CPU_ALIGN;
  if (!rounded) rounded = MN__CPU_ALIGN;
  /* malloc of the size plus the alignment, aligned here: the same request for
   * the same size every time, so a freed block fits the next one exactly.
   * (aligned_alloc asks the C library for more than the block it keeps, so a
   * freed block never fit the next request of its size: a loop making one
   * large result per call grew the heap by its size each call and faulted
   * every page of it in anew.) */
  void *base = mn__malloc(rounded + MN__CPU_ALIGN), *p = NULL;
  if (base) p = (void *)(((uintptr_t)base + MN__CPU_ALIGN - 1) & ~(uintptr_t)(MN__CPU_ALIGN - 1));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p && huge) { /* the whole huge pages inside the block; advice only: failure changes nothing */
    uintptr_t lo = ((uintptr_t)p + MN__CPU_HUGE_ALIGN - 1) & ~(uintptr_t)(MN__CPU_HUGE_ALIGN - 1);
    uintptr_t hi = ((uintptr_t)p + rounded) & ~(uintptr_t)(MN__CPU_HUGE_ALIGN - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  if (!p)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "cpu: out of host memory allocating %zu bytes", nbytes);
  if (!cpu_live_add(p, nbytes, base)) {
    free(base);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "cpu: out of host memory for the set of live allocations (allocating %zu bytes)", nbytes);
  }
  *out = p;
  return MN_OK;
}

/* pre: ptr != NULL (the dispatcher answers NULL itself). */
static mn_status cpu_raw_free(int index, void *ptr) {
  void *base = cpu_live_remove(ptr);
  if (!base)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "cpu: %p is not a live allocation of the CPU device (freed already, not the start of "
                     "one, or memory it did not allocate)", ptr);
  free(base);
  return MN_OK;
}

static mn_status cpu_handle_create(int index, void **out) {
  *out = &cpu_token;
  return MN_OK;
}
static mn_status cpu_handle_destroy(int index, void *h) { return MN_OK; }
static mn_status cpu_done(int index, void *h, bool *done) {
  *done = true;
  return MN_OK;
}
static mn_status cpu_handle_nothing(int index, void *h) { return MN_OK; }
static mn_status cpu_wait_event(int index, void *stream, void *event) { return MN_OK; }
static mn_status cpu_record(int index, void *event, void *stream) { return MN_OK; }

static mn_status cpu_launch_host(int index, void *stream, mn_host_fn fn, void *arg) {
  fn(arg);
  return MN_OK;
}

static mn_status cpu_memcpy(int index, void *dst, const void *src, size_t nbytes,
                            mn__copy_kind kind, void *stream) {
  memmove(dst, src, nbytes);
  return MN_OK;
}

static mn_status cpu_memset(int index, void *dst, int value, size_t nbytes, void *stream) {
  memset(dst, value, nbytes);
  return MN_OK;
}

/* ---- pinned host memory: plain memory, never reported pinned ---- */

static mn_status cpu_host_register(int index, void *ptr, size_t nbytes) { return MN_OK; }
static mn_status cpu_host_unregister(int index, void *ptr) { return MN_OK; }
static mn_status cpu_host_is_pinned(int index, const void *ptr, bool *pinned) {
  *pinned = false;
  return MN_OK;
}

const mn__backend_t mn__cpu_backend = {
    .name = "cpu",
    .type = MN_DEVICE_CPU,
    .device_count = cpu_device_count,
    .get_properties = cpu_get_properties,
    .mem_info = cpu_mem_info,
    .synchronize = cpu_nothing,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .stream_create = cpu_handle_create,
    .stream_destroy = cpu_handle_destroy,
    .stream_query = cpu_done,
    .stream_synchronize = cpu_handle_nothing,
    .stream_wait_event = cpu_wait_event,
    .launch_host = cpu_launch_host,
    .event_create = cpu_handle_create,
    .event_destroy = cpu_handle_destroy,
    .event_record = cpu_record,
    .event_query = cpu_done,
    .event_synchronize = cpu_handle_nothing,
    .memcpy_async = cpu_memcpy,
    .memset_async = cpu_memset,
    /* the CPU has no peers */
    .host_alloc = cpu_raw_alloc,
    .host_free = cpu_raw_free,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .host_is_pinned = cpu_host_is_pinned,
};
