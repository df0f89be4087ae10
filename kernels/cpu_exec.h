/* kernels/cpu_exec.h: the CPU executor of plans (kernels/plan.h): memcpy and
 * typed cast loops, blocked transpose, strided rows; large work on the pool. */
#ifndef MNEMO_KERNELS_CPU_EXEC_H
#define MNEMO_KERNELS_CPU_EXEC_H

#include <stdint.h>

#include "kernels/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs a plan on host-addressable memory: copies/casts for copy plans, writes
 * `pattern` (dst_item bytes) for FILL plans. Work of >= 1 MiB is split over
 * the thread pool; results are the same for any thread count. */
void mn__cpu_exec(const mn__plan_t *plan, const void *pattern);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_CPU_EXEC_H */
