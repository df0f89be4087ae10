/* runtime/hostmem.h: every host allocation the library (and the CLI, tools/)
 * makes goes through these (malloc, calloc, realloc, aligned_alloc, strdup
 * under mn__ names; tests/test_layers.py fails on a direct call), so a test
 * can make the nth one fail (SQLite's faultsim, libuv's OOM sweep) and check
 * each failure path: an error status and message, nothing leaked, no
 * half-updated state. Memory is released with plain free(). Thread-safe: the
 * fault counter is per thread (a test arms it on the thread that runs its
 * workload, so the sweep is deterministic). */
#ifndef MNEMO_RUNTIME_HOSTMEM_H
#define MNEMO_RUNTIME_HOSTMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void *mn__host_malloc(size_t n, const char *file, int line);
void *mn__host_calloc(size_t count, size_t size, const char *file, int line);
void *mn__host_realloc(void *p, size_t n, const char *file, int line);
void *mn__host_aligned_alloc(size_t align, size_t n, const char *file, int line);
char *mn__host_strdup(const char *s, const char *file, int line);

#define mn__malloc(n) mn__host_malloc((n), __FILE__, __LINE__)
#define mn__calloc(c, s) mn__host_calloc((c), (s), __FILE__, __LINE__)
#define mn__realloc(p, n) mn__host_realloc((p), (n), __FILE__, __LINE__)
#define mn__aligned_alloc(a, n) mn__host_aligned_alloc((a), (n), __FILE__, __LINE__)
#define mn__strdup(s) mn__host_strdup((s), __FILE__, __LINE__)

/* ---- fault injection (tests) ---- */

/* The calling thread's nth host allocation from now (1: the next) fails and
 * returns NULL, once; 0 disarms. Resets this thread's call count. */
void mn__hostmem_fail_nth(int64_t n);
/* Host allocations the calling thread made since it armed a fault (arm with
 * INT64_MAX to count a workload's allocations without failing any). */
int64_t mn__hostmem_calls(void);
/* Whether the armed fault has fired on this thread. */
bool mn__hostmem_fault_fired(void);
/* The call site of the fault that fired on this thread ("folder/file.c:line",
 * e.g. "storage/copy.c:12"), or "". */
const char *mn__hostmem_fault_site(void);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_RUNTIME_HOSTMEM_H */
