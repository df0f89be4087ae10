/* mnemo/copy.h: the copy engine (storage layer), one entry point for bytes
 * and one for strided views between any two devices (CPU, CUDA, SIM),
 * blocking or non_blocking, staging pageable host memory through the pinned
 * pool. Users copying views call mn_view_copy (mnemo/view.h), which adds
 * broadcasting, casts and PyTorch's overlap rules on top. Thread-safe.
 * docs/COPY.md gives every path, its ordering and its completion point. */
#ifndef MNEMO_COPY_H
#define MNEMO_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "mnemo/device.h"
#include "mnemo/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of mn_copy_bytes (values are stable). */
enum {
  /* Return before the copy ends; it is ordered on the stream. Without it the
   * call returns once the copy is complete (the stream is synchronized). */
  MN_COPY_NON_BLOCKING = 1u << 0,
  /* The caller says src (dst) is page-locked host memory; checked: a pointer
   * that is not is refused (MN_ERR_INVALID_ARGUMENT). Without the flag the
   * engine asks the device's backend itself. */
  MN_COPY_SRC_PINNED = 1u << 1,
  MN_COPY_DST_PINNED = 1u << 2,
  /* Between two devices: stage through the host even where peer access exists. */
  MN_COPY_NO_PEER = 1u << 3,
  MN_COPY_FLAGS_ALL = (1u << 4) - 1
};

typedef struct mn_copy_config_s {
  /* Bytes per staging chunk (default 8 MiB; at least 16). A chunk holds whole
   * elements: chunk_bytes / itemsize of them, at least one. */
  size_t chunk_bytes;
  /* Pinned staging blocks one copy cycles through (default 4; at least 2):
   * the host waits for the device only when a copy needs more chunks. */
  unsigned staging_buffers;
  /* Parts each chunk's host-side copy into or out of staging is split into
   * (default 1: the calling thread, or the stream's host function; up to 64),
   * run on the library's CPU pool with the calling thread taking part (its
   * threads: MNEMO_KERNEL_THREADS). Chunks of less than 1 MiB are never split. */
  unsigned host_threads;
} mn_copy_config_t;

MN_API mn_copy_config_t mn_copy_config_default(void);
/* Sets the process-wide configuration (NULL: the defaults). Copies already
 * running keep the one they started with. */
MN_API MN_NODISCARD mn_status mn_copy_set_config(const mn_copy_config_t *config);
MN_API MN_NODISCARD mn_status mn_copy_get_config(mn_copy_config_t *out);

/* Copies nbytes from src (memory of src_dev) to dst (memory of dst_dev),
 * ordered on `stream`: a stream of dst_dev or src_dev (NULL: the default
 * stream of the device side, dst's for two devices). For a CPU -> CPU copy
 * `stream` may be any stream (the copy waits for its earlier work) or NULL
 * (copied at once). `flags`: MN_COPY_*. Overlapping ranges are refused on a
 * device (memmove semantics on the CPU). On failure the destination is
 * unspecified; work already queued may still write it until the stream is
 * synchronized; every staging block is given back to the pool. */
MN_API MN_NODISCARD mn_status mn_copy_bytes(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src,
                                            size_t nbytes, mn_stream_t *stream, unsigned flags);

/* The copy engine's view entry point, lower level than mn_view_copy (which
 * users want: it broadcasts, casts on any pair of devices and handles
 * overlap by PyTorch's rules, and calls this). Copies src into dst of the
 * same sizes, any strides, any devices. On one device a cast (or a strided
 * CUDA copy) runs as a kernel (mn_kernel_copy_view); across devices the
 * dtypes must match (MN_ERR_NOT_SUPPORTED otherwise: cast on one side first).
 * No broadcasting: a destination with stride 0 on a dim of size > 1 is
 * refused. Views that share memory must be identical (a no-op) or disjoint.
 * Stream and completion as mn_copy_bytes with MN_COPY_NON_BLOCKING when
 * non_blocking. */
MN_API MN_NODISCARD mn_status mn_copy_view(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream,
                                           bool non_blocking);

/* Waits for and destroys the engine's helper streams (made on first use, one
 * per device) and cached events, then empties the default
 * pinned pools (mn_allocator_empty_cache: blocks still pending stay). Call it
 * when no copy is running: before mn_sim_configure, or to leave nothing behind. */
MN_API MN_NODISCARD mn_status mn_copy_engine_reset(void);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_COPY_H */
