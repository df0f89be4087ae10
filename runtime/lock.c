/* runtime/lock.c: the slow paths of mn__lock_t (runtime/lock.h): spinning, sleeping on a futex
 * (Linux; sched_yield elsewhere) and waking a sleeper. Thread-safe. */
#include "runtime/lock.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <sched.h>
#endif

static void wait_while_contended(mn__lock_t *l) {
#ifdef __linux__
  syscall(SYS_futex, (int *)&l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
#else
  (void)l;
  sched_yield();
#endif
}

void mn__lock_wake(mn__lock_t *l) {
#ifdef __linux__
  syscall(SYS_futex, (int *)&l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
  (void)l;
#endif
}

/* The holder's critical section is short: spin a little first, then mark the
 * word contended (2) and sleep until an unlock that saw 2 wakes a sleeper. */
void mn__lock_slow(mn__lock_t *l) {
  for (int i = 0; i < 100; i++) {
    int expected = 0;
    if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(&l->state, &expected, 1, memory_order_acquire, memory_order_relaxed))
      return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0) wait_while_contended(l);
}
