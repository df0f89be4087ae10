/* kernels/pool.c: the CPU executor's thread pool (kernels/pool.h): workers
 * started once, woken per run by a generation count; tasks handed out by an
 * atomic counter. One run at a time (others run inline). A child made by
 * fork() has none of the workers: it runs every task inline (pthread_atfork).
 * Thread-safe. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/pool.h"
#include "runtime/env.h"

#define MN__POOL_MAX 16

static struct {
  pthread_once_t once;
  pthread_mutex_t run_lock; /* held by the one caller whose run is active */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  int nthreads; /* including the caller */
  uint64_t generation;
  int busy; /* workers still inside the current run */
  void (*fn)(void *, int64_t);
  void *ctx;
  int64_t ntasks;
  atomic_llong next;
} pool = {.once = PTHREAD_ONCE_INIT,
          .run_lock = PTHREAD_MUTEX_INITIALIZER,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static void drain(void (*fn)(void *, int64_t), void *ctx, int64_t ntasks) {
  for (;;) {
    int64_t t = atomic_fetch_add(&pool.next, 1);
    if (t >= ntasks) return;
    fn(ctx, t);
  }
}

static void *worker(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.mu);
    seen = pool.generation;
    void (*fn)(void *, int64_t) = pool.fn;
    void *ctx = pool.ctx;
    int64_t ntasks = pool.ntasks;
    pthread_mutex_unlock(&pool.mu);
    drain(fn, ctx, ntasks);
    pthread_mutex_lock(&pool.mu);
    if (--pool.busy == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

/* In a child of fork(): only the forking thread exists; a parent's run in
 * flight on another thread left its locks taken in this copy. */
static void pool_after_fork_child(void) {
  pool.nthreads = 1;
  pool.busy = 0;
  pthread_mutex_init(&pool.run_lock, NULL);
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
}

static void pool_start(void) {
  int n = 0;
  const char *env = mn__env(MN__ENV_KERNEL_THREADS);
  if (env && *env) n = atoi(env);
  if (n <= 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    n = cpus > 0 ? (int)cpus : 1;
  }
  if (n > MN__POOL_MAX) n = MN__POOL_MAX;
  pool.nthreads = 1;
  if (n > 1 && pthread_atfork(NULL, NULL, pool_after_fork_child) != 0) return; /* no workers: still correct */
  for (int i = 1; i < n; i++) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, worker, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) break; /* fewer workers: still correct */
    pool.nthreads++;
  }
}

int mn__pool_threads(void) {
  pthread_once(&pool.once, pool_start);
  return pool.nthreads;
}

void mn__pool_run(void (*fn)(void *ctx, int64_t task), void *ctx, int64_t ntasks) {
  if (ntasks <= 0) return;
  if (ntasks == 1 || mn__pool_threads() == 1 || pthread_mutex_trylock(&pool.run_lock) != 0) {
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t);
    return;
  }
  pthread_mutex_lock(&pool.mu);
  pool.fn = fn;
  pool.ctx = ctx;
  pool.ntasks = ntasks;
  atomic_store(&pool.next, 0);
  pool.busy = pool.nthreads - 1;
  pool.generation++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.mu);
  drain(fn, ctx, ntasks);
  pthread_mutex_lock(&pool.mu);
  while (pool.busy > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
  pthread_mutex_unlock(&pool.run_lock);
}
