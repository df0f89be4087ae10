/* runtime/clock.h: the time stamps of allocation events (mn_trace_event_t.time_ns):
 * CLOCK_MONOTONIC nanoseconds, read cheaply. On x86-64 with an invariant TSC
 * (and a kernel that keeps the TSC as its clock source) the time is the
 * TSC's count turned into nanoseconds by a line through two CLOCK_MONOTONIC
 * readings (an anchor, renewed every 10 ms); elsewhere, and until the first
 * line is known (5 ms after the first call), clock_gettime itself. The same
 * idea as PyTorch's approximate clock for its memory history. Within about a
 * microsecond of clock_gettime (the tests bound it); never decreasing on one
 * thread. Thread-safe: the anchor is a sequence lock of atomics; any thread
 * may renew it (one at a time, the others meanwhile read clock_gettime). */
#ifndef MNEMO_RUNTIME_CLOCK_H
#define MNEMO_RUNTIME_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t mn__clock_ns(void);

/* Whether mn__clock_ns reads the TSC now: the host's TSC is usable and a
 * line is known (false: it reads clock_gettime). */
bool mn__clock_uses_tsc(void);

#endif
