/* storage/safetensors.c: the safetensors format (8-byte little-endian header
 * length, JSON header, raw tensor bytes): writer and strict reader with its own
 * small JSON parser. Saves stream the file and loads read or map it
 * (storage/serialize_io.c). Stateless, thread-safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/serialize.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/nameset.h"
#include "storage/serialize_util.h"

#define MAX_HEADER 100000000ull /* the reference implementation's limit */

/* safetensors dtype codes (mnemo/dtype_table.h), NULL where safetensors has
 * none (complex128). */
#define ST_ROW(A, sfx, val, nm, size, knd, fmt, real, dlc, dlb, dll, st, ...) [val] = st,
static const char *const CODES[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(ST_ROW, ~)};
#undef ST_ROW

static const char *code_of(mn_dtype d) { return mn_dtype_is_valid(d) ? CODES[d] : NULL; }

/* The dtype of a safetensors code; false for an unknown code. */
static bool dtype_of_code(const char *code, mn_dtype *out) {
  for (int d = 0; d < MN_DTYPE_COUNT; d++)
    if (CODES[d] && strcmp(CODES[d], code) == 0) {
      *out = (mn_dtype)d;
      return true;
    }
  return false;
}

/* ---- writer -------------------------------------------------------------------- */

static void put_json_string(mn__sbuf_t *b, const char *s) {
  mn__sbuf_write(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      mn__sbuf_write(b, esc, 2);
    } else if (*p < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *p);
      mn__sbuf_write(b, esc, 6);
    } else {
      mn__sbuf_write(b, p, 1);
    }
  }
  mn__sbuf_write(b, "\"", 1);
}

/* First and one-past-last byte a non-empty view reaches in its storage. */
static void byte_extent(const mn_view_t *v, uint64_t *lo, uint64_t *hi) {
  size_t item = mn_dtype_itemsize(mn_view_dtype(v));
  uint64_t last = (uint64_t)mn_view_offset(v);
  for (int d = 0; d < mn_view_ndim(v); d++) last += (uint64_t)(mn_view_size(v, d) - 1) * (uint64_t)mn_view_stride(v, d);
  *lo = (uint64_t)mn_view_offset(v) * item;
  *hi = (last + 1) * item;
}

/* A non-empty view's bytes in its storage, for the aliasing check. */
typedef struct extent_s {
  const mn_storage_t *storage;
  uint64_t lo, hi;
  size_t index;
} extent_t;

static int by_storage_then_lo(const void *a, const void *b) {
  const extent_t *x = a, *y = b;
  uintptr_t sx = (uintptr_t)x->storage, sy = (uintptr_t)y->storage;
  if (sx != sy) return sx < sy ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index);
}

/* Refuses two non-empty views over overlapping bytes of one storage: sorted
 * by storage and first byte, a view overlaps an earlier one exactly when it
 * starts before the furthest end seen so far in its storage (n log n). */
static mn_status check_aliasing(const char *func, size_t count, const char *const *names,
                                const mn_view_t *const *views) {
  size_t n = 0;
  for (size_t i = 0; i < count; i++) n += mn_view_numel(views[i]) != 0;
  if (n < 2) return MN_OK;
  extent_t *e = mn__malloc(n * sizeof *e);
  if (!e) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  n = 0;
  for (size_t i = 0; i < count; i++) {
    if (mn_view_numel(views[i]) == 0) continue;
    e[n].storage = mn_view_storage(views[i]);
    e[n].index = i;
    byte_extent(views[i], &e[n].lo, &e[n].hi);
    n++;
  }
  qsort(e, n, sizeof *e, by_storage_then_lo);
  mn_status st = MN_OK;
  size_t far = 0; /* the entry of this storage reaching furthest so far */
  for (size_t k = 1; k < n && st == MN_OK; k++) {
    if (e[k].storage != e[far].storage) {
      far = k;
      continue;
    }
    if (e[k].lo < e[far].hi) {
      const extent_t *x = e[far].index < e[k].index ? &e[far] : &e[k], *y = x == &e[far] ? &e[k] : &e[far];
      st = mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "views '%s' and '%s' share memory (bytes %llu..%llu and %llu..%llu of one storage); "
                     "safetensors cannot keep aliasing: save clones",
                     names[x->index], names[y->index], (unsigned long long)x->lo, (unsigned long long)x->hi,
                     (unsigned long long)y->lo, (unsigned long long)y->hi);
    }
    if (e[k].hi > e[far].hi) far = k;
  }
  free(e);
  return st;
}

/* What a save writes: the views and the JSON header (padded so the data
 * starts 8-byte aligned); each view's bytes follow in order, contiguous. */
typedef struct st_plan_s {
  size_t count;
  const mn_view_t *const *views;
  mn__sbuf_t hdr;
  uint64_t size; /* of the file */
} st_plan_t;

static mn_status plan_st(const char *func, size_t count, const char *const *names, const mn_view_t *const *views,
                         size_t nmeta, const char *const *meta_keys, const char *const *meta_values, st_plan_t *pl) {
  *pl = (st_plan_t){.count = count, .views = views};
  if (nmeta != 0 && (meta_keys == NULL || meta_values == NULL))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "meta_keys and meta_values must not be NULL");
  mn_status st = mn__check_names(func, count, names, views);
  if (st != MN_OK) return st;
  for (size_t i = 0; i < count; i++) {
    if (strcmp(names[i], "__metadata__") == 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "'__metadata__' is reserved and cannot name a tensor");
    if (!code_of(mn_view_dtype(views[i])))
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "view '%s': safetensors has no dtype for %s", names[i],
                       mn_dtype_name(mn_view_dtype(views[i])));
  }
  mn__nameset_t seen;
  mn__nameset_init(&seen, nmeta);
  for (size_t i = 0; i < nmeta && st == MN_OK; i++) {
    if (!meta_keys[i] || !meta_values[i]) {
      st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "metadata entry %zu is NULL", i);
      break;
    }
    mn__nameset_result r = mn__nameset_insert(&seen, meta_keys[i], strlen(meta_keys[i]), i, NULL);
    if (r == MN__NAMESET_DUPLICATE)
      st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "metadata key '%s' is used twice", meta_keys[i]);
    else if (r == MN__NAMESET_NOMEM)
      st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  mn__nameset_free(&seen);
  if (st != MN_OK) return st;
  st = check_aliasing(func, count, names, views);
  if (st != MN_OK) return st;
  /* header: offsets into the data, each view stored contiguously */
  mn__sbuf_t *hdr = &pl->hdr;
  mn__sbuf_puts(hdr, "{");
  if (nmeta) {
    mn__sbuf_puts(hdr, "\"__metadata__\":{");
    for (size_t i = 0; i < nmeta; i++) {
      if (i) mn__sbuf_puts(hdr, ",");
      put_json_string(hdr, meta_keys[i]);
      mn__sbuf_puts(hdr, ":");
      put_json_string(hdr, meta_values[i]);
    }
    mn__sbuf_puts(hdr, "}");
  }
  uint64_t body = 0;
  for (size_t i = 0; i < count; i++) {
    const mn_view_t *v = views[i];
    uint64_t begin = body;
    body += (uint64_t)mn_view_numel(v) * mn_dtype_itemsize(mn_view_dtype(v));
    char num[80];
    if (i || nmeta) mn__sbuf_puts(hdr, ",");
    put_json_string(hdr, names[i]);
    mn__sbuf_puts(hdr, ":{\"dtype\":\"");
    mn__sbuf_puts(hdr, code_of(mn_view_dtype(v)));
    mn__sbuf_puts(hdr, "\",\"shape\":[");
    for (int d = 0; d < mn_view_ndim(v); d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)mn_view_size(v, d));
      mn__sbuf_puts(hdr, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin, (unsigned long long)body);
    mn__sbuf_puts(hdr, num);
  }
  mn__sbuf_puts(hdr, "}");
  while (hdr->len % 8) mn__sbuf_puts(hdr, " "); /* the data starts 8-byte aligned */
  if (hdr->oom) {
    free(hdr->p);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  pl->size = 8 + hdr->len + body;
  return MN_OK;
}

/* A non-contiguous view's elements in row-major order, from `bytes`, the
 * host copy of its storage's bytes [lo, ...). */
static void put_strided(mn__sink_t *s, const mn_view_t *v, const unsigned char *bytes, uint64_t lo) {
  int nd = mn_view_ndim(v);
  size_t item = mn_dtype_itemsize(mn_view_dtype(v));
  int64_t numel = mn_view_numel(v), inner = mn_view_size(v, nd - 1), istride = mn_view_stride(v, nd - 1);
  int64_t idx[MN_MAX_DIMS] = {0};
  for (int64_t e = 0; e < numel; e += inner) {
    int64_t off = mn_view_offset(v);
    for (int d = 0; d < nd - 1; d++) off += idx[d] * mn_view_stride(v, d);
    for (int64_t k = 0; k < inner; k++) mn__sink_put(s, bytes + ((uint64_t)(off + k * istride) * item - lo), item);
    for (int d = nd - 2; d >= 0; d--) {
      if (++idx[d] < mn_view_size(v, d)) break;
      idx[d] = 0;
    }
  }
}

/* One view's bytes, contiguous: straight from its storage when they are
 * already in order, else gathered (through a host copy of the bytes it
 * spans, for device storages). */
static mn_status put_view(mn__sink_t *s, const mn_view_t *v) {
  size_t item = mn_dtype_itemsize(mn_view_dtype(v));
  int64_t numel = mn_view_numel(v);
  const mn_storage_t *st = mn_view_storage(v);
  if (numel == 0) return MN_OK;
  if (mn_view_is_contiguous(v))
    return mn__sink_put_storage(s, st, (size_t)mn_view_offset(v) * item, (size_t)numel * item, NULL);
  uint64_t lo = 0, hi = 0;
  byte_extent(v, &lo, &hi);
  if (mn_storage_device(st).type == MN_DEVICE_CPU) {
    put_strided(s, v, mn_storage_data(st), 0);
    return MN_OK;
  }
  unsigned char *h = mn__malloc((size_t)(hi - lo));
  if (!h) return mn__error(MN_ERR_OUT_OF_MEMORY, s->func, "out of host memory (%llu bytes)", (unsigned long long)(hi - lo));
  mn_status r = mn_copy_bytes(mn_device_cpu(), h, mn_storage_device(st),
                              (const unsigned char *)mn_storage_data(st) + lo, (size_t)(hi - lo), NULL, 0);
  if (r == MN_OK) put_strided(s, v, h, lo);
  else r = mn__error_wrap(r, s->func);
  free(h);
  return r;
}

static mn_status emit_st(void *plan, mn__sink_t *s) {
  st_plan_t *pl = plan;
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)pl->hdr.len >> (8 * i));
  mn__sink_put(s, len, 8);
  mn__sink_put(s, pl->hdr.p, pl->hdr.len);
  for (size_t i = 0; i < pl->count; i++) {
    mn_status st = put_view(s, pl->views[i]);
    if (st != MN_OK) return st;
  }
  return MN_OK;
}

mn_status mn_safetensors_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views,
                                     size_t nmeta, const char *const *meta_keys, const char *const *meta_values,
                                     void **data, size_t *size) {
  MN__CHECK_ARG(data != NULL && size != NULL, "data and size must not be NULL");
  st_plan_t pl;
  mn_status st = plan_st(__func__, count, names, views, nmeta, meta_keys, meta_values, &pl);
  if (st != MN_OK) return st;
  st = mn__save_buffer(__func__, pl.size, emit_st, &pl, data, size);
  free(pl.hdr.p);
  return st;
}

mn_status mn_safetensors_save(const char *path, size_t count, const char *const *names,
                              const mn_view_t *const *views, size_t nmeta, const char *const *meta_keys,
                              const char *const *meta_values) {
  MN__CHECK_ARG(path != NULL, "path must not be NULL");
  st_plan_t pl;
  mn_status st = plan_st(__func__, count, names, views, nmeta, meta_keys, meta_values, &pl);
  if (st != MN_OK) return st;
  st = mn__save_file(__func__, path, emit_st, &pl);
  free(pl.hdr.p);
  return st;
}

/* ---- strict JSON subset: objects, arrays, strings, non-negative integers ---------- */

typedef struct json_s {
  const char *p, *begin, *end;
  const char *func;
} json_t;

static mn_status jerr(json_t *j, const char *what) {
  return mn__error(MN_ERR_FORMAT, j->func, "safetensors header, byte %zu: %s", (size_t)(j->p - j->begin), what);
}

static void jws(json_t *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static bool jeat(json_t *j, char c) {
  jws(j);
  if (j->p < j->end && *j->p == c) {
    j->p++;
    return true;
  }
  return false;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(json_t *j, unsigned *out) {
  if (j->end - j->p < 4) return false;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(j->p[i]);
    if (h < 0) return false;
    v = v << 4 | (unsigned)h;
  }
  j->p += 4;
  *out = v;
  return true;
}

/* Parses a string into a UTF-8 C string (no NUL inside): into buf (cap bytes)
 * when its text in the header fits there, else malloc'd to that size (decoding
 * never lengthens it, so a name costs what it takes in the file); *out is buf
 * or the allocation. jstring: always malloc'd. */
static mn_status jstring_in(json_t *j, char *buf, size_t cap, char **out) {
  jws(j);
  if (j->p >= j->end || *j->p != '"') return jerr(j, "expected a string");
  j->p++;
  const char *q = j->p;
  while (q < j->end && *q != '"') q += *q == '\\' && j->end - q > 1 ? 2 : 1;
  size_t need = (size_t)(q - j->p) + 1;
  char *o = need <= cap ? buf : mn__malloc(need);
  if (!o) return mn__error(MN_ERR_OUT_OF_MEMORY, j->func, "out of host memory");
  size_t n = 0;
  mn_status st = MN_OK;
  for (;;) {
    if (j->p >= j->end) {
      st = jerr(j, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)*j->p++;
    if (c == '"') break;
    if (c < 0x20) {
      st = jerr(j, "control character in a string");
      break;
    }
    if (c != '\\') {
      o[n++] = (char)c;
      continue;
    }
    if (j->p >= j->end) {
      st = jerr(j, "unterminated escape");
      break;
    }
    char e = *j->p++;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      o[n++] = map[simple - "\"\\/bfnrt"];
      continue;
    }
    unsigned cp = 0, lo = 0;
    if (e != 'u' || !read_hex4(j, &cp)) {
      st = jerr(j, "bad escape in a string");
      break;
    }
    if (cp >= 0xD800 && cp < 0xDC00) {
      if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u' || (j->p += 2, !read_hex4(j, &lo)) || lo < 0xDC00 ||
          lo > 0xDFFF) {
        st = jerr(j, "unpaired surrogate in a string");
        break;
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      st = jerr(j, "unpaired surrogate in a string");
      break;
    }
    if (cp == 0) {
      st = jerr(j, "\\u0000 in a string");
      break;
    }
    unsigned char *u = (unsigned char *)o + n;
    if (cp < 0x80) u[0] = (unsigned char)cp, n += 1;
    else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F)), n += 2;
    else if (cp < 0x10000)
      u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
      u[2] = (unsigned char)(0x80 | (cp & 0x3F)), n += 3;
    else
      u[0] = (unsigned char)(0xF0 | cp >> 18), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
      u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (unsigned char)(0x80 | (cp & 0x3F)), n += 4;
  }
  if (st != MN_OK) {
    if (o != buf) free(o);
    return st;
  }
  o[n] = '\0';
  *out = o;
  return MN_OK;
}

static mn_status jstring(json_t *j, char **out) { return jstring_in(j, NULL, 0, out); }

static mn_status juint(json_t *j, uint64_t *out) {
  jws(j);
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jerr(j, "expected a non-negative integer");
  if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9') return jerr(j, "leading zero in a number");
  uint64_t v = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    unsigned d = (unsigned)(*j->p - '0');
    if (v > (UINT64_MAX - d) / 10) return jerr(j, "integer overflows 64 bits");
    v = v * 10 + d;
    j->p++;
  }
  if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return jerr(j, "expected an integer");
  *out = v;
  return MN_OK;
}

/* [n, n, ...] with at most `max` entries. */
static mn_status juint_array(json_t *j, uint64_t *vals, size_t max, size_t *n) {
  if (!jeat(j, '[')) return jerr(j, "expected '['");
  *n = 0;
  if (jeat(j, ']')) return MN_OK;
  for (;;) {
    if (*n == max) return jerr(j, "too many entries in an array");
    mn_status st = juint(j, &vals[(*n)++]);
    if (st != MN_OK) return st;
    if (jeat(j, ']')) return MN_OK;
    if (!jeat(j, ',')) return jerr(j, "expected ',' or ']'");
  }
}

typedef struct entry_s {
  char *name;
  mn_dtype dtype;
  int ndim;
  int64_t shape[MN_MAX_DIMS];
  uint64_t begin, end;
} entry_t;

/* A tensor's keys and dtype code: short strings, decoded on the stack. */
#define SHORT_STR 64

static void free_short(char *s, const char *buf) {
  if (s != buf) free(s);
}

static mn_status parse_tensor(json_t *j, entry_t *e) {
  if (!jeat(j, '{')) return jerr(j, "expected a tensor object");
  bool have_dtype = false, have_shape = false, have_off = false;
  char kbuf[SHORT_STR], cbuf[SHORT_STR];
  if (!jeat(j, '}'))
    for (;;) {
      char *key = NULL;
      mn_status st = jstring_in(j, kbuf, sizeof kbuf, &key);
      if (st != MN_OK) return st;
      if (!jeat(j, ':')) {
        free_short(key, kbuf);
        return jerr(j, "expected ':'");
      }
      if (strcmp(key, "dtype") == 0 && !have_dtype) {
        free_short(key, kbuf);
        char *code = NULL;
        st = jstring_in(j, cbuf, sizeof cbuf, &code);
        if (st != MN_OK) return st;
        if (!dtype_of_code(code, &e->dtype)) {
          char msg[96];
          snprintf(msg, sizeof msg, "unknown dtype \"%.40s\"", code);
          free_short(code, cbuf);
          return jerr(j, msg);
        }
        free_short(code, cbuf);
        have_dtype = true;
      } else if (strcmp(key, "shape") == 0 && !have_shape) {
        free_short(key, kbuf);
        uint64_t v[MN_MAX_DIMS];
        size_t n = 0;
        st = juint_array(j, v, MN_MAX_DIMS, &n);
        if (st != MN_OK) return st;
        for (size_t i = 0; i < n; i++) {
          if (v[i] > INT64_MAX) return jerr(j, "shape entry too large");
          e->shape[i] = (int64_t)v[i];
        }
        e->ndim = (int)n;
        have_shape = true;
      } else if (strcmp(key, "data_offsets") == 0 && !have_off) {
        free_short(key, kbuf);
        uint64_t v[2];
        size_t n = 0;
        st = juint_array(j, v, 2, &n);
        if (st != MN_OK) return st;
        if (n != 2) return jerr(j, "data_offsets needs two entries");
        e->begin = v[0];
        e->end = v[1];
        have_off = true;
      } else {
        char msg[96];
        snprintf(msg, sizeof msg, "unknown or repeated tensor key \"%.40s\"", key);
        free_short(key, kbuf);
        return jerr(j, msg);
      }
      if (jeat(j, '}')) break;
      if (!jeat(j, ',')) return jerr(j, "expected ',' or '}'");
    }
  if (!have_dtype || !have_shape || !have_off) return jerr(j, "a tensor needs dtype, shape and data_offsets");
  return MN_OK;
}

/* "__metadata__": {"k": "v", ...}; appends to res (arrays grown by doubling,
 * keys checked for repeats in a hash set: linear in the header's size). */
static mn_status parse_metadata(json_t *j, mn_named_views_t *res) {
  if (!jeat(j, '{')) return jerr(j, "__metadata__ must be an object");
  if (jeat(j, '}')) return MN_OK;
  mn__nameset_t seen;
  mn__nameset_init(&seen, 0);
  size_t cap = 0;
  mn_status st = MN_OK;
  for (;;) {
    char *k = NULL, *v = NULL;
    st = jstring(j, &k);
    if (st != MN_OK) break;
    if (!jeat(j, ':')) {
      free(k);
      st = jerr(j, "expected ':'");
      break;
    }
    st = jstring(j, &v);
    if (st != MN_OK) {
      free(k);
      if (st != MN_ERR_OUT_OF_MEMORY) st = jerr(j, "__metadata__ values must be strings");
      break;
    }
    if (res->nmeta == cap) {
      size_t nc = cap ? cap * 2 : 8;
      char **nk = nc <= SIZE_MAX / sizeof *nk ? mn__realloc(res->meta_keys, nc * sizeof *nk) : NULL;
      if (nk) res->meta_keys = nk;
      char **nv = nk ? mn__realloc(res->meta_values, nc * sizeof *nv) : NULL;
      if (nv) res->meta_values = nv;
      if (!nk || !nv) st = mn__error(MN_ERR_OUT_OF_MEMORY, j->func, "out of host memory");
      else cap = nc;
    }
    if (st == MN_OK) switch (mn__nameset_insert(&seen, k, strlen(k), res->nmeta, NULL)) {
        case MN__NAMESET_NEW: break;
        case MN__NAMESET_DUPLICATE: st = jerr(j, "repeated __metadata__ key"); break;
        case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, j->func, "out of host memory"); break;
      }
    if (st != MN_OK) {
      free(k);
      free(v);
      break;
    }
    res->meta_keys[res->nmeta] = k;
    res->meta_values[res->nmeta++] = v;
    if (jeat(j, '}')) break;
    if (!jeat(j, ',')) {
      st = jerr(j, "expected ',' or '}'");
      break;
    }
  }
  mn__nameset_free(&seen);
  return st;
}

/* A tensor's byte range and its index in ents, sorted to check the tiling
 * (small, so the sort moves 24 bytes per tensor, not the whole entry). */
typedef struct span_s {
  uint64_t begin, end;
  size_t index;
} span_t;

static int by_begin(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index); /* ties (empty tensors) in file order */
}

static void free_entries(entry_t *e, size_t n) {
  for (size_t i = 0; i < n; i++) free(e[i].name);
  free(e);
}

#define BAD(...) mn__error(MN_ERR_FORMAT, func, __VA_ARGS__)

/* The load proper, from any source: the header is read (a copy, for files)
 * and checked whole before any storage is made. */
static mn_status load_st(const char *func, mn__src_t *src, mn_device_t dev, mn_named_views_t **out) {
  size_t size = src->size;
  if (size < 8) return BAD("truncated: %zu bytes, fewer than the 8-byte header length", size);
  const unsigned char *p = NULL;
  unsigned char *owned = NULL;
  mn_status st = mn__src_bytes(src, 0, 8, &p, &owned);
  if (st != MN_OK) return st;
  uint64_t hlen = mn__le64(p);
  free(owned);
  if (hlen > MAX_HEADER) return BAD("header length %llu exceeds the limit of %llu bytes", (unsigned long long)hlen, MAX_HEADER);
  if (hlen > size - 8)
    return BAD("header length %llu runs past the end of the %zu-byte file (truncated?)", (unsigned long long)hlen, size);
  /* the JSON, read once (a file's into memory): what is checked is what is used */
  st = mn__src_bytes(src, 8, (size_t)hlen, &p, &owned);
  if (st != MN_OK) return st;
  if (hlen < 2 || p[0] != '{') {
    free(owned);
    return BAD("the header does not start with '{'");
  }
  uint64_t body = 8 + hlen, body_len = size - 8 - hlen;
  json_t j = {(const char *)p, (const char *)p, (const char *)p + hlen, func};
  mn_named_views_t *res = NULL;
  st = mn__named_views_new(func, 0, &res);
  if (st != MN_OK) {
    free(owned);
    return st;
  }
  entry_t *ents = NULL;
  size_t n = 0, cap = 0;
  mn__nameset_t names; /* the tensor names so far (the keys are ents[].name) */
  mn__nameset_init(&names, 0);
  jeat(&j, '{');
  bool seen_meta = false;
  if (!jeat(&j, '}'))
    for (;;) {
      char *key = NULL;
      st = jstring(&j, &key);
      if (st != MN_OK) break;
      if (!jeat(&j, ':')) {
        free(key);
        st = jerr(&j, "expected ':'");
        break;
      }
      if (strcmp(key, "__metadata__") == 0) {
        free(key);
        if (seen_meta) {
          st = jerr(&j, "repeated __metadata__");
          break;
        }
        seen_meta = true;
        st = parse_metadata(&j, res);
        if (st != MN_OK) break;
      } else {
        if (n == cap) {
          size_t nc = cap ? cap * 2 : 16;
          entry_t *ne = nc <= SIZE_MAX / sizeof *ne ? mn__realloc(ents, nc * sizeof *ne) : NULL;
          if (!ne) st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
          else ents = ne, cap = nc;
        }
        if (st == MN_OK) switch (mn__nameset_insert(&names, key, strlen(key), n, NULL)) {
            case MN__NAMESET_NEW: break;
            case MN__NAMESET_DUPLICATE: st = jerr(&j, "repeated tensor name"); break;
            case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory"); break;
          }
        if (st != MN_OK) {
          free(key);
          break;
        }
        memset(&ents[n], 0, sizeof ents[n]);
        ents[n].name = key;
        st = parse_tensor(&j, &ents[n++]);
        if (st != MN_OK) break;
      }
      if (jeat(&j, '}')) break;
      if (!jeat(&j, ',')) {
        st = jerr(&j, "expected ',' or '}'");
        break;
      }
    }
  mn__nameset_free(&names);
  if (st == MN_OK) {
    jws(&j);
    if (j.p != j.end) st = jerr(&j, "trailing bytes after the header object");
  }
  /* ranges: each matches its shape; together they tile the body exactly */
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    entry_t *e = &ents[i];
    unsigned __int128 bytes = mn_dtype_itemsize(e->dtype);
    for (int d = 0; d < e->ndim; d++) {
      bytes *= (unsigned __int128)e->shape[d];
      if (bytes > (unsigned __int128)UINT64_MAX) bytes = (unsigned __int128)UINT64_MAX;
    }
    if (e->begin > e->end || e->end > body_len)
      st = BAD("tensor '%s': data_offsets [%llu, %llu] are outside the %llu-byte data", e->name,
               (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)body_len);
    else if (bytes != e->end - e->begin)
      st = BAD("tensor '%s': shape needs %llu bytes but data_offsets give %llu", e->name, (unsigned long long)bytes,
               (unsigned long long)(e->end - e->begin));
  }
  span_t *sorted = NULL;
  if (st == MN_OK && n) {
    sorted = mn__malloc(n * sizeof *sorted);
    if (!sorted) st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
    else {
      for (size_t i = 0; i < n; i++) sorted[i] = (span_t){ents[i].begin, ents[i].end, i};
      qsort(sorted, n, sizeof *sorted, by_begin);
      uint64_t at = 0;
      for (size_t i = 0; i < n && st == MN_OK; i++) {
        const char *name = ents[sorted[i].index].name;
        if (sorted[i].begin < at) st = BAD("tensor '%s' overlaps another tensor's bytes", name);
        else if (sorted[i].begin > at) st = BAD("a hole of %llu bytes before tensor '%s'", (unsigned long long)(sorted[i].begin - at), name);
        at = sorted[i].end;
      }
      if (st == MN_OK && at != body_len) st = BAD("%llu bytes of data follow the last tensor", (unsigned long long)(body_len - at));
    }
  } else if (st == MN_OK && body_len) {
    st = BAD("%llu bytes of data but no tensors", (unsigned long long)body_len);
  }
  if (st == MN_OK && n) {
    res->names = mn__calloc(n, sizeof *res->names);
    res->views = mn__calloc(n, sizeof *res->views);
    if (!res->names || !res->views) st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  /* the views in the order of their data in the file */
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    entry_t *e = &ents[sorted[i].index];
    mn_storage_t *s = NULL;
    /* mapped where the data is aligned for its dtype, else copied */
    st = mn__src_storage(src, dev, body + e->begin, (size_t)(e->end - e->begin), mn_dtype_itemsize(e->dtype), NULL,
                         NULL, &s);
    if (st != MN_OK) break;
    st = mn_view_create(s, e->dtype, e->ndim, e->shape, NULL, 0, &res->views[i]);
    mn_storage_release(s);
    if (st != MN_OK) {
      st = mn__error_wrap(st, func);
      break;
    }
    res->names[i] = e->name;
    e->name = NULL;
    res->count = i + 1;
  }
  free(sorted);
  free_entries(ents, n);
  free(owned);
  return mn__named_views_finish(st, res, out);
}

mn_status mn_safetensors_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(out != NULL && (data != NULL || size == 0), "data and out must not be NULL");
  return mn__load_buffer(__func__, data, size, dev, load_st, out);
}

mn_status mn_safetensors_load(const char *path, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__load_path(__func__, path, dev, 0, load_st, out);
}

mn_status mn_safetensors_load_ex(const char *path, mn_device_t dev, unsigned flags, mn_named_views_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__load_path(__func__, path, dev, flags, load_st, out);
}
