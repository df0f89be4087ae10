/* runtime/error.h: internal helpers that set the thread-local error message;
 * every failing path in mnemo goes through mn__error. */
#ifndef MNEMO_RUNTIME_ERROR_H
#define MNEMO_RUNTIME_ERROR_H

#include <stddef.h>

#include "mnemo/status.h"

#if defined(__GNUC__) || defined(__clang__)
#define MN__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MN__PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the thread's last error to "<func>: <formatted message>" and returns
 * `status`, so failing paths read: return mn__error(MN_ERR_..., __func__, "..."). */
mn_status mn__error(mn_status status, const char *func, const char *fmt, ...) MN__PRINTF(3, 4);
/* Passes a failure up through `func`: the message's call name becomes func
 * (the detail stays), so a public function that wraps names itself once:
 * "mn_view_empty: size -1 at dim 0 is negative". Returns `status`. */
mn_status mn__error_wrap(mn_status status, const char *func);
/* The current message without its call name: to quote a failure inside a
 * new message ("view 'a' does not fit its storage: <detail>"). */
const char *mn__last_error_detail(void);

/* Drops a status on purpose (the compiler warns on a dropped mn_status, and
 * GCC does not take a (void) cast); the call site says why in a comment. */
static inline void mn__ignore(mn_status st) { (void)st; }

/* The thread's error state, kept across a call that may overwrite it. */
typedef struct mn__error_saved_s {
  mn_status status;
  size_t prefix;
  char msg[1024];
} mn__error_saved_t;
void mn__error_save(mn__error_saved_t *s);
void mn__error_restore(const mn__error_saved_t *s);

#ifdef __cplusplus
}
#endif

/* Validate-first helper: fails with INVALID_ARGUMENT naming the argument. */
#define MN__CHECK_ARG(cond, ...)                                           \
  do {                                                                     \
    if (!(cond)) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, __VA_ARGS__); \
  } while (0)

#endif /* MNEMO_RUNTIME_ERROR_H */
