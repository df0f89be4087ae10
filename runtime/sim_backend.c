/* runtime/sim_backend.c: the SIM backend, a deterministic simulated GPU. Its
 * memory is a lazily backed host reservation; its streams are FIFO queues that
 * run only when advanced or synchronized; faults can be injected. Each device
 * has one (recursive) lock; host functions run with it held, so they may call
 * back into the same SIM device. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "runtime/avl.h"
#include "runtime/backend.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_graph.h"
#include "runtime/sim_internal.h"

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

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_sim_config_t g_cfg;
static bool g_cfg_loaded;
static atomic_int g_device_count = -1; /* g_cfg.device_count once loaded, else -1 */
static sim_device g_dev[SIM_MAX_DEVICES];

mn_sim_config_t mn_sim_config_default(void) {
  mn_sim_config_t c = {.device_count = 1,
                       .capacity = (size_t)80 << 30,
                       .granularity = (size_t)2 << 20,
                       .eager = false};
  return c;
}

static mn_status validate_config(const char *func, const mn_sim_config_t *c) {
  long page = sysconf(_SC_PAGESIZE);
  if (c->device_count < 1 || c->device_count > SIM_MAX_DEVICES)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "device_count=%d is not in 1..%d",
                     c->device_count, SIM_MAX_DEVICES);
  if (c->granularity < (size_t)page || (c->granularity & (c->granularity - 1)) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "granularity=%zu must be a power of two >= the page size (%ld)", c->granularity, page);
  if (c->capacity < c->granularity || c->capacity % c->granularity != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "capacity=%zu must be a non-zero multiple of granularity=%zu", c->capacity,
                     c->granularity);
  if (c->capacity > ((size_t)1 << 44))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "capacity=%zu exceeds 16 TiB", c->capacity);
  return MN_OK;
}

/* pre: g_lock held. Loads the defaults and the environment once. */
static void load_config_locked(void) {
  if (g_cfg_loaded) return;
  g_cfg = mn_sim_config_default();
  const char *cap = mn__env(MN__ENV_SIM_CAPACITY);
  size_t v;
  if (cap && mn_bytes_parse(cap, &v) == MN_OK) {
    mn_sim_config_t c = g_cfg;
    c.capacity = v;
    if (validate_config(__func__, &c) == MN_OK) g_cfg = c;
  }
  const char *eager = mn__env(MN__ENV_SIM_EAGER);
  if (eager && eager[0] == '1') g_cfg.eager = true;
  g_cfg_loaded = true;
  atomic_store_explicit(&g_device_count, g_cfg.device_count, memory_order_release);
}

static int range_cmp(const mn__avl_node *a, const mn__avl_node *b);
static bool range_update(mn__avl_node *n);
static void pool_init(sim_pool *pool);

/* Returns the device, initializing it on first use. */
static mn_status sim_get(int index, sim_device **out) {
  sim_device *d = &g_dev[index];
  if (atomic_load_explicit(&d->ready, memory_order_acquire)) {
    *out = d;
    return MN_OK;
  }
  pthread_mutex_lock(&g_lock);
  load_config_locked();
  mn_status st = MN_OK;
  if (!atomic_load(&d->ready)) {
    size_t va = 0;
    void *base = MAP_FAILED;
    for (size_t f = SIM_VA_FACTOR_MAX; f >= SIM_VA_FACTOR_MIN && base == MAP_FAILED; f /= 2) {
      va = g_cfg.capacity * f;
      base = mmap(NULL, va, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (base == MAP_FAILED) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: cannot reserve %zu bytes of address space: %s",
                     index, va, strerror(errno));
    } else {
      pthread_mutexattr_t attr;
      pthread_mutexattr_init(&attr);
      pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
      pthread_mutex_init(&d->lock, &attr);
      pthread_mutexattr_destroy(&attr);
      d->base = base;
      d->va_size = va;
      mn__avl_init(&d->ranges, range_cmp, range_update);
      pool_init(&d->pool);
      atomic_store_explicit(&d->ready, true, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (st == MN_OK) *out = d;
  return st;
}

#define SIM_LOCKED(index, d)                   \
  sim_device *d = NULL;                        \
  {                                            \
    mn_status st_ = sim_get((index), &d);      \
    if (st_ != MN_OK) return st_;              \
  }                                            \
  pthread_mutex_lock(&d->lock)

static mn_status unlock_ret(sim_device *d, mn_status st) {
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* True when the armed fault of this kind fires on this call. pre: lock held. */
static bool fault_fires(sim_device *d, mn_sim_fault kind) {
  sim_fault_arm *a = &d->faults[kind];
  if (a->remaining == 0) return false;
  if (a->until > 1) {
    a->until--;
    return false;
  }
  a->remaining--;
  d->stats.faults_fired++;
  return true;
}

/* ---- address ranges ----------------------------------------------------- */

/* Index of the last of n records (each `stride` bytes, sorted by a leading
 * `uintptr_t start` field) whose start <= p, or -1. */
static long starts_find(const void *records, size_t n, size_t stride, uintptr_t p) {
  long lo = 0, hi = (long)n - 1, found = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    uintptr_t start;
    memcpy(&start, (const char *)records + (size_t)mid * stride, sizeof start);
    if (start <= p) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

static int range_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  uintptr_t x = ((const sim_range *)a)->start, y = ((const sim_range *)b)->start;
  return x < y ? -1 : x > y;
}

static int range_key(const void *key, const mn__avl_node *n) {
  uintptr_t x = *(const uintptr_t *)key, y = ((const sim_range *)n)->start;
  return x < y ? -1 : x > y;
}

static size_t range_max_gap(const mn__avl_node *n) { return n ? ((const sim_range *)n)->max_gap : 0; }

static bool range_update(mn__avl_node *n) {
  sim_range *r = (sim_range *)n;
  size_t m = r->gap, l = range_max_gap(n->left), g = range_max_gap(n->right);
  if (l > m) m = l;
  if (g > m) m = g;
  bool changed = m != r->max_gap;
  r->max_gap = m;
  return changed;
}

static sim_range *range_next(const sim_range *r) { return (sim_range *)mn__avl_next(&r->node); }

/* The range with the last start <= p, or NULL. */
static sim_range *range_find(const sim_device *d, uintptr_t p) {
  return (sim_range *)mn__avl_floor(&d->ranges, &p, range_key);
}

/* The lowest range whose gap holds `size` bytes, or NULL (then only the
 * space after the last range may). */
static sim_range *gap_first_fit(const sim_device *d, size_t size) {
  mn__avl_node *n = d->ranges.root;
  if (range_max_gap(n) < size) return NULL;
  for (;;) {
    if (range_max_gap(n->left) >= size) n = n->left;
    else if (((sim_range *)n)->gap >= size) return (sim_range *)n;
    else n = n->right; /* its max_gap holds size: n's subtree does and the rest does not */
  }
}

/* First fit: the lowest free gap of `size` bytes in the address space, as a
 * scan of the ranges in address order would find it; inserts the range. */
static mn_status range_insert(sim_device *d, int index, size_t size, bool reserved, sim_range **out) {
  uintptr_t base = (uintptr_t)d->base, end = base + d->va_size, start;
  sim_range *succ = gap_first_fit(d, size);
  if (succ) {
    start = succ->start - succ->gap;
  } else {
    const sim_range *last = (const sim_range *)mn__avl_last(&d->ranges);
    start = last ? last->start + last->size : base;
    if (end - start < size)
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: address space exhausted (%zu bytes asked)",
                       index, size);
  }
  sim_range *r = mn__calloc(1, sizeof *r);
  if (r && reserved) {
    r->mapped = mn__calloc(size / g_cfg.granularity, 1);
    r->access = r->mapped ? mn__calloc(size / g_cfg.granularity, sizeof *r->access) : NULL;
  }
  if (!r || (reserved && !r->access)) {
    if (r) free(r->mapped);
    free(r);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  r->start = start;
  r->size = size;
  r->gap = 0; /* it begins its gap */
  if (succ) {
    succ->gap -= size;
    mn__avl_update_path(&d->ranges, &succ->node);
  }
  mn__avl_insert(&d->ranges, &r->node);
  *out = r;
  return MN_OK;
}

/* Takes r out; its bytes and gap join its successor's gap. */
static void range_remove(sim_device *d, sim_range *r) {
  sim_range *succ = range_next(r);
  if (succ) {
    succ->gap += r->gap + r->size;
    mn__avl_update_path(&d->ranges, &succ->node);
  }
  mn__avl_remove(&d->ranges, &r->node);
  if (r->has_share) close(r->share_fd);
  free(r->shared);
  free(r->mapped);
  free(r->access);
  free(r);
}

/* Whether [p, p+n) is device memory that is mapped right now. pre: lock held. */
static bool range_is_mapped(const sim_device *d, const void *ptr, size_t n) {
  uintptr_t p = (uintptr_t)ptr;
  const sim_range *r = range_find(d, p);
  if (!r) return false;
  if (n > r->size || p - r->start > r->size - n) return false;
  if (!r->mapped) return true;
  size_t g = g_cfg.granularity;
  for (size_t k = (p - r->start) / g; k <= (p - r->start + n - 1) / g; k++)
    if (!r->mapped[k]) return false;
  return true;
}

static void phys_add(sim_device *d, size_t n) {
  d->stats.mapped_bytes += n;
  if (d->stats.mapped_bytes > d->stats.peak_mapped_bytes) d->stats.peak_mapped_bytes = d->stats.mapped_bytes;
}

static mn_status check_capacity(sim_device *d, int index, const char *func, size_t asked, size_t rounded) {
  if (fault_fires(d, MN_SIM_FAULT_RAW_ALLOC))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "sim:%d: injected fault: raw allocation of %zu bytes failed",
                     index, asked);
  if (rounded > g_cfg.capacity - d->stats.mapped_bytes)
    return mn__error(MN_ERR_OUT_OF_MEMORY, func,
                     "sim:%d out of memory: asked %zu bytes (%zu rounded), %zu of %zu in use", index, asked,
                     rounded, d->stats.mapped_bytes, g_cfg.capacity);
  return MN_OK;
}

static size_t round_gran(size_t n) {
  size_t g = g_cfg.granularity;
  return n > SIZE_MAX - g ? 0 : (n + g - 1) / g * g;
}

/* ---- queues ---------------------------------------------------------------- */

static sim_stream *stream_of(sim_device *d, void *handle) {
  return handle ? (sim_stream *)handle : &d->default_stream;
}

static void pool_complete_frees(sim_stream *s, uint64_t target);

/* References on streams (events recorded on them, queued waits for them). */
static void stream_ref(sim_stream *s) { s->refs++; }

static void stream_free(sim_stream *s) {
  sg_set_free(&s->front);
  free(s);
}

static void stream_unref(sim_stream *s) {
  if (--s->refs == 0 && s->dead) stream_free(s);
}

static bool op_ready(const sim_op *op) {
  return op->kind != OP_WAIT || !op->wait_stream || op->wait_stream->completed >= op->wait_target;
}

static void op_free(sim_op *op) {
  if (op->kind == OP_WAIT && op->wait_stream) stream_unref(op->wait_stream);
  free(op);
}

static void op_run(sim_device *d, sim_stream *s, const sim_op *op) {
  switch (op->kind) {
    case OP_COPY: {
      bool dst_dev = op->copy_kind == MN__COPY_H2D || op->copy_kind == MN__COPY_D2D;
      bool src_dev = op->copy_kind == MN__COPY_D2H || op->copy_kind == MN__COPY_D2D;
      if ((dst_dev && !range_is_mapped(d, op->dst, op->nbytes)) ||
          (src_dev && !range_is_mapped(d, op->src, op->nbytes))) {
        d->stats.illegal_accesses++;
        return;
      }
      memmove(op->dst, op->src, op->nbytes);
      return;
    }
    case OP_SET:
      if (!range_is_mapped(d, op->dst, op->nbytes)) {
        d->stats.illegal_accesses++;
        return;
      }
      memset(op->dst, op->value, op->nbytes);
      return;
    case OP_HOST:
      op->fn(op->arg);
      return;
    case OP_WAIT:
      return;
    case OP_POOL_FREE:
      pool_complete_frees(s, op->wait_target);
      return;
  }
}

/* Runs up to n ops of s in order, stopping at an unsatisfied wait. pre: lock held. */
static size_t stream_advance(sim_device *d, sim_stream *s, size_t n) {
  size_t ran = 0;
  while (ran < n && s->head && op_ready(s->head)) {
    sim_op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    op_run(d, s, op);
    s->completed++;
    d->stats.ops_run++;
    ran++;
    op_free(op);
  }
  return ran;
}

/* Runs s until it has completed `target` ops, first running the streams it
 * waits on. Waits capture points queued before them, so there are no cycles. */
static void stream_run_to(sim_device *d, sim_stream *s, uint64_t target) {
  while (s->completed < target) {
    stream_advance(d, s, (size_t)(target - s->completed));
    if (s->completed >= target || !s->head) break;
    stream_run_to(d, s->head->wait_stream, s->head->wait_target);
  }
}

static void device_drain(sim_device *d) {
  stream_run_to(d, &d->default_stream, d->default_stream.queued);
  for (sim_stream *s = d->streams; s; s = s->next) stream_run_to(d, s, s->queued);
}

/* A whole-device synchronization (cudaDeviceSynchronize): drains and counts. */
static void device_sync(sim_device *d) {
  device_drain(d);
  d->stats.synchronizes++;
}

/* ---- capture ------------------------------------------------------------------
 * While a stream captures, what would be queued on it becomes a node of its
 * capture's graph, depending on the stream's frontier, and the node becomes
 * its frontier; an event recorded on it takes a copy of the frontier, and a
 * stream waiting on that event joins the capture (or, already in it, adds the
 * event's nodes to its frontier). As CUDA's global mode, a call that would
 * synchronize with captured work fails and invalidates the capture(s). */

static atomic_uint_fast64_t g_capture_ids = 1; /* process-unique, never reused */

static sim_capture *capture_find(const sim_device *d, uint64_t id) {
  sim_capture *c = d->captures;
  while (c && c->id != id) c = c->next;
  return c;
}

/* Marks c invalidated; the first reason stays. */
static void capture_invalidate(sim_capture *c, const char *why) {
  if (c->invalidated) return;
  c->invalidated = true;
  snprintf(c->why, sizeof c->why, "%s", why);
}

/* An invalidated capture records nothing more. */
static mn_status capture_usable(const sim_capture *c, const char *func) {
  if (!c->invalidated) return MN_OK;
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "the stream captures into capture %llu, which was invalidated (%s); end it with "
                   "mn_stream_end_capture and discard it",
                   (unsigned long long)c->id, c->why);
}

/* A call not allowed while the device has an active capture (device
 * synchronize, raw free, unmap): every active capture is invalidated. */
static mn_status capture_refuse_device(sim_device *d, int index, const char *func, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "%s on sim:%d during the capture", what, index);
  for (sim_capture *c = d->captures; c; c = c->next) capture_invalidate(c, why);
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "sim:%d: %s is not allowed while a stream of the device captures (capture %llu; "
                   "CUDA's global capture mode): the capture is invalidated",
                   index, what, (unsigned long long)d->captures->id);
}

/* A call that would wait for captured work (capturing stream synchronize or
 * query, query or synchronize of an event recorded in a capture). */
static mn_status capture_refuse(sim_capture *c, int index, const char *func, const char *what) {
  char why[200];
  snprintf(why, sizeof why, "%s on sim:%d", what, index);
  capture_invalidate(c, why);
  return mn__error(MN_ERR_INVALID_STATE, func,
                   "sim:%d: %s is not allowed during capture %llu (it would wait for captured work): the "
                   "capture is invalidated",
                   index, what, (unsigned long long)c->id);
}

/* Records op (which it frees) as a node of s's capture. */
static mn_status capture_op(sim_stream *s, sim_op *op) {
  sim_capture *c = s->cap;
  sg_node node = {.kind = SG_EMPTY};
  switch (op->kind) {
    case OP_COPY:
      node = (sg_node){.kind = SG_COPY, .copy_kind = op->copy_kind, .dst = op->dst, .src = op->src,
                       .nbytes = op->nbytes};
      break;
    case OP_SET: node = (sg_node){.kind = SG_SET, .dst = op->dst, .value = op->value, .nbytes = op->nbytes}; break;
    case OP_HOST: node = (sg_node){.kind = SG_HOST, .fn = op->fn, .arg = op->arg}; break;
    case OP_WAIT:
    case OP_POOL_FREE: break; /* never reach here: waits and pool frees are handled before */
  }
  mn_status st = capture_usable(c, __func__);
  if (st == MN_OK && node.kind == SG_EMPTY)
    st = mn__error(MN_ERR_INTERNAL, __func__, "operation kind %d cannot be captured", (int)op->kind);
  uint32_t id = 0;
  if (st == MN_OK) st = sg_set_reserve(&s->front, 1);
  if (st == MN_OK) st = sg_add(&c->graph, &node, &s->front, &id);
  if (st == MN_OK) sg_set_one(&s->front, id);
  op_free(op);
  return st;
}

/* Ends capture c: no stream captures into it any more; it is unlinked and
 * freed (its graph too, unless the caller moved it out). */
static void capture_close(sim_device *d, sim_capture *c) {
  for (sim_stream *s = d->streams; s; s = s->next) {
    if (s->cap != c) continue;
    s->cap = NULL;
    s->front.n = 0;
    atomic_store_explicit(&s->cap_id, 0, memory_order_release);
  }
  sim_capture **link = &d->captures;
  while (*link != c) link = &(*link)->next;
  *link = c->next;
  sg_graph_free(&c->graph);
  free(c);
}

/* Queues op on s (taking ownership); eager devices run it at once. A
 * capturing stream records it instead. */
static mn_status enqueue(sim_device *d, sim_stream *s, sim_op *op) {
  if (s->cap) return capture_op(s, op);
  op->next = NULL;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  s->queued++;
  d->stats.ops_queued++;
  if (g_cfg.eager) stream_run_to(d, s, s->queued);
  return MN_OK;
}

static mn_status new_op(sim_op_kind kind, sim_op **out) {
  sim_op *op = mn__calloc(1, sizeof *op);
  if (!op) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a queued operation");
  op->kind = kind;
  *out = op;
  return MN_OK;
}

/* ---- backend slots ------------------------------------------------------- */

static mn_status sim_device_count(int *count) {
  /* Asked on every validated call: lock-free once the configuration is known. */
  int n = atomic_load_explicit(&g_device_count, memory_order_acquire);
  if (n < 0) {
    pthread_mutex_lock(&g_lock);
    load_config_locked();
    n = g_cfg.device_count;
    pthread_mutex_unlock(&g_lock);
  }
  *count = n;
  return MN_OK;
}

static mn_status sim_get_properties(int index, mn_device_props_t *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "mnemo sim%s", g_cfg.eager ? " (eager)" : "");
  p->total_memory = g_cfg.capacity;
  p->multiprocessors = 1;
  p->alloc_granularity = g_cfg.granularity;
  p->supports_vmm = true;
  p->is_host_accessible = true;
  return MN_OK;
}

static mn_status sim_mem_info(int index, size_t *free_bytes, size_t *total_bytes) {
  SIM_LOCKED(index, d);
  *free_bytes = g_cfg.capacity - d->stats.mapped_bytes;
  *total_bytes = g_cfg.capacity;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_synchronize(int index) {
  SIM_LOCKED(index, d);
  if (d->captures) return unlock_ret(d, capture_refuse_device(d, index, __func__, "a device synchronize"));
  device_sync(d);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_raw_alloc(int index, size_t nbytes, void **out) {
  SIM_LOCKED(index, d);
  size_t rounded = round_gran(nbytes);
  mn_status st = check_capacity(d, index, __func__, nbytes, rounded ? rounded : SIZE_MAX);
  sim_range *r = NULL;
  if (st == MN_OK) st = range_insert(d, index, rounded, false, &r);
  if (st == MN_OK && mprotect((void *)r->start, rounded, PROT_READ | PROT_WRITE) != 0) {
    range_remove(d, r);
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  }
  if (st == MN_OK) {
    phys_add(d, rounded);
    d->stats.raw_allocs++;
    *out = (void *)r->start;
  }
  return unlock_ret(d, st);
}

/* Gives pages back to the OS and makes them inaccessible again. */
static void pages_release(void *p, size_t n) {
  madvise(p, n, MADV_DONTNEED);
  mprotect(p, n, PROT_NONE);
}

/* Puts private, inaccessible address space back over shared pages (their
 * memfd keeps them for other processes that map it). */
static void share_unmap(void *p, size_t n) {
  if (mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    pages_release(p, n); /* cannot happen for a range we own; at least make it inaccessible */
}

static mn_status sim_raw_free(int index, void *ptr) {
  SIM_LOCKED(index, d);
  uintptr_t p = (uintptr_t)ptr;
  sim_range *r = range_find(d, p);
  for (int pass = 0; pass < 2; pass++) {
    if (!r || r->start != p || r->mapped || r->pool || r->import)
      return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                     "sim:%d: %p is not a live raw allocation", index, ptr));
    if (pass == 1) break;
    if (d->captures) return unlock_ret(d, capture_refuse_device(d, index, __func__, "a raw free"));
    /* As cudaFree, freeing synchronizes the device first; then looks again
     * (a host function it ran may have freed the range). */
    device_sync(d);
    r = range_find(d, p);
  }
  size_t size = r->size;
  if (r->has_share) share_unmap(ptr, size); /* importers keep their own mapping of the memfd */
  else pages_release(ptr, size);
  range_remove(d, r);
  d->stats.mapped_bytes -= size;
  d->stats.raw_frees++;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_va_reserve(int index, size_t nbytes, void **base) {
  SIM_LOCKED(index, d);
  size_t rounded = round_gran(nbytes);
  sim_range *r = NULL;
  mn_status st = rounded ? range_insert(d, index, rounded, true, &r)
                         : mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: %zu bytes is too large", index, nbytes);
  if (st == MN_OK) {
    d->stats.live_reservations++;
    *base = (void *)r->start;
  }
  return unlock_ret(d, st);
}

/* Finds the reservation holding [addr, addr+n), granule-aligned. */
static mn_status find_reserved(sim_device *d, int index, const char *func, void *addr, size_t n,
                               sim_range **out) {
  uintptr_t p = (uintptr_t)addr;
  size_t g = g_cfg.granularity;
  if (p % g || n % g)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: addr=%p and nbytes=%zu must be multiples of %zu",
                     index, addr, n, g);
  sim_range *r = range_find(d, p);
  if (!r || !r->mapped || n > r->size || p - r->start > r->size - n)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: [%p, +%zu) is not inside a reserved range",
                     index, addr, n);
  *out = r;
  return MN_OK;
}

static mn_status sim_va_release(int index, void *base, size_t nbytes) {
  SIM_LOCKED(index, d);
  sim_range *r = range_find(d, (uintptr_t)base);
  if (!r || r->start != (uintptr_t)base || !r->mapped || (nbytes && round_gran(nbytes) != r->size))
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %p (+%zu) is not a live reservation", index, base, nbytes));
  for (size_t k = 0; k < r->size / g_cfg.granularity; k++)
    if (r->mapped[k])
      return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                     "sim:%d: reservation %p still has mapped pages", index, base));
  range_remove(d, r);
  d->stats.live_reservations--;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_mem_map(int index, void *addr, size_t nbytes) {
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_reserved(d, index, __func__, addr, nbytes, &r);
  if (st != MN_OK) return unlock_ret(d, st);
  size_t g = g_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  for (size_t k = first; k < first + count; k++)
    if (r->mapped[k])
      return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: page %p is already mapped",
                                     index, (void *)(r->start + k * g)));
  st = check_capacity(d, index, __func__, nbytes, nbytes);
  if (st == MN_OK && mprotect(addr, nbytes, PROT_READ | PROT_WRITE) != 0)
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  if (st != MN_OK) return unlock_ret(d, st);
  memset(r->mapped + first, 1, count);
  /* the device only, as cuMemMap + cuMemSetAccess for it: peers need mem_set_access */
  for (size_t k = first; k < first + count; k++) r->access[k] = (uint16_t)(1u << index);
  phys_add(d, nbytes);
  d->stats.maps++;
  return unlock_ret(d, MN_OK);
}

/* The reservation holding [addr, addr+n), every page of it mapped. */
static mn_status find_mapped(sim_device *d, int index, const char *func, void *addr, size_t n, sim_range **out) {
  sim_range *r = NULL;
  mn_status st = find_reserved(d, index, func, addr, n, &r);
  if (st != MN_OK) return st;
  size_t g = g_cfg.granularity, first = ((uintptr_t)addr - r->start) / g;
  for (size_t k = first; k < first + n / g; k++)
    if (!r->mapped[k])
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: page %p is not mapped", index,
                       (void *)(r->start + k * g));
  *out = r;
  return MN_OK;
}

/* As cuMemSetAccess: `peer` may reach the mapped pages [addr, addr+nbytes) of
 * `index` until they are unmapped. */
static mn_status sim_mem_set_access(int index, void *addr, size_t nbytes, int peer) {
  if (peer < 0 || peer >= SIM_MAX_DEVICES || peer == index)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d cannot be granted memory of sim:%d", peer, index);
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_mapped(d, index, __func__, addr, nbytes, &r);
  if (st != MN_OK) return unlock_ret(d, st);
  size_t g = g_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  for (size_t k = first; k < first + count; k++) r->access[k] |= (uint16_t)(1u << peer);
  return unlock_ret(d, MN_OK);
}

/* As CUDA's mem_unmap: synchronizes the device first unless the caller did. */
static mn_status sim_mem_unmap(int index, void *addr, size_t nbytes, bool synced) {
  SIM_LOCKED(index, d);
  sim_range *r = NULL;
  mn_status st = find_mapped(d, index, __func__, addr, nbytes, &r);
  if (st == MN_OK && d->captures) return unlock_ret(d, capture_refuse_device(d, index, __func__, "an unmap"));
  if (st == MN_OK && !synced) {
    device_sync(d);
    /* the work it ran (host functions, pool frees) may have moved the ranges */
    st = find_mapped(d, index, __func__, addr, nbytes, &r);
  }
  if (st != MN_OK) return unlock_ret(d, st);
  size_t g = g_cfg.granularity, first = ((uintptr_t)addr - r->start) / g, count = nbytes / g;
  pages_release(addr, nbytes);
  if (r->shared)
    for (size_t k = first; k < first + count; k++)
      if (r->shared[k]) { /* its bytes leave the memfd too */
        share_unmap((void *)(r->start + k * g), g);
        if (fallocate(r->share_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(k * g), (off_t)g) != 0) {
          /* the memfd keeps those bytes until the reservation is released */
        }
        r->shared[k] = 0;
      }
  memset(r->mapped + first, 0, count);
  memset(r->access + first, 0, count * sizeof *r->access);
  d->stats.mapped_bytes -= nbytes;
  d->stats.unmaps++;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_stream_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__calloc(1, sizeof *s);
  if (!s) return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  s->next = d->streams;
  if (d->streams) d->streams->prev = s;
  d->streams = s;
  d->stats.live_streams++;
  *out = s;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_stream_destroy(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = handle;
  if (s->cap)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                   "sim:%d: the stream %s capture %llu; end the capture first", index,
                                   s->cap->origin == s ? "captures into" : "joined", (unsigned long long)s->cap->id));
  /* As CUDA, queued work still completes: run it now (host functions may
   * queue more). Then whatever refers to s (events recorded on it, waits for
   * it) is complete for good: s stays allocated, unlisted, until the last of
   * them lets go, so nothing else is walked here. */
  while (s->completed < s->queued) stream_run_to(d, s, s->queued);
  if (s->prev) s->prev->next = s->next;
  else d->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  d->stats.live_streams--;
  s->dead = true;
  if (s->refs == 0) stream_free(s);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_stream_query(int index, void *handle, bool *done) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  if (s->cap) return unlock_ret(d, capture_refuse(s->cap, index, __func__, "a query of a capturing stream"));
  *done = s->head == NULL;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_stream_synchronize(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  if (s->cap) return unlock_ret(d, capture_refuse(s->cap, index, __func__, "a synchronize of a capturing stream"));
  stream_run_to(d, s, s->queued);
  return unlock_ret(d, MN_OK);
}

/* A wait where the event was recorded in an active capture (ec) or the
 * waiting stream t captures. */
static mn_status capture_wait(sim_device *d, int index, sim_stream *t, sim_event *e, sim_capture *ec) {
  if (!ec) { /* t captures; e is not part of an active capture */
    if (!e->stream) return MN_OK; /* never recorded, or recorded in a capture that has ended: complete */
    char why[200];
    snprintf(why, sizeof why, "sim:%d: a capturing stream waited on an event recorded outside the capture", index);
    capture_invalidate(t->cap, why);
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "sim:%d: a stream capturing into capture %llu cannot wait on an event recorded outside the "
                     "capture (as CUDA): the capture is invalidated",
                     index, (unsigned long long)t->cap->id);
  }
  mn_status st = capture_usable(ec, __func__);
  if (st != MN_OK) return st;
  if (t->cap == ec) return sg_set_union(&t->front, &e->front);
  if (t->cap) {
    char why[200];
    snprintf(why, sizeof why, "sim:%d: a wait tried to merge captures %llu and %llu", index,
             (unsigned long long)t->cap->id, (unsigned long long)ec->id);
    capture_invalidate(t->cap, why);
    capture_invalidate(ec, why);
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "sim:%d: a stream of capture %llu cannot wait on an event of capture %llu (captures do not "
                     "merge): both are invalidated",
                     index, (unsigned long long)t->cap->id, (unsigned long long)ec->id);
  }
  if (t == &d->default_stream) {
    capture_invalidate(ec, "the default stream waited on an event recorded in the capture");
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "sim:%d: the default stream cannot join capture %llu (as CUDA's legacy stream): the capture "
                     "is invalidated",
                     index, (unsigned long long)ec->id);
  }
  st = sg_set_copy(&t->front, &e->front); /* t joins ec */
  if (st != MN_OK) return st;
  t->cap = ec;
  ec->members++;
  atomic_store_explicit(&t->cap_id, ec->id, memory_order_release);
  return MN_OK;
}

static mn_status sim_stream_wait_event(int index, void *handle, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  if (e->device != index)
    return unlock_ret(d, mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                                   "a sim:%d stream cannot wait for an event of sim:%d", index, e->device));
  sim_stream *t = stream_of(d, handle);
  sim_capture *ec = e->cap_id ? capture_find(d, e->cap_id) : NULL;
  if (ec || t->cap) return unlock_ret(d, capture_wait(d, index, t, e, ec));
  if (!e->stream || e->stream->dead) return unlock_ret(d, MN_OK); /* nothing to wait for */
  sim_op *op = NULL;
  mn_status st = new_op(OP_WAIT, &op);
  if (st != MN_OK) return unlock_ret(d, st);
  op->wait_stream = e->stream;
  stream_ref(e->stream);
  op->wait_target = e->target;
  return unlock_ret(d, enqueue(d, stream_of(d, handle), op));
}

static mn_status sim_launch_host(int index, void *handle, mn_host_fn fn, void *arg) {
  SIM_LOCKED(index, d);
  sim_op *op = NULL;
  mn_status st = new_op(OP_HOST, &op);
  if (st != MN_OK) return unlock_ret(d, st);
  op->fn = fn;
  op->arg = arg;
  return unlock_ret(d, enqueue(d, stream_of(d, handle), op));
}

static mn_status sim_event_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_event *e = mn__calloc(1, sizeof *e);
  if (!e) return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  e->device = index;
  e->next = d->events;
  if (d->events) d->events->prev = e;
  d->events = e;
  d->stats.live_events++;
  *out = e;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_event_destroy(int index, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  if (e->prev) e->prev->next = e->next;
  else d->events = e->next;
  if (e->next) e->next->prev = e->prev;
  d->stats.live_events--;
  if (e->stream) stream_unref(e->stream);
  sg_set_free(&e->front);
  free(e);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_event_record(int index, void *event, void *handle) {
  SIM_LOCKED(index, d);
  if (((sim_event *)event)->device != index)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "event of another sim device"));
  if (fault_fires(d, MN_SIM_FAULT_EVENT_RECORD))
    return unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: event record failed", index));
  sim_event *e = event;
  sim_stream *s = stream_of(d, handle);
  if (s->cap) { /* the event takes the capture's point: no stream, no target */
    mn_status st = capture_usable(s->cap, __func__);
    if (st == MN_OK) st = sg_set_copy(&e->front, &s->front);
    if (st != MN_OK) return unlock_ret(d, st);
    if (e->stream) stream_unref(e->stream);
    e->stream = NULL;
    e->target = 0;
    e->cap_id = s->cap->id;
    return unlock_ret(d, MN_OK);
  }
  if (e->stream != s) {
    stream_ref(s);
    if (e->stream) stream_unref(e->stream);
    e->stream = s;
  }
  e->target = s->queued;
  e->cap_id = 0;
  e->front.n = 0;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_event_query(int index, void *event, bool *done) {
  SIM_LOCKED(index, d);
  if (fault_fires(d, MN_SIM_FAULT_EVENT_QUERY))
    return unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: event query failed", index));
  sim_event *e = event;
  sim_capture *c = e->cap_id ? capture_find(d, e->cap_id) : NULL;
  if (c) return unlock_ret(d, capture_refuse(c, index, __func__, "a query of an event recorded in the capture"));
  *done = !e->stream || e->stream->completed >= e->target;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_event_synchronize(int index, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  sim_capture *c = e->cap_id ? capture_find(d, e->cap_id) : NULL;
  if (c)
    return unlock_ret(d, capture_refuse(c, index, __func__, "a synchronize of an event recorded in the capture"));
  if (e->stream) stream_run_to(d, e->stream, e->target);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_memcpy_async(int index, void *dst, const void *src, size_t nbytes, mn__copy_kind kind,
                                  void *handle) {
  SIM_LOCKED(index, d);
  if (fault_fires(d, MN_SIM_FAULT_MEMCPY))
    return unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: copy of %zu bytes failed",
                                   index, nbytes));
  sim_op *op = NULL;
  mn_status st = new_op(OP_COPY, &op);
  if (st != MN_OK) return unlock_ret(d, st);
  op->copy_kind = kind;
  op->dst = dst;
  op->src = src;
  op->nbytes = nbytes;
  return unlock_ret(d, enqueue(d, stream_of(d, handle), op));
}

static mn_status sim_memset_async(int index, void *dst, int value, size_t nbytes, void *handle) {
  SIM_LOCKED(index, d);
  if (fault_fires(d, MN_SIM_FAULT_MEMCPY))
    return unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: memset of %zu bytes failed",
                                   index, nbytes));
  sim_op *op = NULL;
  mn_status st = new_op(OP_SET, &op);
  if (st != MN_OK) return unlock_ret(d, st);
  op->dst = dst;
  op->value = value;
  op->nbytes = nbytes;
  return unlock_ret(d, enqueue(d, stream_of(d, handle), op));
}

/* ---- the stream-ordered pool ------------------------------------------------ */

#define POOL_ALIGN 512 /* blocks are multiples of this */

/* The avail key: FREE blocks under stream 0, PENDING ones under their stream. */
typedef struct avail_key {
  uintptr_t stream;
  size_t size;
  uintptr_t start;
} avail_key;

static int avail_key_cmp(const avail_key *x, const avail_key *y) {
  if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

static avail_key avail_key_of(const pool_block *b) {
  return (avail_key){.stream = (uintptr_t)b->stream, .size = b->size, .start = b->start};
}

static int avail_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  avail_key x = avail_key_of((const pool_block *)a), y = avail_key_of((const pool_block *)b);
  return avail_key_cmp(&x, &y);
}

static int avail_key_fn(const void *key, const mn__avl_node *n) {
  avail_key y = avail_key_of((const pool_block *)n);
  return avail_key_cmp(key, &y);
}

static int live_cmp(const mn__avl_node *a, const mn__avl_node *b) {
  uintptr_t x = ((const pool_block *)a)->start, y = ((const pool_block *)b)->start;
  return x < y ? -1 : x > y;
}

static int live_key_fn(const void *key, const mn__avl_node *n) {
  uintptr_t x = *(const uintptr_t *)key, y = ((const pool_block *)n)->start;
  return x < y ? -1 : x > y;
}

static void pool_init(sim_pool *pool) {
  mn__avl_init(&pool->live, live_cmp, NULL);
  mn__avl_init(&pool->avail, avail_cmp, NULL);
}

/* ---- a stream's pending list ---- */

static void pending_append(pool_block *b) {
  sim_stream *s = b->stream;
  b->pnext = NULL;
  b->pprev = s->pend_tail;
  if (s->pend_tail) s->pend_tail->pnext = b;
  else s->pend_head = b;
  s->pend_tail = b;
}

static void pending_remove(pool_block *b) {
  sim_stream *s = b->stream;
  if (b->pprev) b->pprev->pnext = b->pnext;
  else s->pend_head = b->pnext;
  if (b->pnext) b->pnext->pprev = b->pprev;
  else s->pend_tail = b->pprev;
  b->pprev = b->pnext = NULL;
}

/* `to` takes b's place on b's stream's pending list (same target). */
static void pending_replace(pool_block *b, pool_block *to) {
  sim_stream *s = b->stream;
  to->pprev = b->pprev;
  to->pnext = b->pnext;
  if (b->pprev) b->pprev->pnext = to;
  else s->pend_head = to;
  if (b->pnext) b->pnext->pprev = to;
  else s->pend_tail = to;
  b->pprev = b->pnext = NULL;
}

/* ---- unused chunks (their one block FREE): what release may give back ---- */

static void unused_add(sim_pool *pool, pool_chunk *c) {
  c->unused = true;
  c->uprev = NULL;
  c->unext = pool->unused;
  if (pool->unused) pool->unused->uprev = c;
  pool->unused = c;
}

static void unused_remove(sim_pool *pool, pool_chunk *c) {
  if (c->uprev) c->uprev->unext = c->unext;
  else pool->unused = c->unext;
  if (c->unext) c->unext->uprev = c->uprev;
  c->uprev = c->unext = NULL;
  c->unused = false;
}

/* Unlinks b (not the chunk's only block) from its chunk and frees it. */
static void block_unlink(pool_block *b) {
  if (b->prev) b->prev->next = b->next;
  else b->chunk->blocks = b->next;
  if (b->next) b->next->prev = b->prev;
  free(b);
}

/* Whether n is an avail neighbour b may merge with: both FREE, or both
 * PENDING on one stream. */
static bool mergeable(const pool_block *b, const pool_block *n) {
  return n && n->state == b->state && n->state != PB_USED && n->stream == b->stream;
}

/* Merges b (in no tree) with its mergeable neighbours, which leave the avail
 * tree and their pending lists; b keeps its own target (the later one when
 * PENDING: it was freed last). */
static void block_merge(sim_pool *pool, pool_block *b) {
  pool_block *n = b->prev;
  if (mergeable(b, n)) {
    mn__avl_remove(&pool->avail, &n->node);
    if (n->state == PB_PENDING) pending_remove(n);
    b->start = n->start;
    b->size += n->size;
    block_unlink(n);
  }
  n = b->next;
  if (mergeable(b, n)) {
    mn__avl_remove(&pool->avail, &n->node);
    if (n->state == PB_PENDING) pending_remove(n);
    b->size += n->size;
    block_unlink(n);
  }
}

/* The frees queued on s up to its op number `target` have run: the blocks
 * they freed (the front of s's pending list) become FREE. */
static void pool_complete_frees(sim_stream *s, uint64_t target) {
  while (s->pend_head && s->pend_head->target <= target) {
    pool_block *b = s->pend_head;
    sim_pool *pool = b->chunk->pool;
    pending_remove(b);
    mn__avl_remove(&pool->avail, &b->node);
    pool->used -= b->size;
    b->state = PB_FREE;
    b->stream = NULL;
    b->target = 0;
    block_merge(pool, b);
    mn__avl_insert(&pool->avail, &b->node);
    if (b->size == b->chunk->size) unused_add(pool, b->chunk);
  }
}

/* Gives an unused chunk back to the device. */
static void chunk_release(sim_device *d, sim_pool *pool, pool_chunk *c) {
  unused_remove(pool, c);
  if (c->prev) c->prev->next = c->next;
  else pool->chunks = c->next;
  if (c->next) c->next->prev = c->prev;
  mn__avl_remove(&pool->avail, &c->blocks->node);
  pages_release((void *)c->start, c->size);
  range_remove(d, range_find(d, c->start));
  d->stats.mapped_bytes -= c->size;
  d->stats.raw_frees++;
  pool->reserved -= c->size;
  free(c->blocks);
  free(c);
}

/* Releases unused chunks while more than keep bytes are reserved. */
static void pool_release(sim_device *d, sim_pool *pool, size_t keep) {
  while (pool->reserved > keep && pool->unused) chunk_release(d, pool, pool->unused);
}

/* A new, unused chunk of at least n bytes (a granularity multiple). */
static mn_status pool_grow(sim_device *d, sim_pool *pool, int index, size_t n, pool_chunk **out) {
  size_t size = round_gran(n);
  if (fault_fires(d, MN_SIM_FAULT_RAW_ALLOC))
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: injected fault: pool growth by %zu bytes failed",
                     index, size);
  if (size == 0 || size > g_cfg.capacity - d->stats.mapped_bytes) pool_release(d, pool, 0);
  if (size == 0 || size > g_cfg.capacity - d->stats.mapped_bytes)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__,
                     "sim:%d out of memory: the pool asked %zu bytes (%zu rounded), %zu of %zu in use", index, n,
                     size, d->stats.mapped_bytes, g_cfg.capacity);
  pool_chunk *c = mn__calloc(1, sizeof *c);
  pool_block *b = mn__calloc(1, sizeof *b);
  sim_range *r = NULL;
  mn_status st = c && b ? range_insert(d, index, size, false, &r)
                        : mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (st == MN_OK && mprotect((void *)r->start, size, PROT_READ | PROT_WRITE) != 0) {
    range_remove(d, r);
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mprotect failed: %s", index, strerror(errno));
  }
  if (st != MN_OK) {
    free(c);
    free(b);
    return st;
  }
  r->pool = true;
  phys_add(d, size);
  d->stats.raw_allocs++;
  *b = (pool_block){.chunk = c, .start = r->start, .size = size, .state = PB_FREE};
  *c = (pool_chunk){.next = pool->chunks, .pool = pool, .start = r->start, .size = size, .blocks = b};
  if (pool->chunks) pool->chunks->prev = c;
  pool->chunks = c;
  unused_add(pool, c);
  mn__avl_insert(&pool->avail, &b->node);
  pool->reserved += size;
  if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
  *out = c;
  return MN_OK;
}

/* The smallest avail block of at least n bytes under this stream key, or NULL. */
static pool_block *avail_fit(const sim_pool *pool, const sim_stream *key, size_t n) {
  avail_key k = {.stream = (uintptr_t)key, .size = n, .start = 0};
  pool_block *b = (pool_block *)mn__avl_lower_bound(&pool->avail, &k, avail_key_fn);
  return b && b->stream == key ? b : NULL;
}

/* Best fit of n bytes for stream s: the smallest FREE block, or block
 * PENDING on s, that holds n (the lower address among equal sizes; s's own
 * block on a tie, keeping FREE memory for every stream). O(log n). */
static pool_block *pool_fit(const sim_pool *pool, const sim_stream *s, size_t n) {
  pool_block *f = avail_fit(pool, NULL, n), *p = avail_fit(pool, s, n);
  if (!f) return p;
  if (!p) return f;
  return p->size <= f->size ? p : f;
}

static sim_pool *pool_of(sim_device *d, void *pool) { return pool ? (sim_pool *)pool : &d->pool; }

/* Stream-ordered allocation is not captured on SIM (CUDA records it as
 * memory nodes); refused without touching the capture. */
static mn_status pool_refuse_capture(int index, const char *func) {
  return mn__error(MN_ERR_NOT_SUPPORTED, func,
                   "sim:%d: stream-ordered pool allocations and frees on a capturing stream are not simulated",
                   index);
}

/* A new pool; the device's list keeps it until pool_destroy. */
static mn_status sim_pool_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_pool *p = mn__calloc(1, sizeof *p);
  if (!p) return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  pool_init(p);
  p->next = d->pools;
  d->pools = p;
  *out = p;
  return unlock_ret(d, MN_OK);
}

/* Refused while a block is in use or its queued free has not run. */
static mn_status sim_pool_destroy(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_pool *p = handle, **link = &d->pools;
  while (*link && *link != p) link = &(*link)->next;
  if (!*link)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %p is not a pool of this device",
                                   index, handle));
  if (p->used)
    return unlock_ret(d, mn__error(MN_ERR_BUSY, __func__,
                                   "sim:%d: pool %p still has %zu bytes allocated or waiting for their queued free",
                                   index, handle, p->used));
  pool_release(d, p, 0); /* nothing used: every chunk is unused */
  *link = p->next;
  free(p);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_alloc_async(int index, void *handle_pool, size_t nbytes, void *handle, void **out) {
  SIM_LOCKED(index, d);
  if (stream_of(d, handle)->cap) return unlock_ret(d, pool_refuse_capture(index, __func__));
  sim_pool *pool = pool_of(d, handle_pool);
  pool_release(d, pool, pool->release_threshold);
  size_t n = nbytes > SIZE_MAX - POOL_ALIGN ? 0 : (nbytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  sim_stream *s = stream_of(d, handle);
  pool_block *b = n ? pool_fit(pool, s, n) : NULL;
  if (!b) {
    pool_chunk *c = NULL;
    mn_status st = pool_grow(d, pool, index, n ? n : SIZE_MAX, &c);
    if (st != MN_OK) return unlock_ret(d, st);
    b = c->blocks;
  }
  pool_block *rest = NULL;
  if (b->size > n && !(rest = mn__calloc(1, sizeof *rest)))
    return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  mn__avl_remove(&pool->avail, &b->node);
  if (b->chunk->unused) unused_remove(pool, b->chunk);
  if (rest) { /* split: the rest keeps b's state (and b's place on its stream's pending list) */
    *rest = (pool_block){.prev = b, .next = b->next, .chunk = b->chunk, .start = b->start + n, .size = b->size - n,
                         .state = b->state, .stream = b->stream, .target = b->target};
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = n;
    if (b->state == PB_PENDING) pending_replace(b, rest);
    mn__avl_insert(&pool->avail, &rest->node);
  } else if (b->state == PB_PENDING) {
    pending_remove(b);
  }
  if (b->state == PB_FREE) pool->used += n; /* a PENDING block was counted already */
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  b->state = PB_USED;
  b->stream = NULL;
  b->target = 0;
  mn__avl_insert(&pool->live, &b->node);
  *out = (void *)b->start;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_free_async(int index, void *handle_pool, void *ptr, void *handle) {
  SIM_LOCKED(index, d);
  if (stream_of(d, handle)->cap) return unlock_ret(d, pool_refuse_capture(index, __func__));
  sim_pool *pool = pool_of(d, handle_pool);
  uintptr_t p = (uintptr_t)ptr;
  pool_block *b = (pool_block *)mn__avl_floor(&pool->live, &p, live_key_fn);
  if (!b || b->start != p)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %p is not a live stream-ordered allocation of %s", index, ptr,
                                   handle_pool ? "this pool" : "the default pool"));
  sim_op *op = NULL;
  mn_status st = new_op(OP_POOL_FREE, &op);
  if (st != MN_OK) return unlock_ret(d, st);
  sim_stream *s = stream_of(d, handle);
  mn__avl_remove(&pool->live, &b->node);
  /* PENDING until s runs this op: s may reuse it at once, others after. */
  b->state = PB_PENDING;
  b->stream = s;
  b->target = op->wait_target = s->queued + 1;
  pending_append(b);
  block_merge(pool, b);
  mn__avl_insert(&pool->avail, &b->node);
  return unlock_ret(d, enqueue(d, s, op)); /* eager devices complete it at once */
}

static mn_status sim_pool_trim(int index, void *handle_pool, size_t keep_bytes) {
  SIM_LOCKED(index, d);
  pool_release(d, pool_of(d, handle_pool), keep_bytes);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_pool_stats(int index, void *handle_pool, size_t *reserved_current, size_t *reserved_high,
                                size_t *used_current, size_t *used_high) {
  SIM_LOCKED(index, d);
  sim_pool *pool = pool_of(d, handle_pool);
  pool_release(d, pool, pool->release_threshold); /* a synchronization point, as on CUDA */
  *reserved_current = pool->reserved;
  *reserved_high = pool->reserved_high;
  *used_current = pool->used;
  *used_high = pool->used_high;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_pool_set_release_threshold(int index, void *handle_pool, size_t bytes) {
  SIM_LOCKED(index, d);
  pool_of(d, handle_pool)->release_threshold = bytes;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_pool_reset_peak(int index, void *handle_pool) {
  SIM_LOCKED(index, d);
  sim_pool *pool = pool_of(d, handle_pool);
  pool->reserved_high = pool->reserved;
  pool->used_high = pool->used;
  return unlock_ret(d, MN_OK);
}

#define POOL_BROKEN(...) mn__error(MN_ERR_INTERNAL, "mn_sim_check_invariants", __VA_ARGS__)

/* One pool: chunks are pool ranges tiled by their blocks; no two mergeable
 * blocks side by side; each block in the tree its state names, found there by
 * its key; the unused list is exactly the chunks of one FREE block; the
 * counts equal the sums. *chunks and *pending += this pool's. pre: lock held. */
static mn_status pool_check_one(sim_device *d, int index, const sim_pool *pool, size_t *chunks, size_t *pending) {
  size_t reserved = 0, used = 0, nlive = 0, navail = 0, nunused = 0;
  if (!mn__avl_check(&pool->live, NULL) || !mn__avl_check(&pool->avail, NULL))
    return POOL_BROKEN("sim:%d: pool %p: a block tree is broken", index, (void *)pool);
  for (const pool_chunk *c = pool->chunks; c; c = c->next, (*chunks)++) {
    const sim_range *r = range_find(d, c->start);
    if (!r || !r->pool || r->start != c->start || r->size != c->size || c->pool != pool ||
        (c->next && c->next->prev != c) || (c->prev == NULL) != (c == pool->chunks))
      return POOL_BROKEN("sim:%d: pool chunk %p has no pool range or is mislinked", index, (void *)c->start);
    uintptr_t at = c->start;
    for (const pool_block *b = c->blocks; b; b = b->next) {
      bool linked = (b->prev == NULL) == (b == c->blocks) && (!b->next || b->next->prev == b) && b->chunk == c;
      bool state = b->state == PB_USED || b->state == PB_FREE || (b->state == PB_PENDING && b->stream);
      if (b->start != at || b->size == 0 || b->size % POOL_ALIGN || !linked || !state || mergeable(b, b->next) ||
          (b->state != PB_PENDING && b->stream))
        return POOL_BROKEN("sim:%d: pool block %p in chunk %p is broken", index, (void *)b->start,
                           (void *)c->start);
      const mn__avl_node *found;
      if (b->state == PB_USED) {
        nlive++;
        found = mn__avl_floor(&pool->live, &b->start, live_key_fn);
      } else {
        navail++;
        avail_key k = avail_key_of(b);
        found = mn__avl_floor(&pool->avail, &k, avail_key_fn);
      }
      if (found != &b->node)
        return POOL_BROKEN("sim:%d: pool block %p is not in its tree", index, (void *)b->start);
      at += b->size;
      if (b->state != PB_FREE) used += b->size;
      *pending += b->state == PB_PENDING;
    }
    if (at != c->start + c->size)
      return POOL_BROKEN("sim:%d: pool chunk %p is not tiled by its blocks", index, (void *)c->start);
    if (c->unused != (c->blocks->state == PB_FREE && !c->blocks->next))
      return POOL_BROKEN("sim:%d: pool chunk %p: unused flag is wrong", index, (void *)c->start);
    nunused += c->unused;
    reserved += c->size;
  }
  size_t listed = 0;
  for (const pool_chunk *c = pool->unused; c; c = c->unext, listed++)
    if (!c->unused || c->pool != pool || (c->unext && c->unext->uprev != c) || listed > nunused)
      return POOL_BROKEN("sim:%d: pool %p: the unused chunk list is broken", index, (void *)pool);
  if (listed != nunused || nlive != pool->live.count || navail != pool->avail.count)
    return POOL_BROKEN("sim:%d: pool %p: %zu unused chunks listed of %zu, %zu/%zu blocks in trees of %zu/%zu",
                       index, (void *)pool, listed, nunused, pool->live.count, pool->avail.count, nlive, navail);
  if (reserved != pool->reserved || used != pool->used || used > reserved)
    return POOL_BROKEN("sim:%d: pool %p counts %zu reserved / %zu used bytes; found %zu / %zu", index,
                       (void *)pool, pool->reserved, pool->used, reserved, used);
  return MN_OK;
}

/* A stream's pending list: PENDING blocks of this stream, targets in order,
 * each still ahead of the stream. *n += its length. */
static mn_status pending_check(int index, const sim_stream *s, size_t *n) {
  uint64_t last = 0;
  for (const pool_block *b = s->pend_head; b; b = b->pnext, (*n)++) {
    if (b->state != PB_PENDING || b->stream != s || b->target < last || b->target <= s->completed ||
        b->target > s->queued || (b->pnext ? b->pnext->pprev != b : s->pend_tail != b) ||
        (b->pprev == NULL) != (b == s->pend_head))
      return POOL_BROKEN("sim:%d: a stream's pending pool blocks are broken at %p", index, (void *)b->start);
    last = b->target;
  }
  return MN_OK;
}

/* Every pool, and every stream's pending list against the PENDING blocks. */
static mn_status pool_check(sim_device *d, int index) {
  size_t chunks = 0, pool_ranges = 0, pending = 0, listed = 0;
  for (const sim_range *r = (const sim_range *)mn__avl_first(&d->ranges); r; r = range_next(r))
    pool_ranges += r->pool;
  mn_status st = pool_check_one(d, index, &d->pool, &chunks, &pending);
  for (const sim_pool *p = d->pools; p && st == MN_OK; p = p->next) st = pool_check_one(d, index, p, &chunks, &pending);
  if (st == MN_OK) st = pending_check(index, &d->default_stream, &listed);
  for (const sim_stream *s = d->streams; s && st == MN_OK; s = s->next) st = pending_check(index, s, &listed);
  if (st != MN_OK) return st;
  if (chunks != pool_ranges)
    return POOL_BROKEN("sim:%d: %zu pool chunks but %zu pool ranges", index, chunks, pool_ranges);
  if (pending != listed)
    return POOL_BROKEN("sim:%d: %zu PENDING pool blocks but %zu on streams' pending lists", index, pending,
                       listed);
  return MN_OK;
}

/* ---- pinned host memory and peer access ------------------------
 * "Pinned" SIM memory is ordinary host memory recorded in one process-wide
 * registry, pinned for every SIM device (as cudaHostAllocPortable memory is
 * for every CUDA device). The registry has its own lock, never held together
 * with a device lock. SIM copies read and write host memory when the stream
 * runs them whether it is pinned or not (an ideal DMA engine); the copy engine
 * (storage/copy.c) gives pageable memory its CUDA-like meaning. */

typedef struct sim_pin {
  uintptr_t start; /* first: starts_find reads it */
  size_t size;
  bool owned;      /* from host_alloc (freed by host_free); false: registered */
} sim_pin;

static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_pin *g_pins; /* sorted by start, disjoint */
static size_t g_npins, g_cap_pins;

#define SIM_HOST_ALIGN 4096

/* Records [start, start+size); refuses overlaps. pre: g_pin_lock held. */
static mn_status pin_insert(int index, const char *func, uintptr_t start, size_t size, bool owned) {
  long i = starts_find(g_pins, g_npins, sizeof *g_pins, start);
  size_t pos = (size_t)(i + 1);
  if ((i >= 0 && g_pins[i].start + g_pins[i].size > start) || (pos < g_npins && g_pins[pos].start < start + size))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: host range [%p, +%zu) overlaps pinned memory",
                     index, (void *)start, size);
  if (g_npins == g_cap_pins) {
    size_t cap = g_cap_pins ? g_cap_pins * 2 : 64;
    sim_pin *r = mn__realloc(g_pins, cap * sizeof *r);
    if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
    g_pins = r;
    g_cap_pins = cap;
  }
  memmove(&g_pins[pos + 1], &g_pins[pos], (g_npins - pos) * sizeof *g_pins);
  g_pins[pos] = (sim_pin){.start = start, .size = size, .owned = owned};
  g_npins++;
  return MN_OK;
}

/* Removes the record starting at ptr made with the same `owned`. */
static mn_status pin_remove(int index, const char *func, void *ptr, bool owned) {
  pthread_mutex_lock(&g_pin_lock);
  long i = starts_find(g_pins, g_npins, sizeof *g_pins, (uintptr_t)ptr);
  mn_status st = MN_OK;
  if (i < 0 || g_pins[i].start != (uintptr_t)ptr || g_pins[i].owned != owned) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: %p is not %s", index, ptr,
                   owned ? "pinned memory from mn_device_host_alloc" : "the start of a registered host range");
  } else {
    memmove(&g_pins[i], &g_pins[i + 1], (g_npins - (size_t)i - 1) * sizeof *g_pins);
    if (--g_npins == 0) { /* the last record: the table goes too (the next pin makes a new one) */
      free(g_pins);
      g_pins = NULL;
      g_cap_pins = 0;
    }
  }
  pthread_mutex_unlock(&g_pin_lock);
  return st;
}

static mn_status sim_host_alloc(int index, size_t nbytes, void **out) {
  SIM_LOCKED(index, d);
  bool fail = fault_fires(d, MN_SIM_FAULT_RAW_ALLOC);
  pthread_mutex_unlock(&d->lock);
  if (fail)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: injected fault: pinning %zu bytes failed", index,
                     nbytes);
  if (nbytes > SIZE_MAX - SIM_HOST_ALIGN)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: cannot pin %zu bytes", index, nbytes);
  size_t rounded = (nbytes + SIM_HOST_ALIGN - 1) / SIM_HOST_ALIGN * SIM_HOST_ALIGN;
  void *p = mn__aligned_alloc(SIM_HOST_ALIGN, rounded);
  if (!p)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: out of host memory pinning %zu bytes", index, nbytes);
  pthread_mutex_lock(&g_pin_lock);
  mn_status st = pin_insert(index, __func__, (uintptr_t)p, rounded, true);
  pthread_mutex_unlock(&g_pin_lock);
  if (st != MN_OK) {
    free(p);
    return st;
  }
  *out = p;
  return MN_OK;
}

static mn_status sim_host_free(int index, void *ptr) {
  mn_status st = pin_remove(index, __func__, ptr, true);
  if (st == MN_OK) free(ptr);
  return st;
}

static mn_status sim_host_register(int index, void *ptr, size_t nbytes) {
  pthread_mutex_lock(&g_pin_lock);
  mn_status st = pin_insert(index, __func__, (uintptr_t)ptr, nbytes, false);
  pthread_mutex_unlock(&g_pin_lock);
  return st;
}

static mn_status sim_host_unregister(int index, void *ptr) { return pin_remove(index, __func__, ptr, false); }

static mn_status sim_host_is_pinned(int index, const void *ptr, bool *pinned) {
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&g_pin_lock);
  long i = starts_find(g_pins, g_npins, sizeof *g_pins, p);
  *pinned = i >= 0 && p - g_pins[i].start < g_pins[i].size;
  pthread_mutex_unlock(&g_pin_lock);
  return MN_OK;
}

/* SIM devices share the host address space: every pair can reach each other
 * unless configured not to (to exercise the paths of machines without peer access). */
static mn_status sim_can_access_peer(int index, int peer, bool *can) {
  pthread_mutex_lock(&g_lock);
  *can = !g_cfg.no_peer_access;
  pthread_mutex_unlock(&g_lock);
  return MN_OK;
}

/* `index` may access `peer`'s raw memory from now on (as
 * cudaDeviceEnablePeerAccess); mapped VMM pages stay reachable only from the
 * devices mem_set_access granted (as memory mapped with cuMemMap). */
static mn_status sim_enable_peer_access(int index, int peer) {
  SIM_LOCKED(peer, d);
  d->peers |= (uint16_t)(1u << index);
  return unlock_ret(d, MN_OK);
}

/* The other device's side is checked when queued (its lock is taken and
 * dropped before this device's: the two locks are never held together); this
 * device's side is checked when the copy runs, as for any copy. */
static mn_status sim_memcpy_peer_async(int index, void *dst, int dst_index, const void *src, int src_index,
                                       size_t nbytes, void *handle) {
  int remote = index == dst_index ? src_index : dst_index;
  const void *rp = index == dst_index ? src : dst;
  sim_device *r = NULL;
  mn_status st = sim_get(remote, &r);
  if (st != MN_OK) return st;
  pthread_mutex_lock(&r->lock);
  bool ok = range_is_mapped(r, rp, nbytes);
  pthread_mutex_unlock(&r->lock);
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: [%p, +%zu) is not mapped memory of sim:%d", index,
                     rp, nbytes, remote);
  /* The remote side counts as host memory for the run-time check. */
  return sim_memcpy_async(index, dst, src, nbytes, index == dst_index ? MN__COPY_H2D : MN__COPY_D2H, handle);
}


static mn_status sim_check_range(int index, const void *ptr, size_t nbytes) {
  SIM_LOCKED(index, d);
  bool ok = range_is_mapped(d, ptr, nbytes);
  pthread_mutex_unlock(&d->lock);
  if (ok) return MN_OK;
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) is not mapped memory of sim:%d", ptr, nbytes,
                   index);
}

/* ---- stream capture and graphs (mnemo/graph.h) ----------------------------- */

static mn_status sim_capture_begin(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  if (s->cap)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: the stream already %s capture %llu",
                                   index, s->cap->origin == s ? "captures into" : "joined",
                                   (unsigned long long)s->cap->id));
  sim_capture *c = mn__calloc(1, sizeof *c);
  if (!c) return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a capture"));
  c->id = atomic_fetch_add(&g_capture_ids, 1);
  c->origin = s;
  c->members = 1;
  c->next = d->captures;
  d->captures = c;
  s->cap = c;
  s->front.n = 0;
  atomic_store_explicit(&s->cap_id, c->id, memory_order_release);
  return unlock_ret(d, MN_OK);
}

/* The first node of a joined stream's frontier that the origin's frontier
 * does not reach (the stream forked and never joined back), or -1. */
static int64_t capture_unjoined(sim_device *d, sim_capture *c, sim_stream **which) {
  for (sim_stream *t = d->streams; t; t = t->next) {
    if (t->cap != c || t == c->origin) continue;
    for (uint32_t i = 0; i < t->front.n; i++) {
      if (!sg_reaches(&c->graph, &c->origin->front, t->front.ids[i])) {
        *which = t;
        return t->front.ids[i];
      }
    }
  }
  return -1;
}

static mn_status sim_capture_end(int index, void *handle, void **graph, size_t *nodes) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  sim_capture *c = s->cap;
  if (!c) return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: the stream is not capturing", index));
  if (c->origin != s)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                   "sim:%d: the stream joined capture %llu, begun on another stream: end it there",
                                   index, (unsigned long long)c->id));
  if (c->invalidated) {
    mn_status st = mn__error(MN_ERR_INVALID_STATE, __func__, "sim:%d: capture %llu was invalidated (%s); no graph",
                             index, (unsigned long long)c->id, c->why);
    capture_close(d, c);
    return unlock_ret(d, st);
  }
  sim_stream *t = NULL;
  int64_t lost = capture_unjoined(d, c, &t);
  if (lost >= 0) {
    mn_status st = mn__error(MN_ERR_INVALID_STATE, __func__,
                             "sim:%d: capture %llu is unjoined: a stream that joined it (forked by an event wait) "
                             "has work (node %lld) the capturing stream never waited for; record an event on it "
                             "and wait on that event from the capturing stream before ending. No graph",
                             index, (unsigned long long)c->id, (long long)lost);
    capture_close(d, c);
    return unlock_ret(d, st);
  }
  sim_graph *g = mn__calloc(1, sizeof *g);
  if (!g) return unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a graph"));
  g->g = c->graph;
  memset(&c->graph, 0, sizeof c->graph);
  capture_close(d, c);
  g->next = d->graphs;
  if (d->graphs) d->graphs->prev = g;
  d->graphs = g;
  d->stats.live_graphs++;
  *graph = g;
  *nodes = g->g.ops;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_capture_status(int index, void *handle, mn_capture_status *status, uint64_t *id) {
  SIM_LOCKED(index, d);
  const sim_capture *c = stream_of(d, handle)->cap;
  *status = !c ? MN_CAPTURE_NONE : c->invalidated ? MN_CAPTURE_INVALIDATED : MN_CAPTURE_ACTIVE;
  *id = c ? c->id : 0;
  return unlock_ret(d, MN_OK);
}

/* Lock-free: the caching allocator asks on every allocation during captures. */
static mn_status sim_capture_id(int index, void *handle, uint64_t *id) {
  (void)index;
  *id = handle ? atomic_load_explicit(&((sim_stream *)handle)->cap_id, memory_order_acquire) : 0;
  return MN_OK;
}

static mn_status capture_of(int index, const char *func, sim_stream *s) {
  if (!s->cap)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "sim:%d: the stream is not capturing", index);
  return MN_OK;
}

static mn_status sim_capture_marker(int index, void *handle, uint64_t *marker) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  mn_status st = capture_of(index, __func__, s);
  if (st == MN_OK) st = capture_usable(s->cap, __func__);
  if (st == MN_OK) st = sg_set_reserve(&s->front, 1);
  uint32_t id = 0;
  sg_node empty = {.kind = SG_EMPTY};
  if (st == MN_OK) st = sg_add(&s->cap->graph, &empty, &s->front, &id);
  if (st != MN_OK) return unlock_ret(d, st);
  sg_set_one(&s->front, id);
  *marker = (uint64_t)id + 1;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_capture_reaches(int index, void *handle, uint64_t marker, bool *reached) {
  SIM_LOCKED(index, d);
  sim_stream *s = stream_of(d, handle);
  mn_status st = capture_of(index, __func__, s);
  if (st != MN_OK) return unlock_ret(d, st);
  sg_graph *g = &s->cap->graph;
  if (marker == 0 || marker > g->n || g->nodes[marker - 1].kind != SG_EMPTY)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: %llu is not a marker of capture %llu", index,
                                   (unsigned long long)marker, (unsigned long long)s->cap->id));
  *reached = sg_reaches(g, &s->front, (uint32_t)(marker - 1));
  return unlock_ret(d, MN_OK);
}

/* Queues every operation of the graph on s in node order, which is a
 * topological order of its dependencies. All ops are made first: out of
 * host memory queues nothing. */
static mn_status sim_graph_launch(int index, void *graph, void *handle) {
  SIM_LOCKED(index, d);
  const sim_graph *g = graph;
  sim_stream *s = stream_of(d, handle);
  if (s->cap)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
                                   "sim:%d: the stream captures (capture %llu): launch the graph on another stream",
                                   index, (unsigned long long)s->cap->id));
  sim_op *first = NULL, **link = &first;
  mn_status st = MN_OK;
  for (uint32_t i = 0; i < g->g.n && st == MN_OK; i++) {
    const sg_node *n = &g->g.nodes[i];
    sim_op_kind kind = n->kind == SG_COPY ? OP_COPY : n->kind == SG_SET ? OP_SET : OP_HOST;
    if (n->kind == SG_EMPTY) continue;
    sim_op *op = NULL;
    st = new_op(kind, &op);
    if (st != MN_OK) break;
    op->copy_kind = n->copy_kind;
    op->dst = n->dst;
    op->src = n->src;
    op->nbytes = n->nbytes;
    op->value = n->value;
    op->fn = n->fn;
    op->arg = n->arg;
    *link = op;
    link = &op->next;
  }
  while (first) {
    sim_op *op = first;
    first = op->next;
    if (st == MN_OK) mn__ignore(enqueue(d, s, op)); /* a stream that does not capture: queueing cannot fail */
    else op_free(op);
  }
  return unlock_ret(d, st);
}

static mn_status sim_graph_destroy(int index, void *graph) {
  SIM_LOCKED(index, d);
  sim_graph *g = graph;
  if (g->prev) g->prev->next = g->next;
  else d->graphs = g->next;
  if (g->next) g->next->prev = g->prev;
  d->stats.live_graphs--;
  sg_graph_free(&g->g);
  free(g);
  return unlock_ret(d, MN_OK);
}

/* ---- sharing with other processes (memfd) ---------------------------------
 * Export moves the granules a block covers into a memfd of the range's size,
 * in place (contents copied, then the memfd mapped MAP_SHARED over the same
 * addresses); import maps such pieces at a new range of the importing
 * device, flagged `import` (not counted in its memory, not freeable). */
#define SIM_SHARE_NAME "mnemo-sim-share"
#define SIM_SHARE_LINK "/memfd:" SIM_SHARE_NAME " (deleted)"

static mn_status share_memfd(sim_device *d, int index, sim_range *r) {
  (void)d;
  if (r->has_share) return MN_OK;
  size_t ng = r->size / g_cfg.granularity;
  uint8_t *shared = mn__calloc(ng, 1); /* a raw range is moved whole, a reservation granule by granule */
  if (!shared) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  int fd = memfd_create(SIM_SHARE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)r->size) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    free(shared);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: a memfd of %zu bytes for sharing: %s", index,
                     r->size, strerror(e));
  }
  r->share_fd = fd;
  r->shared = shared;
  r->has_share = true;
  return MN_OK;
}

/* Moves [off, off + n) of r (mapped, granule-aligned) into r's memfd. */
static mn_status share_move(int index, sim_range *r, size_t off, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t w = pwrite(r->share_fd, (const char *)(r->start + off) + done, n - done, (off_t)(off + done));
    if (w <= 0)
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: copying %zu bytes into the memfd: %s", index, n,
                       w < 0 ? strerror(errno) : "short write");
    done += (size_t)w;
  }
  if (mmap((void *)(r->start + off), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->share_fd, (off_t)off) ==
      MAP_FAILED)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: mapping the memfd: %s", index, strerror(errno));
  return MN_OK;
}

static mn_status sim_share_export(int index, void *ptr, size_t nbytes, mn__share_mem_t *out) {
  SIM_LOCKED(index, d);
  sim_range *r = range_find(d, (uintptr_t)ptr);
  if (nbytes == 0 || !range_is_mapped(d, ptr, nbytes) || r->pool || r->import)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                                   "sim:%d: [%p, +%zu) is not mapped memory of a raw allocation or reservation",
                                   index, ptr, nbytes));
  size_t g = g_cfg.granularity, off = (uintptr_t)ptr - r->start;
  size_t a0 = r->mapped ? off / g * g : 0, a1 = r->mapped ? (off + nbytes + g - 1) / g * g : r->size;
  mn_status st = share_memfd(d, index, r);
  for (size_t k = a0 / g; st == MN_OK && k < a1 / g; k++) {
    if (r->shared[k]) continue;
    st = share_move(index, r, k * g, g);
    if (st == MN_OK) r->shared[k] = 1;
  }
  int fd = st == MN_OK ? fcntl(r->share_fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (st == MN_OK && fd < 0)
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "sim:%d: dup of the memfd: %s", index, strerror(errno));
  /* a failure leaves what was moved in the memfd: the same bytes, still ours */
  if (st != MN_OK) return unlock_ret(d, st);
  memset(out, 0, sizeof *out);
  out->npieces = 1;
  out->fds[0] = fd;
  out->piece_offset[0] = a0;
  out->piece_length[0] = a1 - a0;
  out->offset = off - a0;
  for (unsigned i = 1; i < MN__SHARE_MAX_PIECES; i++) out->fds[i] = -1;
  return unlock_ret(d, MN_OK);
}

/* Refuses fd unless it is SIM's shared memory: a sealed memfd of that name
 * holding [off, off + len). */
static mn_status share_check_fd(int index, int fd, uint64_t off, uint64_t len) {
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return mn__error(MN_ERR_INVALID_ARGUMENT, "sim_share_import", "sim:%d: descriptor %d is not SIM shared memory (not a memfd)", index, fd);
  char self[40], link[256];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(self, link, sizeof link - 1);
  link[n < 0 ? 0 : n] = '\0';
  if (strcmp(link, SIM_SHARE_LINK) != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "sim_share_import",
                     "sim:%d: descriptor %d is '%.100s', not SIM shared memory (a sealed memfd " SIM_SHARE_NAME ")",
                     index, fd, link);
  /* A file the sender can still shrink would kill us with SIGBUS when it
   * does (mapped below); one it can grow or reseal is not the one exported. */
  int seals = fcntl(fd, F_GET_SEALS), need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (seals < 0 || (seals & need) != need)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "sim_share_import",
                     "sim:%d: descriptor %d is not sealed against shrinking, growing and resealing (seals 0x%x): "
                     "refused, its sender could truncate it under the mapping",
                     index, fd, seals < 0 ? 0 : (unsigned)seals);
  long page = sysconf(_SC_PAGESIZE);
  if (len == 0 || off % (uint64_t)page || len % (uint64_t)page || off > (uint64_t)sb.st_size ||
      len > (uint64_t)sb.st_size - off)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "sim_share_import",
                     "sim:%d: piece [%llu, +%llu) is not page-aligned inside the %lld-byte shared memory", index,
                     (unsigned long long)off, (unsigned long long)len, (long long)sb.st_size);
  return MN_OK;
}

static mn_status sim_share_import(int index, const mn__share_mem_t *in, void **base, size_t *size) {
  if (in->npieces == 0 || in->npieces > MN__SHARE_MAX_PIECES)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %u memory pieces (1..%d)", index, in->npieces,
                     MN__SHARE_MAX_PIECES);
  uint64_t total = 0;
  for (unsigned i = 0; i < in->npieces; i++) {
    mn_status st = share_check_fd(index, in->fds[i], in->piece_offset[i], in->piece_length[i]);
    if (st != MN_OK) return st;
    if (in->piece_length[i] > ((uint64_t)1 << 44) - total)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: the pieces are too large", index);
    total += in->piece_length[i];
  }
  SIM_LOCKED(index, d);
  size_t rounded = round_gran((size_t)total);
  sim_range *r = NULL;
  mn_status st = range_insert(d, index, rounded, false, &r);
  if (st != MN_OK) return unlock_ret(d, st);
  r->import = true;
  size_t pos = 0;
  for (unsigned i = 0; i < in->npieces && st == MN_OK; i++) {
    if (mmap((void *)(r->start + pos), in->piece_length[i], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             in->fds[i], (off_t)in->piece_offset[i]) == MAP_FAILED)
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: mapping piece %u: %s", index, i, strerror(errno));
    pos += in->piece_length[i];
  }
  if (st != MN_OK) {
    share_unmap((void *)r->start, r->size);
    range_remove(d, r);
    return unlock_ret(d, st);
  }
  d->stats.maps++;
  *base = (void *)r->start;
  *size = (size_t)total;
  return unlock_ret(d, MN_OK);
}

static mn_status sim_share_close(int index, void *base) {
  SIM_LOCKED(index, d);
  sim_range *r = range_find(d, (uintptr_t)base);
  if (!r || r->start != (uintptr_t)base || !r->import)
    return unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sim:%d: %p is not an imported mapping",
                                   index, base));
  device_sync(d); /* as an unmap: queued work may touch it */
  share_unmap(base, r->size);
  range_remove(d, r);
  d->stats.unmaps++;
  return unlock_ret(d, MN_OK);
}

const mn__backend_t mn__sim_backend = {
    .share_export = sim_share_export,
    .share_import = sim_share_import,
    .share_close = sim_share_close,
    .check_range = sim_check_range,
    .name = "sim",
    .type = MN_DEVICE_SIM,
    .device_count = sim_device_count,
    .get_properties = sim_get_properties,
    .mem_info = sim_mem_info,
    .synchronize = sim_synchronize,
    .raw_alloc = sim_raw_alloc,
    .raw_free = sim_raw_free,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .mem_map = sim_mem_map,
    .mem_unmap = sim_mem_unmap,
    .mem_set_access = sim_mem_set_access,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_query = sim_stream_query,
    .stream_synchronize = sim_stream_synchronize,
    .stream_wait_event = sim_stream_wait_event,
    .launch_host = sim_launch_host,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .memcpy_async = sim_memcpy_async,
    .memset_async = sim_memset_async,
    .pool_create = sim_pool_create,
    .pool_destroy = sim_pool_destroy,
    .alloc_async = sim_alloc_async,
    .free_async = sim_free_async,
    .pool_trim = sim_pool_trim,
    .pool_stats = sim_pool_stats,
    .pool_set_release_threshold = sim_pool_set_release_threshold,
    .pool_reset_peak = sim_pool_reset_peak,
    /* pinned host memory and peer access */
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .host_register = sim_host_register,
    .host_unregister = sim_host_unregister,
    .host_is_pinned = sim_host_is_pinned,
    .can_access_peer = sim_can_access_peer,
    .enable_peer_access = sim_enable_peer_access,
    .memcpy_peer_async = sim_memcpy_peer_async,
    /* stream capture and graphs */
    .capture_begin = sim_capture_begin,
    .capture_end = sim_capture_end,
    .capture_status = sim_capture_status,
    .capture_id = sim_capture_id,
    .capture_marker = sim_capture_marker,
    .capture_reaches = sim_capture_reaches,
    .graph_launch = sim_graph_launch,
    .graph_destroy = sim_graph_destroy,
};

/* ---- the public SIM API (mnemo/sim.h) ------------------------------------ */

static bool device_busy(const sim_device *d) {
  /* pools' chunks are ranges; captures need streams */
  return d->ranges.count || d->streams || d->events || d->default_stream.head || d->graphs;
}

static _Atomic(mn__sim_configure_hook_fn) g_configure_hook;

void mn__sim_set_configure_hook(mn__sim_configure_hook_fn fn) { atomic_store(&g_configure_hook, fn); }

mn_status mn_sim_configure(const mn_sim_config_t *config) {
  MN__CHECK_ARG(config != NULL, "config must not be NULL");
  mn_status st = validate_config(__func__, config);
  if (st != MN_OK) return st;
  /* Idle default allocators give back their caches first (outside g_lock: that frees SIM memory). */
  mn__sim_configure_hook_fn hook = atomic_load(&g_configure_hook);
  if (hook && (st = hook(true, __func__)) != MN_OK) return st;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    if (atomic_load(&g_dev[i].ready) && device_busy(&g_dev[i])) {
      pthread_mutex_unlock(&g_lock);
      return mn__error(MN_ERR_INVALID_STATE, __func__,
                       "sim:%d still has live memory, streams, events, graphs or queued work", i);
    }
  }
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    sim_device *d = &g_dev[i];
    if (!atomic_load(&d->ready)) continue;
    munmap(d->base, d->va_size); /* no ranges are left (the device is idle) */
    pthread_mutex_destroy(&d->lock);
    /* Created pools are empty here (their chunks would be ranges): they stay,
     * so their owners' handles (an async allocator's) stay valid. */
    sim_pool *pools = d->pools;
    memset(d, 0, sizeof *d);
    d->pools = pools;
  }
  g_cfg = *config;
  g_cfg_loaded = true;
  atomic_store_explicit(&g_device_count, g_cfg.device_count, memory_order_release);
  pthread_mutex_unlock(&g_lock);
  return hook ? hook(false, __func__) : MN_OK;
}

mn_status mn_sim_get_config(mn_sim_config_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  pthread_mutex_lock(&g_lock);
  load_config_locked();
  *out = g_cfg;
  pthread_mutex_unlock(&g_lock);
  return MN_OK;
}

/* Validates a public SIM stream argument. */
static mn_status sim_stream_arg(const char *func, mn_stream_t *stream) {
  if (!stream) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream must not be NULL");
  if (stream->device.type != MN_DEVICE_SIM)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream is on a %s device, not sim",
                     mn_device_type_name(stream->device.type));
  return mn_device_check(stream->device);
}

mn_status mn_sim_stream_advance(mn_stream_t *stream, size_t n, size_t *ran) {
  mn_status st = sim_stream_arg(__func__, stream);
  if (st != MN_OK) return st;
  SIM_LOCKED(stream->device.index, d);
  size_t k = stream_advance(d, stream_of(d, stream->handle), n);
  if (ran) *ran = k;
  return unlock_ret(d, MN_OK);
}

mn_status mn_sim_stream_pending(mn_stream_t *stream, size_t *count) {
  MN__CHECK_ARG(count != NULL, "count must not be NULL");
  mn_status st = sim_stream_arg(__func__, stream);
  if (st != MN_OK) return st;
  SIM_LOCKED(stream->device.index, d);
  sim_stream *s = stream_of(d, stream->handle);
  *count = (size_t)(s->queued - s->completed);
  return unlock_ret(d, MN_OK);
}

static mn_status sim_device_arg(const char *func, mn_device_t dev) {
  if (dev.type != MN_DEVICE_SIM)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "device type %s is not sim", mn_device_type_name(dev.type));
  return mn_device_check(dev);
}

/* Runs every queued operation, as time passing on a device: allowed during
 * captures (what captures record is not queued). */
mn_status mn_sim_device_drain(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  device_sync(d);
  return unlock_ret(d, MN_OK);
}

mn_status mn_sim_fault_inject(mn_device_t dev, mn_sim_fault fault, uint64_t nth, uint64_t count) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  MN__CHECK_ARG((unsigned)fault < MN_SIM_FAULT_COUNT, "fault=%d is not a SIM fault kind", (int)fault);
  MN__CHECK_ARG(nth >= 1 && count >= 1, "nth=%llu and count=%llu must be >= 1", (unsigned long long)nth,
                (unsigned long long)count);
  SIM_LOCKED(dev.index, d);
  d->faults[fault] = (sim_fault_arm){.until = nth, .remaining = count};
  return unlock_ret(d, MN_OK);
}

mn_status mn_sim_fault_clear(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  memset(d->faults, 0, sizeof d->faults);
  return unlock_ret(d, MN_OK);
}

mn_status mn_sim_check_access(mn_device_t accessor, mn_device_t owner, const void *ptr, size_t nbytes) {
  mn_status st = sim_device_arg(__func__, accessor);
  if (st == MN_OK) st = sim_device_arg(__func__, owner);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(ptr != NULL && nbytes > 0, "ptr must not be NULL and nbytes > 0 (nbytes=%zu)", nbytes);
  SIM_LOCKED(owner.index, d);
  bool mapped = range_is_mapped(d, ptr, nbytes), ok = mapped, vmm = false;
  if (ok && accessor.index != owner.index) {
    uint16_t bit = (uint16_t)(1u << accessor.index);
    const sim_range *r = range_find(d, (uintptr_t)ptr);
    vmm = r->mapped != NULL;
    if (!r->mapped) {
      ok = (d->peers & bit) != 0;
    } else {
      size_t g = g_cfg.granularity, off = (uintptr_t)ptr - r->start;
      for (size_t k = off / g; ok && k <= (off + nbytes - 1) / g; k++) ok = (r->access[k] & bit) != 0;
    }
  }
  pthread_mutex_unlock(&d->lock);
  if (ok) return MN_OK;
  if (!mapped)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) is not mapped memory of sim:%d", ptr, nbytes,
                     owner.index);
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "[%p, +%zu) of sim:%d is not accessible from sim:%d (%s)", ptr,
                   nbytes, owner.index, accessor.index,
                   vmm ? "mapped pages not granted to it with mn_device_mem_set_access"
                       : "no peer access enabled to it");
}

mn_status mn_sim_get_stats(mn_device_t dev, mn_sim_stats_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  *out = d->stats;
  return unlock_ret(d, MN_OK);
}

#define CAPTURE_BROKEN(...) mn__error(MN_ERR_INTERNAL, "mn_sim_check_invariants", __VA_ARGS__)

/* Nodes depend only on earlier nodes; a frontier names existing nodes. */
static bool graph_ok(const sg_graph *g, const sg_set *front) {
  size_t ops = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    ops += g->nodes[i].kind != SG_EMPTY;
    for (uint32_t k = 0; k < g->nodes[i].ndeps; k++)
      if (g->nodes[i].deps[k] >= i) return false;
  }
  for (uint32_t i = 0; front && i < front->n; i++)
    if (front->ids[i] >= g->n) return false;
  return ops == g->ops && g->n <= g->cap;
}

/* Captures: each stream's capture is active, its id mirrored, its members
 * counted; the default stream never captures; graphs counted. pre: lock held. */
static mn_status capture_check(sim_device *d, int index) {
  if (d->default_stream.cap || atomic_load(&d->default_stream.cap_id))
    return CAPTURE_BROKEN("sim:%d: the default stream captures", index);
  for (sim_capture *c = d->captures; c; c = c->next) {
    size_t members = 0;
    for (sim_stream *s = d->streams; s; s = s->next) members += s->cap == c;
    if (members != c->members || !c->origin || c->origin->cap != c || !graph_ok(&c->graph, NULL))
      return CAPTURE_BROKEN("sim:%d: capture %llu: %zu member streams counted, %zu found, or its graph is broken",
                            index, (unsigned long long)c->id, c->members, members);
  }
  for (sim_stream *s = d->streams; s; s = s->next) {
    if (s->cap ? capture_find(d, s->cap->id) != s->cap || atomic_load(&s->cap_id) != s->cap->id ||
                     !graph_ok(&s->cap->graph, &s->front)
               : atomic_load(&s->cap_id) != 0)
      return CAPTURE_BROKEN("sim:%d: a stream's capture state is broken", index);
  }
  size_t graphs = 0;
  for (const sim_graph *g = d->graphs; g; g = g->next, graphs++)
    if ((g->next && g->next->prev != g) || (g->prev == NULL) != (g == d->graphs) || !graph_ok(&g->g, NULL))
      return CAPTURE_BROKEN("sim:%d: the graph list or a graph is broken", index);
  if (graphs != d->stats.live_graphs)
    return CAPTURE_BROKEN("sim:%d: %zu graphs counted, %zu found", index, d->stats.live_graphs, graphs);
  return MN_OK;
}

/* A range's max_gap is the largest gap of its subtree. */
static bool range_summary_ok(const mn__avl_node *n) {
  const sim_range *r = (const sim_range *)n;
  size_t m = r->gap, l = range_max_gap(n->left), g = range_max_gap(n->right);
  if (l > m) m = l;
  if (g > m) m = g;
  return r->max_gap == m;
}

mn_status mn_sim_check_invariants(mn_device_t dev) {
  mn_status st = sim_device_arg(__func__, dev);
  if (st != MN_OK) return st;
  SIM_LOCKED(dev.index, d);
  size_t phys = 0, reservations = 0, g = g_cfg.granularity;
  uintptr_t lo = (uintptr_t)d->base, hi = lo + d->va_size;
  if (!mn__avl_check(&d->ranges, range_summary_ok))
    return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: the range tree is broken", dev.index));
  uintptr_t prev_end = lo;
  for (const sim_range *r = (const sim_range *)mn__avl_first(&d->ranges); r; r = range_next(r)) {
    if (r->start < lo || r->size == 0 || r->size % g || r->start % g || r->size > hi - r->start)
      return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: range %p is outside the device", dev.index,
                                     (void *)r->start));
    if (r->start < prev_end || r->gap != r->start - prev_end)
      return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__,
                                     "sim:%d: range %p overlaps the one before it or its gap (%zu) is wrong",
                                     dev.index, (void *)r->start, r->gap));
    prev_end = r->start + r->size;
    if (r->import) {
      /* another process's memory: not counted */
    } else if (r->mapped) {
      reservations++;
      for (size_t k = 0; k < r->size / g; k++) phys += r->mapped[k] ? g : 0;
    } else {
      phys += r->size;
    }
  }
  if (phys != d->stats.mapped_bytes)
    return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: mapped_bytes=%zu but ranges hold %zu",
                                   dev.index, d->stats.mapped_bytes, phys));
  if (reservations != d->stats.live_reservations)
    return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: %zu reservations counted, %zu found",
                                   dev.index, d->stats.live_reservations, reservations));
  size_t streams = 0, events = 0;
  for (sim_stream *s = d->streams; s; s = s->next) {
    streams++;
    if (s->completed > s->queued || (s->head == NULL) != (s->completed == s->queued))
      return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: a stream's queue counts disagree", dev.index));
  }
  for (sim_event *e = d->events; e; e = e->next, events++)
    if (e->stream && (e->stream->refs == 0 || (e->stream->dead && e->stream->completed < e->target)))
      return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: an event's stream reference is broken",
                                     dev.index));
  if (streams != d->stats.live_streams || events != d->stats.live_events)
    return unlock_ret(d, mn__error(MN_ERR_INTERNAL, __func__, "sim:%d: live stream/event counts disagree", dev.index));
  st = capture_check(d, dev.index);
  return unlock_ret(d, st == MN_OK ? pool_check(d, dev.index) : st);
}
