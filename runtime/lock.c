/* runtime/lock.c: the slow paths of mn__lock_t (runtime/lock.h): sleeping on a futex (Linux;
 * sched_yield elsewhere) and waking a sleeper. Thread-safe. */
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

/* Contended: mark the word contended (2) and sleep until an unlock that saw
 * 2 wakes a sleeper. No spinning first: with critical sections of tens of
 * nanoseconds, a spinning waiter keeps pulling the lock's cache line from the
 * holder, and two threads on one allocator did 0.20x the pairs of one
 * (sleeping at once: 0.73x; glibc's mutex: 0.59x; bench_alloc_anchors
 * threads/mnemo_sim on an idle 2-core machine). */
void mn__lock_slow(mn__lock_t *l) {
  while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0) wait_while_contended(l);
}
