/* storage/copy_staged.c: the copy engine's lower half, below storage/copy.c
 * (which alone holds the entry points and never is called back): the
 * queued range copy every path is built from (a byte copy, or a host
 * function running the CPU strided copy), host-side range copies split over
 * the kernels' CPU pool (kernels/pool.h, the library's one worker pool), and
 * the staged paths: pageable host memory and device-to-device copies between
 * devices without peer access go through a ring of pinned staging blocks,
 * chunk by chunk, with the helper streams and cached events they use.
 * Thread-safe: the shared tables have one lock each; a copy's ring is its own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/pool.h"
#include "runtime/debug.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "storage/copy_staged.h"

#define MAX_SLOTS 64
#define MAX_HELPER_INDEX 64
#define MAX_CACHED_EVENTS 256
#define SPLIT_MIN_BYTES ((int64_t)1 << 20)

/* ---- helper streams and cached events ------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_stream_t *g_helpers[MN_DEVICE_TYPE_COUNT][MAX_HELPER_INDEX];

typedef struct cached_event {
  mn_event_t *ev;
  struct cached_event *next;
} cached_event;
static cached_event *g_events;
static size_t g_nevents;

/* The device's helper stream: where device -> host copies run their host side. */
static mn_status helper_stream(mn_device_t dev, mn_stream_t **out) {
  if (dev.index >= MAX_HELPER_INDEX)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "device index %d >= %d", dev.index, MAX_HELPER_INDEX);
  pthread_mutex_lock(&g_lock);
  mn_stream_t **slot = &g_helpers[dev.type][dev.index];
  mn_status st = *slot ? MN_OK : mn_stream_create(dev, slot);
  if (st == MN_OK) *out = *slot;
  pthread_mutex_unlock(&g_lock);
  return st;
}

static mn_status event_take(mn_device_t dev, mn_event_t **out) {
  pthread_mutex_lock(&g_lock);
  for (cached_event **pp = &g_events; *pp; pp = &(*pp)->next) {
    if (mn_device_equal(mn_event_device((*pp)->ev), dev)) {
      cached_event *e = *pp;
      *pp = e->next;
      g_nevents--;
      pthread_mutex_unlock(&g_lock);
      *out = e->ev;
      free(e);
      return MN_OK;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return mn_event_create(dev, out);
}

/* Waits that captured the event keep their point (CUDA semantics), so an event
 * can be reused at once. */
static void event_give(mn_event_t *ev) {
  if (!ev) return;
  cached_event *e = NULL;
  pthread_mutex_lock(&g_lock);
  if (g_nevents < MAX_CACHED_EVENTS && (e = mn__malloc(sizeof *e)) != NULL) {
    e->ev = ev;
    e->next = g_events;
    g_events = e;
    g_nevents++;
  }
  pthread_mutex_unlock(&g_lock);
  if (!e) mn__ignore(mn_event_destroy(ev)); /* no room to keep it: the out-of-memory is reported */
}

/* ---- host-side range copies on the kernels' CPU pool ------------------------------ */

typedef struct range_split {
  const mn__strided_t *dst, *src;
  size_t item;
  int64_t begin, n;
  int64_t parts;
} range_split;

/* Part t of the range: [begin + t*n/parts, begin + (t+1)*n/parts). */
static void range_part(void *ctx, int64_t t) {
  const range_split *r = ctx;
  int64_t b = r->begin + t * r->n / r->parts, e = r->begin + (t + 1) * r->n / r->parts;
  if (b < e) mn__cpu_strided_copy(r->dst, r->src, r->item, b, e);
}

/* The CPU strided copy of [begin, end), split over `threads` threads (the
 * caller and the kernels' CPU pool) when it moves at least 1 MiB.
 * Preconditions (MN__ASSERT): item > 0, 0 <= begin <= end. */
static void copy_host_range(const mn__strided_t *dst, const mn__strided_t *src, size_t item, int64_t begin, int64_t end,
                         unsigned threads) {
  MN__ASSERT(item > 0 && 0 <= begin && begin <= end, "host range [%lld, %lld) of %zu-byte items", (long long)begin,
             (long long)end, item);
  int64_t n = end - begin;
  if (threads <= 1 || n * (int64_t)item < SPLIT_MIN_BYTES) {
    mn__cpu_strided_copy(dst, src, item, begin, end);
    return;
  }
  /* the one CPU pool of the library (kernels/pool.h): the caller takes part,
   * and runs every part itself when the pool is busy with another caller */
  range_split r = {.dst = dst, .src = src, .item = item, .begin = begin, .n = n, .parts = threads};
  mn__pool_run(range_part, &r, r.parts);
}

/* ---- the queued range copy ---------------------------------------------------- */

typedef struct range_job {
  mn__strided_t dst, src;
  size_t item;
  int64_t begin, end;
  unsigned threads;
} range_job;

static void range_job_run(void *arg) {
  range_job *j = arg;
  copy_host_range(&j->dst, &j->src, j->item, j->begin, j->end, j->threads);
  free(j);
}

mn_status mn__copy_launch_host_range(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src,
                                     size_t item, int64_t begin, int64_t end, unsigned threads) {
  MN__ASSERT(stream != NULL, "a queued host range needs a stream");
  MN__ASSERT(item > 0 && 0 <= begin && begin <= end, "queued host range [%lld, %lld) of %zu-byte items",
             (long long)begin, (long long)end, item);
  range_job *j = mn__malloc(sizeof *j);
  if (!j) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a queued copy");
  *j = (range_job){.dst = *dst, .src = *src, .item = item, .begin = begin, .end = end, .threads = threads};
  mn_status st = mn_stream_launch_host(stream, range_job_run, j);
  if (st != MN_OK) free(j);
  return st;
}

/* Address of element `i` of a contiguous side. */
static char *side_at(const mn__copy_side_t *s, size_t item, int64_t i) {
  return s->t.data + (i - s->t.origin) * (int64_t)item;
}

mn_status mn__copy_enqueue_range(mn_stream_t *stream, const mn__copy_side_t *dst, const mn__copy_side_t *src,
                                 size_t item, int64_t begin, int64_t end) {
  MN__ASSERT(stream != NULL && item > 0 && 0 <= begin, "range [%lld, %lld) of %zu-byte items on stream %p",
             (long long)begin, (long long)end, item, (void *)stream);
  MN__ASSERT((dst->contiguous && src->contiguous) ||
                 (dst->dev.type != MN_DEVICE_CUDA && src->dev.type != MN_DEVICE_CUDA),
             "a strided range copy touching CUDA memory (only host-accessible memory runs the CPU strided copy)");
  if (begin >= end) return MN_OK;
  if (dst->contiguous && src->contiguous) {
    void *d = side_at(dst, item, begin);
    const void *s = side_at(src, item, begin);
    size_t n = (size_t)(end - begin) * item;
    bool two_devices = dst->dev.type != MN_DEVICE_CPU && src->dev.type != MN_DEVICE_CPU &&
                       !mn_device_equal(dst->dev, src->dev);
    return two_devices ? mn_memcpy_peer_async(dst->dev, d, src->dev, s, n, stream)
                       : mn_memcpy_async(dst->dev, d, src->dev, s, n, stream);
  }
  /* Strided: host memory on both sides (CPU or SIM), copied by a host function. */
  return mn__copy_launch_host_range(stream, &dst->t, &src->t, item, begin, end, 1);
}

/* ---- the staging ring ------------------------------------------------------------ */

typedef struct slot {
  void *buf;          /* a pinned block of one chunk */
  mn_event_t *filled; /* the first half of the chunk's trip is done */
  mn_event_t *ready;  /* the whole trip is done: the block may be refilled */
  bool used;
} slot;

typedef struct ring {
  const mn__copy_t *c;
  mn_allocator_t *pool;
  mn_device_t pool_dev;
  int64_t chunk, nchunks; /* elements per chunk, chunks */
  unsigned nslots;
  slot slots[MAX_SLOTS];
  mn_stream_t *users[2]; /* the streams whose work reads or writes the blocks */
  mn_device_t filled_dev, ready_dev;
  bool has_filled;
} ring;

static mn_status ring_open(ring *r, const mn__copy_t *c, mn_device_t pool_dev) {
  memset(r, 0, sizeof *r);
  r->c = c;
  r->pool_dev = pool_dev;
  r->chunk = (int64_t)(c->cfg.chunk_bytes / c->item);
  if (r->chunk < 1) r->chunk = 1;
  r->nchunks = (c->numel + r->chunk - 1) / r->chunk;
  r->nslots = c->cfg.staging_buffers < MAX_SLOTS ? c->cfg.staging_buffers : MAX_SLOTS;
  if ((int64_t)r->nslots > r->nchunks) r->nslots = (unsigned)r->nchunks;
  return mn_pinned_allocator_get_default(pool_dev, &r->pool);
}

/* The slot of chunk k, its block and events made on first use. */
static mn_status ring_slot(ring *r, int64_t k, slot **out) {
  slot *s = &r->slots[k % r->nslots];
  mn_status st = MN_OK;
  if (!s->buf) {
    int64_t n = r->chunk < r->c->numel ? r->chunk : r->c->numel;
    st = mn_allocator_alloc(r->pool, (size_t)n * r->c->item, NULL, &s->buf);
  }
  if (st == MN_OK && r->has_filled && !s->filled) st = event_take(r->filled_dev, &s->filled);
  if (st == MN_OK && !s->ready) st = event_take(r->ready_dev, &s->ready);
  *out = s;
  return st;
}

/* Gives every block back to the pool once the user streams pass their work:
 * recorded on each stream the pool can order, else that stream is synchronized. */
static mn_status ring_close(ring *r) {
  mn_status first = MN_OK;
  for (unsigned i = 0; i < r->nslots; i++) {
    slot *s = &r->slots[i];
    if (s->buf) {
      for (int u = 0; u < 2; u++) {
        mn_stream_t *us = r->users[u];
        if (!us) continue;
        mn_status st = mn_stream_device(us).type == r->pool_dev.type ? mn_allocator_record_stream(r->pool, s->buf, us)
                                                                      : mn_stream_synchronize(us);
        if (st != MN_OK && first == MN_OK) first = st;
      }
      mn_status st = mn_allocator_free(r->pool, s->buf);
      if (st != MN_OK && first == MN_OK) first = st;
    }
    event_give(s->filled);
    event_give(s->ready);
  }
  return first;
}

/* The chunk [begin, end) as a packed contiguous host side over s's block. */
static void staging_side(const ring *r, const slot *s, int64_t begin, mn__copy_side_t *out) {
  memset(out, 0, sizeof *out);
  out->dev = mn_device_cpu();
  mn__strided_packed(s->buf, &r->c->dst.t, begin, &out->t);
  out->contiguous = true;
  out->pinned = true;
}

/* Elements [*begin, *end) of chunk k. */
static void chunk_bounds(const ring *r, int64_t k, int64_t *begin, int64_t *end) {
  *begin = k * r->chunk;
  *end = *begin + r->chunk < r->c->numel ? *begin + r->chunk : r->c->numel;
}

/* Wraps a chunk's failure with which chunk, which bytes and which devices. */
static mn_status chunk_error(const ring *r, mn_status st, int64_t k) {
  char inner[512], a[32], b[32];
  snprintf(inner, sizeof inner, "%s", mn__last_error_detail());
  int64_t begin, end;
  chunk_bounds(r, k, &begin, &end);
  return mn__error(st, "staged copy", "chunk %lld of %lld (bytes %lld..%lld of %lld) %s -> %s failed: %s",
                   (long long)k + 1, (long long)r->nchunks, (long long)begin * (long long)r->c->item,
                   (long long)end * (long long)r->c->item, (long long)r->c->numel * (long long)r->c->item,
                   mn_device_format(r->c->src.dev, a, sizeof a), mn_device_format(r->c->dst.dev, b, sizeof b), inner);
}

/* Closes the ring; the copy's error (if any) wins over a release error. */
static mn_status ring_finish(ring *r, mn_status st) {
  mn_status rel = ring_close(r);
  return st != MN_OK ? st : rel;
}

/* waiter's later work waits for ev: a stream wait on one device (or between
 * CUDA devices), else the host waits (SIM streams cannot wait across devices). */
static mn_status order_after(mn_stream_t *waiter, mn_event_t *ev) {
  mn_device_t w = mn_stream_device(waiter), e = mn_event_device(ev);
  if (mn_device_equal(w, e) || (w.type == MN_DEVICE_CUDA && e.type == MN_DEVICE_CUDA))
    return mn_stream_wait_event(waiter, ev);
  return mn_event_synchronize(ev);
}

/* What every staged path needs of its copy (storage/copy_staged.h). */
static void assert_staged(const mn__copy_t *c) {
  MN__ASSERT(c != NULL && c->stream != NULL && c->numel > 0 && c->item > 0 && c->cfg.chunk_bytes > 0 &&
                 c->cfg.staging_buffers > 0,
             "a staged copy without elements, stream or configuration (numel %lld, item %zu)",
             c ? (long long)c->numel : -1LL, c ? c->item : (size_t)0);
  (void)c;
}

/* Host -> device from pageable memory: the calling thread copies each chunk
 * into a staging block (after that block's previous transfer finished), then
 * queues staging -> device on the stream. Returns once the source is read. */
mn_status mn__copy_staged_h2d(const mn__copy_t *c) {
  assert_staged(c);
  MN__ASSERT(c->src.dev.type == MN_DEVICE_CPU && c->dst.dev.type != MN_DEVICE_CPU,
             "%s: staged host -> device with src of device type %d, dst of type %d", c->func, (int)c->src.dev.type,
             (int)c->dst.dev.type);
  ring r;
  mn_status st = ring_open(&r, c, c->dst.dev);
  if (st != MN_OK) return st;
  mn_stream_t *s = c->stream;
  r.users[0] = s;
  r.ready_dev = mn_stream_device(s);
  for (int64_t k = 0, begin, end; k < r.nchunks; k++) {
    chunk_bounds(&r, k, &begin, &end);
    slot *sl = NULL;
    mn__copy_side_t stage;
    st = ring_slot(&r, k, &sl);
    if (st == MN_OK && sl->used) st = mn_event_synchronize(sl->ready);
    if (st == MN_OK) {
      staging_side(&r, sl, begin, &stage);
      copy_host_range(&stage.t, &c->src.t, c->item, begin, end, c->cfg.host_threads);
      st = mn__copy_enqueue_range(s, &c->dst, &stage, c->item, begin, end);
    }
    if (st == MN_OK) st = mn_event_record(sl->ready, s);
    if (st != MN_OK) {
      st = chunk_error(&r, st, k);
      break;
    }
    sl->used = true;
  }
  return ring_finish(&r, st);
}

/* The chunk loop of the two-leg paths: leg 1 (source -> staging) on stream
 * x, leg 2 (staging -> destination) on stream y, as a host function when the
 * destination is host memory. A block is refilled only after its previous
 * leg 2 finished. If x is the ordering stream it finally waits for y's last
 * chunk, so x covers the whole copy. */
static mn_status two_legs(ring *r, mn_stream_t *x, mn_stream_t *y) {
  const mn__copy_t *c = r->c;
  bool host_dst = c->dst.dev.type == MN_DEVICE_CPU;
  mn_status st = MN_OK;
  slot *last = NULL;
  for (int64_t k = 0, begin, end; k < r->nchunks; k++) {
    chunk_bounds(r, k, &begin, &end);
    slot *sl = NULL;
    mn__copy_side_t stage;
    st = ring_slot(r, k, &sl);
    if (st == MN_OK && sl->used) st = order_after(x, sl->ready);
    if (st == MN_OK) {
      staging_side(r, sl, begin, &stage);
      st = mn__copy_enqueue_range(x, &stage, &c->src, c->item, begin, end);
    }
    if (st == MN_OK) st = mn_event_record(sl->filled, x);
    if (st == MN_OK) st = order_after(y, sl->filled);
    if (st == MN_OK)
      st = host_dst ? mn__copy_launch_host_range(y, &c->dst.t, &stage.t, c->item, begin, end, c->cfg.host_threads)
                    : mn__copy_enqueue_range(y, &c->dst, &stage, c->item, begin, end);
    if (st == MN_OK) st = mn_event_record(sl->ready, y);
    if (st != MN_OK) {
      st = chunk_error(r, st, k);
      break;
    }
    sl->used = true;
    last = sl;
  }
  /* Even after a failure: the ordering stream must cover what was queued. */
  if (last && x == c->stream) {
    mn_status w = order_after(x, last->ready);
    if (st == MN_OK) st = w;
  }
  return st;
}

/* Device -> pageable host: leg 1 on the ordering stream, leg 2 (staging ->
 * destination, a host function) on the device's helper stream, so the
 * device transfer of one chunk overlaps the host copy of the previous one;
 * the ordering stream waits for the helper at the end. */
mn_status mn__copy_staged_d2h(const mn__copy_t *c) {
  assert_staged(c);
  MN__ASSERT(c->dst.dev.type == MN_DEVICE_CPU && c->src.dev.type != MN_DEVICE_CPU,
             "%s: staged device -> host with dst of device type %d, src of type %d", c->func, (int)c->dst.dev.type,
             (int)c->src.dev.type);
  ring r;
  mn_status st = ring_open(&r, c, c->src.dev);
  mn_stream_t *s = c->stream, *h = NULL;
  if (st == MN_OK) st = helper_stream(mn_stream_device(s), &h);
  if (st != MN_OK) return st;
  r.users[0] = s;
  r.users[1] = h;
  r.has_filled = true;
  r.filled_dev = r.ready_dev = mn_stream_device(s);
  return ring_finish(&r, two_legs(&r, s, h));
}

/* Device -> device between two devices without peer access: leg 1 on a
 * stream of the source device, leg 2 on a stream of the destination device
 * (the ordering stream on its device, the default stream on the other). */
mn_status mn__copy_staged_d2d(const mn__copy_t *c) {
  assert_staged(c);
  MN__ASSERT(c->dst.dev.type != MN_DEVICE_CPU && c->src.dev.type != MN_DEVICE_CPU &&
                 !mn_device_equal(c->dst.dev, c->src.dev),
             "%s: staged device -> device needs two different devices, neither the CPU", c->func);
  mn_device_t dd = c->dst.dev, sd = c->src.dev;
  mn_stream_t *s = c->stream, *a = NULL, *b = NULL; /* a: source side, b: destination side */
  bool s_on_dst = mn_device_equal(mn_stream_device(s), dd);
  mn_status st = s_on_dst ? mn_stream_default(sd, &a) : mn_stream_default(dd, &b);
  if (st != MN_OK) return st;
  if (s_on_dst) b = s;
  else a = s;
  ring r;
  st = ring_open(&r, c, sd.type == MN_DEVICE_CUDA ? sd : dd);
  if (st != MN_OK) return st;
  r.users[0] = a;
  r.users[1] = b;
  r.has_filled = true;
  r.filled_dev = sd;
  r.ready_dev = dd;
  return ring_finish(&r, two_legs(&r, a, b));
}

/* ---- reset ----------------------------------------------------------------------- */

mn_status mn__copy_staged_reset(void) {
  mn_status first = MN_OK;
  pthread_mutex_lock(&g_lock);
  for (int t = 0; t < MN_DEVICE_TYPE_COUNT; t++)
    for (int i = 0; i < MAX_HELPER_INDEX; i++) {
      mn_stream_t *h = g_helpers[t][i];
      if (!h) continue;
      mn_status st = mn_stream_synchronize(h);
      if (st == MN_OK) st = mn_stream_destroy(h);
      if (st == MN_OK) g_helpers[t][i] = NULL;
      else if (first == MN_OK) first = st;
    }
  cached_event *e = g_events;
  g_events = NULL;
  g_nevents = 0;
  pthread_mutex_unlock(&g_lock);
  while (e) {
    cached_event *n = e->next;
    mn__ignore(mn_event_destroy(e->ev)); /* the engine's idle event: nothing to report to */
    free(e);
    e = n;
  }
  return first;
}
