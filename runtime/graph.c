/* runtime/graph.c: stream capture and graphs (mnemo/graph.h, runtime/graph.h):
 * argument checks, then the device's backend slots. A graph is a backend
 * handle plus its device, operation count and destroy hooks. Threading: the
 * backends lock their own state; a graph is immutable once made, so launches
 * from any thread are safe; hooks are added by the graph's owner, never
 * concurrently with its destroy. */
#include <stdlib.h>

#include "mnemo/graph.h"
#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/hostmem.h"

typedef struct mn__graph_hook {
  void (*fn)(void *arg);
  void *arg;
} mn__graph_hook;

struct mn_graph_s {
  mn_device_t device;
  void *handle; /* the backend's graph */
  size_t nodes;
  mn__graph_hook *hooks;
  size_t nhooks;
};

/* The stream's backend when it supports capture, else NOT_SUPPORTED. */
static mn_status capture_backend(const char *func, mn_stream_t *s, const mn__backend_t **out) {
  if (!s) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream must not be NULL");
  const mn__backend_t *b = mn__backend_for(s->device.type);
  if (!b || !b->capture_begin) {
    char dev[32];
    return mn__error(MN_ERR_NOT_SUPPORTED, func,
                     "%s has no stream capture or graphs (CUDA and SIM devices have)",
                     mn_device_format(s->device, dev, sizeof dev));
  }
  *out = b;
  return MN_OK;
}

mn_status mn_stream_begin_capture(mn_stream_t *stream) {
  const mn__backend_t *b;
  mn_status st = capture_backend(__func__, stream, &b);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(!stream->is_default,
                "the default stream cannot be captured (as CUDA's legacy stream); capture a created stream");
  st = b->capture_begin(stream->device.index, stream->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_stream_end_capture(mn_stream_t *stream, mn_graph_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  const mn__backend_t *b;
  mn_status st = capture_backend(__func__, stream, &b);
  if (st != MN_OK) return st;
  if (stream->is_default)
    return mn__error(MN_ERR_INVALID_STATE, __func__, "the default stream never captures");
  /* made first: out of host memory leaves the capture going */
  mn_graph_t *g = mn__calloc(1, sizeof *g);
  if (!g) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a graph");
  st = b->capture_end(stream->device.index, stream->handle, &g->handle, &g->nodes);
  if (st != MN_OK) {
    free(g);
    return mn__error_wrap(st, __func__);
  }
  g->device = stream->device;
  *out = g;
  return MN_OK;
}

mn_status mn_stream_capture_status(mn_stream_t *stream, mn_capture_status *status, uint64_t *capture_id) {
  MN__CHECK_ARG(stream != NULL && status != NULL, "stream and status must not be NULL");
  const mn__backend_t *b = mn__backend_for(stream->device.type);
  mn_capture_status cs = MN_CAPTURE_NONE;
  uint64_t id = 0;
  if (b && b->capture_status && !stream->is_default) { /* others never capture */
    mn_status st = b->capture_status(stream->device.index, stream->handle, &cs, &id);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  }
  *status = cs;
  if (capture_id) *capture_id = id;
  return MN_OK;
}

mn_status mn_graph_launch(mn_graph_t *graph, mn_stream_t *stream) {
  MN__CHECK_ARG(graph != NULL && stream != NULL, "graph and stream must not be NULL");
  if (!mn_device_equal(graph->device, stream->device)) {
    char a[32], c[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "a graph of %s launched on a stream of %s",
                     mn_device_format(graph->device, a, sizeof a), mn_device_format(stream->device, c, sizeof c));
  }
  mn_status st = mn__backend_for(graph->device.type)->graph_launch(graph->device.index, graph->handle, stream->handle);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_graph_destroy(mn_graph_t *graph) {
  if (!graph) return MN_OK;
  for (size_t i = graph->nhooks; i-- > 0;) graph->hooks[i].fn(graph->hooks[i].arg);
  mn_status st = mn__backend_for(graph->device.type)->graph_destroy(graph->device.index, graph->handle);
  free(graph->hooks);
  free(graph);
  /* a backend that failed to free its graph cannot be retried: the handle is gone either way */
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_device_t mn_graph_device(const mn_graph_t *graph) {
  return graph ? graph->device : (mn_device_t){.type = MN_DEVICE_CPU, .index = 0};
}

size_t mn_graph_node_count(const mn_graph_t *graph) { return graph ? graph->nodes : 0; }

/* ---- internal (runtime/graph.h) ---------------------------------------------- */

mn_status mn__graph_on_destroy(mn_graph_t *g, void (*fn)(void *arg), void *arg) {
  MN__CHECK_ARG(g != NULL && fn != NULL, "graph and fn must not be NULL");
  mn__graph_hook *h = mn__realloc(g->hooks, (g->nhooks + 1) * sizeof *h);
  if (!h) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a graph destroy hook");
  g->hooks = h;
  g->hooks[g->nhooks++] = (mn__graph_hook){.fn = fn, .arg = arg};
  return MN_OK;
}

/* A capturing stream's backend (the default stream never captures). */
static mn_status capturing_backend(const char *func, mn_stream_t *s, const mn__backend_t **out) {
  mn_status st = capture_backend(func, s, out);
  if (st == MN_OK && s->is_default)
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "the default stream never captures");
  return st;
}

mn_status mn__capture_marker(mn_stream_t *s, uint64_t *marker) {
  MN__CHECK_ARG(marker != NULL, "marker must not be NULL");
  const mn__backend_t *b;
  mn_status st = capturing_backend(__func__, s, &b);
  if (st != MN_OK) return st;
  uint64_t m = 0;
  st = b->capture_marker(s->device.index, s->handle, &m);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *marker = m;
  return MN_OK;
}

mn_status mn__capture_reaches(mn_stream_t *s, uint64_t marker, bool *reached) {
  MN__CHECK_ARG(reached != NULL, "reached must not be NULL");
  const mn__backend_t *b;
  mn_status st = capturing_backend(__func__, s, &b);
  if (st != MN_OK) return st;
  bool r = false;
  st = b->capture_reaches(s->device.index, s->handle, marker, &r);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *reached = r;
  return MN_OK;
}

mn_status mn__stream_capture_id(mn_stream_t *s, uint64_t *id) {
  MN__CHECK_ARG(s != NULL && id != NULL, "stream and id must not be NULL");
  const mn__backend_t *b = mn__backend_for(s->device.type);
  if (s->is_default || !b || !b->capture_id) {
    *id = 0;
    return MN_OK;
  }
  uint64_t v = 0;
  mn_status st = b->capture_id(s->device.index, s->handle, &v);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *id = v;
  return MN_OK;
}
