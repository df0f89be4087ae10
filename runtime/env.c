/* runtime/env.c: the environment variables' table (runtime/env.h) and its one
 * reader, the only getenv of the library and the CLI; the public enumeration
 * (mnemo/env.h). Stateless: thread-safe as getenv is. */
#include "runtime/env.h"

#include <stdlib.h>

#include "mnemo/env.h"
#include "runtime/error.h"

typedef struct mn__env_row {
  const char *name, *meaning, *def;
} mn__env_row;

#define MN__ENV_ROW(id, nm, mean, dflt) [MN__ENV_##id] = {nm, mean, dflt},
static const mn__env_row env_rows[MN__ENV_COUNT] = {MN__ENV_TABLE(MN__ENV_ROW)};
#undef MN__ENV_ROW

const char *mn__env(mn__env_id id) {
  if ((int)id < 0 || (int)id >= MN__ENV_COUNT) return NULL;
  return getenv(env_rows[id].name);
}

const char *mn__env_name(mn__env_id id) {
  if ((int)id < 0 || (int)id >= MN__ENV_COUNT) return NULL;
  return env_rows[id].name;
}

int mn_env_count(void) { return MN__ENV_COUNT; }

mn_status mn_env_get(int i, mn_env_var_t *out) {
  if (i < 0 || i >= MN__ENV_COUNT)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "index %d out of range (0..%d)", i, MN__ENV_COUNT - 1);
  if (out == NULL) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "out is NULL (index %d)", i);
  const mn__env_row *r = &env_rows[i];
  out->name = r->name;
  out->meaning = r->meaning;
  out->default_value = r->def;
  out->value = mn__env((mn__env_id)i);
  return MN_OK;
}
