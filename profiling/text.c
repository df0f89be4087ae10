/* profiling/text.c: file reads (runtime/fileio.h), lines, numbers, errors and address sorting shared by the
 * trace reader and the RMM importer; no shared state, any thread. */
#include "profiling/text.h"
#include "runtime/fileio.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mn_status mn__text_error(const char *func, const char *name, uint64_t line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return mn__error(MN_ERR_FORMAT, func, "%s:%" PRIu64 ": %s", name, line, msg);
}

mn__line_result mn__lines_next(mn__lines_t *r, const char **s, size_t *n, char *why, size_t whysize) {
  if (r->pos >= r->len) return MN__LINE_END;
  r->line++;
  if (r->line > UINT32_MAX) {
    snprintf(why, whysize, "too many lines");
    return MN__LINE_BAD;
  }
  const char *p = r->text + r->pos;
  size_t rest = r->len - r->pos, scan = rest < r->max + 2 ? rest : r->max + 2;
  const char *nl = memchr(p, '\n', scan);
  size_t k = nl ? (size_t)(nl - p) : 0;
  if (nl && k > 0 && p[k - 1] == '\r') k--;
  if (!nl || k > r->max) {
    if (nl || rest > r->max + 1) snprintf(why, whysize, "line longer than %zu bytes", r->max);
    else snprintf(why, whysize, "truncated file: the last line has no newline");
    return MN__LINE_BAD;
  }
  r->pos += (size_t)(nl - p) + 1;
  *s = p;
  *n = k;
  return MN__LINE_OK;
}

bool mn__text_printable(const char *s, size_t n, char *why, size_t whysize) {
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)s[k];
    if (c != '\t' && (c < 0x20 || c > 0x7e)) {
      snprintf(why, whysize, "byte 0x%02x at column %zu is not printable ASCII", c, k + 1);
      return false;
    }
  }
  return true;
}

bool mn__parse_dec(const char *s, uint64_t *out) {
  size_t n = 0;
  uint64_t v = 0;
  for (; s[n]; n++) {
    if (s[n] < '0' || s[n] > '9' || n >= 20) return false;
    unsigned d = (unsigned)(s[n] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (n == 0) return false;
  *out = v;
  return true;
}

bool mn__parse_hex(const char *s, uint64_t *out) {
  if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return false;
  s += 2;
  size_t n = 0;
  uint64_t v = 0;
  for (; s[n]; n++) {
    char c = s[n];
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
    else return false;
    if (n >= 16) return false;
    v = (v << 4) | d;
  }
  if (n == 0) return false;
  *out = v;
  return true;
}

int mn__addr_ref_cmp(const void *a, const void *b) {
  const mn__addr_ref_t *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->address != y->address) return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index);
}

/* Reads a whole regular file into *buf (malloc'd, the caller frees it), *len
 * bytes (mn__file_read_all: never blocks on a FIFO or device). MN_ERR_IO
 * (cannot open or read), MN_ERR_INVALID_ARGUMENT (not a regular file) or
 * MN_ERR_OUT_OF_MEMORY, the message prefixed with func. */
static mn_status read_whole_file(const char *func, const char *path, char **buf, size_t *len) {
  void *b = NULL;
  mn_status st = mn__file_read_all(func, path, &b, len);
  if (st == MN_ERR_NOT_FOUND) { /* the trace readers' documented error for a file they cannot open */
    char why[600];
    snprintf(why, sizeof why, "%s", mn__last_error_detail());
    return mn__error(MN_ERR_IO, func, "%s", why);
  }
  if (st != MN_OK) return st;
  *buf = b;
  return MN_OK;
}

mn_status mn__trace_parse_file(const char *func, const char *path, mn__trace_text_fn parse, mn_trace_t **out) {
  char *buf = NULL;
  size_t len = 0;
  mn_status st = read_whole_file(func, path, &buf, &len);
  if (st != MN_OK) return st;
  st = parse(buf, len, path, out);
  free(buf);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}
