/* bench/alloc_anchors.h: the workloads that bench_alloc_anchors (Google
 * Benchmark, time) and alloc_ir (callgrind, instructions) share, for the
 * allocator's host-cost anchors: a real trace's alloc/free sequence replayed through mnemo's caching
 * allocator or a general-purpose heap (glibc's malloc, or jemalloc / mimalloc
 * loaded with dlopen), and caching-allocator setups (cached free blocks,
 * frees pending on another stream's events). Only mnemo's public API, so it
 * keeps compiling while the allocator's internals change.
 * Threading: a loaded sequence and an opened heap are read-only and may be
 * shared by threads; a mn_anchor_caching_t belongs to one thread. */
#ifndef MNEMO_BENCH_ALLOC_ANCHORS_H
#define MNEMO_BENCH_ALLOC_ANCHORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/mnemo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- general-purpose heaps ------------------------------------------------- */

typedef enum mn_anchor_heap_kind {
  MN_ANCHOR_GLIBC = 0,
  MN_ANCHOR_JEMALLOC = 1, /* libjemalloc.so.2 (Debian: libjemalloc2 / libjemalloc-dev) */
  MN_ANCHOR_MIMALLOC = 2, /* libmimalloc.so.2 (Debian: libmimalloc2.0 / libmimalloc-dev) */
  MN_ANCHOR_HEAPS = 3
} mn_anchor_heap_kind;

typedef struct mn_anchor_heap_s {
  const char *name;          /* "glibc", "jemalloc", "mimalloc" */
  void *(*malloc_fn)(size_t);
  void (*free_fn)(void *);
  void *handle;              /* the dlopen handle (never closed); NULL for glibc */
} mn_anchor_heap_t;

/* The tunable jemalloc needs to be dlopen'ed: its initial-exec TLS (2.6 KiB)
 * does not fit glibc's default surplus of static TLS. */
#define MN_ANCHOR_TLS_TUNABLE "glibc.rtld.optional_static_tls=16384"

/* Opens a heap: glibc's malloc/free always; jemalloc's malloc/free and
 * mimalloc's mi_malloc/mi_free from their shared libraries (RTLD_LOCAL: the
 * process's own malloc stays glibc's). false, with `why` filled, where the
 * library is missing or cannot be loaded (a skipped anchor, not a failure). */
bool mn_anchor_heap_open(mn_anchor_heap_kind kind, mn_anchor_heap_t *out, char *why, size_t whylen);

/* When GLIBC_TUNABLES lacks MN_ANCHOR_TLS_TUNABLE and libjemalloc.so.2 fails
 * to load for want of static TLS, runs the program again (execv of
 * /proc/self/exe) with the tunable added; returns otherwise. Not for programs
 * run under valgrind (the new image would escape it): alloc_ir.sh sets the
 * tunable itself. */
void mn_anchor_reexec_for_tls(char **argv);

/* ---- a trace's alloc/free sequence --------------------------------------------- */

typedef struct mn_anchor_op_s {
  uint32_t slot;     /* the allocation's slot: alloc writes it, free reads it */
  uint32_t is_alloc; /* 1: alloc, 0: free */
  size_t size;       /* bytes, scaled (>= 1) */
  size_t size_raw;   /* bytes as recorded (>= 1) */
} mn_anchor_op_t;

/* A closed sequence: running `ops` from an empty state frees everything it
 * allocates, so it can be run again and again. Built from the trace's pre and
 * event alloc / free_requested entries of its lowest device, paired by address:
 * pre allocations that the events never free are `keep` (made once, live
 * across the runs: the model's weights); pre allocations that the events free
 * open the sequence; allocations still live at the trace's end are freed at
 * the end of the sequence. Streams are ignored (everything on one stream). */
typedef struct mn_anchor_seq_s {
  mn_anchor_op_t *ops;
  size_t nops;
  size_t npairs;        /* alloc ops (each has its free later in ops) */
  size_t nslots;        /* = npairs */
  size_t *keep, *keep_raw;
  size_t nkeep;
  size_t divisor;       /* scaled size = max(1, size / divisor); a power of two */
  uint64_t peak_raw;    /* bytes live at the peak (keep included), as recorded */
  uint64_t peak;        /* the same, scaled */
  char path[512];
} mn_anchor_seq_t;

/* Reads the trace at `path` into *out, with the smallest power-of-two divisor
 * that brings the peak to at most max_peak bytes. false with `why` filled on
 * failure (*out then holds nothing to free). */
bool mn_anchor_seq_load(const char *path, uint64_t max_peak, mn_anchor_seq_t *out, char *why, size_t whylen);
void mn_anchor_seq_free(mn_anchor_seq_t *s);

/* One run of the sequence through a heap (scaled sizes) or through a mnemo
 * allocator on its default stream (scaled or raw sizes); `slots` holds nslots
 * pointers. false on a failed allocation (mnemo: mn_last_error() says why). */
bool mn_anchor_seq_run_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void **slots);
bool mn_anchor_seq_run_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, bool scaled, void **slots);
/* The keep allocations: made before the runs, released after. *keep gets
 * nkeep pointers (release frees them and the array). */
bool mn_anchor_seq_keep_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void ***keep);
void mn_anchor_seq_release_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void **keep);
bool mn_anchor_seq_keep_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, bool scaled, void ***keep);
void mn_anchor_seq_release_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, void **keep);

/* ---- caching-allocator setups (SIM) ---------------------------------------------- */

/* Block sizes cycle through 64 distinct multiples of 512 B (512 B .. 32 KiB),
 * as bench_caching's. */
static inline size_t mn_anchor_size_of(int64_t i) { return (size_t)(1 + i % 64) * 512; }

/* The fixed size of the plain pairs (mn_anchor_size_of(5)). */
#define MN_ANCHOR_FIXED_SIZE ((size_t)3072)

typedef struct mn_anchor_caching_s {
  mn_allocator_t *a;
  int64_t cached;       /* free blocks in the free set (bench_caching's warm()) */
  void **live;          /* the live blocks between them (even indexes) */
  int64_t pending;      /* blocks freed while pending on stream b's events */
  mn_stream_t *b;       /* the stream whose work never completes; NULL when pending = 0 */
  mn_stream_t *c;       /* the stream the pending blocks were allocated on; NULL when pending = 0 */
  size_t want;          /* the size the pair asks for: a cached block fits it exactly */
} mn_anchor_caching_t;

/* A caching allocator on `dev` (default configuration) with, first, `pending`
 * blocks allocated on a stream C of their own, recorded on a stream B that has
 * queued work the SIM device never runs (until mn_anchor_caching_destroy),
 * and freed: each waits for an event on B (their segments are C's, so the
 * pair's blocks lie as they do with none pending: the difference is the cost
 * of the pending frees, not another layout); then `cached` free blocks, each
 * between two live ones, as bench_caching's warm(). The pair then allocates
 * and frees `want` bytes on the default stream. Exits with a message on failure. */
void mn_anchor_caching_create(mn_device_t dev, int64_t cached, int64_t pending, mn_anchor_caching_t *out);
void mn_anchor_caching_destroy(mn_anchor_caching_t *w);

/* Prints "<what>: <mnemo's message>" and exits(1). */
void mn_anchor_die(const char *what);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_BENCH_ALLOC_ANCHORS_H */
