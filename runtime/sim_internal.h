/* runtime/sim_internal.h: the SIM backend's shared state, private to the
 * runtime/sim_*.c files: the simulated device's layout (streams and their
 * queued operations, events, captures, graphs, address ranges, stream-ordered
 * pools), the device table and configuration, and the helpers one sim file
 * lends another. Threading: a device's fields are guarded by its (recursive)
 * lock, taken by SIM_LOCKED; functions marked "pre: lock held" (or taking a
 * sim_device) run with it held; the configuration by mn__sim_lock. */
#ifndef MNEMO_RUNTIME_SIM_INTERNAL_H
#define MNEMO_RUNTIME_SIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/mnemo.h"
#include "runtime/avl.h"
#include "runtime/backend.h"
#include "runtime/sim_graph.h"

#define SIM_MAX_DEVICES 16
/* Address space reserved per device, as a multiple of capacity: raw
 * allocations plus VMM reservations (each stream's expandable segments reserve
 * about the device's size). PROT_NONE + MAP_NORESERVE costs nothing, but
 * sanitizers limit the usable range, so smaller factors are tried in turn. */
#define SIM_VA_FACTOR_MAX 16
#define SIM_VA_FACTOR_MIN 2

typedef enum { OP_COPY, OP_SET, OP_HOST, OP_WAIT, OP_POOL_FREE } sim_op_kind;

typedef struct sim_stream sim_stream;
struct pool_block;

typedef struct sim_op {
  struct sim_op *next;
  sim_op_kind kind;
  mn__copy_kind copy_kind;
  void *dst;
  const void *src;
  size_t nbytes;
  int value;
  mn_host_fn fn;
  void *arg;
  sim_stream *wait_stream; /* OP_WAIT: satisfied when it has completed wait_target ops (a reference) */
  uint64_t wait_target;    /* OP_WAIT; OP_POOL_FREE: its own position on its stream */
} sim_op;

/* A stream. Events recorded on it and queued waits for it hold references,
 * so that destroying it costs only its own queue: a destroyed stream has run
 * all its work (so everything that refers to it is complete) and stays
 * allocated, unlisted, until the last reference goes. */
struct sim_stream {
  sim_stream *next, *prev; /* the device's list of created streams */
  sim_op *head, *tail;
  uint64_t queued;    /* ops ever queued */
  uint64_t completed; /* ops ever run */
  uint32_t refs;      /* events recorded on it, queued waits for it */
  bool dead;          /* destroyed: freed when refs reaches 0 */
  /* Pool blocks freed on it whose OP_POOL_FREE has not run (every pool of
   * the device), in free order: their targets never decrease. */
  struct pool_block *pend_head, *pend_tail;
  /* Capture: the capture it records into (began on it or joined), NULL when
   * not capturing; `front` is the set of nodes its next recorded operation
   * depends on; cap_id mirrors cap's id for the lock-free capture_id slot. */
  struct sim_capture *cap;
  sg_set front;
  _Atomic uint64_t cap_id;
};

typedef struct sim_event {
  struct sim_event *next, *prev;
  int device;         /* index of the SIM device that made it */
  sim_stream *stream; /* NULL: never recorded (complete); else a reference */
  uint64_t target;    /* complete when stream->completed >= target */
  /* Recorded on a capturing stream: the capture's id and the recorded point
   * (stream NULL then). Once that capture has ended the event is complete. */
  uint64_t cap_id;
  sg_set front;
} sim_event;

/* An active capture (mnemo/graph.h): begun on `origin`, joined by the streams
 * that waited on an event recorded in it (`members` streams in all, origin
 * included). `why` says what invalidated it. */
typedef struct sim_capture {
  struct sim_capture *next; /* the device's active captures */
  uint64_t id;
  sim_stream *origin;
  size_t members;
  bool invalidated;
  char why[200];
  sg_graph graph;
} sim_capture;

/* A graph ended from a capture: immutable until destroyed. */
typedef struct sim_graph {
  struct sim_graph *prev, *next; /* the device's live graphs */
  sg_graph g;
} sim_graph;

/* A raw allocation, a VMM reservation or a pool chunk, in the device's range
 * tree by start. `gap` is the free address space before it, down to the
 * previous range's end (or the reservation's base); max_gap, the largest gap
 * of its subtree, finds the lowest gap that fits in O(log n) (first fit). */
typedef struct sim_range {
  mn__avl_node node; /* first */
  uintptr_t start;
  size_t size;
  size_t gap, max_gap;
  uint8_t *mapped; /* reservations only: one flag per granule; NULL for raw allocations */
  uint16_t *access; /* reservations only: per granule, bit p = sim:p may access it (as cuMemSetAccess) */
  bool pool;       /* a chunk of the stream-ordered pool (not a raw allocation) */
  /* Shared with other processes (share_export): the range's bytes moved to a
   * memfd of the range's size; `shared` (reservations) flags the granules
   * mapped from it, a raw allocation is mapped from it whole. */
  bool has_share;
  int share_fd;
  uint8_t *shared;
  bool import;     /* a share_import mapping of another process's memory (not ours to count or free) */
} sim_range;

typedef struct sim_fault_arm {
  uint64_t until;     /* calls until the first failure (1 = next call) */
  uint64_t remaining; /* failures left; 0 = disarmed */
} sim_fault_arm;

/* The stream-ordered pool (cudaMallocAsync emulation): chunks of raw memory
 * (granularity multiples), each split into address-ordered blocks. A block is
 * USED, PENDING (freed on `stream`; its OP_POOL_FREE has not run yet: only
 * `stream` may reuse it) or FREE (anyone may). Adjacent FREE blocks merge, and
 * so do adjacent PENDING blocks of one stream (the merged block becomes FREE
 * with the later free). USED blocks sit in the pool's `live` tree by address
 * (free finds them); FREE and PENDING ones in its `avail` tree by (stream,
 * size, address), FREE ones under stream NULL, so that the best fit for a
 * stream, among FREE blocks or among its own PENDING ones, is one search.
 * A PENDING block is also on its stream's pending list, which the stream's
 * OP_POOL_FREE ops pop from the front: no operation walks the pool. */
typedef enum { PB_USED, PB_PENDING, PB_FREE } pool_block_state;

typedef struct pool_block {
  mn__avl_node node; /* first: in pool->live (USED) or pool->avail (FREE, PENDING) */
  struct pool_block *prev, *next;   /* the chunk's blocks, by address */
  struct pool_block *pprev, *pnext; /* PENDING: the stream's pending list */
  struct pool_chunk *chunk;
  uintptr_t start;
  size_t size;
  pool_block_state state;
  sim_stream *stream; /* PENDING: the freeing stream (NULL otherwise: the avail key) */
  uint64_t target;    /* PENDING: FREE once stream->completed reaches it */
} pool_block;

typedef struct pool_chunk {
  struct pool_chunk *prev, *next;   /* the pool's chunks */
  struct pool_chunk *uprev, *unext; /* the pool's unused chunks (one FREE block), if unused */
  bool unused;
  struct sim_pool *pool;
  uintptr_t start;
  size_t size;
  pool_block *blocks; /* lowest address first */
} pool_chunk;

typedef struct sim_pool {
  struct sim_pool *next;  /* the device's list of created pools */
  pool_chunk *chunks;
  pool_chunk *unused;     /* the releasable chunks, most recently unused first */
  mn__avl live;           /* USED blocks by start */
  mn__avl avail;          /* FREE and PENDING blocks by (stream, size, start) */
  size_t reserved, reserved_high; /* bytes of chunks */
  size_t used, used_high;         /* bytes of USED and PENDING blocks */
  size_t release_threshold;       /* chunks beyond it are released at the next pool call */
} sim_pool;

typedef struct sim_device {
  atomic_bool ready;
  pthread_mutex_t lock;
  uint8_t *base;
  size_t va_size;
  mn__avl ranges; /* sim_range by start, disjoint */
  sim_stream default_stream;
  sim_stream *streams;
  sim_event *events;
  sim_fault_arm faults[MN_SIM_FAULT_COUNT];
  mn_sim_stats_t stats;
  sim_pool pool;   /* the default pool */
  sim_pool *pools; /* pools made by pool_create */
  uint16_t peers;  /* bit p: sim:p enabled peer access to this device's raw memory */
  sim_capture *captures; /* active captures */
  sim_graph *graphs;     /* live graphs */
} sim_device;


extern pthread_mutex_t mn__sim_lock;
extern mn_sim_config_t mn__sim_cfg;

/* Takes device `index` (set up on first use) into `d`, locked; returns its
 * error from the calling function if it cannot be set up. */
#define SIM_LOCKED(index, d)                   \
  sim_device *d = NULL;                        \
  {                                            \
    mn_status st_ = mn__sim_get((index), &d);  \
    if (st_ != MN_OK) return st_;              \
  }                                            \
  pthread_mutex_lock(&d->lock)

/* sim_backend.c */
mn_status mn__sim_get(int index, sim_device **out);
/* Unlocks d and returns st (the end of a SIM_LOCKED section). */
static inline mn_status mn__sim_unlock_ret(sim_device *d, mn_status st) {
  pthread_mutex_unlock(&d->lock);
  return st;
}
bool mn__sim_fault_fires(sim_device *d, mn_sim_fault kind);

/* sim_memory.c */
long mn__sim_starts_find(const void *records, size_t n, size_t stride, uintptr_t p);
int mn__sim_range_cmp(const mn__avl_node *a, const mn__avl_node *b);
size_t mn__sim_range_max_gap(const mn__avl_node *n);
bool mn__sim_range_update(mn__avl_node *n);
sim_range *mn__sim_range_next(const sim_range *r);
sim_range *mn__sim_range_find(const sim_device *d, uintptr_t p);
mn_status mn__sim_range_insert(sim_device *d, int index, size_t size, bool reserved, sim_range **out);
void mn__sim_range_remove(sim_device *d, sim_range *r);
bool mn__sim_range_is_mapped(const sim_device *d, const void *ptr, size_t n);
void mn__sim_phys_add(sim_device *d, size_t n);
size_t mn__sim_round_gran(size_t n);
mn_status mn__sim_raw_alloc(int index, size_t nbytes, void **out);
void mn__sim_pages_release(void *p, size_t n);
void mn__sim_share_unmap(void *p, size_t n);
mn_status mn__sim_raw_free(int index, void *ptr);
mn_status mn__sim_va_reserve(int index, size_t nbytes, void **base);
mn_status mn__sim_va_release(int index, void *base, size_t nbytes);
mn_status mn__sim_mem_map(int index, void *addr, size_t nbytes);
mn_status mn__sim_mem_set_access(int index, void *addr, size_t nbytes, int peer);
mn_status mn__sim_mem_unmap(int index, void *addr, size_t nbytes, bool synced);

/* sim_streams.c */
/* The stream behind a backend handle (NULL: the device's default stream). */
static inline sim_stream *mn__sim_stream_of(sim_device *d, void *handle) {
  return handle ? (sim_stream *)handle : &d->default_stream;
}
void mn__sim_op_free(sim_op *op);
size_t mn__sim_stream_advance(sim_device *d, sim_stream *s, size_t n);
void mn__sim_device_sync(sim_device *d);
mn_status mn__sim_enqueue(sim_device *d, sim_stream *s, sim_op *op);
mn_status mn__sim_new_op(sim_op_kind kind, sim_op **out);
mn_status mn__sim_stream_create(int index, void **out);
mn_status mn__sim_stream_destroy(int index, void *handle);
mn_status mn__sim_stream_query(int index, void *handle, bool *done);
mn_status mn__sim_stream_synchronize(int index, void *handle);
mn_status mn__sim_stream_wait_event(int index, void *handle, void *event);
mn_status mn__sim_launch_host(int index, void *handle, mn_host_fn fn, void *arg);
mn_status mn__sim_event_create(int index, void **out);
mn_status mn__sim_event_destroy(int index, void *event);
mn_status mn__sim_event_record(int index, void *event, void *handle);
mn_status mn__sim_event_query(int index, void *event, bool *done);
/* The progress count (runtime/backend.h's progress slot; sim_streams.c). */
uint64_t mn__sim_progress(int index);
mn_status mn__sim_event_synchronize(int index, void *event);
mn_status mn__sim_memcpy_async(int index, void *dst, const void *src, size_t nbytes, mn__copy_kind kind,
                                  void *handle);
mn_status mn__sim_memset_async(int index, void *dst, int value, size_t nbytes, void *handle);

/* sim_capture.c */
sim_capture *mn__sim_capture_find(const sim_device *d, uint64_t id);
void mn__sim_capture_invalidate(sim_capture *c, const char *why);
mn_status mn__sim_capture_usable(const sim_capture *c, const char *func);
mn_status mn__sim_capture_refuse_device(sim_device *d, int index, const char *func, const char *what);
mn_status mn__sim_capture_refuse(sim_capture *c, int index, const char *func, const char *what);
mn_status mn__sim_capture_op(sim_stream *s, sim_op *op);
mn_status mn__sim_capture_begin(int index, void *handle);
mn_status mn__sim_capture_end(int index, void *handle, void **graph, size_t *nodes);
mn_status mn__sim_capture_status(int index, void *handle, mn_capture_status *status, uint64_t *id);
mn_status mn__sim_capture_id(int index, void *handle, uint64_t *id);
mn_status mn__sim_capture_marker(int index, void *handle, uint64_t *marker);
mn_status mn__sim_capture_reaches(int index, void *handle, uint64_t marker, bool *reached);
mn_status mn__sim_graph_launch(int index, void *graph, void *handle);
mn_status mn__sim_graph_destroy(int index, void *graph);

/* sim_pool.c */
void mn__sim_pool_init(sim_pool *pool);
void mn__sim_pool_complete_frees(sim_stream *s, uint64_t target);
mn_status mn__sim_pool_create(int index, void **out);
mn_status mn__sim_pool_destroy(int index, void *handle);
mn_status mn__sim_alloc_async(int index, void *handle_pool, size_t nbytes, void *handle, void **out);
mn_status mn__sim_free_async(int index, void *handle_pool, void *ptr, void *handle);
mn_status mn__sim_pool_trim(int index, void *handle_pool, size_t keep_bytes);
mn_status mn__sim_pool_stats(int index, void *handle_pool, size_t *reserved_current, size_t *reserved_high,
                                size_t *used_current, size_t *used_high);
mn_status mn__sim_pool_set_release_threshold(int index, void *handle_pool, size_t bytes);
mn_status mn__sim_pool_reset_peak(int index, void *handle_pool);
mn_status mn__sim_pool_check(sim_device *d, int index);

/* sim_host.c */
mn_status mn__sim_host_alloc(int index, size_t nbytes, void **out);
mn_status mn__sim_host_free(int index, void *ptr);
mn_status mn__sim_host_register(int index, void *ptr, size_t nbytes);
mn_status mn__sim_host_unregister(int index, void *ptr);
mn_status mn__sim_host_is_pinned(int index, const void *ptr, bool *pinned);
mn_status mn__sim_can_access_peer(int index, int peer, bool *can);
mn_status mn__sim_enable_peer_access(int index, int peer);
mn_status mn__sim_memcpy_peer_async(int index, void *dst, int dst_index, const void *src, int src_index,
                                       size_t nbytes, void *handle);
mn_status mn__sim_check_range(int index, const void *ptr, size_t nbytes);

/* sim_share.c */
mn_status mn__sim_share_export(int index, void *ptr, size_t nbytes, mn__share_mem_t *out);
mn_status mn__sim_share_import(int index, const mn__share_mem_t *in, void **base, size_t *size);
mn_status mn__sim_share_close(int index, void *base);

#endif /* MNEMO_RUNTIME_SIM_INTERNAL_H */
