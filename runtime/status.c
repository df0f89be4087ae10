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
static _Thread_local size_t mn__errprefix; /* length of "<call>: " in mn__errmsg */

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
const char *mn__last_error_detail(void) {
  return mn__errprefix <= strlen(mn__errmsg) ? mn__errmsg + mn__errprefix : mn__errmsg;
}
mn_status mn_last_status(void) { return mn__errstatus; }

void mn_clear_error(void) {
  mn__errmsg[0] = '\0';
  mn__errprefix = 0;
  mn__errstatus = MN_OK;
}

/* The message is "<call>: <detail>". mn__error names the function that
 * failed; each mn__error_wrap on the way out replaces that name with its own,
 * so the message names the outermost (public) call once, followed by the
 * innermost detail, whatever internal functions it passed through. */
mn_status mn__error(mn_status status, const char *func, const char *fmt, ...) {
  int k = snprintf(mn__errmsg, sizeof mn__errmsg, "%s: ", func ? func : "mnemo");
  if (k < 0 || (size_t)k >= sizeof mn__errmsg) k = 0;
  mn__errprefix = (size_t)k;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(mn__errmsg + k, sizeof mn__errmsg - (size_t)k, fmt, ap);
  va_end(ap);
  mn__errstatus = status;
  return status;
}

mn_status mn__error_wrap(mn_status status, const char *func) {
  mn__errstatus = status;
  size_t flen = strlen(func), plen = mn__errprefix, mlen = strlen(mn__errmsg);
  if (plen > mlen) plen = 0; /* the message was cleared or set elsewhere */
  if (plen == flen + 2 && strncmp(mn__errmsg, func, flen) == 0) return status; /* already ours */
  if (flen + 2 >= sizeof mn__errmsg) return status;
  size_t dlen = mlen - plen; /* the detail after the old name */
  if (dlen > sizeof mn__errmsg - flen - 3) dlen = sizeof mn__errmsg - flen - 3;
  memmove(mn__errmsg + flen + 2, mn__errmsg + plen, dlen);
  memcpy(mn__errmsg, func, flen);
  mn__errmsg[flen] = ':';
  mn__errmsg[flen + 1] = ' ';
  mn__errmsg[flen + 2 + dlen] = '\0';
  mn__errprefix = flen + 2;
  return status;
}

void mn__error_save(mn__error_saved_t *s) {
  s->status = mn__errstatus;
  s->prefix = mn__errprefix;
  snprintf(s->msg, sizeof s->msg, "%s", mn__errmsg);
}

void mn__error_restore(const mn__error_saved_t *s) {
  mn__errstatus = s->status;
  mn__errprefix = s->prefix;
  snprintf(mn__errmsg, sizeof mn__errmsg, "%s", s->msg);
}

const char *mn_version(void) { return MNEMO_VERSION_STRING; }
