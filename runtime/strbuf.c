/* runtime/strbuf.c: the bounded text appender (snprintf's contract); no
 * shared state. */
#include "runtime/strbuf.h"

#include <stdarg.h>
#include <stdio.h>

void mn__strbuf_printf(mn__strbuf_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->buf && t->len < t->cap ? t->cap - t->len : 0;
  int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}
