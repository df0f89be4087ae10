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
/* The element-row converter of a dtype pair: n elements, byte steps. */
typedef void (*mn__cpu_cast_fn)(char *dst, int64_t dstep, const char *src, int64_t sstep, int64_t n);
mn__cpu_cast_fn mn__cpu_cast_fn_of(mn_dtype dst, mn_dtype src);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_CPU_EXEC_H */
