/* mnemo/sim.h: the simulated GPU. Device memory is lazily backed host memory,
 * streams run their queued work only when a test advances them, faults can be injected. */
#ifndef MNEMO_SIM_H
#define MNEMO_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_sim_config_s {
  int device_count;    /* 1..16; default 1 */
  size_t capacity;     /* bytes of device memory per device; default 80 GiB */
  size_t granularity;  /* raw allocations round up to this; default 2 MiB */
  bool eager;          /* streams run work as soon as it is queued */
  bool no_peer_access; /* SIM devices cannot reach each other's memory
                          (mn_device_can_access_peer says false); default false */
} mn_sim_config_t;

/* The defaults above. */
MN_API mn_sim_config_t mn_sim_config_default(void);
/* Reconfigures the SIM devices. Refused (MN_ERR_INVALID_STATE) while any SIM
 * memory, stream or event is alive. The first SIM call without a configure
 * uses the defaults (or MNEMO_SIM_CAPACITY / MNEMO_SIM_EAGER from the environment).
 * Built-in default allocators (mn_allocator_get_default on a SIM device, no
 * mn_allocator_set_default): when none has a live allocation, each first
 * gives back its cache (cached segments, pending frees, pooled events) and,
 * once the new configuration is in place, re-reads its device (capacity,
 * granularity): the same objects, so pointers to them stay valid. While one
 * has a live allocation the call fails (MN_ERR_INVALID_STATE, naming the
 * device) before anything is given back or changed. Allocators the caller
 * created or set as default are the caller's: empty or destroy them first.
 * No other thread may use the SIM devices during the call. */
MN_API MN_NODISCARD mn_status mn_sim_configure(const mn_sim_config_t *config);
MN_API MN_NODISCARD mn_status mn_sim_get_config(mn_sim_config_t *out);

/* Runs up to `n` queued operations of a SIM stream, in order; stops early at a
 * wait on an event that has not completed. *ran (optional) gets the count run. */
MN_API MN_NODISCARD mn_status mn_sim_stream_advance(mn_stream_t *stream, size_t n, size_t *ran);
/* Runs everything queued on every stream of the device that can run. */
MN_API MN_NODISCARD mn_status mn_sim_device_drain(mn_device_t dev);
/* Operations queued and not yet run on a SIM stream. */
MN_API MN_NODISCARD mn_status mn_sim_stream_pending(mn_stream_t *stream, size_t *count);

typedef enum mn_sim_fault {
  MN_SIM_FAULT_RAW_ALLOC = 0,    /* a raw allocation (alloc, map or pinned host alloc) fails: out of memory */
  MN_SIM_FAULT_EVENT_QUERY = 1,  /* an event query fails with a device error */
  MN_SIM_FAULT_MEMCPY = 2,       /* queueing a copy or memset fails with a device error */
  MN_SIM_FAULT_EVENT_RECORD = 3, /* recording an event fails with a device error */
  MN_SIM_FAULT_COUNT = 4
} mn_sim_fault;

/* The `nth` next call of that kind on the device fails (1 = the very next),
 * then `count` calls in all fail (count >= 1), then calls succeed again. */
MN_API MN_NODISCARD mn_status mn_sim_fault_inject(mn_device_t dev, mn_sim_fault fault, uint64_t nth, uint64_t count);
MN_API MN_NODISCARD mn_status mn_sim_fault_clear(mn_device_t dev);

typedef struct mn_sim_stats_s {
  size_t mapped_bytes; /* physical memory in use (raw allocs + mapped pages) */
  size_t peak_mapped_bytes;
  uint64_t raw_allocs, raw_frees;
  uint64_t maps, unmaps;
  uint64_t ops_queued, ops_run;
  uint64_t faults_fired;
  uint64_t illegal_accesses; /* queued copies/sets that touched unmapped memory (skipped) */
  size_t live_streams, live_events, live_reservations;
  /* Whole-device synchronizations: mn_device_synchronize, and the ones a raw
   * free and an unmap do first (as cudaFree); an allocator unmapping pages it
   * synchronized for itself adds none per page. */
  uint64_t synchronizes;
  size_t live_graphs; /* graphs ended from captures and not destroyed yet (mnemo/graph.h) */
} mn_sim_stats_t;

MN_API MN_NODISCARD mn_status mn_sim_get_stats(mn_device_t dev, mn_sim_stats_t *out);
/* Whether a kernel on `accessor` could touch [ptr, ptr + nbytes) of `owner`'s
 * memory: MN_OK when every byte is mapped memory of owner that accessor may
 * reach (its own; raw memory of a device it enabled peer access to with
 * mn_device_enable_peer_access(accessor, owner); VMM pages granted to it with
 * mn_device_mem_set_access(owner, ..., accessor) since they were mapped, as
 * CUDA's cuMemSetAccess: enabling peer access alone does not reach them),
 * else MN_ERR_INVALID_ARGUMENT saying why. */
MN_API MN_NODISCARD mn_status mn_sim_check_access(mn_device_t accessor, mn_device_t owner, const void *ptr,
                                                  size_t nbytes);
/* Checks the SIM device's own bookkeeping (address ranges disjoint, byte
 * counts equal the sums); MN_ERR_INTERNAL with a message when broken. */
MN_API MN_NODISCARD mn_status mn_sim_check_invariants(mn_device_t dev);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_SIM_H */
