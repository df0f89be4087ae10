/* tests/test_status.c: status names and strings, the thread-local last-error
 * message (per thread, cleared, prefixed by the failing call), and the table
 * of environment variables (mnemo/env.h, runtime/env.h). */
#include <pthread.h>

#include "mn_test.h"
#include "runtime/hostmem.h"
#include "runtime/env.h"

MN_TEST(names_and_strings) {
  MN_CHECK(strcmp(mn_status_name(MN_OK), "ok") == 0);
  MN_CHECK(strcmp(mn_status_name(MN_ERR_OUT_OF_MEMORY), "out_of_memory") == 0);
  MN_CHECK(strcmp(mn_status_name((mn_status)999), "unknown") == 0);
  MN_CHECK(MN_ERR_BUSY == 12 && strcmp(mn_status_name(MN_ERR_BUSY), "busy") == 0); /* the newest code */
  MN_CHECK(strstr(mn_status_string(MN_ERR_BUSY), "still in use") != NULL);
  MN_CHECK(strcmp(mn_status_string(MN_ERR_NOT_SUPPORTED), "not supported by this build or device") == 0);
  MN_CHECK(strcmp(mn_status_string((mn_status)-3), "unknown status") == 0);
  /* Every code in the table has a distinct name. */
  const mn_status all[] = {
#define X(sym, val, name, text) sym,
      MN_STATUS_MAP(X)
#undef X
  };
  size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++) {
    MN_CHECK((int)all[i] == (int)i); /* values are dense and stable */
    for (size_t j = i + 1; j < n; j++) MN_CHECK(strcmp(mn_status_name(all[i]), mn_status_name(all[j])) != 0);
  }
}

MN_TEST(last_error_names_call_and_values) {
  mn_clear_error();
  MN_CHECK(mn_last_error()[0] == '\0' && mn_last_status() == MN_OK);
  mn_device_t d;
  MN_CHECK(mn_device_parse("tpu:3", &d) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(strstr(mn_last_error(), "mn_device_parse: ") == mn_last_error());
  MN_CHECK(strstr(mn_last_error(), "\"tpu:3\"") != NULL);
  MN_CHECK(mn_last_status() == MN_ERR_INVALID_ARGUMENT);
  mn_clear_error();
  MN_CHECK(mn_last_error()[0] == '\0');
  /* Errors passed up keep the inner message and gain the outer call's name. */
  mn_storage_t *s = NULL;
  MN_CHECK(mn_storage_create(mn_device_sim(7), 16, NULL, NULL, &s) == MN_ERR_NO_DEVICE);
  MN_CHECK(strstr(mn_last_error(), "mn_storage_create: ") == mn_last_error());
  MN_CHECK(strstr(mn_last_error(), "no device sim:7") != NULL);
  MN_CHECK(s == NULL);
}

static void *other_thread(void *arg) {
  /* A fresh thread has no error, and its errors stay its own. */
  int ok = mn_last_error()[0] == '\0';
  mn_dtype t;
  ok &= mn_dtype_parse("nope", &t) == MN_ERR_INVALID_ARGUMENT;
  ok &= strstr(mn_last_error(), "nope") != NULL;
  *(int *)arg = ok;
  return NULL;
}

MN_TEST(thread_local_messages) {
  mn_device_t d;
  MN_CHECK(mn_device_parse("gpu", &d) == MN_ERR_INVALID_ARGUMENT);
  int ok = 0;
  pthread_t t;
  MN_CHECK(pthread_create(&t, NULL, other_thread, &ok) == 0);
  pthread_join(t, NULL);
  MN_CHECK(ok == 1);
  MN_CHECK(strstr(mn_last_error(), "\"gpu\"") != NULL); /* ours is intact */
}

MN_TEST(long_messages_are_truncated_safely) {
  char name[3000];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  mn_dtype t;
  MN_CHECK(mn_dtype_parse(name, &t) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(strlen(mn_last_error()) < 1024);
  MN_CHECK(strncmp(mn_last_error(), "mn_dtype_parse: ", 16) == 0);
}

MN_TEST(version) {
  MN_CHECK(strcmp(mn_version(), MNEMO_VERSION_STRING) == 0);
}

/* The table: unique names, MNEMO_ ones (or TMPDIR), each documented; values
 * read at each call, so setenv shows at once, in the public enumeration and in
 * the library's reader. */
MN_TEST(environment_table) {
  const int n = mn_env_count();
  MN_CHECK(n == MN__ENV_COUNT && n >= 11);
  for (int i = 0; i < n; i++) {
    mn_env_var_t var;
    MN_CHECK_OK(mn_env_get(i, &var));
    /* mnemo's own, or the standard ones it reads: TMPDIR (temporary files),
     * XDG_CACHE_HOME and HOME (where the CLI's import cache lives) */
    MN_CHECK(var.name != NULL && (strncmp(var.name, "MNEMO_", 6) == 0 || strcmp(var.name, "TMPDIR") == 0 ||
                                  strcmp(var.name, "XDG_CACHE_HOME") == 0 || strcmp(var.name, "HOME") == 0));
    MN_CHECK(var.meaning != NULL && var.meaning[0] != '\0');
    MN_CHECK(var.default_value != NULL && var.default_value[0] != '\0');
    MN_CHECK(strcmp(var.name, mn__env_name((mn__env_id)i)) == 0);
    for (int j = 0; j < i; j++) {
      mn_env_var_t other;
      MN_CHECK_OK(mn_env_get(j, &other));
      MN_CHECK(strcmp(var.name, other.name) != 0);
    }
    /* set, seen; unset, seen; the old value put back */
    char *old = getenv(var.name) ? strdup(getenv(var.name)) : NULL;
    char want[64];
    snprintf(want, sizeof want, "mnemo-test-%d", i);
    MN_CHECK(setenv(var.name, want, 1) == 0);
    MN_CHECK_OK(mn_env_get(i, &var));
    MN_CHECK(var.value != NULL && strcmp(var.value, want) == 0);
    MN_CHECK(mn__env((mn__env_id)i) != NULL && strcmp(mn__env((mn__env_id)i), want) == 0);
    MN_CHECK(unsetenv(var.name) == 0);
    MN_CHECK_OK(mn_env_get(i, &var));
    MN_CHECK(var.value == NULL && mn__env((mn__env_id)i) == NULL);
    if (old) setenv(var.name, old, 1);
    free(old);
  }
  mn_env_var_t untouched = {"a", "b", "c", "d"};
  MN_CHECK(mn_env_get(-1, &untouched) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(mn_env_get(n, &untouched) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(strstr(mn_last_error(), "mn_env_get") != NULL);
  MN_CHECK(strcmp(untouched.name, "a") == 0 && strcmp(untouched.value, "d") == 0);
  MN_CHECK(mn_env_get(0, NULL) == MN_ERR_INVALID_ARGUMENT);
  MN_CHECK(mn__env((mn__env_id)-1) == NULL && mn__env(MN__ENV_COUNT) == NULL);
}

/* A failure passes up through internal functions; the message names the
 * public call the user made, once, then the innermost detail. */
static void once(const char *call, mn_status st, const char *want_start) {
  const char *m = mn_last_error();
  MN_CHECK(st != MN_OK && strncmp(m, want_start, strlen(want_start)) == 0);
  /* no internal name, and no second call name after the first */
  MN_CHECK(strstr(m, "mn__") == NULL && strstr(m + 1, ": mn_") == NULL);
  if (st == MN_OK || strncmp(m, want_start, strlen(want_start)) != 0 || strstr(m, "mn__") || strstr(m + 1, ": mn_"))
    fprintf(stderr, "  %s: \"%s\"\n", call, m);
}

MN_TEST(error_messages_name_the_public_call_once) {
  mn_view_t *v = NULL;
  mn_storage_t *s = NULL;
  const int64_t neg = -1, big = (int64_t)1 << 42;
  once("view_empty", mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &neg, &v),
       "mn_view_empty: size -1 at dim 0 is negative");
  MN_CHECK(strcmp(mn_last_error(), "mn_view_empty: size -1 at dim 0 is negative") == 0);
  /* an OOM: the public call, then the allocator's PyTorch-worded message */
  once("view_empty sim", mn_view_empty(mn_device_sim(0), MN_DTYPE_FLOAT32, 1, &big, &v),
       "mn_view_empty: sim:0 out of memory. Tried to allocate 16384.00 GiB");
  once("storage_create", mn_storage_create(mn_device_sim(0), (size_t)1 << 45, NULL, NULL, &s),
       "mn_storage_create: sim:0 out of memory. Tried to allocate");
  /* host memory runs out part way (runtime/hostmem.h's fault) */
  const int64_t small = 1000;
  mn__hostmem_fail_nth(2);
  mn_status host_oom = mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &small, &v);
  MN_CHECK(mn__hostmem_fault_fired());
  mn__hostmem_fail_nth(0);
  once("view_empty host", host_oom, "mn_view_empty: ");
  MN_CHECK(host_oom == MN_ERR_OUT_OF_MEMORY && strstr(mn_last_error(), "out of host memory") != NULL);
  const int64_t sizes[2] = {2, 3}, other[2] = {3, 2};
  mn_view_t *a = NULL, *b = NULL;
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT32, 2, sizes, &a));
  MN_CHECK_OK(mn_view_empty(mn_device_cpu(), MN_DTYPE_INT32, 2, other, &b));
  once("view_copy", mn_view_copy(a, b, NULL), "mn_view_copy: shapes differ");
  const int64_t bad = -2;
  once("view_reshape", mn_view_reshape(a, 1, &bad, NULL, &v), "mn_view_reshape: ");
  mn_view_destroy(a);
  mn_view_destroy(b);
  once("load", mn_load("/nonexistent/x.mnemo", mn_device_cpu(), NULL), "mn_load: ");
  MN_CHECK(v == NULL && s == NULL);
}

int main(void) {
  MN_RUN(names_and_strings);
  MN_RUN(last_error_names_call_and_values);
  MN_RUN(thread_local_messages);
  MN_RUN(long_messages_are_truncated_safely);
  MN_RUN(version);
  MN_RUN(environment_table);
  MN_RUN(error_messages_name_the_public_call_once);
  return mn_test_finish();
}
