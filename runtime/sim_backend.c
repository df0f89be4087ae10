/* runtime/sim_backend.c: the SIM backend, a deterministic simulated GPU: its
 * configuration (defaults, environment, mn_sim_configure), the devices'
 * setup on first use, the backend table (runtime/backend.h) whose slots live in
 * the other sim_*.c files, and the public SIM API (mnemo/sim.h): stepping
 * streams, fault injection, stats and the invariant check. The layout of the
 * simulated device is in runtime/sim_internal.h. Each device has one
 * (recursive) lock; host functions run with it held, so they may call back into
 * the same SIM device; the configuration has its own lock (mn__sim_lock). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "runtime/device_internal.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/sim_hook.h"
#include "runtime/sim_internal.h"

pthread_mutex_t mn__sim_lock = PTHREAD_MUTEX_INITIALIZER;
mn_sim_config_t mn__sim_cfg;
static bool g_cfg_loaded;
static atomic_int g_device_count = -1; /* mn__sim_cfg.device_count once loaded, else -1 */
static sim_device g_dev[SIM_MAX_DEVICES];

mn_sim_config_t mn_sim_config_default(void) {
  mn_sim_config_t c = {.device_count = 1,
                       .capacity = (size_t)80 << 30,
                       .granularity = (size_t)2 << 20,
                       .eager = false};
  return c;
}

static mn_status validate_config(const char *func, const mn_sim_config_t *c) {
  long page = sysconf(_SC_PAGESIZE);
  if (c->device_count < 1 || c->device_count > SIM_MAX_DEVICES)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "device_count=%d is not in 1..%d",
                     c->device_count, SIM_MAX_DEVICES);
  if (c->granularity < (size_t)page || (c->granularity & (c->granularity - 1)) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "granularity=%zu must be a power of two >= the page size (%ld)", c->granularity, page);
  if (c->capacity < c->granularity || c->capacity % c->granularity != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "capacity=%zu must be a non-zero multiple of granularity=%zu", c->capacity,
                     c->granularity);
  if (c->capacity > ((size_t)1 << 44))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "capacity=%zu exceeds 16 TiB", c->capacity);
  return MN_OK;
}

/* pre: mn__sim_lock held. Loads the defaults and the environment once. */
static void load_config_locked(void) {
  if (g_cfg_loaded) return;
  mn__sim_cfg = mn_sim_config_default();
  const char *cap = mn__env(MN__ENV_SIM_CAPACITY);
  size_t v;
  if (cap && mn_bytes_parse(cap, &v) == MN_OK) {
    mn_sim_config_t c = mn__sim_cfg;
    c.capacity = v;
    if (validate_config(__func__, &c) == MN_OK) mn__sim_cfg = c;
  }
  const char *eager = mn__env(MN__ENV_SIM_EAGER);
  if (eager && eager[0] == '1') mn__sim_cfg.eager = true;
  g_cfg_loaded = true;
  atomic_store_explicit(&g_device_count, mn__sim_cfg.device_count, memory_order_release);
}

/* Returns the device, initializing it on first use. */
mn_status mn__sim_get(int index, sim_device **out) {
  sim_device *d = &g_dev[index];
  if (atomic_load_explicit(&d->ready, memory_order_acquire)) {
    *out = d;
    return MN_OK;
  }
  pthread_mutex_lock(&mn__sim_lock);
  load_config_locked();
  mn_status st = MN_OK;
  if (!atomic_load(&d->ready)) {
    size_t va = 0;
    void *base = MAP_FAILED;
    for (size_t f = SIM_VA_FACTOR_MAX; f >= SIM_VA_FACTOR_MIN && base == MAP_FAILED; f /= 2) {
      va = mn__sim_cfg.capacity * f;
      base = mmap(NULL, va, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (base == MAP_FAILED) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: cannot reserve %zu bytes of address space: %s",
                     index, va, strerror(errno));
    } else {
      pthread_mutexattr_t attr;
      pthread_mutexattr_init(&attr);
      pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
      pthread_mutex_init(&d->lock, &attr);
      pthread_mutexattr_destroy(&attr);
      d->base = base;
      d->va_size = va;
      mn__avl_init(&d->ranges, mn__sim_range_cmp, mn__sim_range_update);
      mn__sim_pool_init(&d->pool);
      atomic_store_explicit(&d->ready, true, memory_order_release);
    }
  }
  pthread_mutex_unlock(&mn__sim_lock);
  if (st == MN_OK) *out = d;
  return st;
}

/* True when the armed fault of this kind fires on this call. pre: lock held. */
bool mn__sim_fault_fires(sim_device *d, mn_sim_fault kind) {
  sim_fault_arm *a = &d->faults[kind];
  if (a->remaining == 0) return false;
  if (a->until > 1) {
    a->until--;
    return false;
  }
  a->remaining--;
  d->stats.faults_fired++;
  return true;
}

/* ---- backend slots: the devices (the others are in the sim_*.c files) ---- */

static mn_status sim_device_count(int *count) {
  /* Asked on every validated call: lock-free once the configuration is known. */
  int n = atomic_load_explicit(&g_device_count, memory_order_acquire);
  if (n < 0) {
    pthread_mutex_lock(&mn__sim_lock);
    load_config_locked();
    n = mn__sim_cfg.device_count;
    pthread_mutex_unlock(&mn__sim_lock);
  }
  *count = n;
  return MN_OK;
}

static mn_status sim_get_properties(int index, mn_device_props_t *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "mnemo sim%s", mn__sim_cfg.eager ? " (eager)" : "");
  p->total_memory = mn__sim_cfg.capacity;
  p->multiprocessors = 1;
  p->alloc_granularity = mn__sim_cfg.granularity;
  p->supports_vmm = true;
  p->is_host_accessible = true;
  return MN_OK;
}

static mn_status sim_mem_info(int index, size_t *free_bytes, size_t *total_bytes) {
  SIM_LOCKED(index, d);
  *free_bytes = mn__sim_cfg.capacity - d->stats.mapped_bytes;
  *total_bytes = mn__sim_cfg.capacity;
  return mn__sim_unlock_ret(d, MN_OK);
}

static mn_status sim_synchronize(int index) {
  SIM_LOCKED(index, d);
  if (d->captures) return mn__sim_unlock_ret(d, mn__sim_capture_refuse_device(d, index, __func__, "a device synchronize"));
  mn__sim_device_sync(d);
  return mn__sim_unlock_ret(d, MN_OK);
}

/* ---- the backend table ---------------------------------------------------- */

const mn__backend_t mn__sim_backend = {
    .share_export = mn__sim_share_export,
    .share_import = mn__sim_share_import,
    .share_close = mn__sim_share_close,
    .check_range = mn__sim_check_range,
    .name = "sim",
    .type = MN_DEVICE_SIM,
    .device_count = sim_device_count,
    .get_properties = sim_get_properties,
    .mem_info = sim_mem_info,
    .synchronize = sim_synchronize,
    .raw_alloc = mn__sim_raw_alloc,
    .raw_free = mn__sim_raw_free,
    .va_reserve = mn__sim_va_reserve,
    .va_release = mn__sim_va_release,
    .mem_map = mn__sim_mem_map,
    .mem_unmap = mn__sim_mem_unmap,
    .mem_set_access = mn__sim_mem_set_access,
    .stream_create = mn__sim_stream_create,
    .stream_destroy = mn__sim_stream_destroy,
    .stream_query = mn__sim_stream_query,
    .stream_synchronize = mn__sim_stream_synchronize,
    .stream_wait_event = mn__sim_stream_wait_event,
    .launch_host = mn__sim_launch_host,
    .event_create = mn__sim_event_create,
    .event_destroy = mn__sim_event_destroy,
    .event_record = mn__sim_event_record,
    .event_query = mn__sim_event_query,
    .progress = mn__sim_progress,
    .event_synchronize = mn__sim_event_synchronize,
    .memcpy_async = mn__sim_memcpy_async,
    .memset_async = mn__sim_memset_async,
    .pool_create = mn__sim_pool_create,
    .pool_destroy = mn__sim_pool_destroy,
    .alloc_async = mn__sim_alloc_async,
    .free_async = mn__sim_free_async,
    .pool_trim = mn__sim_pool_trim,
    .pool_stats = mn__sim_pool_stats,
    .pool_set_release_threshold = mn__sim_pool_set_release_threshold,
    .pool_reset_peak = mn__sim_pool_reset_peak,
    /* pinned host memory and peer access */
    .host_alloc = mn__sim_host_alloc,
    .host_free = mn__sim_host_free,
    .host_register = mn__sim_host_register,
    .host_unregister = mn__sim_host_unregister,
    .host_is_pinned = mn__sim_host_is_pinned,
    .can_access_peer = mn__sim_can_access_peer,
    .enable_peer_access = mn__sim_enable_peer_access,
    .memcpy_peer_async = mn__sim_memcpy_peer_async,
    /* stream capture and graphs */
    .capture_begin = mn__sim_capture_begin,
    .capture_end = mn__sim_capture_end,
    .capture_status = mn__sim_capture_status,
    .capture_id = mn__sim_capture_id,
    .capture_marker = mn__sim_capture_marker,
    .capture_reaches = mn__sim_capture_reaches,
    .graph_launch = mn__sim_graph_launch,
    .graph_destroy = mn__sim_graph_destroy,
};

/* ---- the public SIM API (mnemo/sim.h) ------------------------------------ */

static bool device_busy(const sim_device *d) {
  /* pools' chunks are ranges; captures need streams */
  return d->ranges.count || d->streams || d->events || d->default_stream.head || d->graphs;
}

static _Atomic(mn__sim_configure_hook_fn) g_configure_hook;

void mn__sim_set_configure_hook(mn__sim_configure_hook_fn fn) { atomic_store(&g_configure_hook, fn); }

mn_status mn_sim_configure(const mn_sim_config_t *config) {
  MN__CHECK_ARG(config != NULL, "config must not be NULL");
  mn_status st = validate_config(__func__, config);
  if (st != MN_OK) return st;
  /* Idle default allocators give back their caches first (outside mn__sim_lock: that frees SIM memory). */
  mn__sim_configure_hook_fn hook = atomic_load(&g_configure_hook);
  if (hook && (st = hook(true, __func__)) != MN_OK) return st;
  pthread_mutex_lock(&mn__sim_lock);
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    if (atomic_load(&g_dev[i].ready) && device_busy(&g_dev[i])) {
      pthread_mutex_unlock(&mn__sim_lock);
      return mn__error(MN_ERR_INVALID_STATE, __func__,
                       "sim:%d still has live memory, streams, events, graphs or queued work", i);
    }
  }
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    sim_device *d = &g_dev[i];
    if (!atomic_load(&d->ready)) continue;
    munmap(d->base, d->va_size); /* no ranges are left (the device is idle) */
    pthread_mutex_destroy(&d->lock);
    /* Created pools are empty here (their chunks would be ranges): they stay,
     * so their owners' handles (an async allocator's) stay valid. */
    sim_pool *pools = d->pools;
    memset(d, 0, sizeof *d);
    d->pools = pools;
  }
  mn__sim_cfg = *config;
  g_cfg_loaded = true;
  atomic_store_explicit(&g_device_count, mn__sim_cfg.device_count, memory_order_release);
  pthread_mutex_unlock(&mn__sim_lock);
  return hook ? hook(false, __func__) : MN_OK;
}

mn_status mn_sim_get_config(mn_sim_config_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  pthread_mutex_lock(&mn__sim_lock);
  load_config_locked();
  *out = mn__sim_cfg;
  pthread_mutex_unlock(&mn__sim_lock);
  return MN_OK;
}

/* The device check of the public mn_sim_* calls: what mn_device_check says
 * of a SIM device (same status and message), asked of this backend directly
 * so the SIM files never call back up into device.c. */
static mn_status sim_device_exists(mn_device_t dev) {
  int n = 0;
  mn_status st = sim_device_count(&n);
  if (st != MN_OK) return mn__error_wrap(st, "mn_device_check");
  if (dev.index < 0 || dev.index >= n) return mn__device_missing("mn_device_check", dev, n);
  return MN_OK;
}

/* Validates a public SIM stream argument. */
static mn_status sim_stream_arg(const char *func, mn_stream_t *stream) {
  if (!stream) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream must not be NULL");
  if (stream->device.type != MN_DEVICE_SIM)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream is on a %s device, not sim",
                     mn_device_type_name(stream->device.type));
  return sim_device_exists(stream->device);
}

mn_status mn_sim_stream_advance(mn_stream_t *stream, size_t n, size_t *ran) {
  mn_status st = sim_stream_arg(__func__, stream);
  if (st != MN_OK) return st;
  SIM_LOCKED(stream->device.index, d);
  size_t k = mn__sim_stream_advance(d, mn__sim_stream_of(d, stream->handle), n);
  if (ran) *ran = k;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn_sim_stream_pending(mn_stream_t *stream, size_t *count) {
  MN__CHECK_ARG(count != NULL, "count must not be NULL");
  mn_status st = sim_stream_arg(__func__, stream);
  if (st != MN_OK) return st;
  SIM_LOCKED(stream->device.index, d);
  sim_stream *s = mn__sim_stream_of(d, stream->handle);
  *count = (size_t)(s->queued - s->completed);
  return mn__sim_unlock_ret(d, MN_OK);
}

static mn_status sim_device_arg(const char *func, mn_device_t dev) {
  if (dev.type != MN_DEVICE_SIM)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "device type %s is not sim", mn_device_type_name(dev.type));
  return sim_device_exists(dev);
}

/* Runs every queued operation, as time passing on a device: allowed during
 * captures (what captures record is not queued). */
mn_status mn_sim_device_drain(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  mn__sim_device_sync(d);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn_sim_fault_inject(mn_device_t dev, mn_sim_fault fault, uint64_t nth, uint64_t count) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  MN__CHECK_ARG((unsigned)fault < MN_SIM_FAULT_COUNT, "fault=%d is not a SIM fault kind", (int)fault);
  MN__CHECK_ARG(nth >= 1 && count >= 1, "nth=%llu and count=%llu must be >= 1", (unsigned long long)nth,
                (unsigned long long)count);
  SIM_LOCKED(dev.index, d);
  d->faults[fault] = (sim_fault_arm){.until = nth, .remaining = count};
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn_sim_fault_clear(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  memset(d->faults, 0, sizeof d->faults);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn_sim_check_access(mn_device_t accessor, mn_device_t owner, const void *ptr, size_t nbytes) {
  mn_status st = sim_device_arg(__func__, accessor);
  if (st == MN_OK) st = sim_device_arg(__func__, owner);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(ptr != NULL && nbytes > 0, "ptr must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  SIM_LOCKED(owner.index, d);
  bool mapped = mn__sim_range_is_mapped(d, ptr, nbytes), ok = mapped, vmm = false;
  if (ok && accessor.index != owner.index) {
    uint16_t bit = (uint16_t)(1u << accessor.index);
    const sim_range *r = mn__sim_range_find(d, (uintptr_t)ptr);
    vmm = r->mapped != NULL;
    if (!r->mapped) {
      ok = (d->peers & bit) != 0;
    } else {
      size_t g = mn__sim_cfg.granularity, off = (uintptr_t)ptr - r->start;
      for (size_t k = off / g; ok && k <= (off + nbytes - 1) / g; k++) ok = (r->access[k] & bit) != 0;
    }
  }
  pthread_mutex_unlock(&d->lock);
  if (ok) return MN_OK;
  if (!mapped)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) is not mapped memory of sim:%d", ptr, nbytes,
                     owner.index);
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) of sim:%d is not accessible from sim:%d (%s)", ptr,
                   nbytes, owner.index, accessor.index,
                   vmm ? "mapped pages not granted to it with mn_device_mem_set_access"
                       : "no peer access enabled to it");
}

mn_status mn_sim_get_stats(mn_device_t dev, mn_sim_stats_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  *out = d->stats;
  return mn__sim_unlock_ret(d, MN_OK);
}

#define CAPTURE_BROKEN(...) mn__error(MN_ERR_INTERNAL, "mn_sim_check_invariants", __VA_ARGS__)

/* Nodes depend only on earlier nodes; a frontier names existing nodes. */
static bool graph_ok(const sg_graph *g, const sg_set *front) {
  size_t ops = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    ops += g->nodes[i].kind != SG_EMPTY;
    for (uint32_t k = 0; k < g->nodes[i].ndeps; k++)
      if (g->nodes[i].deps[k] >= i) return false;
  }
  for (uint32_t i = 0; front && i < front->n; i++)
    if (front->ids[i] >= g->n) return false;
  return ops == g->ops && g->n <= g->cap;
}

/* Captures: each stream's capture is active, its id mirrored, its members
 * counted; the default stream never captures; graphs counted. pre: lock held. */
static mn_status capture_check(sim_device *d, int index) {
  if (d->default_stream.cap || atomic_load(&d->default_stream.cap_id))
    return CAPTURE_BROKEN("sim:%d: the default stream captures", index);
  for (sim_capture *c = d->captures; c; c = c->next) {
    size_t members = 0;
    for (sim_stream *s = d->streams; s; s = s->next) members += s->cap == c;
    if (members != c->members || !c->origin || c->origin->cap != c || !graph_ok(&c->graph, NULL))
      return CAPTURE_BROKEN("sim:%d: capture %llu: %zu member streams counted, %zu found, or its graph is broken",
                            index, (unsigned long long)c->id, c->members, members);
  }
  for (sim_stream *s = d->streams; s; s = s->next) {
    if (s->cap ? mn__sim_capture_find(d, s->cap->id) != s->cap || atomic_load(&s->cap_id) != s->cap->id ||
                     !graph_ok(&s->cap->graph, &s->front)
               : atomic_load(&s->cap_id) != 0)
      return CAPTURE_BROKEN("sim:%d: a stream's capture state is broken", index);
  }
  size_t graphs = 0;
  for (const sim_graph *g = d->graphs; g; g = g->next, graphs++)
    if ((g->next && g->next->prev != g) || (g->prev == NULL) != (g == d->graphs) || !graph_ok(&g->g, NULL))
      return CAPTURE_BROKEN("sim:%d: the graph list or a graph is broken", index);
  if (graphs != d->stats.live_graphs)
    return CAPTURE_BROKEN("sim:%d: %zu graphs counted, %zu found", index, d->stats.live_graphs, graphs);
  return MN_OK;
}

/* A range's max_gap is the largest gap of its subtree. */
static bool range_summary_ok(const mn__avl_node *n) {
  const sim_range *r = (const sim_range *)n;
  size_t m = r->gap, l = mn__sim_range_max_gap(n->left), g = mn__sim_range_max_gap(n->right);
  if (l > m) m = l;
  if (g > m) m = g;
  return r->max_gap == m;
}

mn_status mn_sim_check_invariants(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  size_t phys = 0, reservations = 0, g = mn__sim_cfg.granularity;
  uintptr_t lo = (uintptr_t)d->base, hi = lo + d->va_size;
  if (!mn__avl_check(&d->ranges, range_summary_ok))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: the range tree is broken", dev.index));
  uintptr_t prev_end = lo;
  for (const sim_range *r = (const sim_range *)mn__avl_first(&d->ranges); r; r = mn__sim_range_next(r)) {
    if (r->start < lo || r->size == 0 || r->size % g || r->start % g || r->size > hi - r->start)
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: range %p is outside the device", dev.index,
                                     (void *)r->start));
    if (r->start < prev_end || r->gap != r->start - prev_end)
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__,
                                     "sim:%d: range %p overlaps the one before it or its gap (%zu) is wrong",
                                     dev.index, (void *)r->start, r->gap));
    prev_end = r->start + r->size;
    if (r->import) {
      /* another process's memory: not counted */
    } else if (r->mapped) {
      reservations++;
      for (size_t k = 0; k < r->size / g; k++) phys += r->mapped[k] ? g : 0;
    } else {
      phys += r->size;
    }
  }
  if (phys != d->stats.mapped_bytes)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: mapped_bytes=%zu but ranges hold %zu",
                                   dev.index, d->stats.mapped_bytes, phys));
  if (reservations != d->stats.live_reservations)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: %zu reservations counted, %zu found",
                                   dev.index, d->stats.live_reservations, reservations));
  size_t streams = 0, events = 0;
  for (sim_stream *s = d->streams; s; s = s->next) {
    streams++;
    if (s->completed > s->queued || (s->head == NULL) != (s->completed == s->queued))
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: a stream's queue counts disagree", dev.index));
  }
  for (sim_event *e = d->events; e; e = e->next, events++)
    if (e->stream && (e->stream->refs == 0 || (e->stream->dead && e->stream->completed < e->target)))
      return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: an event's stream reference is broken",
                                     dev.index));
  if (streams != d->stats.live_streams || events != d->stats.live_events)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: live stream/event counts disagree", dev.index));
  st = capture_check(d, dev.index);
  return mn__sim_unlock_ret(d, st == MN_OK ? mn__sim_pool_check(d, dev.index) : st);
}
