/* profiling/replay.c: replays a trace's allocs and frees against an allocator and
 * measures peak allocated and reserved bytes, raw allocations and host time per call. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mnemo/mnemo.h"
#include "mnemo/trace.h"
#include "profiling/text.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

mn_replay_options_t mn_replay_options_default(void) {
  mn_replay_options_t o;
  memset(&o, 0, sizeof o);
  o.trace_device = -1;
  o.stop_after = SIZE_MAX;
  return o;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct mn__replay_s {
  const mn_trace_t *trace;
  mn_allocator_t *a;
  mn_device_t dev;
  size_t *match;          /* see mn__trace_match */
  void **ptrs;            /* per alloc entry: its pointer while live, NULL otherwise */
  uint32_t *sidx;         /* per entry: index into ids/streams */
  uint64_t *ids;          /* distinct trace stream ids, sorted */
  mn_stream_t **streams;  /* per id */
  bool *created;          /* per id: made by the replay (destroy at the end) */
  size_t nids;
  bool sim;               /* track the SIM device's mapped bytes */
  size_t mapped_base;
  int64_t peak_mapped;
  int64_t cur_req, peak_req;
  const mn_replay_options_t *opt;
  bool have_stats;
  uint64_t retries;
} mn__replay_t;

/* Tells the on_step callback where the replay stands. */
/* Requested bytes: sizes are user data, so the sums saturate at INT64_MAX
 * (and at 0 going down) instead of wrapping; a replay only counts what its
 * allocator gave, so they never reach it in practice. */
static int64_t req_add(int64_t a, uint64_t b) {
  return b > (uint64_t)(INT64_MAX - a) ? INT64_MAX : a + (int64_t)b;
}
static int64_t req_sub(int64_t a, uint64_t b) { return b >= (uint64_t)a ? 0 : a - (int64_t)b; }

static void step(mn__replay_t *r, size_t i) {
  if (!r->opt->on_step) return;
  mn_replay_step_t s = {.entry = i, .allocated = -1, .reserved = -1, .requested = r->cur_req};
  mn_alloc_stats_t st;
  if (r->have_stats && mn_allocator_get_stats(r->a, &st) == MN_OK) {
    s.allocated = st.allocated_bytes[MN_POOL_ALL].current;
    s.reserved = st.reserved_bytes[MN_POOL_ALL].current;
  } else {
    mn_sim_stats_t ss;
    s.allocated = r->cur_req;
    if (r->sim && mn_sim_get_stats(r->dev, &ss) == MN_OK) s.reserved = (int64_t)ss.mapped_bytes - (int64_t)r->mapped_base;
  }
  r->opt->on_step(r->opt->on_step_user, &s);
}

static void replay_cleanup(mn__replay_t *r) {
  if (r->ptrs) {
    for (size_t i = 0; i < r->trace->nentries; i++)
      if (r->ptrs[i]) mn__ignore(mn_allocator_free(r->a, r->ptrs[i])); /* cleanup: the replay's own status stands */
  }
  for (size_t k = 0; r->streams && r->created && k < r->nids; k++)
    if (r->created[k] && r->streams[k]) mn__ignore(mn_stream_destroy(r->streams[k])); /* cleanup, as above */
  free(r->match);
  free(r->ptrs);
  free(r->sidx);
  free(r->ids);
  free(r->streams);
  free(r->created);
}

/* Whether entry e takes part in the replay with a stream: allocations, and pre
 * segments when they are reserved as recorded. */
static bool uses_stream(const mn__replay_t *r, const mn_trace_entry_t *e) {
  return e->action == MN_TRACE_ALLOC || (e->pre && e->action == MN_TRACE_SEGMENT_ALLOC && !r->opt->skip_pre_segments) ||
         (e->action == MN_TRACE_OOM && !e->pre && r->opt->replay_ooms);
}

/* Maps trace stream ids to streams: 0 (or else the first allocation's id) to the default stream. */
static mn_status map_streams(mn__replay_t *r) {
  const mn_trace_t *t = r->trace;
  size_t n = 0;
  for (size_t i = 0; i < t->nentries; i++) n += uses_stream(r, &t->entries[i]);
  r->ids = mn__malloc((n ? n : 1) * sizeof *r->ids);
  r->sidx = mn__calloc(t->nentries ? t->nentries : 1, sizeof *r->sidx);
  if (!r->ids || !r->sidx) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_replay", "out of host memory");
  uint64_t first = 0;
  bool have_first = false, have_zero = false;
  n = 0;
  for (size_t i = 0; i < t->nentries; i++) {
    if (!uses_stream(r, &t->entries[i])) continue;
    if (!have_first && t->entries[i].action == MN_TRACE_ALLOC) {
      first = t->entries[i].stream;
      have_first = true;
    }
    have_zero |= t->entries[i].stream == 0;
    r->ids[n++] = t->entries[i].stream;
  }
  if (n) qsort(r->ids, n, sizeof *r->ids, u64_cmp);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (u == 0 || r->ids[u - 1] != r->ids[i]) r->ids[u++] = r->ids[i];
  r->nids = u;
  if (u > UINT32_MAX) return mn__error(MN_ERR_OVERFLOW, "mn_trace_replay", "%zu streams is too many", u);
  r->streams = mn__calloc(u ? u : 1, sizeof *r->streams);
  r->created = mn__calloc(u ? u : 1, sizeof *r->created);
  if (!r->streams || !r->created) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_replay", "out of host memory");
  uint64_t def = have_zero ? 0 : first;
  for (size_t k = 0; k < u; k++) {
    mn_status st = r->ids[k] == def ? mn_stream_default(r->dev, &r->streams[k]) : mn_stream_create(r->dev, &r->streams[k]);
    if (st != MN_OK) return mn__error_wrap(st, "mn_trace_replay");
    r->created[k] = r->ids[k] != def;
  }
  for (size_t i = 0; i < t->nentries; i++) {
    if (!uses_stream(r, &t->entries[i])) continue;
    const uint64_t *hit = bsearch(&t->entries[i].stream, r->ids, u, sizeof *r->ids, u64_cmp);
    r->sidx[i] = (uint32_t)(hit - r->ids);
  }
  return MN_OK;
}

static void track_mapped(mn__replay_t *r) {
  mn_sim_stats_t s;
  if (!r->sim || mn_sim_get_stats(r->dev, &s) != MN_OK) return;
  int64_t m = (int64_t)s.mapped_bytes - (int64_t)r->mapped_base;
  if (m > r->peak_mapped) r->peak_mapped = m;
}

static mn_status op_failed(const mn_trace_entry_t *e, size_t i, mn_status st, const char *what) {
  char msg[768];
  snprintf(msg, sizeof msg, "%s", mn__last_error_detail());
  char w[48];
  if (e->line) snprintf(w, sizeof w, "trace line %" PRIu32, e->line);
  else snprintf(w, sizeof w, "trace entry %zu", i);
  return mn__error(st, "mn_trace_replay", "%s: %s of %" PRIu64 " bytes at 0x%" PRIx64 " failed: %s", w, what,
                   e->size, e->address, msg);
}

/* One alloc (or, with replay_ooms, a recorded oom line's allocation, freed at
 * once when it succeeds); *oom set when it failed for want of memory. */
static mn_status do_alloc(mn__replay_t *r, size_t i, uint64_t *ns, bool *oom) {
  const mn_trace_entry_t *e = &r->trace->entries[i];
  void *p = NULL;
  *oom = false;
  if (e->size > SIZE_MAX) {
    *oom = true;
    if (r->opt->on_oom) {
      mn_replay_oom_t o = {.entry = i, .size = e->size, .recorded = e->action == MN_TRACE_OOM, .reproduced = true};
      r->opt->on_oom(r->opt->on_oom_user, &o);
    }
    return MN_OK;
  }
  uint64_t t0 = now_ns();
  mn_status st = mn_allocator_alloc(r->a, (size_t)e->size, r->streams[r->sidx[i]], &p);
  for (unsigned k = 0; st == MN_ERR_OUT_OF_MEMORY && k < r->opt->oom_retries; k++) {
    r->retries++;
    if (mn_allocator_empty_cache(r->a) != MN_OK) break;
    st = mn_allocator_alloc(r->a, (size_t)e->size, r->streams[r->sidx[i]], &p);
  }
  *ns += now_ns() - t0;
  if (st == MN_ERR_OUT_OF_MEMORY) {
    mn_clear_error();
    *oom = true;
    if (r->opt->on_oom) {
      mn_replay_oom_t o = {.entry = i, .size = e->size, .recorded = e->action == MN_TRACE_OOM, .reproduced = true};
      r->opt->on_oom(r->opt->on_oom_user, &o);
    }
    return MN_OK;
  }
  if (st != MN_OK) return op_failed(e, i, st, "alloc");
  if (e->action == MN_TRACE_OOM) { /* a recorded oom line the allocator had room for: not kept */
    st = mn_allocator_free(r->a, p);
    if (st != MN_OK) return op_failed(e, i, st, "free of the oom line's allocation");
    track_mapped(r);
    if (r->opt->on_oom) {
      mn_replay_oom_t o = {.entry = i, .size = e->size, .recorded = true, .reproduced = false};
      r->opt->on_oom(r->opt->on_oom_user, &o);
    }
    return MN_OK;
  }
  r->ptrs[i] = p;
  r->cur_req = req_add(r->cur_req, e->size);
  if (r->cur_req > r->peak_req) r->peak_req = r->cur_req;
  track_mapped(r);
  step(r, i);
  return MN_OK;
}

/* ---- the pre segments, reserved as recorded ------------------------------
 * PyTorch's pool rules that decide how a recorded segment can be laid out by
 * allocations: a 2 MiB segment is a small-pool one (requests up to 1 MiB), any
 * other size a large-pool one (requests above 1 MiB); blocks are multiples of 512 B. */
#define PRE_SMALL_SEGMENT ((uint64_t)2 << 20)
#define PRE_SMALL_REQUEST ((uint64_t)1 << 20)
#define PRE_ROUND 512u

typedef struct pre_piece_s {
  uint64_t addr, size;
  size_t entry; /* the pre alloc it is, or SIZE_MAX for a free gap */
} pre_piece_t;

typedef struct pre_build_s {
  void **hold;       /* gaps and placeholders, freed when every segment is built */
  size_t nhold, cap;
  bool failed;       /* the allocator does not make segments of the recorded sizes */
} pre_build_t;

static int64_t reserved_now(mn__replay_t *r) {
  mn_alloc_stats_t st;
  return mn_allocator_get_stats(r->a, &st) == MN_OK ? st.reserved_bytes[MN_POOL_ALL].current : -1;
}

static mn_status hold(pre_build_t *b, void *p) {
  if (b->nhold == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 64;
    void **n = mn__realloc(b->hold, cap * sizeof *n);
    if (!n) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_replay", "out of host memory");
    b->hold = n;
    b->cap = cap;
  }
  b->hold[b->nhold++] = p;
  return MN_OK;
}

/* Allocations that fill [base, base + size) of a free segment, each within the
 * pool's request limit; false when the allocator put one elsewhere. */
static mn_status occupy(mn__replay_t *r, mn_stream_t *s, char *base, uint64_t size, bool small, pre_build_t *b,
                        bool *ok) {
  *ok = true;
  for (uint64_t off = 0; off < size && *ok;) {
    uint64_t n = small && size - off > PRE_SMALL_REQUEST ? PRE_SMALL_REQUEST : size - off;
    void *p = NULL;
    mn_status st = mn_allocator_alloc(r->a, (size_t)n, s, &p);
    if (st == MN_ERR_OUT_OF_MEMORY) {
      mn_clear_error();
      *ok = false;
      return MN_OK;
    }
    if (st != MN_OK) return st;
    if ((st = hold(b, p)) != MN_OK) {
      mn__ignore(mn_allocator_free(r->a, p)); /* the out-of-memory error stands */
      return st;
    }
    *ok = (char *)p == base + off;
    off += n;
  }
  return MN_OK;
}

/* Reserves pre segment `si` and lays out its pieces (gaps and pre allocations, in
 * address order, covering it exactly). *laid_out: the pre allocations are at their
 * offsets (their pointers in r->ptrs); else the segment is held by placeholders. */
static mn_status build_segment(mn__replay_t *r, size_t si, const pre_piece_t *pc, size_t np, pre_build_t *b,
                               bool *laid_out) {
  const mn_trace_entry_t *seg = &r->trace->entries[si];
  mn_stream_t *s = r->streams[r->sidx[si]];
  bool small = seg->size == PRE_SMALL_SEGMENT;
  *laid_out = false;
  int64_t before = reserved_now(r);
  void *p = NULL;
  mn_status st = mn_allocator_alloc(r->a, small ? PRE_ROUND : (size_t)seg->size, s, &p);
  if (st == MN_ERR_OUT_OF_MEMORY) {
    mn_clear_error();
    b->failed = true;
    return MN_OK;
  }
  if (st != MN_OK) return st;
  int64_t after = reserved_now(r);
  if (before < 0 || after - before != (int64_t)seg->size) { /* another segment size: no rebuild at all */
    b->failed = true;
    if ((st = hold(b, p)) != MN_OK) mn__ignore(mn_allocator_free(r->a, p)); /* the out-of-memory error stands */
    return st;
  }
  char *base = p;
  if ((st = mn_allocator_free(r->a, p)) != MN_OK) return st;
  /* Lay the pieces out, each from the start of the segment's one free block. */
  bool ok = true;
  void **mine = mn__calloc(np ? np : 1, sizeof *mine);
  if (!mine) return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_replay", "out of host memory");
  for (size_t k = 0; k < np && ok; k++) {
    bool gap = pc[k].entry == SIZE_MAX;
    bool limit_ok = small ? pc[k].size <= PRE_SMALL_REQUEST || gap : pc[k].size > PRE_SMALL_REQUEST;
    if (!limit_ok || pc[k].size % PRE_ROUND) {
      ok = false;
      break;
    }
    for (uint64_t off = 0; off < pc[k].size && ok;) { /* a gap in a small segment: pieces of at most 1 MiB */
      uint64_t n = small && pc[k].size - off > PRE_SMALL_REQUEST ? PRE_SMALL_REQUEST : pc[k].size - off;
      /* a block that is its request rounded to 512 B is asked for with the request
       * itself, so the allocator's requested bytes (and snapshots) see it */
      uint64_t ask = n;
      if (!gap) {
        uint64_t req = r->trace->entries[pc[k].entry].size;
        if (req > 0 && (req + PRE_ROUND - 1) / PRE_ROUND * PRE_ROUND == n) ask = req;
      }
      void *q = NULL;
      st = mn_allocator_alloc(r->a, (size_t)ask, s, &q);
      if (st == MN_ERR_OUT_OF_MEMORY) {
        mn_clear_error();
        ok = false;
        break;
      }
      if (st != MN_OK) goto fail;
      if (gap) {
        if ((st = hold(b, q)) != MN_OK) {
          mn__ignore(mn_allocator_free(r->a, q)); /* the out-of-memory error stands */
          goto fail;
        }
      } else {
        mine[k] = q;
      }
      ok = (char *)q == base + (pc[k].addr - seg->address) + off;
      off += n;
    }
  }
  if (ok) {
    for (size_t k = 0; k < np; k++)
      if (pc[k].entry != SIZE_MAX) {
        r->ptrs[pc[k].entry] = mine[k];
        r->cur_req = req_add(r->cur_req, r->trace->entries[pc[k].entry].size);
      }
    if (r->cur_req > r->peak_req) r->peak_req = r->cur_req;
    *laid_out = true;
    free(mine);
    return MN_OK;
  }
  /* Not laid out as recorded: free what was placed in it (the gaps are freed with
   * the rest), and hold the whole segment with placeholders so no other segment's
   * allocation lands in it; its pre allocations then replay as usual. */
  for (size_t k = 0; k < np; k++)
    if (mine[k] && (st = mn_allocator_free(r->a, mine[k])) != MN_OK) goto fail;
  free(mine);
  mine = NULL;
  bool held;
  if ((st = occupy(r, s, base, seg->size, small, b, &held)) != MN_OK) return st;
  if (!held) b->failed = true; /* the freed segment did not take them back: give up the rebuild */
  return MN_OK;
fail:
  for (size_t k = 0; mine && k < np; k++)
    if (mine[k]) mn__ignore(mn_allocator_free(r->a, mine[k])); /* the failure's status stands */
  free(mine);
  return st;
}

static int piece_cmp(const void *a, const void *b) {
  const pre_piece_t *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Reserves every pre segment_alloc of the trace as recorded (see
 * mn_replay_options_t.skip_pre_segments). */
static mn_status build_pre_segments(mn__replay_t *r, mn_replay_result_t *res) {
  const mn_trace_t *t = r->trace;
  size_t nseg = 0, nalloc = 0;
  for (size_t i = 0; i < t->nentries && t->entries[i].pre; i++) {
    nseg += t->entries[i].action == MN_TRACE_SEGMENT_ALLOC;
    nalloc += t->entries[i].action == MN_TRACE_ALLOC;
  }
  if (nseg == 0 || reserved_now(r) < 0) return MN_OK;
  mn_clear_error();
  pre_piece_t *segs = mn__calloc(nseg, sizeof *segs);
  pre_piece_t *allocs = mn__calloc(nalloc ? nalloc : 1, sizeof *allocs);
  pre_piece_t *pc = mn__calloc(2 * nalloc + nseg + 1, sizeof *pc);
  pre_build_t b = {0};
  mn_status st = MN_OK;
  int64_t expect_reserved = 0; /* reserved before the rebuild, plus each segment reserved */
  if (!segs || !allocs || !pc) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_replay", "out of host memory");
    goto done;
  }
  size_t ns = 0, na = 0;
  for (size_t i = 0; i < t->nentries && t->entries[i].pre; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->action == MN_TRACE_SEGMENT_ALLOC) segs[ns++] = (pre_piece_t){e->address, e->size, i};
    else if (e->action == MN_TRACE_ALLOC) {
      uint64_t bs = e->block_size ? e->block_size : (e->size + PRE_ROUND - 1) / PRE_ROUND * PRE_ROUND;
      allocs[na++] = (pre_piece_t){e->address, bs, i};
    }
  }
  qsort(segs, ns, sizeof *segs, piece_cmp);
  qsort(allocs, na, sizeof *allocs, piece_cmp);
  expect_reserved = reserved_now(r);
  size_t a = 0;
  for (size_t k = 0; k < ns && !b.failed; k++) {
    const pre_piece_t *sg = &segs[k];
    if (k && sg->addr < segs[k - 1].addr + segs[k - 1].size) continue; /* overlapping segment lines: leave it */
    while (a < na && allocs[a].addr < sg->addr) a++;
    size_t np = 0;
    uint64_t at = sg->addr, end = sg->addr + sg->size;
    bool fits = sg->size > 0 && end > sg->addr;
    for (; a < na && allocs[a].addr < end; a++) {
      if (allocs[a].addr < at || allocs[a].size > end - allocs[a].addr) fits = false;
      if (!fits) continue;
      if (allocs[a].addr > at) pc[np++] = (pre_piece_t){at, allocs[a].addr - at, SIZE_MAX};
      pc[np++] = allocs[a];
      at = allocs[a].addr + allocs[a].size;
    }
    if (at < end) pc[np++] = (pre_piece_t){at, end - at, SIZE_MAX};
    bool laid_out = false;
    if (!fits) np = 0; /* blocks overlap or spill: reserve it, lay nothing out */
    if (np == 0) pc[np++] = (pre_piece_t){sg->addr, sg->size, SIZE_MAX};
    if ((st = build_segment(r, sg->entry, pc, np, &b, &laid_out)) != MN_OK) goto done;
    if (!b.failed) {
      res->pre_segments++;
      res->pre_segments_laid_out += laid_out && fits;
      expect_reserved = req_add(expect_reserved, sg->size);
    }
  }
done:
  /* The gaps and placeholders go back to the cache: free blocks of their segments. */
  for (size_t k = 0; k < b.nhold; k++) {
    mn_status fs = mn_allocator_free(r->a, b.hold[k]);
    if (st == MN_OK && fs != MN_OK) st = fs;
  }
  /* A piece the allocator placed in a segment of its own (it did not fit where it
   * was recorded) reserved more than the recording held: not a rebuild either. */
  if (st == MN_OK && !b.failed && reserved_now(r) != expect_reserved) b.failed = true;
  if (st == MN_OK && b.failed) {
    /* The allocator makes other segment sizes than the recording one: undo it all
     * (free the laid-out pre allocations, release the cache) and replay cold. */
    for (size_t i = 0; i < t->nentries && t->entries[i].pre; i++)
      if (r->ptrs[i]) {
        if ((st = mn_allocator_free(r->a, r->ptrs[i])) != MN_OK) break;
        r->ptrs[i] = NULL;
        r->cur_req = req_sub(r->cur_req, t->entries[i].size);
      }
    if (st == MN_OK) st = mn_allocator_empty_cache(r->a);
    res->pre_segments = res->pre_segments_laid_out = 0;
  }
  free(b.hold);
  free(segs);
  free(allocs);
  free(pc);
  return st;
}

/* stop_first: stop before the first entry (a stop_after before every entry of
 * the device replayed: the allocator as it was, nothing replayed). */
static mn_status replay_one_device(const mn_trace_t *trace, mn_allocator_t *allocator, mn_replay_options_t opt,
                                   bool stop_first, mn_replay_result_t *out) {
  mn__replay_t r;
  memset(&r, 0, sizeof r);
  r.opt = &opt;
  r.trace = trace;
  r.a = allocator;
  r.dev = mn_allocator_device(allocator);
  mn_replay_result_t res;
  memset(&res, 0, sizeof res);
  size_t n = trace->nentries;
  mn_status st = MN_OK;
  r.match = mn__malloc((n ? n : 1) * sizeof *r.match);
  r.ptrs = mn__calloc(n ? n : 1, sizeof *r.ptrs);
  if (!r.match || !r.ptrs) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu entries", n);
    goto done;
  }
  if ((st = mn__trace_match(trace, r.match)) != MN_OK) goto done;
  if ((st = map_streams(&r)) != MN_OK) goto done;
  res.streams = r.nids;

  mn_alloc_stats_t s0, s1;
  res.stats_from_allocator = mn_allocator_get_stats(allocator, &s0) == MN_OK;
  r.have_stats = res.stats_from_allocator;
  if (res.stats_from_allocator) {
    mn__ignore(mn_allocator_reset_peak(allocator)); /* MN_ERR_NOT_SUPPORTED is fine: peaks then span its life */
    r.have_stats = res.stats_from_allocator = mn_allocator_get_stats(allocator, &s0) == MN_OK;
  }
  mn_sim_stats_t sim0;
  memset(&sim0, 0, sizeof sim0);
  bool is_sim = r.dev.type == MN_DEVICE_SIM && mn_sim_get_stats(r.dev, &sim0) == MN_OK;
  r.sim = is_sim;
  r.mapped_base = sim0.mapped_bytes;
  mn_clear_error();

  uint64_t pre_ns = 0;
  size_t i = 0;
  bool stopped = false; /* past opt.stop_after */
  if (!opt.skip_pre && !opt.skip_pre_segments && r.have_stats && !stop_first) {
    if ((st = build_pre_segments(&r, &res)) != MN_OK) goto done;
    /* the gaps were allocated while the segments were laid out: not the trace's peak */
    mn__ignore(mn_allocator_reset_peak(allocator)); /* MN_ERR_NOT_SUPPORTED: checked at the start */
    track_mapped(&r);
  }
  for (; i < n && trace->entries[i].pre; i++) {
    if (stop_first || i > opt.stop_after) {
      stopped = true;
      break;
    }
    if (trace->entries[i].action != MN_TRACE_ALLOC || opt.skip_pre) continue;
    if (r.ptrs[i]) { /* laid out in its recorded segment */
      res.pre_allocs++;
      step(&r, i);
      continue;
    }
    bool oom;
    if ((st = do_alloc(&r, i, &pre_ns, &oom)) != MN_OK) goto done;
    res.pre_allocs++;
    res.ooms += oom;
  }
  res.allocated_after_pre = r.cur_req;
  res.reserved_after_pre = -1;
  int64_t dev_allocs_pre = 0;
  if (res.stats_from_allocator && mn_allocator_get_stats(allocator, &s1) == MN_OK) {
    res.allocated_after_pre = s1.allocated_bytes[MN_POOL_ALL].current;
    res.reserved_after_pre = s1.reserved_bytes[MN_POOL_ALL].current;
    dev_allocs_pre = s1.num_device_alloc - s0.num_device_alloc;
  } else if (is_sim) {
    mn_sim_stats_t s;
    if (mn_sim_get_stats(r.dev, &s) == MN_OK) {
      res.reserved_after_pre = (int64_t)s.mapped_bytes - (int64_t)sim0.mapped_bytes;
      dev_allocs_pre = (int64_t)(s.raw_allocs + s.maps - sim0.raw_allocs - sim0.maps);
    }
  }

  for (; i < n && !stopped; i++) {
    const mn_trace_entry_t *e = &trace->entries[i];
    if (stop_first || i > opt.stop_after) {
      stopped = true;
      break;
    }
    if (e->action == MN_TRACE_ALLOC) {
      bool oom;
      if ((st = do_alloc(&r, i, &res.op_ns, &oom)) != MN_OK) goto done;
      res.allocs++;
      res.ooms += oom;
    } else if (e->action == MN_TRACE_FREE_REQUESTED) {
      size_t j = r.match[i];
      if (j == SIZE_MAX || !r.ptrs[j]) {
        res.skipped_frees++;
        continue;
      }
      uint64_t t0 = now_ns();
      st = mn_allocator_free(allocator, r.ptrs[j]);
      res.op_ns += now_ns() - t0;
      if (st != MN_OK) {
        st = op_failed(e, i, st, "free");
        goto done;
      }
      r.ptrs[j] = NULL;
      r.cur_req = req_sub(r.cur_req, trace->entries[j].size);
      res.frees++;
      track_mapped(&r);
      step(&r, i);
    } else if (e->action == MN_TRACE_OOM) {
      res.recorded_ooms++;
      if (!opt.replay_ooms) continue;
      bool oom;
      if ((st = do_alloc(&r, i, &res.op_ns, &oom)) != MN_OK) goto done;
      res.ooms_reproduced += oom;
      step(&r, i);
    } else if (e->action == MN_TRACE_EMPTY_CACHE && !opt.skip_empty_cache) {
      uint64_t t0 = now_ns();
      st = mn_allocator_empty_cache(allocator);
      res.op_ns += now_ns() - t0;
      if (st != MN_OK) {
        st = op_failed(e, i, st, "empty_cache");
        goto done;
      }
      res.empty_caches++;
      track_mapped(&r);
      step(&r, i);
    }
  }
  if (opt.live_ptrs) memcpy(opt.live_ptrs, r.ptrs, n * sizeof *r.ptrs);
  if (opt.at_stop) opt.at_stop(opt.at_stop_user, allocator);
  res.retries = r.retries;

  res.peak_requested = r.peak_req;
  if (res.stats_from_allocator && mn_allocator_get_stats(allocator, &s1) == MN_OK) {
    res.peak_allocated = s1.allocated_bytes[MN_POOL_ALL].peak;
    res.peak_reserved = s1.reserved_bytes[MN_POOL_ALL].peak;
    res.device_allocs = s1.num_device_alloc - s0.num_device_alloc;
    res.device_frees = s1.num_device_free - s0.num_device_free;
  } else {
    res.stats_from_allocator = false;
    res.peak_allocated = r.peak_req;
    res.peak_reserved = r.sim ? r.peak_mapped : -1;
    mn_sim_stats_t s;
    res.device_allocs = res.device_frees = -1;
    if (is_sim && mn_sim_get_stats(r.dev, &s) == MN_OK) {
      res.device_allocs = (int64_t)(s.raw_allocs + s.maps - sim0.raw_allocs - sim0.maps);
      res.device_frees = (int64_t)(s.raw_frees + s.unmaps - sim0.raw_frees - sim0.unmaps);
    }
  }
  res.peak_device_mapped = r.sim ? r.peak_mapped : -1;
  res.device_allocs_events = res.device_allocs >= 0 ? res.device_allocs - dev_allocs_pre : -1;
  res.ratio = res.peak_allocated > 0 && res.peak_reserved >= 0 ? (double)res.peak_reserved / (double)res.peak_allocated : 0.0;
  res.ns_per_op = res.allocs + res.frees ? (double)res.op_ns / (double)(res.allocs + res.frees) : 0.0;

done:
  replay_cleanup(&r);
  if (st == MN_OK) *out = res;
  return st;
}

/* One device of a version 2 trace replays through a copy of its entries;
 * step callbacks get the original entry indices back. */
typedef struct mn__sub_step_s {
  const size_t *orig;
  void (*fn)(void *user, const mn_replay_step_t *step);
  void *user;
} mn__sub_step_t;

static void sub_step(void *user, const mn_replay_step_t *step) {
  const mn__sub_step_t *s = user;
  mn_replay_step_t t = *step;
  t.entry = s->orig[step->entry];
  s->fn(s->user, &t);
}

typedef struct mn__sub_oom_s {
  const size_t *orig;
  void (*fn)(void *user, const mn_replay_oom_t *oom);
  void *user;
} mn__sub_oom_t;

static void sub_oom(void *user, const mn_replay_oom_t *oom) {
  const mn__sub_oom_t *s = user;
  mn_replay_oom_t t = *oom;
  t.entry = s->orig[oom->entry];
  s->fn(s->user, &t);
}

mn_status mn_trace_replay(const mn_trace_t *trace, mn_allocator_t *allocator, const mn_replay_options_t *options,
                          mn_replay_result_t *out) {
  MN__CHECK_ARG(trace != NULL && allocator != NULL && out != NULL, "trace, allocator and out must not be NULL");
  mn_replay_options_t opt = options ? *options : mn_replay_options_default();
  MN__CHECK_ARG(opt.trace_device >= -1, "trace_device %d is not -1 or a device index", opt.trace_device);
  /* The trace's devices: replay one, through a copy holding only its entries. */
  uint32_t lo = UINT32_MAX, ndev = 0;
  bool mixed = false;
  for (size_t i = 0; i < trace->nentries; i++) {
    uint32_t d = trace->entries[i].device;
    if (i > 0 && d != trace->entries[0].device) mixed = true;
    if (d < lo) lo = d;
  }
  if (lo == UINT32_MAX) lo = 0;
  uint32_t want = opt.trace_device < 0 ? lo : (uint32_t)opt.trace_device;
  if (mixed) {
    /* count distinct devices (small: sort-free with a bitmap over the first 1024) */
    uint8_t seen[128] = {0};
    for (size_t i = 0; i < trace->nentries; i++) {
      uint32_t d = trace->entries[i].device;
      if (d < 1024 && !(seen[d / 8] & (1u << (d % 8)))) {
        seen[d / 8] |= (uint8_t)(1u << (d % 8));
        ndev++;
      }
    }
  } else {
    ndev = trace->nentries ? 1 : 0;
  }
  mn_status st;
  mn_replay_result_t res;
  if (!mixed && (trace->nentries == 0 || trace->entries[0].device == want)) {
    st = replay_one_device(trace, allocator, opt, false, &res);
  } else {
    mn_trace_t sub;
    memset(&sub, 0, sizeof sub);
    sub.version = trace->version;
    sub.entries = mn__malloc((trace->nentries ? trace->nentries : 1) * sizeof *sub.entries);
    size_t *orig = mn__malloc((trace->nentries ? trace->nentries : 1) * sizeof *orig);
    if (!sub.entries || !orig) {
      free(sub.entries);
      free(orig);
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    }
    size_t stop = SIZE_MAX;
    for (size_t i = 0; i < trace->nentries; i++) {
      if (trace->entries[i].device != want) continue;
      if (opt.stop_after != SIZE_MAX && i <= opt.stop_after) stop = sub.nentries;
      orig[sub.nentries] = i;
      sub.entries[sub.nentries++] = trace->entries[i];
    }
    if (sub.nentries == 0) {
      free(sub.entries);
      free(orig);
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "the trace has no entries on device %" PRIu32, want);
    }
    bool stop_first = opt.stop_after != SIZE_MAX && stop == SIZE_MAX; /* it stops before this device's first entry */
    if (opt.stop_after != SIZE_MAX) opt.stop_after = stop == SIZE_MAX ? 0 : stop;
    sub.capacity = sub.nentries;
    void **want_ptrs = opt.live_ptrs;
    if (want_ptrs) { /* the sub-trace's slots, copied back to the original indices below */
      memset(want_ptrs, 0, trace->nentries * sizeof *want_ptrs);
      opt.live_ptrs = mn__calloc(sub.nentries, sizeof *opt.live_ptrs);
      if (!opt.live_ptrs) {
        free(sub.entries);
        free(orig);
        return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
      }
    }
    mn__sub_step_t ss = {orig, opt.on_step, opt.on_step_user};
    if (opt.on_step) {
      opt.on_step = sub_step;
      opt.on_step_user = &ss;
    }
    mn__sub_oom_t so = {orig, opt.on_oom, opt.on_oom_user};
    if (opt.on_oom) {
      opt.on_oom = sub_oom;
      opt.on_oom_user = &so;
    }
    st = replay_one_device(&sub, allocator, opt, stop_first, &res);
    if (want_ptrs) {
      for (size_t k = 0; st == MN_OK && k < sub.nentries; k++) want_ptrs[orig[k]] = opt.live_ptrs[k];
      free(opt.live_ptrs);
    }
    free(sub.entries);
    free(orig);
  }
  if (st != MN_OK) return st;
  res.trace_device = want;
  res.trace_devices = ndev;
  *out = res;
  return MN_OK;
}
