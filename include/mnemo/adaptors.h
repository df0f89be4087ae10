/* mnemo/adaptors.h: allocator adaptors (RMM's resource adaptors in C): each
 * wraps an upstream allocator and adds one policy; all are thread-safe. */
#ifndef MNEMO_ADAPTORS_H
#define MNEMO_ADAPTORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mnemo/allocator.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lifecycle rules, the same for every adaptor:
 *  1. An adaptor is made by its mn_*_adaptor_create call over an upstream on
 *     the same device and works on that device (mn_allocator_device).
 *  2. It is destroyed with mn_allocator_destroy. It then destroys its
 *     upstream only when created with MN_ADAPTOR_OWNS_UPSTREAM; otherwise the
 *     caller keeps the upstream, which must outlive the adaptor. Allocations
 *     still live at destroy are not freed: they stay upstream's.
 *  3. Memory from an adaptor is freed through the same adaptor. Every adaptor
 *     keeps a map of the pointers it handed out: freeing (or record_stream on)
 *     a pointer it never handed out, or freed already, is
 *     MN_ERR_INVALID_ARGUMENT and changes nothing.
 *  4. A failing upstream call leaves the adaptor as it was; the error passes up.
 *  5. record_stream, empty_cache, snapshot and check_invariants go on to
 *     upstream (after the adaptor's own checks); statistics too, except for the
 *     statistics adaptor, which answers them itself.
 * Adaptors stack: tracking over limiting over statistics over the caching
 * allocator is one mn_allocator_t. */
enum {
  MN_ADAPTOR_OWNS_UPSTREAM = 1u << 0,     /* destroy upstream with the adaptor */
  MN_ADAPTOR_CAPTURE_BACKTRACES = 1u << 1 /* tracking: backtrace() at every alloc */
};

/* ---- statistics ---------------------------------------------------------------
 * Counts what passes through it, for any upstream: in mn_alloc_stats_t, the
 * MN_POOL_ALL entries of allocation (count), allocated_bytes and
 * requested_bytes (both the bytes asked for: upstream rounding is not visible
 * to an adaptor) and num_ooms (upstream allocations that failed with
 * MN_ERR_OUT_OF_MEMORY). Other fields are zero. reset_peak sets its peaks. */
MN_API MN_NODISCARD mn_status mn_statistics_adaptor_create(mn_allocator_t *upstream, unsigned flags,
                                                           mn_allocator_t **out);

/* ---- limiting -----------------------------------------------------------------
 * Caps the bytes live through it at limit_bytes (bytes asked for). An alloc
 * reserves its bytes first, then calls upstream, and gives the reservation
 * back if upstream fails. Over the cap: MN_ERR_OUT_OF_MEMORY, with the cap,
 * the bytes in use and the bytes asked in the message. */
MN_API MN_NODISCARD mn_status mn_limiting_adaptor_create(mn_allocator_t *upstream, size_t limit_bytes, unsigned flags,
                                                         mn_allocator_t **out);
/* Bytes reserved now (live allocations plus allocations in flight) and the cap. */
MN_API MN_NODISCARD mn_status mn_limiting_adaptor_usage(mn_allocator_t *a, size_t *used_bytes, size_t *limit_bytes);

/* ---- tracing --------------------------------------------------------------------
 * Sends an event to sink(user, event) for every successful alloc
 * (MN_TRACE_ALLOC: address, size = requested_size = bytes asked, stream id)
 * and free (MN_TRACE_FREE_REQUESTED, sent after upstream accepted the free,
 * with the alloc's size and stream id), plus MN_TRACE_OOM (size = bytes asked)
 * when upstream runs out of memory and MN_TRACE_EMPTY_CACHE. Times are
 * CLOCK_MONOTONIC ns (mn_trace_event_t). Events reach the sink in the order the adaptor's lock
 * saw them (a free is reported before its address can be handed out again);
 * the sink runs with that lock held and must not call back into the adaptor.
 * Frees through this adaptor are serialized. */
MN_API MN_NODISCARD mn_status mn_tracing_adaptor_create(mn_allocator_t *upstream, mn_trace_sink_fn sink, void *user,
                                                        unsigned flags, mn_allocator_t **out);

/* ---- tracking -------------------------------------------------------------------
 * Records every live allocation: address, bytes asked, stream id, sequence
 * number, the calling thread's tag when it was made and, with
 * MN_ADAPTOR_CAPTURE_BACKTRACES, up to MN_TRACKING_MAX_FRAMES return addresses
 * from backtrace(). Reports what is still live (leaks). */
#define MN_TRACKING_TAG_MAX 64 /* bytes with the NUL; longer tags are cut */
#define MN_TRACKING_MAX_FRAMES 16

MN_API MN_NODISCARD mn_status mn_tracking_adaptor_create(mn_allocator_t *upstream, unsigned flags,
                                                         mn_allocator_t **out);
/* Sets the calling thread's tag (copied; NULL or "" clears it). Every tracking
 * adaptor stamps it on the allocations this thread makes. */
MN_API void mn_tracking_set_tag(const char *tag);
/* The calling thread's tag ("" when none). Valid until the next set. */
MN_API const char *mn_tracking_get_tag(void);
/* Live allocations through a tracking adaptor: count and bytes asked. */
MN_API MN_NODISCARD mn_status mn_tracking_adaptor_live(mn_allocator_t *a, size_t *count, size_t *bytes);
/* Writes the live allocations to `out`, oldest first: a header line
 * "mnemo tracking <device>: N live allocations, B bytes", then per allocation
 * "  #<seq> <address> <bytes> bytes stream <id> tag \"<tag>\"" and, when
 * captured, its frames (symbolized by backtrace_symbols; build with -rdynamic
 * for function names). MN_ERR_IO when writing fails. */
MN_API MN_NODISCARD mn_status mn_tracking_adaptor_report(mn_allocator_t *a, FILE *out);

/* ---- the stream-ordered pool (cudaMallocAsync) -----------------------------------
 * An allocator over a stream-ordered pool of its own on the device
 * (cudaMemPoolCreate + cudaMallocFromPoolAsync on CUDA, an emulated pool on
 * SIM; not on the CPU: MN_ERR_NOT_SUPPORTED). What PyTorch calls
 * backend:cudaMallocAsync. The device's default pool (mn_device_alloc_async,
 * shared with other libraries of the process) is never used nor changed.
 *  - alloc: from the pool, ordered on the stream (NULL: the default stream).
 *  - free: cudaFreeAsync on the stream the block was allocated on; for every
 *    stream given to record_stream it first records an event there and makes
 *    the allocation stream wait for it, so the memory is not reused before
 *    that work completes. Allocation and recorded streams must outlive the
 *    allocation.
 *  - empty_cache: synchronizes the device, then trims the pool to 0 bytes.
 *  - stats: allocation / allocated_bytes / requested_bytes (bytes asked) from
 *    its own counts, reserved_bytes from its pool, num_ooms.
 *  - destroy: frees the live allocations (in their streams' order, after
 *    their recorded streams' work), synchronizes the device and destroys the
 *    pool: no pointer from it may be used afterwards.
 * Its pool's release threshold is SIZE_MAX (freed memory stays cached until
 * empty_cache), as PyTorch sets it. */
MN_API MN_NODISCARD mn_status mn_async_allocator_create(mn_device_t dev, mn_allocator_t **out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_ADAPTORS_H */
