/* runtime/debug.c: the failure path of MN__ASSERT (runtime/debug.h): one
 * message on stderr, then abort. Thread-safe. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/debug.h"

void mn__assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "mnemo: %s:%d: precondition failed: %s: %s\n", file, line, cond, msg);
  fflush(stderr);
  abort();
}
