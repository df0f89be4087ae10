/* tests/view_chain_index.c: the view-chain interpreter's advanced-indexing
 * ops (docs/VIEW_CHAINS.md, "Advanced indexing"): index_select, take,
 * gather, masked_select, index, index_put, scatter, scatter_add, with index
 * values written as literal lists. See view_chain_internal.h. Single thread
 * per chain. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/index.h"
#include "view_chain_internal.h"

/* Trailing flags of an index op. */
typedef struct {
  bool int32; /* integer indices are int32 (default int64) */
  bool uint8; /* masks are uint8 (default bool) */
  bool cpu;   /* indices are made on the CPU (default: the chain's device) */
} flags_t;

/* Strips the trailing flags off a[0..*na). */
static void parse_flags(int *na, char **a, flags_t *f) {
  memset(f, 0, sizeof *f);
  while (*na > 0) {
    const char *s = a[*na - 1];
    if (strcmp(s, "int32") == 0) f->int32 = true;
    else if (strcmp(s, "uint8") == 0) f->uint8 = true;
    else if (strcmp(s, "cpu") == 0) f->cpu = true;
    else break;
    (*na)--;
  }
}

/* "1,-2,3" or "-" into a malloc'ed array (at most MAX_ELEMS items). */
static bool parse_values(const char *s, int64_t **out, int64_t *n) {
  *n = 0;
  *out = NULL;
  if (strcmp(s, "-") == 0) return true;
  int64_t cap = 16;
  int64_t *v = malloc((size_t)cap * sizeof *v);
  if (!v) return false;
  const char *p = s;
  while (*p) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p || *n >= MAX_ELEMS) {
      free(v);
      return false;
    }
    if (*n == cap) {
      int64_t *g = realloc(v, (size_t)(cap *= 2) * sizeof *v);
      if (!g) {
        free(v);
        return false;
      }
      v = g;
    }
    v[(*n)++] = x;
    if (*end == ',') p = end + 1;
    else if (*end == '\0') p = end;
    else {
      free(v);
      return false;
    }
  }
  *out = v;
  return true;
}

/* An index operand "SHAPE/LIST" (a mask with `mask`): a contiguous view of
 * that shape holding LIST, int64/int32 (or bool/uint8) on the chain's device
 * or the CPU. false: unparsable (*st untouched); else *st is the status. */
static bool make_index(chain_t *c, const char *tok, bool mask, const flags_t *f, mn_view_t **out, mn_status *st) {
  const char *slash = strchr(tok, '/');
  if (!slash || (size_t)(slash - tok) >= 256) return false;
  char shape_s[256];
  memcpy(shape_s, tok, (size_t)(slash - tok));
  shape_s[slash - tok] = '\0';
  int64_t sizes[MN_MAX_DIMS + 1];
  int nd = 0;
  if (!chain_parse_list(shape_s, sizes, &nd) || nd > MN_MAX_DIMS) return false;
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) {
    if (sizes[d] < 0 || sizes[d] > MAX_ELEMS) return false;
    numel *= sizes[d];
    if (numel > MAX_ELEMS) return false;
  }
  int64_t *vals = NULL, n = 0;
  if (!parse_values(slash + 1, &vals, &n)) return false;
  if (n != numel) {
    free(vals);
    return false;
  }
  mn_dtype dt = mask ? (f->uint8 ? MN_DTYPE_UINT8 : MN_DTYPE_BOOL) : (f->int32 ? MN_DTYPE_INT32 : MN_DTYPE_INT64);
  mn_view_t *h = NULL;
  *st = mn_view_empty(mn_device_cpu(), dt, nd, sizes, &h);
  for (int64_t i = 0; i < n && *st == MN_OK; i++) {
    char *p = (char *)mn_view_data(h);
    if (dt == MN_DTYPE_INT64) ((int64_t *)p)[i] = vals[i];
    else if (dt == MN_DTYPE_INT32) ((int32_t *)p)[i] = (int32_t)vals[i];
    else p[i] = (char)(vals[i] != 0);
  }
  free(vals);
  mn_device_t dev = mn_view_device(c->cur);
  if (*st == MN_OK && !f->cpu && dev.type != MN_DEVICE_CPU) {
    mn_view_t *d = NULL;
    *st = mn_view_to(h, dev, dt, false, NULL, &d);
    mn_view_destroy(h);
    h = d;
  }
  if (*st != MN_OK) {
    mn_view_destroy(h);
    h = NULL;
  }
  *out = h;
  return true;
}

/* arange(prod(shape)) in the current dtype on the chain's device. */
static bool make_values(chain_t *c, const char *shape_tok, mn_view_t **out, mn_status *st) {
  int64_t sizes[MN_MAX_DIMS + 1];
  int nd = 0;
  if (!chain_parse_list(shape_tok, sizes, &nd) || nd > MN_MAX_DIMS) return false;
  int64_t n = 1;
  for (int d = 0; d < nd; d++) {
    if (sizes[d] < 0 || sizes[d] > MAX_ELEMS) return false;
    n *= sizes[d];
    if (n > MAX_ELEMS) return false;
  }
  *st = chain_make_arange(mn_view_device(c->cur), mn_view_dtype(c->cur), nd, sizes, out);
  return true;
}

static void destroy_all(mn_view_t **v, int n) {
  for (int i = 0; i < n; i++) mn_view_destroy(v[i]);
}

/* The entries of index / index_put: ":" or "SHAPE/LIST" or "mSHAPE/LIST". */
static bool make_entries(chain_t *c, int na, char **a, const flags_t *f, mn_view_t **ix, int *n, mn_status *st) {
  *n = 0;
  *st = MN_OK;
  if (na > MN_MAX_DIMS) return false;
  for (int i = 0; i < na; i++) {
    ix[i] = NULL;
    if (strcmp(a[i], ":") == 0) {
      (*n)++;
      continue;
    }
    bool mask = a[i][0] == 'm';
    if (!make_index(c, a[i] + mask, mask, f, &ix[i], st)) {
      destroy_all(ix, i);
      return false;
    }
    (*n)++;
    if (*st != MN_OK) return true; /* the caller destroys ix[0..*n) */
  }
  return true;
}

#define PARSE_FAIL() (chain_parse_fail(c, "bad arguments to '%s'", name), CHAIN_FAILED)

chain_ext_result chain_index_op(chain_t *c, const char *name, int na, char **a, mn_view_t **next, mn_status *st) {
  static const char *const OPS[] = {"index_select", "take", "gather", "masked_select", "index",
                                    "index_put",    "scatter", "scatter_add"};
  int which = -1;
  for (int i = 0; i < (int)(sizeof OPS / sizeof *OPS); i++)
    if (strcmp(name, OPS[i]) == 0) which = i;
  if (which < 0) return CHAIN_NOT_MINE;
  flags_t f;
  parse_flags(&na, a, &f);
  mn_view_t *cur = c->cur, *ix = NULL, *src = NULL;
  int dim = 0;
  *st = MN_OK;
  switch (which) {
    case 0: /* index_select D IDX */
    case 2: /* gather D IDX */
      if (na != 2 || !chain_parse_int(a[0], &dim) || !make_index(c, a[1], false, &f, &ix, st)) return PARSE_FAIL();
      if (*st == MN_OK)
        *st = which == 0 ? mn_view_index_select(cur, dim, ix, NULL, next) : mn_view_gather(cur, dim, ix, NULL, next);
      break;
    case 1: /* take IDX */
      if (na != 1 || !make_index(c, a[0], false, &f, &ix, st)) return PARSE_FAIL();
      if (*st == MN_OK) *st = mn_view_take(cur, ix, NULL, next);
      break;
    case 3: /* masked_select MASK */
      if (na != 1 || !make_index(c, a[0] + (a[0][0] == 'm'), true, &f, &ix, st)) return PARSE_FAIL();
      if (*st == MN_OK) *st = mn_view_masked_select(cur, ix, NULL, next);
      break;
    case 4:   /* index E... */
    case 5: { /* index_put VSHAPE set|accumulate E... */
      mn_view_t *ixs[MN_MAX_DIMS] = {0};
      int n = 0, skip = which == 5 ? 2 : 0;
      bool acc = false;
      if (which == 5) {
        if (na < 2 || (strcmp(a[1], "set") != 0 && strcmp(a[1], "accumulate") != 0)) return PARSE_FAIL();
        acc = a[1][0] == 'a';
        if (!make_values(c, a[0], &src, st)) return PARSE_FAIL();
      }
      if (!make_entries(c, na - skip, a + skip, &f, ixs, &n, st)) {
        mn_view_destroy(src);
        return PARSE_FAIL();
      }
      if (*st == MN_OK) {
        if (which == 4) *st = mn_view_index(cur, n, (const mn_view_t *const *)ixs, NULL, next);
        else *st = mn_view_index_put(cur, n, (const mn_view_t *const *)ixs, src, acc, NULL);
      }
      destroy_all(ixs, n);
      break;
    }
    default: /* scatter|scatter_add D IDX SSHAPE */
      if (na != 3 || !chain_parse_int(a[0], &dim)) return PARSE_FAIL();
      if (!make_index(c, a[1], false, &f, &ix, st)) return PARSE_FAIL();
      if (*st == MN_OK && !make_values(c, a[2], &src, st)) {
        mn_view_destroy(ix);
        return PARSE_FAIL();
      }
      if (*st == MN_OK)
        *st = which == 6 ? mn_view_scatter(cur, dim, ix, src, NULL) : mn_view_scatter_add(cur, dim, ix, src, NULL);
      break;
  }
  bool inplace = which >= 5;
  if (*st == MN_OK && inplace) *st = chain_wait_dev(mn_view_device(cur));
  mn_view_destroy(ix);
  mn_view_destroy(src);
  if (*st != MN_OK) {
    if (!inplace && *next) {
      mn_view_destroy(*next);
      *next = NULL;
    }
    chain_lib_fail(c, *st);
    return CHAIN_FAILED;
  }
  return inplace ? CHAIN_INPLACE : CHAIN_NEXT;
}
