/* mnemo/nccl.h: the optional NCCL module (libmnemo_nccl, built when the CUDA
 * build finds nccl.h and libnccl; not part of <mnemo/mnemo.h>). A memory
 * pool source that makes NCCL-qualified memory (ncclMemAlloc's recipe), and
 * the registration of every segment of a pool with a communicator
 * (ncclCommRegister), kept up to date through the allocator's segment
 * callbacks, as PyTorch's ProcessGroupNCCL.register_mem_pool.
 * Threading: every call is thread-safe. */
#ifndef MNEMO_NCCL_H
#define MNEMO_NCCL_H

#include <nccl.h>

#include "mnemo/mempool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *out = a pool source whose segments are NCCL-qualified memory of the CUDA
 * device the pool's allocator belongs to, made as ncclMemAlloc does:
 * cuMemCreate with POSIX file-descriptor handles (and fabric handles where
 * the device supports them), GPUDirect RDMA capable where supported, the size
 * rounded up to the recommended granularity, its own reserved address range,
 * read-write access for the device and every device that can access it as a
 * peer (cuMemSetAccess). Freeing unmaps, releases and frees the range. A pool
 * on another device type fails its allocations with MN_ERR_NOT_SUPPORTED. */
MN_API MN_NODISCARD mn_status mn_nccl_source(mn_mempool_source_t *out);

/* Registers every segment of `pool` with `comm` (ncclCommRegister): those it
 * has now and, through a segment callback on its allocator, every one it gets
 * later; a segment is deregistered (ncclCommDeregister) before it is freed
 * (or pages unmapped). A (comm, pool) pair registered already:
 * MN_ERR_INVALID_ARGUMENT. A failed registration of an existing segment
 * undoes the others and fails; one of a later segment (in the callback,
 * where nothing can be returned) is counted and reported by
 * mn_nccl_deregister_pool. */
MN_API MN_NODISCARD mn_status mn_nccl_register_pool(ncclComm_t comm, mn_mempool_t *pool);
/* Deregisters every segment still registered and stops following the pool.
 * Call it before the communicator or the pool's allocator is destroyed; the
 * pool itself may be destroyed first (its segments are deregistered as they
 * are freed). Unknown pair: MN_ERR_INVALID_ARGUMENT. MN_ERR_DEVICE when a
 * registration or deregistration failed since mn_nccl_register_pool (all
 * state is dropped anyway). */
MN_API MN_NODISCARD mn_status mn_nccl_deregister_pool(ncclComm_t comm, mn_mempool_t *pool);
/* Segments of `pool` registered with `comm` now (0 for an unknown pair). */
MN_API size_t mn_nccl_registered_count(ncclComm_t comm, const mn_mempool_t *pool);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_NCCL_H */
