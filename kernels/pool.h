/* kernels/pool.h: the small thread pool of the CPU executor: splits a range
 * of independent tasks over worker threads and the caller. Thread-safe. */
#ifndef MNEMO_KERNELS_POOL_H
#define MNEMO_KERNELS_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(ctx, t) for every t in [0, ntasks), each exactly once, spread over
 * the pool's workers and the calling thread; returns when all are done. Tasks
 * must write disjoint memory (results do not depend on which thread ran what).
 * When the pool is busy with another caller, or has no workers, the caller
 * runs every task itself. */
void mn__pool_run(void (*fn)(void *ctx, int64_t task), void *ctx, int64_t ntasks);
/* Threads that work on one mn__pool_run (workers + the caller): the
 * MNEMO_KERNEL_THREADS environment variable when set (1 = no workers), else
 * the online CPUs, at most 16. */
int mn__pool_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_POOL_H */
