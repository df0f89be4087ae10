/* runtime/status.c: status names and the thread-local last-error message;
 * each thread has its own message, so no locking is needed. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"

#define MN__ERRMSG_MAX 1024

static _Thread_local char errmsg[MN__ERRMSG_MAX];
static _Thread_local mn_status errstatus = MN_OK;
static _Thread_local size_t errprefix; /* length of "<call>: " in errmsg */

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

const char *mn_last_error(void) { return errmsg; }
const char *mn__last_error_detail(void) {
  return errprefix <= strlen(errmsg) ? errmsg + errprefix : errmsg;
}
mn_status mn_last_status(void) { return errstatus; }

void mn_clear_error(void) {
  errmsg[0] = '\0';
  errprefix = 0;
  errstatus = MN_OK;
}

/* The message is "<call>: <detail>". mn__error names the function that
 * failed; each mn__error_wrap on the way out replaces that name with its own,
 * so the message names the outermost (public) call once, followed by the
 * innermost detail, whatever internal functions it passed through. */
mn_status mn__error(mn_status status, const char *func, const char *fmt, ...) {
  int k = snprintf(errmsg, sizeof errmsg, "%s: ", func ? func : "mnemo");
  if (k < 0 || (size_t)k >= sizeof errmsg) k = 0;
  errprefix = (size_t)k;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errmsg + k, sizeof errmsg - (size_t)k, fmt, ap);
  va_end(ap);
  errstatus = status;
  return status;
}

mn_status mn__error_wrap(mn_status status, const char *func) {
  errstatus = status;
  size_t flen = strlen(func), plen = errprefix, mlen = strlen(errmsg);
  if (plen > mlen) plen = 0; /* the message was cleared or set elsewhere */
  if (plen == flen + 2 && strncmp(errmsg, func, flen) == 0) return status; /* already ours */
  if (flen + 2 >= sizeof errmsg) return status;
  size_t dlen = mlen - plen; /* the detail after the old name */
  if (dlen > sizeof errmsg - flen - 3) dlen = sizeof errmsg - flen - 3;
  memmove(errmsg + flen + 2, errmsg + plen, dlen);
  memcpy(errmsg, func, flen);
  errmsg[flen] = ':';
  errmsg[flen + 1] = ' ';
  errmsg[flen + 2 + dlen] = '\0';
  errprefix = flen + 2;
  return status;
}

void mn__error_save(mn__error_saved_t *s) {
  s->status = errstatus;
  s->prefix = errprefix;
  snprintf(s->msg, sizeof s->msg, "%s", errmsg);
}

void mn__error_restore(const mn__error_saved_t *s) {
  errstatus = s->status;
  errprefix = s->prefix;
  snprintf(errmsg, sizeof errmsg, "%s", s->msg);
}

const char *mn_version(void) { return MNEMO_VERSION_STRING; }
