/* profiling/recorder.c: the bounded trace recorder: a ring buffer of allocator
 * events under one mutex (any thread, any allocator), turned into a trace on
 * demand or at exit; optionally each event's C call stack (backtrace() in the
 * sink, the raw return addresses interned in a bounded hash table so the ring
 * keeps one id per event, symbolized with dladdr only when a trace is made). */
#include <dlfcn.h>
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "profiling/idtable.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/events.h"
#include "runtime/hostmem.h"
#include "runtime/lock.h"

#define MN__RECORDER_MAX_DEVICES 64
/* Frames captured beyond max_frames, for the recorder's and the allocator's
 * own frames that are cut when the stack is symbolized (3 to 5 from
 * mn_allocator_alloc / free to the sink in the caching allocator). Each frame
 * costs about 0.25 us to unwind, so no more than needed. */
#define MN__STACK_SKIP_MAX 10
/* The bound of the stack table: return addresses kept (8 bytes each) and
 * distinct stacks (about 20 bytes each); when either is reached, events with a
 * new stack get stack 0 (counted in stats.stackless). About 20 MiB at most. */
#define MN__STACK_PCS_MAX ((size_t)1 << 21)
#define MN__STACKS_MAX ((size_t)1 << 18)
/* The frames MNEMO_TRACE_STACKS=1 keeps. */
#define MN__STACK_ENV_DEFAULT 16

/* The interned raw stacks: stack id s (1..n) holds pcs[start[s-1] .. start[s]). */
typedef struct mn__pc_stacks_s {
  uintptr_t *pcs;
  uint32_t *start; /* n + 1 offsets */
  uint64_t *hash;  /* id - 1 -> hash */
  uint32_t *slots; /* open addressing, 0 empty, at most half full */
  size_t n, pcs_cap, start_cap, hash_cap, slots_cap;
} mn__pc_stacks_t;

struct mn_trace_recorder_s {
  mn__lock_t lock;
  mn_trace_event_t *ring;
  uint32_t *ring_stack;        /* stack id of each ring slot (NULL until stacks are first on) */
  size_t capacity, head, held; /* the oldest event is ring[head] */
  uint64_t recorded, overwritten;
  unsigned max_frames;         /* 0: no stacks */
  uint64_t stackless;          /* events recorded with stacks on that got none (table full) */
  mn__pc_stacks_t stacks;
};

mn_status mn_trace_recorder_create(size_t capacity, mn_trace_recorder_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(capacity >= 1 && capacity <= SIZE_MAX / sizeof(mn_trace_event_t), "capacity %zu is not 1.. %zu",
                capacity, SIZE_MAX / sizeof(mn_trace_event_t));
  mn_trace_recorder_t *r = mn__calloc(1, sizeof *r);
  if (r) r->ring = mn__malloc(capacity * sizeof *r->ring);
  if (!r || !r->ring) {
    free(r);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu events", capacity);
  }
  mn__lock_init(&r->lock);
  r->capacity = capacity;
  *out = r;
  return MN_OK;
}

static void pc_stacks_free(mn__pc_stacks_t *t) {
  free(t->pcs);
  free(t->start);
  free(t->hash);
  free(t->slots);
  memset(t, 0, sizeof *t);
}

void mn_trace_recorder_destroy(mn_trace_recorder_t *rec) {
  if (!rec) return;
  free(rec->ring);
  free(rec->ring_stack);
  pc_stacks_free(&rec->stacks);
  free(rec);
}

/* ---- stacks: capture and interning ------------------------------------------------ */

mn_status mn_trace_recorder_set_stacks(mn_trace_recorder_t *rec, unsigned max_frames) {
  MN__CHECK_ARG(rec != NULL, "rec must not be NULL");
  MN__CHECK_ARG(max_frames <= MN_TRACE_RECORDER_STACK_MAX, "max_frames %u is over %d", max_frames,
                MN_TRACE_RECORDER_STACK_MAX);
  if (max_frames) { /* glibc's first backtrace() loads libgcc (and allocates): not inside a sink */
    void *pc[2];
    (void)backtrace(pc, 2);
  }
  mn__lock(&rec->lock);
  if (max_frames && !rec->ring_stack) {
    rec->ring_stack = mn__calloc(rec->capacity, sizeof *rec->ring_stack);
    if (!rec->ring_stack) {
      mn__unlock(&rec->lock);
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for the stack ids of %zu events",
                       rec->capacity);
    }
  }
  __atomic_store_n(&rec->max_frames, max_frames, __ATOMIC_RELAXED);
  mn__unlock(&rec->lock);
  return MN_OK;
}

static uint64_t pcs_hash(const uintptr_t *pc, size_t n) {
  uint64_t h = 0x243f6a8885a308d3ull ^ n;
  for (size_t i = 0; i < n; i++) {
    h ^= (uint64_t)pc[i];
    h *= 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return h ^ (h >> 32);
}

/* The id of pc[0..n) in the table, added when new; 0 when the table is full
 * (or out of host memory). Under the lock. */
static uint32_t pc_stack_intern(mn__pc_stacks_t *t, const uintptr_t *pc, size_t n, uint64_t h) {
  if (t->slots_cap) {
    for (size_t k = (size_t)h & (t->slots_cap - 1);; k = (k + 1) & (t->slots_cap - 1)) {
      uint32_t id = t->slots[k];
      if (!id) break;
      if (t->hash[id - 1] == h && t->start[id] - t->start[id - 1] == n &&
          memcmp(t->pcs + t->start[id - 1], pc, n * sizeof *pc) == 0)
        return id;
    }
  }
  size_t used = t->n ? t->start[t->n] : 0;
  if (t->n >= MN__STACKS_MAX || used + n > MN__STACK_PCS_MAX) return 0;
  if (!mn__array_grow((void **)&t->pcs, &t->pcs_cap, used + n, sizeof *t->pcs) ||
      !mn__array_grow((void **)&t->start, &t->start_cap, t->n + 2, sizeof *t->start) ||
      !mn__array_grow((void **)&t->hash, &t->hash_cap, t->n + 1, sizeof *t->hash) ||
      !mn__idtable_reserve(&t->slots, &t->slots_cap, t->n, t->hash))
    return 0;
  memcpy(t->pcs + used, pc, n * sizeof *pc);
  t->start[0] = 0;
  t->start[t->n + 1] = (uint32_t)(used + n);
  t->hash[t->n] = h;
  t->n++;
  mn__idtable_put(t->slots, t->slots_cap, h, (uint32_t)t->n);
  return (uint32_t)t->n;
}

/* The i-th oldest event's slot. */
static size_t ring_index(const mn_trace_recorder_t *r, size_t i) {
  size_t k = r->head + i;
  return k < r->capacity ? k : k - r->capacity;
}

/* The next slot, the oldest event going when the ring is full; pre: lock held. */
static inline size_t take_slot(mn_trace_recorder_t *r) {
  r->recorded++;
  if (r->held < r->capacity) {
    size_t slot = r->head + r->held++;
    return slot < r->capacity ? slot : slot - r->capacity;
  }
  size_t slot = r->head; /* full: the oldest goes */
  if (++r->head == r->capacity) r->head = 0;
  r->overwritten++;
  return slot;
}

/* An event with its C stack, taken before the lock. Kept out of the sink so
 * the stackless path carries no stack arrays; the caller must not tail-call
 * it: raw[0] is this function, raw[1] the sink, the allocator's frames follow. */
static __attribute__((noinline)) void record_with_stack(mn_trace_recorder_t *r, const mn_trace_event_t *event,
                                                        unsigned max) {
  if (max > MN_TRACE_RECORDER_STACK_MAX) max = MN_TRACE_RECORDER_STACK_MAX;
  void *raw[MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX + 2];
  uintptr_t pc[MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX];
  int n = backtrace(raw, (int)(max + MN__STACK_SKIP_MAX + 2)) - 2;
  if (n < 0) n = 0;
  for (int i = 0; i < n; i++) pc[i] = (uintptr_t)raw[i + 2];
  uint64_t h = n > 0 ? pcs_hash(pc, (size_t)n) : 0;
  mn__lock(&r->lock);
  size_t slot = take_slot(r);
  r->ring[slot] = *event;
  if (r->ring_stack) {
    uint32_t id = 0;
    if (n > 0) {
      id = pc_stack_intern(&r->stacks, pc, (size_t)n, h);
      r->stackless += id == 0;
    }
    r->ring_stack[slot] = id;
  }
  mn__unlock(&r->lock);
}

void mn_trace_recorder_sink_fn(void *user, const mn_trace_event_t *event) {
  mn_trace_recorder_t *r = user;
  if (!r || !event) return;
  /* max_frames is read racily: a switch that races with an event decides
   * only whether that event gets a stack. */
  unsigned max = __atomic_load_n(&r->max_frames, __ATOMIC_RELAXED);
  if (__builtin_expect(max != 0, 0)) {
    record_with_stack(r, event, max);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame must be on the stack */
    return;
  }
  /* No stack: the event into the ring, nothing else. */
  mn__lock(&r->lock);
  size_t slot = take_slot(r);
  r->ring[slot] = *event;
  if (r->ring_stack) r->ring_stack[slot] = 0;
  mn__unlock(&r->lock);
}

mn_status mn_trace_recorder_get_stats(mn_trace_recorder_t *rec, mn_trace_recorder_stats_t *out) {
  MN__CHECK_ARG(rec != NULL && out != NULL, "rec and out must not be NULL");
  mn__lock(&rec->lock);
  out->recorded = rec->recorded;
  out->overwritten = rec->overwritten;
  out->held = rec->held;
  out->capacity = rec->capacity;
  out->max_frames = rec->max_frames;
  out->stacks = rec->stacks.n;
  out->stack_pcs = rec->stacks.n ? rec->stacks.start[rec->stacks.n] : 0;
  out->stackless = rec->stackless;
  mn__unlock(&rec->lock);
  return MN_OK;
}

void mn_trace_recorder_clear(mn_trace_recorder_t *rec) {
  if (!rec) return;
  mn__lock(&rec->lock);
  rec->head = rec->held = 0;
  rec->recorded = rec->overwritten = rec->stackless = 0;
  pc_stacks_free(&rec->stacks); /* no event refers to them any more */
  mn__unlock(&rec->lock);
}

typedef struct mn__live_s {
  uint32_t device;
  uint64_t address;
  size_t index; /* event index of the alloc */
} mn__live_t;

static int live_cmp(const void *a, const void *b) {
  const mn__live_t *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->address != y->address) return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Which free_requested events free an allocation made before the window:
 * those whose (device, address) has no earlier alloc in the window that is
 * still live. pre_of[i] is set for them. */
static mn_status find_pre(const mn_trace_event_t *ev, const uint32_t *dev, size_t n, bool *pre_of) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m += ev[i].action == MN_TRACE_ALLOC || ev[i].action == MN_TRACE_FREE_REQUESTED;
  mn__live_t *refs = mn__malloc((m ? m : 1) * sizeof *refs);
  if (!refs) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_recorder_to_trace", "out of host memory");
  m = 0;
  for (size_t i = 0; i < n; i++)
    if (ev[i].action == MN_TRACE_ALLOC || ev[i].action == MN_TRACE_FREE_REQUESTED)
      refs[m++] = (mn__live_t){dev[i], (uint64_t)ev[i].address, i};
  qsort(refs, m, sizeof *refs, live_cmp);
  for (size_t k = 0; k < m;) {
    size_t j = k;
    bool live = false;
    for (; j < m && refs[j].device == refs[k].device && refs[j].address == refs[k].address; j++) {
      size_t i = refs[j].index;
      if (ev[i].action == MN_TRACE_ALLOC) live = true;
      else if (live) live = false;
      else pre_of[i] = true;
    }
    k = j;
  }
  free(refs);
  return MN_OK;
}

/* ---- stacks: symbolizing ------------------------------------------------------------ */

/* What one return address became. */
typedef struct mn__pc_sym_s {
  uintptr_t pc;   /* 0: empty slot */
  uint32_t frame; /* the trace's frame id */
  bool in_self;   /* in mnemo's own module, unnamed or an mn_ function */
  bool mn_named;  /* an mn_ function of mnemo's module */
} mn__pc_sym_t;

#define MN__SYM_TEXT_MAX 600 /* bytes of a frame's name or file kept (a frame line fits 4096 bytes) */

/* Looks pc up with dladdr and adds its frame to t: file = the module's path,
 * name = the exported symbol that holds it, else "0x<offset in the module>",
 * line 0. */
static mn_status symbolize_pc(mn_trace_t *t, uintptr_t pc, const void *self_base, mn__pc_sym_t *out) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  uintptr_t at = pc ? pc - 1 : 0; /* a return address: the call is the byte before */
  char name[40];
  const char *file = "", *sym = NULL;
  if (dladdr((void *)at, &info) && info.dli_fname) {
    file = info.dli_fname;
    sym = info.dli_sname;
    if (!sym) {
      snprintf(name, sizeof name, "0x%" PRIxPTR, at - (uintptr_t)info.dli_fbase);
      sym = name;
    }
  } else {
    snprintf(name, sizeof name, "0x%" PRIxPTR, at);
    sym = name;
  }
  out->pc = pc;
  out->mn_named = info.dli_fbase == self_base && info.dli_sname && strncmp(info.dli_sname, "mn_", 3) == 0;
  out->in_self = info.dli_fbase == self_base && (!info.dli_sname || out->mn_named);
  char fbuf[MN__SYM_TEXT_MAX + 1], nbuf[MN__SYM_TEXT_MAX + 1];
  snprintf(fbuf, sizeof fbuf, "%s", file);
  snprintf(nbuf, sizeof nbuf, "%s", sym);
  mn_status st = mn_trace_frame_add(t, fbuf, 0, nbuf, &out->frame);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, "mn_trace_recorder_to_trace");
}

/* Adds the frames and stacks of the raw stacks that the n events refer to
 * (sid[i]) to t; map[s] gets raw stack s's trace stack id. Each stack loses
 * mnemo's own frames: of the innermost run of frames in mnemo's module that
 * are unnamed (static functions) or mn_ functions, those up to the outermost
 * mn_ one (mn_allocator_alloc, free, ..., or mn_trace_replay), so it starts
 * at their caller; with a static link that exports no symbols (no -rdynamic)
 * nothing is named and nothing is cut. Then it keeps at most max_frames. */
static mn_status symbolize(mn_trace_t *t, const mn__pc_stacks_t *raw, const uint32_t *sid, size_t n,
                           unsigned max_frames, uint32_t *map) {
  size_t npc = raw->start[raw->n], cap = 64;
  while (cap < 2 * npc) cap *= 2;
  mn__pc_sym_t *cache = mn__calloc(cap, sizeof *cache);
  bool *used = mn__calloc(raw->n + 1, sizeof *used);
  uint32_t frames[MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX];
  mn__pc_sym_t *sym[MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX];
  mn_status st = MN_OK;
  if (!cache || !used) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_recorder_to_trace", "out of host memory for %zu stacks", raw->n);
    goto done;
  }
  Dl_info self;
  const void *self_base = dladdr((void *)(uintptr_t)mn_trace_recorder_sink_fn, &self) ? self.dli_fbase : NULL;
  for (size_t i = 0; i < n; i++)
    if (sid[i] && sid[i] <= raw->n) used[sid[i]] = true;
  for (size_t s = 1; s <= raw->n && st == MN_OK; s++) {
    if (!used[s]) continue;
    size_t k0 = raw->start[s - 1], len = raw->start[s] - k0;
    if (len > MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX) len = MN_TRACE_RECORDER_STACK_MAX + MN__STACK_SKIP_MAX;
    for (size_t j = 0; j < len && st == MN_OK; j++) {
      uintptr_t pc = raw->pcs[k0 + j];
      size_t h = (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
      while (cache[h].pc && cache[h].pc != pc) h = (h + 1) & (cap - 1);
      if (!cache[h].pc) st = symbolize_pc(t, pc ? pc : 1, self_base, &cache[h]);
      sym[j] = &cache[h];
    }
    if (st != MN_OK) break;
    size_t first = 0;
    for (size_t j = 0; j < len && sym[j]->in_self; j++)
      if (sym[j]->mn_named) first = j + 1;
    if (first == len) first = 0; /* nothing but mnemo (e.g. a destroy at exit): keep it whole */
    size_t m = 0;
    for (size_t j = first; j < len && m < max_frames; j++) frames[m++] = sym[j]->frame;
    if (m) st = mn_trace_stack_add(t, frames, m, &map[s]);
    if (st != MN_OK) st = mn__error_wrap(st, "mn_trace_recorder_to_trace");
  }
done:
  free(cache);
  free(used);
  return st;
}

mn_status mn_trace_recorder_to_trace(mn_trace_recorder_t *rec, mn_trace_t **out) {
  MN__CHECK_ARG(rec != NULL && out != NULL, "rec and out must not be NULL");
  mn__lock(&rec->lock);
  size_t n = rec->held;
  mn_trace_event_t *ev = mn__malloc((n ? n : 1) * sizeof *ev);
  bool had_stacks = rec->ring_stack != NULL;
  uint32_t *sid = had_stacks ? mn__calloc(n ? n : 1, sizeof *sid) : NULL;
  if (ev)
    for (size_t i = 0; i < n; i++) ev[i] = rec->ring[ring_index(rec, i)];
  if (sid)
    for (size_t i = 0; i < n; i++) sid[i] = rec->ring_stack[ring_index(rec, i)];
  /* The raw stacks (a copy: symbolizing takes the loader's lock, not to be
   * nested in ours, and allocations may go on meanwhile). */
  mn__pc_stacks_t raw = {0};
  unsigned max_frames = rec->max_frames ? rec->max_frames : MN_TRACE_RECORDER_STACK_MAX;
  bool raw_ok = true;
  if (sid && rec->stacks.n) {
    raw.n = rec->stacks.n;
    size_t npc = rec->stacks.start[raw.n];
    raw.pcs = mn__malloc(npc * sizeof *raw.pcs);
    raw.start = mn__malloc((raw.n + 1) * sizeof *raw.start);
    raw_ok = raw.pcs && raw.start;
    if (raw_ok) {
      memcpy(raw.pcs, rec->stacks.pcs, npc * sizeof *raw.pcs);
      memcpy(raw.start, rec->stacks.start, (raw.n + 1) * sizeof *raw.start);
    }
  }
  uint64_t overwritten = rec->overwritten;
  mn__unlock(&rec->lock);
  uint32_t *dev = mn__malloc((n ? n : 1) * sizeof *dev);
  bool *pre_of = mn__calloc(n ? n : 1, sizeof *pre_of);
  uint32_t *map = raw.n ? mn__calloc(raw.n + 1, sizeof *map) : NULL;
  mn_trace_t *t = NULL;
  mn_status st = MN_OK;
  if (!ev || !dev || !pre_of || (had_stacks && !sid) || !raw_ok || (raw.n && !map)) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu events", n);
    goto done;
  }
  /* Device indices in order of first appearance. */
  mn_device_t devices[MN__RECORDER_MAX_DEVICES];
  uint32_t ndev = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t d = 0;
    while (d < ndev && !mn_device_equal(devices[d], ev[i].device)) d++;
    if (d == ndev) {
      if (ndev == MN__RECORDER_MAX_DEVICES) {
        st = mn__error(MN_ERR_NOT_SUPPORTED, __func__, "events from more than %d devices", MN__RECORDER_MAX_DEVICES);
        goto done;
      }
      devices[ndev++] = ev[i].device;
    }
    dev[i] = d;
  }
  if ((st = find_pre(ev, dev, n, pre_of)) != MN_OK) goto done;
  if ((st = mn_trace_create(&t)) != MN_OK) goto done;
  uint64_t origin = n ? ev[0].time_ns : 0;
  char buf[64 * (MN__RECORDER_MAX_DEVICES + 1)], one[40];
  size_t used = 0;
  buf[0] = '\0';
  for (uint32_t d = 0; d < ndev; d++) {
    mn_device_format(devices[d], one, sizeof one);
    used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", d ? " " : "", one);
  }
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, origin / 1000);
  st = mn_trace_meta_set(t, "recorded_by", "mnemo");
  if (st == MN_OK) st = mn_trace_meta_set(t, "device", ndev ? buf : "none");
  if (st == MN_OK && ndev > 1) st = mn_trace_meta_set(t, "device_names", buf);
  if (st == MN_OK) st = mn_trace_meta_set(t, "time_origin_us", num);
  snprintf(num, sizeof num, "%" PRIu64, overwritten);
  if (st == MN_OK) st = mn_trace_meta_set(t, "recorder_overwritten", num);
  if (st == MN_OK && raw.n) st = symbolize(t, &raw, sid, n, max_frames, map);
  /* Pre allocations first (made before the window, freed in it; their stack,
   * the allocation's, is not known), then the events. */
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    if (!pre_of[i]) continue;
    mn_trace_entry_t e = {.action = MN_TRACE_ALLOC, .pre = true, .stream = ev[i].stream_id,
                          .address = (uint64_t)ev[i].address,
                          .size = ev[i].requested_size ? ev[i].requested_size : ev[i].size,
                          .block_size = ev[i].size, .device = dev[i]};
    if (e.size == 0) e.size = 1;
    st = mn_trace_append(t, &e);
  }
  for (size_t i = 0; i < n && st == MN_OK; i++) {
    const mn_trace_event_t *x = &ev[i];
    if ((unsigned)x->action >= MN_TRACE_ACTION_COUNT) continue;
    if (x->action == MN_TRACE_ALLOC && x->size == 0 && x->requested_size == 0) continue;
    mn_trace_entry_t e = {.action = x->action, .time_us = x->time_ns > origin ? (x->time_ns - origin) / 1000 : 0,
                          .stream = x->stream_id, .address = (uint64_t)x->address, .size = x->size,
                          .device = dev[i], .stack = sid && sid[i] && sid[i] <= raw.n ? map[sid[i]] : 0};
    bool block_event = x->action == MN_TRACE_ALLOC || x->action == MN_TRACE_FREE_REQUESTED ||
                       x->action == MN_TRACE_FREE_COMPLETED;
    if (block_event && x->requested_size) e.size = x->requested_size;
    if (x->action == MN_TRACE_ALLOC) e.block_size = x->size;
    st = mn_trace_append(t, &e);
  }
  if (st == MN_OK) st = mn_trace_validate(t);
done:
  free(ev);
  free(sid);
  free(map);
  pc_stacks_free(&raw);
  free(dev);
  free(pre_of);
  if (st != MN_OK) {
    mn_trace_destroy(t);
    return mn__error_wrap(st, __func__);
  }
  *out = t;
  return MN_OK;
}

mn_status mn_trace_recorder_write(mn_trace_recorder_t *rec, const char *path) {
  MN__CHECK_ARG(rec != NULL && path != NULL, "rec and path must not be NULL");
  mn_trace_t *t = NULL;
  mn_status st = mn_trace_recorder_to_trace(rec, &t);
  if (st == MN_OK) st = mn_trace_write(t, path);
  mn_trace_destroy(t);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- the process-wide recorder (MNEMO_TRACE) ------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static mn_trace_recorder_t *g_rec;
static char *g_path;

static void write_at_exit(void) {
  if (!g_rec || !g_path) return;
  if (mn_trace_recorder_write(g_rec, g_path) != MN_OK)
    fprintf(stderr, "mnemo: MNEMO_TRACE: %s\n", mn_last_error());
}

static void global_init(void) {
  const char *path = mn__env(MN__ENV_TRACE);
  if (!path || !path[0]) return;
  size_t cap = 1000000;
  const char *c = mn__env(MN__ENV_TRACE_CAPACITY);
  if (c && c[0]) {
    char *end = NULL;
    unsigned long long v = strtoull(c, &end, 10);
    if (*end || v == 0 || v > SIZE_MAX / sizeof(mn_trace_event_t)) {
      fprintf(stderr, "mnemo: MNEMO_TRACE_CAPACITY=\"%s\" is not an event count; using %zu\n", c, cap);
    } else {
      cap = (size_t)v;
    }
  }
  g_path = mn__malloc(strlen(path) + 1);
  if (!g_path || mn_trace_recorder_create(cap, &g_rec) != MN_OK) {
    fprintf(stderr, "mnemo: MNEMO_TRACE: cannot make the recorder: %s\n", g_path ? mn_last_error() : "out of memory");
    free(g_path);
    g_path = NULL;
    return;
  }
  strcpy(g_path, path);
  const char *k = mn__env(MN__ENV_TRACE_STACKS);
  if (k && k[0]) {
    char *end = NULL;
    unsigned long v = strtoul(k, &end, 10);
    if (*end || k[0] == '-' || v > MN_TRACE_RECORDER_STACK_MAX) {
      fprintf(stderr, "mnemo: MNEMO_TRACE_STACKS=\"%s\" is not 0, 1 or a frame count up to %d; no stacks\n", k,
              MN_TRACE_RECORDER_STACK_MAX);
    } else if (v > 0 && mn_trace_recorder_set_stacks(g_rec, v == 1 ? MN__STACK_ENV_DEFAULT : (unsigned)v) != MN_OK) {
      fprintf(stderr, "mnemo: MNEMO_TRACE_STACKS: %s\n", mn_last_error());
    }
  }
  atexit(write_at_exit);
}

mn_trace_recorder_t *mn_trace_recorder_global(void) {
  pthread_once(&g_once, global_init);
  return g_rec;
}

/* The default-sink provider (runtime/events.h): every new caching allocator
 * asks it, so MNEMO_TRACE records all of them. Registered when the library is
 * loaded; the recorder itself is made on the first ask. */
void mn__trace_recorder_autoload(void);
static bool global_sink(mn_trace_sink_fn *fn, void **user) {
  mn_trace_recorder_t *rec = mn_trace_recorder_global();
  if (!rec) return false;
  *fn = mn_trace_recorder_sink_fn;
  *user = rec;
  return true;
}

/* Runs when the library loads; a static link keeps this object through the
 * linker flag --undefined=mn__trace_recorder_autoload (the mnemo_static CMake
 * target and mnemo.pc carry it). */
__attribute__((constructor)) void mn__trace_recorder_autoload(void) {
  mn__event_sink_set_provider(global_sink);
  (void)mn__event_sink_mark_concurrent(mn_trace_recorder_sink_fn); /* its ring has its own lock */
}
