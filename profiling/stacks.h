/* profiling/stacks.h: the one rule the reports and the CLI (snapshot, report, diff)
 * follow to show a recorded call stack and to group allocations by it: which
 * frames are the allocator's own (never shown), and which frame is the "first
 * user frame" a stack is grouped under. docs/PROFILING.md ("Stacks: what is shown,
 * what groups") states the rule; profiling/report_page.html's userFrames applies the
 * same one in the page.
 * Pure functions of the trace's frames: no state, any thread. */
#ifndef MNEMO_TOOLS_STACKS_H
#define MNEMO_TOOLS_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/trace.h"

/* A frame no one should see: what PyTorch's memory_viz filters out of every stack
 * (the unwinder and traceback capture: torch::unwind::unwind, CapturedTraceback::
 * gather, gather_with_cpp; the process entry: _start, __libc_start_main; the
 * CPython interpreter glue: PyEval_, PyObject_, PyFunction_, ceval.c, call.c...;
 * the dispatcher's boxing and Register/Redispatch wrappers) and the caching
 * allocator's own frames (c10::...CachingAllocator::...malloc/allocate). Native
 * frames only: a Python frame is never internal by this test. */
bool mn__frame_is_internal(const mn_trace_frame_t *f);

/* The frames of stack `stack` a person reads, innermost first: the first user
 * frame (the group key) and the frames outward of it of the same kind. The key
 * is, in this order: the innermost Python frame outside torch; else the innermost
 * Python frame; else the innermost autograd node (torch::autograd::...::apply:
 * a backward-pass allocation, made on autograd's engine thread, groups under
 * its node, e.g. MulBackward0); else the innermost non-internal native frame
 * with a source file; else the innermost non-internal native frame that is not
 * in an object file. The frames after it: Python frames outside torch (first
 * rule), Python frames (second), non-internal native frames not in an object
 * file (the others). Writes up to `max` frame ids to out (may be NULL with max
 * 0) and returns how many there are (0: the stack is 0, unknown, or holds only
 * internal and object-file frames). */
size_t mn__stack_user_frames(const mn_trace_t *t, uint32_t stack, uint32_t *out, size_t max);

/* The group key of stack `stack`: its first user frame's id (0: none). */
uint32_t mn__stack_key(const mn_trace_t *t, uint32_t stack);

/* The frames of stack `stack` minus the internal ones, innermost first (what a
 * hover or `mnemo snapshot` shows when it shows a whole stack): writes up to
 * `max` ids to out and returns how many there are. */
size_t mn__stack_shown_frames(const mn_trace_t *t, uint32_t stack, uint32_t *out, size_t max);

#endif /* MNEMO_TOOLS_STACKS_H */
