/* profiling/report.c: the report page of one trace (mn_report_build, the page
 * `mnemo report TRACE -o FILE` writes): replays the trace on the SIM device and
 * builds one self-contained HTML page (inline CSS and JavaScript, canvas drawing;
 * no network) about its memory, with its summary as text and as one JSON object.
 * Any thread; the SIM device is the caller's for the call (configured for each
 * device's replays, restored as found on return).
 *
 * Every device of the trace (or options->trace_device's) is replayed on its own
 * (report_device) and has its own data element in the page ("mn-data" for the
 * first, "mn-data-dev<N>" for the others; "mn-devices" lists them, the one named by
 * `meta host_device` as pinned host memory); the page's selector picks one. Each
 * device's SIM capacity is the one `mnemo replay` gives it (mn__sim_as_recorded).
 * Pinned host memory is never replayed (report_host: PyTorch's CachingHostAllocator
 * is not the device allocator, as `mnemo replay` says): its page holds the recorded
 * curves only ("replayed": false, no "a"/"r"/"q" columns, no results), its state
 * events are the trace's own lines of the device (recorded_events: segment lines as
 * segments, alloc lines as blocks at their recorded addresses and block sizes, gone
 * at their free_requested), and its holders and segment map (recorded_segments) are
 * taken at the recorded peak of allocated bytes; the rest below is about GPUs.
 * "Who holds the peak" is taken at the replay's first entry at the peak of
 * allocated bytes (and at the peak of reserved bytes, labelled), every allocation
 * alive in the trace there counted, each group with the replay's block bytes,
 * which add up to the replay's allocated bytes there. A state dump (`meta
 * state_only 1` or pre lines only) is its state after the last entry.
 *
 * The allocator state at any entry: the first replay's allocator has a trace sink
 * (ev_sink) that keeps its own events (alloc, free_completed, segment alloc/free,
 * map/unmap), each tagged at the next replay step with the trace entry whose replay
 * caused it, and, for an alloc entry's one block, with that entry (the blocks laid
 * out in the pre segments before the first step are matched by address to the
 * pointers a replay stopped after the pre lines gives). The page gets them as
 * typed arrays in base64 (write_events: about 35 bytes per trace entry, 36 MB at
 * 1M entries) and rebuilds the state at an entry from the nearest checkpoint (one
 * every 32768 events, kept as first passed): 2-20 ms per moment at 1M entries.
 *
 * The page's data (a JSON object in the page, read by profiling/report_page.html) stays
 * bounded whatever the trace's length:
 *  - timeline: the replayed device's entries that change a curve (alloc,
 *    free_requested, empty_cache, segment events, pre lines included). Up to
 *    FULL_POINTS of them are all kept; beyond, they are cut into BUCKETS buckets and
 *    each bucket keeps the entries where a curve is highest (replay reserved,
 *    allocated, requested and the recorded curves) and where replay allocated is
 *    lowest, so every peak drawn is the exact peak; the PEAK_WINDOW entries each
 *    side of the peak are all kept, so zooming in there shows every step. Each kept
 *    point is a real entry with all its values (hover names it);
 *  - active memory: the BANDS_MAX largest allocations are bands of their own; the
 *    others are summed per point (`g`), the grey band on top;
 *  - stacks: only those the page refers to, cut to STACK_HOVER_MAX frames (its
 *    user frames, profiling/stacks.h, else the innermost) unless a "who holds the
 *    peak" group needs the whole stack;
 *  - segments at the peak: fully free ones folded into one row per size.
 * Everything else (stacking the bands, grouping by frames, zoom) is done by the
 * page's script. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/trace.h"
#include "profiling/analysis.h"
#include "profiling/pages.h"
#include "profiling/stacks.h"
#include "profiling/text.h"
#include "report_page.h"
#include "runtime/hostmem.h"

#define FN "mn_report_build"

/* The failure that just happened, passed on under mn_report_build: "<what><its
 * whole message>" (the CLI prints the detail as it printed the message before
 * the page moved here). Returns st. */
static mn_status failed(mn_status st, const char *what) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", mn_last_error());
  return mn__error(st, FN, "%s%s", what, msg);
}

/* A setting or SIM size refused: MN_ERR_INVALID_ARGUMENT (a bad option), but
 * a lack of host memory, or SIM memory still in use, as it came. */
static mn_status bad_option(mn_status st) {
  return st == MN_ERR_OUT_OF_MEMORY || st == MN_ERR_INVALID_STATE ? st : MN_ERR_INVALID_ARGUMENT;
}

#define MAX_DEVICES 64
#define FULL_POINTS 6000   /* timeline entries kept all when there are at most this many */
#define BUCKETS 1500       /* else this many buckets, each keeping its extremes */
#define PEAK_WINDOW 400    /* timeline entries each side of the peak kept all */
#define BANDS_MAX 2000     /* allocations drawn as bands of their own (the largest) */
#define STACK_HOVER_MAX 24 /* frames kept of a stack shown only in tooltips */
#define TOP_ALLOCS 25

typedef struct sample_s {
  size_t entry;
  int64_t allocated, reserved, requested;
} sample_t;

typedef struct timeline_s {
  sample_t *s;
  size_t n, cap;
  bool oom;
} timeline_t;

/* The replay allocator's own events (its trace sink), each tagged with the trace
 * entry whose replay caused it: the page rebuilds the allocator's state at any
 * entry from them (segments as rows, live blocks in them). kind: EV_*. */
enum { EV_ALLOC, EV_FREE, EV_SEG_ALLOC, EV_SEG_FREE, EV_MAP, EV_UNMAP };
typedef struct evlog_s {
  uint32_t *entry, *own; /* the entry replayed; for EV_ALLOC the alloc entry it serves (UINT32_MAX: unknown) */
  uint8_t *kind;
  double *addr, *size;
  size_t n, cap, tagged; /* events [0, tagged) have their entry */
  bool oom;
  bool streams_only;        /* keep no events: only the stream map below */
  size_t pend_alloc;        /* streams_only: alloc events since the last step */
  uint64_t last_stream;     /* the replay stream of the last alloc event */
  uint64_t sim_stream[64], rec_stream[64]; /* replay stream id -> the trace's, from the first alloc on it */
  size_t nsim;
} evlog_t;

typedef struct step_ctx_s {
  const mn_trace_t *t;
  timeline_t *tl;
  evlog_t *ev;
} step_ctx_t;

static void ev_sink(void *user, const mn_trace_event_t *e) {
  evlog_t *ev = user;
  int kind;
  switch (e->action) {
    case MN_TRACE_ALLOC: kind = EV_ALLOC; break;
    case MN_TRACE_FREE_COMPLETED: kind = EV_FREE; break;
    case MN_TRACE_SEGMENT_ALLOC: kind = EV_SEG_ALLOC; break;
    case MN_TRACE_SEGMENT_FREE: kind = EV_SEG_FREE; break;
    case MN_TRACE_SEGMENT_MAP: kind = EV_MAP; break;
    case MN_TRACE_SEGMENT_UNMAP: kind = EV_UNMAP; break;
    default: return; /* free_requested (the block stays taken until completed), empty_cache, oom */
  }
  if (ev->streams_only) {
    if (kind == EV_ALLOC) {
      ev->last_stream = e->stream_id;
      ev->pend_alloc++;
    }
    return;
  }
  if (ev->oom) return;
  if (ev->n == ev->cap) {
    size_t cap = ev->cap ? ev->cap * 2 : 4096;
    uint32_t *ne = mn__realloc(ev->entry, cap * sizeof *ne);
    if (ne) ev->entry = ne;
    uint32_t *no = mn__realloc(ev->own, cap * sizeof *no);
    if (no) ev->own = no;
    uint8_t *nk = mn__realloc(ev->kind, cap * sizeof *nk);
    if (nk) ev->kind = nk;
    double *na = mn__realloc(ev->addr, cap * sizeof *na);
    if (na) ev->addr = na;
    double *ns = mn__realloc(ev->size, cap * sizeof *ns);
    if (ns) ev->size = ns;
    if (!ne || !no || !nk || !na || !ns) {
      ev->oom = true;
      return;
    }
    ev->cap = cap;
  }
  ev->entry[ev->n] = ev->own[ev->n] = UINT32_MAX;
  if (kind == EV_ALLOC) ev->last_stream = e->stream_id;
  ev->kind[ev->n] = (uint8_t)kind;
  ev->addr[ev->n] = (double)e->address;
  ev->size[ev->n] = (double)e->size;
  ev->n++;
}

static void evlog_free(evlog_t *ev) {
  free(ev->entry);
  free(ev->own);
  free(ev->kind);
  free(ev->addr);
  free(ev->size);
}

/* Notes that the replay's stream `sim` serves the trace's stream of entry i. */
static void map_stream(evlog_t *ev, uint64_t sim, const mn_trace_entry_t *e) {
  size_t k = 0;
  while (k < ev->nsim && ev->sim_stream[k] != sim) k++;
  if (k == ev->nsim && k < 64) {
    ev->sim_stream[k] = sim;
    ev->rec_stream[k] = e->stream;
    ev->nsim++;
  }
}

static void on_step(void *user, const mn_replay_step_t *st) {
  step_ctx_t *cx = user;
  timeline_t *tl = cx->tl;
  if (cx->ev && cx->ev->streams_only) {
    evlog_t *ev = cx->ev;
    if (ev->pend_alloc == 1 && cx->t->entries[st->entry].action == MN_TRACE_ALLOC)
      map_stream(ev, ev->last_stream, &cx->t->entries[st->entry]);
    ev->pend_alloc = 0;
  } else if (cx->ev) { /* the events since the last step were caused by this entry */
    evlog_t *ev = cx->ev;
    uint32_t at = st->entry > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)st->entry;
    size_t nalloc = 0, last = 0;
    for (size_t k = ev->tagged; k < ev->n; k++) {
      ev->entry[k] = at;
      if (ev->kind[k] == EV_ALLOC) {
        nalloc++;
        last = k;
      }
    }
    /* an alloc entry's step holds its one block; the first step also holds the
     * blocks laid out in the pre segments (matched by address afterwards) */
    if (nalloc == 1 && cx->t->entries[st->entry].action == MN_TRACE_ALLOC) {
      ev->own[last] = at;
      map_stream(ev, ev->last_stream, &cx->t->entries[st->entry]);
    }
    ev->tagged = ev->n;
  }
  if (!tl) return;
  if (!mn__grow(&tl->s, tl->n, &tl->cap, sizeof *tl->s, 4096)) {
    tl->oom = true;
    return;
  }
  tl->s[tl->n++] = (sample_t){st->entry, st->allocated, st->reserved, st->requested};
}

static void at_stop(void *user, mn_allocator_t *a) {
  mn_snapshot_t **snap = user;
  if (mn_allocator_snapshot(a, snap) != MN_OK) *snap = NULL;
}

typedef struct ref_s {
  uint64_t address;
  size_t index;
} ref_t;

static int cmp_ref(const void *a, const void *b) {
  const ref_t *x = a, *y = b;
  if (x->address != y->address) return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_size_t(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_u64_desc(const void *a, const void *b) { return cmp_u64(b, a); }

/* Per entry flags. */
enum { F_DEV = 1, F_SERIES = 2, F_KEEP = 4, F_BAND = 8 };

/* What the page shows about the trace itself, for the replayed device. */
typedef struct report_s {
  const mn_trace_t *t;
  uint32_t dev;
  size_t n;                              /* t->nentries */
  uint8_t *flag;                         /* per entry: F_* */
  size_t *pair;                          /* per alloc / free_requested: its partner, SIZE_MAX none */
  int64_t *rep_a, *rep_r, *rep_q;        /* per entry: the replay's bytes after it (carried forward) */
  int64_t *rec_a, *rec_r;                /* per entry: the recording allocator's, from the trace */
  int64_t *live, *agg;                   /* per entry: bytes asked for and live; of which not in a band */
  uint64_t *tmono;                       /* per entry on the device: time_us, never decreasing (pre: 0) */
  size_t *keep, nkeep;                   /* timeline points: entries, ascending */
  size_t *bands, nbands;                 /* allocations drawn as bands, ascending */
  size_t *held, nheld;                   /* allocations alive at the peak of allocated bytes, largest first */
  mn__holder_t *holders;         /* those grouped by stack, the most bytes first */
  size_t nholders;
  uint64_t *grb;                         /* per group: the replay's block bytes (sums to its allocated bytes) */
  size_t *held_res, nheld_res;           /* the same at the peak of reserved bytes */
  mn__holder_t *holders_res;
  size_t nholders_res;
  uint64_t *grb_res;
  size_t peak_res, peak_alloc;           /* entries: first step at the replay's peak reserved / allocated */
  bool state_only;                       /* a dump without history (`meta state_only 1` or no events) */
  bool recorded;                         /* pinned host memory: shown as recorded, never replayed */
  const evlog_t *ev;                     /* the replay allocator's events (NULL: none) */
  const evlog_t *stop_streams;           /* the stream map of the replay stopped at the peak reserved */
  double *rblk;                          /* per alloc entry: the replay's block bytes (0: none, e.g. OOM) */
  size_t *ooms, nooms;                   /* the device's recorded oom entries */
  uint64_t *streams;
  size_t nstreams;                       /* distinct stream ids on the device, sorted */
  uint32_t *smap, *sdepth, *sout;        /* stack id -> page index + 1; frames kept; page index -> id */
  size_t nsout;
  uint32_t *fmap, *fout;                 /* frame id -> page index + 1; page index -> id */
  size_t nfout;
  bool has_recorded;                     /* segment events or `meta recorded_by pytorch` */
  bool decimated;                        /* more than FULL_POINTS timeline entries: bucketed */
  size_t first_event;                    /* first non-pre entry on the device; SIZE_MAX: none */
  uint64_t t_first, t_last;
} report_t;

static void report_free(report_t *r) {
  free(r->flag);
  free(r->pair);
  free(r->rep_a);
  free(r->rep_r);
  free(r->rep_q);
  free(r->rec_a);
  free(r->rec_r);
  free(r->live);
  free(r->agg);
  free(r->tmono);
  free(r->keep);
  free(r->bands);
  free(r->held);
  free(r->holders);
  free(r->grb);
  free(r->held_res);
  free(r->holders_res);
  free(r->grb_res);
  free(r->rblk);
  free(r->ooms);
  free(r->streams);
  free(r->smap);
  free(r->sdepth);
  free(r->sout);
  free(r->fmap);
  free(r->fout);
}

static bool is_segment_action(mn_trace_action a) {
  return a == MN_TRACE_SEGMENT_ALLOC || a == MN_TRACE_SEGMENT_FREE || a == MN_TRACE_SEGMENT_MAP ||
         a == MN_TRACE_SEGMENT_UNMAP;
}

static size_t stream_index(const report_t *r, uint64_t id) {
  const uint64_t *hit = bsearch(&id, r->streams, r->nstreams, sizeof *r->streams, cmp_u64);
  return hit ? (size_t)(hit - r->streams) : 0;
}

/* Marks stack `id` as shown by the page: `full` keeps every frame. */
static void ref_stack(report_t *r, uint32_t id, bool full) {
  if (id == 0 || id > r->t->nstacks) return;
  uint32_t want = full ? UINT32_MAX : STACK_HOVER_MAX;
  if (!r->smap[id]) {
    r->sout[r->nsout++] = id;
    r->smap[id] = (uint32_t)r->nsout;
  }
  if (r->sdepth[id] < want) r->sdepth[id] = want;
}

static uint32_t stack_out(const report_t *r, uint32_t id) {
  return id && id <= r->t->nstacks ? r->smap[id] : 0;
}

/* Keeps entry i of the device's timeline entries when it beats *best by `better`. */
#define TAKE_BEST(best, i, arr, cmp) \
  do {                               \
    if ((best) == SIZE_MAX || (arr)[i] cmp (arr)[best]) (best) = (i); \
  } while (0)

/* The device's entries, its streams, each alloc's free (by address, in order) and
 * the bands (the largest allocations); idx: scratch of n entries; false when out of host memory. */
static bool scan_device(report_t *r, size_t *idx) {
  const mn_trace_t *t = r->t;
  size_t n = r->n;
  size_t nallocs = 0;
  r->first_event = SIZE_MAX;
  const char *by = mn_trace_meta_get(t, "recorded_by");
  r->has_recorded = by && !strcmp(by, "pytorch");
  /* each alloc's free and each free's alloc (the trace's own matching), this device's only */
  if (mn__trace_match(t, r->pair) != MN_OK) return false;
  for (size_t i = 0; i < n; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->device != r->dev) {
      r->pair[i] = SIZE_MAX;
      continue;
    }
    r->flag[i] = F_DEV;
    r->streams[r->nstreams++] = e->stream;
    if (!e->pre && r->first_event == SIZE_MAX) r->first_event = i;
    if (e->action == MN_TRACE_ALLOC) idx[nallocs++] = i;
    if (is_segment_action(e->action)) r->has_recorded = true;
    if (e->action == MN_TRACE_ALLOC || e->action == MN_TRACE_FREE_REQUESTED || e->action == MN_TRACE_EMPTY_CACHE ||
        is_segment_action(e->action))
      r->flag[i] |= F_SERIES;
  }
  qsort(r->streams, r->nstreams, sizeof *r->streams, cmp_u64);
  size_t u = 0;
  for (size_t k = 0; k < r->nstreams; k++)
    if (u == 0 || r->streams[u - 1] != r->streams[k]) r->streams[u++] = r->streams[k];
  r->nstreams = u;

  mn__trace_sort_by_size(t, idx, nallocs);
  for (size_t k = 0; k < nallocs && k < BANDS_MAX; k++) r->flag[idx[k]] |= F_BAND;
  r->nbands = nallocs < BANDS_MAX ? nallocs : BANDS_MAX;
  r->bands = mn__malloc((r->nbands ? r->nbands : 1) * sizeof *r->bands);
  if (!r->bands) return false;
  memcpy(r->bands, idx, r->nbands * sizeof *idx);
  qsort(r->bands, r->nbands, sizeof *r->bands, cmp_size_t);

  return true;
}

/* The curves, entry by entry: the replay's (carried forward from its steps), the
 * recording allocator's, the live bytes and those outside the bands, and the time. */
/* x clamped to the int64 range. */
static int64_t sat_i64(__int128 x) {
  return x > (__int128)INT64_MAX ? INT64_MAX : x < (__int128)INT64_MIN ? INT64_MIN : (int64_t)x;
}

static void compute_curves(report_t *r, const timeline_t *tl) {
  const mn_trace_t *t = r->t;
  size_t n = r->n;
  int64_t ra = 0, rr = 0, rq = 0;
  /* Sizes are user data (up to 2^64 - 1 each): the sums are taken in 128 bits,
   * where 2^64 entries of any size cannot overflow, and saturate to the
   * curves' int64 range when stored. */
  __int128 ca = 0, cr = 0, lv = 0, ag = 0;
  uint64_t tm = 0;
  bool have_time = false;
  size_t si = 0;
  for (size_t i = 0; i < n; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    while (si < tl->n && tl->s[si].entry <= i) {
      ra = tl->s[si].allocated;
      rr = tl->s[si].reserved;
      rq = tl->s[si].requested;
      si++;
    }
    if (!e->pre && (r->flag[i] & F_DEV)) {
      if (!have_time || e->time_us > tm) tm = e->time_us;
      if (!have_time) r->t_first = tm;
      have_time = true;
    }
    if (r->flag[i] & F_DEV) {
      if (e->action == MN_TRACE_ALLOC) {
        ca += (__int128)mn__trace_recorded_block(e);
        lv += (__int128)e->size;
        if (!(r->flag[i] & F_BAND)) ag += (__int128)e->size;
      } else if (e->action == MN_TRACE_FREE_REQUESTED && r->pair[i] != SIZE_MAX) {
        const mn_trace_entry_t *a = &t->entries[r->pair[i]];
        ca -= (__int128)mn__trace_recorded_block(a);
        lv -= (__int128)a->size;
        if (!(r->flag[r->pair[i]] & F_BAND)) ag -= (__int128)a->size;
      } else if (e->action == MN_TRACE_SEGMENT_ALLOC || e->action == MN_TRACE_SEGMENT_MAP) {
        cr += (__int128)e->size;
      } else if (e->action == MN_TRACE_SEGMENT_FREE || e->action == MN_TRACE_SEGMENT_UNMAP) {
        cr -= (__int128)e->size;
      }
    }
    r->rep_a[i] = ra;
    r->rep_r[i] = rr;
    r->rep_q[i] = rq;
    r->rec_a[i] = sat_i64(ca);
    r->rec_r[i] = sat_i64(cr);
    r->live[i] = sat_i64(lv);
    r->agg[i] = sat_i64(ag);
    r->tmono[i] = e->pre ? 0 : tm;
  }
  r->t_last = tm;
}

/* The timeline points: the device's curve-changing entries, bucketed when there are
 * more than FULL_POINTS; idx: scratch of n entries. */
static bool choose_points(report_t *r, size_t *idx) {
  size_t n = r->n;
  size_t ns = 0;
  for (size_t i = 0; i < n; i++)
    if (r->flag[i] & F_SERIES) idx[ns++] = i;
  r->decimated = ns > FULL_POINTS;
  if (!r->decimated) {
    for (size_t k = 0; k < ns; k++) r->flag[idx[k]] |= F_KEEP;
  } else {
    size_t per = (ns + BUCKETS - 1) / BUCKETS;
    for (size_t b = 0; b < ns; b += per) {
      size_t best[7] = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
      for (size_t k = b; k < b + per && k < ns; k++) {
        size_t i = idx[k];
        TAKE_BEST(best[0], i, r->rep_r, >);
        TAKE_BEST(best[1], i, r->rep_a, >);
        TAKE_BEST(best[2], i, r->recorded ? r->rec_a : r->rep_a, <);
        TAKE_BEST(best[3], i, r->rep_q, >);
        TAKE_BEST(best[4], i, r->live, >);
        if (r->has_recorded) {
          TAKE_BEST(best[5], i, r->rec_r, >);
          TAKE_BEST(best[6], i, r->rec_a, >);
        }
      }
      for (size_t k = 0; k < 7; k++)
        if (best[k] != SIZE_MAX) r->flag[best[k]] |= F_KEEP;
    }
    for (int pk = 0; pk < 2; pk++) { /* around both peaks (reserved, allocated) */
      size_t peak_entry = pk ? r->peak_alloc : r->peak_res, at = 0; /* the peak's position among them */
      while (at < ns && idx[at] < peak_entry) at++;
      for (size_t k = at > PEAK_WINDOW ? at - PEAK_WINDOW : 0; k < ns && k <= at + PEAK_WINDOW; k++)
        r->flag[idx[k]] |= F_KEEP;
    }
    r->flag[idx[0]] |= F_KEEP;
    r->flag[idx[ns - 1]] |= F_KEEP;
  }
  if (r->peak_res < n && (r->flag[r->peak_res] & F_DEV)) r->flag[r->peak_res] |= F_KEEP;
  if (r->peak_alloc < n && (r->flag[r->peak_alloc] & F_DEV)) r->flag[r->peak_alloc] |= F_KEEP;
  for (size_t k = 0; k < r->nooms; k++) r->flag[r->ooms[k]] |= F_KEEP;
  if (r->first_event != SIZE_MAX && (r->flag[r->first_event] & F_SERIES)) r->flag[r->first_event] |= F_KEEP;
  for (size_t i = 0; i < n; i++)
    if (r->flag[i] & F_KEEP) r->nkeep++;
  r->keep = mn__malloc((r->nkeep ? r->nkeep : 1) * sizeof *r->keep);
  if (!r->keep) return false;
  r->nkeep = 0;
  for (size_t i = 0; i < n; i++)
    if (r->flag[i] & F_KEEP) r->keep[r->nkeep++] = i;

  return true;
}

/* Who holds the memory after entry `at`: the device's allocations alive in the trace
 * there, largest first, grouped by stack (and, without one, by whether it was made
 * before recording), each group with the replay's block bytes (*grb), which add up to
 * the replay's allocated bytes there (an allocation the replay could not make
 * counts 0). */
static bool find_holders(report_t *r, size_t at, size_t **held, size_t *nheld, mn__holder_t **holders,
                         size_t *nholders, uint64_t **grb) {
  const mn_trace_t *t = r->t;
  size_t n = r->n;
  *nheld = 0;
  for (size_t i = 0; i < n && i <= at; i++)
    if ((r->flag[i] & F_DEV) && t->entries[i].action == MN_TRACE_ALLOC && (r->pair[i] == SIZE_MAX || r->pair[i] > at))
      (*nheld)++;
  *held = mn__malloc((*nheld ? *nheld : 1) * sizeof **held);
  if (!*held) return false;
  *nheld = 0;
  for (size_t i = 0; i < n && i <= at; i++)
    if ((r->flag[i] & F_DEV) && t->entries[i].action == MN_TRACE_ALLOC && (r->pair[i] == SIZE_MAX || r->pair[i] > at))
      (*held)[(*nheld)++] = i;
  if (!mn__holders(t, *held, *nheld, holders, nholders)) return false;
  *grb = mn__calloc(*nholders ? *nholders : 1, sizeof **grb);
  uint32_t *gix = mn__calloc(t->nstacks + 1, sizeof *gix); /* stack id -> group index + 1 */
  if (!*grb || !gix) {
    free(gix);
    return false;
  }
  size_t nostack[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
  for (size_t g = 0; g < *nholders; g++) {
    const mn__holder_t *h = &(*holders)[g];
    if (h->kind == 0 && h->stack <= t->nstacks) gix[h->stack] = (uint32_t)(g + 1);
    else if (h->kind > 0 && h->kind < 3) nostack[h->kind] = g;
  }
  for (size_t k = 0; k < *nheld; k++) {
    const mn_trace_entry_t *e = &t->entries[(*held)[k]];
    size_t g = e->stack ? (e->stack <= t->nstacks && gix[e->stack] ? gix[e->stack] - 1 : SIZE_MAX)
                        : nostack[e->pre ? 1 : 2];
    if (g < *nholders) (*grb)[g] = mn__sat_add_u64((*grb)[g], (uint64_t)r->rblk[(*held)[k]]);
  }
  free(gix);
  return true;
}

/* The frames of stack `id` the page gets, innermost first (*fr points to them):
 * all of them when kept whole, else at most STACK_HOVER_MAX, its user frames
 * (profiling/stacks.h) when it has any, so that a cut stack keeps what its hover
 * shows (the first user frame may lie deeper than the innermost frames). */
static size_t page_frames(const report_t *r, uint32_t id, uint32_t buf[STACK_HOVER_MAX], const uint32_t **fr) {
  size_t d = mn_trace_stack_get(r->t, id, fr);
  if (d <= r->sdepth[id]) return d;
  size_t n = mn__stack_user_frames(r->t, id, buf, STACK_HOVER_MAX);
  if (!n) return r->sdepth[id];
  *fr = buf;
  return n < STACK_HOVER_MAX ? n : STACK_HOVER_MAX;
}

/* The stacks the page shows (page indices in the order first needed), and their frames. */
static bool collect_stacks(report_t *r) {
  const mn_trace_t *t = r->t;
  size_t nst = t->nstacks;
  r->smap = mn__calloc(nst + 1, sizeof *r->smap);
  r->sdepth = mn__calloc(nst + 1, sizeof *r->sdepth);
  r->sout = mn__malloc((nst ? nst : 1) * sizeof *r->sout);
  r->fmap = mn__calloc(t->nframes + 1, sizeof *r->fmap);
  r->fout = mn__malloc((t->nframes ? t->nframes : 1) * sizeof *r->fout);
  if (!r->smap || !r->sdepth || !r->sout || !r->fmap || !r->fout) return false;
  for (size_t k = 0; k < r->nholders; k++) ref_stack(r, r->holders[k].stack, true);
  for (size_t k = 0; k < r->nholders_res; k++) ref_stack(r, r->holders_res[k].stack, true);
  for (size_t k = 0; k < t->nannotations; k++)
    if (t->annotations[k].device == r->dev) ref_stack(r, t->annotations[k].stack, false);
  if (r->ev)
    for (size_t k = 0; k < r->ev->n; k++)
      if (r->ev->kind[k] == EV_ALLOC && r->ev->own[k] < r->n) ref_stack(r, t->entries[r->ev->own[k]].stack, false);
  for (size_t k = 0; k < r->nkeep; k++) {
    size_t i = r->keep[k];
    ref_stack(r, t->entries[i].stack, false);
    if (t->entries[i].action == MN_TRACE_FREE_REQUESTED && r->pair[i] != SIZE_MAX)
      ref_stack(r, t->entries[r->pair[i]].stack, false);
  }
  for (size_t k = 0; k < r->nbands; k++) ref_stack(r, t->entries[r->bands[k]].stack, false);
  for (size_t k = 0; k < r->nsout; k++) {
    const uint32_t *fr = NULL;
    uint32_t buf[STACK_HOVER_MAX];
    size_t d = page_frames(r, r->sout[k], buf, &fr);
    for (size_t j = 0; j < d; j++)
      if (fr[j] && fr[j] <= t->nframes && !r->fmap[fr[j]]) {
        r->fout[r->nfout++] = fr[j];
        r->fmap[fr[j]] = (uint32_t)r->nfout;
      }
  }
  return true;
}

/* Fills the report from the trace and the replay's steps; false when out of host memory. */
/* The replay's block bytes of each alloc entry, from the replay allocator's events;
 * the blocks laid out in the pre segments (events before the first step, owner
 * unknown) matched by address with pre_ptrs (the replay's pointer of each pre
 * allocation once they are in; NULL: none). */
static bool replay_blocks(report_t *r, void *const *pre_ptrs) {
  r->rblk = mn__calloc(r->n ? r->n : 1, sizeof *r->rblk);
  if (!r->rblk) return false;
  evlog_t *ev = (evlog_t *)r->ev;
  if (!ev) return true;
  if (pre_ptrs) {
    size_t npre = 0;
    for (size_t i = 0; i < r->n && r->t->entries[i].pre; i++)
      if (pre_ptrs[i]) npre++;
    ref_t *by = mn__malloc((npre ? npre : 1) * sizeof *by);
    if (!by) return false;
    npre = 0;
    for (size_t i = 0; i < r->n && r->t->entries[i].pre; i++)
      if (pre_ptrs[i]) by[npre++] = (ref_t){(uint64_t)(uintptr_t)pre_ptrs[i], i};
    qsort(by, npre, sizeof *by, cmp_ref);
    /* the last alloc event of an address among those of the pre allocations owns it
     * (a gap block of the layout, freed, may have had the same address before) */
    for (size_t k = ev->n; k-- > 0;) {
      if (ev->kind[k] != EV_ALLOC || ev->own[k] != UINT32_MAX || ev->entry[k] >= r->n ||
          !r->t->entries[ev->entry[k]].pre)
        continue;
      ref_t key = {(uint64_t)ev->addr[k], 0};
      size_t lo = 0, hi = npre;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (by[mid].address < key.address) lo = mid + 1;
        else hi = mid;
      }
      if (lo < npre && by[lo].address == key.address && by[lo].index != SIZE_MAX) {
        ev->own[k] = (uint32_t)by[lo].index;
        by[lo].index = SIZE_MAX; /* taken */
      }
    }
    free(by);
  }
  for (size_t k = 0; k < ev->n; k++)
    if (ev->kind[k] == EV_ALLOC && ev->own[k] < r->n) r->rblk[ev->own[k]] = ev->size[k];
  return true;
}

/* Pinned host memory, as recorded (never replayed: PyTorch's CachingHostAllocator
 * is not mnemo's device allocator): the page's state events are the trace's own
 * lines of the device, in the replay sink's form (write_events) -- pre and
 * segment_alloc / segment_free / segment_map / segment_unmap as segments; pre and
 * alloc as blocks at their recorded addresses, each its recorded block size
 * (mn__trace_recorded_block) and its own entry; a block leaves at its
 * free_requested (as PyTorch's allocated bytes and "who holds the peak" count it).
 * The replay block bytes (rblk) stay 0. */
static bool recorded_events(report_t *r) {
  r->rblk = mn__calloc(r->n ? r->n : 1, sizeof *r->rblk);
  evlog_t *ev = (evlog_t *)r->ev;
  if (!r->rblk || !ev) return r->rblk != NULL;
  r->has_recorded = true; /* the recorded curves are what the page draws */
  size_t m = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (!(r->flag[i] & F_DEV)) continue;
    mn_trace_action a = r->t->entries[i].action;
    m += a == MN_TRACE_ALLOC || is_segment_action(a) || (a == MN_TRACE_FREE_REQUESTED && r->pair[i] != SIZE_MAX);
  }
  size_t cap = m ? m : 1;
  ev->entry = mn__malloc(cap * sizeof *ev->entry);
  ev->own = mn__malloc(cap * sizeof *ev->own);
  ev->kind = mn__malloc(cap * sizeof *ev->kind);
  ev->addr = mn__malloc(cap * sizeof *ev->addr);
  ev->size = mn__malloc(cap * sizeof *ev->size);
  if (!ev->entry || !ev->own || !ev->kind || !ev->addr || !ev->size) return false;
  ev->cap = cap;
  for (size_t i = 0; i < r->n; i++) {
    if (!(r->flag[i] & F_DEV)) continue;
    const mn_trace_entry_t *e = &r->t->entries[i];
    int kind;
    uint64_t size = e->size;
    switch (e->action) {
      case MN_TRACE_ALLOC: kind = EV_ALLOC; size = mn__trace_recorded_block(e); break;
      case MN_TRACE_FREE_REQUESTED:
        if (r->pair[i] == SIZE_MAX) continue;
        kind = EV_FREE;
        break;
      case MN_TRACE_SEGMENT_ALLOC: kind = EV_SEG_ALLOC; break;
      case MN_TRACE_SEGMENT_FREE: kind = EV_SEG_FREE; break;
      case MN_TRACE_SEGMENT_MAP: kind = EV_MAP; break;
      case MN_TRACE_SEGMENT_UNMAP: kind = EV_UNMAP; break;
      default: continue;
    }
    uint32_t at = i > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)i;
    ev->entry[ev->n] = at;
    ev->own[ev->n] = kind == EV_ALLOC ? at : UINT32_MAX;
    ev->kind[ev->n] = (uint8_t)kind;
    ev->addr[ev->n] = (double)e->address;
    ev->size[ev->n] = (double)size;
    ev->n++;
  }
  ev->tagged = ev->n;
  return true;
}

/* The recorded peaks (pinned host memory): the first entry of the device at the
 * most recorded reserved bytes, and at the most recorded allocated bytes; a state
 * dump: its last entry. */
static void recorded_peaks(report_t *r) {
  size_t pr = SIZE_MAX, pa = SIZE_MAX, last = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (!(r->flag[i] & F_DEV)) continue;
    last = i;
    if (pr == SIZE_MAX || r->rec_r[i] > r->rec_r[pr]) pr = i;
    if (pa == SIZE_MAX || r->rec_a[i] > r->rec_a[pa]) pa = i;
  }
  if (r->state_only) pr = pa = last;
  r->peak_res = pr == SIZE_MAX ? 0 : pr;
  r->peak_alloc = pa == SIZE_MAX ? 0 : pa;
}

/* Fills the report from the trace and the replay's steps; false when out of host memory. */
static bool analyze(report_t *r, const timeline_t *tl, void *const *pre_ptrs) {
  size_t m = r->n ? r->n : 1;
  r->flag = mn__calloc(m, sizeof *r->flag);
  r->pair = mn__malloc(m * sizeof *r->pair);
  r->rep_a = mn__malloc(m * sizeof *r->rep_a);
  r->rep_r = mn__malloc(m * sizeof *r->rep_r);
  r->rep_q = mn__malloc(m * sizeof *r->rep_q);
  r->rec_a = mn__malloc(m * sizeof *r->rec_a);
  r->rec_r = mn__malloc(m * sizeof *r->rec_r);
  r->live = mn__malloc(m * sizeof *r->live);
  r->agg = mn__malloc(m * sizeof *r->agg);
  r->tmono = mn__malloc(m * sizeof *r->tmono);
  r->streams = mn__malloc(m * sizeof *r->streams);
  r->ooms = mn__malloc(m * sizeof *r->ooms);
  size_t *idx = mn__malloc(m * sizeof *idx);
  bool ok = r->flag && r->pair && r->rep_a && r->rep_r && r->rep_q && r->rec_a && r->rec_r && r->live && r->agg &&
            r->tmono && r->streams && r->ooms && idx && scan_device(r, idx) &&
            (r->recorded ? recorded_events(r) : replay_blocks(r, pre_ptrs));
  if (ok) {
    for (size_t i = 0; i < r->n; i++)
      if ((r->flag[i] & F_DEV) && r->t->entries[i].action == MN_TRACE_OOM) r->ooms[r->nooms++] = i;
    compute_curves(r, tl);
    if (r->recorded) recorded_peaks(r);
    ok = choose_points(r, idx) &&
         find_holders(r, r->peak_alloc, &r->held, &r->nheld, &r->holders, &r->nholders, &r->grb) &&
         find_holders(r, r->peak_res, &r->held_res, &r->nheld_res, &r->holders_res, &r->nholders_res, &r->grb_res) &&
         collect_stacks(r);
  }
  free(idx);
  return ok;
}

static mn_status make_allocator(const char *config, mn_allocator_t **out) {
  mn_caching_config_t cfg = mn_caching_config_default();
  mn_status st = mn_caching_config_parse(config, &cfg);
  if (st != MN_OK) return st;
  return mn_caching_allocator_create(mn_device_sim(0), &cfg, out);
}

static void write_result(mn__sbuf_t *f, const char *config, const mn_replay_result_t *r) {
  mn__sbuf_printf(f, "{\"config\": ");
  mn__sbuf_json_str(f, config);
  mn__sbuf_printf(f,
          ", \"peak_allocated\": %" PRId64 ", \"peak_reserved\": %" PRId64 ", \"peak_requested\": %" PRId64
          ", \"ratio\": %.4f, \"device_allocs\": %" PRId64 ", \"ooms\": %" PRIu64 ", \"retries\": %" PRIu64
          ", \"ns_per_op\": %.1f}",
          r->peak_allocated, r->peak_reserved, r->peak_requested, r->ratio, r->device_allocs, r->ooms, r->retries,
          r->ns_per_op);
}

/* One column of the timeline: `expr` of entry i for every kept point. */
#define POINT_COLUMN(name, fmt, expr)                          \
  do {                                                         \
    mn__sbuf_printf(f, ",\n \"" name "\": [");                         \
    for (size_t k_ = 0; k_ < r->nkeep; k_++) {                 \
      size_t i = r->keep[k_];                                  \
      mn__sbuf_printf(f, "%s" fmt, k_ ? "," : "", expr);               \
    }                                                          \
    mn__sbuf_putc(f, ']');                                             \
  } while (0)

static void write_points(mn__sbuf_t *f, const report_t *r) {
  const mn_trace_t *t = r->t;
  mn__sbuf_printf(f, "{\"n\": %zu, \"dec\": %s", r->nkeep, r->decimated ? "true" : "false");
  POINT_COLUMN("e", "%zu", i);
  POINT_COLUMN("t", "%" PRId64, t->entries[i].pre ? (int64_t)-1 : (int64_t)r->tmono[i]);
  POINT_COLUMN("act", "%d", (int)t->entries[i].action);
  POINT_COLUMN("sz", "%" PRIu64, t->entries[i].size);
  POINT_COLUMN("s", "%zu", stream_index(r, t->entries[i].stream));
  POINT_COLUMN("k", "%" PRIu32, stack_out(r, t->entries[i].stack));
  POINT_COLUMN("m", "%" PRId64, r->pair[i] == SIZE_MAX ? (int64_t)-1 : (int64_t)r->pair[i]);
  POINT_COLUMN("mk", "%" PRIu32,
               t->entries[i].action == MN_TRACE_FREE_REQUESTED && r->pair[i] != SIZE_MAX
                   ? stack_out(r, t->entries[r->pair[i]].stack)
                   : 0u);
  POINT_COLUMN("ln", "%" PRIu32, t->entries[i].line);
  if (!r->recorded) { /* pinned host memory: no replay */
    POINT_COLUMN("a", "%" PRId64, r->rep_a[i]);
    POINT_COLUMN("r", "%" PRId64, r->rep_r[i]);
    POINT_COLUMN("q", "%" PRId64, r->rep_q[i]);
  }
  POINT_COLUMN("lv", "%" PRId64, r->live[i]);
  POINT_COLUMN("g", "%" PRId64, r->agg[i]);
  if (r->has_recorded) {
    POINT_COLUMN("ra", "%" PRId64, r->rec_a[i]);
    POINT_COLUMN("rr", "%" PRId64, r->rec_r[i]);
  }
  mn__sbuf_putc(f, '}');
}

static void write_stacks(mn__sbuf_t *f, const report_t *r) {
  const mn_trace_t *t = r->t;
  mn__sbuf_printf(f, ",\n\"stacks\": [");
  for (size_t k = 0; k < r->nsout; k++) {
    const uint32_t *fr = NULL;
    uint32_t buf[STACK_HOVER_MAX];
    size_t full = mn_trace_stack_get(t, r->sout[k], &fr), d = page_frames(r, r->sout[k], buf, &fr);
    /* [frames kept (page frame indices), frames in the whole stack] */
    mn__sbuf_printf(f, "%s[[", k ? "," : "");
    const char *sep = "";
    for (size_t j = 0; j < d; j++)
      if (fr[j] && fr[j] <= t->nframes && r->fmap[fr[j]]) { /* always, for a trace the reader accepted */
        mn__sbuf_printf(f, "%s%" PRIu32, sep, r->fmap[fr[j]] - 1);
        sep = ",";
      }
    mn__sbuf_printf(f, "],%zu]", full);
  }
  mn__sbuf_printf(f, "],\n\"frames\": [");
  for (size_t k = 0; k < r->nfout; k++) {
    const mn_trace_frame_t *fm = mn_trace_frame_get(t, r->fout[k]);
    mn__sbuf_printf(f, "%s\n [", k ? "," : "");
    mn__sbuf_json_str(f, fm && fm->file ? fm->file : "");
    mn__sbuf_printf(f, ",%" PRIu32 ",", fm ? fm->line : 0);
    mn__sbuf_json_str(f, fm && fm->name ? fm->name : "");
    mn__sbuf_putc(f, ']');
  }
  mn__sbuf_putc(f, ']');
}

/* The trace's (recorded) stream id of a stream of the replay that took the
 * snapshot at the peak (each replay creates its own streams): the stream of the
 * trace entry whose allocation first used it; the replay's own id when none did. */
static uint64_t recorded_stream(const report_t *r, uint64_t sim) {
  const evlog_t *ev = r->stop_streams;
  for (size_t k = 0; ev && k < ev->nsim; k++)
    if (ev->sim_stream[k] == sim) return ev->rec_stream[k];
  return sim;
}


/* The fully free segments, folded into one [size, count] row per size (largest
 * first): "free_segments": [...]; frees fsz. */
static void write_free_segments(mn__sbuf_t *f, uint64_t *fsz, size_t nfree) {
  qsort(fsz, nfree, sizeof *fsz, cmp_u64_desc);
  mn__sbuf_printf(f, "\"free_segments\": [");
  for (size_t i = 0, k = 0; i < nfree; i = k) {
    while (k < nfree && fsz[k] == fsz[i]) k++;
    mn__sbuf_printf(f, "%s[%" PRIu64 ",%zu]", i ? "," : "", fsz[i], k - i);
  }
  mn__sbuf_putc(f, ']');
  free(fsz);
}
/* The allocator's segments at the peak: fully free ones folded by size. */
static bool write_segments(mn__sbuf_t *f, const report_t *r, const mn_snapshot_t *snap) {
  uint64_t *fsz = mn__malloc((snap->nsegments ? snap->nsegments : 1) * sizeof *fsz);
  if (!fsz) return false;
  size_t nfree = 0;
  mn__sbuf_printf(f, ",\n\"nsegments\": %zu, \"segments\": [", snap->nsegments);
  const char *sep = "";
  for (size_t i = 0; i < snap->nsegments; i++) {
    const mn_snapshot_segment_t *s = &snap->segments[i];
    bool all_free = true;
    for (size_t b = 0; b < s->nblocks; b++) all_free &= s->blocks[b].state == MN_BLOCK_INACTIVE;
    if (all_free) {
      fsz[nfree++] = s->total_size;
      continue;
    }
    mn__sbuf_printf(f, "%s\n  {\"address\": \"0x%" PRIxPTR "\", \"size\": %zu, \"allocated\": %zu, \"stream\": %" PRIu64
            ", \"large\": %s, \"expandable\": %s, \"blocks\": [",
            sep, s->address, s->total_size, s->allocated_size, recorded_stream(r, s->stream_id), s->is_large ? "true" : "false",
            s->is_expandable ? "true" : "false");
    sep = ",";
    for (size_t b = 0; b < s->nblocks; b++)
      mn__sbuf_printf(f, "%s[%zu,%zu,%d]", b ? "," : "", s->blocks[b].size, s->blocks[b].requested_size,
              (int)s->blocks[b].state);
    mn__sbuf_printf(f, "]}");
  }
  mn__sbuf_printf(f, "],\n");
  write_free_segments(f, fsz, nfree);
  return true;
}

/* Pinned host memory's segments after entry `at`, as recorded: its segment_alloc
 * lines not yet freed (by address, as the page's state rebuild does), its mapped
 * ranges (adjacent ones merged, as an expandable segment's), and in them its live
 * allocations (alloc not yet free_requested) at their recorded addresses, each its
 * recorded block size; the rest of a segment is free. */
typedef struct rrow_s {
  uint64_t addr, size, stream, allocated;
  bool exp;
  size_t b0, nb; /* its blocks: recseg_t.blk[b0, b0 + nb) */
} rrow_t;

typedef struct recseg_s {
  rrow_t *rows;
  size_t nrows;
  ref_t *blk; /* live allocations (address, entry), by address */
  size_t nblk;
} recseg_t;

static void recseg_free(recseg_t *s) {
  free(s->rows);
  free(s->blk);
  memset(s, 0, sizeof *s); /* freed again by its caller after a failure */
}

static int cmp_rrow(const void *a, const void *b) {
  const rrow_t *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static bool recorded_segments(const report_t *r, size_t at, recseg_t *out) {
  const mn_trace_t *t = r->t;
  size_t lim = at < r->n ? at + 1 : r->n, nseg = 0, nmap = 0, nlive = 0;
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < lim; i++) {
    if (!(r->flag[i] & F_DEV)) continue;
    mn_trace_action a = t->entries[i].action;
    nseg += a == MN_TRACE_SEGMENT_ALLOC || a == MN_TRACE_SEGMENT_FREE;
    nmap += a == MN_TRACE_SEGMENT_MAP;
    nlive += a == MN_TRACE_ALLOC && (r->pair[i] == SIZE_MAX || r->pair[i] > at);
  }
  ref_t *sr = mn__malloc((nseg ? nseg : 1) * sizeof *sr);
  rrow_t *maps = mn__malloc((2 * nmap + 1) * sizeof *maps);
  out->rows = mn__malloc((nseg + 2 * nmap + 1) * sizeof *out->rows);
  out->blk = mn__malloc((nlive ? nlive : 1) * sizeof *out->blk);
  bool ok = sr && maps && out->rows && out->blk;
  size_t ns = 0, nm = 0;
  for (size_t i = 0; ok && i < lim; i++) {
    if (!(r->flag[i] & F_DEV)) continue;
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->action == MN_TRACE_SEGMENT_ALLOC || e->action == MN_TRACE_SEGMENT_FREE) {
      sr[ns++] = (ref_t){e->address, i};
    } else if (e->action == MN_TRACE_ALLOC && (r->pair[i] == SIZE_MAX || r->pair[i] > at)) {
      out->blk[out->nblk++] = (ref_t){e->address, i};
    } else if (e->action == MN_TRACE_SEGMENT_MAP) { /* a range at that address replaced */
      size_t k = 0;
      while (k < nm && maps[k].addr != e->address) k++;
      if (k == nm) nm++;
      maps[k] = (rrow_t){e->address, e->size, e->stream, 0, true, 0, 0};
    } else if (e->action == MN_TRACE_SEGMENT_UNMAP) { /* every range it overlaps cut */
      uint64_t u = e->address, ue = e->address + e->size;
      for (size_t k = 0; k < nm;) {
        rrow_t m = maps[k];
        uint64_t me = m.addr + m.size;
        if (m.addr >= ue || me <= u) {
          k++;
          continue;
        }
        maps[k] = maps[--nm];
        if (m.addr < u) maps[nm++] = (rrow_t){m.addr, u - m.addr, m.stream, 0, true, 0, 0};
        if (me > ue) maps[nm++] = (rrow_t){ue, me - ue, m.stream, 0, true, 0, 0};
        if (m.addr < u || me > ue) k = 0; /* the pieces are rescanned: they no longer overlap */
      }
    }
  }
  if (ok) {
    qsort(sr, ns, sizeof *sr, cmp_ref); /* by address, then entry: the last segment_alloc not freed */
    for (size_t k = 0; k < ns;) {
      size_t open = SIZE_MAX, j = k;
      for (; j < ns && sr[j].address == sr[k].address; j++)
        open = t->entries[sr[j].index].action == MN_TRACE_SEGMENT_ALLOC ? sr[j].index : SIZE_MAX;
      if (open != SIZE_MAX) {
        const mn_trace_entry_t *e = &t->entries[open];
        out->rows[out->nrows++] = (rrow_t){e->address, e->size, e->stream, 0, false, 0, 0};
      }
      k = j;
    }
    qsort(maps, nm, sizeof *maps, cmp_rrow);
    for (size_t k = 0; k < nm; k++) {
      rrow_t *last = out->nrows && out->rows[out->nrows - 1].exp ? &out->rows[out->nrows - 1] : NULL;
      if (last && last->addr + last->size == maps[k].addr) last->size += maps[k].size;
      else out->rows[out->nrows++] = maps[k];
    }
    qsort(out->rows, out->nrows, sizeof *out->rows, cmp_rrow);
    qsort(out->blk, out->nblk, sizeof *out->blk, cmp_ref);
    size_t b = 0;
    for (size_t k = 0; k < out->nrows; k++) { /* the blocks inside each row (others: outside any segment) */
      rrow_t *row = &out->rows[k];
      while (b < out->nblk && out->blk[b].address < row->addr) b++;
      row->b0 = b;
      while (b < out->nblk && out->blk[b].address - row->addr < row->size) {
        row->allocated = mn__sat_add_u64(row->allocated, mn__trace_recorded_block(&t->entries[out->blk[b].index]));
        b++;
      }
      row->nb = b - row->b0;
    }
  }
  free(sr);
  free(maps);
  if (!ok) recseg_free(out);
  return ok;
}

/* Calls fn for each block of recorded row `row`, free gaps included: (size, asked, state). */
#define RECSEG_BLOCKS(t, s, row, BODY)                                                              \
  do {                                                                                              \
    uint64_t cur_ = (row)->addr, end_ = (row)->addr + (row)->size;                                  \
    for (size_t q_ = 0; q_ <= (row)->nb; q_++) {                                                    \
      const mn_trace_entry_t *e_ = q_ < (row)->nb ? &(t)->entries[(s)->blk[(row)->b0 + q_].index] : NULL; \
      uint64_t at_ = e_ ? e_->address : end_;                                                       \
      if (at_ > cur_) {                                                                             \
        uint64_t bsize = at_ - cur_, basked = 0;                                                    \
        int bstate = MN_BLOCK_INACTIVE;                                                             \
        BODY;                                                                                       \
      }                                                                                             \
      if (!e_) break;                                                                               \
      {                                                                                             \
        uint64_t bsize = mn__trace_recorded_block(e_), basked = e_->size;                           \
        int bstate = MN_BLOCK_ACTIVE;                                                               \
        BODY;                                                                                       \
        if (at_ + bsize > cur_) cur_ = at_ + bsize;                                                 \
      }                                                                                             \
    }                                                                                               \
  } while (0)

/* The recorded segments in the page's "segments" form (write_segments). */
static bool write_recorded_segments(mn__sbuf_t *f, const report_t *r, const recseg_t *s) {
  uint64_t *fsz = mn__malloc((s->nrows ? s->nrows : 1) * sizeof *fsz);
  if (!fsz) return false;
  size_t nfree = 0;
  mn__sbuf_printf(f, ",\n\"nsegments\": %zu, \"segments\": [", s->nrows);
  const char *sep = "";
  for (size_t i = 0; i < s->nrows; i++) {
    const rrow_t *row = &s->rows[i];
    if (!row->nb) {
      fsz[nfree++] = row->size;
      continue;
    }
    mn__sbuf_printf(f, "%s\n  {\"address\": \"0x%" PRIx64 "\", \"size\": %" PRIu64 ", \"allocated\": %" PRIu64
            ", \"stream\": %" PRIu64 ", \"large\": false, \"expandable\": %s, \"blocks\": [",
            sep, row->addr, row->size, row->allocated, row->stream, row->exp ? "true" : "false");
    sep = ",";
    const char *bsep = "";
    RECSEG_BLOCKS(r->t, s, row, {
      mn__sbuf_printf(f, "%s[%" PRIu64 ",%" PRIu64 ",%d]", bsep, bsize, basked, bstate);
      bsep = ",";
    });
    mn__sbuf_printf(f, "]}");
  }
  mn__sbuf_printf(f, "],\n");
  write_free_segments(f, fsz, nfree);
  return true;
}

typedef struct page_args_s {
  const char *path, *title;
  const char *const *configs;
  size_t nconfigs;
  bool as_recorded;
  const mn_replay_result_t *res;
  size_t peak_entry;
  const mn_snapshot_t *snap;
  const char *label;  /* the device's name in the selector */
  bool host;          /* pinned host memory (`meta host_device`) */
  bool single_device; /* the trace's only device: the trace-wide torch_* figures are its own */
  const recseg_t *recseg; /* pinned host memory: its recorded segments at the peak (snap: NULL) */
} page_args_t;

/* Base64 of n bytes (the page decodes it into a typed array, little-endian). */
static void write_b64(mn__sbuf_t *f, const void *data, size_t n) {
  static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = data;
  mn__sbuf_putc(f, '"');
  size_t k = 0;
  for (; k + 3 <= n; k += 3) {
    uint32_t v = (uint32_t)p[k] << 16 | (uint32_t)p[k + 1] << 8 | p[k + 2];
    char q[4] = {A[v >> 18], A[(v >> 12) & 63], A[(v >> 6) & 63], A[v & 63]};
    mn__sbuf_write(f, q, 4);
  }
  if (n - k == 1) {
    uint32_t v = (uint32_t)p[k] << 16;
    mn__sbuf_printf(f, "%c%c==", A[v >> 18], A[(v >> 12) & 63]);
  } else if (n - k == 2) {
    uint32_t v = (uint32_t)p[k] << 16 | (uint32_t)p[k + 1] << 8;
    mn__sbuf_printf(f, "%c%c%c=", A[v >> 18], A[(v >> 12) & 63], A[(v >> 6) & 63]);
  }
  mn__sbuf_putc(f, '"');
}

/* The replay allocator's events (the allocator state at any entry, rebuilt by the
 * page): columns of typed arrays in base64. Per event: entry (u32), kind (u8),
 * address (f64); per event other than a free: size (f64); per alloc event: the alloc
 * entry it serves (u32, 2^32 - 1: unknown), its stack (page index + 1, u32), stream
 * (index in "streams", u16) and bytes asked for (f64). */
static bool write_events(mn__sbuf_t *f, const report_t *r) {
  const evlog_t *ev = r->ev;
  size_t n = ev ? ev->tagged : 0, nsized = 0, nalloc = 0;
  for (size_t k = 0; k < n; k++) {
    nsized += ev->kind[k] != EV_FREE;
    nalloc += ev->kind[k] == EV_ALLOC;
  }
  double *sz = mn__malloc((nsized ? nsized : 1) * sizeof *sz);
  double *req = mn__malloc((nalloc ? nalloc : 1) * sizeof *req);
  uint32_t *own = mn__malloc((nalloc ? nalloc : 1) * sizeof *own);
  uint32_t *stk = mn__malloc((nalloc ? nalloc : 1) * sizeof *stk);
  uint16_t *str = mn__malloc((nalloc ? nalloc : 1) * sizeof *str);
  bool ok = sz && req && own && stk && str;
  if (ok) {
    size_t a = 0, z = 0;
    for (size_t k = 0; k < n; k++) {
      if (ev->kind[k] != EV_FREE) sz[z++] = ev->size[k];
      if (ev->kind[k] != EV_ALLOC) continue;
      uint32_t o = ev->own[k];
      const mn_trace_entry_t *e = o < r->n ? &r->t->entries[o] : NULL;
      own[a] = o;
      stk[a] = e ? stack_out(r, e->stack) : 0;
      size_t si = e ? stream_index(r, e->stream) : 0;
      str[a] = (uint16_t)(si > UINT16_MAX ? UINT16_MAX : si);
      req[a] = e ? (double)e->size : ev->size[k];
      a++;
    }
    mn__sbuf_printf(f, ",\n\"events\": {\"n\": %zu, \"nalloc\": %zu, \"entry\": ", n, nalloc);
    write_b64(f, ev ? ev->entry : NULL, n * sizeof(uint32_t));
    mn__sbuf_printf(f, ",\n \"kind\": ");
    write_b64(f, ev ? ev->kind : NULL, n);
    mn__sbuf_printf(f, ",\n \"addr\": ");
    write_b64(f, ev ? ev->addr : NULL, n * sizeof(double));
    mn__sbuf_printf(f, ",\n \"size\": ");
    write_b64(f, sz, nsized * sizeof *sz);
    mn__sbuf_printf(f, ",\n \"own\": ");
    write_b64(f, own, nalloc * sizeof *own);
    mn__sbuf_printf(f, ",\n \"stack\": ");
    write_b64(f, stk, nalloc * sizeof *stk);
    mn__sbuf_printf(f, ",\n \"stream\": ");
    write_b64(f, str, nalloc * sizeof *str);
    mn__sbuf_printf(f, ",\n \"req\": ");
    write_b64(f, req, nalloc * sizeof *req);
    mn__sbuf_putc(f, '}');
  }
  free(sz);
  free(req);
  free(own);
  free(stk);
  free(str);
  return ok;
}

/* holders: [stack (page index + 1, 0: none), kind, count, bytes asked, recorded block bytes, replay block bytes] */
static void write_holders(mn__sbuf_t *f, const report_t *r, const char *name, const mn__holder_t *hs, size_t nh,
                          const uint64_t *grb) {
  mn__sbuf_printf(f, ",\n\"%s\": [", name);
  for (size_t k = 0; k < nh; k++) {
    const mn__holder_t *h = &hs[k];
    mn__sbuf_printf(f, "%s[%" PRIu32 ",%d,%zu,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", k ? "," : "", stack_out(r, h->stack),
            h->kind, h->count, h->bytes, h->block_bytes, grb[k]);
  }
  mn__sbuf_putc(f, ']');
}

/* One device's data: a JSON object in a script element (id "mn-data" for the first
 * device, "mn-data-dev<N>" for the others). false when out of host memory. */
static bool write_device_data(mn__sbuf_t *f, const report_t *r, const page_args_t *p, bool first) {
  const mn_trace_t *t = r->t;
  if (first) mn__sbuf_printf(f, "<script id=\"mn-data\" type=\"application/json\">\n{\"trace\": ");
  else mn__sbuf_printf(f, "<script id=\"mn-data-dev%" PRIu32 "\" type=\"application/json\">\n{\"trace\": ", r->dev);
  mn__sbuf_json_str(f, p->path);
  mn__sbuf_printf(f, ", \"title\": ");
  mn__sbuf_json_str(f, p->title ? p->title : p->path);
  const char *src = mn_trace_meta_get(t, "source");
  mn__sbuf_printf(f, ", \"source\": ");
  mn__sbuf_json_str(f, src ? src : "");
  const char *by = mn_trace_meta_get(t, "recorded_by");
  mn__sbuf_printf(f, ", \"recorded_by\": ");
  mn__sbuf_json_str(f, by ? by : "");
  mn__sbuf_printf(f, ",\n\"entries\": %zu, \"device\": %" PRIu32 ", \"peak_entry\": %zu, \"peak_line\": %" PRIu32
          ", \"live_at_peak\": %zu, \"first_event\": %" PRId64 ", \"t_first\": %" PRIu64 ", \"t_last\": %" PRIu64
          ", \"has_stacks\": %s, \"has_recorded\": %s, \"as_recorded\": %s",
          t->nentries, r->dev, p->peak_entry, p->peak_entry < t->nentries ? t->entries[p->peak_entry].line : 0,
          r->nheld_res, r->first_event == SIZE_MAX ? (int64_t)-1 : (int64_t)r->first_event, r->t_first, r->t_last,
          t->nstacks ? "true" : "false", r->has_recorded ? "true" : "false", p->as_recorded ? "true" : "false");
  mn__sbuf_printf(f, ",\n\"peak_alloc_entry\": %zu, \"peak_alloc_line\": %" PRIu32 ", \"live_at_alloc_peak\": %zu, "
          "\"state_only\": %s, \"host\": %s, \"label\": ",
          r->peak_alloc, r->peak_alloc < t->nentries ? t->entries[r->peak_alloc].line : 0, r->nheld,
          r->state_only ? "true" : "false", p->host ? "true" : "false");
  mn__sbuf_json_str(f, p->label);
  if (r->recorded) mn__sbuf_printf(f, ", \"replayed\": false");
  mn__sbuf_printf(f, ",\n\"limits\": {\"full_points\": %d, \"buckets\": %d, \"peak_window\": %d, \"bands\": %d, "
          "\"stack_hover\": %d}", FULL_POINTS, BUCKETS, PEAK_WINDOW, BANDS_MAX, STACK_HOVER_MAX);
  mn__sbuf_printf(f, ",\n\"actions\": [");
  for (int a = 0; a < MN_TRACE_ACTION_COUNT; a++) {
    mn__sbuf_puts(f, a ? "," : "");
    mn__sbuf_json_str(f, mn_trace_action_name((mn_trace_action)a));
  }
  mn__sbuf_printf(f, "], \"streams\": [");
  for (size_t k = 0; k < r->nstreams; k++) mn__sbuf_printf(f, "%s\"%" PRIu64 "\"", k ? "," : "", r->streams[k]);
  uint64_t v;
  mn__sbuf_printf(f, "],\n\"torch\": {");
  const char *sep = "";
  static const char *const tkeys[] = {"torch_peak_allocated", "torch_peak_reserved", "torch_peak_requested"};
  for (size_t k = 0; k < 3; k++) {
    char key[96];
    snprintf(key, sizeof key, "dev%" PRIu32 ".%s", r->dev, tkeys[k]); /* the device's own figures */
    bool own = mn_trace_meta_get_u64(t, key, &v) == MN_OK;
    if (own || (p->single_device && mn_trace_meta_get_u64(t, tkeys[k], &v) == MN_OK)) {
      mn__sbuf_printf(f, "%s\"%s\": %" PRIu64, sep, tkeys[k] + 6, v);
      sep = ", ";
    }
  }
  mn_clear_error();
  mn__sbuf_printf(f, "}, \"results\": [");
  for (size_t k = 0; k < p->nconfigs; k++) {
    mn__sbuf_printf(f, "%s\n  ", k ? "," : "");
    write_result(f, p->configs[k], &p->res[k]);
  }
  mn__sbuf_printf(f, "],\n\"points\": ");
  write_points(f, r);
  /* bands: [alloc entry, its time (-1: pre), free entry (-1: never), its time, bytes, stream, stack] */
  mn__sbuf_printf(f, ",\n\"bands\": [");
  for (size_t k = 0; k < r->nbands; k++) {
    size_t i = r->bands[k], j = r->pair[i];
    const mn_trace_entry_t *e = &t->entries[i];
    mn__sbuf_printf(f, "%s[%zu,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRIu64 ",%zu,%" PRIu32 "]", k ? "," : "", i,
            e->pre ? (int64_t)-1 : (int64_t)r->tmono[i], j == SIZE_MAX ? (int64_t)-1 : (int64_t)j,
            j == SIZE_MAX ? (int64_t)-1 : (int64_t)r->tmono[j], e->size, stream_index(r, e->stream),
            stack_out(r, e->stack));
  }
  mn__sbuf_putc(f, ']'); /* bands */
  write_holders(f, r, "holders", r->holders, r->nholders, r->grb);
  write_holders(f, r, "holders_res", r->holders_res, r->nholders_res, r->grb_res);
  /* ooms: [entry, time (-1: pre), bytes asked, device_free, trace line] */
  mn__sbuf_printf(f, ",\n\"ooms\": [");
  for (size_t k = 0; k < r->nooms; k++) {
    const mn_trace_entry_t *e = &t->entries[r->ooms[k]];
    mn__sbuf_printf(f, "%s[%zu,%" PRId64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu32 "]", k ? "," : "", r->ooms[k],
            e->pre ? (int64_t)-1 : (int64_t)r->tmono[r->ooms[k]], e->size, e->address, e->line);
  }
  mn__sbuf_putc(f, ']');
  /* annotations (version 4): [entry after it, time, stage (0 mark, 1 start, 2 end), name, stack] */
  mn__sbuf_printf(f, ",\n\"annotations\": [");
  const char *asep = "";
  for (size_t k = 0; k < t->nannotations; k++) {
    const mn_trace_annotation_t *an = &t->annotations[k];
    if (an->device != r->dev) continue;
    mn__sbuf_printf(f, "%s[%zu,%" PRIu64 ",%d,", asep, an->entry, an->time_us, (int)an->stage);
    mn__sbuf_json_str(f, an->name ? an->name : "");
    mn__sbuf_printf(f, ",%" PRIu32 "]", stack_out(r, an->stack));
    asep = ",";
  }
  mn__sbuf_putc(f, ']');
  if (!write_events(f, r)) return false;
  write_stacks(f, r);
  if (!(p->recseg ? write_recorded_segments(f, r, p->recseg) : write_segments(f, r, p->snap))) return false;
  /* largest (at the peak of allocated bytes): [trace line, entry, stream id, asked, recorded block, time, pre,
   * stack, replay block] */
  mn__sbuf_printf(f, ",\n\"largest\": [");
  for (size_t k = 0; k < r->nheld && k < TOP_ALLOCS; k++) {
    const mn_trace_entry_t *e = &t->entries[r->held[k]];
    mn__sbuf_printf(f, "%s[%" PRIu32 ",%zu,\"%" PRIu64 "\",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d,%" PRIu32 ",%.0f]",
            k ? "," : "", e->line, r->held[k], e->stream, e->size, e->block_size, e->time_us, e->pre ? 1 : 0,
            stack_out(r, e->stack), r->rblk[r->held[k]]);
  }
  mn__sbuf_printf(f, "]}\n</script>\n");
  return true;
}

typedef struct device_args_s {
  const char *path, *title;
  const char *const *configs;
  size_t nconfigs;
  bool as_recorded;
  int dev;
  bool single, host;
  const char *label;
  bool first;        /* its data is the page's default ("mn-data") */
  mn__sbuf_t *sum;   /* the summary's lines */
  mn__sbuf_t *json;  /* the device's object of the JSON's "devices" list */
  const mn_sim_config_t *sim0; /* the SIM device (the capacity asked for, else as found) */
  bool capacity_given;         /* else each device sized as recorded, as `mnemo replay` does */
  mn_report_progress_fn on_progress;
  void *progress_user;
} device_args_t;

/* The JSON: a byte count of the summary, or null for a negative one (none). */
static void json_i64(mn__sbuf_t *f, const char *key, int64_t v) {
  if (v < 0) mn__sbuf_printf(f, ", \"%s\": null", key);
  else mn__sbuf_printf(f, ", \"%s\": %" PRId64, key, v);
}

/* The JSON: a ratio (JSON has no NaN or infinity: null). */
static void json_ratio(mn__sbuf_t *f, const char *key, double v) {
  if (isfinite(v)) mn__sbuf_printf(f, ", \"%s\": %.17g", key, v);
  else mn__sbuf_printf(f, ", \"%s\": null", key);
}

/* The JSON: the start of a device's object, the fields both kinds of device have. */
static void json_device_head(mn__sbuf_t *f, const device_args_t *da, uint32_t dev, bool replayed, bool state_only) {
  mn__sbuf_printf(f, "%s\n  {\"device\": %" PRIu32 ", \"label\": ", da->first ? "" : ",", dev);
  mn__sbuf_json_str(f, da->label);
  mn__sbuf_printf(f, ", \"replayed\": %s, \"state_only\": %s", replayed ? "true" : "false", state_only ? "true" : "false");
}

/* The JSON: the segment map the summary describes (at entry `entry`) and the
 * allocations alive at the peak allocated. */
static void json_device_state(mn__sbuf_t *f, const mn_trace_t *t, const report_t *rep, size_t entry, size_t nsegments,
                              size_t nblocks, uint64_t free_bytes, uint64_t largest_free) {
  mn__sbuf_printf(f, ",\n   \"segment_map\": {\"entry\": %zu, \"segments\": %zu, \"blocks\": %zu, \"free_bytes\": %" PRIu64
          ", \"largest_free_block\": %" PRIu64 "}", entry, nsegments, nblocks, free_bytes, largest_free);
  mn__sbuf_printf(f, ",\n   \"live_at_peak_allocated\": %zu, \"largest_live\": ", rep->nheld);
  if (rep->nheld)
    mn__sbuf_printf(f, "{\"size\": %" PRIu64 ", \"line\": %" PRIu32 "}", t->entries[rep->held[0]].size,
            t->entries[rep->held[0]].line);
  else
    mn__sbuf_puts(f, "null");
  mn__sbuf_printf(f, ", \"ooms_recorded\": %zu", rep->nooms);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The device of `meta host_device` (pinned host memory), as recorded: never
 * replayed (PyTorch's CachingHostAllocator is not mnemo's device allocator, as
 * `mnemo replay` says); its timeline is the recorded curves, its state at any entry
 * and its segment map at the recorded peak of allocated bytes (reserved bytes
 * often plateau from the first segment on, with nothing in it) the trace's own lines
 * (recorded_events, recorded_segments), who holds the peak at the recorded peak of
 * allocated bytes. MN_OK, or MN_ERR_OUT_OF_MEMORY. */
static mn_status report_host(mn__sbuf_t *f, const mn_trace_t *t, const device_args_t *da) {
  mn_status st = MN_ERR_OUT_OF_MEMORY;
  timeline_t tl = {0};
  evlog_t ev;
  memset(&ev, 0, sizeof ev);
  report_t rep;
  memset(&rep, 0, sizeof rep);
  recseg_t rs;
  memset(&rs, 0, sizeof rs);
  rep.t = t;
  rep.n = t->nentries;
  rep.dev = (uint32_t)da->dev;
  rep.ev = &ev;
  rep.recorded = true;
  size_t nev = 0;
  for (size_t i = 0; i < t->nentries; i++) nev += t->entries[i].device == rep.dev && !t->entries[i].pre;
  const char *so = mn_trace_meta_get(t, "state_only");
  rep.state_only = (so && !strcmp(so, "1")) || nev == 0;
  mn_clear_error();
  mn__report_progress(da->on_progress, da->progress_user, "%s: its %zu recorded entries (not replayed)...", da->label,
                      t->nentries);
  if (!analyze(&rep, &tl, NULL) || !recorded_segments(&rep, rep.peak_alloc, &rs)) {
    mn__error(st, FN, "out of host memory");
    goto done;
  }
  page_args_t pa = {da->path, da->title, da->configs, 0, da->as_recorded, NULL, rep.peak_res, NULL,
                    da->label, true, da->single, &rs};
  if (!write_device_data(f, &rep, &pa, da->first)) {
    mn__error(st, FN, "out of host memory building the page");
    goto done;
  }
  mn__sbuf_t *o2 = da->sum;
  mn__sbuf_printf(o2, "%s (trace device %" PRIu32 "): shown as recorded, not replayed (PyTorch's host allocator is not "
          "the device allocator)%s\n", da->label, rep.dev,
          rep.state_only ? "; a state dump, no history (the state as dumped)" : "");
  size_t pr = rep.peak_res < rep.n ? rep.peak_res : 0, pa_ = rep.peak_alloc < rep.n ? rep.peak_alloc : 0;
  int64_t rr = rep.n ? rep.rec_r[pr] : 0, ra = rep.n ? rep.rec_a[pa_] : 0;
  mn__sbuf_printf(o2, "  recorded peak reserved %" PRId64 " B (%.2f GiB) at entry %zu; recorded peak allocated %" PRId64
          " B (%.2f GiB) at entry %zu\n", rr, (double)rr / 1073741824.0, rep.peak_res, ra, (double)ra / 1073741824.0,
          rep.peak_alloc);
  size_t nblocks = 0;
  uint64_t fr = 0, largest_free = 0;
  for (size_t k = 0; k < rs.nrows; k++)
    RECSEG_BLOCKS(t, &rs, &rs.rows[k], {
      nblocks++;
      (void)basked;
      if (bstate == MN_BLOCK_INACTIVE) {
        fr += bsize;
        if (bsize > largest_free) largest_free = bsize;
      }
    });
  mn__sbuf_printf(o2, "  at the recorded peak allocated: %zu segments, %zu blocks, %.2f MiB free in segments (largest free "
          "block %.2f MiB)\n", rs.nrows, nblocks, (double)fr / 1048576.0, (double)largest_free / 1048576.0);
  if (rep.nheld)
    mn__sbuf_printf(o2, "  %zu allocations alive at the recorded peak allocated; the largest: %.2f MiB (trace line %" PRIu32 ")\n",
            rep.nheld, (double)t->entries[rep.held[0]].size / 1048576.0, t->entries[rep.held[0]].line);
  if (rep.nooms) mn__sbuf_printf(o2, "  %zu OOMs recorded\n", rep.nooms);
  {
    mn__sbuf_t *j = da->json;
    json_device_head(j, da, rep.dev, false, rep.state_only);
    mn__sbuf_puts(j, ", \"capacity\": null, \"capacity_from\": null");
    json_i64(j, "peak_reserved", rr);
    mn__sbuf_printf(j, ", \"peak_reserved_entry\": %zu", rep.peak_res);
    json_i64(j, "peak_allocated", ra);
    mn__sbuf_printf(j, ", \"peak_allocated_entry\": %zu", rep.peak_alloc);
    json_device_state(j, t, &rep, rep.peak_alloc, rs.nrows, nblocks, fr, largest_free);
    mn__sbuf_puts(j, ", \"ooms_reproduced\": null, \"results\": [], \"torch\": null}");
  }
  st = MN_OK;
done:
  report_free(&rep);
  recseg_free(&rs);
  evlog_free(&ev);
  return st;
}

/* One device of the trace: every config replayed (the first with the timeline and
 * the replay allocator's events), the allocator's state at the peak of reserved
 * bytes, the trace's own curves, and its data written to f; its summary to da->sum
 * and da->json. MN_OK, or the failure with its message (under mn_report_build). */
static mn_status report_device(mn__sbuf_t *f, const mn_trace_t *t, const device_args_t *da) {
  if (da->host) return report_host(f, t, da);
  mn_status st = MN_ERR_OUT_OF_MEMORY;
  timeline_t tl = {0};
  evlog_t ev, stop_ev;
  memset(&ev, 0, sizeof ev);
  memset(&stop_ev, 0, sizeof stop_ev);
  stop_ev.streams_only = true;
  report_t rep;
  memset(&rep, 0, sizeof rep);
  mn_snapshot_t *snap = NULL;
  mn_replay_result_t res[MN_REPORT_MAX_CONFIGS];
  mn_allocator_t *a = NULL;
  void **pre_ptrs = NULL;
  const char *const *configs = da->configs;
  size_t nconfigs = da->nconfigs;
  step_ctx_t cx = {t, &tl, &ev};
  /* 0: the SIM device sized as `mnemo replay` sizes it: the capacity asked for,
   * else as recorded (the device's first OOM, or its partial cache releases), else
   * as found. */
  mn_sim_config_t sc = *da->sim0;
  const char *cap_from = "option";
  if (!da->capacity_given) {
    st = mn__sim_as_recorded(t, (uint32_t)da->dev, &sc, &cap_from);
    if (st != MN_OK) return failed(st, "");
  }
  st = mn_sim_configure(&sc);
  if (st != MN_OK)
    return failed(bad_option(st),
                  !strcmp(cap_from, "oom") ? "the SIM device's capacity as recorded: " : "the SIM device's capacity: ");
  /* 1: every config, the first with the timeline and the allocator's events. */
  for (size_t k = 0; k < nconfigs; k++) {
    mn__report_progress(da->on_progress, da->progress_user, "%s: replaying %zu entries (config %zu of %zu)...",
                        da->label, t->nentries, k + 1, nconfigs);
    if ((st = make_allocator(configs[k], &a)) != MN_OK) goto fail;
    mn_replay_options_t o = mn_replay_options_default();
    o.trace_device = da->dev;
    o.replay_ooms = true; /* as `mnemo replay`: the recorded OOMs are tried again */
    if (k == 0) {
      o.on_step = on_step;
      o.on_step_user = &cx;
      if ((st = mn_caching_allocator_set_trace_sink(a, ev_sink, &ev)) != MN_OK) goto fail;
    }
    if ((st = mn_trace_replay(t, a, &o, &res[k])) != MN_OK) goto fail;
    mn_allocator_destroy(a);
    a = NULL;
  }
  st = MN_ERR_OUT_OF_MEMORY;
  if (tl.oom || ev.oom) {
    mn__error(st, FN, "out of host memory for the timeline");
    goto done;
  }
  /* 2: the peaks (the first step at the peak reserved, at the peak allocated), and
   * the allocator's state at the peak reserved. A dump without history (state only):
   * its state, after the last entry. */
  size_t peak_i = 0, peak_a = 0, last_pre = SIZE_MAX, nev = 0;
  for (size_t i = 0; i < tl.n; i++) {
    if (tl.s[i].reserved > tl.s[peak_i].reserved) peak_i = i;
    if (tl.s[i].allocated > tl.s[peak_a].allocated) peak_a = i;
  }
  for (size_t i = 0; i < t->nentries; i++)
    if (t->entries[i].device == (uint32_t)da->dev) {
      if (t->entries[i].pre) last_pre = i;
      else nev++;
    }
  const char *so = mn_trace_meta_get(t, "state_only");
  rep.state_only = (so && !strcmp(so, "1")) || nev == 0;
  if (rep.state_only && tl.n) peak_i = peak_a = tl.n - 1;
  size_t peak_entry = tl.n ? tl.s[peak_i].entry : 0;
  rep.peak_res = peak_entry;
  rep.peak_alloc = tl.n ? tl.s[peak_a].entry : 0;
  if ((st = make_allocator(configs[0], &a)) != MN_OK) goto fail;
  mn_replay_options_t o = mn_replay_options_default();
  o.trace_device = da->dev;
  o.replay_ooms = true;
  o.stop_after = peak_entry;
  o.at_stop = at_stop;
  o.at_stop_user = &snap;
  step_ctx_t scx = {t, NULL, &stop_ev};
  o.on_step = on_step;
  o.on_step_user = &scx;
  if ((st = mn_caching_allocator_set_trace_sink(a, ev_sink, &stop_ev)) != MN_OK) goto fail;
  mn_replay_result_t stop_res;
  if ((st = mn_trace_replay(t, a, &o, &stop_res)) != MN_OK) goto fail;
  mn_allocator_destroy(a);
  a = NULL;
  if (!snap) {
    st = mn_last_status() != MN_OK ? mn_last_status() : MN_ERR_OUT_OF_MEMORY;
    st = failed(st, "no snapshot at the peak: ");
    goto done;
  }
  /* the replay's pointers of the pre allocations (their blocks were laid out in the
   * pre segments before the first step: matched to their entries by address) */
  if (last_pre != SIZE_MAX) {
    pre_ptrs = mn__calloc(t->nentries ? t->nentries : 1, sizeof *pre_ptrs);
    if (!pre_ptrs) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, FN, "out of host memory");
      goto done;
    }
    if ((st = make_allocator(configs[0], &a)) != MN_OK) goto fail;
    mn_replay_options_t op = mn_replay_options_default();
    op.trace_device = da->dev;
    op.replay_ooms = true;
    op.stop_after = last_pre;
    op.live_ptrs = pre_ptrs;
    mn_replay_result_t pre_res;
    if ((st = mn_trace_replay(t, a, &op, &pre_res)) != MN_OK) goto fail;
    mn_allocator_destroy(a);
    a = NULL;
  }
  size_t nblocks = 0;
  for (size_t i = 0; i < snap->nsegments; i++) nblocks += snap->segments[i].nblocks;
  /* 3: what the trace itself says, for the replayed device. */
  rep.t = t;
  rep.n = t->nentries;
  rep.dev = res[0].trace_device;
  rep.ev = &ev;
  rep.stop_streams = &stop_ev;
  st = MN_ERR_OUT_OF_MEMORY;
  if (!analyze(&rep, &tl, pre_ptrs)) {
    mn__error(st, FN, "out of host memory");
    goto done;
  }
  /* 4: its data in the page. */
  mn__report_progress(da->on_progress, da->progress_user, "%s: writing its data...", da->label);
  page_args_t pa = {da->path, da->title, configs, nconfigs, da->as_recorded, res, peak_entry, snap,
                    da->label, da->host, da->single, NULL};
  if (!write_device_data(f, &rep, &pa, da->first)) {
    mn__error(st, FN, "out of host memory building the page");
    goto done;
  }
  /* 5: the summary. */
  mn__sbuf_t *o2 = da->sum;
  char x[32], y[32];
  mn__sbuf_printf(o2, "%s (trace device %" PRIu32 ")%s\n", da->label, rep.dev,
          rep.state_only ? ": a state dump, no history (the state as dumped)" : "");
  if (strcmp(cap_from, "default"))
    mn__sbuf_printf(o2, "  SIM capacity %zu B (%.2f GiB, %s)\n", sc.capacity, (double)sc.capacity / 1073741824.0,
            !strcmp(cap_from, "option") ? "--capacity"
            : !strcmp(cap_from, "oom") ? "as recorded: PyTorch's reserved bytes at its first OOM + the free bytes it reported"
                                       : "as recorded: the least that PyTorch's partial cache releases allow");
  mn__sbuf_printf(o2, "  peak reserved %" PRId64 " B (%.2f GiB) at entry %zu; peak allocated %" PRId64 " B (%.2f GiB) at entry %zu\n",
          res[0].peak_reserved, (double)res[0].peak_reserved / 1073741824.0, peak_entry, res[0].peak_allocated,
          (double)res[0].peak_allocated / 1073741824.0, rep.peak_alloc);
  size_t fr = 0, largest_free = 0;
  for (size_t i = 0; i < snap->nsegments; i++)
    for (size_t b = 0; b < snap->segments[i].nblocks; b++)
      if (snap->segments[i].blocks[b].state == MN_BLOCK_INACTIVE) {
        fr += snap->segments[i].blocks[b].size;
        if (snap->segments[i].blocks[b].size > largest_free) largest_free = snap->segments[i].blocks[b].size;
      }
  snprintf(x, sizeof x, "%.2f MiB", (double)fr / 1048576.0);
  snprintf(y, sizeof y, "%.2f MiB", (double)largest_free / 1048576.0);
  mn__sbuf_printf(o2, "  at the peak reserved: %zu segments, %zu blocks, %s free in segments (largest free block %s)\n",
          snap->nsegments, nblocks, x, y);
  if (rep.nheld)
    mn__sbuf_printf(o2, "  %zu allocations alive at the peak allocated; the largest: %.2f MiB (trace line %" PRIu32 ")\n",
            rep.nheld, (double)t->entries[rep.held[0]].size / 1048576.0, t->entries[rep.held[0]].line);
  if (rep.nooms)
    mn__sbuf_printf(o2, "  %zu OOMs recorded; the replay ran out of memory at %" PRIu64 " of them\n", rep.nooms,
            res[0].ooms_reproduced);
  for (size_t k = 0; k < nconfigs; k++) {
    char lb[4096];
    if (k == 0 && da->as_recorded) snprintf(lb, sizeof lb, "as recorded (%s)", configs[0][0] ? configs[0] : "defaults");
    else snprintf(lb, sizeof lb, "%s", configs[k][0] ? configs[k] : "(defaults)");
    mn__sbuf_printf(o2, "  %-40s reserved %.2f GiB, allocated %.2f GiB, ratio %.3f, %" PRIu64 " OOMs\n", lb,
            (double)res[k].peak_reserved / 1073741824.0, (double)res[k].peak_allocated / 1073741824.0, res[k].ratio,
            res[k].ooms);
  }
  {
    mn__sbuf_t *j = da->json;
    json_device_head(j, da, rep.dev, true, rep.state_only);
    mn__sbuf_printf(j, ", \"capacity\": %zu, \"capacity_from\": \"%s\"", sc.capacity, cap_from);
    json_i64(j, "peak_reserved", res[0].peak_reserved);
    mn__sbuf_printf(j, ", \"peak_reserved_entry\": %zu", peak_entry);
    json_i64(j, "peak_allocated", res[0].peak_allocated);
    mn__sbuf_printf(j, ", \"peak_allocated_entry\": %zu", rep.peak_alloc);
    json_device_state(j, t, &rep, peak_entry, snap->nsegments, nblocks, fr, largest_free);
    mn__sbuf_printf(j, ", \"ooms_reproduced\": %" PRIu64 ",\n   \"results\": [", res[0].ooms_reproduced);
    for (size_t k = 0; k < nconfigs; k++) {
      mn__sbuf_printf(j, "%s\n    {\"config\": ", k ? "," : "");
      mn__sbuf_json_str(j, configs[k]);
      mn__sbuf_printf(j, ", \"as_recorded\": %s", k == 0 && da->as_recorded ? "true" : "false");
      json_i64(j, "peak_reserved", res[k].peak_reserved);
      json_i64(j, "peak_allocated", res[k].peak_allocated);
      json_ratio(j, "ratio", res[k].ratio);
      mn__sbuf_printf(j, ", \"ooms\": %" PRIu64 "}", res[k].ooms);
    }
    mn__sbuf_puts(j, "],\n   \"torch\": ");
  }
  uint64_t tr = 0, ta = 0;
  char kr[96], ka[96];
  snprintf(kr, sizeof kr, "dev%" PRIu32 ".torch_peak_reserved", rep.dev);
  snprintf(ka, sizeof ka, "dev%" PRIu32 ".torch_peak_allocated", rep.dev);
  bool own = mn_trace_meta_get_u64(t, kr, &tr) == MN_OK && mn_trace_meta_get_u64(t, ka, &ta) == MN_OK;
  if (own || (da->single && mn_trace_meta_get_u64(t, "torch_peak_reserved", &tr) == MN_OK &&
              mn_trace_meta_get_u64(t, "torch_peak_allocated", &ta) == MN_OK)) {
    mn__sbuf_printf(o2, "  %-40s reserved %.2f GiB, allocated %.2f GiB, ratio %.3f\n", "pytorch (recorded, from the trace)",
            (double)tr / 1073741824.0, (double)ta / 1073741824.0, ta ? (double)tr / (double)ta : 0.0);
    mn__sbuf_printf(da->json, "{\"peak_reserved\": %" PRIu64 ", \"peak_allocated\": %" PRIu64 "}}", tr, ta);
  } else {
    mn__sbuf_puts(da->json, "null}");
  }
  mn_clear_error();
  st = MN_OK;
  goto done;
fail:
  st = failed(st, "");
done:
  mn_allocator_destroy(a);
  report_free(&rep);
  if (snap) mn_snapshot_free(snap);
  free(tl.s);
  free(pre_ptrs);
  evlog_free(&ev);
  return st;
}

/* A device's name in the page and the summary. */
static void device_label(uint32_t dev, uint64_t host_dev, char *buf, size_t n) {
  if (dev == host_dev) snprintf(buf, n, "pinned host memory");
  else snprintf(buf, n, "cuda:%" PRIu32, dev);
}

mn_status mn__report_check_options(const mn_report_options_t *o) {
  if (o->nconfigs > MN_REPORT_MAX_CONFIGS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, FN, "at most %d --config (%zu given)", MN_REPORT_MAX_CONFIGS,
                     o->nconfigs);
  if (o->nconfigs && !o->configs)
    return mn__error(MN_ERR_INVALID_ARGUMENT, FN, "configs is NULL with nconfigs %zu", o->nconfigs);
  for (size_t k = 0; k < o->nconfigs; k++) {
    if (!o->configs[k]) return mn__error(MN_ERR_INVALID_ARGUMENT, FN, "configs[%zu] is NULL", k);
    mn_caching_config_t cfg = mn_caching_config_default();
    mn_status st = mn_caching_config_parse(o->configs[k], &cfg);
    if (st != MN_OK) {
      char what[600];
      snprintf(what, sizeof what, "bad --config \"%.500s\": ", o->configs[k]);
      return failed(bad_option(st), what);
    }
  }
  if (o->trace_device < -1 || o->trace_device > 1000)
    return mn__error(MN_ERR_INVALID_ARGUMENT, FN,
                     "--trace-device %d is not a device number (0..1000; -1: every device of the trace)",
                     o->trace_device);
  if (o->capacity) { /* tried, then the SIM device as found */
    mn_sim_config_t found = mn_sim_config_default();
    mn_status st = mn_sim_get_config(&found);
    if (st != MN_OK) return failed(st, "the SIM device: ");
    mn_sim_config_t sc = found;
    sc.capacity = o->capacity;
    st = mn_sim_configure(&sc); /* refused: nothing changed */
    if (st != MN_OK) return failed(bad_option(st), "--capacity: ");
    st = mn_sim_configure(&found);
    if (st != MN_OK) return failed(st, "the SIM device: ");
  }
  return MN_OK;
}

mn_status mn_report_build(const mn_trace_t *t, const mn_report_options_t *options, mn_report_t **out) {
  if (!t || !out) return mn__error(MN_ERR_INVALID_ARGUMENT, FN, "NULL %s", !t ? "trace" : "out");
  mn_report_options_t o = options ? *options : mn_report_options_default();
  mn_status st = mn__report_check_options(&o);
  if (st != MN_OK) return st;
  mn_sim_config_t found = mn_sim_config_default();
  st = mn_sim_get_config(&found);
  if (st != MN_OK) return failed(st, "the SIM device: ");
  const char *name = o.name ? o.name : "trace";
  mn__sbuf_t page = {0}, sum = {0}, devjs = {0}, summary = {0}, json = {0}, notes = {0};
  /* No configs: replay as recorded, with the settings the trace was recorded with
   * (its `meta config`; the defaults when it has none or mnemo refuses them). */
  const char *configs[MN_REPORT_MAX_CONFIGS];
  size_t nconfigs = 0;
  bool as_recorded = false;
  for (; nconfigs < o.nconfigs; nconfigs++) configs[nconfigs] = o.configs[nconfigs];
  if (nconfigs == 0) configs[nconfigs++] = mn__trace_recorded_config(t, &notes, &as_recorded);
  /* The devices: trace_device's, else every device of the trace (each its own
   * data in the page, picked by the page's device selector). */
  uint32_t devs[MAX_DEVICES];
  size_t ndevs = 0, ntrace_devs = 0; /* distinct devices in the trace (its torch_* keys are the only one's) */
  for (size_t i = 0; i < t->nentries && ntrace_devs < MAX_DEVICES; i++) {
    size_t k = 0;
    while (k < ntrace_devs && devs[k] != t->entries[i].device) k++;
    if (k == ntrace_devs) devs[ntrace_devs++] = t->entries[i].device;
  }
  if (o.trace_device >= 0) {
    devs[0] = (uint32_t)o.trace_device;
    ndevs = 1;
  } else {
    ndevs = ntrace_devs;
    qsort(devs, ndevs, sizeof *devs, cmp_u32);
    if (!ndevs) devs[ndevs++] = 0;
  }
  uint64_t host_dev = UINT64_MAX;
  if (mn_trace_meta_get(t, "host_device") && mn_trace_meta_get_u64(t, "host_device", &host_dev) != MN_OK)
    host_dev = UINT64_MAX;
  mn_clear_error();
  if (o.trace_device < 0 && ndevs > 1 && devs[0] == host_dev) { /* a GPU first */
    memmove(devs, devs + 1, (ndevs - 1) * sizeof *devs);
    devs[ndevs - 1] = (uint32_t)host_dev;
  }
  mn_sim_config_t sim0 = found;
  if (o.capacity) sim0.capacity = o.capacity;
  mn__sbuf_puts(&page, mn_report_page_head);
  mn__sbuf_printf(&page, "<script id=\"mn-devices\" type=\"application/json\">[");
  for (size_t k = 0; k < ndevs; k++) {
    char lb[64];
    device_label(devs[k], host_dev, lb, sizeof lb);
    mn__sbuf_printf(&page, "%s[%" PRIu32 ",\"%s\",%s]", k ? "," : "", devs[k], lb,
                    devs[k] == host_dev ? "true" : "false");
  }
  mn__sbuf_printf(&page, "]</script>\n");
  for (size_t k = 0; k < ndevs; k++) {
    char lb[64];
    device_label(devs[k], host_dev, lb, sizeof lb);
    device_args_t da = {name,  o.title, configs,     nconfigs,        as_recorded,       (int)devs[k],
                        ntrace_devs <= 1, devs[k] == host_dev, lb, k == 0, &sum, &devjs, &sim0,
                        o.capacity != 0, o.on_progress, o.progress_user};
    st = report_device(&page, t, &da);
    if (st != MN_OK) goto done;
  }
  mn__sbuf_puts(&page, mn_report_page_tail);
  mn__report_progress(o.on_progress, o.progress_user, "writing the page (%zu devices)...", ndevs);
  if (page.oom || sum.oom || devjs.oom) {
    st = mn__error(MN_ERR_OUT_OF_MEMORY, FN, "out of host memory building the page");
    goto done;
  }
  /* the summary (its first line names the page and its size), and as one JSON
   * object, the summary's text in it */
  mn__sbuf_printf(&summary, "report %s: %zu entries, %zu configs, %zu device%s, %zu bytes\n",
                  o.output ? o.output : "(stdout)", t->nentries, nconfigs, ndevs, ndevs == 1 ? "" : "s", page.len);
  mn__sbuf_puts(&summary, mn__sbuf_str(&sum));
  mn__sbuf_puts(&json, "{\"path\": ");
  if (o.output) mn__sbuf_json_str(&json, o.output);
  else mn__sbuf_puts(&json, "null");
  mn__sbuf_printf(&json, ", \"bytes\": %zu, \"entries\": %zu, \"configs\": %zu, \"devices\": [%s],\n \"summary\": ",
                  page.len, t->nentries, nconfigs, mn__sbuf_str(&devjs));
  const char *text = mn__sbuf_str(&summary);
  mn__sbuf_json_str(&json, text ? text : "");
  mn__sbuf_puts(&json, "}\n");
done:
  st = mn__report_sim_restore(FN, &found, st); /* the SIM device as found (a failure's message kept) */
  mn__sbuf_free(&sum);
  mn__sbuf_free(&devjs);
  if (st == MN_OK) return mn__report_finish(FN, &page, &summary, &json, &notes, out);
  mn__sbuf_free(&page);
  mn__sbuf_free(&summary);
  mn__sbuf_free(&json);
  mn__sbuf_free(&notes);
  return st;
}
