/* allocators/defaults.c: the per-device default allocator table: the built-in
 * default each device gets on first use (the naive allocator on the CPU and
 * meta, a caching or stream-ordered pool allocator on SIM and CUDA), the one a
 * user sets, and mn_sim_configure's hook over the SIM defaults. Above the
 * allocators it creates and the dispatch (allocators/allocator.c), which never
 * calls up here. Thread-safe: one mutex guards the table. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "allocators/allocator_internal.h"
#include "allocators/caching_internal.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/sim_hook.h"

#define MN__ALLOC_MAX_DEVICES 64

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
    st = mn__allocator_vtable_check(__func__, a->vtable);
    if (st != MN_OK) return st;
  }
  if (a && !mn_device_equal(a->device, dev))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "allocator is for another device");
  pthread_mutex_lock(&g_default_lock);
  g_user[dev.type][dev.index] = a;
  pthread_mutex_unlock(&g_default_lock);
  return MN_OK;
}
