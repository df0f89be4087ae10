/* storage/copy_staged.h: what the copy engine's two files share: a copy as the
 * engine sees it (two sides of one shape, a stream, flags) and what
 * storage/copy_staged.c offers storage/copy.c (the queued range copy, the
 * host range copy, the staged paths). One way: copy.c calls these, nothing
 * here calls copy.c. Internal; thread-safe functions. */
#ifndef MNEMO_STORAGE_COPY_STAGED_H
#define MNEMO_STORAGE_COPY_STAGED_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/strided.h"
#include "mnemo/mnemo.h"
#include "mnemo/copy.h"

/* One side of a copy: device, geometry (bytes are a 1-d view of itemsize 1). */
typedef struct mn__copy_side_s {
  mn_device_t dev;
  mn__strided_t t;
  bool contiguous;
  bool pinned; /* host side: page-locked for the device side's backend */
} mn__copy_side_t;

typedef struct mn__copy_s {
  const char *func; /* the public entry point, for messages */
  mn__copy_side_t dst, src;
  size_t item;   /* bytes per element */
  int64_t numel; /* elements in the common shape */
  mn_stream_t *stream; /* the ordering stream; NULL: a CPU copy done at once */
  unsigned flags;
  mn_copy_config_t cfg; /* the configuration when the copy started */
} mn__copy_t;

/* Queues the elements [begin, end) of src -> dst on `stream`: a byte copy
 * (mn_memcpy_async, or a peer copy between two devices) when both sides are
 * contiguous, else a host function running the CPU strided copy (only for
 * host-accessible memory: CPU and SIM). A CPU stream runs it at once.
 * Preconditions (MN__ASSERT): stream set, item > 0, 0 <= begin; a side that
 * is not contiguous is host-accessible (not CUDA memory). */
mn_status mn__copy_enqueue_range(mn_stream_t *stream, const mn__copy_side_t *dst, const mn__copy_side_t *src,
                                 size_t item, int64_t begin, int64_t end);

/* Queues a host function on `stream` that copies [begin, end) of src into
 * dst on the CPU (split over `threads` threads from 1 MiB on); the operands are copied.
 * Preconditions (MN__ASSERT): stream set, item > 0, 0 <= begin <= end. */
mn_status mn__copy_launch_host_range(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src,
                                     size_t item, int64_t begin, int64_t end, unsigned threads);

/* The staged paths (docs/COPY.md): pageable host -> device, device ->
 * pageable host, and device -> device of another device through the host.
 * Preconditions (MN__ASSERT; storage/copy.c's copy_run keeps them): the
 * copy has elements (numel > 0), an ordering stream, item > 0 and its
 * configuration; h2d: src on the CPU, dst not; d2h: dst on the CPU, src
 * not; d2d: two different devices, neither the CPU. */
mn_status mn__copy_staged_h2d(const mn__copy_t *c);
mn_status mn__copy_staged_d2h(const mn__copy_t *c);
mn_status mn__copy_staged_d2d(const mn__copy_t *c);

/* Releases the helper streams and cached events. */
mn_status mn__copy_staged_reset(void);

#endif /* MNEMO_STORAGE_COPY_STAGED_H */
