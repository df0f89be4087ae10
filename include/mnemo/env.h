/* mnemo/env.h: the environment variables mnemo reads (library and CLI), each
 * with its meaning, default and current value, enumerable. Thread-safe as
 * getenv is: values are read at each call, not cached. */
#ifndef MNEMO_ENV_H
#define MNEMO_ENV_H

#include "mnemo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_env_var_s {
  const char *name;          /* "MNEMO_ALLOC_CONF" */
  const char *meaning;       /* what it sets, one sentence */
  const char *default_value; /* what applies when it is unset, in words */
  const char *value;         /* the current value; NULL when unset */
} mn_env_var_t;

/* The number of variables in the table. */
MN_API int mn_env_count(void);
/* Variable i (0 .. mn_env_count() - 1) with its current value (the
 * environment's string, valid until the variable changes).
 * MN_ERR_INVALID_ARGUMENT for i out of range or out NULL; *out untouched then. */
MN_API MN_NODISCARD mn_status mn_env_get(int i, mn_env_var_t *out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_ENV_H */
