/* runtime/debug.h: the debug tiers (build option MNEMO_DEBUG). 0: nothing.
 * 1: MN__ASSERT checks the preconditions the code states (a spare block
 * reserved before it is taken, a map slot before it is filled, the lock
 * held), aborting with file, line and message when one fails. 2: also runs
 * an allocator's invariant checker after every alloc, free, record_stream and
 * empty_cache (allocators/allocator.c). Thread-safe. */
#ifndef MNEMO_RUNTIME_DEBUG_H
#define MNEMO_RUNTIME_DEBUG_H

#ifndef MNEMO_DEBUG
#define MNEMO_DEBUG 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Prints "mnemo: <file>:<line>: precondition failed: <cond>: <message>" and aborts. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noreturn, format(printf, 4, 5)))
#endif
void mn__assert_fail(const char *file, int line, const char *cond, const char *fmt, ...);

#ifdef __cplusplus
}
#endif

#if MNEMO_DEBUG >= 1
#define MN__ASSERT(cond, ...)                                           \
  do {                                                                  \
    if (!(cond)) mn__assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)
#else
#define MN__ASSERT(cond, ...) ((void)0)
#endif

#endif /* MNEMO_RUNTIME_DEBUG_H */
