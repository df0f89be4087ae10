/* bench/alloc_anchors.c: the workloads shared by bench_alloc_anchors and
 * alloc_ir (bench/alloc_anchors.h): heaps opened with dlopen, a trace turned
 * into a closed alloc/free sequence, caching-allocator setups on SIM.
 * Threading: see the header (loading and setups on one thread; a loaded
 * sequence and an opened heap are read-only afterwards). */
#include "bench/alloc_anchors.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mn_anchor_die(const char *what) {
  fprintf(stderr, "alloc anchors: %s: %s\n", what, mn_last_error());
  exit(1);
}

static void say(char *why, size_t whylen, const char *fmt, ...) {
  if (!why || !whylen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

/* ---- heaps -------------------------------------------------------------------------- */

static const struct {
  const char *name, *lib, *malloc_sym, *free_sym;
} g_heaps[MN_ANCHOR_HEAPS] = {
    {"glibc", NULL, NULL, NULL},
    {"jemalloc", "libjemalloc.so.2", "malloc", "free"},
    {"mimalloc", "libmimalloc.so.2", "mi_malloc", "mi_free"},
};

bool mn_anchor_heap_open(mn_anchor_heap_kind kind, mn_anchor_heap_t *out, char *why, size_t whylen) {
  if ((int)kind < 0 || kind >= MN_ANCHOR_HEAPS) {
    say(why, whylen, "no heap %d", (int)kind);
    return false;
  }
  mn_anchor_heap_t h = {g_heaps[kind].name, malloc, free, NULL};
  if (g_heaps[kind].lib) {
    h.handle = dlopen(g_heaps[kind].lib, RTLD_NOW | RTLD_LOCAL);
    if (!h.handle) {
      const char *e = dlerror();
      say(why, whylen, "%s not loaded (%s)%s", g_heaps[kind].lib, e ? e : "?",
          e && strstr(e, "static TLS") ? "; run with GLIBC_TUNABLES=" MN_ANCHOR_TLS_TUNABLE
                                       : "; Debian: apt-get install libjemalloc-dev libmimalloc-dev");
      return false;
    }
    /* dlsym on the handle searches the library itself first: its own malloc, not glibc's. */
    h.malloc_fn = (void *(*)(size_t))dlsym(h.handle, g_heaps[kind].malloc_sym);
    h.free_fn = (void (*)(void *))dlsym(h.handle, g_heaps[kind].free_sym);
    Dl_info info;
    if (!h.malloc_fn || !h.free_fn || !dladdr((void *)h.malloc_fn, &info) || !info.dli_fname ||
        !strstr(info.dli_fname, g_heaps[kind].lib)) {
      say(why, whylen, "%s: %s/%s not found in the library", g_heaps[kind].lib, g_heaps[kind].malloc_sym,
          g_heaps[kind].free_sym);
      return false; /* the handle stays open: unloading an allocator is never worth the risk */
    }
  }
  *out = h;
  return true;
}

void mn_anchor_reexec_for_tls(char **argv) {
  const char *tun = getenv("GLIBC_TUNABLES");
  if (tun && strstr(tun, "glibc.rtld.optional_static_tls")) return;
  void *h = dlopen(g_heaps[MN_ANCHOR_JEMALLOC].lib, RTLD_NOW | RTLD_LOCAL);
  if (h) return; /* loads as it is (kept open: mn_anchor_heap_open finds it) */
  const char *e = dlerror();
  if (!e || !strstr(e, "static TLS")) return; /* missing: skipped later, with a message */
  char buf[1024];
  snprintf(buf, sizeof buf, "%s%s%s", tun ? tun : "", tun && *tun ? ":" : "", MN_ANCHOR_TLS_TUNABLE);
  setenv("GLIBC_TUNABLES", buf, 1);
  execv("/proc/self/exe", argv);
  perror("alloc anchors: execv /proc/self/exe (jemalloc will be skipped)");
}

/* ---- the trace's sequence ------------------------------------------------------------ */

typedef struct {
  size_t entry;   /* index in the trace */
  uint64_t address;
  size_t size;
  bool is_alloc, pre;
  size_t partner; /* alloc: index in the entry list of its free; SIZE_MAX: never freed */
  uint32_t slot;
} seq_entry;

static int by_address(const void *x, const void *y) {
  const seq_entry *a = *(const seq_entry *const *)x, *b = *(const seq_entry *const *)y;
  if (a->address != b->address) return a->address < b->address ? -1 : 1;
  return a->entry < b->entry ? -1 : a->entry > b->entry;
}

void mn_anchor_seq_free(mn_anchor_seq_t *s) {
  if (!s) return;
  free(s->ops);
  free(s->keep);
  free(s->keep_raw);
  memset(s, 0, sizeof *s);
}

static void add_op(mn_anchor_seq_t *s, uint32_t slot, bool is_alloc, size_t raw) {
  mn_anchor_op_t *o = &s->ops[s->nops++];
  o->slot = slot;
  o->is_alloc = is_alloc;
  o->size_raw = raw ? raw : 1;
  o->size = o->size_raw;
}

/* Peak of live bytes over keep + ops, with sizes divided by `div`. */
static uint64_t seq_peak(const mn_anchor_seq_t *s, const size_t *slot_size, size_t div) {
  uint64_t live = 0, peak = 0;
  for (size_t i = 0; i < s->nkeep; i++) live += s->keep_raw[i] / div ? s->keep_raw[i] / div : 1;
  peak = live;
  for (size_t i = 0; i < s->nops; i++) {
    size_t b = slot_size[s->ops[i].slot] / div ? slot_size[s->ops[i].slot] / div : 1;
    if (s->ops[i].is_alloc) {
      live += b;
      if (live > peak) peak = live;
    } else {
      live -= b;
    }
  }
  return peak;
}

bool mn_anchor_seq_load(const char *path, uint64_t max_peak, mn_anchor_seq_t *out, char *why, size_t whylen) {
  mn_trace_t *t = NULL;
  if (mn_trace_read(path, &t) != MN_OK) {
    say(why, whylen, "%s", mn_last_error());
    return false;
  }
  if (mn_trace_validate(t) != MN_OK) {
    say(why, whylen, "%s", mn_last_error());
    mn_trace_destroy(t);
    return false;
  }
  uint32_t dev = UINT32_MAX;
  for (size_t i = 0; i < t->nentries; i++)
    if (t->entries[i].device < dev) dev = t->entries[i].device;
  seq_entry *e = calloc(t->nentries ? t->nentries : 1, sizeof *e);
  seq_entry **order = calloc(t->nentries ? t->nentries : 1, sizeof *order);
  mn_anchor_seq_t s = {0};
  size_t n = 0, *slot_size = NULL, *free_of = NULL; /* free_of: a free's index -> its alloc's index */
  bool ok = false;
  if (!e || !order) {
    say(why, whylen, "out of host memory");
    goto done;
  }
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *te = &t->entries[i];
    if (te->device != dev || (te->action != MN_TRACE_ALLOC && te->action != MN_TRACE_FREE_REQUESTED)) continue;
    e[n] = (seq_entry){i, te->address, (size_t)te->size, te->action == MN_TRACE_ALLOC, te->pre, SIZE_MAX, 0};
    order[n] = &e[n];
    n++;
  }
  /* Pair by address: per address, entries in trace order alternate alloc, free. */
  qsort(order, n, sizeof *order, by_address);
  for (size_t i = 0; i + 1 < n; i++)
    if (order[i]->is_alloc && !order[i + 1]->is_alloc && order[i]->address == order[i + 1]->address)
      order[i]->partner = (size_t)(order[i + 1] - e);
  /* keep: pre allocations never freed; the rest become slots. */
  size_t nalloc = 0, nkeep = 0;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].is_alloc) continue;
    if (e[i].pre && e[i].partner == SIZE_MAX) nkeep++;
    else nalloc++;
  }
  s.ops = calloc(2 * nalloc + 1, sizeof *s.ops);
  s.keep = calloc(nkeep + 1, sizeof *s.keep);
  s.keep_raw = calloc(nkeep + 1, sizeof *s.keep_raw);
  slot_size = calloc(nalloc + 1, sizeof *slot_size);
  free_of = calloc(n + 1, sizeof *free_of);
  if (!s.ops || !s.keep || !s.keep_raw || !slot_size || !free_of) {
    say(why, whylen, "out of host memory");
    goto done;
  }
  if (nalloc > UINT32_MAX) {
    say(why, whylen, "%zu allocations: too many", nalloc);
    goto done;
  }
  for (size_t i = 0; i < n; i++) free_of[i] = SIZE_MAX;
  for (size_t i = 0; i < n; i++)
    if (e[i].is_alloc && e[i].partner != SIZE_MAX) free_of[e[i].partner] = i;
  uint32_t next = 0;
  /* keep: pre allocations that the events never free; those they free open the
   * sequence, in trace order. */
  for (size_t i = 0; i < n; i++) {
    if (!e[i].is_alloc || !e[i].pre) continue;
    if (e[i].partner == SIZE_MAX) s.keep_raw[s.nkeep++] = e[i].size ? e[i].size : 1;
    else add_op(&s, e[i].slot = next++, true, e[i].size);
  }
  /* The events (a free without an alloc before it at its address is left out). */
  for (size_t i = 0; i < n; i++) {
    if (e[i].pre) continue;
    if (e[i].is_alloc) add_op(&s, e[i].slot = next++, true, e[i].size);
    else if (free_of[i] != SIZE_MAX) add_op(&s, e[free_of[i]].slot, false, e[free_of[i]].size);
  }
  /* What is still live at the trace's end, in slot order. */
  for (size_t i = 0; i < n; i++)
    if (e[i].is_alloc && !e[i].pre && e[i].partner == SIZE_MAX) add_op(&s, e[i].slot, false, e[i].size);
  s.npairs = s.nslots = next;
  for (size_t i = 0; i < s.nops; i++)
    if (s.ops[i].is_alloc) slot_size[s.ops[i].slot] = s.ops[i].size_raw;
  s.divisor = 1;
  s.peak_raw = seq_peak(&s, slot_size, 1);
  while (seq_peak(&s, slot_size, s.divisor) > max_peak && s.divisor < ((size_t)1 << 40)) s.divisor *= 2;
  s.peak = seq_peak(&s, slot_size, s.divisor);
  for (size_t i = 0; i < s.nops; i++) {
    size_t b = s.ops[i].size_raw / s.divisor;
    s.ops[i].size = b ? b : 1;
  }
  for (size_t i = 0; i < s.nkeep; i++) {
    size_t b = s.keep_raw[i] / s.divisor;
    s.keep[i] = b ? b : 1;
  }
  snprintf(s.path, sizeof s.path, "%s", path);
  if (s.npairs == 0) {
    say(why, whylen, "%s: no alloc/free pairs", path);
    goto done;
  }
  ok = true;
done:
  free(free_of);
  free(slot_size);
  free(order);
  free(e);
  mn_trace_destroy(t);
  if (ok) *out = s;
  else mn_anchor_seq_free(&s);
  return ok;
}

bool mn_anchor_seq_run_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void **slots) {
  const mn_anchor_op_t *o = s->ops, *end = s->ops + s->nops;
  for (; o < end; o++) {
    if (o->is_alloc) {
      if (!(slots[o->slot] = h->malloc_fn(o->size))) return false;
    } else {
      h->free_fn(slots[o->slot]);
    }
  }
  return true;
}

bool mn_anchor_seq_run_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, bool scaled, void **slots) {
  const mn_anchor_op_t *o = s->ops, *end = s->ops + s->nops;
  for (; o < end; o++) {
    if (o->is_alloc) {
      if (mn_allocator_alloc(a, scaled ? o->size : o->size_raw, NULL, &slots[o->slot]) != MN_OK) return false;
    } else if (mn_allocator_free(a, slots[o->slot]) != MN_OK) {
      return false;
    }
  }
  return true;
}

bool mn_anchor_seq_keep_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void ***keep) {
  void **k = calloc(s->nkeep + 1, sizeof *k);
  if (!k) return false;
  for (size_t i = 0; i < s->nkeep; i++)
    if (!(k[i] = h->malloc_fn(s->keep[i]))) {
      mn_anchor_seq_release_heap(s, h, k);
      return false;
    }
  *keep = k;
  return true;
}

void mn_anchor_seq_release_heap(const mn_anchor_seq_t *s, const mn_anchor_heap_t *h, void **keep) {
  if (!keep) return;
  for (size_t i = 0; i < s->nkeep; i++)
    if (keep[i]) h->free_fn(keep[i]);
  free(keep);
}

bool mn_anchor_seq_keep_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, bool scaled, void ***keep) {
  void **k = calloc(s->nkeep + 1, sizeof *k);
  if (!k) return false;
  for (size_t i = 0; i < s->nkeep; i++)
    if (mn_allocator_alloc(a, scaled ? s->keep[i] : s->keep_raw[i], NULL, &k[i]) != MN_OK) {
      mn_anchor_seq_release_mnemo(s, a, k);
      return false;
    }
  *keep = k;
  return true;
}

void mn_anchor_seq_release_mnemo(const mn_anchor_seq_t *s, mn_allocator_t *a, void **keep) {
  if (!keep) return;
  for (size_t i = 0; i < s->nkeep; i++)
    if (keep[i] && mn_allocator_free(a, keep[i]) != MN_OK) mn_anchor_die("free of a kept block");
  free(keep);
}

/* ---- caching-allocator setups ------------------------------------------------------------ */

static void never_runs(void *arg) { (void)arg; }

void mn_anchor_caching_create(mn_device_t dev, int64_t cached, int64_t pending, mn_anchor_caching_t *out) {
  mn_anchor_caching_t w = {0};
  w.cached = cached;
  w.pending = pending;
  if (mn_caching_allocator_create(dev, NULL, &w.a) != MN_OK) mn_anchor_die("mn_caching_allocator_create");
  if (pending > 0) {
    if (mn_stream_create(dev, &w.b) != MN_OK || mn_stream_create(dev, &w.c) != MN_OK) mn_anchor_die("mn_stream_create");
    /* Work on B that the SIM device runs only when B is advanced or synchronized:
     * every event recorded on B after it stays pending. */
    if (mn_stream_launch_host(w.b, never_runs, NULL) != MN_OK) mn_anchor_die("mn_stream_launch_host");
    void **p = malloc(sizeof *p * (size_t)pending);
    if (!p) mn_anchor_die("malloc");
    /* Sizes of 33..64 x 512 B: none of the warm blocks' sizes below (cached <= 64
     * distinct sizes start at 512 B) is ever taken by them, and none is reusable. */
    for (int64_t i = 0; i < pending; i++) {
      if (mn_allocator_alloc(w.a, mn_anchor_size_of(32 + i % 32), w.c, &p[i]) != MN_OK) mn_anchor_die("pending alloc");
      if (mn_allocator_record_stream(w.a, p[i], w.b) != MN_OK) mn_anchor_die("record_stream");
    }
    for (int64_t i = 0; i < pending; i++)
      if (mn_allocator_free(w.a, p[i]) != MN_OK) mn_anchor_die("pending free");
    free(p);
  }
  w.live = malloc(sizeof(void *) * (size_t)(2 * cached + 2));
  if (!w.live) mn_anchor_die("malloc");
  for (int64_t i = 0; i < 2 * cached + 1; i++)
    if (mn_allocator_alloc(w.a, mn_anchor_size_of(i / 2), NULL, &w.live[i]) != MN_OK) mn_anchor_die("warm alloc");
  for (int64_t i = 1; i < 2 * cached + 1; i += 2)
    if (mn_allocator_free(w.a, w.live[i]) != MN_OK) mn_anchor_die("warm free");
  w.want = mn_anchor_size_of(cached / 2);
  *out = w;
}

void mn_anchor_caching_destroy(mn_anchor_caching_t *w) {
  for (int64_t i = 0; i < 2 * w->cached + 1; i += 2)
    if (mn_allocator_free(w->a, w->live[i]) != MN_OK) mn_anchor_die("cool free");
  free(w->live);
  if (w->b && mn_stream_synchronize(w->b) != MN_OK) mn_anchor_die("mn_stream_synchronize");
  mn_allocator_destroy(w->a);
  if (w->b && mn_stream_destroy(w->b) != MN_OK) mn_anchor_die("mn_stream_destroy");
  if (w->c && mn_stream_destroy(w->c) != MN_OK) mn_anchor_die("mn_stream_destroy");
  memset(w, 0, sizeof *w);
}
