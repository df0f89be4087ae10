/* allocators/allocator.c: the public dispatch of the allocator vtable (the
 * vtable's size and version, shared checks and the NVTX ranges first, then the
 * slot) and the per-device default allocator table (one mutex). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "allocators/caching_internal.h"
#include "runtime/nvtx.h"
#include "runtime/debug.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/sim_hook.h"

#define MN__ALLOC_MAX_DEVICES 64

/* ---- the vtable's size and version ------------------------------------------
 * A vtable compiled against an older header is shorter: a slot that ends
 * beyond vt->size is not there (NULL), whatever the memory after it holds.
 * After vtable_check has passed, the required slots (name, alloc, free: inside
 * MN_ALLOCATOR_VTABLE_MIN_SIZE) are read directly, every other one through MN__SLOT. */
#define MN__SLOT(vt, slot) \
  ((vt)->size >= offsetof(mn_allocator_vtable_t, slot) + sizeof((vt)->slot) ? (vt)->slot : NULL)

/* What, if anything, keeps vt from being dispatched: it must have a size that
 * covers the required slots, a version this library knows, and name, alloc
 * and free set. */
typedef enum { VT_OK, VT_NULL, VT_SIZE, VT_VERSION, VT_REQUIRED } vt_fault;

static inline vt_fault vtable_fault(const mn_allocator_vtable_t *vt) {
  if (!vt) return VT_NULL;
  if (vt->size < MN_ALLOCATOR_VTABLE_MIN_SIZE) return VT_SIZE;
  if (vt->version == 0 || vt->version > MN_ALLOCATOR_VTABLE_VERSION) return VT_VERSION;
  if (!vt->name || !vt->alloc || !vt->free) return VT_REQUIRED;
  return VT_OK;
}

/* For the void calls, which leave no error behind. */
static bool vtable_ok(const mn_allocator_vtable_t *vt) { return vtable_fault(vt) == VT_OK; }

/* MN_OK, or MN_ERR_INVALID_ARGUMENT with a message naming func and the fault. */
static __attribute__((noinline)) mn_status vtable_report(const char *func, const mn_allocator_vtable_t *vt) {
  switch (vtable_fault(vt)) {
    case VT_OK: return MN_OK;
    case VT_NULL: return mn__error(MN_ERR_INVALID_ARGUMENT, func, "the allocator has no vtable");
    case VT_SIZE:
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "allocator vtable size %u is smaller than its required part (%zu bytes: size, version, "
                       "name, alloc, free); set .size = sizeof(mn_allocator_vtable_t)",
                       (unsigned)vt->size, (size_t)MN_ALLOCATOR_VTABLE_MIN_SIZE);
    case VT_VERSION:
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "allocator vtable version %u is not one this library knows (1 to %d); set .version = "
                       "MN_ALLOCATOR_VTABLE_VERSION",
                       (unsigned)vt->version, MN_ALLOCATOR_VTABLE_VERSION);
    case VT_REQUIRED: break;
  }
  return mn__error(MN_ERR_INVALID_ARGUMENT, func, "allocator vtable \"%s\" lacks the required %s slot",
                   vt->name ? vt->name : "(null)", !vt->name ? "name" : !vt->alloc ? "alloc" : "free");
}

/* The check on every call: inline, the message only on failure. */
static inline mn_status vtable_check(const char *func, const mn_allocator_vtable_t *vt) {
  return __builtin_expect(vtable_fault(vt) == VT_OK, 1) ? MN_OK : vtable_report(func, vt);
}

#define MN__VTABLE_CHECK(a)                                       \
  do {                                                            \
    mn_status vst_ = vtable_check(__func__, (a)->vtable);         \
    if (vst_ != MN_OK) return vst_;                               \
  } while (0)

mn_status mn_allocator_init(mn_allocator_t *a, const mn_allocator_vtable_t *vtable, mn_device_t device) {
  MN__CHECK_ARG(a != NULL && vtable != NULL, "allocator and vtable must not be NULL");
  mn_status st = vtable_check(__func__, vtable);
  if (st != MN_OK) return st;
  st = mn_device_check(device);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  a->vtable = vtable;
  a->device = device;
  return MN_OK;
}

/* ---- NVTX ranges -----------------------------------------------------------
 * Every allocator's alloc, free and empty_cache opens its "mnemo.*" range here,
 * so one user call is one range whatever the allocator. Adaptors call their
 * upstream through this same dispatch: only the outermost call on a thread
 * opens a range (t_range_depth), so a stack of adaptors shows as one range. */
static _Thread_local int t_range_depth;

/* Returns whether it counted the call (ranges may be on); pass that to range_close. */
static bool range_open(const char *name, uint64_t nbytes) {
  if (!mn__nvtx_maybe_on()) return false;
  if (t_range_depth++ == 0) mn__nvtx_push(name, nbytes);
  return true;
}

static void range_close(bool opened) {
  if (opened && --t_range_depth == 0) mn__nvtx_pop();
}

/* The free payload: the block's size where the allocator can tell (asked only
 * while ranges are on and for the outermost call: size_of may take a lock). */
static uint64_t freed_bytes(mn_allocator_t *a, const void *ptr) {
  if (!mn__nvtx_maybe_on() || t_range_depth != 0 || !MN__SLOT(a->vtable, size_of) || !mn_nvtx_enabled()) return 0;
  return (uint64_t)a->vtable->size_of(a, ptr);
}

/* The empty_cache payload: the bytes reserved before, where the allocator keeps
 * statistics (asked only while ranges are on: get_stats may take a lock). */
static uint64_t reserved_bytes(mn_allocator_t *a) {
  if (!mn__nvtx_maybe_on() || t_range_depth != 0 || !MN__SLOT(a->vtable, get_stats) || !mn_nvtx_enabled()) return 0;
  mn_alloc_stats_t st;
  memset(&st, 0, sizeof st);
  st.size = (uint32_t)sizeof st;
  st.version = MN_ALLOC_STATS_VERSION;
  if (a->vtable->get_stats(a, &st) != MN_OK) return 0;
  int64_t r = st.reserved_bytes[MN_POOL_ALL].current;
  return r > 0 ? (uint64_t)r : 0;
}

/* MNEMO_DEBUG >= 2: the allocator's invariant checker after every operation;
 * a broken invariant aborts there, naming the operation. (A checker that has
 * no host memory to check with is let pass.) A check walks every block, so
 * an allocator holding n > 64 blocks is checked after every (n / 64)th
 * operation: the checks cost O(1) per operation amortized, not O(n). */
#if MNEMO_DEBUG >= 2
static _Atomic uint64_t g_debug_ops;

static void debug_check(mn_allocator_t *a, const char *op) {
  if (!MN__SLOT(a->vtable, check_invariants)) return;
  uint64_t n = atomic_fetch_add(&g_debug_ops, 1), every = 1;
  mn__error_saved_t keep; /* the operation's own message survives the check */
  mn__error_save(&keep);
  mn_alloc_stats_t stats;
  if (mn_allocator_get_stats(a, &stats) == MN_OK) {
    int64_t blocks = stats.allocation[MN_POOL_ALL].current + stats.segment[MN_POOL_ALL].current;
    if (blocks > 64) every = (uint64_t)blocks / 64;
  }
  if (n % every) {
    mn__error_restore(&keep);
    return;
  }
  mn_status st = a->vtable->check_invariants(a);
  if (st != MN_OK && st != MN_ERR_OUT_OF_MEMORY)
    mn__assert_fail(__FILE__, __LINE__, "check_invariants", "after %s on the %s allocator: %s", op,
                    a->vtable->name, mn_last_error());
  mn__error_restore(&keep);
}
#else
#define debug_check(a, op) ((void)0)
#endif

mn_status mn_allocator_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
  MN__VTABLE_CHECK(a);
  /* Host allocators (device CPU, e.g. the pinned pool) serve every device's streams. */
  if (stream && a->device.type != MN_DEVICE_CPU && !mn_device_equal(mn_stream_device(stream), a->device)) {
    char x[32], y[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "%s allocator given a stream of %s",
                     mn_device_format(a->device, x, sizeof x),
                     mn_device_format(mn_stream_device(stream), y, sizeof y));
  }
  if (nbytes == 0) {
    *out = NULL;
    return MN_OK;
  }
  void *p = NULL;
  bool opened = range_open("mnemo.alloc", nbytes);
  mn_status st = a->vtable->alloc(a, nbytes, stream, &p);
  range_close(opened);
  debug_check(a, "alloc");
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = p;
  return MN_OK;
}

mn_status mn_allocator_free(mn_allocator_t *a, void *ptr) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!ptr) return MN_OK;
  bool opened = range_open("mnemo.free", freed_bytes(a, ptr));
  mn_status st = a->vtable->free(a, ptr);
  range_close(opened);
  debug_check(a, "free");
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  MN__CHECK_ARG(a != NULL && ptr != NULL && stream != NULL, "allocator, ptr and stream must not be NULL");
  MN__VTABLE_CHECK(a);
  if (a->device.type != MN_DEVICE_CPU && !mn_device_equal(mn_stream_device(stream), a->device))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "stream is on another device than the allocator");
  if (!MN__SLOT(a->vtable, record_stream)) return MN_OK;
  mn_status st = a->vtable->record_stream(a, ptr, stream);
  debug_check(a, "record_stream");
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_empty_cache(mn_allocator_t *a) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!MN__SLOT(a->vtable, empty_cache)) return MN_OK;
  bool opened = range_open("mnemo.empty_cache", reserved_bytes(a));
  mn_status st = a->vtable->empty_cache(a);
  range_close(opened);
  debug_check(a, "empty_cache");
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!MN__SLOT(a->vtable, get_stats))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "the %s allocator keeps no statistics", a->vtable->name);
  mn_alloc_stats_t st;
  memset(&st, 0, sizeof st);
  st.size = (uint32_t)sizeof st;
  st.version = MN_ALLOC_STATS_VERSION;
  st.max_split_size = -1;
  mn_status rc = a->vtable->get_stats(a, &st);
  if (rc != MN_OK) return mn__error_wrap(rc, __func__);
  *out = st;
  return MN_OK;
}

mn_status mn_allocator_reset_peak(mn_allocator_t *a) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!MN__SLOT(a->vtable, reset_peak))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "the %s allocator keeps no statistics", a->vtable->name);
  mn_status st = a->vtable->reset_peak(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_snapshot(mn_allocator_t *a, mn_snapshot_t **out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!MN__SLOT(a->vtable, snapshot))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "the %s allocator has no snapshots", a->vtable->name);
  mn_snapshot_t *snap = NULL;
  mn_status st = a->vtable->snapshot(a, &snap);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = snap;
  return MN_OK;
}

void mn_snapshot_free(mn_snapshot_t *snap) {
  if (!snap) return;
  for (size_t i = 0; i < snap->nsegments; i++) free(snap->segments[i].blocks);
  free(snap->segments);
  free(snap);
}

mn_status mn_allocator_check_invariants(mn_allocator_t *a) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  MN__VTABLE_CHECK(a);
  if (!MN__SLOT(a->vtable, check_invariants)) return MN_OK;
  mn_status st = a->vtable->check_invariants(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

void mn_allocator_destroy(mn_allocator_t *a) {
  if (a && vtable_ok(a->vtable) && MN__SLOT(a->vtable, destroy)) a->vtable->destroy(a);
}

const char *mn_allocator_name(const mn_allocator_t *a) {
  if (!a) return "none";
  return vtable_ok(a->vtable) ? a->vtable->name : "invalid";
}

mn_device_t mn_allocator_device(const mn_allocator_t *a) { return a->device; }

size_t mn_allocator_size_of(mn_allocator_t *a, const void *ptr) {
  if (!a || !ptr || !vtable_ok(a->vtable) || !MN__SLOT(a->vtable, size_of)) return 0;
  return a->vtable->size_of(a, ptr);
}

/* ---- defaults ------------------------------------------------------------ */

static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_allocator_t *g_builtin[MN_DEVICE_TYPE_COUNT][MN__ALLOC_MAX_DEVICES];
static mn_allocator_t *g_user[MN_DEVICE_TYPE_COUNT][MN__ALLOC_MAX_DEVICES];

static mn_status default_slot_check(const char *func, mn_device_t dev) {
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (dev.index >= MN__ALLOC_MAX_DEVICES)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "device index %d >= %d", dev.index, MN__ALLOC_MAX_DEVICES);
  return MN_OK;
}

/* The built-in default: the naive allocator on the CPU and meta; on SIM and CUDA a caching
 * allocator configured from MNEMO_ALLOC_CONF (PyTorch's PYTORCH_CUDA_ALLOC_CONF
 * syntax). A bad MNEMO_ALLOC_CONF fails the call, naming the variable. */
static mn_status default_create(mn_device_t dev, mn_allocator_t **out) {
  /* The meta device's default counts bytes and holds no cache (a dry run of
   * the caching allocator is asked for explicitly, mn_caching_allocator_create). */
  if (dev.type == MN_DEVICE_CPU || dev.type == MN_DEVICE_META) return mn_naive_allocator_create(dev, out);
  mn_caching_config_t cfg = mn_caching_config_default();
  const char *env = mn__env(MN__ENV_ALLOC_CONF);
  if (env && *env && mn_caching_config_parse(env, &cfg) != MN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", mn__last_error_detail());
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "MNEMO_ALLOC_CONF \"%.200s\": %s", env, why);
  }
  if (strcmp(cfg.backend, "cudaMallocAsync") == 0) return mn_async_allocator_create(dev, out);
  return mn_caching_allocator_create(dev, &cfg, out);
}

/* mn_sim_configure's hook: before, every built-in SIM default gives back its
 * memory (all or none is asked: a refusal comes before any cache is emptied);
 * after, each re-reads its device. Defaults set by the user are theirs to manage.
 * Holds g_default_lock throughout, so no default is created or replaced meanwhile. */
static mn_status sim_defaults_hook(bool before, const char *func) {
  mn_allocator_t **slot = g_builtin[MN_DEVICE_SIM];
  int count = 0; /* defaults of devices gone with an earlier configure gave everything back then */
  mn_status st = mn_device_count(MN_DEVICE_SIM, &count);
  if (st != MN_OK) return mn__error_wrap(st, func);
  if (count > MN__ALLOC_MAX_DEVICES) count = MN__ALLOC_MAX_DEVICES;
  pthread_mutex_lock(&g_default_lock);
  if (before) {
    for (int i = 0; i < count && st == MN_OK; i++) {
      mn_alloc_stats_t s;
      if (slot[i] && MN__SLOT(slot[i]->vtable, get_stats) && mn_allocator_get_stats(slot[i], &s) == MN_OK &&
          s.allocation[MN_POOL_ALL].current > 0)
        st = mn__error(MN_ERR_INVALID_STATE, func, "the default allocator of sim:%d still has %lld live allocations",
                       i, (long long)s.allocation[MN_POOL_ALL].current);
    }
  }
  for (int i = 0; i < count && st == MN_OK; i++)
    if (slot[i]) st = before ? mn__caching_release_device(slot[i], func) : mn__caching_refresh_device(slot[i], func);
  pthread_mutex_unlock(&g_default_lock);
  return st;
}

mn_status mn_allocator_get_default(mn_device_t dev, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = default_slot_check(__func__, dev);
  if (st != MN_OK) return st;
  pthread_mutex_lock(&g_default_lock);
  mn_allocator_t *a = g_user[dev.type][dev.index];
  if (!a) {
    if (!g_builtin[dev.type][dev.index]) {
      st = default_create(dev, &g_builtin[dev.type][dev.index]);
      if (st == MN_OK && dev.type == MN_DEVICE_SIM) mn__sim_set_configure_hook(sim_defaults_hook);
    }
    a = g_builtin[dev.type][dev.index];
  }
  pthread_mutex_unlock(&g_default_lock);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = a;
  return MN_OK;
}

mn_status mn_allocator_set_default(mn_device_t dev, mn_allocator_t *a) {
  mn_status st = default_slot_check(__func__, dev);
  if (st != MN_OK) return st;
  if (a) {
    st = vtable_check(__func__, a->vtable);
    if (st != MN_OK) return st;
  }
  if (a && !mn_device_equal(a->device, dev))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "allocator is for another device");
  pthread_mutex_lock(&g_default_lock);
  g_user[dev.type][dev.index] = a;
  pthread_mutex_unlock(&g_default_lock);
  return MN_OK;
}

const char *mn_trace_action_name(mn_trace_action action) {
  static const char *names[MN_TRACE_ACTION_COUNT] = {
      "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
      "segment_map", "segment_unmap", "empty_cache", "oom"};
  return (unsigned)action < MN_TRACE_ACTION_COUNT ? names[action] : "invalid";
}
