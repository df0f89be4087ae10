/* kernels/cuda_kernels.h: the extern "C" launchers of the CUDA kernels, called
 * by kernels/kernels.c only when the build has CUDA (or the kernel emulation).
 * Threading: any thread, any stream of the device. */
#ifndef MNEMO_KERNELS_CUDA_KERNELS_H
#define MNEMO_KERNELS_CUDA_KERNELS_H

#include <stddef.h>

#include "kernels/philox.h"
#include "kernels/plan.h"
#include "kernels/quant.h"
#include "mnemo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pre: dst is memory of CUDA device `device`; stream is a cudaStream_t of that
 * device (NULL = the default stream); itemsize in {1,2,4,8,16}. Every launcher
 * makes `device` current for its CUDA calls and restores the calling thread's
 * device before it returns (runtime/cuda_device.h). A missing device or driver
 * is MN_ERR_NO_DEVICE; launch errors become MN_ERR_DEVICE with CUDA's text. */
mn_status mn__cuda_fill(int device, void *stream, void *dst, size_t count, size_t itemsize,
                        const void *pattern);
/* pre: dst and src memory of CUDA device `device`, non-overlapping. */
mn_status mn__cuda_copy(int device, void *stream, void *dst, const void *src, size_t nbytes);
/* Runs a plan (kernels/plan.h) on CUDA memory of `device`: vectorized
 * contiguous casts, tiled transposes, generic N-d copies/casts, strided fills
 * (pattern: dst_item bytes). CONTIG same-dtype plans go to mn__cuda_copy. */
mn_status mn__cuda_exec(int device, void *stream, const mn__plan_t *plan, const void *pattern);
/* Random fill of the strided dst (row-major element order) with Philox. */
mn_status mn__cuda_random(int device, void *stream, const mn__strided_t *dst, int dtype,
                          const mn__rand_params_t *params);
/* Runs one prepared gather or scatter (kernels/index_kern.h) on CUDA memory
 * of `device`: a gather with one thread per position; a scatter with one
 * thread per combination of its parallel dims (dst stride != 0), which walks
 * the serial dims (dst stride 0) in row-major order: no atomics, the CPU's
 * order and bits (kernels/cuda_index.cu). */
struct mn__index_geom_s;
mn_status mn__cuda_index(int device, void *stream, const struct mn__index_geom_s *g);
/* Quantizes or dequantizes one contiguous job (kernels/quant.h). */
mn_status mn__cuda_quant(int device, void *stream, const mn__quant_t *job);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_CUDA_KERNELS_H */
