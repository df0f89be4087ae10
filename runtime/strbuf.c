/* runtime/strbuf.c: the text appenders: bounded (snprintf's contract) and
 * growing (mn__sbuf_t); no shared state. */
#include "runtime/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hostmem.h"

void mn__strbuf_printf(mn__strbuf_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->buf && t->len < t->cap ? t->cap - t->len : 0;
  int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

/* Room for n more bytes and the NUL; false (b->oom set, the text freed) when
 * host memory runs out. */
static bool sbuf_room(mn__sbuf_t *b, size_t n) {
  if (b->oom) return false;
  if (b->cap && n < b->cap - b->len) return true;
  if (n > SIZE_MAX / 2 - b->len - 1) goto oom;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len <= n) cap *= 2;
  char *p = mn__realloc(b->p, cap);
  if (!p) goto oom;
  b->p = p;
  b->cap = cap;
  return true;
oom:
  free(b->p);
  *b = (mn__sbuf_t){NULL, 0, 0, true};
  return false;
}

void mn__sbuf_write(mn__sbuf_t *b, const void *data, size_t n) {
  if (!sbuf_room(b, n)) return;
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void mn__sbuf_puts(mn__sbuf_t *b, const char *s) { mn__sbuf_write(b, s, strlen(s)); }

void mn__sbuf_putc(mn__sbuf_t *b, char c) { mn__sbuf_write(b, &c, 1); }

void mn__sbuf_printf(mn__sbuf_t *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(ap2);
    return;
  }
  if ((size_t)n < sizeof small) {
    mn__sbuf_write(b, small, (size_t)n);
  } else if (sbuf_room(b, (size_t)n)) {
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

void mn__sbuf_json_str(mn__sbuf_t *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  mn__sbuf_putc(b, '"');
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      mn__sbuf_printf(b, "\\%c", c);
    } else if (c == '<') {
      mn__sbuf_puts(b, "\\u003c");
    } else if (c < 0x20 || c == 0x7f) {
      mn__sbuf_printf(b, "\\u%04x", c);
    } else if (c < 0x80) {
      mn__sbuf_putc(b, (char)c);
    } else {
      size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      size_t k = 1;
      while (len && k < len && (p[k] & 0xc0) == 0x80) k++;
      if (!len || k < len || (c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) ||
          (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)) {
        mn__sbuf_puts(b, "\\ufffd");
        p++;
        continue;
      }
      mn__sbuf_write(b, p, len);
      p += len;
      continue;
    }
    p++;
  }
  mn__sbuf_putc(b, '"');
}

const char *mn__sbuf_str(const mn__sbuf_t *b) { return b->oom ? NULL : b->p ? b->p : ""; }

char *mn__sbuf_take(mn__sbuf_t *b, size_t *len) {
  if (!b->oom && !b->p) mn__sbuf_write(b, "", 0);
  char *p = b->oom ? NULL : b->p;
  if (len) *len = p ? b->len : 0;
  *b = (mn__sbuf_t){NULL, 0, 0, false};
  return p;
}

void mn__sbuf_free(mn__sbuf_t *b) {
  free(b->p);
  *b = (mn__sbuf_t){NULL, 0, 0, false};
}
