/* runtime/random.c: mn__random_u64 (runtime/random.h). Any thread: the
 * fallback's only state is an atomic counter. */
#include "runtime/random.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t mn__random_u64(void) {
  uint64_t r = 0;
#if defined(__linux__)
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
#endif
  static _Atomic uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&ts ^ (uint64_t)(uintptr_t)&counter;
  return mix64(x ^ atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
}
