/* profiling/analysis.h: what the reports (report.c, diff.c) and the CLI's
 * commands share about a trace: who holds memory (live allocations grouped by
 * the stack that made them, tools' and pages' "who holds the peak"), the
 * recorded block of an allocation, the settings and the device size it was
 * recorded with, which device a one-device view works on, and a growing array.
 * Pure functions of the trace (notes and errors go to the caller's buffer and
 * the thread's error); any thread. */
#ifndef MNEMO_PROFILING_ANALYSIS_H
#define MNEMO_PROFILING_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/sim.h"
#include "mnemo/trace.h"
#include "runtime/strbuf.h"

/* The bytes the recording allocator counted for an alloc entry: its recorded
 * block size, or the request rounded up to PyTorch's 512 B when none was recorded
 * (a request within 511 B of 2^64 as it is). */
uint64_t mn__trace_recorded_block(const mn_trace_entry_t *e);

/* a + b, UINT64_MAX where it would wrap (sizes are user data: sums saturate). */
uint64_t mn__sat_add_u64(uint64_t a, uint64_t b);

/* Makes room for one more element in a growing array: `items` is the address of
 * the array's pointer (any object pointer type, e.g. &steps), n its elements in
 * use; when n == *cap, doubles *cap (first: `first` elements) and reallocates
 * the array (elements of `size` bytes). false, with the pointer and *cap
 * unchanged, when host memory runs out. */
bool mn__grow(void *items, size_t n, size_t *cap, size_t size, size_t first);

/* Sorts idx[0..n) (entry indices of t) by the entries' size, largest first (ties:
 * the earlier entry first). */
void mn__trace_sort_by_size(const mn_trace_t *t, size_t *idx, size_t n);

/* A group of live allocations that one stack allocated ("who holds the memory"). */
typedef struct mn__holder_s {
  uint32_t stack; /* trace stack id, 0: none (grouped by key: the stack holding the most bytes) */
  int kind;       /* 0: with a stack; 1: no stack, allocated before recording; 2: no stack recorded */
  size_t count;
  uint64_t bytes, block_bytes; /* asked for; recorded block bytes (mn__trace_recorded_block); saturated sums */
  uint32_t key;   /* the stack's first user frame (mn__stack_key, profiling/stacks.h); 0: none */
  size_t nstacks; /* distinct stacks in the group (1 when grouped by stack, 0 without one) */
} mn__holder_t;

/* Sorts live[0..n) (indices of alloc entries of t) largest request first, and
 * groups them by the stack that allocated them into *groups (malloc'ed, the most
 * bytes first; *ngroups). false (nothing allocated) for want of host memory. */
bool mn__holders(const mn_trace_t *t, size_t *live, size_t n, mn__holder_t **groups, size_t *ngroups);

/* Merges groups[0..*ngroups) that mn__holders made by stack into groups by
 * their first user frame (`key`; stacks without one stay apart), in place: sums
 * their counts and bytes, keeps the stack of the most bytes, the most bytes
 * first; *ngroups becomes the new count. The rule: profiling/stacks.h. */
void mn__holders_by_key(mn__holder_t *groups, size_t *ngroups);

/* The allocator settings the trace was recorded with (its `meta config`, in
 * PYTORCH_CUDA_ALLOC_CONF syntax), which every report and command replays with
 * when none is given; *as_recorded says it had them (the row is then labelled
 * "as recorded"). "" and false when the trace has none or mnemo's parser refuses
 * them (then, with notes not NULL, a line "warning: ..." is added to notes). */
const char *mn__trace_recorded_config(const mn_trace_t *t, mn__sbuf_t *notes, bool *as_recorded);

/* The one device of t that a one-device view (snapshot, diff) works on. want:
 * the recorded device number, -1 for the lowest device that is not pinned host
 * memory (with a line "note: <name> holds several devices; <what> device N ..."
 * added to notes, when not NULL, if t holds several). *index: the trace device
 * index to replay (mn_replay_options_t.trace_device; -1 for a one-device trace:
 * the replay's default); *number: the recorded device number; *multi: whether t
 * is a several-device trace (its PyTorch figures under devN.torch_*). MN_OK, or
 * MN_ERR_INVALID_ARGUMENT with a message under `func`: no such device, or the
 * pinned host memory (meta host_device), which is not replayed. */
mn_status mn__trace_pick_device(const char *func, const char *name, const mn_trace_t *t, int want, const char *what,
                                mn__sbuf_t *notes, int *index, uint64_t *number, bool *multi);

/* The SIM device as recorded for a device of mn_trace_devices: sc->capacity from
 * its first OOM (the free bytes rounded down to whole granules, 2 MiB as
 * PyTorch's segments, so a segment fits exactly when it fitted in PyTorch), else
 * from its partial cache releases (rounded up), else unchanged. Returns "oom",
 * "releases" or "default". (profiling/devices.c) */
const char *mn__trace_size_as_recorded(const mn_trace_device_t *d, mn_sim_config_t *sc);

/* The same for trace device `index` (the entries' device field; pinned host
 * memory and a device without entries: "default"): *from says which. MN_OK, or
 * MN_ERR_OUT_OF_MEMORY. (profiling/devices.c) */
mn_status mn__sim_as_recorded(const mn_trace_t *t, uint32_t index, mn_sim_config_t *sc, const char **from);

#endif /* MNEMO_PROFILING_ANALYSIS_H */
