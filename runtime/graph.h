/* runtime/graph.h: what the layers above the runtime need of stream capture
 * beyond mnemo/graph.h: hooks run when a graph is destroyed, capture markers
 * and the "has this stream joined that point" query, and a cheap capture id
 * (the caching allocator's private pools for captures). Thread-safe as the
 * public calls: a graph's hooks are added by the thread that owns the graph
 * (not concurrently with mn_graph_destroy); the capture calls take the
 * device's own lock, capture_id none where it can. */
#ifndef MNEMO_RUNTIME_GRAPH_H
#define MNEMO_RUNTIME_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "mnemo/graph.h"

/* Adds a hook that mn_graph_destroy runs (last added first, before the
 * graph's memory is freed; the graph is still valid in it). Out of host
 * memory: MN_ERR_OUT_OF_MEMORY, nothing added. */
mn_status mn__graph_on_destroy(mn_graph_t *g, void (*fn)(void *arg), void *arg);

/* On a capturing stream: an empty node depending on the stream's frontier
 * becomes its frontier; *marker = its id (unique within the capture, never
 * 0). Not capturing: MN_ERR_INVALID_ARGUMENT; an invalidated capture:
 * MN_ERR_INVALID_STATE. */
mn_status mn__capture_marker(mn_stream_t *s, uint64_t *marker);
/* *reached = whether marker node `marker` of s's capture is in or an
 * ancestor of s's frontier: s made the marker, or joined (waited on an event
 * recorded on) the stream it was made on after it was made. Not capturing,
 * or not a marker of s's capture: MN_ERR_INVALID_ARGUMENT. Cost: the nodes
 * between the frontier and the marker. */
mn_status mn__capture_reaches(mn_stream_t *s, uint64_t marker, bool *reached);
/* *id = s's capture id, 0 when it does not capture (always 0 for default
 * streams and CPU streams). Lock-free on SIM; one driver query on CUDA. */
mn_status mn__stream_capture_id(mn_stream_t *s, uint64_t *id);

#endif /* MNEMO_RUNTIME_GRAPH_H */
