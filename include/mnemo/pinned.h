/* mnemo/pinned.h: the pinned (page-locked) host memory pool, a caching
 * allocator behind mn_allocator_t whose blocks are reused only once every
 * stream that used them has passed the point recorded at free. Thread-safe. */
#ifndef MNEMO_PINNED_H
#define MNEMO_PINNED_H

#include <stdbool.h>
#include <stddef.h>

#include "mnemo/allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Smallest size class (bytes): one page. */
#define MN_PINNED_MIN_CLASS ((size_t)4096)

typedef struct mn_pinned_config_s {
  /* Steps per power-of-two interval when a request is rounded to its size
   * class: 1 (powers of two, as PyTorch: up to 2x waste), 2, 4 (the default:
   * under 25% waste) or 8. Classes are also multiples of MN_PINNED_MIN_CLASS. */
  unsigned size_class_divisions;
  /* Pin ordinary pages (aligned_alloc then cudaHostRegister) instead of
   * allocating pinned memory (cudaHostAlloc): PyTorch's
   * pinned_use_cuda_host_register. */
  bool use_host_register;
} mn_pinned_config_t;

MN_API mn_pinned_config_t mn_pinned_config_default(void);

/* The size class (bytes) a request of nbytes is rounded to under `config`
 * (NULL: the defaults); 0 when nbytes is too large to round. */
MN_API size_t mn_pinned_size_class(const mn_pinned_config_t *config, size_t nbytes);

/* A pinned host pool. Its memory is pinned by the backend of
 * `device_for_events` (CUDA, SIM, or the CPU for plain memory) and its reuse
 * is ordered by events of that device type. The allocator's device
 * (mn_allocator_device) is the CPU: its blocks are host memory, so CPU
 * storages can be made from it.
 * Rules (PyTorch's CachingHostAllocator):
 *  1. alloc rounds up to a size class and takes a free block of exactly that
 *     class, else pins a new one; blocks are never split. The stream argument
 *     is ignored (host memory serves every stream).
 *  2. mn_allocator_record_stream(pool, p, s) marks the block holding p (any
 *     address inside it) as used by s, a stream of device_for_events' type
 *     (CPU streams are ignored: their work is already done).
 *  3. free records one event on every such stream and the block becomes
 *     "pending free"; it is reused only after all of them completed. Events
 *     are polled at the start of alloc, empty_cache and get_stats.
 *     Streams recorded on a block must stay alive until it is freed.
 *  4. empty_cache gives every free block back to the backend; pending and
 *     live blocks stay.
 *  5. Destroying a pool waits for its pending blocks and frees all of its
 *     memory, live allocations included.
 * Statistics fill the MN_POOL_ALL row (each block counts as a segment).
 * Do not call the pool from a stream's host function. */
MN_API MN_NODISCARD mn_status mn_pinned_allocator_create(mn_device_t device_for_events,
                                                         const mn_pinned_config_t *config, mn_allocator_t **out);
/* The process-wide pool of `dev` (default configuration), made on first use
 * and owned by mnemo. The copy engine stages through it. */
MN_API MN_NODISCARD mn_status mn_pinned_allocator_get_default(mn_device_t dev, mn_allocator_t **out);
/* The pinned pool that holds `ptr` (any address inside a live, pending or
 * cached block): MN_ERR_NOT_FOUND when none does. */
MN_API MN_NODISCARD mn_status mn_pinned_allocator_lookup(const void *ptr, mn_allocator_t **out);

/* Whether ptr lies in page-locked host memory: a block of any pinned pool, or
 * memory the SIM or CUDA backend reports pinned (mn_device_host_is_pinned). */
MN_API bool mn_is_pinned(const void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_PINNED_H */
