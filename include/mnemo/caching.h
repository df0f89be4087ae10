/* mnemo/caching.h: the caching device allocator (PyTorch's CUDACachingAllocator
 * rules, on any device with streams) and its configuration, from a struct or a string. */
#ifndef MNEMO_CACHING_H
#define MNEMO_CACHING_H

#include <stdbool.h>
#include <stddef.h>

#include "mnemo/allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MN_ROUNDUP_BUCKETS 64 /* one per power-of-two interval: index = floor(log2(size)) */

typedef struct mn_caching_config_s {
  /* Blocks of at least this many bytes are "oversize": never split. SIZE_MAX
   * (the default) means unlimited. Set from max_split_size_mb. */
  size_t max_split_size;
  /* Oversize requests may take a cached oversize block at most this many bytes
   * larger (default 20 MiB; max_non_split_rounding_mb). */
  size_t max_non_split_rounding;
  /* 0 (off, default) or in (0, 1): when reserved memory passes this fraction of
   * the allowed memory, free unused cached blocks, oldest first. */
  double garbage_collection_threshold;
  /* Per power-of-two interval [2^i, 2^(i+1)): split it into this many steps
   * when rounding a request (0 or 1: plain 512-byte rounding). */
  unsigned roundup_power2_divisions[MN_ROUNDUP_BUCKETS];
  /* Grow one virtual range per stream and pool instead of new segments
   * (device VMM; expandable_segments). */
  bool expandable_segments;
  /* In (0, 1]: cap reserved memory at this fraction of the device's total
   * (per_process_memory_fraction; 1 = no cap, the default). */
  double per_process_memory_fraction;
  /* "native" (this allocator) or "cudaMallocAsync" (the stream-ordered pool):
   * read by the default-allocator factory, not by the caching allocator. */
  char backend[32];
} mn_caching_config_t;

MN_API mn_caching_config_t mn_caching_config_default(void);
/* Applies a PyTorch-style option string ("max_split_size_mb:512,
 * expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8]") on top
 * of *config. Keys: max_split_size_mb, max_non_split_rounding_mb,
 * garbage_collection_threshold, roundup_power2_divisions (a number or a
 * [size_mb:divisions,...,>:divisions] list), expandable_segments,
 * per_process_memory_fraction, backend. Unknown keys and bad values are
 * MN_ERR_INVALID_ARGUMENT with the key and value named; *config is untouched on failure. */
MN_API MN_NODISCARD mn_status mn_caching_config_parse(const char *text, mn_caching_config_t *config);
/* Writes the configuration back as an option string (always NUL-terminated). */
MN_API MN_NODISCARD mn_status mn_caching_config_format(const mn_caching_config_t *config, char *buf, size_t bufsize);

/* A caching allocator for `dev` (CUDA or SIM; the CPU works too, without
 * VMM). config NULL: the defaults. Thread-safe; threads that allocate on
 * their own streams do not wait for each other on cached blocks. */
MN_API MN_NODISCARD mn_status mn_caching_allocator_create(mn_device_t dev, const mn_caching_config_t *config,
                                                          mn_allocator_t **out);

/* The same as mn_caching_allocator_create (kept so callers build). It once
 * made one caching allocator per stream, for threads on their own streams;
 * the caching allocator now does that itself (a lane, with its own lock, per
 * stream: docs/ALLOCATOR.md, "Threads"), with exact device-wide peaks, memory
 * pools and every setting. */
MN_API MN_NODISCARD mn_status mn_caching_allocator_create_sharded(mn_device_t dev, const mn_caching_config_t *config,
                                                                  mn_allocator_t **out);

/* Called before an allocation fails with MN_ERR_OUT_OF_MEMORY, with the
 * request and the statistics at that moment. */
typedef void (*mn_oom_observer_fn)(void *user, mn_device_t dev, size_t requested, const mn_alloc_stats_t *stats);
MN_API MN_NODISCARD mn_status mn_caching_allocator_set_oom_observer(mn_allocator_t *a, mn_oom_observer_fn fn,
                                                                    void *user);
/* Sends every allocator event (alloc, frees, segment alloc/free/map/unmap,
 * empty_cache, oom) to `sink` (NULL stops). */
MN_API MN_NODISCARD mn_status mn_caching_allocator_set_trace_sink(mn_allocator_t *a, mn_trace_sink_fn sink, void *user);

/* Lets `peer` (another device of a's type) use a's memory, as PyTorch's
 * CUDACachingAllocator::enablePeerAccess: enables peer access from `peer` to
 * a's device (raw segments; mn_device_enable_peer_access), grants `peer`
 * every page mapped now in a's expandable segments and every page mapped
 * later (mn_device_mem_set_access). A device that is not a peer (same device,
 * other type): MN_ERR_INVALID_ARGUMENT; a pair without peer access
 * (mn_device_can_access_peer false): MN_ERR_NOT_SUPPORTED. Enabling a peer
 * twice succeeds. mn_caching_allocator_create's allocators only. */
MN_API MN_NODISCARD mn_status mn_caching_allocator_enable_peer_access(mn_allocator_t *a, mn_device_t peer);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_CACHING_H */
