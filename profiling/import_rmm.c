/* profiling/import_rmm.c: imports RMM logging_resource_adaptor CSV logs into a
 * trace, with "<file>:<line>: <what>" errors; pure functions, thread-safe. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "profiling/text.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

#define MN__RMM_MAX_COLS 16
#define MN__RMM_LINE_MAX 4096

enum { COL_TIME, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, COL_N };
static const char *const col_names[COL_N] = {"Time", "Action", "Pointer", "Size", "Stream"};

typedef struct mn__rmm_ev_s {
  mn_trace_action action;
  uint64_t time_us, stream, address, size;
  uint32_t line;
} mn__rmm_ev_t;

typedef struct mn__rmm_s {
  const char *name;
  uint64_t line;
  int col[COL_N]; /* column index, -1 when absent */
  size_t ncols;
  mn__rmm_ev_t *ev;
  size_t nev, cap;
  bool have_origin;
  uint64_t origin_us;
} mn__rmm_t;

/* A format error at the current line. */
#define rerr(p, ...) mn__text_error("mn_trace_import_rmm_csv", (p)->name, (p)->line, __VA_ARGS__)

/* Trims blanks in place; returns the start. */
static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
  return s;
}

/* Splits on commas (no quoting: RMM writes none); returns the field count or MAX+1. */
static size_t split_csv(char *buf, char **f) {
  size_t n = 0;
  char *s = buf;
  for (;;) {
    if (n == MN__RMM_MAX_COLS) return MN__RMM_MAX_COLS + 1;
    char *c = strchr(s, ',');
    if (c) *c = '\0';
    f[n++] = trim(s);
    if (!c) return n;
    s = c + 1;
  }
}

/* 0x-prefixed hex, or a decimal; "nullptr"/"(nil)" are 0. */
static bool parse_ptr(const char *s, uint64_t *out) {
  if (!strcmp(s, "nullptr") || !strcmp(s, "(nil)")) {
    *out = 0;
    return true;
  }
  return mn__parse_hex(s, out) || mn__parse_dec(s, out);
}

/* Seconds with an optional fraction ("1634567890.123456"), or a time of day
 * "HH:MM:SS.ffffff" / "HH:MM:SS:ffffff" (older RMM). Microseconds out. */
static bool parse_time(const char *s, uint64_t *us) {
  uint64_t whole[4] = {0, 0, 0, 0}, frac = 0;
  int nwhole = 0;
  bool has_frac = false;
  const char *p = s;
  for (;;) {
    if (!isdigit((unsigned char)*p) || nwhole == 4) return false;
    uint64_t v = 0;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
      if (++digits > 18) return false;
      v = v * 10 + (uint64_t)(*p++ - '0');
    }
    whole[nwhole++] = v;
    if (*p == ':') {
      p++;
      continue;
    }
    break;
  }
  if (*p == '.' && nwhole != 4) {
    p++;
    has_frac = true;
  }
  if (has_frac) {
    int d = 0;
    if (!isdigit((unsigned char)*p)) return false;
    for (; isdigit((unsigned char)*p); p++, d++)
      if (d < 6) frac = frac * 10 + (uint64_t)(*p - '0');
    for (; d < 6; d++) frac *= 10;
  }
  if (*p) return false;
  if (nwhole == 4) { /* HH:MM:SS:ffffff: the last part is the microseconds */
    if (whole[3] > 999999) return false;
    frac = whole[3];
    nwhole = 3;
  }
  if (nwhole == 1) {
    if (whole[0] > UINT64_MAX / 1000000 - 1) return false;
    *us = whole[0] * 1000000 + frac;
    return true;
  }
  if (nwhole == 3 && whole[0] < 1000000 && whole[1] < 60 && whole[2] < 61) {
    *us = ((whole[0] * 60 + whole[1]) * 60 + whole[2]) * 1000000 + frac;
    return true;
  }
  return false;
}

static mn_status parse_header(mn__rmm_t *p, char *line) {
  char *f[MN__RMM_MAX_COLS];
  size_t nf = split_csv(line, f);
  if (nf > MN__RMM_MAX_COLS) return rerr(p, "header has more than %d columns", MN__RMM_MAX_COLS);
  for (int c = 0; c < COL_N; c++) p->col[c] = -1;
  for (size_t i = 0; i < nf; i++)
    for (int c = 0; c < COL_N; c++)
      if (!strcasecmp(f[i], col_names[c])) {
        if (p->col[c] >= 0) return rerr(p, "column %s appears twice in the header", col_names[c]);
        p->col[c] = (int)i;
      }
  if (p->col[COL_ACTION] < 0 || p->col[COL_POINTER] < 0 || p->col[COL_SIZE] < 0)
    return rerr(p, "not an RMM log header: expected columns Thread,Time,Action,Pointer,Size,Stream "
                   "(Action, Pointer and Size at least)");
  p->ncols = nf;
  return MN_OK;
}

static mn_status parse_row(mn__rmm_t *p, char *line) {
  char *f[MN__RMM_MAX_COLS];
  size_t nf = split_csv(line, f);
  if (nf != p->ncols)
    return rerr(p, "%zu fields, the header has %zu", nf > MN__RMM_MAX_COLS ? (size_t)MN__RMM_MAX_COLS + 1 : nf, p->ncols);
  mn__rmm_ev_t e;
  memset(&e, 0, sizeof e);
  e.line = (uint32_t)p->line;
  const char *act = f[p->col[COL_ACTION]];
  if (!strcasecmp(act, "allocate")) e.action = MN_TRACE_ALLOC;
  else if (!strcasecmp(act, "free") || !strcasecmp(act, "deallocate")) e.action = MN_TRACE_FREE_REQUESTED;
  else if (!strcasecmp(act, "allocate failure")) e.action = MN_TRACE_OOM;
  else return rerr(p, "unknown action \"%.40s\" (allocate, free, deallocate, allocate failure)", act);
  const char *ptr = f[p->col[COL_POINTER]], *size = f[p->col[COL_SIZE]];
  if (!parse_ptr(ptr, &e.address)) return rerr(p, "pointer \"%.40s\" is not 0x<hex> or a decimal", ptr);
  if (!mn__parse_dec(size, &e.size)) return rerr(p, "size \"%.40s\" is not a decimal byte count", size);
  if (e.action == MN_TRACE_ALLOC && e.size == 0) return rerr(p, "allocate of 0 bytes");
  if (e.action == MN_TRACE_ALLOC && e.address == 0) return rerr(p, "allocate returned a null pointer");
  if (e.action == MN_TRACE_FREE_REQUESTED && e.address == 0) return rerr(p, "free of a null pointer");
  if (e.action == MN_TRACE_OOM) e.address = 0;
  if (p->col[COL_STREAM] >= 0) {
    const char *s = f[p->col[COL_STREAM]];
    if (!parse_ptr(s, &e.stream)) return rerr(p, "stream \"%.40s\" is not 0x<hex> or a decimal", s);
  }
  if (p->col[COL_TIME] >= 0) {
    const char *s = f[p->col[COL_TIME]];
    uint64_t us;
    if (!parse_time(s, &us)) return rerr(p, "time \"%.40s\" is not seconds[.fraction] or HH:MM:SS.ffffff", s);
    if (!p->have_origin) {
      p->origin_us = us;
      p->have_origin = true;
    }
    e.time_us = us >= p->origin_us ? us - p->origin_us : 0;
  }
  if (p->nev == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    mn__rmm_ev_t *n = mn__realloc(p->ev, cap * sizeof *n);
    if (!n) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_import_rmm_csv", "out of host memory");
    p->ev = n;
    p->cap = cap;
  }
  p->ev[p->nev++] = e;
  return MN_OK;
}

/* Liveness: frees of addresses allocated before the log become pre allocs
 * (pre[i] = true; their size is the free's size); a second allocate of a live
 * address is an error naming both lines. */
static mn_status check_live(mn__rmm_t *p, bool *pre) {
  size_t m = 0;
  for (size_t i = 0; i < p->nev; i++) m += p->ev[i].action != MN_TRACE_OOM;
  mn__addr_ref_t *refs = mn__malloc((m ? m : 1) * sizeof *refs);
  if (!refs) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_import_rmm_csv", "out of host memory");
  m = 0;
  for (size_t i = 0; i < p->nev; i++)
    if (p->ev[i].action != MN_TRACE_OOM) refs[m++] = (mn__addr_ref_t){p->ev[i].address, i, 0};
  qsort(refs, m, sizeof *refs, mn__addr_ref_cmp);
  size_t bad = SIZE_MAX, bad_prev = SIZE_MAX, bad_kind = 0;
  for (size_t k = 0; k < m;) {
    size_t j = k, live = SIZE_MAX;
    bool seen = false;
    for (; j < m && refs[j].address == refs[k].address; j++) {
      size_t i = refs[j].index;
      if (p->ev[i].action == MN_TRACE_ALLOC) {
        if (live != SIZE_MAX && i < bad) {
          bad = i;
          bad_prev = live;
          bad_kind = 1;
        }
        live = i;
      } else if (live != SIZE_MAX) {
        live = SIZE_MAX;
      } else if (!seen) {
        pre[i] = true; /* allocated before the log began */
      } else if (i < bad) {
        bad = i;
        bad_kind = 2;
      }
      seen = true;
    }
    k = j;
  }
  free(refs);
  if (bad == SIZE_MAX) return MN_OK;
  mn__rmm_t q = *p;
  q.line = p->ev[bad].line;
  if (bad_kind == 1)
    return rerr(&q, "allocate of 0x%" PRIx64 ", which is already live (allocated at line %" PRIu32 ")",
                p->ev[bad].address, p->ev[bad_prev].line);
  return rerr(&q, "free of 0x%" PRIx64 ", which is not live (freed twice)", p->ev[bad].address);
}

mn_status mn_trace_import_rmm_csv(const char *text, size_t len, const char *name, mn_trace_t **out) {
  MN__CHECK_ARG(out != NULL && (text != NULL || len == 0), "text and out must not be NULL");
  mn__rmm_t p;
  memset(&p, 0, sizeof p);
  p.name = name ? name : "<memory>";
  mn_status st = MN_OK;
  mn_trace_t *t = NULL;
  bool *pre = NULL;
  bool have_header = false;
  char buf[MN__RMM_LINE_MAX + 1];
  mn__lines_t lines = {.text = text, .len = len, .max = MN__RMM_LINE_MAX};
  char why[96];
  const char *s = NULL;
  size_t n = 0;
  mn__line_result lr;
  if (len == 0) {
    p.line = 1;
    st = rerr(&p, "empty file (no RMM log header)");
    goto fail;
  }
  while ((lr = mn__lines_next(&lines, &s, &n, why, sizeof why)) != MN__LINE_END) {
    p.line = lines.line;
    if (lr == MN__LINE_BAD || !mn__text_printable(s, n, why, sizeof why)) {
      st = rerr(&p, "%s", why);
      goto fail;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!*trim(buf)) continue; /* blank */
    if (!have_header) {
      if ((st = parse_header(&p, buf)) != MN_OK) goto fail;
      have_header = true;
      continue;
    }
    if ((st = parse_row(&p, buf)) != MN_OK) goto fail;
  }
  if (!have_header) {
    st = rerr(&p, "no RMM log header");
    goto fail;
  }
  pre = mn__calloc(p.nev ? p.nev : 1, sizeof *pre);
  if (!pre) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    goto fail;
  }
  if ((st = check_live(&p, pre)) != MN_OK) goto fail;
  if ((st = mn_trace_create(&t)) != MN_OK) goto fail;
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, p.origin_us);
  st = mn_trace_meta_set(t, "source", p.name);
  if (st == MN_OK) st = mn_trace_meta_set(t, "recorded_by", "rmm");
  if (st == MN_OK) st = mn_trace_meta_set(t, "time_origin_us", num);
  for (size_t i = 0; i < p.nev && st == MN_OK; i++) {
    if (!pre[i]) continue;
    mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .pre = true, .stream = p.ev[i].stream,
                          .address = p.ev[i].address, .size = p.ev[i].size ? p.ev[i].size : 1};
    st = mn_trace_append(t, &e);
  }
  for (size_t i = 0; i < p.nev && st == MN_OK; i++) {
    mn_trace_entry_t e = {.action = p.ev[i].action, .time_us = p.ev[i].time_us, .stream = p.ev[i].stream,
                          .address = p.ev[i].address, .size = p.ev[i].size};
    st = mn_trace_append(t, &e);
    if (st == MN_OK) t->entries[t->nentries - 1].line = p.ev[i].line;
  }
  if (st != MN_OK) goto fail;
  free(pre);
  free(p.ev);
  *out = t;
  return MN_OK;
fail:
  free(pre);
  free(p.ev);
  mn_trace_destroy(t);
  return st == MN_ERR_FORMAT ? st : mn__error_wrap(st, __func__);
}

mn_status mn_trace_import_rmm_csv_file(const char *path, mn_trace_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__trace_parse_file(__func__, path, mn_trace_import_rmm_csv, out);
}
