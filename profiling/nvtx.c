/* profiling/nvtx.c: NVTX ranges in the "mnemo" domain, through the toolkit's
 * header-only nvtx3; a relaxed atomic flag makes them free when switched off. */
#include <stdatomic.h>
#include <stdlib.h>

#include "profiling/nvtx.h"

#ifdef MNEMO_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

/* -1: not yet read from the environment; 0 off; 1 on. */
static atomic_int g_nvtx_on = -1;

static bool nvtx_on(void) {
  int v = atomic_load_explicit(&g_nvtx_on, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("MNEMO_NVTX");
    v = (e && e[0] == '1') ? 1 : 0;
    atomic_store_explicit(&g_nvtx_on, v, memory_order_relaxed);
  }
  return v == 1;
}

void mn__nvtx_enable(bool on) { atomic_store_explicit(&g_nvtx_on, on ? 1 : 0, memory_order_relaxed); }

#ifdef MNEMO_HAVE_CUDA
static nvtxDomainHandle_t nvtx_domain(void) {
  static _Atomic(nvtxDomainHandle_t) domain;
  nvtxDomainHandle_t d = atomic_load(&domain);
  if (!d) {
    d = nvtxDomainCreateA("mnemo");
    atomic_store(&domain, d);
  }
  return d;
}
#endif

void mn__nvtx_push(const char *name, uint64_t nbytes) {
  if (!nvtx_on()) return;
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
  if (!nvtx_on()) return;
#ifdef MNEMO_HAVE_CUDA
  nvtxDomainRangePop(nvtx_domain());
#endif
}
