/* runtime/events.c: the default allocation-event sink (runtime/events.h): one
 * atomic provider pointer, set by the layer that owns a recorder. Thread-safe. */
#include <stdatomic.h>
#include <stddef.h>

#include "runtime/events.h"

static _Atomic(mn__event_sink_provider_fn) g_provider;

void mn__event_sink_set_provider(mn__event_sink_provider_fn provider) { atomic_store(&g_provider, provider); }

bool mn__event_sink_default(mn_trace_sink_fn *fn, void **user) {
  mn__event_sink_provider_fn p = atomic_load(&g_provider);
  *fn = NULL;
  *user = NULL;
  return p != NULL && p(fn, user) && *fn != NULL;
}
