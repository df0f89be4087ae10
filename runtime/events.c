/* runtime/events.c: the default allocation-event sink (runtime/events.h): one
 * atomic provider pointer, set by the layer that owns a recorder. Thread-safe. */
#include <stdatomic.h>
#include <stddef.h>

#include "runtime/events.h"

static _Atomic(mn__event_sink_provider_fn) g_provider;
#define MAX_CONCURRENT 8
static _Atomic(mn_trace_sink_fn) g_concurrent[MAX_CONCURRENT];

bool mn__event_sink_mark_concurrent(mn_trace_sink_fn fn) {
  if (!fn) return false;
  for (int i = 0; i < MAX_CONCURRENT; i++) {
    mn_trace_sink_fn expected = NULL;
    if (atomic_load(&g_concurrent[i]) == fn) return true;
    if (atomic_compare_exchange_strong(&g_concurrent[i], &expected, fn) || expected == fn) return true;
  }
  return false;
}

bool mn__event_sink_is_concurrent(mn_trace_sink_fn fn) {
  for (int i = 0; fn && i < MAX_CONCURRENT; i++)
    if (atomic_load(&g_concurrent[i]) == fn) return true;
  return false;
}

void mn__event_sink_set_provider(mn__event_sink_provider_fn provider) { atomic_store(&g_provider, provider); }

bool mn__event_sink_default(mn_trace_sink_fn *fn, void **user) {
  mn__event_sink_provider_fn p = atomic_load(&g_provider);
  *fn = NULL;
  *user = NULL;
  return p != NULL && p(fn, user) && *fn != NULL;
}
