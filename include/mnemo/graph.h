/* mnemo/graph.h: stream capture and graphs (CUDA graphs; recorded and replayed
 * on SIM). Work queued on a capturing stream is recorded into a graph instead of
 * running; the graph can then be launched any number of times. Threading: a
 * graph may be launched from any thread; one thread ends a capture. */
#ifndef MNEMO_GRAPH_H
#define MNEMO_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_graph_s mn_graph_t;

typedef enum mn_capture_status {
  MN_CAPTURE_NONE = 0,       /* the stream is not capturing */
  MN_CAPTURE_ACTIVE = 1,     /* capturing */
  MN_CAPTURE_INVALIDATED = 2 /* capturing, but an illegal call broke the capture: end it and discard */
} mn_capture_status;

/* Starts capturing `stream` (not a default stream: MN_ERR_INVALID_ARGUMENT,
 * as CUDA's legacy stream; MN_ERR_INVALID_STATE when it already captures).
 * From here on, copies, sets, host functions and event records/waits queued
 * on it are recorded, not run. A stream that waits on an event recorded in
 * the capture joins it (same capture id) until the capture ends. While any
 * capture is active on a device, calls that would synchronize it (device or
 * capturing-stream synchronize, raw free, unmap) fail with
 * MN_ERR_INVALID_STATE and invalidate the capture, as CUDA's global mode. */
MN_API MN_NODISCARD mn_status mn_stream_begin_capture(mn_stream_t *stream);
/* Ends the capture begun on `stream`; *out = the graph (caller destroys it).
 * An invalidated capture ends with MN_ERR_INVALID_STATE and no graph; the
 * streams are not capturing afterwards either way. */
MN_API MN_NODISCARD mn_status mn_stream_end_capture(mn_stream_t *stream, mn_graph_t **out);
/* The stream's capture status and (optional) its capture id (0 when none;
 * ids are process-unique and never reused). */
MN_API MN_NODISCARD mn_status mn_stream_capture_status(mn_stream_t *stream, mn_capture_status *status,
                                                       uint64_t *capture_id);
/* Queues the graph's recorded work on `stream` (a stream of the graph's
 * device; not a capturing one), in the recorded dependency order. */
MN_API MN_NODISCARD mn_status mn_graph_launch(mn_graph_t *graph, mn_stream_t *stream);
/* Destroys a graph (launches already queued complete). NULL is a no-op. */
MN_API MN_NODISCARD mn_status mn_graph_destroy(mn_graph_t *graph);
MN_API mn_device_t mn_graph_device(const mn_graph_t *graph);
/* Operations recorded in the graph (copies, sets, host functions, event nodes). */
MN_API size_t mn_graph_node_count(const mn_graph_t *graph);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_GRAPH_H */
