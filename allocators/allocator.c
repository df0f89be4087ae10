/* allocators/allocator.c: the public dispatch of the allocator vtable (shared
 * checks and the NVTX ranges first, then the slot) and the per-device default
 * allocator table (one mutex). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "allocators/caching_internal.h"
#include "runtime/nvtx.h"
#include "runtime/error.h"
#include "runtime/sim_internal.h"

#define MN__ALLOC_MAX_DEVICES 64

/* ---- NVTX ranges -----------------------------------------------------------
 * Every allocator's alloc, free and empty_cache opens its "mnemo.*" range here,
 * so one user call is one range whatever the allocator. Adaptors call their
 * upstream through this same dispatch: only the outermost call on a thread
 * opens a range (t_range_depth), so a stack of adaptors shows as one range. */
static _Thread_local int t_range_depth;

static void range_open(const char *name, uint64_t nbytes) {
  if (t_range_depth++ == 0) mn__nvtx_push(name, nbytes);
}

static void range_close(void) {
  if (--t_range_depth == 0) mn__nvtx_pop();
}

/* The free payload: the block's size where the allocator can tell (asked only
 * while ranges are on and for the outermost call: size_of may take a lock). */
static uint64_t freed_bytes(mn_allocator_t *a, const void *ptr) {
  if (t_range_depth != 0 || !a->vtable->size_of || !mn_nvtx_enabled()) return 0;
  return (uint64_t)a->vtable->size_of(a, ptr);
}

/* The empty_cache payload: the bytes reserved before, where the allocator keeps
 * statistics (asked only while ranges are on: get_stats may take a lock). */
static uint64_t reserved_bytes(mn_allocator_t *a) {
  if (t_range_depth != 0 || !a->vtable->get_stats || !mn_nvtx_enabled()) return 0;
  mn_alloc_stats_t st;
  memset(&st, 0, sizeof st);
  st.size = (uint32_t)sizeof st;
  st.version = MN_ALLOC_STATS_VERSION;
  if (a->vtable->get_stats(a, &st) != MN_OK) return 0;
  int64_t r = st.reserved_bytes[MN_POOL_ALL].current;
  return r > 0 ? (uint64_t)r : 0;
}

mn_status mn_allocator_alloc(mn_allocator_t *a, size_t nbytes, mn_stream_t *stream, void **out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
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
  range_open("mnemo.alloc", nbytes);
  mn_status st = a->vtable->alloc(a, nbytes, stream, &p);
  range_close();
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = p;
  return MN_OK;
}

mn_status mn_allocator_free(mn_allocator_t *a, void *ptr) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  if (!ptr) return MN_OK;
  range_open("mnemo.free", freed_bytes(a, ptr));
  mn_status st = a->vtable->free(a, ptr);
  range_close();
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_record_stream(mn_allocator_t *a, void *ptr, mn_stream_t *stream) {
  MN__CHECK_ARG(a != NULL && ptr != NULL && stream != NULL, "allocator, ptr and stream must not be NULL");
  if (a->device.type != MN_DEVICE_CPU && !mn_device_equal(mn_stream_device(stream), a->device))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "stream is on another device than the allocator");
  if (!a->vtable->record_stream) return MN_OK;
  mn_status st = a->vtable->record_stream(a, ptr, stream);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_empty_cache(mn_allocator_t *a) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  if (!a->vtable->empty_cache) return MN_OK;
  range_open("mnemo.empty_cache", reserved_bytes(a));
  mn_status st = a->vtable->empty_cache(a);
  range_close();
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_get_stats(mn_allocator_t *a, mn_alloc_stats_t *out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
  if (!a->vtable->get_stats)
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
  if (!a->vtable->reset_peak)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "the %s allocator keeps no statistics", a->vtable->name);
  mn_status st = a->vtable->reset_peak(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_allocator_snapshot(mn_allocator_t *a, mn_snapshot_t **out) {
  MN__CHECK_ARG(a != NULL && out != NULL, "allocator and out must not be NULL");
  if (!a->vtable->snapshot)
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
  if (!a->vtable->check_invariants) return MN_OK;
  mn_status st = a->vtable->check_invariants(a);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

void mn_allocator_destroy(mn_allocator_t *a) {
  if (a && a->vtable->destroy) a->vtable->destroy(a);
}

const char *mn_allocator_name(const mn_allocator_t *a) { return a ? a->vtable->name : "none"; }
mn_device_t mn_allocator_device(const mn_allocator_t *a) { return a->device; }

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

/* The built-in default: the naive allocator on the CPU; on SIM and CUDA a caching
 * allocator configured from MNEMO_ALLOC_CONF (PyTorch's PYTORCH_CUDA_ALLOC_CONF
 * syntax). A bad MNEMO_ALLOC_CONF fails the call, naming the variable. */
static mn_status default_create(mn_device_t dev, mn_allocator_t **out) {
  if (dev.type == MN_DEVICE_CPU) return mn_naive_allocator_create(dev, out);
  mn_caching_config_t cfg = mn_caching_config_default();
  const char *env = getenv("MNEMO_ALLOC_CONF");
  if (env && *env && mn_caching_config_parse(env, &cfg) != MN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", mn_last_error());
    return mn__error(MN_ERR_INVALID_ARGUMENT, "MNEMO_ALLOC_CONF", "\"%.200s\": %s", env, why);
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
      if (slot[i] && slot[i]->vtable->get_stats && mn_allocator_get_stats(slot[i], &s) == MN_OK &&
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
