/* runtime/strbuf.h: text appenders: a bounded one with snprintf's contract, shared by
 * every mnemo function that formats into a caller's buffer, and a growing one
 * (mn__sbuf_t) for text or bytes the library builds whole (the report pages
 * and their summaries, the save formats' headers), its memory through the host-fault seam. One per caller, no locks. */
#ifndef MNEMO_RUNTIME_STRBUF_H
#define MNEMO_RUNTIME_STRBUF_H

#include <stdbool.h>
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

/* A growing text: p[0..len) NUL-terminated once anything was written (p NULL
 * before). A write that finds no host memory sets oom and drops it and every
 * later write (so a builder checks once, at the end); free with mn__sbuf_free.
 * {0} is an empty one. */
typedef struct mn__sbuf_s {
  char *p;
  size_t len, cap;
  bool oom;
} mn__sbuf_t;

void mn__sbuf_write(mn__sbuf_t *b, const void *data, size_t n);
void mn__sbuf_puts(mn__sbuf_t *b, const char *s);
void mn__sbuf_putc(mn__sbuf_t *b, char c);
void mn__sbuf_printf(mn__sbuf_t *b, const char *fmt, ...) MN__PRINTF(2, 3);
/* s as a JSON string: UTF-8 passes through when valid (else U+FFFD), control
 * bytes and DEL as \u escapes, and '<' as \u003c so that data embedded in an
 * HTML page never closes its script element (the same value to a JSON reader). */
void mn__sbuf_json_str(mn__sbuf_t *b, const char *s);
/* The text ("" when nothing was written; NULL only after oom). */
const char *mn__sbuf_str(const mn__sbuf_t *b);
/* Hands the text over (malloc'ed, the caller frees it) and empties b; NULL
 * (and b freed) after oom or when no host memory is left for an empty text. */
char *mn__sbuf_take(mn__sbuf_t *b, size_t *len);
void mn__sbuf_free(mn__sbuf_t *b);

#endif /* MNEMO_RUNTIME_STRBUF_H */
