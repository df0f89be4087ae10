/* allocators/caching_config.c: caching-allocator configuration (defaults, option strings both
 * ways, validation) and size rules. Thread-safe: pure functions on caller-owned structs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocators/caching_internal.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/strbuf.h"

#define MIB ((size_t)1 << 20)
/* PyTorch keeps 16 division intervals: [1 MiB, 2 MiB) ... [32 GiB, 64 GiB);
 * sizes below 1 MiB use the first and sizes above 32 GiB the last. */
#define PT_INTERVALS 16
#define PT_FIRST_LOG2 20

mn_caching_config_t mn_caching_config_default(void) {
  mn_caching_config_t c;
  memset(&c, 0, sizeof c);
  c.max_split_size = SIZE_MAX;
  c.max_non_split_rounding = MN__LARGE_BUFFER;
  c.garbage_collection_threshold = 0.0;
  c.expandable_segments = false;
  c.per_process_memory_fraction = 1.0;
  snprintf(c.backend, sizeof c.backend, "native");
  return c;
}

static bool is_pow2(size_t v) { return v && !(v & (v - 1)); }

static unsigned floor_log2(size_t v) { return v ? 63u - (unsigned)__builtin_clzll((unsigned long long)v) : 0; }

mn_status mn__caching_config_validate(const char *func, const mn_caching_config_t *c) {
  if (c->max_split_size < MN__LARGE_BUFFER)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "max_split_size=%zu must be >= %zu (20 MiB)",
                     c->max_split_size, MN__LARGE_BUFFER);
  if (c->max_non_split_rounding < MN__LARGE_BUFFER)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "max_non_split_rounding=%zu must be >= %zu (20 MiB)",
                     c->max_non_split_rounding, MN__LARGE_BUFFER);
  if (!(c->garbage_collection_threshold >= 0.0 && c->garbage_collection_threshold < 1.0))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "garbage_collection_threshold=%g must be 0 (off) or in (0, 1)",
                     c->garbage_collection_threshold);
  if (!(c->per_process_memory_fraction > 0.0 && c->per_process_memory_fraction <= 1.0))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "per_process_memory_fraction=%g must be in (0, 1]",
                     c->per_process_memory_fraction);
  for (int i = 0; i < MN_ROUNDUP_BUCKETS; i++)
    if (c->roundup_power2_divisions[i] && !is_pow2(c->roundup_power2_divisions[i]))
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "roundup_power2_divisions[%d]=%u must be 0 or a power of two", i,
                       c->roundup_power2_divisions[i]);
  if (strcmp(c->backend, "native") != 0 && strcmp(c->backend, "cudaMallocAsync") != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "backend=\"%.31s\" must be native or cudaMallocAsync",
                     c->backend);
  return MN_OK;
}

/* ---- size rules ------------------------------------------------------------------ */

/* The next multiple of 2^floor(log2 size) / divisions at or above size (PyTorch's
 * roundup_power2_next_division): 1200 with 4 divisions -> 1280. */
size_t mn__roundup_power2_next_division(size_t size, size_t divisions) {
  if (size == 0 || is_pow2(size)) return size;
  size_t floor2 = (size_t)1 << floor_log2(size);
  size_t step = floor2 >> floor_log2(divisions ? divisions : 1);
  if (step == 0) return floor2 << 1;
  size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}



const char *mn__format_size(size_t bytes, char *buf, size_t bufsize) {
  if (bytes <= 1024) snprintf(buf, bufsize, "%zu bytes", bytes);
  else if (bytes <= MIB) snprintf(buf, bufsize, "%.2f KiB", (double)bytes / 1024.0);
  else if (bytes <= ((size_t)1 << 30)) snprintf(buf, bufsize, "%.2f MiB", (double)bytes / (double)MIB);
  else snprintf(buf, bufsize, "%.2f GiB", (double)bytes / (double)((size_t)1 << 30));
  return buf;
}

/* ---- parsing ------------------------------------------------------------------------ */

#define MAX_TOKENS 512
#define TOKEN_MAX 64

typedef struct lexer_s {
  char tok[MAX_TOKENS][TOKEN_MAX];
  size_t n;
} lexer_t;

/* Splits on , : [ ] (each its own token), dropping spaces, as PyTorch's lexArgs. */
static mn_status lex(const char *text, lexer_t *lx) {
  size_t len = 0;
  lx->n = 0;
  for (const char *p = text;; p++) {
    bool punct = *p == ',' || *p == ':' || *p == '[' || *p == ']';
    if (*p == '\0' || punct) {
      if (len) {
        lx->tok[lx->n - 1][len] = '\0';
        len = 0;
      }
      if (*p == '\0') break;
      if (lx->n == MAX_TOKENS) goto too_many;
      lx->tok[lx->n][0] = *p;
      lx->tok[lx->n][1] = '\0';
      lx->n++;
    } else if (*p != ' ' && *p != '\t' && *p != '\n') {
      if (len == 0) {
        if (lx->n == MAX_TOKENS) goto too_many;
        lx->n++;
      }
      if (len + 1 >= TOKEN_MAX)
        return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_caching_config_parse", "token \"%.20s...\" is too long", p - len);
      lx->tok[lx->n - 1][len++] = *p;
    }
  }
  return MN_OK;
too_many:
  return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_caching_config_parse", "more than %d tokens", MAX_TOKENS);
}

static const char *tok_at(const lexer_t *lx, size_t i) { return i < lx->n ? lx->tok[i] : ""; }

static mn_status bad(const char *key, const char *value, const char *why) {
  return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_caching_config_parse", "%s=%s: %s", key, *value ? value : "(missing)",
                   why);
}

static bool parse_uint(const char *s, size_t *out) {
  if (!*s) return false;
  for (const char *p = s; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  unsigned long long v = strtoull(s, NULL, 10);
  if (errno == ERANGE || v > SIZE_MAX) return false;
  *out = (size_t)v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  if (!*s) return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || errno == ERANGE || !isfinite(v)) return false;
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  if (!strcmp(s, "True") || !strcmp(s, "true") || !strcmp(s, "1")) *out = true;
  else if (!strcmp(s, "False") || !strcmp(s, "false") || !strcmp(s, "0")) *out = false;
  else return false;
  return true;
}

/* Megabytes >= 20, clamped as PyTorch to what fits in bytes. */
static mn_status parse_mb(const char *key, const char *v, size_t *out) {
  size_t mb = 0;
  if (!parse_uint(v, &mb)) return bad(key, v, "expected a whole number of MiB");
  if (mb < MN__LARGE_BUFFER / MIB) return bad(key, v, "must be >= 20 (MiB)");
  if (mb > SIZE_MAX / MIB) mb = SIZE_MAX / MIB;
  *out = mb * MIB;
  return MN_OK;
}

/* roundup_power2_divisions: a number, or [size_mb:divisions,...,>:divisions] with
 * PyTorch's semantics: the first listed interval also covers every smaller one,
 * and ">" sets the last listed interval and every larger one. Fills pt[16]. */
static mn_status parse_divisions(const lexer_t *lx, size_t *i, size_t pt[PT_INTERVALS]) {
  const char *key = "roundup_power2_divisions";
  const char *v = tok_at(lx, *i);
  if (strcmp(v, "[") != 0) {
    size_t d = 0;
    if (!parse_uint(v, &d) || (d && !is_pow2(d))) return bad(key, v, "divisions must be a power of two");
    for (int k = 0; k < PT_INTERVALS; k++) pt[k] = d;
    return MN_OK;
  }
  bool first = true;
  size_t last = 0;
  for (;;) {
    const char *iv = tok_at(lx, ++*i);
    if (!strcmp(iv, "]")) break;
    if (strcmp(tok_at(lx, ++*i), ":") != 0) return bad(key, iv, "expected size_mb:divisions inside [...]");
    const char *dv = tok_at(lx, ++*i);
    size_t d = 0;
    if (!parse_uint(dv, &d) || (d && !is_pow2(d))) return bad(key, dv, "divisions must be 0 or a power of two");
    if (!strcmp(iv, ">")) {
      for (size_t k = last; k < PT_INTERVALS; k++) pt[k] = d;
    } else {
      size_t mb = 0;
      if (!parse_uint(iv, &mb) || !is_pow2(mb)) return bad(key, iv, "interval sizes must be powers of two (MiB)");
      size_t idx = floor_log2(mb);
      if (idx > PT_INTERVALS - 1) idx = PT_INTERVALS - 1;
      if (first) {
        for (size_t k = 0; k < idx; k++) pt[k] = d;
        first = false;
      }
      pt[idx] = d;
      last = idx;
    }
    const char *sep = tok_at(lx, *i + 1);
    if (!strcmp(sep, "]")) continue;
    if (strcmp(sep, ",") != 0) return bad(key, sep, "expected , or ] in the interval list");
    ++*i;
  }
  return MN_OK;
}

static mn_status parse_key(const lexer_t *lx, size_t *i, mn_caching_config_t *c) {
  const char *key = tok_at(lx, *i);
  if (strcmp(tok_at(lx, *i + 1), ":") != 0) return bad(key, "", "expected key:value");
  *i += 2;
  const char *v = tok_at(lx, *i);
  bool flag = false;
  double d = 0;
  size_t n = 0;
  if (!strcmp(key, "max_split_size_mb")) return parse_mb(key, v, &c->max_split_size);
  if (!strcmp(key, "max_non_split_rounding_mb")) return parse_mb(key, v, &c->max_non_split_rounding);
  if (!strcmp(key, "garbage_collection_threshold")) {
    if (!parse_double(v, &d) || !(d > 0.0 && d < 1.0)) return bad(key, v, "must be a number in (0, 1)");
    c->garbage_collection_threshold = d;
    return MN_OK;
  }
  if (!strcmp(key, "per_process_memory_fraction")) {
    if (!parse_double(v, &d) || !(d > 0.0 && d <= 1.0)) return bad(key, v, "must be a number in (0, 1]");
    c->per_process_memory_fraction = d;
    return MN_OK;
  }
  if (!strcmp(key, "expandable_segments")) {
    if (!parse_bool(v, &flag)) return bad(key, v, "expected True or False");
    c->expandable_segments = flag;
    return MN_OK;
  }
  if (!strcmp(key, "roundup_power2_divisions")) {
    size_t pt[PT_INTERVALS];
    for (int k = 0; k < PT_INTERVALS; k++) pt[k] = 0;
    mn_status st = parse_divisions(lx, i, pt);
    if (st != MN_OK) return st;
    for (int b = 0; b < MN_ROUNDUP_BUCKETS; b++) {
      int k = b - PT_FIRST_LOG2;
      k = k < 0 ? 0 : k > PT_INTERVALS - 1 ? PT_INTERVALS - 1 : k;
      c->roundup_power2_divisions[b] = (unsigned)pt[k];
    }
    return MN_OK;
  }
  if (!strcmp(key, "backend")) {
    if (strcmp(v, "native") != 0 && strcmp(v, "cudaMallocAsync") != 0)
      return bad(key, v, "expected native or cudaMallocAsync");
    snprintf(c->backend, sizeof c->backend, "%s", v);
    return MN_OK;
  }
  /* Accepted for PYTORCH_CUDA_ALLOC_CONF compatibility, validated, no effect here:
   * the lock is always dropped around raw allocation; pinned_* configure the host allocator. */
  if (!strcmp(key, "release_lock_on_cudamalloc") || !strcmp(key, "pinned_use_cuda_host_register") ||
      !strcmp(key, "pinned_use_background_threads")) {
    if (!parse_bool(v, &flag)) return bad(key, v, "expected True or False");
    return MN_OK;
  }
  if (!strcmp(key, "pinned_num_register_threads")) {
    if (!parse_uint(v, &n) || !is_pow2(n) || n > 128) return bad(key, v, "must be a power of two <= 128");
    return MN_OK;
  }
  return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_caching_config_parse", "unknown key \"%s\" (value %s)", key,
                   *v ? v : "(missing)");
}

mn_status mn_caching_config_parse(const char *text, mn_caching_config_t *config) {
  MN__CHECK_ARG(text != NULL && config != NULL, "text and config must not be NULL");
  lexer_t *lx = mn__malloc(sizeof *lx);
  if (!lx) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mn_caching_config_t c = *config;
  mn_status st = lex(text, lx);
  for (size_t i = 0; st == MN_OK && i < lx->n; i++) {
    st = parse_key(lx, &i, &c);
    if (st == MN_OK && i + 1 < lx->n && strcmp(lx->tok[++i], ",") != 0)
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "expected ',' before \"%s\"", lx->tok[i]);
    if (st == MN_OK && i + 1 == lx->n && !strcmp(lx->tok[i], ",")) break; /* a trailing comma */
  }
  free(lx);
  if (st != MN_OK) return st;
  *config = c;
  return MN_OK;
}

/* ---- formatting -------------------------------------------------------------------- */

/* The shortest "%g" form that reads back to the same double. */
static void emit_double(mn__strbuf_t *o, const char *key, double v) {
  char tmp[40];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (strtod(tmp, NULL) == v) break;
  }
  mn__strbuf_printf(o, "%s%s:%s", o->len ? "," : "", key, tmp);
}

mn_status mn_caching_config_format(const mn_caching_config_t *config, char *buf, size_t bufsize) {
  MN__CHECK_ARG(config != NULL && buf != NULL && bufsize > 0, "config and buf must not be NULL, bufsize > 0");
  const mn_caching_config_t *c = config;
  mn_caching_config_t d = mn_caching_config_default();
  mn__strbuf_t o = {buf, bufsize, 0};
  buf[0] = '\0';
  if (c->max_split_size != d.max_split_size)
    mn__strbuf_printf(&o, "%smax_split_size_mb:%zu", o.len ? "," : "", (c->max_split_size + MIB - 1) / MIB);
  if (c->max_non_split_rounding != d.max_non_split_rounding)
    mn__strbuf_printf(&o, "%smax_non_split_rounding_mb:%zu", o.len ? "," : "", (c->max_non_split_rounding + MIB - 1) / MIB);
  if (c->garbage_collection_threshold != 0.0) emit_double(&o, "garbage_collection_threshold", c->garbage_collection_threshold);
  bool uniform = true, any = false;
  for (int b = 0; b < MN_ROUNDUP_BUCKETS; b++) {
    uniform &= c->roundup_power2_divisions[b] == c->roundup_power2_divisions[0];
    any |= c->roundup_power2_divisions[b] != 0;
  }
  if (uniform && any) {
    mn__strbuf_printf(&o, "%sroundup_power2_divisions:%u", o.len ? "," : "", c->roundup_power2_divisions[0]);
  } else if (any) {
    /* PyTorch's 16 intervals, each written out (no ">" form, which would also overwrite
     * the last listed interval). */
    mn__strbuf_printf(&o, "%sroundup_power2_divisions:[", o.len ? "," : "");
    for (int k = 0; k < PT_INTERVALS; k++)
      mn__strbuf_printf(&o, "%s%zu:%u", k ? "," : "", (size_t)1 << k, c->roundup_power2_divisions[PT_FIRST_LOG2 + k]);
    mn__strbuf_printf(&o, "]");
  }
  if (c->expandable_segments) mn__strbuf_printf(&o, "%sexpandable_segments:True", o.len ? "," : "");
  if (c->per_process_memory_fraction != 1.0) emit_double(&o, "per_process_memory_fraction", c->per_process_memory_fraction);
  if (strcmp(c->backend, "native") != 0) mn__strbuf_printf(&o, "%sbackend:%.31s", o.len ? "," : "", c->backend);
  if (o.len >= bufsize)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "bufsize=%zu is too small: %zu bytes needed", bufsize,
                     o.len + 1);
  return MN_OK;
}
