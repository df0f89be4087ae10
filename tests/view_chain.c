/* tests/view_chain.c: the view-chain interpreter (docs/VIEW_CHAINS.md): parses
 * "creation | op | op ...", runs it with the mn_view_* API and prints JSON. */
#include "view_chain.h"
#include "view_chain_internal.h"

#include "mnemo/dlpack.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void chain_sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->buf && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? b->cap * 2 : 256) + (size_t)n;
    char *nb = realloc(b->buf, cap);
    if (!nb) return;
    b->buf = nb;
    b->cap = cap;
  }
}

void chain_sb_json_string(sbuf *b, const char *s) {
  chain_sb_printf(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') chain_sb_printf(b, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) chain_sb_printf(b, "\\u%04x", c);
    else chain_sb_printf(b, "%c", c);
  }
  chain_sb_printf(b, "\"");
}

bool chain_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

bool chain_parse_int(const char *s, int *out) {
  int64_t v;
  if (!chain_parse_i64(s, &v) || v < -100000 || v > 100000) return false;
  *out = (int)v;
  return true;
}

/* "none" -> dflt */
bool chain_parse_opt(const char *s, int64_t dflt, int64_t *out) {
  if (s && strcmp(s, "none") == 0) {
    *out = dflt;
    return true;
  }
  return chain_parse_i64(s, out);
}

/* "1,2,3" or "-" (empty list) */
bool chain_parse_list(const char *s, int64_t *out, int *n) {
  *n = 0;
  if (strcmp(s, "-") == 0) return true;
  const char *p = s;
  while (*p) {
    if (*n >= MN_MAX_DIMS + 1) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p) return false;
    out[(*n)++] = v;
    if (*end == ',') p = end + 1;
    else if (*end == '\0') p = end;
    else return false;
  }
  return true;
}

bool chain_parse_scalar(const char *s, mn_scalar_t *out) {
  int64_t i;
  if (strcmp(s, "true") == 0) *out = mn_scalar_bool(true);
  else if (strcmp(s, "false") == 0) *out = mn_scalar_bool(false);
  else if (chain_parse_i64(s, &i)) *out = mn_scalar_int(i);
  else {
    char *end = NULL;
    double f = strtod(s, &end);
    if (end == s) return false;
    if (*end == 'j' && end[1] == '\0') *out = mn_scalar_complex(0, f); /* "2.5j" */
    else if (*end) return false;
    else *out = mn_scalar_float(f);
  }
  return true;
}

/* Fails the chain with the library's message. */
bool chain_lib_fail(chain_t *c, mn_status st) {
  c->st = st;
  snprintf(c->err, sizeof c->err, "%s", mn_last_error());
  return false;
}

bool chain_fail(chain_t *c, mn_status st, const char *msg) {
  c->st = st;
  snprintf(c->err, sizeof c->err, "%s", msg);
  return false;
}

bool chain_parse_fail(chain_t *c, const char *fmt, const char *what) {
  c->st = MN_ERR_FORMAT;
  snprintf(c->err, sizeof c->err, "parse: ");
  snprintf(c->err + 7, sizeof c->err - 7, fmt, what);
  return false;
}

/* Replaces the current view by `next` (owned). */
void chain_advance(chain_t *c, mn_view_t *next) {
  if (c->cur != c->root) mn_view_destroy(c->cur);
  c->cur = next;
}

bool chain_too_big(chain_t *c, const mn_view_t *v) {
  if (mn_view_numel(v) <= MAX_ELEMS) return false;
  c->st = MN_ERR_NOT_SUPPORTED;
  snprintf(c->err, sizeof c->err, "driver: %lld elements are more than the driver materializes",
           (long long)mn_view_numel(v));
  return true;
}

mn_status chain_wait_dev(mn_device_t dev) {
  return dev.type == MN_DEVICE_CPU ? MN_OK : mn_device_synchronize(dev);
}

/* A new contiguous 1-d arange(n) of dtype on dev, viewed as sizes. */
mn_status chain_make_arange(mn_device_t dev, mn_dtype dt, int ndim, const int64_t *sizes, mn_view_t **out) {
  if (dev.type == MN_DEVICE_META) return mn_view_empty(dev, dt, ndim, sizes, out); /* sizes, no data */
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  mn_view_t *h = NULL, *v = NULL;
  mn_status st = mn_view_empty(mn_device_cpu(), dt, ndim, sizes, &h);
  if (st != MN_OK) return st;
  size_t item = mn_dtype_itemsize(dt);
  for (int64_t i = 0; i < n && st == MN_OK; i++)
    st = mn_scalar_to_bytes(mn_scalar_int(i), dt, (char *)mn_view_data(h) + (size_t)i * item);
  if (st == MN_OK && dev.type == MN_DEVICE_CPU) {
    *out = h;
    return MN_OK;
  }
  if (st == MN_OK) st = mn_view_to(h, dev, dt, false, NULL, &v);
  mn_view_destroy(h);
  if (st == MN_OK) *out = v;
  return st;
}

/* Creation: arange N [dtype] | zeros|ones S... [dtype] | full VALUE S... [dtype] */
static bool run_create(chain_t *c, op_t *op) {
  const char *name = op->tok[0];
  int first = 1, last = op->ntok;
  mn_dtype dt = strcmp(name, "arange") == 0 ? MN_DTYPE_INT64 : MN_DTYPE_FLOAT32;
  if (last > 1 && !chain_parse_i64(op->tok[last - 1], &(int64_t){0})) {
    if (mn_dtype_parse(op->tok[last - 1], &dt) != MN_OK) return chain_parse_fail(c, "unknown dtype '%s'", op->tok[last - 1]);
    last--;
  }
  mn_scalar_t value = mn_scalar_int(0);
  if (strcmp(name, "full") == 0) {
    if (first >= last || !chain_parse_scalar(op->tok[first], &value)) return chain_parse_fail(c, "%s needs a value", name);
    first++;
  } else if (strcmp(name, "ones") == 0) {
    value = mn_scalar_int(1);
  } else if (strcmp(name, "arange") == 0) {
    if (last - first != 1) return chain_parse_fail(c, "%s takes one count", name);
  } else if (strcmp(name, "zeros") != 0) {
    return chain_parse_fail(c, "unknown creation op '%s'", name);
  }
  int64_t sizes[MN_MAX_DIMS];
  int ndim = last - first;
  if (ndim > MN_MAX_DIMS) return chain_parse_fail(c, "%s: too many sizes", name);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (!chain_parse_i64(op->tok[first + i], &sizes[i]) || sizes[i] < 0 || sizes[i] > MAX_ELEMS)
      return chain_parse_fail(c, "bad size '%s'", op->tok[first + i]);
    n *= sizes[i];
    if (n > MAX_ELEMS) return chain_parse_fail(c, "%s: too many elements", name);
  }
  mn_view_t *v = NULL;
  mn_status st;
  if (strcmp(name, "arange") == 0) {
    st = chain_make_arange(c->dev, dt, ndim, sizes, &v);
  } else {
    st = mn_view_empty(c->dev, dt, ndim, sizes, &v);
    if (st == MN_OK) st = mn_view_fill(v, value, NULL);
    if (st != MN_OK) mn_view_destroy(v);
  }
  if (st != MN_OK) return chain_lib_fail(c, st);
  c->root = c->cur = v;
  return true;
}

/* ---- DLPack as a producer that tells the truth or lies about its shape ---- */

typedef struct {
  DLManagedTensor t;        /* what we hand to the importer */
  DLManagedTensor *export_; /* keeps the exported storage alive */
  int64_t shape[MN_MAX_DIMS + 1], strides[MN_MAX_DIMS + 1];
} producer_t;

static void producer_delete(DLManagedTensor *t) {
  producer_t *p = t->manager_ctx;
  p->export_->deleter(p->export_);
  free(p);
}

/* dlpack: cur through mn_view_to_dlpack and back (legacy, versioned when
 * `versioned`). dlpack_as SIZES STRIDES|none: a tensor of cur's dtype over
 * cur's whole storage with the given geometry, as a foreign producer would
 * hand it over; the import must refuse what overflows, and what it accepts
 * is used only when it lies inside the storage (a producer that claims more
 * memory than it has is outside any importer's reach). */
static mn_status dlpack_import(const mn_view_t *cur, int n1, const int64_t *sizes, int n2, const int64_t *strides,
                               bool as, bool versioned, mn_view_t **next) {
  if (!as && versioned) {
    DLManagedTensorVersioned *v = NULL;
    mn_status st = mn_view_to_dlpack_versioned(cur, &v);
    if (st == MN_OK && (st = mn_view_from_dlpack_versioned(v, next)) != MN_OK) v->deleter(v);
    return st;
  }
  DLManagedTensor *e = NULL;
  mn_status st = mn_view_to_dlpack(cur, &e);
  if (st != MN_OK) return st;
  if (!as) {
    if ((st = mn_view_from_dlpack(e, next)) != MN_OK) e->deleter(e); /* a refusal leaves it ours */
    return st;
  }
  producer_t *p = calloc(1, sizeof *p);
  if (!p) {
    e->deleter(e);
    return MN_ERR_OUT_OF_MEMORY;
  }
  p->export_ = e;
  p->t.dl_tensor = e->dl_tensor;
  p->t.dl_tensor.data = mn_storage_data(mn_view_storage(cur));
  p->t.dl_tensor.byte_offset = 0;
  p->t.dl_tensor.ndim = n1;
  memcpy(p->shape, sizes, (size_t)n1 * sizeof *sizes);
  p->t.dl_tensor.shape = p->shape;
  if (n2 >= 0) memcpy(p->strides, strides, (size_t)n2 * sizeof *strides);
  p->t.dl_tensor.strides = n2 >= 0 ? p->strides : NULL;
  p->t.manager_ctx = p;
  p->t.deleter = producer_delete;
  st = mn_view_from_dlpack(&p->t, next);
  if (st != MN_OK) {
    producer_delete(&p->t); /* a refusal leaves the tensor with its producer */
    return st;
  }
  return MN_OK;
}

static bool run_dlpack(chain_t *c, int n1, const int64_t *sizes, int n2, const int64_t *strides, bool as,
                       bool versioned, mn_view_t **next) {
  mn_status st = dlpack_import(c->cur, n1, sizes, n2, strides, as, versioned, next);
  if (st != MN_OK) return chain_lib_fail(c, st);
  if (mn_storage_nbytes(mn_view_storage(*next)) > mn_storage_nbytes(mn_view_storage(c->cur))) {
    mn_view_destroy(*next); /* runs producer_delete */
    *next = NULL;
    c->st = MN_ERR_INVALID_ARGUMENT;
    snprintf(c->err, sizeof c->err, "dlpack_as: the geometry reaches beyond the producer's storage");
    return false;
  }
  return true;
}

#define NEED(cond, what)                                    \
  do {                                                      \
    if (!(cond)) return chain_parse_fail(c, "bad arguments to %s", what); \
  } while (0)

static bool run_op(chain_t *c, op_t *op) {
  const char *name = op->tok[0];
  int na = op->ntok - 1;
  char **a = op->tok + 1;
  mn_view_t *cur = c->cur, *next = NULL;
  mn_status st = MN_OK;
  int64_t l1[MN_MAX_DIMS + 1], l2[MN_MAX_DIMS + 1], x, y, z;
  int n1 = 0, n2 = 0, d0, d1;
  if (strcmp(name, "view") == 0 || strcmp(name, "reshape") == 0 || strcmp(name, "expand") == 0) {
    NEED(na <= MN_MAX_DIMS, name);
    for (int i = 0; i < na; i++) NEED(chain_parse_i64(a[i], &l1[i]), name);
    if (name[0] == 'v') st = mn_view_view(cur, na, l1, &next);
    else if (name[0] == 'r') {
      if (chain_too_big(c, cur)) return false;
      st = mn_view_reshape(cur, na, l1, NULL, &next);
    } else st = mn_view_expand(cur, na, l1, &next);
  } else if (strcmp(name, "view_dtype") == 0) {
    mn_dtype dt;
    NEED(na == 1 && mn_dtype_parse(a[0], &dt) == MN_OK, name);
    st = mn_view_view_dtype(cur, dt, &next);
  } else if (strcmp(name, "t") == 0) {
    NEED(na == 0, name);
    st = mn_view_t2d(cur, &next);
  } else if (strcmp(name, "transpose") == 0) {
    NEED(na == 2 && chain_parse_int(a[0], &d0) && chain_parse_int(a[1], &d1), name);
    st = mn_view_transpose(cur, d0, d1, &next);
  } else if (strcmp(name, "permute") == 0) {
    int dims[MN_MAX_DIMS];
    NEED(na <= MN_MAX_DIMS, name);
    for (int i = 0; i < na; i++) NEED(chain_parse_int(a[i], &dims[i]), name);
    st = mn_view_permute(cur, na, dims, &next);
  } else if (strcmp(name, "movedim") == 0) {
    NEED(na == 2 && chain_parse_list(a[0], l1, &n1) && chain_parse_list(a[1], l2, &n2) && n1 <= MN_MAX_DIMS, name);
    if (n1 != n2) {
      c->st = MN_ERR_INVALID_ARGUMENT;
      snprintf(c->err, sizeof c->err, "movedim: Invalid source or destination dims: source and destination should "
                                      "contain the same number of dims");
      return false;
    }
    int s[MN_MAX_DIMS], dd[MN_MAX_DIMS];
    for (int i = 0; i < n1; i++) {
      NEED(l1[i] > -1000 && l1[i] < 1000 && l2[i] > -1000 && l2[i] < 1000, name);
      s[i] = (int)l1[i];
      dd[i] = (int)l2[i];
    }
    st = mn_view_movedim(cur, n1, s, dd, &next);
  } else if (strcmp(name, "slice") == 0) {
    NEED(na == 4 && chain_parse_int(a[0], &d0) && chain_parse_opt(a[1], 0, &x) && chain_parse_opt(a[2], MN_VIEW_END, &y) &&
             chain_parse_opt(a[3], 1, &z),
         name);
    st = mn_view_slice(cur, d0, x, y, z, &next);
  } else if (strcmp(name, "narrow") == 0) {
    NEED(na == 3 && chain_parse_int(a[0], &d0) && chain_parse_i64(a[1], &x) && chain_parse_i64(a[2], &y), name);
    st = mn_view_narrow(cur, d0, x, y, &next);
  } else if (strcmp(name, "select") == 0) {
    NEED(na == 2 && chain_parse_int(a[0], &d0) && chain_parse_i64(a[1], &x), name);
    st = mn_view_select(cur, d0, x, &next);
  } else if (strcmp(name, "unsqueeze") == 0) {
    NEED(na == 1 && chain_parse_int(a[0], &d0), name);
    st = mn_view_unsqueeze(cur, d0, &next);
  } else if (strcmp(name, "squeeze") == 0) {
    NEED(na <= 1, name);
    if (na == 0) st = mn_view_squeeze(cur, &next);
    else {
      NEED(chain_parse_int(a[0], &d0), name);
      st = mn_view_squeeze_dim(cur, d0, &next);
    }
  } else if (strcmp(name, "flatten") == 0) {
    d0 = 0;
    d1 = -1;
    NEED(na == 0 || (na == 2 && chain_parse_int(a[0], &d0) && chain_parse_int(a[1], &d1)), name);
    if (chain_too_big(c, cur)) return false;
    st = mn_view_flatten(cur, d0, d1, NULL, &next);
  } else if (strcmp(name, "unflatten") == 0) {
    NEED(na == 2 && chain_parse_int(a[0], &d0) && chain_parse_list(a[1], l1, &n1) && n1 <= MN_MAX_DIMS, name);
    st = mn_view_unflatten(cur, d0, n1, l1, &next);
  } else if (strcmp(name, "diagonal") == 0) {
    x = 0;
    d0 = 0;
    d1 = 1;
    NEED(na == 0 || (na == 3 && chain_parse_i64(a[0], &x) && chain_parse_int(a[1], &d0) && chain_parse_int(a[2], &d1)), name);
    st = mn_view_diagonal(cur, x, d0, d1, &next);
  } else if (strcmp(name, "unfold") == 0) {
    NEED(na == 3 && chain_parse_int(a[0], &d0) && chain_parse_i64(a[1], &x) && chain_parse_i64(a[2], &y), name);
    st = mn_view_unfold(cur, d0, x, y, &next);
  } else if (strcmp(name, "split") == 0 || strcmp(name, "chunk") == 0) {
    NEED(na == 3 && chain_parse_i64(a[0], &x) && chain_parse_int(a[1], &d0) && chain_parse_i64(a[2], &y), name);
    /* chunk(n) makes min(n, size) pieces (all n when the dim is empty) */
    int64_t dim_size = mn_view_size(cur, d0);
    if (name[0] == 'c' && x > 4096 && (dim_size > 4096 || dim_size == 0))
      return chain_parse_fail(c, "%s: too many chunks", name);
    mn_view_t **views = NULL;
    int count = 0;
    st = name[0] == 's' ? mn_view_split(cur, x, d0, &views, &count) : mn_view_chunk(cur, x, d0, &views, &count);
    if (st == MN_OK) {
      for (int i = 0; i < count; i++)
        if (mn_view_check(views[i]) != MN_OK) {
          mn_view_list_destroy(views, count);
          return chain_lib_fail(c, MN_ERR_INTERNAL);
        }
      if (y < 0 || y >= count) {
        mn_view_list_destroy(views, count);
        c->st = MN_ERR_INVALID_ARGUMENT;
        snprintf(c->err, sizeof c->err, "%s: piece %lld of %d does not exist", name, (long long)y, count);
        return false;
      }
      next = views[y];
      views[y] = NULL;
      mn_view_list_destroy(views, count);
    }
  } else if (strcmp(name, "real") == 0 || strcmp(name, "imag") == 0) {
    NEED(na == 0, name);
    st = name[0] == 'r' ? mn_view_real(cur, &next) : mn_view_imag(cur, &next);
  } else if (strcmp(name, "as_strided") == 0) {
    NEED(na == 3 && chain_parse_list(a[0], l1, &n1) && chain_parse_list(a[1], l2, &n2) && n1 == n2 && n1 <= MN_MAX_DIMS &&
             chain_parse_opt(a[2], MN_VIEW_OFFSET_KEEP, &x),
         name);
    st = mn_view_as_strided(cur, n1, l1, l2, x, &next);
  } else if (strcmp(name, "dlpack") == 0) {
    NEED(na <= 1 && (na == 0 || strcmp(a[0], "versioned") == 0), name);
    if (!run_dlpack(c, 0, NULL, 0, NULL, false, na == 1, &next)) return false;
  } else if (strcmp(name, "dlpack_as") == 0) {
    NEED(na == 2 && chain_parse_list(a[0], l1, &n1) && n1 <= MN_MAX_DIMS &&
             (strcmp(a[1], "none") == 0 || (chain_parse_list(a[1], l2, &n2) && n2 == n1)),
         name);
    if (!run_dlpack(c, n1, l1, strcmp(a[1], "none") == 0 ? -1 : n2, l2, true, false, &next)) return false;
  } else if (strcmp(name, "contiguous") == 0 || strcmp(name, "clone") == 0) {
    NEED(na == 0, name);
    if (chain_too_big(c, cur)) return false;
    st = name[1] == 'o' ? mn_view_contiguous(cur, NULL, &next) : mn_view_clone(cur, NULL, &next);
  } else if (strcmp(name, "to") == 0) {
    mn_dtype dt = mn_view_dtype(cur);
    mn_device_t dev = mn_view_device(cur);
    NEED(na >= 1 && na <= 2, name);
    for (int i = 0; i < na; i++)
      NEED(mn_dtype_parse(a[i], &dt) == MN_OK || mn_device_parse(a[i], &dev) == MN_OK, name);
    if (chain_too_big(c, cur)) return false;
    st = mn_view_to(cur, dev, dt, false, NULL, &next);
  } else if (strcmp(name, "copy") == 0) {
    /* copy SHAPE DTYPE: cur.copy_(arange(prod(SHAPE)).view(SHAPE)) */
    mn_dtype dt;
    NEED(na == 2 && chain_parse_list(a[0], l1, &n1) && n1 <= MN_MAX_DIMS && mn_dtype_parse(a[1], &dt) == MN_OK, name);
    int64_t n = 1;
    for (int i = 0; i < n1; i++) {
      NEED(l1[i] >= 0 && l1[i] <= MAX_ELEMS, name);
      n *= l1[i];
      NEED(n <= MAX_ELEMS, name);
    }
    mn_view_t *src = NULL;
    st = chain_make_arange(mn_view_device(cur), dt, n1, l1, &src);
    if (st == MN_OK) st = mn_view_copy(cur, src, NULL);
    mn_view_destroy(src);
    if (st == MN_OK) st = chain_wait_dev(mn_view_device(cur));
    if (st != MN_OK) return chain_lib_fail(c, st);
    return true;
  } else if (strcmp(name, "copy_self") == 0) {
    /* copy_self: cur.copy_(root), the chain's first view (broadcast; overlaps) */
    NEED(na == 0, name);
    st = mn_view_copy(cur, c->root, NULL);
    if (st == MN_OK) st = chain_wait_dev(mn_view_device(cur));
    return st == MN_OK ? true : chain_lib_fail(c, st);
  } else if (strcmp(name, "fill") == 0 || strcmp(name, "zero") == 0) {
    mn_scalar_t v = mn_scalar_int(0);
    NEED(name[0] == 'z' ? na == 0 : (na == 1 && chain_parse_scalar(a[0], &v)), name);
    st = name[0] == 'z' ? mn_view_zero(cur, NULL) : mn_view_fill(cur, v, NULL);
    if (st == MN_OK) st = chain_wait_dev(mn_view_device(cur));
    return st == MN_OK ? true : chain_lib_fail(c, st);
  } else if (strcmp(name, "base") == 0) {
    NEED(na == 0, name);
    chain_advance(c, c->root);
    return true;
  } else {
    /* The op families of their own files (view_chain_internal.h). */
    chain_ext_result r = chain_index_op(c, name, na, a, &next, &st);
    if (r == CHAIN_NOT_MINE) r = chain_quant_op(c, name, na, a, &next, &st);
    if (r == CHAIN_NOT_MINE) return chain_parse_fail(c, "unknown op '%s'", name);
    if (r == CHAIN_FAILED) return false;
    if (r == CHAIN_INPLACE) return true;
  }
  if (st != MN_OK) return chain_lib_fail(c, st);
  if (mn_view_check(next) != MN_OK) {
    mn_view_destroy(next);
    return chain_lib_fail(c, MN_ERR_INTERNAL);
  }
  chain_advance(c, next);
  return true;
}

static void print_scalar(sbuf *b, mn_dtype dt, const void *p) {
  mn_scalar_t s;
  if (mn_scalar_from_bytes(dt, p, &s) != MN_OK) {
    chain_sb_printf(b, "null");
    return;
  }
  double parts[2];
  int np = 1;
  switch (s.kind) {
    case MN_SCALAR_BOOL: chain_sb_printf(b, s.v.b ? "true" : "false"); return;
    case MN_SCALAR_INT: chain_sb_printf(b, "%lld", (long long)s.v.i); return;
    case MN_SCALAR_UINT: chain_sb_printf(b, "%llu", (unsigned long long)s.v.u); return;
    case MN_SCALAR_FLOAT: parts[0] = s.v.f; break;
    case MN_SCALAR_COMPLEX: parts[0] = s.v.c[0]; parts[1] = s.v.c[1]; np = 2; break;
  }
  if (np == 2) chain_sb_printf(b, "[");
  for (int i = 0; i < np; i++) {
    double f = parts[i];
    if (i) chain_sb_printf(b, ", ");
    if (isnan(f)) chain_sb_printf(b, "\"nan\"");
    else if (isinf(f)) chain_sb_printf(b, f > 0 ? "\"inf\"" : "\"-inf\"");
    else chain_sb_printf(b, "%.17g", f);
  }
  if (np == 2) chain_sb_printf(b, "]");
}

static mn_status print_view(sbuf *b, chain_t *c) {
  const mn_view_t *v = c->cur;
  mn_view_t *h = NULL;
  if (chain_too_big(c, v)) return c->st; /* a view op may reach it without a copy */
  mn_dtype dt = mn_view_dtype(v);
  int nd = mn_view_ndim(v);
  bool meta = mn_view_device(v).type == MN_DEVICE_META; /* no data: "values": null */
  /* a quantized view: its parameters, and as values its stored integers
   * (int_repr: packed bytes for quint4x2 / quint2x4, as torch) */
  mn_view_t *ir = NULL;
  mn_status st = mn_view_is_quantized(v) && !meta ? mn_view_int_repr(v, NULL, &ir) : MN_OK;
  if (st != MN_OK) return st;
  if (mn_view_is_quantized(v))
    chain_sb_printf(b, "{\"q_scale\": %.17g, \"q_zero_point\": %lld, ", mn_view_q_scale(v),
                    (long long)mn_view_q_zero_point(v));
  if (!meta) st = mn_view_to(ir ? ir : v, mn_device_cpu(), ir ? mn_view_dtype(ir) : dt, false, NULL, &h);
  mn_view_destroy(ir);
  mn_view_t *hc = NULL;
  if (st == MN_OK && !meta) st = mn_view_contiguous(h, NULL, &hc);
  mn_view_destroy(h);
  if (st != MN_OK) return st;
  chain_sb_printf(b, "%s\"dtype\": \"%s\", \"sizes\": [", mn_view_is_quantized(v) ? "" : "{", mn_dtype_name(dt));
  for (int d = 0; d < nd; d++) chain_sb_printf(b, d ? ", %lld" : "%lld", (long long)mn_view_size(v, d));
  chain_sb_printf(b, "], \"strides\": [");
  for (int d = 0; d < nd; d++) chain_sb_printf(b, d ? ", %lld" : "%lld", (long long)mn_view_stride(v, d));
  bool cl = nd == 4 ? mn_view_is_contiguous_channels_last(v) : mn_view_is_contiguous_channels_last_3d(v);
  chain_sb_printf(b, "], \"offset\": %lld, \"contiguous\": %s, \"channels_last\": %s, \"values\": %s",
            (long long)mn_view_offset(v), mn_view_is_contiguous(v) ? "true" : "false", cl ? "true" : "false",
            meta ? "null}" : "[");
  if (meta) return MN_OK;
  const mn_dtype vdt = mn_view_dtype(hc); /* dt, or int_repr's */
  size_t item = mn_dtype_itemsize(vdt);
  for (int64_t i = 0; i < mn_view_numel(hc); i++) {
    if (i) chain_sb_printf(b, ", ");
    print_scalar(b, vdt, (const char *)mn_view_data(hc) + (size_t)i * item);
  }
  chain_sb_printf(b, "]}");
  mn_view_destroy(hc);
  return MN_OK;
}

mn_status mn_chain_run(const char *line, mn_device_t dev, char **json) {
  chain_t c = {.dev = dev, .st = MN_OK};
  sbuf out = {0};
  char *text = strdup(line ? line : "");
  if (!text) return MN_ERR_OUT_OF_MEMORY;
  /* Split into ops at '|', tokens at whitespace. */
  op_t ops[256];
  int nops = 0;
  char *save = NULL;
  for (char *seg = strtok_r(text, "|", &save); seg; seg = strtok_r(NULL, "|", &save)) {
    if (nops == 256) {
      chain_parse_fail(&c, "%s", "too many ops");
      break;
    }
    op_t *op = &ops[nops];
    op->ntok = 0;
    char *s2 = NULL;
    for (char *t = strtok_r(seg, " \t\r\n", &s2); t; t = strtok_r(NULL, " \t\r\n", &s2)) {
      if (op->ntok == MAX_TOK) {
        chain_parse_fail(&c, "%s", "too many arguments");
        break;
      }
      op->tok[op->ntok++] = t;
    }
    if (op->ntok == 0) {
      chain_parse_fail(&c, "%s", "empty op");
      break;
    }
    nops++;
  }
  if (c.st == MN_OK && nops == 0) chain_parse_fail(&c, "%s", "empty chain");
  mn_clear_error();
  bool ok = c.st == MN_OK && run_create(&c, &ops[0]);
  for (int i = 1; ok && i < nops; i++) {
    mn_clear_error();
    ok = run_op(&c, &ops[i]);
  }
  if (ok) {
    mn_status st = print_view(&out, &c);
    if (st != MN_OK) {
      out.len = 0;
      ok = c.err[0] ? false : chain_lib_fail(&c, st); /* keep the driver's own refusal */
    }
  }
  if (!ok) {
    if (c.st != MN_ERR_FORMAT && c.err[0] == '\0') {
      c.st = MN_ERR_INTERNAL;
      snprintf(c.err, sizeof c.err, "refused (%s) without a message", mn_status_name(c.st));
    }
    out.len = 0;
    chain_sb_printf(&out, "{\"error\": ");
    chain_sb_json_string(&out, c.err);
    chain_sb_printf(&out, ", \"status\": \"%s\"}", mn_status_name(c.st));
  }
  if (c.cur != c.root) mn_view_destroy(c.cur);
  mn_view_destroy(c.root);
  free(text);
  *json = out.buf ? out.buf : strdup("{}");
  return ok ? MN_OK : c.st;
}
