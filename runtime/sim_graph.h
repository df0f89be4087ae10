/* runtime/sim_graph.h: the SIM backend's capture graphs: recorded operations
 * (nodes) with their dependencies, node sets (a stream's frontier, an event's
 * recorded point) and the ancestor query. A node depends only on nodes made
 * before it, so node ids are a topological order. Plain data: the SIM
 * device's lock guards every graph of that device (callers hold it). */
#ifndef MNEMO_RUNTIME_SIM_GRAPH_H
#define MNEMO_RUNTIME_SIM_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"
#include "runtime/backend.h"

typedef enum { SG_EMPTY, SG_COPY, SG_SET, SG_HOST } sg_kind;

/* One recorded operation; `deps` are ids of earlier nodes. */
typedef struct sg_node {
  sg_kind kind;
  mn__copy_kind copy_kind; /* SG_COPY */
  void *dst;               /* SG_COPY, SG_SET */
  const void *src;         /* SG_COPY */
  size_t nbytes;           /* SG_COPY, SG_SET */
  int value;               /* SG_SET */
  mn_host_fn fn;           /* SG_HOST */
  void *arg;               /* SG_HOST */
  uint32_t *deps;
  uint32_t ndeps;
} sg_node;

/* A set of node ids (no duplicates). */
typedef struct sg_set {
  uint32_t *ids;
  uint32_t n, cap;
} sg_set;

typedef struct sg_graph {
  sg_node *nodes;
  uint32_t n, cap;
  size_t ops;      /* nodes that are not SG_EMPTY */
  uint32_t *mark;  /* per node: the query generation that visited it (cap entries) */
  uint32_t *stack; /* the query's work list (cap entries) */
  uint32_t gen;
} sg_graph;

/* Adds a node (proto's operation, proto->deps ignored) depending on every id
 * of `deps`; *id = its id. Out of host memory: MN_ERR_OUT_OF_MEMORY, nothing
 * added. */
mn_status sg_add(sg_graph *g, const sg_node *proto, const sg_set *deps, uint32_t *id);
/* Whether node `target` is in `from` or an ancestor of a node of it. O(nodes
 * visited); no allocation. */
bool sg_reaches(sg_graph *g, const sg_set *from, uint32_t target);
void sg_graph_free(sg_graph *g);

/* Room for at least n ids (out of host memory: MN_ERR_OUT_OF_MEMORY, s unchanged). */
mn_status sg_set_reserve(sg_set *s, uint32_t n);
/* s = {id}; pre: reserved for one. */
void sg_set_one(sg_set *s, uint32_t id);
/* dst = src (out of host memory: dst unchanged). */
mn_status sg_set_copy(sg_set *dst, const sg_set *src);
/* dst = dst | src (out of host memory: dst unchanged). */
mn_status sg_set_union(sg_set *dst, const sg_set *src);
void sg_set_free(sg_set *s);

#endif /* MNEMO_RUNTIME_SIM_GRAPH_H */
