/* runtime/sim_graph.c: the SIM backend's capture graphs (runtime/sim_graph.h):
 * nodes, node sets and the ancestor query. No locking of its own: the SIM
 * device's lock guards every graph and set of that device. */
#include "runtime/sim_graph.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"

#define SG_MAX_NODES (UINT32_MAX / 2)

static mn_status sg_oom(const char *func) {
  return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for a captured operation");
}

/* Room for one more node (nodes, marks and the query stack grow together). */
static mn_status sg_grow(sg_graph *g) {
  if (g->n < g->cap) return MN_OK;
  if (g->cap >= SG_MAX_NODES)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "a capture holds at most %u nodes", (unsigned)SG_MAX_NODES);
  uint32_t cap = g->cap ? g->cap * 2 : 16;
  sg_node *nodes = mn__realloc(g->nodes, (size_t)cap * sizeof *nodes);
  if (!nodes) return sg_oom(__func__);
  g->nodes = nodes;
  uint32_t *mark = mn__realloc(g->mark, (size_t)cap * sizeof *mark);
  if (!mark) return sg_oom(__func__);
  memset(mark + g->cap, 0, (size_t)(cap - g->cap) * sizeof *mark);
  g->mark = mark;
  uint32_t *stack = mn__realloc(g->stack, (size_t)cap * sizeof *stack);
  if (!stack) return sg_oom(__func__);
  g->stack = stack;
  g->cap = cap; /* only once all three hold cap entries */
  return MN_OK;
}

mn_status sg_add(sg_graph *g, const sg_node *proto, const sg_set *deps, uint32_t *id) {
  mn_status st = sg_grow(g);
  if (st != MN_OK) return st;
  uint32_t *d = NULL;
  if (deps->n) {
    d = mn__malloc((size_t)deps->n * sizeof *d);
    if (!d) return sg_oom(__func__);
    memcpy(d, deps->ids, (size_t)deps->n * sizeof *d);
  }
  sg_node *node = &g->nodes[g->n];
  *node = *proto;
  node->deps = d;
  node->ndeps = deps->n;
  g->mark[g->n] = 0;
  g->ops += proto->kind != SG_EMPTY;
  *id = g->n++;
  return MN_OK;
}

bool sg_reaches(sg_graph *g, const sg_set *from, uint32_t target) {
  if (target >= g->n) return false;
  if (++g->gen == 0) { /* wrapped: forget every old visit */
    memset(g->mark, 0, (size_t)g->cap * sizeof *g->mark);
    g->gen = 1;
  }
  uint32_t top = 0;
  for (uint32_t i = 0; i < from->n; i++) {
    uint32_t v = from->ids[i];
    if (v == target) return true;
    if (v > target && g->mark[v] != g->gen) { /* ancestors have lower ids: below target, no path */
      g->mark[v] = g->gen;
      g->stack[top++] = v;
    }
  }
  while (top) {
    const sg_node *node = &g->nodes[g->stack[--top]];
    for (uint32_t k = 0; k < node->ndeps; k++) {
      uint32_t v = node->deps[k];
      if (v == target) return true;
      if (v > target && g->mark[v] != g->gen) {
        g->mark[v] = g->gen;
        g->stack[top++] = v; /* each node once: top < n <= cap */
      }
    }
  }
  return false;
}

void sg_graph_free(sg_graph *g) {
  for (uint32_t i = 0; i < g->n; i++) free(g->nodes[i].deps);
  free(g->nodes);
  free(g->mark);
  free(g->stack);
  memset(g, 0, sizeof *g);
}

mn_status sg_set_reserve(sg_set *s, uint32_t n) {
  if (n <= s->cap) return MN_OK;
  uint32_t cap = s->cap ? s->cap : 4;
  while (cap < n) cap *= 2;
  uint32_t *ids = mn__realloc(s->ids, (size_t)cap * sizeof *ids);
  if (!ids) return sg_oom(__func__);
  s->ids = ids;
  s->cap = cap;
  return MN_OK;
}

void sg_set_one(sg_set *s, uint32_t id) {
  s->ids[0] = id;
  s->n = 1;
}

mn_status sg_set_copy(sg_set *dst, const sg_set *src) {
  mn_status st = sg_set_reserve(dst, src->n);
  if (st != MN_OK) return st;
  if (src->n) memcpy(dst->ids, src->ids, (size_t)src->n * sizeof *dst->ids);
  dst->n = src->n;
  return MN_OK;
}

mn_status sg_set_union(sg_set *dst, const sg_set *src) {
  mn_status st = sg_set_reserve(dst, dst->n + src->n);
  if (st != MN_OK) return st;
  for (uint32_t i = 0; i < src->n; i++) {
    bool have = false;
    for (uint32_t k = 0; k < dst->n && !have; k++) have = dst->ids[k] == src->ids[i];
    if (!have) dst->ids[dst->n++] = src->ids[i];
  }
  return MN_OK;
}

void sg_set_free(sg_set *s) {
  free(s->ids);
  memset(s, 0, sizeof *s);
}
