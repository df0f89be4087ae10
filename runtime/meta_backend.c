/* runtime/meta_backend.c: the meta device (PyTorch's "meta"): one device with
 * sizes and no bytes. Raw allocations and address reservations hand out
 * addresses from a range no real pointer uses (bit 62 set: non-canonical on
 * x86-64 with 4- or 5-level paging, outside every user address space), never
 * mapped and never touched; mapped bytes are counted against a capacity
 * (mn_device_meta_set_capacity; 0: unlimited) so that any allocator, the
 * caching one with expandable segments included, runs on it as a dry run.
 * Streams and events are always complete; copies, sets and kernels are
 * refused with MN_ERR_NOT_SUPPORTED. VMM pages are SIM's 2 MiB.
 * Thread-safe: one mutex guards the range table and the counters. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

#define META_GRANULARITY ((size_t)2 << 20)
#define META_BASE ((uintptr_t)1 << 62)
#define META_SPAN ((uintptr_t)1 << 61) /* the address range handed out: [BASE, BASE + SPAN) */
#define META_UNLIMITED ((size_t)1 << 50) /* total_memory reported without a capacity */

/* A live raw allocation (pages == NULL) or reservation (one flag per granule). */
typedef struct meta_range_s {
  uintptr_t start;
  size_t size;
  uint8_t *pages;
} meta_range;

static pthread_mutex_t g_meta_lock = PTHREAD_MUTEX_INITIALIZER;
static meta_range *g_ranges; /* sorted by start (addresses only grow) */
static size_t g_nranges, g_cap_ranges;
static uintptr_t g_next = META_BASE; /* bump pointer: an address is never handed out twice */
static size_t g_mapped;              /* bytes of raw allocations and mapped pages */
static size_t g_capacity;            /* 0: unlimited */

static char g_meta_token; /* stands for created streams and events: they hold no state */

mn_device_t mn_device_meta(void) { return (mn_device_t){MN_DEVICE_META, 0}; }

static size_t meta_total_locked(void) { return g_capacity ? g_capacity : META_UNLIMITED; }

mn_status mn_device_meta_set_capacity(size_t bytes) {
  pthread_mutex_lock(&g_meta_lock);
  mn_status st = MN_OK;
  if (bytes && bytes < g_mapped)
    st = mn__error(MN_ERR_BUSY, __func__, "meta: %zu bytes are held now, more than the capacity %zu asked", g_mapped,
                   bytes);
  else
    g_capacity = bytes;
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_device_count(int *count) {
  *count = 1;
  return MN_OK;
}

static mn_status meta_get_properties(int index, mn_device_props_t *p) {
  memset(p, 0, sizeof *p);
  p->device = mn_device_meta();
  strcpy(p->name, "meta");
  pthread_mutex_lock(&g_meta_lock);
  p->total_memory = meta_total_locked();
  pthread_mutex_unlock(&g_meta_lock);
  p->multiprocessors = 1;
  p->alloc_granularity = META_GRANULARITY;
  p->supports_vmm = true;
  p->is_host_accessible = false;
  return MN_OK;
}

static mn_status meta_mem_info(int index, size_t *free_bytes, size_t *total_bytes) {
  pthread_mutex_lock(&g_meta_lock);
  size_t total = meta_total_locked();
  *total_bytes = total;
  *free_bytes = total > g_mapped ? total - g_mapped : 0;
  pthread_mutex_unlock(&g_meta_lock);
  return MN_OK;
}

static mn_status meta_nothing(int index) { return MN_OK; }

static size_t round_gran(size_t n) {
  return n > SIZE_MAX - META_GRANULARITY ? 0 : (n + META_GRANULARITY - 1) / META_GRANULARITY * META_GRANULARITY;
}

/* Whether `bytes` more fit under the capacity. pre: lock held. */
static mn_status check_capacity_locked(const char *func, size_t asked, size_t bytes) {
  size_t total = meta_total_locked();
  if (bytes > total - (g_mapped < total ? g_mapped : total))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "meta out of memory: asked %zu bytes (%zu rounded), %zu of %zu in use",
                     asked, bytes, g_mapped, total);
  return MN_OK;
}

/* Index of the range holding address p, or g_nranges. pre: lock held. */
static size_t range_find_locked(uintptr_t p) {
  size_t lo = 0, hi = g_nranges;
  while (lo < hi) { /* the first range starting after p */
    size_t mid = lo + (hi - lo) / 2;
    if (g_ranges[mid].start <= p) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return g_nranges;
  const meta_range *r = &g_ranges[lo - 1];
  return p - r->start < r->size ? lo - 1 : g_nranges;
}

/* Appends a range of `size` bytes (a multiple of the granularity) at the bump
 * pointer. pre: lock held. */
static mn_status range_add_locked(const char *func, size_t size, bool reservation, uintptr_t *out) {
  if (size == 0 || size > META_BASE + META_SPAN - g_next)
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "meta: %zu bytes of address space are not left", size);
  if (g_nranges == g_cap_ranges) {
    size_t n = g_cap_ranges ? 2 * g_cap_ranges : 64;
    meta_range *t = mn__realloc(g_ranges, n * sizeof *t);
    if (!t) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "meta: out of host memory for the range table");
    g_ranges = t;
    g_cap_ranges = n;
  }
  uint8_t *pages = NULL;
  if (reservation && !(pages = mn__calloc(size / META_GRANULARITY, 1)))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "meta: out of host memory for a reservation's page flags");
  g_ranges[g_nranges++] = (meta_range){g_next, size, pages};
  *out = g_next;
  g_next += size;
  return MN_OK;
}

static void range_remove_locked(size_t i) {
  free(g_ranges[i].pages);
  memmove(&g_ranges[i], &g_ranges[i + 1], (g_nranges - i - 1) * sizeof *g_ranges);
  if (--g_nranges == 0) { /* the last range: the table goes too (the next range makes a new one) */
    free(g_ranges);
    g_ranges = NULL;
    g_cap_ranges = 0;
  }
}

static mn_status meta_raw_alloc(int index, size_t nbytes, void **out) {
  size_t rounded = round_gran(nbytes);
  pthread_mutex_lock(&g_meta_lock);
  mn_status st = check_capacity_locked(__func__, nbytes, rounded ? rounded : SIZE_MAX);
  uintptr_t p = 0;
  if (st == MN_OK) st = range_add_locked(__func__, rounded, false, &p);
  if (st == MN_OK) {
    g_mapped += rounded;
    *out = (void *)p;
  }
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_raw_free(int index, void *ptr) {
  pthread_mutex_lock(&g_meta_lock);
  size_t i = range_find_locked((uintptr_t)ptr);
  mn_status st = MN_OK;
  if (i == g_nranges || g_ranges[i].start != (uintptr_t)ptr || g_ranges[i].pages) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "meta: %p is not a live raw allocation", ptr);
  } else {
    g_mapped -= g_ranges[i].size;
    range_remove_locked(i);
  }
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_va_reserve(int index, size_t nbytes, void **base) {
  size_t rounded = round_gran(nbytes);
  pthread_mutex_lock(&g_meta_lock);
  uintptr_t p = 0;
  mn_status st = range_add_locked(__func__, rounded, true, &p);
  if (st == MN_OK) *base = (void *)p;
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_va_release(int index, void *base, size_t nbytes) {
  pthread_mutex_lock(&g_meta_lock);
  size_t i = range_find_locked((uintptr_t)base);
  mn_status st = MN_OK;
  if (i == g_nranges || g_ranges[i].start != (uintptr_t)base || !g_ranges[i].pages ||
      (nbytes && round_gran(nbytes) != g_ranges[i].size)) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "meta: %p (+%zu) is not a live reservation", base, nbytes);
  } else {
    for (size_t k = 0; k < g_ranges[i].size / META_GRANULARITY && st == MN_OK; k++)
      if (g_ranges[i].pages[k])
        st = mn__error(MN_ERR_INVALID_STATE, __func__, "meta: reservation %p still has mapped pages", base);
    if (st == MN_OK) range_remove_locked(i);
  }
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

/* The reservation holding [addr, addr + n), granule-aligned; *first = its first page. pre: lock held. */
static mn_status find_reserved_locked(const char *func, void *addr, size_t n, meta_range **out, size_t *first) {
  uintptr_t p = (uintptr_t)addr;
  if (p % META_GRANULARITY || n % META_GRANULARITY)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "meta: addr=%p and nbytes=%zu must be multiples of %zu", addr, n,
                     META_GRANULARITY);
  size_t i = range_find_locked(p);
  meta_range *r = i < g_nranges ? &g_ranges[i] : NULL;
  if (!r || !r->pages || n > r->size || p - r->start > r->size - n)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "meta: [%p, +%zu) is not inside a reserved range", addr, n);
  *out = r;
  *first = (p - r->start) / META_GRANULARITY;
  return MN_OK;
}

static mn_status meta_mem_map(int index, void *addr, size_t nbytes) {
  pthread_mutex_lock(&g_meta_lock);
  meta_range *r = NULL;
  size_t first = 0, count = nbytes / META_GRANULARITY;
  mn_status st = find_reserved_locked(__func__, addr, nbytes, &r, &first);
  for (size_t k = first; st == MN_OK && k < first + count; k++)
    if (r->pages[k])
      st = mn__error(MN_ERR_INVALID_STATE, __func__, "meta: page %p is already mapped",
                     (void *)(r->start + k * META_GRANULARITY));
  if (st == MN_OK) st = check_capacity_locked(__func__, nbytes, nbytes);
  if (st == MN_OK) {
    memset(r->pages + first, 1, count);
    g_mapped += nbytes;
  }
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_mem_unmap(int index, void *addr, size_t nbytes, bool synced) {
  pthread_mutex_lock(&g_meta_lock);
  meta_range *r = NULL;
  size_t first = 0, count = nbytes / META_GRANULARITY;
  mn_status st = find_reserved_locked(__func__, addr, nbytes, &r, &first);
  for (size_t k = first; st == MN_OK && k < first + count; k++)
    if (!r->pages[k])
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "meta: page %p is not mapped",
                     (void *)(r->start + k * META_GRANULARITY));
  if (st == MN_OK) {
    memset(r->pages + first, 0, count);
    g_mapped -= nbytes;
  }
  pthread_mutex_unlock(&g_meta_lock);
  return st;
}

static mn_status meta_handle_create(int index, void **out) {
  *out = &g_meta_token;
  return MN_OK;
}
static mn_status meta_handle_nothing(int index, void *h) { return MN_OK; }
static mn_status meta_done(int index, void *h, bool *done) {
  *done = true;
  return MN_OK;
}
static mn_status meta_wait_event(int index, void *stream, void *event) { return MN_OK; }
static mn_status meta_record(int index, void *event, void *stream) { return MN_OK; }

/* Host functions run at once, as on the CPU: an allocator's deferred work (a
 * free after a stream's use) completes. */
static mn_status meta_launch_host(int index, void *stream, mn_host_fn fn, void *arg) {
  fn(arg);
  return MN_OK;
}

static mn_status meta_memcpy(int index, void *dst, const void *src, size_t nbytes, mn__copy_kind kind,
                             void *stream) {
  return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                   "meta: the meta device holds no bytes to copy (%zu asked)", nbytes);
}

static mn_status meta_memset(int index, void *dst, int value, size_t nbytes, void *stream) {
  return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "meta: the meta device holds no bytes to set (%zu asked)", nbytes);
}

/* No pointer is memory of the meta device (from_buffer's check). */
static mn_status meta_check_range(int index, const void *ptr, size_t nbytes) {
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                   "meta: %p is not memory of the meta device (it holds no data; create storages on it instead)", ptr);
}

const mn__backend_t mn__meta_backend = {
    .name = "meta",
    .type = MN_DEVICE_META,
    .device_count = meta_device_count,
    .get_properties = meta_get_properties,
    .mem_info = meta_mem_info,
    .synchronize = meta_nothing,
    .raw_alloc = meta_raw_alloc,
    .raw_free = meta_raw_free,
    .va_reserve = meta_va_reserve,
    .va_release = meta_va_release,
    .mem_map = meta_mem_map,
    .mem_unmap = meta_mem_unmap,
    .stream_create = meta_handle_create,
    .stream_destroy = meta_handle_nothing,
    .stream_query = meta_done,
    .stream_synchronize = meta_handle_nothing,
    .stream_wait_event = meta_wait_event,
    .launch_host = meta_launch_host,
    .event_create = meta_handle_create,
    .event_destroy = meta_handle_nothing,
    .event_record = meta_record,
    .event_query = meta_done,
    .event_synchronize = meta_handle_nothing,
    .memcpy_async = meta_memcpy,
    .memset_async = meta_memset,
    .check_range = meta_check_range,
};
