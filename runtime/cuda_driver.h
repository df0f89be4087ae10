/* runtime/cuda_driver.h: the one table of CUDA driver entry points mnemo
 * calls (VMM, sharing, error texts, primary-context state), found once through
 * the CUDA runtime (cudaGetDriverEntryPoint, the CUDA 12.0 ABI): libcuda is
 * never linked. Used by the CUDA backend (runtime/cuda_backend.c) and by the
 * optional NCCL module; no other file looks up a driver symbol
 * (tests/test_layers.py checks). CUDA builds only: it includes <cuda.h>.
 * Threading: mn__cuda_driver loads the table once (pthread_once); the table
 * is read-only afterwards, from any thread. */
#ifndef MNEMO_RUNTIME_CUDA_DRIVER_H
#define MNEMO_RUNTIME_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h> /* driver types only */

typedef struct mn__cuda_driver_s {
  bool vmm;      /* every VMM entry point below up to mem_get_granularity was found */
  char why[160]; /* why vmm is false */
  CUresult(CUDAAPI *device_get)(CUdevice *device, int ordinal);
  CUresult(CUDAAPI *device_get_attribute)(int *value, CUdevice_attribute attrib, CUdevice device);
  CUresult(CUDAAPI *mem_address_reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags);
  CUresult(CUDAAPI *mem_address_free)(CUdeviceptr ptr, size_t size);
  CUresult(CUDAAPI *mem_create)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                unsigned long long flags);
  CUresult(CUDAAPI *mem_map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags);
  CUresult(CUDAAPI *mem_set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
  CUresult(CUDAAPI *mem_unmap)(CUdeviceptr ptr, size_t size);
  CUresult(CUDAAPI *mem_release)(CUmemGenericAllocationHandle handle);
  CUresult(CUDAAPI *mem_get_granularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                         CUmemAllocationGranularity_flags option);
  /* optional: NULL when absent */
  CUresult(CUDAAPI *get_error_name)(CUresult error, const char **text);
  CUresult(CUDAAPI *get_error_string)(CUresult error, const char **text);
  CUresult(CUDAAPI *primary_ctx_state)(CUdevice dev, unsigned int *flags, int *active);
  CUresult(CUDAAPI *mem_retain)(CUmemGenericAllocationHandle *handle, void *addr);                 /* sharing */
  CUresult(CUDAAPI *mem_export)(void *shareable, CUmemGenericAllocationHandle handle,               /* sharing */
                                CUmemAllocationHandleType type, unsigned long long flags);
  CUresult(CUDAAPI *mem_import)(CUmemGenericAllocationHandle *handle, void *shareable,             /* sharing */
                                CUmemAllocationHandleType type);
  CUresult(CUDAAPI *mem_get_address_range)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr); /* the NCCL module */
} mn__cuda_driver_t;

/* The table, loaded on first use; never NULL (absent entry points are NULL). */
const mn__cuda_driver_t *mn__cuda_driver(void);

#endif /* MNEMO_RUNTIME_CUDA_DRIVER_H */
