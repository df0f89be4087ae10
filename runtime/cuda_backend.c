/* runtime/cuda_backend.c: the CUDA device backend (mn__cuda_backend) on the CUDA
 * runtime API, with VMM through driver entry points; without CUDA a table of
 * NULL slots (0 devices). */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/cuda_device.h"
#include "runtime/error.h"

#ifndef MNEMO_HAVE_CUDA

/* ---- Built without CUDA: no devices. ---------------------------------------
 * Every slot stays NULL: runtime/device.c counts 0 devices without
 * device_count and answers a required slot with MN_ERR_NO_DEVICE ("built
 * without CUDA: no CUDA device exists"). */

static mn_status nocuda(const char *func) {
  return mn__error(MN_ERR_NO_DEVICE, func, "built without CUDA: no CUDA device exists");
}

mn_status mn__cuda_get_current(int *index) {
  (void)index;
  return nocuda(__func__);
}
mn_status mn__cuda_set_current(int index) {
  (void)index;
  return nocuda(__func__);
}

const mn__backend_t mn__cuda_backend = {.name = "cuda", .type = MN_DEVICE_CUDA};

#else /* MNEMO_HAVE_CUDA */

#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>

#include <cuda.h> /* driver types only: libcuda is never linked */
#include <cuda_runtime.h>

#include "runtime/cuda_driver.h"
#include "runtime/hostmem.h"

/* The fallback granularity when the device has no VMM: cudaMalloc hands out
 * 2 MiB pages for large allocations. */
#define MN__CUDA_DEFAULT_GRANULARITY ((size_t)2 << 20)

/* ---- Errors ------------------------------------------------------------------ */

static mn_status cuda_status_of(cudaError_t err) {
  switch (err) {
  case cudaErrorMemoryAllocation:
    return MN_ERR_OUT_OF_MEMORY;
  case cudaErrorInvalidDevice:
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorStubLibrary:
    return MN_ERR_NO_DEVICE;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidDevicePointer:
  case cudaErrorInvalidResourceHandle:
    return MN_ERR_INVALID_ARGUMENT;
  case cudaErrorNotSupported:
    return MN_ERR_NOT_SUPPORTED;
  /* stream capture: a call not allowed during a capture, or a capture broken */
  case cudaErrorIllegalState:
  case cudaErrorStreamCaptureUnsupported:
  case cudaErrorStreamCaptureInvalidated:
  case cudaErrorStreamCaptureMerge:
  case cudaErrorStreamCaptureUnmatched:
  case cudaErrorStreamCaptureUnjoined:
  case cudaErrorStreamCaptureIsolation:
  case cudaErrorStreamCaptureImplicit:
  case cudaErrorCapturedEvent:
  case cudaErrorStreamCaptureWrongThread:
    return MN_ERR_INVALID_STATE;
  default:
    return MN_ERR_DEVICE;
  }
}

/* Reports a failed runtime call: "<func>: <call(args)> on cuda:<index> failed:
 * <cudaErrorName> (<CUDA's text>)". Clears the thread's (non-sticky) CUDA error
 * so the next kernel launch check does not see this stale failure. */
static mn_status cuda_fail(cudaError_t err, const char *func, int index, const char *fmt, ...)
    MN__PRINTF(4, 5);
static mn_status cuda_fail(cudaError_t err, const char *func, int index, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)cudaGetLastError();
  return mn__error(cuda_status_of(err), func, "%s on cuda:%d failed: %s (%s)", what, index,
                   cudaGetErrorName(err), cudaGetErrorString(err));
}

/* ---- Driver entry points (VMM): the table of runtime/cuda_driver.h ---------- */

static const mn__cuda_driver_t *cu(void) { return mn__cuda_driver(); }

/* Whether every VMM entry point was found (loads the table once). */
static bool cu_loaded(void) { return cu()->vmm; }

static mn_status cu_status_of(CUresult res) {
  switch (res) {
  case CUDA_ERROR_OUT_OF_MEMORY:
    return MN_ERR_OUT_OF_MEMORY;
  case CUDA_ERROR_INVALID_VALUE:
    return MN_ERR_INVALID_ARGUMENT;
  case CUDA_ERROR_NOT_SUPPORTED:
    return MN_ERR_NOT_SUPPORTED;
  case CUDA_ERROR_INVALID_DEVICE:
  case CUDA_ERROR_NO_DEVICE:
    return MN_ERR_NO_DEVICE;
  default:
    return MN_ERR_DEVICE;
  }
}

/* Reports a failed driver call like cuda_fail. */
static mn_status cu_fail(CUresult res, const char *func, int index, const char *fmt, ...)
    MN__PRINTF(4, 5);
static mn_status cu_fail(CUresult res, const char *func, int index, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *name = NULL, *text = NULL;
  if (cu()->get_error_name == NULL || cu()->get_error_name(res, &name) != CUDA_SUCCESS) {
    name = NULL;
  }
  if (cu()->get_error_string == NULL || cu()->get_error_string(res, &text) != CUDA_SUCCESS) {
    text = NULL;
  }
  return mn__error(cu_status_of(res), func, "%s on cuda:%d failed: %s (%s; CUresult %d)", what,
                   index, name ? name : "CUDA driver error", text ? text : "no description",
                   (int)res);
}

/* ---- Device selection -------------------------------------------------------- */

/* Whether `index`'s primary context is active (made current somewhere): only
 * such a device is made current again when a guard is left. Without the driver
 * entry point, assume it is (restoring is what the caller expects). */
static bool cuda_primary_active(int index) {
  (void)cu_loaded();
  if (!cu()->primary_ctx_state || !cu()->device_get) return true;
  CUdevice dev;
  unsigned flags = 0;
  int active = 0;
  if (cu()->device_get(&dev, index) != CUDA_SUCCESS) return false;
  if (cu()->primary_ctx_state(dev, &flags, &active) != CUDA_SUCCESS) return false;
  return active != 0;
}

mn_status mn__cuda_guard_enter(mn__cuda_guard_t *g, const char *func, int index, bool force) {
  g->restore = -1;
  int cur = -1;
  cudaError_t got = cudaGetDevice(&cur);
  if (got != cudaSuccess) {
    (void)cudaGetLastError();
    cur = -1;
  }
  if (!force && cur == index) return MN_OK;
  cudaError_t err = cudaSetDevice(index);
  if (err != cudaSuccess) {
    if (err == cudaErrorInvalidDevice) {
      (void)cudaGetLastError();
      return mn__error(MN_ERR_NO_DEVICE, func, "cuda:%d does not exist (cudaSetDevice(%d): %s)",
                       index, index, cudaGetErrorName(err));
    }
    return cuda_fail(err, func, index, "cudaSetDevice(%d)", index);
  }
  if (cur >= 0 && cur != index && cuda_primary_active(cur)) g->restore = cur;
  return MN_OK;
}

void mn__cuda_guard_leave(mn__cuda_guard_t *g) {
  if (g->restore < 0) return;
  if (cudaSetDevice(g->restore) != cudaSuccess) (void)cudaGetLastError();
  g->restore = -1;
}

/* The scoped guard. MN__CUDA_GUARD(g) declares a guard that is left whenever
 * g goes out of scope, on every return path, through the cleanup attribute:
 * a GNU extension of gcc and clang, the only compilers mnemo builds with (Linux).
 * Handles made under the guard (streams, events, memory) stay valid after the
 * caller's device is current again: they belong to the device they were made on. */
static void cuda_guard_cleanup(mn__cuda_guard_t *g) { mn__cuda_guard_leave(g); }
#define MN__CUDA_GUARD(g) \
  mn__cuda_guard_t g __attribute__((cleanup(cuda_guard_cleanup))) = {.restore = -1}

/* Makes `index` current until the enclosing function returns (then the
 * caller's device is current again); returns the failure from the function.
 * MN__CUDA_USE_CTX also forces the primary context current: for driver calls. */
#define MN__CUDA_USE_(index, force)                                                   \
  MN__CUDA_GUARD(mn__guard);                                                          \
  do {                                                                                \
    mn_status mn__use_st = mn__cuda_guard_enter(&mn__guard, __func__, (index), (force)); \
    if (mn__use_st != MN_OK) return mn__use_st;                                       \
  } while (0)
#define MN__CUDA_USE(index) MN__CUDA_USE_((index), false)
#define MN__CUDA_USE_CTX(index) MN__CUDA_USE_((index), true)

mn_status mn__cuda_get_current(int *index) {
  int cur = -1;
  cudaError_t err = cudaGetDevice(&cur);
  if (err != cudaSuccess) return cuda_fail(err, __func__, 0, "cudaGetDevice()");
  *index = cur;
  return MN_OK;
}

mn_status mn__cuda_set_current(int index) {
  cudaError_t err = cudaSetDevice(index);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaSetDevice(%d)", index);
  return MN_OK;
}

/* ---- Devices ----------------------------------------------------------------- */

static mn_status cuda_device_count(int *count) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    /* cudaErrorNoDevice, cudaErrorInsufficientDriver (no libcuda), cudaErrorStubLibrary,
     * cudaErrorInitializationError, cudaErrorSystemDriverMismatch, ...: whatever keeps
     * the runtime from starting means no usable CUDA device, a normal answer. */
    (void)cudaGetLastError();
    n = 0;
  }
  *count = n < 0 ? 0 : n;
  return MN_OK;
}

/* The VMM granularity of device `index` (and its CUdevice through *dev_out), or 0
 * when the driver or the device has no VMM, with the reason in why[0..why_size).
 * The runtime API has no attribute for VMM support, so the driver's
 * CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is asked. */
/* The granularity and CUdevice of each device once known (asked once per
 * device, not once per page mapped); a device without VMM is asked again
 * (that path fails anyway). Lock-free: a race asks the driver twice and
 * stores the same answer. */
#define MN__CUDA_VMM_CACHE 64
static struct {
  _Atomic size_t granularity; /* 0: not known yet; published after dev */
  _Atomic int dev;
} mn__cuda_vmm_cache[MN__CUDA_VMM_CACHE];

static size_t cuda_vmm_granularity_ask(int index, CUdevice *dev_out, char *why, size_t why_size);

static size_t cuda_vmm_granularity(int index, CUdevice *dev_out, char *why, size_t why_size) {
  bool cacheable = index >= 0 && index < MN__CUDA_VMM_CACHE;
  if (cacheable) {
    size_t g = atomic_load_explicit(&mn__cuda_vmm_cache[index].granularity, memory_order_acquire);
    if (g != 0) {
      if (dev_out) *dev_out = (CUdevice)atomic_load_explicit(&mn__cuda_vmm_cache[index].dev, memory_order_relaxed);
      return g;
    }
  }
  CUdevice dev = 0;
  size_t g = cuda_vmm_granularity_ask(index, &dev, why, why_size);
  if (g != 0 && cacheable) {
    atomic_store_explicit(&mn__cuda_vmm_cache[index].dev, (int)dev, memory_order_relaxed);
    atomic_store_explicit(&mn__cuda_vmm_cache[index].granularity, g, memory_order_release);
  }
  if (g != 0 && dev_out) *dev_out = dev;
  return g;
}

static size_t cuda_vmm_granularity_ask(int index, CUdevice *dev_out, char *why, size_t why_size) {
  if (!cu_loaded()) {
    snprintf(why, why_size, "%s", cu()->why);
    return 0;
  }
  CUdevice dev = 0;
  int vmm = 0;
  CUresult res = cu()->device_get(&dev, index);
  if (res == CUDA_SUCCESS) {
    res = cu()->device_get_attribute(
        &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  }
  if (res != CUDA_SUCCESS) {
    snprintf(why, why_size, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) failed: "
             "CUresult %d", (int)res);
    return 0;
  }
  if (!vmm) {
    snprintf(why, why_size, "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0");
    return 0;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  size_t g = 0;
  res = cu()->mem_get_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (res != CUDA_SUCCESS || g == 0) {
    snprintf(why, why_size, "cuMemGetAllocationGranularity failed: CUresult %d", (int)res);
    return 0;
  }
  if (dev_out) *dev_out = dev;
  return g;
}

static mn_status cuda_get_properties(int index, mn_device_props_t *props) {
  MN__CUDA_USE(index);
  struct cudaDeviceProp p;
  memset(&p, 0, sizeof p);
  cudaError_t err = cudaGetDeviceProperties(&p, index);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaGetDeviceProperties(device=%d)", index);
  }
  mn_device_props_t out;
  memset(&out, 0, sizeof out);
  out.device.type = MN_DEVICE_CUDA;
  out.device.index = index;
  const char *name_end = memchr(p.name, '\0', sizeof p.name);
  size_t name_len = name_end ? (size_t)(name_end - p.name) : sizeof p.name;
  if (name_len >= sizeof out.name) name_len = sizeof out.name - 1; /* truncate, keep NUL */
  memcpy(out.name, p.name, name_len);
  out.name[name_len] = '\0';
  out.total_memory = p.totalGlobalMem;
  out.cc_major = p.major;
  out.cc_minor = p.minor;
  out.multiprocessors = p.multiProcessorCount;
  char why[160];
  size_t g = cuda_vmm_granularity(index, NULL, why, sizeof why);
  out.supports_vmm = g != 0;
  out.alloc_granularity = g != 0 ? g : MN__CUDA_DEFAULT_GRANULARITY;
  out.is_host_accessible = false;
  *props = out;
  return MN_OK;
}

static mn_status cuda_mem_info(int index, size_t *free_bytes, size_t *total_bytes) {
  MN__CUDA_USE(index);
  size_t f = 0, t = 0;
  cudaError_t err = cudaMemGetInfo(&f, &t);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaMemGetInfo()");
  *free_bytes = f;
  *total_bytes = t;
  return MN_OK;
}

static mn_status cuda_synchronize(int index) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaDeviceSynchronize()");
  return MN_OK;
}

/* ---- Raw memory -------------------------------------------------------------- */

static mn_status cuda_raw_alloc(int index, size_t nbytes, void **out) {
  MN__CUDA_USE(index);
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, nbytes);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaMalloc(nbytes=%zu)", nbytes);
  }
  *out = p;
  return MN_OK;
}

/* Waits for the device's queued work first (the contract; cudaFree usually
 * synchronizes by itself, but that is not promised for every case). */
static mn_status cuda_raw_free(int index, void *ptr) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaDeviceSynchronize() before cudaFree(ptr=%p)",
                         ptr);
  }
  err = cudaFree(ptr);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaFree(ptr=%p)", ptr);
  return MN_OK;
}

/* ---- Captures begun through mnemo ---------------------------------------------- *
 * The streams whose capture mnemo began and that still capture, so that an
 * unmap (which cuMemUnmap would do during a capture) is refused as the SIM
 * device refuses it. Guarded by its own lock; never held with another. */
typedef struct mn__cuda_origin {
  int index;
  void *stream;
} mn__cuda_origin;
static pthread_mutex_t cuda_origin_lock = PTHREAD_MUTEX_INITIALIZER;
static mn__cuda_origin *cuda_origins;
static size_t cuda_norigins, cuda_origins_cap;

static bool cuda_capturing(int index) {
  pthread_mutex_lock(&cuda_origin_lock);
  bool any = false;
  for (size_t i = 0; i < cuda_norigins && !any; i++) any = cuda_origins[i].index == index;
  pthread_mutex_unlock(&cuda_origin_lock);
  return any;
}

static void cuda_capture_forget(void *stream) {
  pthread_mutex_lock(&cuda_origin_lock);
  for (size_t i = 0; i < cuda_norigins; i++) {
    if (cuda_origins[i].stream == stream) {
      cuda_origins[i] = cuda_origins[--cuda_norigins];
      break;
    }
  }
  pthread_mutex_unlock(&cuda_origin_lock);
}

/* Room for one more origin (made before the capture begins). */
static mn_status cuda_capture_reserve(void) {
  pthread_mutex_lock(&cuda_origin_lock);
  mn_status st = MN_OK;
  if (cuda_norigins == cuda_origins_cap) {
    size_t cap = cuda_origins_cap ? 2 * cuda_origins_cap : 8;
    mn__cuda_origin *o = mn__realloc(cuda_origins, cap * sizeof *o);
    if (o) {
      cuda_origins = o;
      cuda_origins_cap = cap;
    } else {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a capture");
    }
  }
  pthread_mutex_unlock(&cuda_origin_lock);
  return st;
}

static void cuda_capture_remember(int index, void *stream) {
  pthread_mutex_lock(&cuda_origin_lock);
  if (cuda_norigins < cuda_origins_cap)
    cuda_origins[cuda_norigins++] = (mn__cuda_origin){.index = index, .stream = stream};
  pthread_mutex_unlock(&cuda_origin_lock);
}

/* ---- Virtual memory ------------------------------------------------------------ */

/* Checks VMM is usable on `index`, that [addr, addr + nbytes) is granularity-aligned
 * (addr may be NULL for a reservation) and makes `index` current with its context
 * through the caller's guard (left when the caller returns). Gives the
 * granularity and the CUdevice. */
static mn_status cuda_vmm_enter(mn__cuda_guard_t *guard, const char *func, int index, const void *addr,
                                    size_t nbytes, size_t *granularity, CUdevice *dev) {
  mn_status st = mn__cuda_guard_enter(guard, func, index, true);
  if (st != MN_OK) return st;
  char why[160];
  size_t g = cuda_vmm_granularity(index, dev, why, sizeof why);
  if (g == 0) {
    return mn__error(MN_ERR_NOT_SUPPORTED, func,
                     "cuda:%d has no virtual memory management: %s", index, why);
  }
  if (nbytes == 0 || nbytes % g != 0) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "nbytes=%zu on cuda:%d is not a positive multiple of the granularity %zu",
                     nbytes, index, g);
  }
  if ((uintptr_t)addr % g != 0) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "addr=%p on cuda:%d is not aligned to the granularity %zu", addr, index, g);
  }
  *granularity = g;
  return MN_OK;
}

static mn_status cuda_va_reserve(int index, size_t nbytes, void **base) {
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, NULL, nbytes, &g, &dev);
  if (st != MN_OK) return st;
  CUdeviceptr p = 0;
  CUresult res = cu()->mem_address_reserve(&p, nbytes, g, 0, 0);
  if (res != CUDA_SUCCESS) {
    return cu_fail(res, __func__, index, "cuMemAddressReserve(nbytes=%zu)", nbytes);
  }
  *base = (void *)(uintptr_t)p;
  return MN_OK;
}

static mn_status cuda_va_release(int index, void *base, size_t nbytes) {
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, base, nbytes, &g, &dev);
  if (st != MN_OK) return st;
  CUresult res = cu()->mem_address_free((CUdeviceptr)(uintptr_t)base, nbytes);
  if (res != CUDA_SUCCESS) {
    return cu_fail(res, __func__, index, "cuMemAddressFree(base=%p, nbytes=%zu)", base,
                       nbytes);
  }
  return MN_OK;
}

/* ---- Mapped memory ------------------------------------------------------------
 * As CUDA: memory mapped with cuMemMap is reachable by exactly the devices
 * cuMemSetAccess names, whatever cudaDeviceEnablePeerAccess said (that covers
 * cudaMalloc memory only). A map grants its own device; mem_set_access grants
 * a peer (the caching allocator grants its expandable segments to the peers
 * given to mn_caching_allocator_enable_peer_access, as PyTorch's). */

/* Read-write access to [va, va + nbytes) for device `dev` (a CUdevice). */
static CUresult cuda_grant_rw(CUdeviceptr va, size_t nbytes, CUdevice dev) {
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = (int)dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cu()->mem_set_access(va, nbytes, &access, 1);
}

/* The ranges mapped now, per device: sharing (mnemo/share.h) exports a
 * block page by page, each page one allocation with its own descriptor. */
typedef struct mn__cuda_vrange {
  uintptr_t addr;
  size_t nbytes;
} mn__cuda_vrange;

typedef struct mn__cuda_vmm_state {
  mn__cuda_vrange *maps;
  size_t nmaps, cap;
} mn__cuda_vmm_state;
static mn__cuda_vmm_state cuda_vmm[MN__CUDA_VMM_CACHE];
static pthread_mutex_t cuda_vmm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Records a new mapping; false when out of host memory. */
static bool cuda_remember_map(int index, void *addr, size_t nbytes) {
  pthread_mutex_lock(&cuda_vmm_lock);
  mn__cuda_vmm_state *v = &cuda_vmm[index];
  if (v->nmaps == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 64;
    mn__cuda_vrange *grown = mn__realloc(v->maps, cap * sizeof *grown);
    if (grown) {
      v->maps = grown;
      v->cap = cap;
    }
  }
  bool ok = v->nmaps < v->cap;
  if (ok) v->maps[v->nmaps++] = (mn__cuda_vrange){(uintptr_t)addr, nbytes};
  pthread_mutex_unlock(&cuda_vmm_lock);
  return ok;
}

/* Forgets the mappings inside [addr, addr + nbytes) (unmapped). */
static void cuda_forget_maps(int index, void *addr, size_t nbytes) {
  if (index >= MN__CUDA_VMM_CACHE) return; /* never mapped (mem_map refuses it) */
  uintptr_t lo = (uintptr_t)addr, hi = lo + nbytes;
  pthread_mutex_lock(&cuda_vmm_lock);
  mn__cuda_vmm_state *v = &cuda_vmm[index];
  for (size_t k = 0; k < v->nmaps;) {
    if (v->maps[k].addr >= lo && v->maps[k].addr < hi) v->maps[k] = v->maps[--v->nmaps];
    else k++;
  }
  pthread_mutex_unlock(&cuda_vmm_lock);
}

/* Backs [addr, addr + nbytes) with new device memory, readable and writable by
 * the device. The handle is released at once: the mapping keeps the memory
 * alive until cuMemUnmap. Every failure undoes what was done. */
static mn_status cuda_mem_map(int index, void *addr, size_t nbytes) {
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, addr, nbytes, &g, &dev);
  if (st != MN_OK) return st;
  if (index >= MN__CUDA_VMM_CACHE) {
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "cuda:%d: VMM on devices past %d is not supported", index,
                     MN__CUDA_VMM_CACHE - 1);
  }
  CUdeviceptr va = (CUdeviceptr)(uintptr_t)addr;

  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  CUmemGenericAllocationHandle handle = 0;
  /* Shareable through a POSIX descriptor (mnemo/share.h), where the driver
   * can; else a plain allocation (its blocks cannot be shared). */
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUresult res = cu()->mem_create(&handle, nbytes, &prop, 0);
  if (res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_INVALID_VALUE) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    res = cu()->mem_create(&handle, nbytes, &prop, 0);
  }
  if (res != CUDA_SUCCESS) {
    return cu_fail(res, __func__, index, "cuMemCreate(nbytes=%zu)", nbytes);
  }
  res = cu()->mem_map(va, nbytes, 0, handle, 0);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, __func__, index, "cuMemMap(addr=%p, nbytes=%zu)", addr, nbytes);
    (void)cu()->mem_release(handle);
    return st;
  }
  res = cuda_grant_rw(va, nbytes, dev);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, __func__, index, "cuMemSetAccess(addr=%p, nbytes=%zu, readwrite)", addr, nbytes);
    (void)cu()->mem_unmap(va, nbytes);
    (void)cu()->mem_release(handle);
    return st;
  }
  res = cu()->mem_release(handle);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, __func__, index, "cuMemRelease(nbytes=%zu) after mapping addr=%p",
                     nbytes, addr);
    (void)cu()->mem_unmap(va, nbytes);
    return st;
  }
  if (!cuda_remember_map(index, addr, nbytes)) {
    (void)cu()->mem_unmap(va, nbytes); /* frees it: the handle was released */
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory recording a mapping of cuda:%d", index);
  }
  return MN_OK;
}

/* Read-write access for device `peer` to the mapped [addr, addr + nbytes) of
 * `index` (one or more whole mappings). */
static mn_status cuda_mem_set_access(int index, void *addr, size_t nbytes, int peer) {
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, addr, nbytes, &g, &dev);
  if (st != MN_OK) return st;
  CUdevice pdev = 0;
  CUresult res = cu()->device_get(&pdev, peer);
  if (res != CUDA_SUCCESS) return cu_fail(res, __func__, index, "cuDeviceGet(%d)", peer);
  res = cuda_grant_rw((CUdeviceptr)(uintptr_t)addr, nbytes, pdev);
  if (res != CUDA_SUCCESS) {
    return cu_fail(res, __func__, index, "cuMemSetAccess(addr=%p, nbytes=%zu) for peer cuda:%d", addr, nbytes,
                       peer);
  }
  return MN_OK;
}

/* Unmaps (and so frees) the memory behind [addr, addr + nbytes). cuMemUnmap does
 * not wait for queued work that may still touch the range, so the device is
 * synchronized first, as cudaFree does, unless the caller has (`synced`). */
static mn_status cuda_mem_unmap(int index, void *addr, size_t nbytes, bool synced) {
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, addr, nbytes, &g, &dev);
  if (st != MN_OK) return st;
  if (cuda_capturing(index)) {
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "cuda:%d: unmapping is not allowed while a stream of the device captures "
                     "(CUDA's global capture mode)", index);
  }
  if (!synced) {
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      return cuda_fail(err, __func__, index, "cudaDeviceSynchronize() before unmapping addr=%p",
                           addr);
    }
  }
  CUresult res = cu()->mem_unmap((CUdeviceptr)(uintptr_t)addr, nbytes);
  if (res != CUDA_SUCCESS) {
    return cu_fail(res, __func__, index, "cuMemUnmap(addr=%p, nbytes=%zu)", addr, nbytes);
  }
  cuda_forget_maps(index, addr, nbytes);
  return MN_OK;
}

/* ---- Streams ----------------------------------------------------------------- */

static mn_status cuda_stream_create(int index, void **out) {
  MN__CUDA_USE(index);
  cudaStream_t s = NULL;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaStreamCreateWithFlags(cudaStreamNonBlocking)");
  }
  *out = (void *)s;
  return MN_OK;
}

static mn_status cuda_stream_destroy(int index, void *stream) {
  MN__CUDA_USE(index);
  if (stream == NULL) return MN_OK; /* the default stream is never destroyed */
  cuda_capture_forget(stream);
  cudaError_t err = cudaStreamDestroy((cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaStreamDestroy(stream=%p)", stream);
  }
  return MN_OK;
}

static mn_status cuda_stream_query(int index, void *stream, bool *done) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaStreamQuery((cudaStream_t)stream);
  if (err == cudaSuccess) {
    *done = true;
    return MN_OK;
  }
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError(); /* "not ready" is an answer, not a failure */
    *done = false;
    return MN_OK;
  }
  return cuda_fail(err, __func__, index, "cudaStreamQuery(stream=%p)", stream);
}

static mn_status cuda_stream_synchronize(int index, void *stream) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaStreamSynchronize(stream=%p)", stream);
  }
  return MN_OK;
}

static mn_status cuda_stream_wait_event(int index, void *stream, void *event) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaStreamWaitEvent(stream=%p, event=%p)", stream,
                         event);
  }
  return MN_OK;
}

static mn_status cuda_launch_host(int index, void *stream, mn_host_fn fn, void *arg) {
  MN__CUDA_USE(index);
  /* mn_host_fn and cudaHostFn_t are both void (*)(void *) (CUDART_CB is empty
   * off 32-bit Windows), so fn is handed to CUDA as is. */
  cudaHostFn_t host_fn = fn;
  cudaError_t err = cudaLaunchHostFunc((cudaStream_t)stream, host_fn, arg);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaLaunchHostFunc(stream=%p)", stream);
  }
  return MN_OK;
}

/* ---- Events ------------------------------------------------------------------ */

static mn_status cuda_event_create(int index, void **out) {
  MN__CUDA_USE(index);
  cudaEvent_t e = NULL;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaEventCreateWithFlags(cudaEventDisableTiming)");
  }
  *out = (void *)e;
  return MN_OK;
}

static mn_status cuda_event_destroy(int index, void *event) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaEventDestroy((cudaEvent_t)event);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaEventDestroy(event=%p)", event);
  }
  return MN_OK;
}

static mn_status cuda_event_record(int index, void *event, void *stream) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaEventRecord(event=%p, stream=%p)", event,
                         stream);
  }
  return MN_OK;
}

static mn_status cuda_event_query(int index, void *event, bool *done) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaSuccess) {
    *done = true;
    return MN_OK;
  }
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = false;
    return MN_OK;
  }
  return cuda_fail(err, __func__, index, "cudaEventQuery(event=%p)", event);
}

static mn_status cuda_event_synchronize(int index, void *event) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaEventSynchronize((cudaEvent_t)event);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaEventSynchronize(event=%p)", event);
  }
  return MN_OK;
}

/* ---- Copies and sets ------------------------------------------------------------ */

static const char *copy_kind_name(mn__copy_kind kind) {
  switch (kind) {
  case MN__COPY_H2H: return "h2h";
  case MN__COPY_H2D: return "h2d";
  case MN__COPY_D2H: return "d2h";
  case MN__COPY_D2D: return "d2d";
  }
  return "?";
}

/* cudaMemcpyDefault lets unified addressing tell host from device memory, which
 * also covers registered host memory whatever `kind` the caller inferred. */
static mn_status cuda_memcpy_async(int index, void *dst, const void *src, size_t nbytes,
                                       mn__copy_kind kind, void *stream) {
  if (nbytes == 0) return MN_OK;
  MN__CUDA_USE(index);
  cudaError_t err = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index,
                         "cudaMemcpyAsync(dst=%p, src=%p, nbytes=%zu, %s, stream=%p)", dst, src,
                         nbytes, copy_kind_name(kind), stream);
  }
  return MN_OK;
}

static mn_status cuda_memset_async(int index, void *dst, int value, size_t nbytes,
                                       void *stream) {
  if (nbytes == 0) return MN_OK;
  MN__CUDA_USE(index);
  cudaError_t err = cudaMemsetAsync(dst, value & 0xff, nbytes, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index,
                         "cudaMemsetAsync(dst=%p, value=%d, nbytes=%zu, stream=%p)", dst,
                         value & 0xff, nbytes, stream);
  }
  return MN_OK;
}

/* ---- Stream-ordered pools (cudaMallocAsync) ------------------------------------- */

static mn_status cuda_pools_supported(const char *func, int index) {
  int supported = 0;
  cudaError_t err = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, index);
  if (err != cudaSuccess) {
    return cuda_fail(err, func, index, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
  }
  if (!supported) {
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "cuda:%d has no stream-ordered memory pools", index);
  }
  return MN_OK;
}

/* The pool a slot works on: `pool` itself, or (NULL) the device's default
 * pool after checking the device has pools. Makes `index` current through the
 * caller's guard (left when the caller returns). */
static mn_status cuda_pool_of(mn__cuda_guard_t *guard, const char *func, int index, void *pool,
                                  cudaMemPool_t *out) {
  mn_status st = mn__cuda_guard_enter(guard, func, index, false);
  if (st != MN_OK) return st;
  if (pool) {
    *out = (cudaMemPool_t)pool;
    return MN_OK;
  }
  st = cuda_pools_supported(func, index);
  if (st != MN_OK) return st;
  cudaMemPool_t p = NULL;
  cudaError_t err = cudaDeviceGetDefaultMemPool(&p, index);
  if (err != cudaSuccess) {
    return cuda_fail(err, func, index, "cudaDeviceGetDefaultMemPool(device=%d)", index);
  }
  *out = p;
  return MN_OK;
}

/* A pool of device memory of `index` of mnemo's own: its settings (the
 * release threshold) never touch the device's default pool, which other
 * libraries of the process (PyTorch, CuPy) use too. */
static mn_status cuda_pool_create(int index, void **out) {
  MN__CUDA_USE(index);
  mn_status st = cuda_pools_supported(__func__, index);
  if (st != MN_OK) return st;
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = index;
  cudaMemPool_t pool = NULL;
  cudaError_t err = cudaMemPoolCreate(&pool, &props);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaMemPoolCreate(device=%d)", index);
  *out = (void *)pool;
  return MN_OK;
}

/* CUDA releases what is still allocated from the pool when it is freed. */
static mn_status cuda_pool_destroy(int index, void *pool) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaMemPoolDestroy((cudaMemPool_t)pool);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaMemPoolDestroy(pool=%p)", pool);
  return MN_OK;
}

static mn_status cuda_alloc_async(int index, void *pool, size_t nbytes, void *stream, void **out) {
  MN__CUDA_USE(index);
  void *p = NULL;
  cudaError_t err = pool ? cudaMallocFromPoolAsync(&p, nbytes, (cudaMemPool_t)pool, (cudaStream_t)stream)
                         : cudaMallocAsync(&p, nbytes, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "%s(nbytes=%zu, pool=%p, stream=%p)",
                         pool ? "cudaMallocFromPoolAsync" : "cudaMallocAsync", nbytes, pool, stream);
  }
  *out = p;
  return MN_OK;
}

/* cudaFreeAsync finds the pool from the pointer. */
static mn_status cuda_free_async(int index, void *pool, void *ptr, void *stream) {
  (void)pool;
  MN__CUDA_USE(index);
  cudaError_t err = cudaFreeAsync(ptr, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaFreeAsync(ptr=%p, stream=%p)", ptr, stream);
  }
  return MN_OK;
}

static mn_status cuda_pool_trim(int index, void *pool, size_t keep_bytes) {
  cudaMemPool_t mp = NULL;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_pool_of(&guard, __func__, index, pool, &mp);
  if (st != MN_OK) return st;
  cudaError_t err = cudaMemPoolTrimTo(mp, keep_bytes);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaMemPoolTrimTo(keep_bytes=%zu)", keep_bytes);
  }
  return MN_OK;
}

static mn_status cuda_pool_get(const char *func, int index, cudaMemPool_t pool,
                                   enum cudaMemPoolAttr attr, const char *name, size_t *out) {
  cuuint64_t v = 0;
  cudaError_t err = cudaMemPoolGetAttribute(pool, attr, &v);
  if (err != cudaSuccess) return cuda_fail(err, func, index, "cudaMemPoolGetAttribute(%s)", name);
  *out = (size_t)v;
  return MN_OK;
}

static mn_status cuda_pool_stats(int index, void *pool, size_t *reserved_current, size_t *reserved_high,
                                     size_t *used_current, size_t *used_high) {
  cudaMemPool_t mp = NULL;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_pool_of(&guard, __func__, index, pool, &mp);
  size_t v[4] = {0, 0, 0, 0};
  if (st == MN_OK) {
    st = cuda_pool_get(__func__, index, mp, cudaMemPoolAttrReservedMemCurrent,
                           "cudaMemPoolAttrReservedMemCurrent", &v[0]);
  }
  if (st == MN_OK) {
    st = cuda_pool_get(__func__, index, mp, cudaMemPoolAttrReservedMemHigh,
                           "cudaMemPoolAttrReservedMemHigh", &v[1]);
  }
  if (st == MN_OK) {
    st = cuda_pool_get(__func__, index, mp, cudaMemPoolAttrUsedMemCurrent,
                           "cudaMemPoolAttrUsedMemCurrent", &v[2]);
  }
  if (st == MN_OK) {
    st = cuda_pool_get(__func__, index, mp, cudaMemPoolAttrUsedMemHigh,
                           "cudaMemPoolAttrUsedMemHigh", &v[3]);
  }
  if (st != MN_OK) return st;
  *reserved_current = v[0];
  *reserved_high = v[1];
  *used_current = v[2];
  *used_high = v[3];
  return MN_OK;
}

static mn_status cuda_pool_set_release_threshold(int index, void *pool, size_t bytes) {
  cudaMemPool_t mp = NULL;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_pool_of(&guard, __func__, index, pool, &mp);
  if (st != MN_OK) return st;
  cuuint64_t v = (cuuint64_t)bytes;
  cudaError_t err = cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &v);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index,
                         "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold, %zu)", bytes);
  }
  return MN_OK;
}

/* The high marks can only be reset to 0, which CUDA takes as "the current value". */
static mn_status cuda_pool_reset_peak(int index, void *pool) {
  cudaMemPool_t mp = NULL;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_pool_of(&guard, __func__, index, pool, &mp);
  if (st != MN_OK) return st;
  cuuint64_t zero = 0;
  cudaError_t err = cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReservedMemHigh, &zero);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaMemPoolSetAttribute(cudaMemPoolAttrReservedMemHigh, 0)");
  }
  err = cudaMemPoolSetAttribute(mp, cudaMemPoolAttrUsedMemHigh, &zero);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaMemPoolSetAttribute(cudaMemPoolAttrUsedMemHigh, 0)");
  }
  return MN_OK;
}

/* ---- Pinned host memory and peer access ---------------------------- */

/* Portable: every CUDA context sees the memory as pinned, whichever device
 * `index` made it (with unified addressing it would be anyway). */
static mn_status cuda_host_alloc(int index, size_t nbytes, void **out) {
  MN__CUDA_USE(index);
  void *p = NULL;
  cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaHostAlloc(nbytes=%zu, portable)", nbytes);
  }
  *out = p;
  return MN_OK;
}

static mn_status cuda_host_free(int index, void *ptr) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaFreeHost(ptr=%p)", ptr);
  return MN_OK;
}

static mn_status cuda_host_register(int index, void *ptr, size_t nbytes) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaHostRegister(ptr, nbytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaHostRegister(ptr=%p, nbytes=%zu, portable)", ptr,
                         nbytes);
  }
  return MN_OK;
}

static mn_status cuda_host_unregister(int index, void *ptr) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaHostUnregister(ptr);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaHostUnregister(ptr=%p)", ptr);
  return MN_OK;
}

/* Pageable memory answers cudaMemoryTypeUnregistered (CUDA >= 11); older
 * runtimes fail with cudaErrorInvalidValue, which also means "not pinned". */
static mn_status cuda_host_is_pinned(int index, const void *ptr, bool *pinned) {
  MN__CUDA_USE(index);
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();
    *pinned = false;
    return MN_OK;
  }
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaPointerGetAttributes(ptr=%p)", ptr);
  *pinned = attr.type == cudaMemoryTypeHost;
  return MN_OK;
}

static mn_status cuda_can_access_peer(int index, int peer, bool *can) {
  int c = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&c, index, peer);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaDeviceCanAccessPeer(device=%d, peer=%d)", index, peer);
  }
  *can = c != 0;
  return MN_OK;
}

/* Raw (cudaMalloc) memory only: mapped pages need mem_set_access, as in CUDA. */
static mn_status cuda_enable_peer_access(int index, int peer) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
  } else if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaDeviceEnablePeerAccess(peer=%d)", peer);
  }
  return MN_OK;
}

static mn_status cuda_memcpy_peer_async(int index, void *dst, int dst_index, const void *src,
                                            int src_index, size_t nbytes, void *stream) {
  MN__CUDA_USE(index);
  cudaError_t err = cudaMemcpyPeerAsync(dst, dst_index, src, src_index, nbytes, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index,
                         "cudaMemcpyPeerAsync(dst=%p on cuda:%d, src=%p on cuda:%d, nbytes=%zu, "
                         "stream=%p)",
                         dst, dst_index, src, src_index, nbytes, stream);
  }
  return MN_OK;
}


/* ---- CUDA IPC -------------------------------------------------------
 * A block inside a larger cudaMalloc allocation (a caching-allocator segment) is
 * exported as the allocation's handle plus the block's offset: the driver's
 * cuMemGetAddressRange finds the base. VMM memory (expandable segments) has no
 * cudaIpc handle; cudaIpcGetMemHandle refuses it and we report NOT_SUPPORTED. */

static mn_status cuda_ipc_export(int index, const void *ptr, void *handle, size_t *offset) {
  /* A driver call comes first: force the primary context current, as the VMM
   * paths do (on a fresh thread cudaGetDevice already says 0 with no context
   * current, and a non-forcing guard would then set nothing). */
  MN__CUDA_USE_CTX(index);
  if (!cu()->mem_get_address_range)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "driver entry point cuMemGetAddressRange not found");
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult res = cu()->mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
  if (res != CUDA_SUCCESS) return cu_fail(res, __func__, index, "cuMemGetAddressRange(ptr=%p)", ptr);
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return mn__error(err == cudaErrorInvalidValue || err == cudaErrorNotSupported ? MN_ERR_NOT_SUPPORTED
                                                                                  : MN_ERR_DEVICE,
                     __func__,
                     "cudaIpcGetMemHandle(base=%p) on cuda:%d failed: %s (expandable/VMM segments cannot be "
                     "exported this way)",
                     (void *)(uintptr_t)base, index, cudaGetErrorName(err));
  }
  _Static_assert(sizeof h <= 64, "cudaIpcMemHandle_t fits MN_IPC_HANDLE_BYTES");
  memcpy(handle, &h, sizeof h);
  *offset = (size_t)((uintptr_t)ptr - (uintptr_t)base);
  return MN_OK;
}

/* Forced like ipc_export: the handle is opened in `index`'s primary context
 * (not whatever context the caller has current), the context the driver call
 * after it asks and ipc_close closes it in. */
static mn_status cuda_ipc_open(int index, const void *handle, void **base, size_t *size) {
  MN__CUDA_USE_CTX(index);
  if (!cu()->mem_get_address_range)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "driver entry point cuMemGetAddressRange not found");
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  void *p = NULL;
  cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaIpcOpenMemHandle");
  /* The opened allocation's size: the importer checks the handle's range against it. */
  CUdeviceptr b = 0;
  size_t n = 0;
  CUresult res = cu()->mem_get_address_range(&b, &n, (CUdeviceptr)(uintptr_t)p);
  if (res != CUDA_SUCCESS) {
    (void)cudaIpcCloseMemHandle(p);
    return cu_fail(res, __func__, index, "cuMemGetAddressRange(ptr=%p)", p);
  }
  *base = p;
  *size = n - (size_t)((uintptr_t)p - (uintptr_t)b);
  return MN_OK;
}

static mn_status cuda_ipc_close(int index, void *base) {
  MN__CUDA_USE_CTX(index); /* the primary context ipc_open opened it in */
  cudaError_t err = cudaIpcCloseMemHandle(base);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaIpcCloseMemHandle(%p)", base);
  return MN_OK;
}


/* ---- Stream capture and graphs ------------------------------------------------ */

typedef struct mn__cuda_graph {
  cudaGraph_t graph; /* kept for its node count */
  cudaGraphExec_t exec;
} mn__cuda_graph;

static mn_status cuda_capture_begin(int index, void *stream) {
  MN__CUDA_USE(index);
  mn_status st = cuda_capture_reserve();
  if (st != MN_OK) return st;
  cudaError_t err = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal);
  if (err != cudaSuccess) {
    return cuda_fail(err, __func__, index, "cudaStreamBeginCapture(stream=%p, global)", stream);
  }
  cuda_capture_remember(index, stream);
  return MN_OK;
}

/* The graph's operations: every node but the empty ones (capture markers). */
static mn_status cuda_graph_ops(int index, cudaGraph_t graph, size_t *ops) {
  size_t n = 0;
  cudaError_t err = cudaGraphGetNodes(graph, NULL, &n);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphGetNodes(count)");
  cudaGraphNode_t *nodes = n ? mn__malloc(n * sizeof *nodes) : NULL;
  if (n && !nodes) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu graph nodes", n);
  err = n ? cudaGraphGetNodes(graph, nodes, &n) : cudaSuccess;
  size_t count = 0;
  for (size_t i = 0; i < n && err == cudaSuccess; i++) {
    enum cudaGraphNodeType type;
    err = cudaGraphNodeGetType(nodes[i], &type);
    count += err == cudaSuccess && type != cudaGraphNodeTypeEmpty;
  }
  free(nodes);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphGetNodes/cudaGraphNodeGetType");
  *ops = count;
  return MN_OK;
}

static mn_status cuda_capture_end(int index, void *stream, void **graph, size_t *nodes) {
  MN__CUDA_USE(index);
  mn__cuda_graph *h = mn__calloc(1, sizeof *h);
  if (!h) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a graph");
  cudaGraph_t g = NULL;
  cudaError_t err = cudaStreamEndCapture((cudaStream_t)stream, &g);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone)
    cuda_capture_forget(stream);
  if (err != cudaSuccess) {
    free(h);
    if (g) (void)cudaGraphDestroy(g);
    return cuda_fail(err, __func__, index, "cudaStreamEndCapture(stream=%p)", stream);
  }
  mn_status st = cuda_graph_ops(index, g, nodes);
  if (st == MN_OK) {
    err = cudaGraphInstantiate(&h->exec, g, 0);
    if (err != cudaSuccess) st = cuda_fail(err, __func__, index, "cudaGraphInstantiate");
  }
  if (st != MN_OK) {
    (void)cudaGraphDestroy(g);
    free(h);
    return st;
  }
  h->graph = g;
  *graph = h;
  return MN_OK;
}

/* The stream's capture status, id and (optional) graph and frontier. */
static mn_status cuda_capture_info(const char *func, int index, void *stream, enum cudaStreamCaptureStatus *cs,
                                       unsigned long long *id, cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                       size_t *ndeps) {
  cudaError_t err = cudaStreamGetCaptureInfo((cudaStream_t)stream, cs, id, graph, deps, NULL, ndeps);
  if (err != cudaSuccess) return cuda_fail(err, func, index, "cudaStreamGetCaptureInfo(stream=%p)", stream);
  return MN_OK;
}

static mn_status cuda_capture_status(int index, void *stream, mn_capture_status *status, uint64_t *id) {
  MN__CUDA_USE(index);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long cid = 0;
  mn_status st = cuda_capture_info(__func__, index, stream, &cs, &cid, NULL, NULL, NULL);
  if (st != MN_OK) return st;
  *status = cs == cudaStreamCaptureStatusActive        ? MN_CAPTURE_ACTIVE
            : cs == cudaStreamCaptureStatusInvalidated ? MN_CAPTURE_INVALIDATED
                                                       : MN_CAPTURE_NONE;
  *id = cs == cudaStreamCaptureStatusNone ? 0 : (uint64_t)cid;
  return MN_OK;
}

/* Asked on every allocation while captures are under way: one driver query
 * (and the guard's cudaGetDevice), no synchronization. */
static mn_status cuda_capture_id(int index, void *stream, uint64_t *id) {
  MN__CUDA_USE(index);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long cid = 0;
  mn_status st = cuda_capture_info(__func__, index, stream, &cs, &cid, NULL, NULL, NULL);
  if (st != MN_OK) return st;
  *id = cs == cudaStreamCaptureStatusNone ? 0 : (uint64_t)cid;
  return MN_OK;
}

/* The capture's graph and the stream's frontier; not capturing:
 * INVALID_ARGUMENT, an invalidated capture: INVALID_STATE. */
static mn_status cuda_capturing_info(const char *func, int index, void *stream, cudaGraph_t *graph,
                                         const cudaGraphNode_t **deps, size_t *ndeps) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  mn_status st = cuda_capture_info(func, index, stream, &cs, NULL, graph, deps, ndeps);
  if (st != MN_OK) return st;
  if (cs == cudaStreamCaptureStatusNone)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "cuda:%d: the stream is not capturing", index);
  if (cs != cudaStreamCaptureStatusActive)
    return mn__error(MN_ERR_INVALID_STATE, func, "cuda:%d: the stream's capture was invalidated", index);
  return MN_OK;
}

static mn_status cuda_capture_marker(int index, void *stream, uint64_t *marker) {
  MN__CUDA_USE(index);
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *deps = NULL;
  size_t ndeps = 0;
  mn_status st = cuda_capturing_info(__func__, index, stream, &graph, &deps, &ndeps);
  if (st != MN_OK) return st;
  cudaGraphNode_t node = NULL;
  cudaError_t err = cudaGraphAddEmptyNode(&node, graph, deps, ndeps);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphAddEmptyNode(%zu deps)", ndeps);
  err = cudaStreamUpdateCaptureDependencies((cudaStream_t)stream, &node, NULL, 1, cudaStreamSetCaptureDependencies);
  if (err != cudaSuccess) {
    mn_status fail = cuda_fail(err, __func__, index, "cudaStreamUpdateCaptureDependencies(set)");
    (void)cudaGraphDestroyNode(node);
    return fail;
  }
  *marker = (uint64_t)(uintptr_t)node;
  return MN_OK;
}

static int node_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const cudaGraphNode_t *)a, y = (uintptr_t) * (const cudaGraphNode_t *)b;
  return x < y ? -1 : x > y;
}

/* Index of node in the sorted array, or -1. */
static long node_find(const cudaGraphNode_t *sorted, size_t n, cudaGraphNode_t node) {
  const cudaGraphNode_t *hit = bsearch(&node, sorted, n, sizeof *sorted, node_cmp);
  return hit ? (long)(hit - sorted) : -1;
}

/* Pushes the nodes of `list` not seen yet; whether target is among them. */
static bool node_push(const cudaGraphNode_t *list, size_t count, const cudaGraphNode_t *sorted, size_t n,
                          bool *seen, cudaGraphNode_t *stack, size_t *top, cudaGraphNode_t target) {
  for (size_t i = 0; i < count; i++) {
    if (list[i] == target) return true;
    long k = node_find(sorted, n, list[i]);
    if (k >= 0 && !seen[k]) {
      seen[k] = true;
      stack[(*top)++] = list[i]; /* each node once: *top <= n */
    }
  }
  return false;
}

/* Walks the dependencies back from the stream's frontier (each node once). */
static mn_status cuda_capture_reaches(int index, void *stream, uint64_t marker, bool *reached) {
  MN__CUDA_USE(index);
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *front = NULL;
  size_t nfront = 0, n = 0;
  mn_status st = cuda_capturing_info(__func__, index, stream, &graph, &front, &nfront);
  if (st != MN_OK) return st;
  cudaGraphNode_t target = (cudaGraphNode_t)(uintptr_t)marker;
  cudaError_t err = cudaGraphGetNodes(graph, NULL, &n);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphGetNodes(count)");
  cudaGraphNode_t *nodes = mn__malloc((n + 1) * sizeof *nodes);
  cudaGraphNode_t *stack = mn__malloc((n + 1) * sizeof *stack);
  bool *seen = mn__calloc(n + 1, sizeof *seen);
  size_t dcap = 16, top = 0;
  cudaGraphNode_t *deps = mn__malloc(dcap * sizeof *deps);
  bool found = false;
  if (!nodes || !stack || !seen || !deps) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory walking %zu graph nodes", n);
    goto out;
  }
  err = cudaGraphGetNodes(graph, nodes, &n);
  if (err != cudaSuccess) {
    st = cuda_fail(err, __func__, index, "cudaGraphGetNodes");
    goto out;
  }
  qsort(nodes, n, sizeof *nodes, node_cmp);
  if (marker == 0 || node_find(nodes, n, target) < 0) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "cuda:%d: %#llx is not a node of the stream's capture", index,
                   (unsigned long long)marker);
    goto out;
  }
  found = node_push(front, nfront, nodes, n, seen, stack, &top, target);
  while (top && !found) {
    cudaGraphNode_t v = stack[--top];
    size_t nd = 0;
    err = cudaGraphNodeGetDependencies(v, NULL, NULL, &nd);
    if (err == cudaSuccess && nd > dcap) {
      cudaGraphNode_t *grown = mn__realloc(deps, nd * sizeof *deps);
      if (!grown) {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu node dependencies", nd);
        goto out;
      }
      deps = grown;
      dcap = nd;
    }
    if (err == cudaSuccess && nd) err = cudaGraphNodeGetDependencies(v, deps, NULL, &nd);
    if (err != cudaSuccess) {
      st = cuda_fail(err, __func__, index, "cudaGraphNodeGetDependencies");
      goto out;
    }
    found = node_push(deps, nd, nodes, n, seen, stack, &top, target);
  }
  *reached = found;
out:
  free(nodes);
  free(stack);
  free(seen);
  free(deps);
  return st;
}

static mn_status cuda_graph_launch(int index, void *graph, void *stream) {
  MN__CUDA_USE(index);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaStreamIsCapturing(stream=%p)", stream);
  if (cs != cudaStreamCaptureStatusNone) {
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "cuda:%d: the stream captures: launch the graph on another stream", index);
  }
  err = cudaGraphLaunch(((mn__cuda_graph *)graph)->exec, (cudaStream_t)stream);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphLaunch(stream=%p)", stream);
  return MN_OK;
}

/* Launches already queued still complete (CUDA defers the release). */
static mn_status cuda_graph_destroy(int index, void *graph) {
  MN__CUDA_USE(index);
  mn__cuda_graph *h = graph;
  cudaError_t err = cudaGraphExecDestroy(h->exec);
  cudaError_t err2 = cudaGraphDestroy(h->graph);
  free(h);
  if (err != cudaSuccess) return cuda_fail(err, __func__, index, "cudaGraphExecDestroy");
  if (err2 != cudaSuccess) return cuda_fail(err2, __func__, index, "cudaGraphDestroy");
  return MN_OK;
}

/* ---- Sharing expandable (VMM) memory with another process ------------------------------
 * Export: every page mapped by mem_map that the block covers (each its own
 * cuMemCreate allocation, made shareable through a POSIX descriptor) as one
 * piece. Import: a new reservation, each piece imported and mapped after the
 * previous, access for this device. Plain cudaMalloc memory goes through
 * ipc_export/ipc_open instead. */
typedef struct mn__cuda_import {
  struct mn__cuda_import *next;
  int index;
  uintptr_t va;
  size_t nbytes;
} mn__cuda_import;
static mn__cuda_import *cuda_imports; /* guarded by cuda_vmm_lock */

static bool cuda_share_loaded(void) {
  return cu_loaded() && cu()->mem_retain && cu()->mem_export && cu()->mem_import;
}

static mn_status cuda_share_export(int index, void *ptr, size_t nbytes, mn__share_mem_t *out) {
  if (!cuda_share_loaded() || index >= MN__CUDA_VMM_CACHE)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "cuda:%d: the driver cannot export VMM memory", index);
  MN__CUDA_GUARD(guard);
  mn_status st = mn__cuda_guard_enter(&guard, __func__, index, true);
  if (st != MN_OK) return st;
  mn__share_mem_t m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < MN__SHARE_MAX_PIECES; i++) m.fds[i] = -1;
  uintptr_t p = (uintptr_t)ptr, end = p + nbytes, first = 0;
  pthread_mutex_lock(&cuda_vmm_lock);
  mn__cuda_vmm_state *v = &cuda_vmm[index];
  while (st == MN_OK && p < end) {
    const mn__cuda_vrange *r = NULL;
    for (size_t k = 0; k < v->nmaps && !r; k++)
      if (p >= v->maps[k].addr && p - v->maps[k].addr < v->maps[k].nbytes) r = &v->maps[k];
    if (!r) {
      st = mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "cuda:%d: %p is not memory mapped by mnemo's VMM (plain segments use CUDA IPC)", index,
                     (void *)p);
      break;
    }
    if (m.npieces == MN__SHARE_MAX_PIECES) {
      st = mn__error(MN_ERR_NOT_SUPPORTED, __func__, "cuda:%d: a block over more than %d pages cannot be shared",
                     index, MN__SHARE_MAX_PIECES);
      break;
    }
    if (m.npieces == 0) first = r->addr;
    CUmemGenericAllocationHandle h = 0;
    int fd = -1;
    CUresult res = cu()->mem_retain(&h, (void *)r->addr);
    if (res == CUDA_SUCCESS) {
      res = cu()->mem_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      (void)cu()->mem_release(h); /* the retain's reference */
    }
    if (res != CUDA_SUCCESS) {
      st = cu_fail(res, __func__, index, "cuMemExportToShareableHandle(page %p)", (void *)r->addr);
      break;
    }
    m.fds[m.npieces] = fd;
    m.piece_offset[m.npieces] = 0;
    m.piece_length[m.npieces] = r->nbytes;
    m.npieces++;
    p = r->addr + r->nbytes;
  }
  pthread_mutex_unlock(&cuda_vmm_lock);
  if (st != MN_OK) {
    for (unsigned i = 0; i < m.npieces; i++) close(m.fds[i]);
    return st;
  }
  m.offset = (uintptr_t)ptr - first;
  *out = m;
  return MN_OK;
}

static mn_status cuda_share_import(int index, const mn__share_mem_t *in, void **base, size_t *size) {
  if (!cuda_share_loaded() || index >= MN__CUDA_VMM_CACHE)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "cuda:%d: the driver cannot import VMM memory", index);
  size_t total = 0;
  for (unsigned i = 0; i < in->npieces && i < MN__SHARE_MAX_PIECES; i++) {
    if (in->piece_offset[i] != 0 || in->piece_length[i] == 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "cuda:%d: piece %u is not a whole allocation", index, i);
    total += (size_t)in->piece_length[i];
  }
  size_t g = 0;
  CUdevice dev = 0;
  MN__CUDA_GUARD(guard);
  mn_status st = cuda_vmm_enter(&guard, __func__, index, NULL, total, &g, &dev);
  if (st != MN_OK) {
    char why[256]; /* mn__error writes where mn_last_error points: copy it first */
    snprintf(why, sizeof why, "%s", mn_last_error());
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "cuda:%d: the pieces: %s", index, why);
  }
  mn__cuda_import *rec = mn__calloc(1, sizeof *rec);
  if (!rec) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  CUdeviceptr va = 0;
  CUresult res = cu()->mem_address_reserve(&va, total, g, 0, 0);
  if (res != CUDA_SUCCESS) {
    free(rec);
    return cu_fail(res, __func__, index, "cuMemAddressReserve(nbytes=%zu)", total);
  }
  size_t pos = 0;
  for (unsigned i = 0; i < in->npieces && st == MN_OK; i++) {
    CUmemGenericAllocationHandle h = 0;
    res = cu()->mem_import(&h, (void *)(uintptr_t)in->fds[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (res != CUDA_SUCCESS) {
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "cuda:%d: descriptor %d is not CUDA memory (CUresult %d)",
                     index, in->fds[i], (int)res);
      break;
    }
    res = cu()->mem_map(va + pos, (size_t)in->piece_length[i], 0, h, 0);
    (void)cu()->mem_release(h); /* the mapping keeps it */
    if (res != CUDA_SUCCESS) {
      st = cu_fail(res, __func__, index, "cuMemMap(piece %u, nbytes=%zu)", i, (size_t)in->piece_length[i]);
      break;
    }
    pos += (size_t)in->piece_length[i];
  }
  if (st == MN_OK) {
    res = cuda_grant_rw(va, total, dev);
    if (res != CUDA_SUCCESS) st = cu_fail(res, __func__, index, "cuMemSetAccess(nbytes=%zu)", total);
  }
  if (st != MN_OK) {
    if (pos) (void)cu()->mem_unmap(va, pos);
    (void)cu()->mem_address_free(va, total);
    free(rec);
    return st;
  }
  *rec = (mn__cuda_import){.index = index, .va = (uintptr_t)va, .nbytes = total};
  pthread_mutex_lock(&cuda_vmm_lock);
  rec->next = cuda_imports;
  cuda_imports = rec;
  pthread_mutex_unlock(&cuda_vmm_lock);
  *base = (void *)(uintptr_t)va;
  *size = total;
  return MN_OK;
}

static mn_status cuda_share_close(int index, void *base) {
  pthread_mutex_lock(&cuda_vmm_lock);
  mn__cuda_import *rec = NULL;
  for (mn__cuda_import **pp = &cuda_imports; *pp; pp = &(*pp)->next)
    if ((*pp)->index == index && (*pp)->va == (uintptr_t)base) {
      rec = *pp;
      *pp = rec->next;
      break;
    }
  pthread_mutex_unlock(&cuda_vmm_lock);
  if (!rec) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "cuda:%d: %p is not an imported mapping", index, base);
  MN__CUDA_GUARD(guard);
  mn_status st = mn__cuda_guard_enter(&guard, __func__, index, true);
  if (st == MN_OK) {
    cudaError_t err = cudaDeviceSynchronize(); /* queued work may still touch it */
    CUresult res = cu()->mem_unmap((CUdeviceptr)rec->va, rec->nbytes);
    if (res == CUDA_SUCCESS) res = cu()->mem_address_free((CUdeviceptr)rec->va, rec->nbytes);
    if (err != cudaSuccess) st = cuda_fail(err, __func__, index, "cudaDeviceSynchronize()");
    else if (res != CUDA_SUCCESS) st = cu_fail(res, __func__, index, "cuMemUnmap(%p)", base);
  }
  free(rec);
  return st;
}

const mn__backend_t mn__cuda_backend = {
    .name = "cuda",
    .type = MN_DEVICE_CUDA,
    .device_count = cuda_device_count,
    .get_properties = cuda_get_properties,
    .mem_info = cuda_mem_info,
    .synchronize = cuda_synchronize,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .va_reserve = cuda_va_reserve,
    .va_release = cuda_va_release,
    .mem_map = cuda_mem_map,
    .mem_unmap = cuda_mem_unmap,
    .mem_set_access = cuda_mem_set_access,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_query = cuda_stream_query,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .launch_host = cuda_launch_host,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .alloc_async = cuda_alloc_async,
    .free_async = cuda_free_async,
    .pool_trim = cuda_pool_trim,
    .pool_stats = cuda_pool_stats,
    .pool_set_release_threshold = cuda_pool_set_release_threshold,
    .pool_reset_peak = cuda_pool_reset_peak,
    /* pinned host memory and peer access */
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .host_is_pinned = cuda_host_is_pinned,
    .can_access_peer = cuda_can_access_peer,
    .enable_peer_access = cuda_enable_peer_access,
    .memcpy_peer_async = cuda_memcpy_peer_async,
    /* CUDA IPC */
    .ipc_export = cuda_ipc_export,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    /* stream capture and graphs */
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .capture_status = cuda_capture_status,
    .capture_id = cuda_capture_id,
    .capture_marker = cuda_capture_marker,
    .capture_reaches = cuda_capture_reaches,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .share_export = cuda_share_export,
    .share_import = cuda_share_import,
    .share_close = cuda_share_close,
};

#endif /* MNEMO_HAVE_CUDA */
