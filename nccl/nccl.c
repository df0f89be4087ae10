/* nccl/nccl.c: the NCCL module (mnemo/nccl.h): a pool source making
 * NCCL-qualified memory with the CUDA driver's VMM calls (ncclMemAlloc's
 * recipe), and the registration of a pool's segments with a communicator,
 * kept in step by a segment callback. Threading: the source's calls are
 * independent; all registration state is guarded by one mutex, never held
 * while the allocator is told to add or remove a callback (the allocator may
 * wait for callbacks in flight, which take the mutex). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "nccl/nccl_internal.h"
#include "runtime/cuda_device.h"
#include "runtime/cuda_driver.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

/* ---- NCCL calls, replaceable by tests ---------------------------------------- */

static mn__nccl_ops_t g_ops = {ncclCommRegister, ncclCommDeregister, ncclGetErrorString};

void mn__nccl_set_ops(const mn__nccl_ops_t *ops) {
  static const mn__nccl_ops_t nccl = {ncclCommRegister, ncclCommDeregister, ncclGetErrorString};
  g_ops = ops ? *ops : nccl;
}

/* ---- the source: ncclMemAlloc's recipe ---------------------------------------- */

/* The driver's entry points: runtime's one table (runtime/cuda_driver.h). */
static const mn__cuda_driver_t *drv(void) { return mn__cuda_driver(); }

static mn_status cu_fail(CUresult res, const char *func, mn_device_t dev, const char *what) {
  char name[32];
  return mn__error(res == CUDA_ERROR_OUT_OF_MEMORY ? MN_ERR_OUT_OF_MEMORY : MN_ERR_DEVICE, func,
                   "%s on %s failed: CUresult %d", what, mn_device_format(dev, name, sizeof name), (int)res);
}

/* Enters dev (its primary context current) with the driver calls loaded. */
static mn_status source_enter(const char *func, mn_device_t dev, mn__cuda_guard_t *guard) {
  char name[32];
  if (dev.type != MN_DEVICE_CUDA)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "NCCL memory lives on CUDA devices, not %s",
                     mn_device_format(dev, name, sizeof name));
  if (!drv()->vmm || !drv()->mem_get_address_range)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "the CUDA driver's VMM entry points were not found");
  return mn__cuda_guard_enter(guard, func, dev.index, true);
}

static mn_status nccl_mem_alloc(void *user, mn_device_t dev, size_t nbytes, void **out) {
  (void)user;
  const char *func = "mn_nccl_source.alloc";
  mn__cuda_guard_t guard = {.restore = -1};
  mn_status st = source_enter(func, dev, &guard);
  if (st != MN_OK) return st;
  CUdevice cu = 0;
  CUresult res = drv()->device_get(&cu, dev.index);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuDeviceGet");
    goto out;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)cu;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  int flag = 0;
  if (drv()->device_get_attribute(&flag, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, cu) ==
          CUDA_SUCCESS &&
      flag)
    prop.allocFlags.gpuDirectRDMACapable = 1;
  int fabric = 0;
  if (drv()->device_get_attribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, cu) != CUDA_SUCCESS)
    fabric = 0;
  size_t gran = 0;
  res = drv()->mem_get_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (res != CUDA_SUCCESS || gran == 0) {
    st = cu_fail(res, func, dev, "cuMemGetAllocationGranularity(RECOMMENDED)");
    goto out;
  }
  if (nbytes == 0 || nbytes > SIZE_MAX - gran) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "nbytes=%zu cannot be allocated", nbytes);
    goto out;
  }
  size_t size = (nbytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle handle = 0;
  res = CUDA_ERROR_NOT_SUPPORTED;
  if (fabric) {
    prop.requestedHandleTypes = (CUmemAllocationHandleType)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                                                            CU_MEM_HANDLE_TYPE_FABRIC);
    res = drv()->mem_create(&handle, size, &prop, 0);
    /* as NCCL: without the fabric (IMEX) service, POSIX descriptors only */
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  }
  if (res != CUDA_SUCCESS) res = drv()->mem_create(&handle, size, &prop, 0);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuMemCreate(POSIX file descriptor)");
    goto out;
  }
  CUdeviceptr va = 0;
  res = drv()->mem_address_reserve(&va, size, gran, 0, 0);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuMemAddressReserve");
    (void)drv()->mem_release(handle);
    goto out;
  }
  res = drv()->mem_map(va, size, 0, handle, 0);
  if (res != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuMemMap");
    (void)drv()->mem_address_free(va, size);
    (void)drv()->mem_release(handle);
    goto out;
  }
  /* the mapping keeps the memory; the handle is not needed any more */
  (void)drv()->mem_release(handle);
  /* read-write for the device and every device that can access it as a peer */
  int count = 0;
  if (mn_device_count(MN_DEVICE_CUDA, &count) != MN_OK) count = dev.index + 1;
  for (int i = 0; i < count && st == MN_OK; i++) {
    bool can = i == dev.index;
    if (!can && mn_device_can_access_peer(mn_device_cuda(i), dev, &can) != MN_OK) can = false;
    if (!can) continue;
    CUdevice peer = 0;
    res = drv()->device_get(&peer, i);
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = (int)peer;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (res == CUDA_SUCCESS) res = drv()->mem_set_access(va, size, &access, 1);
    if (res != CUDA_SUCCESS) st = cu_fail(res, func, dev, "cuMemSetAccess");
  }
  if (st != MN_OK) {
    (void)drv()->mem_unmap(va, size);
    (void)drv()->mem_address_free(va, size);
    goto out;
  }
  *out = (void *)(uintptr_t)va;
out:
  mn__cuda_guard_leave(&guard);
  return st;
}

static mn_status nccl_mem_free(void *user, mn_device_t dev, void *ptr, size_t nbytes) {
  (void)user, (void)nbytes; /* the range's own size: nbytes was rounded up at alloc */
  const char *func = "mn_nccl_source.free";
  mn__cuda_guard_t guard = {.restore = -1};
  mn_status st = source_enter(func, dev, &guard);
  if (st != MN_OK) return st;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult res = drv()->mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
  if (res != CUDA_SUCCESS || base != (CUdeviceptr)(uintptr_t)ptr) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "%p is not memory of this source (CUresult %d)", ptr, (int)res);
  } else if ((res = drv()->mem_unmap(base, size)) != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuMemUnmap");
  } else if ((res = drv()->mem_address_free(base, size)) != CUDA_SUCCESS) {
    st = cu_fail(res, func, dev, "cuMemAddressFree");
  }
  mn__cuda_guard_leave(&guard);
  return st;
}

mn_status mn_nccl_source(mn_mempool_source_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  *out = (mn_mempool_source_t){.alloc = nccl_mem_alloc, .free = nccl_mem_free, .user = NULL};
  return MN_OK;
}

/* ---- registration of a pool's segments -------------------------------------------- */

typedef struct reg_entry {
  uintptr_t addr;
  size_t size;
  void *handle;
} reg_entry;

typedef struct registration {
  ncclComm_t comm;
  const mn_mempool_t *pool;
  mn_allocator_t *alloc;
  uint64_t pool_id;
  uint64_t id; /* the callback's user value: never reused, so a late call finds nothing */
  reg_entry *entries;
  size_t n, cap;
  size_t failures; /* failed (de)registrations in callbacks */
  struct registration *next;
} registration;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static registration *g_regs;
static uint64_t g_next_id = 1;

/* pre: g_lock held. */
static registration *find_pair(ncclComm_t comm, const mn_mempool_t *pool, registration ***link) {
  for (registration **l = &g_regs; *l; l = &(*l)->next)
    if ((*l)->comm == comm && (*l)->pool == pool) {
      if (link) *link = l;
      return *l;
    }
  return NULL;
}

static registration *find_id(uint64_t id) {
  for (registration *r = g_regs; r; r = r->next)
    if (r->id == id) return r;
  return NULL;
}

/* Registers [addr, addr + size) unless an entry starts there. pre: g_lock held. */
static mn_status reg_add(registration *r, const char *func, uintptr_t addr, size_t size) {
  for (size_t i = 0; i < r->n; i++)
    if (r->entries[i].addr == addr) return MN_OK;
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 16;
    reg_entry *grown = mn__realloc(r->entries, cap * sizeof *grown);
    if (!grown) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for a registration");
    r->entries = grown;
    r->cap = cap;
  }
  void *handle = NULL;
  ncclResult_t res = g_ops.comm_register(r->comm, (void *)addr, size, &handle);
  if (res != ncclSuccess)
    return mn__error(MN_ERR_DEVICE, func, "ncclCommRegister(%#lx, %zu bytes) failed: %s", (unsigned long)addr, size,
                     g_ops.error_string ? g_ops.error_string(res) : "?");
  r->entries[r->n++] = (reg_entry){addr, size, handle};
  return MN_OK;
}

/* Deregisters entry i (removed, order not kept). pre: g_lock held. */
static mn_status reg_drop(registration *r, const char *func, size_t i) {
  reg_entry e = r->entries[i];
  r->entries[i] = r->entries[--r->n];
  ncclResult_t res = g_ops.comm_deregister(r->comm, e.handle);
  if (res != ncclSuccess)
    return mn__error(MN_ERR_DEVICE, func, "ncclCommDeregister(%#lx, %zu bytes) failed: %s", (unsigned long)e.addr,
                     e.size, g_ops.error_string ? g_ops.error_string(res) : "?");
  return MN_OK;
}

/* The allocator's segment callback: the pool's new segments and maps are
 * registered, segments about to go (or pages about to be unmapped) are
 * deregistered: every entry inside the range. */
static void on_segment(void *user, const mn_segment_info_t *info) {
  pthread_mutex_lock(&g_lock);
  registration *r = find_id((uint64_t)(uintptr_t)user);
  if (r && info->pool_id == r->pool_id) {
    if (info->event == MN_SEGMENT_ALLOC || info->event == MN_SEGMENT_MAP) {
      if (reg_add(r, "mn_nccl_register_pool", info->address, info->size) != MN_OK) r->failures++;
    } else {
      for (size_t i = 0; i < r->n;) {
        const reg_entry *e = &r->entries[i];
        if (e->addr >= info->address && e->addr - info->address < info->size) {
          if (reg_drop(r, "mn_nccl_deregister_pool", i) != MN_OK) r->failures++;
        } else {
          i++;
        }
      }
    }
  }
  pthread_mutex_unlock(&g_lock);
}

static void reg_free(registration *r) {
  free(r->entries);
  free(r);
}

mn_status mn_nccl_register_pool(ncclComm_t comm, mn_mempool_t *pool) {
  MN__CHECK_ARG(comm != NULL && pool != NULL, "comm and pool must not be NULL");
  mn_allocator_t *alloc = mn_mempool_allocator(pool);
  registration *r = mn__calloc(1, sizeof *r);
  if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  *r = (registration){.comm = comm, .pool = pool, .alloc = alloc, .pool_id = mn_mempool_id(pool)};
  pthread_mutex_lock(&g_lock);
  if (find_pair(comm, pool, NULL)) {
    pthread_mutex_unlock(&g_lock);
    reg_free(r);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "pool %llu is registered with this communicator already",
                     (unsigned long long)mn_mempool_id(pool));
  }
  r->id = g_next_id++;
  r->next = g_regs;
  g_regs = r;
  pthread_mutex_unlock(&g_lock);
  /* The callback first, so no segment made from now on is missed; segments
   * listed by the snapshot and announced by the callback too are registered once. */
  void *user = (void *)(uintptr_t)r->id;
  mn_status st = mn_caching_allocator_add_segment_callback(alloc, on_segment, user);
  bool added = st == MN_OK;
  mn_snapshot_t *snap = NULL;
  pthread_mutex_lock(&g_lock);
  /* Under the lock: a segment freed meanwhile has its callback wait, then deregistered. */
  if (st == MN_OK) st = mn_mempool_snapshot(pool, &snap);
  for (size_t i = 0; st == MN_OK && i < snap->nsegments; i++) {
    const mn_snapshot_segment_t *s = &snap->segments[i];
    if (s->pool_id == r->pool_id) st = reg_add(r, __func__, s->address, s->total_size);
  }
  mn_snapshot_free(snap);
  registration **link = NULL;
  if (st != MN_OK) {
    mn__error_saved_t saved;
    mn__error_save(&saved);
    while (r->n) mn__ignore(reg_drop(r, __func__, r->n - 1)); /* rollback: the first failure is reported */
    find_pair(comm, pool, &link);
    *link = r->next;
    pthread_mutex_unlock(&g_lock);
    if (added) mn__ignore(mn_caching_allocator_remove_segment_callback(alloc, on_segment, user));
    reg_free(r);
    mn__error_restore(&saved);
    return mn__error_wrap(st, __func__);
  }
  pthread_mutex_unlock(&g_lock);
  return MN_OK;
}

mn_status mn_nccl_deregister_pool(ncclComm_t comm, mn_mempool_t *pool) {
  MN__CHECK_ARG(comm != NULL && pool != NULL, "comm and pool must not be NULL");
  pthread_mutex_lock(&g_lock);
  registration *r = find_pair(comm, pool, NULL);
  uint64_t id = r ? r->id : 0;
  mn_allocator_t *alloc = r ? r->alloc : NULL;
  pthread_mutex_unlock(&g_lock);
  if (!r) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "the pool is not registered with this communicator");
  /* Without the lock: removing may wait for a callback in flight, which takes it. */
  mn_status st = mn_caching_allocator_remove_segment_callback(alloc, on_segment, (void *)(uintptr_t)id);
  pthread_mutex_lock(&g_lock);
  registration **link = NULL;
  r = find_pair(comm, pool, &link);
  if (!r || r->id != id) { /* deregistered by another thread meanwhile */
    pthread_mutex_unlock(&g_lock);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "the pool is not registered with this communicator");
  }
  *link = r->next;
  size_t failures = r->failures;
  mn_status drop = MN_OK;
  while (r->n) {
    mn_status s = reg_drop(r, __func__, r->n - 1);
    if (s != MN_OK && drop == MN_OK) drop = s;
  }
  pthread_mutex_unlock(&g_lock);
  reg_free(r);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (drop != MN_OK) return drop;
  if (failures)
    return mn__error(MN_ERR_DEVICE, __func__, "%zu segment (de)registrations failed while the pool was registered",
                     failures);
  return MN_OK;
}

size_t mn_nccl_registered_count(ncclComm_t comm, const mn_mempool_t *pool) {
  pthread_mutex_lock(&g_lock);
  registration *r = find_pair(comm, pool, NULL);
  size_t n = r ? r->n : 0;
  pthread_mutex_unlock(&g_lock);
  return n;
}
