/* runtime/sim_streams.c: the SIM device's streams and events: FIFO queues of
 * operations that run only when advanced or synchronized (at once on eager
 * devices), and the backend slots that create, query, synchronize and queue
 * on them (copies, sets, host functions, waits). Thread-safe: each slot takes
 * the device lock; host functions run with it held; the progress count is atomic. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/sim_internal.h"

/* ---- queues ---------------------------------------------------------------- */

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

void mn__sim_op_free(sim_op *op) {
  if (op->kind == OP_WAIT && op->wait_stream) stream_unref(op->wait_stream);
  free(op);
}

static void op_run(sim_device *d, sim_stream *s, const sim_op *op) {
  switch (op->kind) {
    case OP_COPY: {
      bool dst_dev = op->copy_kind == MN__COPY_H2D || op->copy_kind == MN__COPY_D2D;
      bool src_dev = op->copy_kind == MN__COPY_D2H || op->copy_kind == MN__COPY_D2D;
      if ((dst_dev && !mn__sim_range_is_mapped(d, op->dst, op->nbytes)) ||
          (src_dev && !mn__sim_range_is_mapped(d, op->src, op->nbytes))) {
        d->stats.illegal_accesses++;
        return;
      }
      memmove(op->dst, op->src, op->nbytes);
      return;
    }
    case OP_SET:
      if (!mn__sim_range_is_mapped(d, op->dst, op->nbytes)) {
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
      mn__sim_pool_complete_frees(s, op->wait_target);
      return;
  }
}

/* The progress count of every SIM device (runtime/backend.h's progress slot),
 * never reset (a reconfigured device cannot repeat a count an allocator
 * kept): bumped after ops complete. */
static _Atomic uint64_t progress_count = 1;

/* Runs up to n ops of s in order, stopping at an unsatisfied wait. pre: lock held. */
size_t mn__sim_stream_advance(sim_device *d, sim_stream *s, size_t n) {
  size_t ran = 0;
  while (ran < n && s->head && op_ready(s->head)) {
    sim_op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    op_run(d, s, op);
    s->completed++;
    d->stats.ops_run++;
    ran++;
    mn__sim_op_free(op);
  }
  if (ran) atomic_fetch_add_explicit(&progress_count, 1, memory_order_release);
  return ran;
}

/* Runs s until it has completed `target` ops, first running the streams it
 * waits on. Waits capture points queued before them, so there are no cycles. */
static void stream_run_to(sim_device *d, sim_stream *s, uint64_t target) {
  while (s->completed < target) {
    mn__sim_stream_advance(d, s, (size_t)(target - s->completed));
    if (s->completed >= target || !s->head) break;
    stream_run_to(d, s->head->wait_stream, s->head->wait_target);
  }
}

static void device_drain(sim_device *d) {
  stream_run_to(d, &d->default_stream, d->default_stream.queued);
  for (sim_stream *s = d->streams; s; s = s->next) stream_run_to(d, s, s->queued);
}

/* A whole-device synchronization (cudaDeviceSynchronize): drains and counts. */
void mn__sim_device_sync(sim_device *d) {
  device_drain(d);
  d->stats.synchronizes++;
}

/* Queues op on s (taking ownership); eager devices run it at once. A
 * capturing stream records it instead. */
mn_status mn__sim_enqueue(sim_device *d, sim_stream *s, sim_op *op) {
  if (s->cap) return mn__sim_capture_op(s, op);
  op->next = NULL;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  s->queued++;
  d->stats.ops_queued++;
  if (mn__sim_cfg.eager) stream_run_to(d, s, s->queued);
  return MN_OK;
}

mn_status mn__sim_new_op(sim_op_kind kind, sim_op **out) {
  sim_op *op = mn__calloc(1, sizeof *op);
  if (!op) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for a queued operation");
  op->kind = kind;
  *out = op;
  return MN_OK;
}

/* ---- backend slots: streams, events, copies and sets --------------------- */

mn_status mn__sim_stream_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__calloc(1, sizeof *s);
  if (!s) return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  s->next = d->streams;
  if (d->streams) d->streams->prev = s;
  d->streams = s;
  d->stats.live_streams++;
  *out = s;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_stream_destroy(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = handle;
  if (s->cap)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_STATE, __func__,
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
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_stream_query(int index, void *handle, bool *done) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  if (s->cap) return mn__sim_unlock_ret(d, mn__sim_capture_refuse(s->cap, index, __func__, "a query of a capturing stream"));
  *done = s->head == NULL;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_stream_synchronize(int index, void *handle) {
  SIM_LOCKED(index, d);
  sim_stream *s = mn__sim_stream_of(d, handle);
  if (s->cap) return mn__sim_unlock_ret(d, mn__sim_capture_refuse(s->cap, index, __func__, "a synchronize of a capturing stream"));
  stream_run_to(d, s, s->queued);
  return mn__sim_unlock_ret(d, MN_OK);
}

/* A wait where the event was recorded in an active capture (ec) or the
 * waiting stream t captures. */
static mn_status capture_wait(sim_device *d, int index, sim_stream *t, sim_event *e, sim_capture *ec) {
  if (!ec) { /* t captures; e is not part of an active capture */
    if (!e->stream) return MN_OK; /* never recorded, or recorded in a capture that has ended: complete */
    char why[200];
    snprintf(why, sizeof why, "sim:%d: a capturing stream waited on an event recorded outside the capture", index);
    mn__sim_capture_invalidate(t->cap, why);
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "sim:%d: a stream capturing into capture %llu cannot wait on an event recorded outside the "
                     "capture (as CUDA): the capture is invalidated",
                     index, (unsigned long long)t->cap->id);
  }
  mn_status st = mn__sim_capture_usable(ec, __func__);
  if (st != MN_OK) return st;
  if (t->cap == ec) return sg_set_union(&t->front, &e->front);
  if (t->cap) {
    char why[200];
    snprintf(why, sizeof why, "sim:%d: a wait tried to merge captures %llu and %llu", index,
             (unsigned long long)t->cap->id, (unsigned long long)ec->id);
    mn__sim_capture_invalidate(t->cap, why);
    mn__sim_capture_invalidate(ec, why);
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "sim:%d: a stream of capture %llu cannot wait on an event of capture %llu (captures do not "
                     "merge): both are invalidated",
                     index, (unsigned long long)t->cap->id, (unsigned long long)ec->id);
  }
  if (t == &d->default_stream) {
    mn__sim_capture_invalidate(ec, "the default stream waited on an event recorded in the capture");
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

mn_status mn__sim_stream_wait_event(int index, void *handle, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  if (e->device != index)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                                   "a sim:%d stream cannot wait for an event of sim:%d", index, e->device));
  sim_stream *t = mn__sim_stream_of(d, handle);
  sim_capture *ec = e->cap_id ? mn__sim_capture_find(d, e->cap_id) : NULL;
  if (ec || t->cap) return mn__sim_unlock_ret(d, capture_wait(d, index, t, e, ec));
  if (!e->stream || e->stream->dead) return mn__sim_unlock_ret(d, MN_OK); /* nothing to wait for */
  sim_op *op = NULL;
  mn_status st = mn__sim_new_op(OP_WAIT, &op);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  op->wait_stream = e->stream;
  stream_ref(e->stream);
  op->wait_target = e->target;
  return mn__sim_unlock_ret(d, mn__sim_enqueue(d, mn__sim_stream_of(d, handle), op));
}

mn_status mn__sim_launch_host(int index, void *handle, mn_host_fn fn, void *arg) {
  SIM_LOCKED(index, d);
  sim_op *op = NULL;
  mn_status st = mn__sim_new_op(OP_HOST, &op);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  op->fn = fn;
  op->arg = arg;
  return mn__sim_unlock_ret(d, mn__sim_enqueue(d, mn__sim_stream_of(d, handle), op));
}

mn_status mn__sim_event_create(int index, void **out) {
  SIM_LOCKED(index, d);
  sim_event *e = mn__calloc(1, sizeof *e);
  if (!e) return mn__sim_unlock_ret(d, mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"));
  e->device = index;
  e->next = d->events;
  if (d->events) d->events->prev = e;
  d->events = e;
  d->stats.live_events++;
  *out = e;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_event_destroy(int index, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  if (e->prev) e->prev->next = e->next;
  else d->events = e->next;
  if (e->next) e->next->prev = e->prev;
  d->stats.live_events--;
  if (e->stream) stream_unref(e->stream);
  sg_set_free(&e->front);
  free(e);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_event_record(int index, void *event, void *handle) {
  SIM_LOCKED(index, d);
  if (((sim_event *)event)->device != index)
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "event of another sim device"));
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_EVENT_RECORD))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: event record failed", index));
  sim_event *e = event;
  sim_stream *s = mn__sim_stream_of(d, handle);
  if (s->cap) { /* the event takes the capture's point: no stream, no target */
    mn_status st = mn__sim_capture_usable(s->cap, __func__);
    if (st == MN_OK) st = sg_set_copy(&e->front, &s->front);
    if (st != MN_OK) return mn__sim_unlock_ret(d, st);
    if (e->stream) stream_unref(e->stream);
    e->stream = NULL;
    e->target = 0;
    e->cap_id = s->cap->id;
    return mn__sim_unlock_ret(d, MN_OK);
  }
  if (e->stream != s) {
    stream_ref(s);
    if (e->stream) stream_unref(e->stream);
    e->stream = s;
  }
  e->target = s->queued;
  e->cap_id = 0;
  e->front.n = 0;
  return mn__sim_unlock_ret(d, MN_OK);
}

uint64_t mn__sim_progress(int index) {
  (void)index;
  return atomic_load_explicit(&progress_count, memory_order_acquire);
}

mn_status mn__sim_event_query(int index, void *event, bool *done) {
  SIM_LOCKED(index, d);
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_EVENT_QUERY))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: event query failed", index));
  sim_event *e = event;
  sim_capture *c = e->cap_id ? mn__sim_capture_find(d, e->cap_id) : NULL;
  if (c) return mn__sim_unlock_ret(d, mn__sim_capture_refuse(c, index, __func__, "a query of an event recorded in the capture"));
  *done = !e->stream || e->stream->completed >= e->target;
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_event_synchronize(int index, void *event) {
  SIM_LOCKED(index, d);
  sim_event *e = event;
  sim_capture *c = e->cap_id ? mn__sim_capture_find(d, e->cap_id) : NULL;
  if (c)
    return mn__sim_unlock_ret(d, mn__sim_capture_refuse(c, index, __func__, "a synchronize of an event recorded in the capture"));
  if (e->stream) stream_run_to(d, e->stream, e->target);
  return mn__sim_unlock_ret(d, MN_OK);
}

mn_status mn__sim_memcpy_async(int index, void *dst, const void *src, size_t nbytes, mn__copy_kind kind,
                                  void *handle) {
  SIM_LOCKED(index, d);
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_MEMCPY))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: copy of %zu bytes failed",
                                   index, nbytes));
  sim_op *op = NULL;
  mn_status st = mn__sim_new_op(OP_COPY, &op);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  op->copy_kind = kind;
  op->dst = dst;
  op->src = src;
  op->nbytes = nbytes;
  return mn__sim_unlock_ret(d, mn__sim_enqueue(d, mn__sim_stream_of(d, handle), op));
}

mn_status mn__sim_memset_async(int index, void *dst, int value, size_t nbytes, void *handle) {
  SIM_LOCKED(index, d);
  if (mn__sim_fault_fires(d, MN_SIM_FAULT_MEMCPY))
    return mn__sim_unlock_ret(d, mn__error(MN_ERR_DEVICE, __func__, "sim:%d: injected fault: memset of %zu bytes failed",
                                   index, nbytes));
  sim_op *op = NULL;
  mn_status st = mn__sim_new_op(OP_SET, &op);
  if (st != MN_OK) return mn__sim_unlock_ret(d, st);
  op->dst = dst;
  op->value = value;
  op->nbytes = nbytes;
  return mn__sim_unlock_ret(d, mn__sim_enqueue(d, mn__sim_stream_of(d, handle), op));
}
