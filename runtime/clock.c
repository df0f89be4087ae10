/* runtime/clock.c: CLOCK_MONOTONIC nanoseconds for allocation events, read
 * through the TSC where it runs at a constant rate (runtime/clock.h).
 * Threading: any thread. The anchor (a TSC count, the CLOCK_MONOTONIC time
 * read beside it, and the line's slope) sits behind a sequence lock made of
 * atomics: readers retry nothing (a reader that sees a renewal under way
 * reads clock_gettime instead), one renewer at a time. The last time given
 * to each thread is thread-local (times never go back on one thread). */
#include "runtime/clock.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "runtime/fileio.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <x86intrin.h>
#define MN__CLOCK_TSC 1
#endif

/* The anchor is renewed once it is this old; the first line needs two
 * readings at least this far apart (the slope's error is the two readings'
 * jitter, tens of ns, over this interval). */
enum { MN__CLOCK_SPAN_NS = 10000000, MN__CLOCK_FIRST_LINE_NS = 5000000 };

static _Thread_local uint64_t t_last;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns, or the thread's last time when ns is earlier (a renewal moves the line
 * by the previous line's error, under a microsecond, either way). */
static inline uint64_t monotone(uint64_t ns) {
  if (ns < t_last) return t_last;
  t_last = ns;
  return ns;
}

#if defined(MN__CLOCK_TSC)
static atomic_int g_mode; /* 0: not known yet, 1: TSC, 2: clock_gettime */

/* seq: even when stable, odd while renewed; mult: nanoseconds per TSC tick,
 * 32.32 fixed point (0: no line yet); span: ticks the anchor is used for. */
static struct { _Atomic uint64_t seq, tsc, ns, mult, span; } g_anchor;

/* An invariant TSC (CPUID 0x80000007, EDX bit 8), and the kernel's clock
 * source is the TSC where that can be read (a kernel that found the TSCs of
 * its CPUs apart, or unstable, has switched away from it). */
static bool tsc_usable(void) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return false;
  char s[32];
  if (mn__file_read_small("/sys/devices/system/clocksource/clocksource0/current_clocksource", s, sizeof s) < 0)
    return true; /* no sysfs (a container may hide it): the CPU's word */
  return strcmp(s, "tsc\n") == 0 || strcmp(s, "tsc") == 0;
}

static int clock_mode(void) {
  int m = atomic_load_explicit(&g_mode, memory_order_relaxed);
  if (__builtin_expect(m != 0, 1)) return m;
  m = tsc_usable() ? 1 : 2; /* racing first calls find the same answer */
  atomic_store_explicit(&g_mode, m, memory_order_relaxed);
  return m;
}

/* Renews the anchor (when no other thread is at it) and returns
 * clock_gettime's time. The slope is measured from the old anchor to the new
 * one, once they are MN__CLOCK_FIRST_LINE_NS apart. */
static __attribute__((noinline, cold)) uint64_t renew(void) {
  uint64_t s = atomic_load_explicit(&g_anchor.seq, memory_order_relaxed);
  if ((s & 1) ||
      !atomic_compare_exchange_strong_explicit(&g_anchor.seq, &s, s + 1, memory_order_acquire, memory_order_relaxed))
    return mono_ns();
  atomic_thread_fence(memory_order_release); /* seq is odd before any field changes */
  uint64_t ns = mono_ns(), tsc = __rdtsc();
  uint64_t ns0 = atomic_load_explicit(&g_anchor.ns, memory_order_relaxed);
  uint64_t tsc0 = atomic_load_explicit(&g_anchor.tsc, memory_order_relaxed);
  if (s == 0) { /* the first reading: no line yet */
    atomic_store_explicit(&g_anchor.ns, ns, memory_order_relaxed);
    atomic_store_explicit(&g_anchor.tsc, tsc, memory_order_relaxed);
  } else if (ns - ns0 >= MN__CLOCK_FIRST_LINE_NS && tsc > tsc0) {
    unsigned __int128 q = ((unsigned __int128)(ns - ns0) << 32) / (tsc - tsc0);
    uint64_t mult = q > UINT64_MAX ? 0 : (uint64_t)q;
    uint64_t span = mult ? ((uint64_t)MN__CLOCK_SPAN_NS << 32) / mult : 0;
    /* span * mult stays under 2^64 (MN__CLOCK_SPAN_NS << 32 < 2^56): the
     * readers' product cannot overflow */
    atomic_store_explicit(&g_anchor.ns, ns, memory_order_relaxed);
    atomic_store_explicit(&g_anchor.tsc, tsc, memory_order_relaxed);
    atomic_store_explicit(&g_anchor.mult, mult, memory_order_relaxed);
    atomic_store_explicit(&g_anchor.span, span, memory_order_relaxed);
  }
  atomic_store_explicit(&g_anchor.seq, s + 2, memory_order_release);
  return ns;
}
#endif

uint64_t mn__clock_ns(void) {
#if defined(MN__CLOCK_TSC)
  if (__builtin_expect(clock_mode() == 1, 1)) {
    uint64_t s = atomic_load_explicit(&g_anchor.seq, memory_order_acquire);
    uint64_t tsc0 = atomic_load_explicit(&g_anchor.tsc, memory_order_relaxed);
    uint64_t ns0 = atomic_load_explicit(&g_anchor.ns, memory_order_relaxed);
    uint64_t mult = atomic_load_explicit(&g_anchor.mult, memory_order_relaxed);
    uint64_t span = atomic_load_explicit(&g_anchor.span, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t t = __rdtsc(), dt = t - tsc0;
    /* a stable anchor, read whole, young enough (dt wraps when t is before
     * it: a TSC read on a core a few ticks behind, or a renewal since) */
    if (__builtin_expect(!(s & 1) && atomic_load_explicit(&g_anchor.seq, memory_order_relaxed) == s && dt < span, 1))
      return monotone(ns0 + ((dt * mult) >> 32));
    return monotone(renew());
  }
#endif
  return monotone(mono_ns());
}

bool mn__clock_uses_tsc(void) {
#if defined(MN__CLOCK_TSC)
  return clock_mode() == 1 && atomic_load_explicit(&g_anchor.mult, memory_order_relaxed) != 0;
#else
  return false;
#endif
}
