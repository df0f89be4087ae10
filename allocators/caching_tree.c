/* allocators/caching_tree.c: the caching allocator's ordered free set (a treap keyed by stream,
 * size, address). Not thread-safe: callers hold the allocator lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

/* ---- keys ---------------------------------------------------------------------- */

int mn__key_cmp(const mn__key_t *a, const mn__key_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
  return 0;
}

/* ---- treap ----------------------------------------------------------------------- */

static uint64_t next_prio(mn__tree_t *t) {
  /* xorshift64*: deterministic, so runs are reproducible. */
  t->rng ^= t->rng >> 12;
  t->rng ^= t->rng << 25;
  t->rng ^= t->rng >> 27;
  return t->rng * 0x2545F4914F6CDD1Dull;
}

void mn__tree_init(mn__tree_t *t, uint64_t seed) {
  t->root = NULL;
  t->count = 0;
  t->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

/* Splits t into *l (keys < k) and *r (keys >= k). */
static void split(mn__tnode_t *t, const mn__key_t *k, mn__tnode_t **l, mn__tnode_t **r) {
  while (t) {
    if (mn__key_cmp(&t->key, k) < 0) {
      *l = t;
      l = &t->right;
      t = t->right;
    } else {
      *r = t;
      r = &t->left;
      t = t->left;
    }
  }
  *l = NULL;
  *r = NULL;
}

/* Joins two treaps where every key of a is below every key of b. */
static mn__tnode_t *merge(mn__tnode_t *a, mn__tnode_t *b) {
  mn__tnode_t *root = NULL, **pp = &root;
  while (a && b) {
    if (a->prio > b->prio) {
      *pp = a;
      pp = &a->right;
      a = a->right;
    } else {
      *pp = b;
      pp = &b->left;
      b = b->left;
    }
  }
  *pp = a ? a : b;
  return root;
}

void mn__tree_insert(mn__tree_t *t, mn__tnode_t *n, mn__key_t key) {
  n->key = key;
  n->prio = next_prio(t);
  mn__tnode_t **pp = &t->root;
  while (*pp && (*pp)->prio >= n->prio) pp = mn__key_cmp(&key, &(*pp)->key) < 0 ? &(*pp)->left : &(*pp)->right;
  split(*pp, &key, &n->left, &n->right);
  *pp = n;
  t->count++;
}

bool mn__tree_remove(mn__tree_t *t, mn__tnode_t *n) {
  mn__tnode_t **pp = &t->root;
  while (*pp) {
    int c = mn__key_cmp(&n->key, &(*pp)->key);
    if (c == 0) break;
    pp = c < 0 ? &(*pp)->left : &(*pp)->right;
  }
  if (*pp != n) return false;
  *pp = merge(n->left, n->right);
  n->left = n->right = NULL;
  t->count--;
  return true;
}

bool mn__tree_contains(const mn__tree_t *t, const mn__tnode_t *n) {
  const mn__tnode_t *x = t->root;
  while (x) {
    int c = mn__key_cmp(&n->key, &x->key);
    if (c == 0) return x == n;
    x = c < 0 ? x->left : x->right;
  }
  return false;
}

mn__tnode_t *mn__tree_lower_bound(const mn__tree_t *t, const mn__key_t *k) {
  mn__tnode_t *x = t->root, *best = NULL;
  while (x) {
    if (mn__key_cmp(&x->key, k) >= 0) {
      best = x;
      x = x->left;
    } else {
      x = x->right;
    }
  }
  return best;
}

mn__tnode_t *mn__tree_next(const mn__tree_t *t, const mn__tnode_t *n) {
  mn__tnode_t *x = t->root, *best = NULL;
  while (x) {
    if (mn__key_cmp(&x->key, &n->key) > 0) {
      best = x;
      x = x->left;
    } else {
      x = x->right;
    }
  }
  return best;
}

mn__tnode_t *mn__tree_prev(const mn__tree_t *t, const mn__tnode_t *n) {
  mn__tnode_t *x = t->root, *best = NULL;
  while (x) {
    if (mn__key_cmp(&x->key, &n->key) < 0) {
      best = x;
      x = x->right;
    } else {
      x = x->left;
    }
  }
  return best;
}

mn__tnode_t *mn__tree_first(const mn__tree_t *t) {
  mn__tnode_t *x = t->root;
  while (x && x->left) x = x->left;
  return x;
}

/* In-order walk with an explicit stack (the depth is O(log n) expected; the
 * stack grows on demand so a degenerate shape is still checked). */
mn_status mn__tree_check(const mn__tree_t *t, char *why, size_t whysize) {
  size_t cap = 64, depth = 0, seen = 0;
  const mn__tnode_t **stack = mn__malloc(cap * sizeof *stack);
  if (!stack) {
    snprintf(why, whysize, "out of host memory while checking a free set");
    return MN_ERR_OUT_OF_MEMORY;
  }
  mn_status st = MN_OK;
  const mn__tnode_t *x = t->root, *last = NULL;
  bool ok = true;
  while (ok && (x || depth)) {
    while (x) {
      if ((x->left && x->left->prio > x->prio) || (x->right && x->right->prio > x->prio)) {
        snprintf(why, whysize, "free set heap order broken at address %#lx", (unsigned long)x->key.addr);
        ok = false;
        break;
      }
      if (depth == cap) {
        const mn__tnode_t **grown = mn__realloc(stack, 2 * cap * sizeof *stack);
        if (!grown) {
          snprintf(why, whysize, "out of host memory while checking a free set");
          st = MN_ERR_OUT_OF_MEMORY;
          ok = false;
          break;
        }
        stack = grown;
        cap *= 2;
      }
      stack[depth++] = x;
      x = x->left;
    }
    if (!ok) break;
    x = stack[--depth];
    if (last && mn__key_cmp(&last->key, &x->key) >= 0) {
      snprintf(why, whysize, "free set out of order: (stream %llu, size %zu, addr %#lx) before (stream %llu, size %zu, addr %#lx)",
               (unsigned long long)last->key.stream, last->key.size, (unsigned long)last->key.addr,
               (unsigned long long)x->key.stream, x->key.size, (unsigned long)x->key.addr);
      ok = false;
      break;
    }
    last = x;
    seen++;
    x = x->right;
  }
  free(stack);
  if (ok && seen != t->count) {
    snprintf(why, whysize, "free set holds %zu nodes but counts %zu", seen, t->count);
    ok = false;
  }
  return ok ? MN_OK : st != MN_OK ? st : MN_ERR_INTERNAL;
}
