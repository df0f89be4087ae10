/* runtime/stream_hold.h: holds on a stream, taken by whatever keeps an
 * mn_stream_t pointer beyond the call that handed it over (an allocator's
 * record_stream use of a live block, a stream-ordered allocation's stream),
 * so that mn_stream_destroy cannot free the stream under it: while a stream
 * is held, mn_stream_destroy answers MN_ERR_BUSY and leaves it intact.
 * Stream ids are never reused, so code that keeps only mn_stream_id() (free
 * lists keyed by stream, pending events, trace records) needs no hold.
 * Thread-safe: the count is atomic. A hold does not make a concurrent
 * mn_stream_destroy of the same stream safe; the user must not destroy a
 * stream while another thread is passing it to mnemo. */
#ifndef MNEMO_RUNTIME_STREAM_HOLD_H
#define MNEMO_RUNTIME_STREAM_HOLD_H

#include <stdint.h>

#include "mnemo/device.h"

/* Takes one hold on s (default streams, which are never destroyed, are not
 * counted). pre: s is a live stream. */
void mn__stream_hold(mn_stream_t *s);
/* Drops one hold taken with mn__stream_hold; the pointer must not be used
 * by the holder afterwards. */
void mn__stream_unhold(mn_stream_t *s);
/* The holds on s now (0 for default streams); for messages and tests. */
uint32_t mn__stream_holds(const mn_stream_t *s);

#endif /* MNEMO_RUNTIME_STREAM_HOLD_H */
