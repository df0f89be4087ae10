/* runtime/cuda_driver.c: the CUDA driver entry point table (runtime/cuda_driver.h),
 * found through the CUDA runtime with the CUDA 12.0 ABI; the only file that
 * looks up driver symbols. Compiled in CUDA builds only.
 * Threading: loaded once under pthread_once, read-only afterwards. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "runtime/cuda_driver.h"

static mn__cuda_driver_t g_driver;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* One driver symbol, requested with the CUDA 12.0 ABI; NULL when absent,
 * and then, when why is given and still empty, why. */
static void *symbol_why(const char *symbol, char *why, size_t why_size) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
#elif CUDART_VERSION >= 12000
  cudaError_t err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#else
  cudaError_t err = cudaErrorNotSupported;
#endif
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == NULL) {
    (void)cudaGetLastError();
    if (why && why[0] == '\0') {
      snprintf(why, why_size, "driver entry point %s not found (%s)", symbol,
               err != cudaSuccess ? cudaGetErrorName(err) : "symbol not found");
    }
    return NULL;
  }
  return fn;
}

#define LOAD(field, symbol) \
  (g_driver.field = (__typeof__(g_driver.field))symbol_why((symbol), g_driver.why, sizeof g_driver.why))

static void load(void) {
  mn__cuda_driver_t *d = &g_driver;
  LOAD(device_get, "cuDeviceGet");
  LOAD(device_get_attribute, "cuDeviceGetAttribute");
  LOAD(mem_address_reserve, "cuMemAddressReserve");
  LOAD(mem_address_free, "cuMemAddressFree");
  LOAD(mem_create, "cuMemCreate");
  LOAD(mem_map, "cuMemMap");
  LOAD(mem_set_access, "cuMemSetAccess");
  LOAD(mem_unmap, "cuMemUnmap");
  LOAD(mem_release, "cuMemRelease");
  LOAD(mem_get_granularity, "cuMemGetAllocationGranularity");
  d->vmm = d->device_get && d->device_get_attribute && d->mem_address_reserve && d->mem_address_free &&
           d->mem_create && d->mem_map && d->mem_set_access && d->mem_unmap && d->mem_release &&
           d->mem_get_granularity;
  char why[sizeof d->why];
  memcpy(why, d->why, sizeof why);
  LOAD(get_error_name, "cuGetErrorName");
  LOAD(get_error_string, "cuGetErrorString");
  LOAD(primary_ctx_state, "cuDevicePrimaryCtxGetState");
  LOAD(mem_retain, "cuMemRetainAllocationHandle");
  LOAD(mem_export, "cuMemExportToShareableHandle");
  LOAD(mem_import, "cuMemImportFromShareableHandle");
  LOAD(mem_get_address_range, "cuMemGetAddressRange");
  memcpy(d->why, why, sizeof why); /* the optional ones do not explain !vmm */
}

const mn__cuda_driver_t *mn__cuda_driver(void) {
  pthread_once(&g_once, load);
  return &g_driver;
}
