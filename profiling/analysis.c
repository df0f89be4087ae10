/* profiling/analysis.c: who holds memory in a trace (its live allocations
 * grouped by stack, then by first user frame), the recorded block of an
 * allocation, the recorded settings, the device a one-device view works on, a
 * growing array (profiling/analysis.h). Pure functions of the trace; any thread. */
#include "profiling/analysis.h"

#include <stdlib.h>
#include <string.h>

#include "mnemo/caching.h"
#include "profiling/stacks.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

const char *mn__trace_recorded_config(const mn_trace_t *t, mn__sbuf_t *notes, bool *as_recorded) {
  const char *conf = mn_trace_meta_get(t, "config");
  *as_recorded = false;
  if (!conf) return "";
  mn_caching_config_t cfg = mn_caching_config_default();
  if (mn_caching_config_parse(conf, &cfg) != MN_OK) {
    if (notes)
      mn__sbuf_printf(notes, "warning: the trace's recorded settings \"%s\" are not mnemo's (%s); replaying with the "
                      "defaults\n", conf, mn_last_error());
    mn_clear_error();
    return "";
  }
  *as_recorded = true;
  return conf;
}

#define RECORDED_ROUND 512u /* PyTorch's block rounding (kMinBlockSize) */

uint64_t mn__trace_recorded_block(const mn_trace_entry_t *e) {
  if (e->block_size) return e->block_size;
  uint64_t n = e->size;
  return n > UINT64_MAX - RECORDED_ROUND ? n : (n + RECORDED_ROUND - 1) / RECORDED_ROUND * RECORDED_ROUND;
}

typedef struct size_key_s {
  uint64_t size;
  size_t index;
} size_key_t;

static int cmp_size_key(const void *a, const void *b) {
  const size_key_t *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return x->index < y->index ? -1 : x->index > y->index;
}

void mn__trace_sort_by_size(const mn_trace_t *t, size_t *idx, size_t n) {
  /* sorted as (size, index) pairs: the comparisons read no entry (a million
   * allocations sort in a tenth of the time the entries' scattered reads took) */
  size_key_t *keys = mn__malloc((n ? n : 1) * sizeof *keys);
  if (!keys) { /* out of memory: the same order, slower */
    for (size_t k = 1; k < n; k++) /* insertion sort keeps it correct without memory */
      for (size_t j = k; j > 0 && cmp_size_key(&(size_key_t){t->entries[idx[j - 1]].size, idx[j - 1]},
                                              &(size_key_t){t->entries[idx[j]].size, idx[j]}) > 0; j--) {
        size_t x = idx[j];
        idx[j] = idx[j - 1];
        idx[j - 1] = x;
      }
    return;
  }
  for (size_t k = 0; k < n; k++) keys[k] = (size_key_t){t->entries[idx[k]].size, idx[k]};
  qsort(keys, n, sizeof *keys, cmp_size_key);
  for (size_t k = 0; k < n; k++) idx[k] = keys[k].index;
  free(keys);
}

static int cmp_holder_key(const void *a, const void *b) {
  const mn__holder_t *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static int cmp_holder_bytes(const void *a, const void *b) {
  const mn__holder_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return cmp_holder_key(a, b);
}

mn_status mn__trace_pick_device(const char *func, const char *name, const mn_trace_t *t, int want, const char *what,
                                mn__sbuf_t *notes, int *index, uint64_t *number, bool *multi) {
  uint64_t one = 0, host = UINT64_MAX;
  bool several = mn_trace_meta_get(t, "devices") != NULL;
  bool has_host = mn_trace_meta_get_u64(t, "host_device", &host) == MN_OK;
  if (!several) mn__ignore(mn_trace_meta_get_u64(t, "device", &one));
  mn_clear_error();
  *multi = several;
  *number = one;
  *index = -1;
  /* the devices present (a bit set of the first 64 indices; more are rare and still replayable) */
  uint64_t seen = 0;
  for (size_t i = 0; i < t->nentries; i++)
    if (t->entries[i].device < 64) seen |= (uint64_t)1 << t->entries[i].device;
  if (has_host && host < 64) seen &= ~((uint64_t)1 << host);
  if (want >= 0) {
    if (has_host && (uint64_t)want == host)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "--trace-device %d is %s's pinned host memory (meta "
                       "host_device): only device memory is replayed here (`mnemo report` shows it as recorded)",
                       want, name);
    bool present = several ? want < 64 && (seen >> want & 1) : (uint64_t)want == one;
    if (!present) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s has no device %d", name, want);
    if (several) *index = want;
    *number = (uint64_t)want;
    return MN_OK;
  }
  if (several && seen) {
    int lowest = 0;
    while (!(seen >> lowest & 1)) lowest++;
    *index = lowest;
    *number = (uint64_t)lowest;
    if ((seen & (seen - 1)) && notes)
      mn__sbuf_printf(notes, "note: %s holds several devices; %s device %d (--trace-device N for another)\n", name,
                      what, lowest);
  }
  return MN_OK;
}

bool mn__grow(void *items, size_t n, size_t *cap, size_t size, size_t first) {
  if (n < *cap) return true;
  size_t c = *cap ? *cap : first;
  if (c > SIZE_MAX / 2 / size) return false;
  if (*cap) c *= 2;
  void *old; /* the caller's pointer, read and written as bytes (it may be any object pointer type) */
  memcpy(&old, items, sizeof old);
  void *p = mn__realloc(old, c * size);
  if (!p) return false;
  memcpy(items, &p, sizeof p);
  *cap = c;
  return true;
}

uint64_t mn__sat_add_u64(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

bool mn__holders(const mn_trace_t *t, size_t *live, size_t n, mn__holder_t **groups, size_t *ngroups) {
  mn__holder_t *g = mn__malloc((n ? n : 1) * sizeof *g);
  if (!g) return false;
  mn__trace_sort_by_size(t, live, n);
  for (size_t k = 0; k < n; k++) {
    const mn_trace_entry_t *e = &t->entries[live[k]];
    g[k] = (mn__holder_t){e->stack, e->stack ? 0 : e->pre ? 1 : 2, 1, e->size,
                                mn__trace_recorded_block(e), 0, e->stack ? 1 : 0};
  }
  qsort(g, n, sizeof *g, cmp_holder_key);
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    if (m && !cmp_holder_key(&g[m - 1], &g[k])) {
      g[m - 1].count++;
      g[m - 1].bytes = mn__sat_add_u64(g[m - 1].bytes, g[k].bytes);
      g[m - 1].block_bytes = mn__sat_add_u64(g[m - 1].block_bytes, g[k].block_bytes);
    } else {
      g[m++] = g[k];
    }
  }
  for (size_t k = 0; k < m; k++) g[k].key = mn__stack_key(t, g[k].stack);
  qsort(g, m, sizeof *g, cmp_holder_bytes);
  *groups = g;
  *ngroups = m;
  return true;
}

/* By first user frame; a stack without one is its own group (then by stack id). */
static int cmp_holder_user_key(const void *a, const void *b) {
  const mn__holder_t *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->key ? 0 : x->stack < y->stack ? -1 : x->stack > y->stack;
}

static int cmp_holder_user_bytes(const void *a, const void *b) {
  const mn__holder_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  int c = cmp_holder_user_key(a, b);
  return c ? c : x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* By key, the most bytes first within one (so a group's first member is its largest stack). */
static int cmp_holder_key_then_bytes(const void *a, const void *b) {
  int c = cmp_holder_user_key(a, b);
  return c ? c : cmp_holder_user_bytes(a, b);
}

void mn__holders_by_key(mn__holder_t *g, size_t *ngroups) {
  size_t n = *ngroups, m = 0;
  qsort(g, n, sizeof *g, cmp_holder_key_then_bytes);
  for (size_t k = 0; k < n; k++) {
    if (m && !cmp_holder_user_key(&g[m - 1], &g[k])) {
      g[m - 1].count += g[k].count;
      g[m - 1].nstacks += g[k].nstacks;
      g[m - 1].bytes = mn__sat_add_u64(g[m - 1].bytes, g[k].bytes);
      g[m - 1].block_bytes = mn__sat_add_u64(g[m - 1].block_bytes, g[k].block_bytes);
    } else {
      g[m++] = g[k];
    }
  }
  qsort(g, m, sizeof *g, cmp_holder_user_bytes);
  *ngroups = m;
}
