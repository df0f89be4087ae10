/* tests/test_status.c: status names and strings, the thread-local last-error
 * message (per thread, cleared, prefixed by the failing call). */
#include <pthread.h>

#include "mn_test.h"

MN_TEST(names_and_strings) {
  MN_CHECK(strcmp(mn_status_name(MN_OK), "ok") == 0);
  MN_CHECK(strcmp(mn_status_name(MN_ERR_OUT_OF_MEMORY), "out_of_memory") == 0);
  MN_CHECK(strcmp(mn_status_name((mn_status)999), "unknown") == 0);
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

int main(void) {
  MN_RUN(names_and_strings);
  MN_RUN(last_error_names_call_and_values);
  MN_RUN(thread_local_messages);
  MN_RUN(long_messages_are_truncated_safely);
  MN_RUN(version);
  return mn_test_finish();
}
