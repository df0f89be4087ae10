/* runtime/lock.h: mn__lock_t, a small mutex for hot paths (the caching allocator takes one
 * per alloc and per free): an atomic word with three states (free, held, held with waiters)
 * and a futex wait on Linux (sched_yield elsewhere) when held. Uncontended, lock is one
 * compare-and-swap and unlock one exchange, against ~50 instructions for a glibc mutex pair.
 * Not recursive. Thread-safe by construction; built on C11 atomics, so TSan sees its order. */
#ifndef MNEMO_RUNTIME_LOCK_H
#define MNEMO_RUNTIME_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct mn__lock_s {
  atomic_int state; /* 0 free, 1 held, 2 held and someone may be waiting */
} mn__lock_t;

#define MN__LOCK_INIT {0}

static inline void mn__lock_init(mn__lock_t *l) { atomic_init(&l->state, 0); }

/* The contended path (lock.c): a futex wait. */
void mn__lock_slow(mn__lock_t *l);
/* Wakes one waiter (lock.c). */
void mn__lock_wake(mn__lock_t *l);

static inline void mn__lock(mn__lock_t *l) {
  int expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire, memory_order_relaxed))
    mn__lock_slow(l);
}

static inline bool mn__trylock(mn__lock_t *l) {
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire, memory_order_relaxed);
}

static inline void mn__unlock(mn__lock_t *l) {
  if (atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2) mn__lock_wake(l);
}

#endif /* MNEMO_RUNTIME_LOCK_H */
