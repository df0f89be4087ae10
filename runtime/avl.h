/* runtime/avl.h: mn__avl, an intrusive AVL tree with parent pointers and an
 * optional augmentation (a per-node summary of its subtree, recomputed on
 * every node whose subtree changes), for ordered sets whose every operation
 * must stay O(log n): the SIM device's address ranges (with the largest free
 * gap per subtree, for first-fit placement) and its stream-ordered pools'
 * blocks. Insert, remove and lookups never allocate. Not thread-safe: the
 * owner holds its own lock. */
#ifndef MNEMO_RUNTIME_AVL_H
#define MNEMO_RUNTIME_AVL_H

#include <stdbool.h>
#include <stddef.h>

/* Embedded in the owner's record (container_of-style: put it first). */
typedef struct mn__avl_node {
  struct mn__avl_node *left, *right, *parent;
  int height; /* 1 for a leaf */
} mn__avl_node;

/* Order of two nodes: < 0, 0 or > 0. Keys must be unique in a tree. */
typedef int (*mn__avl_cmp_fn)(const mn__avl_node *a, const mn__avl_node *b);
/* Order of a search key against a node: < 0 when key sorts before n. */
typedef int (*mn__avl_key_fn)(const void *key, const mn__avl_node *n);
/* Recomputes n's summary from n and its children (which are up to date);
 * returns whether it changed (the walk up stops where nothing changed). */
typedef bool (*mn__avl_update_fn)(mn__avl_node *n);

typedef struct mn__avl {
  mn__avl_node *root;
  size_t count;
  mn__avl_cmp_fn cmp;
  mn__avl_update_fn update; /* NULL: no augmentation */
} mn__avl;

/* An empty tree ordered by cmp, with update (or NULL) as its augmentation. */
void mn__avl_init(mn__avl *t, mn__avl_cmp_fn cmp, mn__avl_update_fn update);
/* Adds n (its key set, not in any tree). */
void mn__avl_insert(mn__avl *t, mn__avl_node *n);
/* Takes n (in t) out of t. */
void mn__avl_remove(mn__avl *t, mn__avl_node *n);
/* Recomputes the summaries from n to the root, after the owner changed what
 * n's summary depends on without changing n's order. */
void mn__avl_update_path(mn__avl *t, mn__avl_node *n);

/* The smallest and largest nodes, and in-order neighbours; NULL at the ends. */
mn__avl_node *mn__avl_first(const mn__avl *t);
mn__avl_node *mn__avl_last(const mn__avl *t);
mn__avl_node *mn__avl_next(const mn__avl_node *n);
mn__avl_node *mn__avl_prev(const mn__avl_node *n);
/* The smallest node not before key (key <= node), or NULL. */
mn__avl_node *mn__avl_lower_bound(const mn__avl *t, const void *key, mn__avl_key_fn kcmp);
/* The largest node not after key (node <= key), or NULL. */
mn__avl_node *mn__avl_floor(const mn__avl *t, const void *key, mn__avl_key_fn kcmp);

/* Checks the structure: parent links, heights, balance, strict order by cmp,
 * count; node_ok (optional) judges each node's summary once its children's
 * were judged. false at the first fault. O(n): for invariant checkers. */
bool mn__avl_check(const mn__avl *t, bool (*node_ok)(const mn__avl_node *n));

#endif /* MNEMO_RUNTIME_AVL_H */
