/* runtime/sim_capture.c: stream capture on the SIM device (mnemo/graph.h):
 * recording what a capturing stream would queue into its capture's graph,
 * invalidating captures that a synchronizing call would break, and the backend
 * slots that begin and end captures and launch and destroy graphs (the graph
 * data itself is runtime/sim_graph.c). Thread-safe: each slot takes the device
 * lock; capture ids come from one atomic counter. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- capture ------------------------------------------------------------------
 * While a stream captures, what would be queued on it becomes a node of its
 * capture's graph, depending on the stream's frontier, and the node becomes
 * its frontier; an event recorded on it takes a copy of the frontier, and a
 * stream waiting on that event joins the capture (or, already in it, adds the
 * event's nodes to its frontier). As CUDA's global mode, a call that would
 * synchronize with captured work fails and invalidates the capture(s). */

static atomic_uint_fast64_t g_capture_ids = 1; /* process-unique, never reused */

sim_capture *mn__sim_capture_find(const sim_device *d, uint64_t id) {
  sim_capture *c = d->captures;
  while (c && c->id != id) c = c->next;
  return c;
}

/* Marks c invalidated; the first reason stays. */
void mn__sim_capture_invalidate(sim_capture *c, const char *why) {
  if (c->invalidated) return;
  c->invalidated = true;
  snprintf(c->why, sizeof c->why, "%s", why);
}

/* An invalidated capture records nothing more. */
mn_status mn__sim_capture_usable(const sim_capture *c, const char *func) {
  if (!c->invalidated) return MN_OK;
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "the stream captures into capture %llu, which was invalidated (%s); end it with "
                   "mn_stream_end_capture and discard it",
                   (unsigned long long)c->id, c->why);
}

/* A call not allowed while the device has an active capture (device
 * synchronize, raw free, unmap): every active capture is invalidated. */
mn_status mn__sim_capture_refuse_device(sim_device *d, int index, const char *func, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "%s on sim:%d during the capture", what, index);
  for (sim_capture *c = d->captures; c; c = c->next) mn__sim_capture_invalidate(c, why);
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "sim:%d: %s is not allowed while a stream of the device captures (capture %llu; "
                   "CUDA's global capture mode): the capture is invalidated",
                   index, what, (unsigned long long)d->captures->id);
}

/* A call that would wait for captured work (capturing stream synchronize or
 * query, query or synchronize of an event recorded in a capture). */
mn_status mn__sim_capture_refuse(sim_capture *c, int index, const char *func, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "%s on sim:%d", what, index);
  mn__sim_capture_invalidate(c, why);
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "sim:%d: %s is not allowed during capture %llu (it would wait for captured work): the "
                   "capture is invalidated",
                   index, what, (unsigned long long)c->id);
}

/* Records op (which it frees) as a node of s's capture. */
mn_status mn__sim_capture_op(sim_stream *s, sim_op *op) {
  sim_capture *c = s->cap;
  sg_node node = {.kind = SG_EMPTY};
  switch (op->kind) {
    case OP_COPY:
      node = (sg_node){.kind = SG_COPY, .copy_kind = op->copy_kind, .dst = op->dst, .src = op->src,
                       .nbytes = op->nbytes};
      break;
    case OP_SET: node = (sg_node){.kind = SG_SET, .dst = op->dst, .value = op->value, .nbytes = op->nbytes}; break;
    case OP_HOST: node = (sg_node){.kind = SG_HOST, .fn = op->fn, .arg = op->arg}; break;
    case OP_WAIT:
    case OP_POOL_FREE: break; /* never reach here: waits and pool frees are handled before */
  }
  mn_status st = mn__sim_capture_usable(c, __func__);
  if (st == MN_OK && node.kind == SG_EMPTY)
    st = mn__error(MN_ERR_INTERNAL, __func__, "operation kind %d cannot be captured", (int)op->kind);
  uint32_t id = 0;
  if (st == MN_OK) st = sg_set_reserve(&s->front, 1);
  if (st == MN_OK) st = sg_add(&c->graph, &node, &s->front, &id);
  if (st == MN_OK) sg_set_one(&s->front, id);
  mn__sim_op_free(op);
  return st;
}

/* Ends capture c: no stream captures into it any more; it is unlinked and
 * freed (its graph too, unless the caller moved it out). */
static void capture_close(sim_device *d, sim_capture *c) {
  for (sim_stream *s = d->streams; s; s = s->next) {
    if (s->cap != c) continue;
    s->cap = NULL;
    s->front.n = 0;
    atomic_store_explicit(&s->cap_id, 0, memory_order_release);
  }
  sim_capture **link = &d->captures;
  while (*link != c) link = &(*link)->next;
  *link = c->next;
  sg_graph_free(&c->graph);
  free(c);
}
/* ---- stream capture and graphs (mnemo/graph.h) ----------------------------- */

mn_status mn__sim_capture_begin(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  if (s->cap)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: the stream already %s capture %llu",
                                   index, s->cap->origin == s ? "captures into" : "joined",
                                   (unsigned long long)s->cap->id));
  sim_capture *c = mn__calloc(1, sizeof *c);
  if (!c) return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a capture"));
  c->id = atomic_fetch_add(&g_capture_ids, 1);
  c->origin = s;
  c->members = 1;
  c->next = d->captures;
  d->captures = c;
  s->cap = c;
  s->front.n = 0;
  atomic_store_explicit(&s->cap_id, c->id, memory_order_release);
  return mn__sim_unlock_ret(d, MN_OK);
}

/* The first node of a joined stream's frontier that the origin's frontier
 * does not reach (the stream forked and never joined back), or -1. */
static int64_t capture_unjoined(sim_device *d, sim_capture *c, sim_stream **which) {
  for (sim_stream *t = d->streams; t; t = t->next) {
    if (t->cap != c || t == c->origin) continue;
    for (uint32_t i = 0; i < t->front.n; i++) {
      if (!sg_reaches(&c->graph, &c->origin->front, t->front.ids[i])) {
        *which = t;
        return t->front.ids[i];
      }
    }
  }
  return -1;
}

mn_status mn__sim_capture_end(int index, void *handle, void **graph, size_t *nodes) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  sim_capture *c = s->cap;
  if (!c) return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: the stream is not capturing", index));
  if (c->origin != s)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                   "sim:%d: the stream joined capture %llu, begun on another stream: end it there",
                                   index, (unsigned long long)c->id));
  if (c->invalidated) {
    mn_status st = mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: capture %llu was invalidated (%s); no graph",
                             index, (unsigned long long)c->id, c->why);
    capture_close(d, c);
    return mn__sim_unlock_ret(d, st);
  }
  sim_stream *t = NULL;
  int64_t lost = capture_unjoined(d, c, &t);
  if (lost >= 0) {
    mn_status st = mn__error(MN_ERR_INVALID_STATE, __func__,
                             "sim:%d: capture %llu is unjoined: a stream that joined it (forked by an event wait) "
                             "has work (node %lld) the capturing stream never waited for; record an event on it "
                             "and wait on that event from the capturing stream before ending. No graph",
                             index, (unsigned long long)c->id, (long long)lost);
    capture_close(d, c);
    return mn__sim_unlock_ret(d, st);
  }
  sim_graph *g = mn__calloc(1, sizeof *g);
  if (!g) return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a graph"));
  g->g = c->graph;
  memset(&c->graph, 0, sizeof c->graph);
  capture_close(d, c);
  g->next = d->graphs;
  if (d->graphs) d->graphs->prev = g;
  d->graphs = g;
  d->stats.live_graphs++;
  *graph = g;
  *nodes = g->g.ops;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_capture_status(int index, void *handle, mn_capture_status *status, uint64_t *id) {
  SIM_LOCKED(index, d);
  const sim_capture *c = mn__sim_stream_of(d, handle)->cap;
  *status = !c ? MN_CAPTURE_NONE : c->invalidated ? MN_CAPTURE_INVALIDATED : MN_CAPTURE_ACTIVE;
  *id = c ? c->id : 0;
  return mn__sim_unlock_ret(d, MN_OK);
}

/* Lock-free: the caching allocator asks on every allocation during captures. */
mn_status mn__sim_capture_id(int index, void *handle, uint64_t *id) {
  (void)index;
  *id = handle ? atomic_load_explicit(&((sim_stream *)handle)->cap_id, memory_order_acquire) : 0;
  return MN_OK;
}

static mn_status capture_of(int index, const char *func, sim_stream *s) {
  if (!s->cap)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: the stream is not capturing", index);
  return MN_OK;
}

mn_status mn__sim_capture_marker(int index, void *handle, uint64_t *marker) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  mn_status st = capture_of(index, __func__, s);
  if (st == MN_OK) st = mn__sim_capture_usable(s->cap, __func__);
  if (st == MN_OK) st = sg_set_reserve(&s->front, 1);
  uint32_t id = 0;
  sg_node empty = {.kind = SG_EMPTY};
  if (st == MN_OK) st = sg_add(&s->cap->graph, &empty, &s->front, &id);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  sg_set_one(&s->front, id);
  *marker = (uint64_t)id + 1;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_capture_reaches(int index, void *handle, uint64_t marker, bool *reached) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  mn_status st = capture_of(index, __func__, s);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  sg_graph *g = &s->cap->graph;
  if (marker == 0 || marker > g->n || g->nodes[marker - 1].kind != SG_EMPTY)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %llu is not a marker of capture %llu", index,
                                   (unsigned long long)marker, (unsigned long long)s->cap->id));
  *reached = sg_reaches(g, &s->front, (uint32_t)(marker - 1));
  return mn__sim_unlock_ret(d, MN_OK);
}

/* Queues every operation of the graph on s in node order, which is a
 * topological order of its dependencies. All ops are made first: out of
 * host memory queues nothing. */
mn_status mn__sim_graph_launch(int index, void *graph, void *handle) {
  SIM_LOCKED(index, d);
  const sim_graph *g = graph;
  sim_stream *s = mn__sim_stream_of(d, handle);
  if (s->cap)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                   "sim:%d: the stream captures (capture %llu): launch the graph on another stream",
                                   index, (unsigned long long)s->cap->id));
  sim_op *first = NULL, **link = &first;
  mn_status st = MN_OK;
  for (uint32_t i = 0; i < g->g.n && st == MN_OK; i++) {
    const sg_node *n = &g->g.nodes[i];
    sim_op_kind kind = n->kind == SG_COPY ? OP_COPY : n->kind == SG_SET ? OP_SET : OP_HOST;
    if (n->kind == SG_EMPTY) continue;
    sim_op *op = NULL;
    st = mn__sim_new_op(kind, &op);
    if (st != MN_OK) break;
    op->copy_kind = n->copy_kind;
    op->dst = n->dst;
    op->src = n->src;
    op->nbytes = n->nbytes;
    op->value = n->value;
    op->fn = n->fn;
    op->arg = n->arg;
    *link = op;
    link = &op->next;
  }
  while (first) {
    sim_op *op = first;
    first = op->next;
    if (st == MN_OK) mn__ignore(mn__sim_enqueue(d, s, op)); /* a stream that does not capture: queueing cannot fail */
    else mn__sim_op_free(op);
  }
  return mn__sim_unlock_ret(d, st);
}

mn_status mn__sim_graph_destroy(int index, void *graph) {
  SIM_LOCKED(index, d);
  sim_graph *g = graph;
  if (g->prev) g->prev->next = g->next;
  else d->graphs = g->next;
  if (g->next) g->next->prev = g->prev;
  d->stats.live_graphs--;
  sg_graph_free(&g->g);
  free(g);
  return mn__sim_unlock_ret(d, MN_OK);
}
