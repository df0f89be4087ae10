/* allocators/pinned.c: the pinned host pool (mnemo/pinned.h): size classes,
 * blocks reused only after the events recorded at free completed, statistics,
 * empty_cache, and the registry of live pools behind mn_is_pinned.
 * Thread-safe: one mutex per pool, held for bookkeeping only (never across a
 * pin, unpin, event record or synchronize); the registry's lock is taken
 * before a pool's, never after. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/pinned.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/stream_hold.h"

#define MAX_DIVISIONS 8
#define NBUCKETS (64 * MAX_DIVISIONS)
#define INLINE_STREAMS 4
#define MAX_DEFAULT_DEVICES 64

typedef enum { B_FREE, B_LIVE, B_PENDING } bstate;

/* An event recorded for a pending block, or cached for reuse. */
typedef struct pevent {
  mn_event_t *ev;
  struct pevent *next;
} pevent;

typedef struct pblock {
  char *ptr;
  size_t size;      /* its size class, bytes */
  size_t requested; /* bytes asked for by the live allocation */
  unsigned bucket;
  bstate state;
  struct pblock *next, *prev; /* its bucket's free list, or the pending list */
  mn_stream_t **streams;      /* recorded while live, each held (runtime/stream_hold.h)
                               * until free has recorded its event; inline_streams or the heap */
  size_t nstreams, cap_streams;
  mn_stream_t *inline_streams[INLINE_STREAMS];
  pevent *events; /* pending: the events still to complete */
} pblock;

typedef struct pinned_pool {
  mn_allocator_t base; /* first: the vtable header */
  mn_device_t dev;     /* device_for_events */
  mn_pinned_config_t cfg;
  unsigned div_shift; /* log2(size_class_divisions) */
  pthread_mutex_t lock;
  pblock **blocks; /* every block, sorted by address */
  size_t nblocks, cap_blocks;
  pblock *free_lists[NBUCKETS];
  pblock *pending_head, *pending_tail;
  pevent *event_cache;
  mn_alloc_stats_t stats; /* the MN_POOL_ALL row */
  struct pinned_pool *reg_next;
} pinned_pool;

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pinned_pool *g_reg_head;

/* ---- size classes ----------------------------------------------------------- */

mn_pinned_config_t mn_pinned_config_default(void) {
  return (mn_pinned_config_t){.size_class_divisions = 4, .use_host_register = false};
}

static unsigned log2_floor(size_t n) { return 63u - (unsigned)__builtin_clzll((unsigned long long)n); }

/* Powers of two split into 2^div_shift steps, each at least MIN_CLASS bytes. */
static size_t class_of(unsigned div_shift, size_t n) {
  if (n <= MN_PINNED_MIN_CLASS) return MN_PINNED_MIN_CLASS;
  size_t step = ((size_t)1 << log2_floor(n)) >> div_shift;
  if (step < MN_PINNED_MIN_CLASS) step = MN_PINNED_MIN_CLASS;
  if (n > SIZE_MAX - (step - 1)) return 0;
  return (n + step - 1) & ~(step - 1);
}

/* One bucket per class: MAX_DIVISIONS slots per power of two. */
static unsigned bucket_of(unsigned div_shift, size_t cls) {
  unsigned k = log2_floor(cls);
  return k * MAX_DIVISIONS + (unsigned)((cls - ((size_t)1 << k)) >> (k - div_shift));
}

static mn_status config_check(const char *func, const mn_pinned_config_t *c, unsigned *shift) {
  unsigned d = c->size_class_divisions;
  if (d != 1 && d != 2 && d != 4 && d != 8)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "size_class_divisions=%u is not 1, 2, 4 or 8", d);
  *shift = log2_floor(d);
  return MN_OK;
}

size_t mn_pinned_size_class(const mn_pinned_config_t *config, size_t nbytes) {
  mn_pinned_config_t c = config ? *config : mn_pinned_config_default();
  unsigned shift = 0;
  if (config_check(__func__, &c, &shift) != MN_OK) return 0;
  return class_of(shift, nbytes);
}

/* ---- bookkeeping (pool lock held) ------------------------------------------- */

static void stat_add(mn_stat_t *s, int64_t d) {
  s->current += d;
  if (d > 0) {
    s->allocated += d;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed -= d;
  }
}

#define ALL MN_POOL_ALL

/* The live counters (sign +1: becomes live, -1: stops being live). */
static void count_live(pinned_pool *p, const pblock *b, int sign) {
  stat_add(&p->stats.allocation[ALL], sign);
  stat_add(&p->stats.allocated_bytes[ALL], sign * (int64_t)b->size);
  stat_add(&p->stats.requested_bytes[ALL], sign * (int64_t)b->requested);
}

/* The active counters: live or pending free. */
static void count_active(pinned_pool *p, const pblock *b, int sign) {
  stat_add(&p->stats.active[ALL], sign);
  stat_add(&p->stats.active_bytes[ALL], sign * (int64_t)b->size);
}

static void mark_live(pinned_pool *p, pblock *b, size_t requested) {
  b->state = B_LIVE;
  b->requested = requested;
  count_live(p, b, 1);
  count_active(p, b, 1);
}

static void push_free(pinned_pool *p, pblock *b) {
  b->state = B_FREE;
  b->prev = NULL;
  b->next = p->free_lists[b->bucket];
  p->free_lists[b->bucket] = b;
}

static void pending_append(pinned_pool *p, pblock *b) {
  b->next = NULL;
  b->prev = p->pending_tail;
  if (p->pending_tail) p->pending_tail->next = b;
  else p->pending_head = b;
  p->pending_tail = b;
}

static void pending_unlink(pinned_pool *p, pblock *b) {
  if (b->prev) b->prev->next = b->next;
  else p->pending_head = b->next;
  if (b->next) b->next->prev = b->prev;
  else p->pending_tail = b->prev;
}

/* Index of the last block whose address <= q, or -1. */
static long block_index(const pinned_pool *p, const void *q) {
  long lo = 0, hi = (long)p->nblocks - 1, found = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    if ((const void *)p->blocks[mid]->ptr <= q) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

static pblock *block_containing(const pinned_pool *p, const void *q) {
  long i = block_index(p, q);
  if (i < 0) return NULL;
  pblock *b = p->blocks[i];
  return (uintptr_t)q - (uintptr_t)b->ptr < b->size ? b : NULL;
}

static mn_status block_insert(pinned_pool *p, pblock *b) {
  if (p->nblocks == p->cap_blocks) {
    size_t cap = p->cap_blocks ? p->cap_blocks * 2 : 64;
    pblock **r = mn__realloc(p->blocks, cap * sizeof *r);
    if (!r) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for the block index");
    p->blocks = r;
    p->cap_blocks = cap;
  }
  size_t pos = (size_t)(block_index(p, b->ptr) + 1);
  memmove(&p->blocks[pos + 1], &p->blocks[pos], (p->nblocks - pos) * sizeof *p->blocks);
  p->blocks[pos] = b;
  p->nblocks++;
  stat_add(&p->stats.segment[ALL], 1);
  stat_add(&p->stats.reserved_bytes[ALL], (int64_t)b->size);
  p->stats.num_device_alloc++;
  return MN_OK;
}

/* Moves pending blocks whose events have all completed to their free lists.
 * A failed query counts as "not yet": the block waits for a later poll. */
static void process_events(pinned_pool *p) {
  pblock *next = NULL;
  for (pblock *b = p->pending_head; b; b = next) {
    next = b->next;
    while (b->events) {
      bool done = false;
      if (mn_event_query(b->events->ev, &done) != MN_OK || !done) break;
      pevent *e = b->events;
      b->events = e->next;
      e->next = p->event_cache;
      p->event_cache = e;
    }
    if (!b->events) {
      pending_unlink(p, b);
      count_active(p, b, -1);
      push_free(p, b);
    }
  }
}

/* ---- pinning ---------------------------------------------------------------- */

static mn_status raw_pin(pinned_pool *p, size_t size, void **out) {
  if (!p->cfg.use_host_register) return mn_device_host_alloc(p->dev, size, out);
  void *m = mn__aligned_alloc(MN_PINNED_MIN_CLASS, size); /* size is a multiple of the alignment */
  if (!m) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu bytes", size);
  mn_status st = mn_device_host_register(p->dev, m, size);
  if (st != MN_OK) {
    free(m);
    return st;
  }
  *out = m;
  return MN_OK;
}

static mn_status raw_unpin(pinned_pool *p, void *m) {
  if (!p->cfg.use_host_register) return mn_device_host_free(p->dev, m);
  mn_status st = mn_device_host_unregister(p->dev, m);
  if (st == MN_OK) free(m); /* still registered memory is not handed back to libc */
  return st;
}

static void block_free(pinned_pool *p, pblock *b, mn_status *first_error) {
  mn_status st = raw_unpin(p, b->ptr);
  if (st != MN_OK && *first_error == MN_OK) *first_error = st;
  for (size_t i = 0; i < b->nstreams; i++) mn__stream_unhold(b->streams[i]); /* a live block's (destroy) */
  b->nstreams = 0;
  if (b->streams != b->inline_streams) free(b->streams);
  free(b);
}

/* Takes every free block out of the pool (lists and index); returns them
 * chained by `next`. pre: lock held. */
static pblock *detach_free_blocks(pinned_pool *p) {
  pblock *out = NULL;
  for (unsigned k = 0; k < NBUCKETS; k++) {
    while (p->free_lists[k]) {
      pblock *b = p->free_lists[k];
      p->free_lists[k] = b->next;
      b->next = out;
      out = b;
      stat_add(&p->stats.segment[ALL], -1);
      stat_add(&p->stats.reserved_bytes[ALL], -(int64_t)b->size);
      p->stats.num_device_free++;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < p->nblocks; i++)
    if (p->blocks[i]->state != B_FREE) p->blocks[kept++] = p->blocks[i];
  p->nblocks = kept;
  return out;
}

static void events_destroy(pevent *e) {
  while (e) {
    pevent *n = e->next;
    mn__ignore(mn_event_destroy(e->ev)); /* a recorded event, done with; nothing to report to */
    free(e);
    e = n;
  }
}

/* Unpins the chained blocks and destroys the chained events (no lock held). */
static mn_status release_detached(pinned_pool *p, pblock *blocks, pevent *events) {
  mn_status first = MN_OK;
  while (blocks) {
    pblock *n = blocks->next;
    block_free(p, blocks, &first);
    blocks = n;
  }
  events_destroy(events);
  return first;
}

/* ---- the vtable ------------------------------------------------------------- */

static mn_status pinned_empty_cache(mn_allocator_t *self);

static mn_status pinned_alloc(mn_allocator_t *self, size_t nbytes, mn_stream_t *stream, void **out) {
  pinned_pool *p = (pinned_pool *)self;
  size_t cls = class_of(p->div_shift, nbytes);
  if (cls == 0) {
    pthread_mutex_lock(&p->lock);
    p->stats.num_ooms++;
    pthread_mutex_unlock(&p->lock);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "nbytes=%zu is too large for a pinned size class", nbytes);
  }
  unsigned bucket = bucket_of(p->div_shift, cls);
  pthread_mutex_lock(&p->lock);
  if (p->pending_head) process_events(p);
  pblock *b = p->free_lists[bucket];
  if (b) {
    p->free_lists[bucket] = b->next;
    mark_live(p, b, nbytes);
    pthread_mutex_unlock(&p->lock);
    *out = b->ptr;
    return MN_OK;
  }
  pthread_mutex_unlock(&p->lock);

  void *m = NULL;
  mn_status st = raw_pin(p, cls, &m);
  if (st == MN_ERR_OUT_OF_MEMORY) { /* give the cache back and try once more */
    pthread_mutex_lock(&p->lock);
    p->stats.num_alloc_retries++;
    pthread_mutex_unlock(&p->lock);
    pinned_empty_cache(self);
    st = raw_pin(p, cls, &m);
  }
  if (st != MN_OK) {
    pthread_mutex_lock(&p->lock);
    if (st == MN_ERR_OUT_OF_MEMORY) p->stats.num_ooms++;
    pthread_mutex_unlock(&p->lock);
    return mn__error_wrap(st, __func__);
  }
  b = mn__calloc(1, sizeof *b);
  if (!b) {
    raw_unpin(p, m);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a block record");
  }
  b->ptr = m;
  b->size = cls;
  b->bucket = bucket;
  b->streams = b->inline_streams;
  b->cap_streams = INLINE_STREAMS;
  pthread_mutex_lock(&p->lock);
  st = block_insert(p, b);
  if (st == MN_OK) mark_live(p, b, nbytes);
  pthread_mutex_unlock(&p->lock);
  if (st != MN_OK) {
    raw_unpin(p, m);
    free(b);
    return st;
  }
  *out = m;
  return MN_OK;
}

/* A cached event of `dev`, or a new one. */
static mn_status event_get(pinned_pool *p, mn_device_t dev, pevent **out) {
  pthread_mutex_lock(&p->lock);
  for (pevent **pp = &p->event_cache; *pp; pp = &(*pp)->next) {
    if (mn_device_equal(mn_event_device((*pp)->ev), dev)) {
      *out = *pp;
      *pp = (*pp)->next;
      pthread_mutex_unlock(&p->lock);
      return MN_OK;
    }
  }
  pthread_mutex_unlock(&p->lock);
  pevent *e = mn__calloc(1, sizeof *e);
  if (!e) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for an event");
  mn_status st = mn_event_create(dev, &e->ev);
  if (st != MN_OK) {
    free(e);
    return st;
  }
  *out = e;
  return MN_OK;
}

/* Records one event per stream of b (outside the lock). A stream whose record
 * fails is synchronized instead. On failure returns the error and hands the
 * events recorded so far back through *recorded all the same. */
static mn_status record_uses(pinned_pool *p, pblock *b, pevent **recorded) {
  for (size_t i = 0; i < b->nstreams; i++) {
    mn_stream_t *s = b->streams[i];
    pevent *e = NULL;
    mn_status st = event_get(p, mn_stream_device(s), &e);
    if (st == MN_OK) {
      st = mn_event_record(e->ev, s);
      if (st == MN_OK) {
        e->next = *recorded;
        *recorded = e;
        continue;
      }
      pthread_mutex_lock(&p->lock);
      e->next = p->event_cache;
      p->event_cache = e;
      pthread_mutex_unlock(&p->lock);
    }
    st = mn_stream_synchronize(s);
    if (st != MN_OK) return st;
  }
  return MN_OK;
}

static mn_status pinned_free(mn_allocator_t *self, void *ptr) {
  pinned_pool *p = (pinned_pool *)self;
  pthread_mutex_lock(&p->lock);
  long i = block_index(p, ptr);
  pblock *b = i >= 0 ? p->blocks[i] : NULL;
  if (!b || b->ptr != ptr || b->state != B_LIVE) {
    pthread_mutex_unlock(&p->lock);
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "ptr=%p is not a live allocation of this pinned pool",
                     ptr);
  }
  count_live(p, b, -1);
  if (b->nstreams == 0) {
    count_active(p, b, -1);
    push_free(p, b);
    pthread_mutex_unlock(&p->lock);
    return MN_OK;
  }
  /* Pending from here: no alloc takes it, no record_stream or free touches it. */
  b->state = B_PENDING;
  pthread_mutex_unlock(&p->lock);

  pevent *recorded = NULL;
  mn_status st = record_uses(p, b, &recorded);
  pthread_mutex_lock(&p->lock);
  if (st != MN_OK) { /* nothing changed: the block stays live with its streams */
    while (recorded) {
      pevent *n = recorded->next;
      recorded->next = p->event_cache;
      p->event_cache = recorded;
      recorded = n;
    }
    b->state = B_LIVE;
    count_live(p, b, 1);
    pthread_mutex_unlock(&p->lock);
    return mn__error_wrap(st, __func__);
  }
  for (size_t k = 0; k < b->nstreams; k++) mn__stream_unhold(b->streams[k]); /* the events stand for them now */
  b->nstreams = 0;
  b->events = recorded;
  if (recorded) {
    pending_append(p, b);
  } else { /* every stream was synchronized instead */
    count_active(p, b, -1);
    push_free(p, b);
  }
  pthread_mutex_unlock(&p->lock);
  return MN_OK;
}

static mn_status pinned_record_stream(mn_allocator_t *self, void *ptr, mn_stream_t *stream) {
  pinned_pool *p = (pinned_pool *)self;
  mn_device_t sd = mn_stream_device(stream);
  char a[32], c[32];
  if (sd.type != MN_DEVICE_CPU && sd.type != p->dev.type)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "a stream of %s cannot order the pinned pool of %s",
                     mn_device_format(sd, a, sizeof a), mn_device_format(p->dev, c, sizeof c));
  pthread_mutex_lock(&p->lock);
  pblock *b = block_containing(p, ptr);
  mn_status st = MN_OK;
  if (!b || b->state != B_LIVE) {
    st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "ptr=%p is not inside a live allocation of this pinned pool",
                   ptr);
  } else if (sd.type != MN_DEVICE_CPU) { /* CPU work is done when queued: nothing to wait for */
    bool seen = false;
    for (size_t k = 0; k < b->nstreams && !seen; k++) seen = b->streams[k] == stream;
    if (!seen && b->nstreams == b->cap_streams) {
      mn_stream_t **grown = mn__malloc(2 * b->cap_streams * sizeof *grown);
      if (!grown) {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
      } else {
        memcpy(grown, b->streams, b->nstreams * sizeof *grown);
        if (b->streams != b->inline_streams) free(b->streams);
        b->streams = grown;
        b->cap_streams *= 2;
      }
    }
    if (!seen && st == MN_OK) {
      mn__stream_hold(stream);
      b->streams[b->nstreams++] = stream;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return st;
}

static mn_status pinned_empty_cache(mn_allocator_t *self) {
  pinned_pool *p = (pinned_pool *)self;
  pthread_mutex_lock(&p->lock);
  if (p->pending_head) process_events(p);
  pblock *blocks = detach_free_blocks(p);
  pevent *events = p->event_cache;
  p->event_cache = NULL;
  pthread_mutex_unlock(&p->lock);
  mn_status st = release_detached(p, blocks, events);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static mn_status pinned_get_stats(mn_allocator_t *self, mn_alloc_stats_t *out) {
  pinned_pool *p = (pinned_pool *)self;
  pthread_mutex_lock(&p->lock);
  if (p->pending_head) process_events(p);
  uint32_t size = out->size, version = out->version;
  *out = p->stats;
  pthread_mutex_unlock(&p->lock);
  out->size = size;
  out->version = version;
  out->max_split_size = -1;
  return MN_OK;
}

static mn_status pinned_reset_peak(mn_allocator_t *self) {
  pinned_pool *p = (pinned_pool *)self;
  pthread_mutex_lock(&p->lock);
#define MN__RESET_PEAK(name, text) p->stats.name[ALL].peak = p->stats.name[ALL].current;
  MN_ALLOC_STATS_MAP(MN__RESET_PEAK)
#undef MN__RESET_PEAK
  pthread_mutex_unlock(&p->lock);
  return MN_OK;
}

static mn_status pinned_snapshot(mn_allocator_t *self, mn_snapshot_t **out) {
  pinned_pool *p = (pinned_pool *)self;
  mn_snapshot_t *snap = mn__calloc(1, sizeof *snap);
  if (!snap) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  pthread_mutex_lock(&p->lock);
  size_t n = p->nblocks;
  snap->segments = n ? mn__calloc(n, sizeof *snap->segments) : NULL;
  bool ok = n == 0 || snap->segments != NULL;
  for (size_t i = 0; ok && i < n; i++) {
    const pblock *b = p->blocks[i];
    mn_snapshot_segment_t *seg = &snap->segments[i];
    seg->blocks = mn__calloc(1, sizeof *seg->blocks);
    if (!seg->blocks) {
      ok = false;
      break;
    }
    snap->nsegments = i + 1;
    bool live = b->state == B_LIVE;
    seg->device = mn_device_cpu();
    seg->address = (uintptr_t)b->ptr;
    seg->total_size = b->size;
    seg->allocated_size = live ? b->size : 0;
    seg->active_size = b->state != B_FREE ? b->size : 0;
    seg->requested_size = live ? b->requested : 0;
    seg->nblocks = 1;
    seg->blocks[0] = (mn_snapshot_block_t){
        .address = (uintptr_t)b->ptr,
        .size = b->size,
        .requested_size = live ? b->requested : 0,
        .state = live ? MN_BLOCK_ACTIVE
                      : b->state == B_PENDING ? MN_BLOCK_ACTIVE_PENDING_FREE : MN_BLOCK_INACTIVE};
  }
  pthread_mutex_unlock(&p->lock);
  if (!ok) {
    mn_snapshot_free(snap);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  *out = snap;
  return MN_OK;
}

static mn_status invariant_fail(pinned_pool *p, const char *what, long long have, long long want) {
  pthread_mutex_unlock(&p->lock);
  return mn__error(MN_ERR_INTERNAL, "pinned_check_invariants", "%s is %lld, expected %lld", what, have, want);
}

static mn_status pinned_check_invariants(mn_allocator_t *self) {
  pinned_pool *p = (pinned_pool *)self;
  pthread_mutex_lock(&p->lock);
  long long count[3] = {0, 0, 0}, bytes[3] = {0, 0, 0}, requested = 0;
  for (size_t i = 0; i < p->nblocks; i++) {
    const pblock *b = p->blocks[i];
    if (i + 1 < p->nblocks && b->ptr + b->size > p->blocks[i + 1]->ptr)
      return invariant_fail(p, "overlapping blocks at index", (long long)i, -1);
    if (b->size != class_of(p->div_shift, b->size) || b->bucket != bucket_of(p->div_shift, b->size))
      return invariant_fail(p, "a block's size class", (long long)b->size, (long long)class_of(p->div_shift, b->size));
    count[b->state]++;
    bytes[b->state] += (long long)b->size;
    if (b->state == B_LIVE) requested += (long long)b->requested;
  }
  long long listed_free = 0, listed_pending = 0;
  for (unsigned k = 0; k < NBUCKETS; k++)
    for (const pblock *b = p->free_lists[k]; b; b = b->next) {
      if (b->state != B_FREE || b->bucket != k) return invariant_fail(p, "state of a listed free block", b->state, B_FREE);
      listed_free++;
    }
  for (const pblock *b = p->pending_head; b; b = b->next) {
    if (b->state != B_PENDING || !b->events) return invariant_fail(p, "state of a listed pending block", b->state, B_PENDING);
    listed_pending++;
  }
  const mn_alloc_stats_t *s = &p->stats;
  if (listed_free != count[B_FREE]) return invariant_fail(p, "free-listed blocks", listed_free, count[B_FREE]);
  if (listed_pending > count[B_PENDING]) return invariant_fail(p, "pending-listed blocks", listed_pending, count[B_PENDING]);
  if (s->segment[ALL].current != (int64_t)p->nblocks) return invariant_fail(p, "segment.current", s->segment[ALL].current, (long long)p->nblocks);
  if (s->reserved_bytes[ALL].current != bytes[0] + bytes[1] + bytes[2])
    return invariant_fail(p, "reserved_bytes.current", s->reserved_bytes[ALL].current, bytes[0] + bytes[1] + bytes[2]);
  if (s->allocation[ALL].current != count[B_LIVE]) return invariant_fail(p, "allocation.current", s->allocation[ALL].current, count[B_LIVE]);
  if (s->allocated_bytes[ALL].current != bytes[B_LIVE])
    return invariant_fail(p, "allocated_bytes.current", s->allocated_bytes[ALL].current, bytes[B_LIVE]);
  if (s->requested_bytes[ALL].current != requested)
    return invariant_fail(p, "requested_bytes.current", s->requested_bytes[ALL].current, requested);
  if (s->active[ALL].current != count[B_LIVE] + count[B_PENDING])
    return invariant_fail(p, "active.current", s->active[ALL].current, count[B_LIVE] + count[B_PENDING]);
  if (s->active_bytes[ALL].current != bytes[B_LIVE] + bytes[B_PENDING])
    return invariant_fail(p, "active_bytes.current", s->active_bytes[ALL].current, bytes[B_LIVE] + bytes[B_PENDING]);
  pthread_mutex_unlock(&p->lock);
  return MN_OK;
}

static void registry_remove(pinned_pool *p) {
  pthread_mutex_lock(&g_reg_lock);
  for (pinned_pool **pp = &g_reg_head; *pp; pp = &(*pp)->reg_next) {
    if (*pp == p) {
      *pp = p->reg_next;
      break;
    }
  }
  pthread_mutex_unlock(&g_reg_lock);
}

static void pinned_destroy(mn_allocator_t *self) {
  pinned_pool *p = (pinned_pool *)self;
  registry_remove(p);
  /* Wait for pending blocks, then everything is unpinned (live blocks too). */
  for (pblock *b = p->pending_head; b; b = b->next)
    for (pevent *e = b->events; e; e = e->next) mn__ignore(mn_event_synchronize(e->ev)); /* destroy cannot report */
  mn_status ignored = MN_OK;
  for (size_t i = 0; i < p->nblocks; i++) {
    events_destroy(p->blocks[i]->events);
    block_free(p, p->blocks[i], &ignored);
  }
  events_destroy(p->event_cache);
  free(p->blocks);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

static const mn_allocator_vtable_t pinned_vtable = {
    .size = sizeof(mn_allocator_vtable_t),
    .version = MN_ALLOCATOR_VTABLE_VERSION,
    .name = "pinned",
    .alloc = pinned_alloc,
    .free = pinned_free,
    .record_stream = pinned_record_stream,
    .empty_cache = pinned_empty_cache,
    .get_stats = pinned_get_stats,
    .reset_peak = pinned_reset_peak,
    .snapshot = pinned_snapshot,
    .check_invariants = pinned_check_invariants,
    .destroy = pinned_destroy,
};

/* ---- public ----------------------------------------------------------------- */

mn_status mn_pinned_allocator_create(mn_device_t device_for_events, const mn_pinned_config_t *config,
                                     mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_pinned_config_t cfg = config ? *config : mn_pinned_config_default();
  unsigned shift = 0;
  mn_status st = config_check(__func__, &cfg, &shift);
  if (st != MN_OK) return st;
  st = mn_device_check(device_for_events);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  pinned_pool *p = mn__calloc(1, sizeof *p);
  if (!p) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  p->base.vtable = &pinned_vtable;
  p->base.device = mn_device_cpu();
  p->dev = device_for_events;
  p->cfg = cfg;
  p->div_shift = shift;
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_lock(&g_reg_lock);
  p->reg_next = g_reg_head;
  g_reg_head = p;
  pthread_mutex_unlock(&g_reg_lock);
  *out = &p->base;
  return MN_OK;
}

static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_allocator_t *g_defaults[MN_DEVICE_TYPE_COUNT][MAX_DEFAULT_DEVICES];

mn_status mn_pinned_allocator_get_default(mn_device_t dev, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (dev.index >= MAX_DEFAULT_DEVICES)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "device index %d >= %d", dev.index, MAX_DEFAULT_DEVICES);
  pthread_mutex_lock(&g_default_lock);
  mn_allocator_t **slot = &g_defaults[dev.type][dev.index];
  if (!*slot) st = mn_pinned_allocator_create(dev, NULL, slot);
  mn_allocator_t *a = *slot;
  pthread_mutex_unlock(&g_default_lock);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  *out = a;
  return MN_OK;
}

/* The live pool with a block holding ptr, or NULL. */
static mn_allocator_t *registry_find(const void *ptr) {
  mn_allocator_t *found = NULL;
  pthread_mutex_lock(&g_reg_lock);
  for (pinned_pool *p = g_reg_head; p && !found && ptr; p = p->reg_next) {
    pthread_mutex_lock(&p->lock);
    if (block_containing(p, ptr)) found = &p->base;
    pthread_mutex_unlock(&p->lock);
  }
  pthread_mutex_unlock(&g_reg_lock);
  return found;
}

mn_status mn_pinned_allocator_lookup(const void *ptr, mn_allocator_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_allocator_t *found = registry_find(ptr);
  if (!found) return mn__error(MN_ERR_NOT_FOUND, __func__, "ptr=%p is not in any pinned pool", ptr);
  *out = found;
  return MN_OK;
}

/* Asks the backend of the first device of `type`, if one exists. */
static bool backend_says_pinned(mn_device_type type, const void *ptr) {
  int n = 0;
  bool pinned = false;
  if (mn_device_count(type, &n) != MN_OK || n == 0) return false;
  return mn_device_host_is_pinned((mn_device_t){type, 0}, ptr, &pinned) == MN_OK && pinned;
}

bool mn_is_pinned(const void *ptr) {
  if (!ptr) return false;
  if (registry_find(ptr)) return true;
  return backend_says_pinned(MN_DEVICE_SIM, ptr) || backend_says_pinned(MN_DEVICE_CUDA, ptr);
}
