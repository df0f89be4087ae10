/* runtime/events.h: the allocation-event sink's default: the sink a new
 * caching allocator starts with, asked of a provider a higher layer registers
 * (the profiling layer's process-wide recorder, MNEMO_TRACE). Lets allocators
 * feed a recorder without calling the layer that owns it. Thread-safe: the
 * provider is one atomic pointer; the provider itself must be thread-safe. */
#ifndef MNEMO_RUNTIME_EVENTS_H
#define MNEMO_RUNTIME_EVENTS_H

#include <stdbool.h>

#include "mnemo/allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *fn and *user with the default sink and returns true, or returns
 * false (no sink: nothing is recorded by default). */
typedef bool (*mn__event_sink_provider_fn)(mn_trace_sink_fn *fn, void **user);

/* Registers the provider (NULL: none). The last registration wins. */
void mn__event_sink_set_provider(mn__event_sink_provider_fn provider);
/* The default sink for a new allocator: asks the provider, if any. */
bool mn__event_sink_default(mn_trace_sink_fn *fn, void **user);
/* Declares fn safe to call from several threads at once, for any `user`
 * (the profiling layer's ring recorder): an allocator may then call it from
 * paths that hold only part of its state's locks (the caching allocator's
 * lanes), its events of one stream still in order. Other sinks are called
 * one at a time per allocator. At most 8 are kept; false when full. */
bool mn__event_sink_mark_concurrent(mn_trace_sink_fn fn);
bool mn__event_sink_is_concurrent(mn_trace_sink_fn fn);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_RUNTIME_EVENTS_H */
