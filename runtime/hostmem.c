/* runtime/hostmem.c: the library's host allocations (runtime/hostmem.h), with
 * a per-thread "fail the nth call" fault for tests. The unarmed cost is one
 * thread-local compare. Thread-safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hostmem.h"

static _Thread_local int64_t t_fail_at; /* 0: unarmed */
static _Thread_local int64_t t_calls;
static _Thread_local bool t_fired;
static _Thread_local char t_site[160];

/* Whether this call is the armed one: counts the call when armed. */
static bool fault(const char *file, int line) {
  if (t_fail_at <= 0) return false;
  if (++t_calls != t_fail_at) return false;
  t_fired = true;
  /* "folder/file.c:line": the library's folders are one level deep, so the
   * last two parts of the path name the file (two folders' files of one
   * name stay apart) however the build spelled it */
  const char *base = file, *last = NULL;
  for (const char *c = file; *c; c++)
    if (*c == '/') {
      if (last) base = last + 1;
      last = c;
    }
  snprintf(t_site, sizeof t_site, "%s:%d", base, line);
  return true;
}

void *mn__host_malloc(size_t n, const char *file, int line) { return fault(file, line) ? NULL : malloc(n); }

void *mn__host_calloc(size_t count, size_t size, const char *file, int line) {
  return fault(file, line) ? NULL : calloc(count, size);
}

void *mn__host_realloc(void *p, size_t n, const char *file, int line) {
  return fault(file, line) ? NULL : realloc(p, n);
}

void *mn__host_aligned_alloc(size_t align, size_t n, const char *file, int line) {
  return fault(file, line) ? NULL : aligned_alloc(align, n);
}

char *mn__host_strdup(const char *s, const char *file, int line) {
  if (fault(file, line)) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void mn__hostmem_fail_nth(int64_t n) {
  t_fail_at = n > 0 ? n : 0;
  t_calls = 0;
  t_fired = false;
  t_site[0] = 0;
}

int64_t mn__hostmem_calls(void) { return t_calls; }
bool mn__hostmem_fault_fired(void) { return t_fired; }
const char *mn__hostmem_fault_site(void) { return t_site; }
