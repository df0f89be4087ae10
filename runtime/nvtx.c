/* runtime/nvtx.c: NVTX ranges in the "mnemo" domain, through the toolkit's
 * header-only nvtx3; a relaxed atomic flag makes them free when switched off. Thread-safe. */
#include <stdatomic.h>
#include <stdlib.h>

#include "mnemo/profiling.h"
#include "runtime/env.h"
#include "runtime/nvtx.h"

#ifdef MNEMO_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

/* -1: not yet read from the environment; 0 off; 1 on. */
atomic_int mn__nvtx_state = -1;
static atomic_uint_least64_t g_pushes, g_pops;
/* Ranges this thread opened while enabled and has not closed: a pop pairs
 * with a push only when one is open, so switching off mid-range stays balanced. */
static _Thread_local int t_depth;
static _Thread_local const char *t_last_name;
static _Thread_local uint64_t t_last_nbytes;

static bool nvtx_on(void) {
  int v = atomic_load_explicit(&mn__nvtx_state, memory_order_relaxed);
  if (v < 0) {
    const char *e = mn__env(MN__ENV_NVTX);
    v = (e && e[0] == '1') ? 1 : 0;
    int expected = -1; /* a concurrent mn_nvtx_set_enabled wins */
    if (!atomic_compare_exchange_strong_explicit(&mn__nvtx_state, &expected, v, memory_order_relaxed,
                                                 memory_order_relaxed))
      v = expected;
  }
  return v == 1;
}

void mn_nvtx_set_enabled(bool on) { atomic_store_explicit(&mn__nvtx_state, on ? 1 : 0, memory_order_relaxed); }
bool mn_nvtx_enabled(void) { return nvtx_on(); }

void mn_nvtx_get_counters(mn_nvtx_counters_t *out) {
  if (!out) return;
  out->pushes = atomic_load_explicit(&g_pushes, memory_order_relaxed);
  out->pops = atomic_load_explicit(&g_pops, memory_order_relaxed);
  out->thread_depth = t_depth;
  out->thread_last_name = t_last_name;
  out->thread_last_nbytes = t_last_nbytes;
}

#ifdef MNEMO_HAVE_CUDA
static nvtxDomainHandle_t nvtx_domain(void) {
  static _Atomic(nvtxDomainHandle_t) domain;
  nvtxDomainHandle_t d = atomic_load(&domain);
  if (!d) {
    nvtxDomainHandle_t fresh = nvtxDomainCreateA("mnemo"); /* the same handle for the same name */
    nvtxDomainHandle_t expected = NULL;
    d = atomic_compare_exchange_strong(&domain, &expected, fresh) ? fresh : expected;
  }
  return d;
}
#endif

void mn__nvtx_push(const char *name, uint64_t nbytes) {
  if (!nvtx_on()) return;
  t_depth++;
  t_last_name = name;
  t_last_nbytes = nbytes;
  atomic_fetch_add_explicit(&g_pushes, 1, memory_order_relaxed);
#ifdef MNEMO_HAVE_CUDA
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = nbytes;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
#else
  (void)name;
  (void)nbytes;
#endif
}

void mn__nvtx_pop(void) {
  if (t_depth == 0) return; /* opened while off: nothing to close */
  t_depth--;
  atomic_fetch_add_explicit(&g_pops, 1, memory_order_relaxed);
#ifdef MNEMO_HAVE_CUDA
  nvtxDomainRangePop(nvtx_domain());
#endif
}
