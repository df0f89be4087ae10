/* runtime/strbuf.h: a bounded text appender with snprintf's contract, shared by
 * every mnemo function that formats into a caller's buffer; one per caller, no locks. */
#ifndef MNEMO_RUNTIME_STRBUF_H
#define MNEMO_RUNTIME_STRBUF_H

#include <stddef.h>

#include "runtime/error.h"

/* Text goes to buf[0..cap) (buf may be NULL with cap 0), always NUL-terminated
 * when cap > 0; len counts every byte asked for, also past cap, so the caller
 * can report the size needed. */
typedef struct mn__strbuf_s {
  char *buf;
  size_t cap, len;
} mn__strbuf_t;

void mn__strbuf_printf(mn__strbuf_t *t, const char *fmt, ...) MN__PRINTF(2, 3);

#endif /* MNEMO_RUNTIME_STRBUF_H */
