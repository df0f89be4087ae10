/* runtime/status.c: status names and the thread-local last-error message;
 * each thread has its own message, so no locking is needed. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"

#define MN__ERRMSG_MAX 1024

static _Thread_local char mn__errmsg[MN__ERRMSG_MAX];
static _Thread_local mn_status mn__errstatus = MN_OK;

const char *mn_status_name(mn_status status) {
  switch (status) {
#define MN__CASE(sym, val, name, text) \
  case sym:                            \
    return name;
    MN_STATUS_MAP(MN__CASE)
#undef MN__CASE
  }
  return "unknown";
}

const char *mn_status_string(mn_status status) {
  switch (status) {
#define MN__CASE(sym, val, name, text) \
  case sym:                            \
    return text;
    MN_STATUS_MAP(MN__CASE)
#undef MN__CASE
  }
  return "unknown status";
}

const char *mn_last_error(void) { return mn__errmsg; }
mn_status mn_last_status(void) { return mn__errstatus; }

void mn_clear_error(void) {
  mn__errmsg[0] = '\0';
  mn__errstatus = MN_OK;
}

mn_status mn__error(mn_status status, const char *func, const char *fmt, ...) {
  int k = snprintf(mn__errmsg, sizeof mn__errmsg, "%s: ", func ? func : "mnemo");
  if (k < 0 || (size_t)k >= sizeof mn__errmsg) k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(mn__errmsg + k, sizeof mn__errmsg - (size_t)k, fmt, ap);
  va_end(ap);
  mn__errstatus = status;
  return status;
}

mn_status mn__error_wrap(mn_status status, const char *func) {
  size_t flen = strlen(func), mlen = strlen(mn__errmsg);
  mn__errstatus = status;
  /* Do not repeat a prefix that is already there. */
  if (strncmp(mn__errmsg, func, flen) == 0 && mn__errmsg[flen] == ':') return status;
  if (flen + 2 >= sizeof mn__errmsg) return status;
  if (mlen > sizeof mn__errmsg - flen - 3) mlen = sizeof mn__errmsg - flen - 3;
  memmove(mn__errmsg + flen + 2, mn__errmsg, mlen);
  memcpy(mn__errmsg, func, flen);
  mn__errmsg[flen] = ':';
  mn__errmsg[flen + 1] = ' ';
  mn__errmsg[flen + 2 + mlen] = '\0';
  return status;
}

const char *mn_version(void) { return MNEMO_VERSION_STRING; }
