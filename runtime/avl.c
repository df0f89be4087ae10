/* runtime/avl.c: the intrusive AVL tree of runtime/avl.h: insert and remove
 * rebalance on the way up, recomputing heights and the owner's augmentation,
 * and stop at the first node whose height and summary come out unchanged
 * (nothing above it can change). Not thread-safe: the owner holds its own
 * lock. */
#include "runtime/avl.h"

static int height(const mn__avl_node *n) { return n ? n->height : 0; }

/* Height and summary of n from its children; true when either changed. */
static bool fix(const mn__avl *t, mn__avl_node *n) {
  int l = height(n->left), r = height(n->right), h = 1 + (l > r ? l : r);
  bool changed = h != n->height;
  n->height = h;
  if (t->update && t->update(n)) changed = true;
  return changed;
}

/* Puts `to` (may be NULL) where `from` hangs under from's parent. */
static void replace_child(mn__avl *t, mn__avl_node *from, mn__avl_node *to) {
  mn__avl_node *p = from->parent;
  if (to) to->parent = p;
  if (!p) t->root = to;
  else if (p->left == from) p->left = to;
  else p->right = to;
}

/* Rotations around x; each returns the subtree's new root. */
static mn__avl_node *rotate_left(mn__avl *t, mn__avl_node *x) {
  mn__avl_node *y = x->right;
  x->right = y->left;
  if (y->left) y->left->parent = x;
  replace_child(t, x, y);
  y->left = x;
  x->parent = y;
  fix(t, x);
  fix(t, y);
  return y;
}

static mn__avl_node *rotate_right(mn__avl *t, mn__avl_node *x) {
  mn__avl_node *y = x->left;
  x->left = y->right;
  if (y->right) y->right->parent = x;
  replace_child(t, x, y);
  y->right = x;
  x->parent = y;
  fix(t, x);
  fix(t, y);
  return y;
}

/* From n up: heights, summaries, and rotations where a node's subtrees
 * differ in height by 2. Every node up to `through` (on the path; NULL:
 * none) and its parent are recomputed; past it the walk stops at the first
 * node that comes out unchanged and needs no rotation. */
static void rebalance(mn__avl *t, mn__avl_node *n, const mn__avl_node *through) {
  bool forced = through != NULL;
  while (n) {
    bool changed = fix(t, n), may_stop = !forced;
    if (n == through) forced = false; /* its parent must still see its new summary */
    int bal = height(n->left) - height(n->right);
    if (bal > 1) {
      if (height(n->left->left) < height(n->left->right)) rotate_left(t, n->left);
      n = rotate_right(t, n);
      changed = true;
    } else if (bal < -1) {
      if (height(n->right->right) < height(n->right->left)) rotate_right(t, n->right);
      n = rotate_left(t, n);
      changed = true;
    }
    if (!changed && may_stop) return;
    n = n->parent;
  }
}

void mn__avl_init(mn__avl *t, mn__avl_cmp_fn cmp, mn__avl_update_fn update) {
  t->root = NULL;
  t->count = 0;
  t->cmp = cmp;
  t->update = update;
}

void mn__avl_insert(mn__avl *t, mn__avl_node *n) {
  n->left = n->right = NULL;
  n->height = 1;
  mn__avl_node *p = NULL, **link = &t->root;
  while (*link) {
    p = *link;
    link = t->cmp(n, p) < 0 ? &p->left : &p->right;
  }
  n->parent = p;
  *link = n;
  t->count++;
  rebalance(t, n, n); /* n's summary is new: nothing to compare it with */
}

static mn__avl_node *leftmost(mn__avl_node *n) {
  while (n && n->left) n = n->left;
  return n;
}

void mn__avl_remove(mn__avl *t, mn__avl_node *n) {
  mn__avl_node *start, *through = NULL;
  if (!n->left || !n->right) {
    start = n->parent;
    replace_child(t, n, n->left ? n->left : n->right);
  } else {
    /* n's successor s (no left child) takes n's place. */
    mn__avl_node *s = leftmost(n->right);
    if (s->parent == n) {
      start = s;
    } else {
      start = s->parent;
      s->parent->left = s->right;
      if (s->right) s->right->parent = s->parent;
      s->right = n->right;
      n->right->parent = s;
    }
    s->left = n->left;
    n->left->parent = s;
    s->height = n->height;
    replace_child(t, n, s);
    through = s; /* s still holds the summary of its old place */
  }
  t->count--;
  n->left = n->right = n->parent = NULL;
  rebalance(t, start, through);
}

void mn__avl_update_path(mn__avl *t, mn__avl_node *n) {
  while (n && fix(t, n)) n = n->parent;
}

mn__avl_node *mn__avl_first(const mn__avl *t) { return leftmost(t->root); }

mn__avl_node *mn__avl_last(const mn__avl *t) {
  mn__avl_node *n = t->root;
  while (n && n->right) n = n->right;
  return n;
}

mn__avl_node *mn__avl_next(const mn__avl_node *n) {
  if (n->right) return leftmost(n->right);
  while (n->parent && n->parent->right == n) n = n->parent;
  return n->parent;
}

mn__avl_node *mn__avl_prev(const mn__avl_node *n) {
  if (n->left) {
    n = n->left;
    while (n->right) n = n->right;
    return (mn__avl_node *)n;
  }
  while (n->parent && n->parent->left == n) n = n->parent;
  return n->parent;
}

mn__avl_node *mn__avl_lower_bound(const mn__avl *t, const void *key, mn__avl_key_fn kcmp) {
  mn__avl_node *n = t->root, *best = NULL;
  while (n) {
    if (kcmp(key, n) <= 0) {
      best = n;
      n = n->left;
    } else {
      n = n->right;
    }
  }
  return best;
}

mn__avl_node *mn__avl_floor(const mn__avl *t, const void *key, mn__avl_key_fn kcmp) {
  mn__avl_node *n = t->root, *best = NULL;
  while (n) {
    if (kcmp(key, n) >= 0) {
      best = n;
      n = n->right;
    } else {
      n = n->left;
    }
  }
  return best;
}

/* The subtree's height, or -1 at a fault; *count += its nodes. */
static int check_sub(const mn__avl *t, const mn__avl_node *n, const mn__avl_node *parent,
                     bool (*node_ok)(const mn__avl_node *), size_t *count) {
  if (!n) return 0;
  if (n->parent != parent || ++*count > t->count) return -1;
  if ((n->left && t->cmp(n->left, n) >= 0) || (n->right && t->cmp(n, n->right) >= 0)) return -1;
  int l = check_sub(t, n->left, n, node_ok, count);
  int r = check_sub(t, n->right, n, node_ok, count);
  if (l < 0 || r < 0 || l - r > 1 || r - l > 1 || n->height != 1 + (l > r ? l : r)) return -1;
  if (node_ok && !node_ok(n)) return -1;
  return n->height;
}

bool mn__avl_check(const mn__avl *t, bool (*node_ok)(const mn__avl_node *n)) {
  size_t count = 0;
  if (check_sub(t, t->root, NULL, node_ok, &count) < 0 || count != t->count) return false;
  /* Local order (each child against its parent) plus in-order neighbours
   * strictly increasing makes the whole order strict. */
  const mn__avl_node *prev = NULL;
  for (const mn__avl_node *n = mn__avl_first(t); n; prev = n, n = mn__avl_next(n))
    if (prev && t->cmp(prev, n) >= 0) return false;
  return true;
}
