/* allocators/allocator.c: the public dispatch of the allocator vtable (the
 * vtable's size and version, shared checks and the NVTX ranges first, then the
 * slot), below every allocator (the per-device defaults, which create them, are
 * allocators/defaults.c). Thread-safe: no state but the debug-tier counter
 * and the trusted vtable (atomics) and each thread's NVTX depth. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "allocators/allocator_internal.h"
#include "runtime/nvtx.h"
#include "runtime/debug.h"
#include "runtime/error.h"

/* ---- the vtable's size and version ------------------------------------------
 * A vtable compiled against an older header is shorter: a slot that ends
 * beyond vt->size is not there (NULL), whatever the memory after it holds.
 * After vtable_check has passed, the required slots (name, alloc, free: inside
 * MN_ALLOCATOR_VTABLE_MIN_SIZE) are read directly, every other one through
 * MN__SLOT (allocators/allocator_internal.h). */

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

/* The library's own hot vtable (the caching allocator's), told by
 * mn__allocator_vtable_trust: const and valid, so its calls skip the slot
 * checks and the copy of the result (it leaves *out alone on failure). */
static _Atomic(const mn_allocator_vtable_t *) g_trusted;

void mn__allocator_vtable_trust(const mn_allocator_vtable_t *vt) {
  if (vtable_fault(vt) == VT_OK) atomic_store_explicit(&g_trusted, vt, memory_order_relaxed);
}

static inline bool vtable_trusted(const mn_allocator_vtable_t *vt) {
  return vt == atomic_load_explicit(&g_trusted, memory_order_relaxed);
}

/* The check on every call: inline, the message only on failure. */
static inline mn_status vtable_check(const char *func, const mn_allocator_vtable_t *vt) {
  return __builtin_expect(vtable_trusted(vt) || vtable_fault(vt) == VT_OK, 1) ? MN_OK : vtable_report(func, vt);
}

#define MN__VTABLE_CHECK(a)                                       \
  do {                                                            \
    mn_status vst_ = vtable_check(__func__, (a)->vtable);         \
    if (vst_ != MN_OK) return vst_;                               \
  } while (0)

mn_status mn__allocator_vtable_check(const char *func, const mn_allocator_vtable_t *vt) {
  return vtable_check(func, vt);
}

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

/* Whether stream may serve a's allocations: host allocators (device CPU, e.g.
 * the pinned pool) serve every device's streams, the others their own device's. */
static inline bool stream_fits(const mn_allocator_t *a, mn_stream_t *stream) {
  return a->device.type == MN_DEVICE_CPU || mn_device_equal(mn_stream_device(stream), a->device);
}

static __attribute__((noinline)) mn_status stream_misfit(const mn_allocator_t *a, mn_stream_t *stream) {
  char x[32], y[32];
  return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_allocator_alloc", "%s allocator given a stream of %s",
                   mn_device_format(a->device, x, sizeof x), mn_device_format(mn_stream_device(stream), y, sizeof y));
}

mn_status mn_allocator_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
#if MNEMO_DEBUG < 2
  /* The trusted vtable with ranges off: no slot checks, no range, no check
   * after, and its alloc writes *out only on success, so no copy through a
   * local. The same argument checks, in the same order. */
  const mn_allocator_vtable_t *vt = a->vtable;
  if (__builtin_expect(vtable_trusted(vt) && !mn__nvtx_maybe_on(), 1)) {
    if (__builtin_expect(stream != NULL, 0) && !stream_fits(a, stream)) return stream_misfit(a, stream);
    if (nbytes == 0) {
      *out = NULL;
      return MN_OK;
    }
    mn_status st = vt->alloc(a, nbytes, stream, out);
    return __builtin_expect(st == MN_OK, 1) ? MN_OK : mn__error_wrap(st, __func__);
  }
#endif
  MN__VTABLE_CHECK(a);
  if (stream && !stream_fits(a, stream)) return stream_misfit(a, stream);
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
#if MNEMO_DEBUG < 2
  const mn_allocator_vtable_t *vt = a->vtable;
  if (__builtin_expect(vtable_trusted(vt) && !mn__nvtx_maybe_on(), 1)) {
    if (!ptr) return MN_OK;
    mn_status st = vt->free(a, ptr);
    return __builtin_expect(st == MN_OK, 1) ? MN_OK : mn__error_wrap(st, __func__);
  }
#endif
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

const char *mn_trace_action_name(mn_trace_action action) {
  static const char *names[MN_TRACE_ACTION_COUNT] = {
      "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
      "segment_map", "segment_unmap", "empty_cache", "oom"};
  return (unsigned)action < MN_TRACE_ACTION_COUNT ? names[action] : "invalid";
}
