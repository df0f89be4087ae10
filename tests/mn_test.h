/* tests/mn_test.h: the tiny test harness every mnemo test executable uses:
 * CHECK macros that count failures, named cases, skip (exit 77) and a summary. */
#ifndef MNEMO_TESTS_MN_TEST_H
#define MNEMO_TESTS_MN_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"

#define MN_TEST_SKIP_CODE 77

#if defined(__GNUC__) || defined(__clang__)
#define MN_TEST_UNUSED __attribute__((unused))
#else
#define MN_TEST_UNUSED
#endif

static int mn_test_failures;
static int mn_test_checks;
static const char *mn_test_case MN_TEST_UNUSED = "";

#define MN_CHECK(cond)                                                              \
  do {                                                                              \
    mn_test_checks++;                                                               \
    if (!(cond)) {                                                                  \
      mn_test_failures++;                                                           \
      fprintf(stderr, "%s:%d: [%s] CHECK failed: %s\n", __FILE__, __LINE__,         \
              mn_test_case, #cond);                                                 \
    }                                                                               \
  } while (0)

/* Drops a status on purpose (cleanup whose failure the test does not judge);
 * GCC does not take a (void) cast for the library's must-use statuses. */
static inline void mn_test_ignore(mn_status st) { (void)st; }

/* Checks a call succeeded; prints the library's message when it did not. */
#define MN_CHECK_OK(call)                                                           \
  do {                                                                              \
    mn_status mn__st = (call);                                                      \
    mn_test_checks++;                                                               \
    if (mn__st != MN_OK) {                                                          \
      mn_test_failures++;                                                           \
      fprintf(stderr, "%s:%d: [%s] %s -> %s: %s\n", __FILE__, __LINE__,             \
              mn_test_case, #call, mn_status_name(mn__st), mn_last_error());        \
    }                                                                               \
  } while (0)

/* Checks a call failed with `want` and that its message mentions `needle`. */
#define MN_CHECK_ERR(call, want, needle)                                            \
  do {                                                                              \
    mn_clear_error();                                                               \
    mn_status mn__st = (call);                                                      \
    mn_test_checks++;                                                               \
    if (mn__st != (want) || strstr(mn_last_error(), (needle)) == NULL) {            \
      mn_test_failures++;                                                           \
      fprintf(stderr, "%s:%d: [%s] %s -> %s \"%s\"; wanted %s mentioning \"%s\"\n", \
              __FILE__, __LINE__, mn_test_case, #call, mn_status_name(mn__st),      \
              mn_last_error(), mn_status_name(want), (needle));                     \
    }                                                                               \
  } while (0)

#define MN_TEST(name) static void name(void)
#define MN_RUN(name)                                                                \
  do {                                                                              \
    mn_test_case = #name;                                                           \
    int mn__before = mn_test_failures;                                              \
    name();                                                                         \
    printf("%-48s %s\n", #name, mn_test_failures == mn__before ? "ok" : "FAILED");  \
  } while (0)

/* Prints the summary; the exit code of main. */
static inline int mn_test_finish(void) {
  printf("%d checks, %d failed\n", mn_test_checks, mn_test_failures);
  return mn_test_failures == 0 ? 0 : 1;
}

/* Whether environment variable `name` is set to something other than "" or "0". */
static inline bool mn_test_env_flag(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* Whether the machine has an NVIDIA GPU whatever CUDA says: a device node
 * from the kernel driver (/dev/nvidia0), or a GPU listed by it. */
static inline bool mn_test_gpu_node_present(void) {
  FILE *f = fopen("/dev/nvidia0", "rb");
  if (f != NULL) {
    fclose(f);
    return true;
  }
  f = fopen("/proc/driver/nvidia/gpus", "rb");
  if (f != NULL) fclose(f);
  return f != NULL;
}

/* For gpu-labelled tests: exits with the skip code when no CUDA device exists.
 * It fails (exit 1) instead when MNEMO_REQUIRE_GPU=1 says a device must be
 * there (the GPU script sets it), or when a CUDA build sees no device on a
 * machine that has an NVIDIA GPU (a driver too old for the runtime, a broken
 * install): a device that cannot be used is a failure, never "skipped". */
static inline void mn_test_require_cuda(void) {
  int n = 0;
  mn_status st = mn_device_count(MN_DEVICE_CUDA, &n);
  if (st != MN_OK || n == 0) {
    const bool required = mn_test_env_flag("MNEMO_REQUIRE_GPU");
    const bool unusable = mn_build_has_cuda() && mn_test_gpu_node_present();
    printf("%s: no CUDA device (%s; %s)\n",
           required   ? "FAILED (MNEMO_REQUIRE_GPU is set)"
           : unusable ? "FAILED (an NVIDIA GPU is present but CUDA cannot use it)"
                      : "SKIPPED",
           mn_build_has_cuda() ? "built with CUDA" : "built without CUDA",
           st != MN_OK ? mn_last_error() : "the driver reports 0 devices");
    exit(required || unusable ? 1 : MN_TEST_SKIP_CODE);
  }
}

/* Gives back what the SIM devices' default (caching) allocators keep cached,
 * so that nothing stays mapped: call before a leak check (mn_sim_configure
 * does this itself for idle default allocators). */
static inline void mn_test_release_sim_caches(void) {
  int n = 0;
  if (mn_device_count(MN_DEVICE_SIM, &n) != MN_OK) return;
  for (int i = 0; i < n; i++) {
    mn_allocator_t *a = NULL;
    if (mn_allocator_get_default(mn_device_sim(i), &a) == MN_OK) mn_test_ignore(mn_allocator_empty_cache(a));
  }
}

/* Gives back what the CUDA devices' default caching allocators and pinned
 * pools keep cached, so that a leak check at exit (compute-sanitizer's
 * --leak-check full) sees only memory a test really lost: call at the end of
 * a gpu-labelled test, after every block was freed. */
static inline void mn_test_release_cuda_caches(void) {
  int n = 0;
  if (mn_device_count(MN_DEVICE_CUDA, &n) != MN_OK) return;
  for (int i = 0; i < n; i++) {
    mn_allocator_t *a = NULL;
    mn_test_ignore(mn_device_synchronize(mn_device_cuda(i)));
    if (mn_allocator_get_default(mn_device_cuda(i), &a) == MN_OK) mn_test_ignore(mn_allocator_empty_cache(a));
    if (mn_pinned_allocator_get_default(mn_device_cuda(i), &a) == MN_OK) mn_test_ignore(mn_allocator_empty_cache(a));
  }
  mn_allocator_t *a = NULL;
  if (mn_pinned_allocator_get_default(mn_device_cpu(), &a) == MN_OK) mn_test_ignore(mn_allocator_empty_cache(a));
}

/* Whether the test runs under compute-sanitizer (MNEMO_TEST_SANITIZER=1, set
 * by bench/gpu/run.sh sanitize): steps that make the CUDA API fail on
 * purpose (an allocation larger than the device) are left out there, since
 * the tool reports every failing API call; the plain test run covers them. */
static inline bool mn_test_under_sanitizer(void) { return mn_test_env_flag("MNEMO_TEST_SANITIZER"); }

/* Reconfigures the SIM devices (count, capacity in bytes, defaults
 * otherwise); exits with a message when refused. */
static inline void mn_test_configure_sim(int devices, size_t capacity) {
  mn_sim_config_t c = mn_sim_config_default();
  c.capacity = capacity;
  c.device_count = devices;
  if (mn_sim_configure(&c) != MN_OK) {
    fprintf(stderr, "mn_sim_configure failed: %s\n", mn_last_error());
    exit(1);
  }
}

/* Deterministic pseudo-random bytes (xorshift64; one stream per executable). */
static inline void mn_test_fill_random(void *p, size_t n) {
  static unsigned long long state = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    ((unsigned char *)p)[i] = (unsigned char)state;
  }
}

/* Sets the copy engine's staging: chunk bytes, blocks per copy, host threads. */
static inline void mn_test_set_copy_staging(size_t chunk, unsigned buffers, unsigned threads) {
  mn_copy_config_t c = mn_copy_config_default();
  c.chunk_bytes = chunk;
  c.staging_buffers = buffers;
  c.host_threads = threads;
  MN_CHECK_OK(mn_copy_set_config(&c));
}

#endif /* MNEMO_TESTS_MN_TEST_H */
