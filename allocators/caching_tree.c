/* allocators/caching_tree.c: the caching allocator's free sets. Per pool, one record per stream
 * (found through a small hash by stream id, or directly through a segment), holding size bins
 * with a bitmap and, in each bin, a treap with parent pointers ordered by (size, address); plus
 * an address-ordered treap of the stream's unmapped expandable ranges, and the hot node (the
 * block inserted last, held out of the bins until displaced: caching_internal.h). Best fit for
 * an exact-size bin is its cached minimum or the hot node: O(1). Not thread-safe: callers hold
 * the allocator lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

/* ---- treap with parent pointers ------------------------------------------------------------ */

/* Makes n take its parent p's place (a rotation of the edge p-n). */
static void rotate_up(mn__tree_t *t, mn__tnode_t *n) {
  mn__tnode_t *p = n->parent, *g = p->parent;
  if (p->left == n) {
    p->left = n->right;
    if (n->right) n->right->parent = p;
    n->right = p;
  } else {
    p->right = n->left;
    if (n->left) n->left->parent = p;
    n->left = p;
  }
  p->parent = n;
  n->parent = g;
  if (!g) t->root = n;
  else if (g->left == p) g->left = n;
  else g->right = n;
}

void mn__tree_insert_slow(mn__tree_t *t, mn__tnode_t *n) {
  mn__key_t key = n->key;
  mn__tnode_t *p;
  if (mn__key_cmp(&key, &t->min->key) < 0) { /* a new minimum: below the old one, no walk */
    p = t->min;
    p->left = n;
    t->min = n;
  } else {
    mn__tnode_t *x = t->root;
    for (;;) {
      p = x;
      x = mn__key_cmp(&key, &x->key) < 0 ? x->left : x->right;
      if (!x) break;
    }
    if (mn__key_cmp(&key, &p->key) < 0) p->left = n;
    else p->right = n;
  }
  n->parent = p;
  while (n->parent && n->parent->prio < n->prio) rotate_up(t, n);
}

static mn__tnode_t *rightmost(mn__tnode_t *x) {
  while (x->right) x = x->right;
  return x;
}

mn__tnode_t *mn__tree_next(const mn__tnode_t *n) {
  if (n->right) return mn__tree_leftmost(n->right);
  while (n->parent && n->parent->right == n) n = n->parent;
  return n->parent;
}

/* Previous node in key order, or NULL (through the parent pointers). */
static mn__tnode_t *tree_prev(const mn__tnode_t *n) {
  if (n->left) return rightmost(n->left);
  while (n->parent && n->parent->left == n) n = n->parent;
  return n->parent;
}

/* The last node in key order, or NULL for an empty tree. */
static mn__tnode_t *tree_last(const mn__tree_t *t) { return t->root ? rightmost(t->root) : NULL; }

void mn__tree_remove_slow(mn__tree_t *t, mn__tnode_t *n) {
  if (t->min == n) t->min = mn__tree_next(n);
  /* Rotate n down below its higher-priority child until it has at most one child. */
  while (n->left && n->right) rotate_up(t, n->left->prio > n->right->prio ? n->left : n->right);
  mn__tnode_t *c = n->left ? n->left : n->right, *p = n->parent;
  if (c) c->parent = p;
  if (!p) t->root = c;
  else if (p->left == n) p->left = c;
  else p->right = c;
  n->left = n->right = n->parent = NULL;
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

/* First node whose key >= k (lower_bound), or NULL. */
static mn__tnode_t *tree_lower_bound(const mn__tree_t *t, const mn__key_t *k) {
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

/* In-order walk through the parent pointers (no stack): order, heap property,
 * links, the cached minimum; counts the nodes into *count. */
static mn_status tree_check(const mn__tree_t *t, size_t *count, char *why, size_t whysize) {
  *count = 0;
  if (!t->root) {
    if (t->min) {
      snprintf(why, whysize, "an empty tree keeps a minimum");
      return MN_ERR_INTERNAL;
    }
    return MN_OK;
  }
  if (t->root->parent) {
    snprintf(why, whysize, "the root has a parent");
    return MN_ERR_INTERNAL;
  }
  if (t->min != mn__tree_leftmost(t->root)) {
    snprintf(why, whysize, "the cached minimum is not the leftmost node");
    return MN_ERR_INTERNAL;
  }
  const mn__tnode_t *last = NULL;
  for (const mn__tnode_t *x = t->min; x; x = mn__tree_next(x)) {
    const mn__tnode_t *kids[2] = {x->left, x->right};
    for (int i = 0; i < 2; i++)
      if (kids[i] && (kids[i]->parent != x || kids[i]->prio > x->prio)) {
        snprintf(why, whysize, "node at address %#lx: %s", (unsigned long)x->key.addr,
                 kids[i]->parent != x ? "a child's parent link is wrong" : "heap order broken");
        return MN_ERR_INTERNAL;
      }
    if (last && mn__key_cmp(&last->key, &x->key) >= 0) {
      snprintf(why, whysize, "out of order: (stream %llu, size %zu, addr %#lx) before (stream %llu, size %zu, addr %#lx)",
               (unsigned long long)last->key.stream, last->key.size, (unsigned long)last->key.addr,
               (unsigned long long)x->key.stream, x->key.size, (unsigned long)x->key.addr);
      return MN_ERR_INTERNAL;
    }
    last = x;
    ++*count;
  }
  return MN_OK;
}

/* ---- size bins ------------------------------------------------------------------------------ */

/* The last non-empty bin <= from, or nbins when none. */
static unsigned last_bin_upto(const mn__fset_t *fs, const mn__sbins_t *sb, unsigned from) {
  unsigned w = from >> 6;
  uint64_t m = sb->bits[w] & (~UINT64_C(0) >> (63 - (from & 63)));
  if (!m) {
    uint64_t s = w ? sb->summary & (~UINT64_C(0) >> (64 - w)) : 0;
    if (!s) return fs->nbins;
    w = 63u - (unsigned)__builtin_clzll(s);
    m = sb->bits[w];
  }
  return (w << 6) + 63u - (unsigned)__builtin_clzll(m);
}

/* ---- the per-stream records ---------------------------------------------------------------- */

static size_t hash_slot(uint64_t stream, size_t cap) {
  return (size_t)((stream * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

void mn__fset_init(mn__fset_t *fs, size_t max_block) {
  memset(fs, 0, sizeof *fs);
  unsigned n = mn__bin_of(max_block) + 1;
  fs->nbins = n < MN__MAX_BINS ? n : MN__MAX_BINS;
}

void mn__fset_fini(mn__fset_t *fs) {
  for (size_t i = 0; i < fs->cap; i++) free(fs->slots[i]);
  free(fs->slots);
  fs->slots = NULL;
  fs->cap = fs->nstreams = 0;
  fs->last = NULL;
}

mn__sbins_t *mn__fset_find_slow(mn__fset_t *fs, uint64_t stream) {
  if (!fs->cap) return NULL;
  for (size_t i = hash_slot(stream, fs->cap);; i = (i + 1) & (fs->cap - 1)) {
    mn__sbins_t *sb = fs->slots[i];
    if (!sb) return NULL;
    if (sb->stream == stream) return fs->last = sb;
  }
}

static void place(mn__sbins_t **slots, size_t cap, mn__sbins_t *sb) {
  size_t i = hash_slot(sb->stream, cap);
  while (slots[i]) i = (i + 1) & (cap - 1);
  slots[i] = sb;
}

mn_status mn__fset_acquire(mn__fset_t *fs, uint64_t stream, mn__sbins_t **out) {
  mn__sbins_t *sb = mn__fset_find(fs, stream);
  if (!sb) {
    if ((fs->nstreams + 1) * 2 > fs->cap) { /* load <= 1/2 */
      size_t cap = fs->cap ? 2 * fs->cap : 8;
      mn__sbins_t **slots = mn__calloc(cap, sizeof *slots);
      if (!slots) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a stream's free set");
      for (size_t i = 0; i < fs->cap; i++)
        if (fs->slots[i]) place(slots, cap, fs->slots[i]);
      free(fs->slots);
      fs->slots = slots;
      fs->cap = cap;
    }
    sb = mn__calloc_lines(sizeof *sb + fs->nbins * sizeof sb->bins[0]); /* written by its stream's lane only */
    if (!sb) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a stream's free set");
    sb->stream = stream;
    place(fs->slots, fs->cap, sb);
    fs->nstreams++;
    fs->epoch++;
  }
  sb->nsegs++;
  fs->last = sb;
  *out = sb;
  return MN_OK;
}

void mn__fset_release(mn__fset_t *fs, mn__sbins_t *sb) {
  MN__ASSERT(sb->nsegs > 0, "stream %llu: a free set released more often than acquired",
             (unsigned long long)sb->stream);
  if (--sb->nsegs > 0) return;
  MN__ASSERT(sb->count == 0 && sb->nunmapped == 0 && !sb->hot, "stream %llu: free set dropped while it holds blocks",
             (unsigned long long)sb->stream);
  /* backward-shift deletion: no tombstones */
  size_t i = hash_slot(sb->stream, fs->cap);
  while (fs->slots[i] != sb) i = (i + 1) & (fs->cap - 1);
  for (size_t j = (i + 1) & (fs->cap - 1);; j = (j + 1) & (fs->cap - 1)) {
    mn__sbins_t *x = fs->slots[j];
    if (!x) break;
    size_t home = hash_slot(x->stream, fs->cap);
    /* x may move to i when its home is not in (i, j] (cyclically) */
    if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
      fs->slots[i] = x;
      i = j;
    }
  }
  fs->slots[i] = NULL;
  fs->nstreams--;
  fs->epoch++;
  if (fs->last == sb) fs->last = NULL;
  free(sb);
}

/* ---- the free set ---------------------------------------------------------------------------- */

mn__tnode_t *mn__fset_lower_bound_slow(const mn__fset_t *fs, const mn__sbins_t *sb, size_t size) {
  unsigned b = mn__bin_clamped(fs, size);
  const mn__tree_t *t = &sb->bins[b];
  if (t->min) {
    mn__key_t k = {sb->stream, size, 0};
    mn__tnode_t *n = tree_lower_bound(t, &k);
    if (n) return n;
  }
  b = mn__first_bin_from(fs, sb, b + 1);
  return b < fs->nbins ? sb->bins[b].min : NULL;
}

mn__tnode_t *mn__fset_next(mn__fset_t *fs, mn__sbins_t *sb, const mn__tnode_t *n) {
  mn__fset_settle(fs, sb);
  mn__tnode_t *x = mn__tree_next(n);
  if (x) return x;
  unsigned b = mn__first_bin_from(fs, sb, mn__bin_clamped(fs, n->key.size) + 1);
  return b < fs->nbins ? sb->bins[b].min : NULL;
}

mn__tnode_t *mn__fset_prev(mn__fset_t *fs, mn__sbins_t *sb, const mn__tnode_t *n) {
  mn__fset_settle(fs, sb);
  mn__tnode_t *x = tree_prev(n);
  if (x) return x;
  unsigned b = mn__bin_clamped(fs, n->key.size);
  if (b == 0) return NULL;
  b = last_bin_upto(fs, sb, b - 1);
  return b < fs->nbins ? tree_last(&sb->bins[b]) : NULL;
}

mn__tnode_t *mn__fset_last(mn__fset_t *fs, mn__sbins_t *sb) {
  if (!sb || !sb->count) return NULL;
  mn__fset_settle(fs, sb);
  unsigned b = last_bin_upto(fs, sb, fs->nbins - 1);
  return b < fs->nbins ? tree_last(&sb->bins[b]) : NULL;
}

bool mn__fset_contains(const mn__fset_t *fs, const mn__sbins_t *sb, const mn__tnode_t *n) {
  if (n == sb->hot) return true;
  return mn__tree_contains(&sb->bins[mn__bin_clamped(fs, n->key.size)], n);
}

void mn__fset_insert_unmapped(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n, uintptr_t addr) {
  mn__tree_insert(&sb->unmapped, n, (mn__key_t){sb->stream, 0, addr}, mn__fset_prio(addr));
  sb->nunmapped++;
}

void mn__fset_remove_unmapped(mn__fset_t *fs, mn__sbins_t *sb, mn__tnode_t *n) {
  mn__tree_remove(&sb->unmapped, n);
  sb->nunmapped--;
}

mn_status mn__fset_check(const mn__fset_t *fs, char *why, size_t whysize) {
  size_t streams = 0, total = 0, unmapped = 0;
  for (size_t i = 0; i < fs->cap; i++) {
    const mn__sbins_t *sb = fs->slots[i];
    if (!sb) continue;
    streams++;
    if (mn__fset_find((mn__fset_t *)fs, sb->stream) != sb) {
      snprintf(why, whysize, "stream %llu: its free set cannot be found by its id", (unsigned long long)sb->stream);
      return MN_ERR_INTERNAL;
    }
    size_t count = 0, n = 0;
    for (unsigned b = 0; b < fs->nbins; b++) {
      const mn__tree_t *t = &sb->bins[b];
      bool bit = (sb->bits[b >> 6] >> (b & 63)) & 1, sum = (sb->summary >> (b >> 6)) & 1;
      if (bit != (t->root != NULL) || (bit && !sum)) {
        snprintf(why, whysize, "stream %llu: bin %u's bitmap bits disagree with its contents",
                 (unsigned long long)sb->stream, b);
        return MN_ERR_INTERNAL;
      }
      mn_status st = tree_check(t, &n, why, whysize);
      if (st != MN_OK) return st;
      for (const mn__tnode_t *x = t->min; x; x = mn__tree_next(x))
        if (x->key.stream != sb->stream || mn__bin_clamped(fs, x->key.size) != b) {
          snprintf(why, whysize, "block %#lx (stream %llu, size %zu) is in bin %u of stream %llu",
                   (unsigned long)x->key.addr, (unsigned long long)x->key.stream, x->key.size, b,
                   (unsigned long long)sb->stream);
          return MN_ERR_INTERNAL;
        }
      count += n;
    }
    for (unsigned w = 0; w < (fs->nbins + 63) / 64; w++)
      if (((sb->summary >> w) & 1) != (sb->bits[w] != 0)) {
        snprintf(why, whysize, "stream %llu: bitmap summary bit %u is wrong", (unsigned long long)sb->stream, w);
        return MN_ERR_INTERNAL;
      }
    const mn__tnode_t *h = sb->hot;
    if (h) {
      if (h->key.stream != sb->stream || h->left || h->right || h->parent ||
          mn__tree_contains(&sb->bins[mn__bin_clamped(fs, h->key.size)], h)) {
        snprintf(why, whysize, "stream %llu: its hot block %#lx is linked, in a bin or of another stream",
                 (unsigned long long)sb->stream, (unsigned long)h->key.addr);
        return MN_ERR_INTERNAL;
      }
      count++;
    }
    mn_status st = tree_check(&sb->unmapped, &n, why, whysize);
    if (st != MN_OK) return st;
    if (count != sb->count || n != sb->nunmapped || sb->nsegs == 0) {
      snprintf(why, whysize, "stream %llu: %zu free and %zu unmapped blocks counted as %zu and %zu (%zu segments)",
               (unsigned long long)sb->stream, count, n, sb->count, sb->nunmapped, sb->nsegs);
      return MN_ERR_INTERNAL;
    }
    total += count;
    unmapped += n;
  }
  if (streams != fs->nstreams) {
    snprintf(why, whysize, "%zu streams found, %zu counted", streams, fs->nstreams);
    return MN_ERR_INTERNAL;
  }
  return MN_OK;
}

void mn__fset_counts(const mn__fset_t *fs, size_t *free_blocks, size_t *unmapped) {
  *free_blocks = *unmapped = 0;
  for (size_t i = 0; i < fs->cap; i++)
    if (fs->slots[i]) {
      *free_blocks += fs->slots[i]->count;
      *unmapped += fs->slots[i]->nunmapped;
    }
}
