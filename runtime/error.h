/* runtime/error.h: internal helpers that set the thread-local error message;
 * every failing path in mnemo goes through mn__error. */
#ifndef MNEMO_RUNTIME_ERROR_H
#define MNEMO_RUNTIME_ERROR_H

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
/* Prefixes the current message with "<func>: " (adds context while passing a
 * failure up) and returns `status`. */
mn_status mn__error_wrap(mn_status status, const char *func);

#ifdef __cplusplus
}
#endif

/* Validate-first helper: fails with INVALID_ARGUMENT naming the argument. */
#define MN__CHECK_ARG(cond, ...)                                           \
  do {                                                                     \
    if (!(cond)) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, __VA_ARGS__); \
  } while (0)

#endif /* MNEMO_RUNTIME_ERROR_H */
