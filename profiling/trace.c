/* profiling/trace.c: the trace file format (docs/TRACE_FORMAT.md): a strict
 * reader with file:line errors (linear in the file's size), a writer, the
 * interned frames and stacks of version 3 (hash tables, so interning is
 * linear too), the annotations of version 4, and a recorder for allocator
 * trace sinks. No shared state but
 * the hash seed (made once, pthread_once): any thread, one thread at a time
 * per trace. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "mnemo/trace.h"
#include "profiling/text.h"
#include "profiling/idtable.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"
#include "runtime/nameset.h"
#include "runtime/random.h"

#define MN__TRACE_MAX_FIELDS 8

/* ---- the in-memory trace ---------------------------------------------------- */

static void trace_intern_free(struct mn__trace_intern_s *in);

mn_status mn_trace_create(mn_trace_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  mn_trace_t *t = mn__calloc(1, sizeof *t);
  if (!t) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  t->version = 1;
  *out = t;
  return MN_OK;
}

void mn_trace_destroy(mn_trace_t *trace) {
  if (!trace) return;
  for (size_t i = 0; i < trace->nmeta; i++) {
    free(trace->meta[i].key);
    free(trace->meta[i].value);
  }
  free(trace->meta);
  free(trace->entries);
  for (size_t i = 0; i < trace->nframes; i++) free(trace->frames[i].file); /* name shares its block */
  free(trace->frames);
  free(trace->stack_start);
  free(trace->stack_frames);
  for (size_t i = 0; i < trace->nannotations; i++) free(trace->annotations[i].name);
  free(trace->annotations);
  trace_intern_free(trace->intern_);
  free(trace);
}

mn_status mn_trace_action_parse(const char *name, mn_trace_action *out) {
  MN__CHECK_ARG(name != NULL && out != NULL, "name and out must not be NULL");
  for (int a = 0; a < MN_TRACE_ACTION_COUNT; a++) {
    if (strcmp(name, mn_trace_action_name((mn_trace_action)a)) == 0) {
      *out = (mn_trace_action)a;
      return MN_OK;
    }
  }
  return mn__error(MN_ERR_FORMAT, __func__, "unknown action \"%.32s\"", name);
}

static bool pre_action_ok(mn_trace_action a) {
  return a == MN_TRACE_ALLOC || a == MN_TRACE_SEGMENT_ALLOC || a == MN_TRACE_SEGMENT_MAP;
}

mn_status mn_trace_append(mn_trace_t *trace, const mn_trace_entry_t *entry) {
  MN__CHECK_ARG(trace != NULL && entry != NULL, "trace and entry must not be NULL");
  MN__CHECK_ARG((unsigned)entry->action < MN_TRACE_ACTION_COUNT, "action %d is not a trace action",
                (int)entry->action);
  MN__CHECK_ARG(!entry->pre || pre_action_ok(entry->action),
                "a pre entry must be alloc, segment_alloc or segment_map, not %s",
                mn_trace_action_name(entry->action));
  MN__CHECK_ARG(entry->action != MN_TRACE_ALLOC || entry->size > 0, "alloc of 0 bytes");
  MN__CHECK_ARG(entry->device <= INT32_MAX, "device index %" PRIu32 " is over %d", entry->device, INT32_MAX);
  MN__CHECK_ARG(entry->stack <= trace->nstacks, "stack %" PRIu32 " is not a stack id (the trace has %zu stacks)",
                entry->stack, trace->nstacks);
  if (entry->pre && trace->nentries > 0 && !trace->entries[trace->nentries - 1].pre)
    return mn__error(MN_ERR_INVALID_STATE, __func__, "pre entry after %zu event entries", trace->nentries);
  if (trace->nentries == trace->capacity) {
    size_t cap = trace->capacity ? trace->capacity * 2 : 256;
    if (cap > SIZE_MAX / sizeof *trace->entries)
      return mn__error(MN_ERR_OVERFLOW, __func__, "%zu entries is too many", trace->nentries);
    mn_trace_entry_t *e = mn__realloc(trace->entries, cap * sizeof *e);
    if (!e) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu entries", cap);
    trace->entries = e;
    trace->capacity = cap;
  }
  mn_trace_entry_t *dst = &trace->entries[trace->nentries++];
  *dst = *entry;
  dst->line = 0;
  if (dst->pre) dst->time_us = 0;
  return MN_OK;
}

static bool meta_key_ok(const char *key, size_t len) {
  if (len == 0 || len > MN_TRACE_META_KEY_MAX) return false;
  for (size_t i = 0; i < len; i++) {
    char c = key[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  }
  return true;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

static mn_trace_meta_t *meta_find(const mn_trace_t *t, const char *key, size_t klen) {
  for (size_t i = 0; i < t->nmeta; i++)
    if (strlen(t->meta[i].key) == klen && memcmp(t->meta[i].key, key, klen) == 0) return &t->meta[i];
  return NULL;
}

static char *dup_n(const char *s, size_t n) {
  char *d = mn__malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* Appends key (klen bytes, not in the trace yet) = value (vlen bytes, already trimmed). */
static mn_status meta_append(mn_trace_t *t, const char *key, size_t klen, const char *value, size_t vlen) {
  char *v = dup_n(value, vlen);
  if (!v) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  if (t->nmeta == t->meta_capacity) {
    size_t cap = t->meta_capacity ? t->meta_capacity * 2 : 16;
    mn_trace_meta_t *nm = mn__realloc(t->meta, cap * sizeof *nm);
    if (!nm) {
      free(v);
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    }
    t->meta = nm;
    t->meta_capacity = cap;
  }
  char *k = dup_n(key, klen);
  if (!k) {
    free(v);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  t->meta[t->nmeta].key = k;
  t->meta[t->nmeta].value = v;
  t->nmeta++;
  return MN_OK;
}

/* Adds or replaces key (klen bytes) = value (vlen bytes, already trimmed). */
static mn_status meta_put(mn_trace_t *t, const char *key, size_t klen, const char *value, size_t vlen) {
  mn_trace_meta_t *m = meta_find(t, key, klen);
  if (!m) return meta_append(t, key, klen, value, vlen);
  char *v = dup_n(value, vlen);
  if (!v) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  free(m->value);
  m->value = v;
  return MN_OK;
}

mn_status mn_trace_meta_set(mn_trace_t *trace, const char *key, const char *value) {
  MN__CHECK_ARG(trace != NULL && key != NULL && value != NULL, "trace, key and value must not be NULL");
  size_t klen = strlen(key);
  MN__CHECK_ARG(meta_key_ok(key, klen), "meta key \"%.80s\" is not 1-%d characters of [A-Za-z0-9_.-]",
                key, MN_TRACE_META_KEY_MAX);
  MN__CHECK_ARG(strpbrk(value, "\r\n") == NULL, "meta value for %s holds a line break", key);
  while (is_blank(*value)) value++;
  size_t vlen = strlen(value);
  while (vlen > 0 && is_blank(value[vlen - 1])) vlen--;
  MN__CHECK_ARG(5 + klen + 1 + vlen <= MN_TRACE_LINE_MAX, "meta value for %s is %zu bytes, over the %d-byte line",
                key, vlen, MN_TRACE_LINE_MAX);
  mn_status st = meta_put(trace, key, klen, value, vlen);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

const char *mn_trace_meta_get(const mn_trace_t *trace, const char *key) {
  if (!trace || !key) return NULL;
  mn_trace_meta_t *m = meta_find(trace, key, strlen(key));
  return m ? m->value : NULL;
}

mn_status mn_trace_meta_get_u64(const mn_trace_t *trace, const char *key, uint64_t *out) {
  MN__CHECK_ARG(trace != NULL && key != NULL && out != NULL, "trace, key and out must not be NULL");
  const char *v = mn_trace_meta_get(trace, key);
  if (!v) return mn__error(MN_ERR_NOT_FOUND, __func__, "no meta key %s", key);
  uint64_t x;
  if (!mn__parse_dec(v, &x)) return mn__error(MN_ERR_FORMAT, __func__, "meta %s = \"%.40s\" is not a decimal", key, v);
  *out = x;
  return MN_OK;
}

/* ---- frames and stacks (version 3): interning --------------------------------
 * Frames and stacks live in the trace's public arrays; two open-addressing
 * tables of ids (0: empty slot; linear probing over a power-of-two table at
 * most half full) find an equal one in O(1). Each frame's (and stack's) hash
 * is kept, so growing a table never re-reads the strings. The hash is keyed by
 * a per-process random seed, so a crafted file cannot choose colliding frames.
 * A frame's file and name share one allocation (file first). */

struct mn__trace_intern_s {
  size_t frames_cap, frame_hash_cap; /* slots of frames[] and frame_hash[] */
  size_t start_cap, stack_hash_cap;  /* slots of stack_start[] (nstacks + 1 used) and stack_hash[] */
  size_t ids_cap;                    /* slots of stack_frames[] */
  size_t annotations_cap;            /* slots of annotations[] (version 4) */
  uint64_t *frame_hash;              /* frame id - 1 -> hash */
  uint64_t *stack_hash;              /* stack id - 1 -> hash */
  uint32_t *frame_slots, *stack_slots;
  size_t frame_slots_cap, stack_slots_cap;
  size_t frame_slots_used, stack_slots_used;
};

static void trace_intern_free(struct mn__trace_intern_s *in) {
  if (!in) return;
  free(in->frame_hash);
  free(in->stack_hash);
  free(in->frame_slots);
  free(in->stack_slots);
  free(in);
}

/* The trace's private part, made on first use (NULL when out of host memory). */
static struct mn__trace_intern_s *intern_get(mn_trace_t *t) {
  if (!t->intern_) t->intern_ = mn__calloc(1, sizeof *t->intern_);
  return t->intern_;
}

static uint64_t g_hash_seed;
static pthread_once_t g_hash_once = PTHREAD_ONCE_INIT;
static void hash_seed_init(void) { g_hash_seed = mn__random_u64(); }

/* MurmurHash3's 64-bit finalizer: a bijection that mixes every bit. */
static uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

/* Folds n bytes into h, 8 at a time (the length first, so "ab" + "c" != "a" + "bc"). */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  h = mix64(h ^ (uint64_t)n);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  uint64_t w = 0;
  for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
  return mix64(h ^ w ^ 0x5bd1e9955bd1e995ull);
}

static uint64_t frame_hash(const char *file, size_t flen, const char *name, size_t nlen, uint32_t line) {
  pthread_once(&g_hash_once, hash_seed_init);
  return hash_bytes(hash_bytes(g_hash_seed ^ line, file, flen), name, nlen);
}

static uint64_t stack_hash(const uint32_t *ids, size_t n) {
  pthread_once(&g_hash_once, hash_seed_init);
  return hash_bytes(~g_hash_seed, ids, n * sizeof *ids);
}

static uint32_t frame_find(const mn_trace_t *t, uint64_t h, const char *file, size_t flen, const char *name,
                           size_t nlen, uint32_t line) {
  const struct mn__trace_intern_s *in = t->intern_;
  if (!in || !in->frame_slots_cap) return 0;
  for (size_t k = (size_t)h & (in->frame_slots_cap - 1);; k = (k + 1) & (in->frame_slots_cap - 1)) {
    uint32_t id = in->frame_slots[k];
    if (!id) return 0;
    const mn_trace_frame_t *f = &t->frames[id - 1];
    if (in->frame_hash[id - 1] == h && f->line == line && strncmp(f->file, file, flen) == 0 &&
        f->file[flen] == '\0' && strncmp(f->name, name, nlen) == 0 && f->name[nlen] == '\0')
      return id;
  }
}

/* Appends a frame (file[0..flen), name[0..nlen), no NUL inside) whose hash is
 * h; it enters the table unless `repeat` (an equal frame is there already: a
 * file may repeat one). Nothing changes on failure. */
static mn_status frame_push(mn_trace_t *t, const char *func, const char *file, size_t flen, const char *name,
                            size_t nlen, uint32_t line, uint64_t h, bool repeat, uint32_t *id) {
  if (t->nframes >= UINT32_MAX - 1)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%zu frames is the most a trace holds", t->nframes);
  struct mn__trace_intern_s *in = intern_get(t);
  char *buf = in ? mn__malloc(flen + nlen + 2) : NULL;
  if (!buf || !mn__array_grow((void **)&t->frames, &in->frames_cap, t->nframes + 1, sizeof *t->frames) ||
      !mn__array_grow((void **)&in->frame_hash, &in->frame_hash_cap, t->nframes + 1, sizeof *in->frame_hash) ||
      (!repeat && !mn__idtable_reserve(&in->frame_slots, &in->frame_slots_cap, in->frame_slots_used, in->frame_hash))) {
    free(buf);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for %zu frames", t->nframes + 1);
  }
  memcpy(buf, file, flen);
  buf[flen] = '\0';
  memcpy(buf + flen + 1, name, nlen);
  buf[flen + 1 + nlen] = '\0';
  t->frames[t->nframes] = (mn_trace_frame_t){.file = buf, .name = buf + flen + 1, .line = line};
  in->frame_hash[t->nframes] = h;
  t->nframes++;
  if (!repeat) {
    mn__idtable_put(in->frame_slots, in->frame_slots_cap, h, (uint32_t)t->nframes);
    in->frame_slots_used++;
  }
  *id = (uint32_t)t->nframes;
  return MN_OK;
}

static uint32_t stack_find(const mn_trace_t *t, uint64_t h, const uint32_t *ids, size_t n) {
  const struct mn__trace_intern_s *in = t->intern_;
  if (!in || !in->stack_slots_cap) return 0;
  for (size_t k = (size_t)h & (in->stack_slots_cap - 1);; k = (k + 1) & (in->stack_slots_cap - 1)) {
    uint32_t id = in->stack_slots[k];
    if (!id) return 0;
    uint32_t a = t->stack_start[id - 1], b = t->stack_start[id];
    if (in->stack_hash[id - 1] == h && b - a == n && memcmp(t->stack_frames + a, ids, n * sizeof *ids) == 0)
      return id;
  }
}

/* Appends a stack of n >= 1 existing frame ids whose hash is h, like frame_push. */
static mn_status stack_push(mn_trace_t *t, const char *func, const uint32_t *ids, size_t n, uint64_t h, bool repeat,
                            uint32_t *id) {
  uint32_t used = t->nstacks ? t->stack_start[t->nstacks] : 0;
  if (t->nstacks >= UINT32_MAX - 1 || n > UINT32_MAX - used)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%zu stacks of %" PRIu32 " frame ids is the most a trace holds",
                     t->nstacks, used);
  /* its n >= 1 frame ids were checked against the trace's frames, and the
   * first frame_push made the intern tables */
  struct mn__trace_intern_s *in = t->intern_;
  if (!in) return mn__error(MN_ERR_INTERNAL, func, "a stack of %zu frame ids in a trace without frames", n);
  if (!mn__array_grow((void **)&t->stack_start, &in->start_cap, t->nstacks + 2, sizeof *t->stack_start) ||
      !mn__array_grow((void **)&in->stack_hash, &in->stack_hash_cap, t->nstacks + 1, sizeof *in->stack_hash) ||
      !mn__array_grow((void **)&t->stack_frames, &in->ids_cap, (size_t)used + n, sizeof *t->stack_frames) ||
      (!repeat && !mn__idtable_reserve(&in->stack_slots, &in->stack_slots_cap, in->stack_slots_used, in->stack_hash)))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for %zu stacks", t->nstacks + 1);
  memcpy(t->stack_frames + used, ids, n * sizeof *ids);
  t->stack_start[t->nstacks] = used;
  t->stack_start[t->nstacks + 1] = used + (uint32_t)n;
  in->stack_hash[t->nstacks] = h;
  t->nstacks++;
  if (!repeat) {
    mn__idtable_put(in->stack_slots, in->stack_slots_cap, h, (uint32_t)t->nstacks);
    in->stack_slots_used++;
  }
  *id = (uint32_t)t->nstacks;
  return MN_OK;
}

/* ---- percent-encoding of frame files and names ---- */

/* Whether byte i of s[0..n) is written %XX: in a file a blank, `%`, a control
 * byte or >= 0x7f (and the file "-" whole, which would mean unknown); in a
 * name the same but inner blanks (a leading or trailing one is escaped, as a
 * reader trims them). */
static bool must_escape(const char *s, size_t n, size_t i, bool is_file) {
  unsigned char c = (unsigned char)s[i];
  if (c < 0x20 || c >= 0x7f || c == '%') return true;
  if (c == ' ') return is_file || i == 0 || i == n - 1;
  return is_file && n == 1 && c == '-';
}

static size_t encoded_len(const char *s, size_t n, bool is_file) {
  if (is_file && n == 0) return 1; /* "-" */
  size_t len = 0;
  for (size_t i = 0; i < n; i++) len += must_escape(s, n, i, is_file) ? 3 : 1;
  return len;
}

/* Decimal digits of v. */
static size_t dec_len(uint64_t v) {
  size_t d = 1;
  while (v >= 10) {
    v /= 10;
    d++;
  }
  return d;
}

/* The length of frame id's line as a writer writes it, newline excluded. */
static size_t frame_line_len(size_t id, const char *file, size_t flen, const char *name, size_t nlen, uint32_t line) {
  size_t len = 6 + dec_len(id) + 1 + dec_len(line) + 1 + encoded_len(file, flen, true);
  return nlen ? len + 1 + encoded_len(name, nlen, false) : len;
}

mn_status mn_trace_frame_add(mn_trace_t *t, const char *file, uint32_t line, const char *name, uint32_t *id) {
  MN__CHECK_ARG(t != NULL && id != NULL, "t and id must not be NULL");
  if (!file) file = "";
  if (!name) name = "";
  size_t flen = strlen(file), nlen = strlen(name);
  uint64_t h = frame_hash(file, flen, name, nlen, line);
  uint32_t found = frame_find(t, h, file, flen, name, nlen, line);
  if (found) {
    *id = found;
    return MN_OK;
  }
  size_t ll = frame_line_len(t->nframes + 1, file, flen, name, nlen, line);
  MN__CHECK_ARG(ll <= MN_TRACE_LINE_MAX, "the frame's line would be %zu bytes, over the %d-byte line (file %.40s...)",
                ll, MN_TRACE_LINE_MAX, file);
  return frame_push(t, __func__, file, flen, name, nlen, line, h, false, id);
}

mn_status mn_trace_stack_add(mn_trace_t *t, const uint32_t *frame_ids, size_t n, uint32_t *id) {
  MN__CHECK_ARG(t != NULL && id != NULL, "t and id must not be NULL");
  MN__CHECK_ARG(n >= 1 && frame_ids != NULL, "a stack holds at least one frame id (n = %zu)", n);
  for (size_t i = 0; i < n; i++)
    MN__CHECK_ARG(frame_ids[i] >= 1 && frame_ids[i] <= t->nframes,
                  "frame id %" PRIu32 " (position %zu) is not a frame of the trace (1..%zu)", frame_ids[i], i,
                  t->nframes);
  uint64_t h = stack_hash(frame_ids, n);
  uint32_t found = stack_find(t, h, frame_ids, n);
  if (found) {
    *id = found;
    return MN_OK;
  }
  return stack_push(t, __func__, frame_ids, n, h, false, id);
}

size_t mn_trace_stack_get(const mn_trace_t *t, uint32_t id, const uint32_t **frame_ids) {
  if (!t || id == 0 || id > t->nstacks || !t->stack_start) return 0;
  if (frame_ids) *frame_ids = t->stack_frames + t->stack_start[id - 1];
  return t->stack_start[id] - t->stack_start[id - 1];
}

const mn_trace_frame_t *mn_trace_frame_get(const mn_trace_t *t, uint32_t id) {
  if (!t || id == 0 || id > t->nframes) return NULL;
  return &t->frames[id - 1];
}

/* ---- annotations (version 4) ------------------------------------------------ */

static const char *const k_stage_names[] = {"mark", "start", "end"};

const char *mn_trace_annotation_stage_name(mn_trace_annotation_stage stage) {
  return (unsigned)stage < 3 ? k_stage_names[stage] : NULL;
}

/* The length of an annotation's line as a writer writes it, newline excluded. */
static size_t annotation_line_len(const mn_trace_annotation_t *a, size_t nlen) {
  size_t len = 8 + 1 + dec_len(a->time_us) + 1 + dec_len(a->device) + 1 + strlen(k_stage_names[a->stage]) + 1 +
               dec_len(a->stack);
  return nlen ? len + 1 + encoded_len(a->name, nlen, false) : len;
}

/* Appends a copy of a (stage, device and stack checked; name not NULL) at the
 * end of the trace; nothing changes on failure. */
static mn_status annotation_push(mn_trace_t *t, const char *func, const mn_trace_annotation_t *a, size_t nlen) {
  struct mn__trace_intern_s *in = intern_get(t);
  char *name = in ? dup_n(a->name, nlen) : NULL;
  if (!name || !mn__array_grow((void **)&t->annotations, &in->annotations_cap, t->nannotations + 1,
                               sizeof *t->annotations)) {
    free(name);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for %zu annotations", t->nannotations + 1);
  }
  mn_trace_annotation_t *d = &t->annotations[t->nannotations++];
  *d = *a;
  d->name = name;
  d->entry = t->nentries;
  return MN_OK;
}

mn_status mn_trace_annotation_add(mn_trace_t *t, const mn_trace_annotation_t *a) {
  MN__CHECK_ARG(t != NULL && a != NULL, "t and a must not be NULL");
  MN__CHECK_ARG((unsigned)a->stage < 3, "stage %d is not a mn_trace_annotation_stage", (int)a->stage);
  MN__CHECK_ARG(a->device <= INT32_MAX, "device index %" PRIu32 " is over %d", a->device, INT32_MAX);
  MN__CHECK_ARG(a->stack <= t->nstacks, "stack %" PRIu32 " is not a stack id (the trace has %zu stacks)", a->stack,
                t->nstacks);
  mn_trace_annotation_t c = *a;
  if (!c.name) c.name = "";
  size_t nlen = strlen(c.name), ll = annotation_line_len(&c, nlen);
  MN__CHECK_ARG(ll <= MN_TRACE_LINE_MAX, "the annotation's line would be %zu bytes, over the %d-byte line (%.40s...)",
                ll, MN_TRACE_LINE_MAX, c.name);
  return annotation_push(t, __func__, &c, nlen);
}

/* ---- liveness: pair each free_requested with the alloc it frees ---------- */

/* Describes entry i for a message: "name:line" or "entry i". */
static void where(const mn_trace_t *t, size_t i, const char *name, char *buf, size_t n) {
  if (t->entries[i].line) snprintf(buf, n, "%s:%" PRIu32, name ? name : "<trace>", t->entries[i].line);
  else snprintf(buf, n, "entry %zu", i);
}

/* The live allocation of each (device, address) while trace_match walks the
 * entries in order: an open-addressing table (linear probing, never shrinking:
 * a freed address keeps its slot, live SIZE_MAX), doubled at half full. */
typedef struct match_slot_s {
  uint64_t address;
  size_t live; /* the live alloc's entry index; SIZE_MAX: none */
  uint32_t device;
  bool used;
} match_slot_t;

typedef struct match_table_s {
  match_slot_t *slots;
  size_t cap, count; /* cap: a power of two */
} match_table_t;

static size_t match_hash(uint64_t address, uint32_t device, size_t cap) {
  uint64_t x = address ^ ((uint64_t)device << 48) ^ ((uint64_t)device * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

/* (Re)makes the table with cap slots, moving what it held; false when out of memory. */
static bool match_table_resize(match_table_t *mt, size_t cap) {
  match_slot_t *slots = mn__calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (size_t k = 0; k < mt->cap; k++) {
    if (!mt->slots[k].used) continue;
    size_t h = match_hash(mt->slots[k].address, mt->slots[k].device, cap);
    while (slots[h].used) h = (h + 1) & (cap - 1);
    slots[h] = mt->slots[k];
  }
  free(mt->slots);
  mt->slots = slots;
  mt->cap = cap;
  return true;
}

/* match (nentries slots, may be NULL): for an alloc, the index of its free
 * (SIZE_MAX while live at the end); for a free_requested, its alloc; others SIZE_MAX.
 * One pass in entry order (linear): the first offending entry is the first found. */
static mn_status trace_match(const mn_trace_t *t, size_t *match, const char *name, const char *func) {
  size_t n = 0;
  for (size_t i = 0; i < t->nentries; i++) {
    if (match) match[i] = SIZE_MAX;
    n += t->entries[i].action == MN_TRACE_ALLOC || t->entries[i].action == MN_TRACE_FREE_REQUESTED;
  }
  match_table_t mt = {NULL, 0, 0};
  if (n && !match_table_resize(&mt, 1024))
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for %zu references", n);
  size_t bad = SIZE_MAX, bad_other = SIZE_MAX; /* first offending entry, and its live alloc */
  for (size_t i = 0; n && i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->action != MN_TRACE_ALLOC && e->action != MN_TRACE_FREE_REQUESTED) continue;
    size_t h = match_hash(e->address, e->device, mt.cap);
    while (mt.slots[h].used && (mt.slots[h].address != e->address || mt.slots[h].device != e->device))
      h = (h + 1) & (mt.cap - 1);
    match_slot_t *sl = &mt.slots[h];
    if (!sl->used) {
      *sl = (match_slot_t){e->address, SIZE_MAX, e->device, true};
      if (++mt.count * 2 > mt.cap) { /* grow at half full; sl moves */
        if (!match_table_resize(&mt, mt.cap * 2)) {
          free(mt.slots);
          return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory for %zu references", n);
        }
        h = match_hash(e->address, e->device, mt.cap);
        while (!mt.slots[h].used || mt.slots[h].address != e->address || mt.slots[h].device != e->device)
          h = (h + 1) & (mt.cap - 1);
        sl = &mt.slots[h];
      }
    }
    bool is_alloc = e->action == MN_TRACE_ALLOC;
    if (is_alloc == (sl->live != SIZE_MAX)) { /* alloc while live, or free while not */
      bad = i;
      bad_other = sl->live;
      break;
    }
    if (is_alloc) {
      sl->live = i;
    } else {
      if (match) {
        match[i] = sl->live;
        match[sl->live] = i;
      }
      sl->live = SIZE_MAX;
    }
  }
  free(mt.slots);
  if (bad == SIZE_MAX) return MN_OK;
  char w[600], o[600];
  where(t, bad, name, w, sizeof w);
  const mn_trace_entry_t *e = &t->entries[bad];
  if (e->action == MN_TRACE_ALLOC) {
    where(t, bad_other, name, o, sizeof o);
    return mn__error(MN_ERR_FORMAT, func, "%s: alloc of 0x%" PRIx64 ", which is already live (allocated at %s)",
                     w, e->address, o);
  }
  return mn__error(MN_ERR_FORMAT, func, "%s: free_requested of 0x%" PRIx64 ", which is not live", w, e->address);
}

mn_status mn_trace_validate(const mn_trace_t *trace) {
  MN__CHECK_ARG(trace != NULL, "trace must not be NULL");
  return trace_match(trace, NULL, NULL, __func__);
}

/* For replay.c and the CLI's report (profiling/text.h). */
mn_status mn__trace_match(const mn_trace_t *trace, size_t *match) {
  return trace_match(trace, match, NULL, "mn_trace_replay");
}

/* ---- reader ------------------------------------------------------------------ */

/* ST_ANNOT: an annotate line (version 4) came before any pre or event line. */
typedef enum { ST_VERSION, ST_META, ST_FRAMES, ST_STACKS, ST_ANNOT, ST_PRE, ST_EVENTS, ST_END } mn__parse_state;

static const char *state_line_name(mn__parse_state s) {
  return s == ST_FRAMES ? "frame" : s == ST_STACKS ? "stack" : s == ST_ANNOT ? "annotate" : s == ST_PRE ? "pre" : "event";
}

typedef struct mn__parser_s {
  const char *name;
  uint64_t line;
  mn__parse_state state;
  uint64_t count; /* pre + event + annotate lines (not frame and stack lines) */
  mn_trace_t *t;
  mn__nameset_t meta_keys; /* the meta keys so far (keys point into the text parsed) */
} mn__parser_t;

/* A format error at the current line. */
#define perr(p, ...) mn__text_error("mn_trace_parse", (p)->name, (p)->line, __VA_ARGS__)

/* Splits buf in place on blanks; returns the field count (at most max). */
static size_t split_fields(char *buf, char **f, size_t max) {
  size_t n = 0;
  char *s = buf;
  for (;;) {
    while (is_blank(*s)) s++;
    if (!*s) return n;
    if (n == max) return max + 1;
    f[n++] = s;
    while (*s && !is_blank(*s)) s++;
    if (*s) *s++ = '\0';
  }
}

static mn_status parse_entry(mn__parser_t *p, char **f, size_t nf, bool pre) {
  mn_trace_entry_t e;
  memset(&e, 0, sizeof e);
  e.pre = pre;
  size_t maxf = p->t->version >= 3 ? 8 : p->t->version == 2 ? 7 : 6;
  if (nf < 5 || nf > maxf)
    return perr(p, "%s line has %zu fields, expected 5 to %zu (%s action stream address size [block_size%s])",
                pre ? "pre" : "event", nf, maxf, pre ? "pre" : "time_us",
                maxf == 8 ? " [device [stack]]" : maxf == 7 ? " [device]" : "");
  if (!pre && !mn__parse_dec(f[0], &e.time_us)) return perr(p, "time \"%.32s\" is not a decimal", f[0]);
  bool found = false;
  for (int a = 0; a < MN_TRACE_ACTION_COUNT && !found; a++) {
    if (strcmp(f[1], mn_trace_action_name((mn_trace_action)a)) == 0) {
      e.action = (mn_trace_action)a;
      found = true;
    }
  }
  if (!found) return perr(p, "unknown action \"%.32s\"", f[1]);
  if (pre && !pre_action_ok(e.action))
    return perr(p, "pre line with action %s (only alloc, segment_alloc, segment_map)", f[1]);
  if (!mn__parse_dec(f[2], &e.stream)) return perr(p, "stream \"%.32s\" is not a decimal", f[2]);
  if (!mn__parse_hex(f[3], &e.address))
    return perr(p, "address \"%.32s\" is not 0x followed by 1-16 hex digits", f[3]);
  if (!mn__parse_dec(f[4], &e.size)) return perr(p, "size \"%.32s\" is not a decimal", f[4]);
  if (nf >= 6 && !mn__parse_dec(f[5], &e.block_size)) return perr(p, "block_size \"%.32s\" is not a decimal", f[5]);
  uint64_t dev = 0;
  if (nf >= 7 && (!mn__parse_dec(f[6], &dev) || dev > INT32_MAX))
    return perr(p, "device \"%.32s\" is not a decimal up to %d", f[6], INT32_MAX);
  e.device = (uint32_t)dev;
  uint64_t stack = 0;
  if (nf == 8 && (!mn__parse_dec(f[7], &stack) || stack > p->t->nstacks))
    return perr(p, "stack \"%.32s\" is not 0 or a stack id (the file has %zu stacks)", f[7], p->t->nstacks);
  e.stack = (uint32_t)stack;
  if (e.action == MN_TRACE_ALLOC && e.size == 0) return perr(p, "alloc of 0 bytes");
  mn_status st = mn_trace_append(p->t, &e);
  if (st != MN_OK) return mn__error_wrap(st, "mn_trace_parse");
  p->t->entries[p->t->nentries - 1].line = (uint32_t)p->line;
  p->count++;
  return MN_OK;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out (n + 1 bytes); false with why set for a bad
 * escape or a NUL. `what` names the field for the message. */
static bool decode(const char *s, size_t n, char *out, size_t *outlen, const char *what, char *why, size_t whysize) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      out[k++] = s[i];
      continue;
    }
    int hi = -1, lo = -1;
    if (i + 2 < n) {
      hi = hex_digit(s[i + 1]);
      lo = hex_digit(s[i + 2]);
    }
    if (hi < 0 || lo < 0) {
      snprintf(why, whysize, "bad %% escape \"%.*s\" in the %s (%%XX, two hex digits)",
               (int)(n - i < 3 ? n - i : 3), s + i, what);
      return false;
    }
    if (hi == 0 && lo == 0) {
      snprintf(why, whysize, "%%00 (a NUL byte) in the %s", what);
      return false;
    }
    out[k++] = (char)(hi * 16 + lo);
    i += 2;
  }
  out[k] = '\0';
  *outlen = k;
  return true;
}

/* `frame <id> <line> <file> <name>` (version 3). */
static mn_status parse_frame(mn__parser_t *p, const char *line, size_t len) {
  if (p->t->version < 3)
    return perr(p, "frame line in a version %u file (frame and stack lines need version 3)", p->t->version);
  if (p->state > ST_FRAMES) return perr(p, "frame line after the first %s line", state_line_name(p->state));
  p->state = ST_FRAMES;
  const char *tok[3];
  size_t tlen[3], i = 0;
  while (i < len && is_blank(line[i])) i++;
  i += 5; /* "frame" */
  for (int k = 0; k < 3; k++) {
    while (i < len && is_blank(line[i])) i++;
    tok[k] = line + i;
    while (i < len && !is_blank(line[i])) i++;
    tlen[k] = (size_t)(line + i - tok[k]);
    if (tlen[k] == 0) return perr(p, "frame line without %s (frame <id> <line> <file> <name>)",
                                  k == 0 ? "an id" : k == 1 ? "a line number" : "a file");
  }
  while (i < len && is_blank(line[i])) i++;
  const char *name = line + i;
  size_t nlen = len - i;
  while (nlen > 0 && is_blank(name[nlen - 1])) nlen--;
  if (memchr(name, '\t', nlen)) return perr(p, "tab inside the frame's name (writers write %%09)");
  char num[24];
  uint64_t id, ln;
  snprintf(num, sizeof num, "%.*s", (int)(tlen[0] < 23 ? tlen[0] : 23), tok[0]);
  if (tlen[0] > 20 || !mn__parse_dec(num, &id)) return perr(p, "frame id \"%s\" is not a decimal", num);
  if (id != p->t->nframes + 1) return perr(p, "frame id %" PRIu64 ", expected %zu", id, p->t->nframes + 1);
  snprintf(num, sizeof num, "%.*s", (int)(tlen[1] < 23 ? tlen[1] : 23), tok[1]);
  if (tlen[1] > 20 || !mn__parse_dec(num, &ln) || ln > UINT32_MAX)
    return perr(p, "frame line number \"%s\" is not a decimal below 2^32", num);
  char file[MN_TRACE_LINE_MAX + 1], nm[MN_TRACE_LINE_MAX + 1], why[96];
  size_t flen = 0, dnlen = 0;
  if (tlen[2] == 1 && tok[2][0] == '-') file[0] = '\0';
  else if (!decode(tok[2], tlen[2], file, &flen, "frame's file", why, sizeof why)) return perr(p, "%s", why);
  if (!decode(name, nlen, nm, &dnlen, "frame's name", why, sizeof why)) return perr(p, "%s", why);
  uint64_t h = frame_hash(file, flen, nm, dnlen, (uint32_t)ln);
  bool repeat = frame_find(p->t, h, file, flen, nm, dnlen, (uint32_t)ln) != 0;
  uint32_t got;
  mn_status st = frame_push(p->t, "mn_trace_parse", file, flen, nm, dnlen, (uint32_t)ln, h, repeat, &got);
  return st;
}

/* `stack <id> <frame_id> [<frame_id>...]` (version 3). */
static mn_status parse_stack(mn__parser_t *p, const char *line, size_t len) {
  if (p->t->version < 3)
    return perr(p, "stack line in a version %u file (frame and stack lines need version 3)", p->t->version);
  if (p->state > ST_STACKS) return perr(p, "stack line after the first %s line", state_line_name(p->state));
  p->state = ST_STACKS;
  uint32_t ids[MN_TRACE_LINE_MAX / 2 + 1];
  size_t n = 0, i = 0;
  uint64_t id = 0;
  while (i < len && is_blank(line[i])) i++;
  i += 5; /* "stack" */
  for (bool first = true;; first = false) {
    while (i < len && is_blank(line[i])) i++;
    if (i == len) break;
    const char *tok = line + i;
    while (i < len && !is_blank(line[i])) i++;
    size_t tl = (size_t)(line + i - tok);
    char num[24];
    uint64_t v;
    snprintf(num, sizeof num, "%.*s", (int)(tl < 23 ? tl : 23), tok);
    bool ok = tl <= 20 && mn__parse_dec(num, &v);
    if (first) {
      if (!ok) return perr(p, "stack id \"%s\" is not a decimal", num);
      if (v != p->t->nstacks + 1) return perr(p, "stack id %" PRIu64 ", expected %zu", v, p->t->nstacks + 1);
      id = v;
      continue;
    }
    if (!ok || v == 0 || v > p->t->nframes)
      return perr(p, "stack %" PRIu64 ": frame \"%s\" is not a frame id (the file has %zu frames)", id, num,
                  p->t->nframes);
    ids[n++] = (uint32_t)v;
  }
  if (id == 0) return perr(p, "stack line without an id (stack <id> <frame_id> [<frame_id>...])");
  if (n == 0) return perr(p, "stack %" PRIu64 " has no frames", id);
  uint64_t h = stack_hash(ids, n);
  bool repeat = stack_find(p->t, h, ids, n) != 0;
  uint32_t got;
  return stack_push(p->t, "mn_trace_parse", ids, n, h, repeat, &got);
}

/* A decimal token tok[0..tl) of at most 20 digits up to max; false otherwise.
 * num receives its first 23 bytes for messages. */
static bool token_dec(const char *tok, size_t tl, uint64_t max, uint64_t *v, char num[24]) {
  snprintf(num, 24, "%.*s", (int)(tl < 23 ? tl : 23), tok);
  return tl <= 20 && mn__parse_dec(num, v) && *v <= max;
}

/* `annotate <time_us> <device> <stage> <stack> <name>` (version 4). */
static mn_status parse_annotate(mn__parser_t *p, const char *line, size_t len) {
  if (p->t->version < 4) return perr(p, "annotate line in a version %u file (annotations need version 4)",
                                     p->t->version);
  const char *tok[4];
  size_t tlen[4], i = 0;
  while (i < len && is_blank(line[i])) i++;
  i += 8; /* "annotate" */
  static const char *const what[4] = {"a time", "a device", "a stage", "a stack"};
  for (int k = 0; k < 4; k++) {
    while (i < len && is_blank(line[i])) i++;
    tok[k] = line + i;
    while (i < len && !is_blank(line[i])) i++;
    tlen[k] = (size_t)(line + i - tok[k]);
    if (tlen[k] == 0)
      return perr(p, "annotate line without %s (annotate <time_us> <device> <stage> <stack> <name>)", what[k]);
  }
  while (i < len && is_blank(line[i])) i++;
  const char *name = line + i;
  size_t nlen = len - i;
  while (nlen > 0 && is_blank(name[nlen - 1])) nlen--;
  if (memchr(name, '\t', nlen)) return perr(p, "tab inside the annotation's name (writers write %%09)");
  mn_trace_annotation_t a;
  memset(&a, 0, sizeof a);
  char num[24];
  uint64_t v;
  if (!token_dec(tok[0], tlen[0], UINT64_MAX, &a.time_us, num)) return perr(p, "time \"%s\" is not a decimal", num);
  if (!token_dec(tok[1], tlen[1], INT32_MAX, &v, num))
    return perr(p, "device \"%s\" is not a decimal up to %d", num, INT32_MAX);
  a.device = (uint32_t)v;
  int stage = -1;
  for (int s = 0; s < 3; s++)
    if (tlen[2] == strlen(k_stage_names[s]) && memcmp(tok[2], k_stage_names[s], tlen[2]) == 0) stage = s;
  if (stage < 0)
    return perr(p, "annotation stage \"%.*s\" is not start, end or mark", (int)(tlen[2] < 32 ? tlen[2] : 32), tok[2]);
  a.stage = (mn_trace_annotation_stage)stage;
  if (!token_dec(tok[3], tlen[3], p->t->nstacks, &v, num))
    return perr(p, "stack \"%s\" is not 0 or a stack id (the file has %zu stacks)", num, p->t->nstacks);
  a.stack = (uint32_t)v;
  char nm[MN_TRACE_LINE_MAX + 1], why[96];
  size_t dnlen = 0;
  if (!decode(name, nlen, nm, &dnlen, "annotation's name", why, sizeof why)) return perr(p, "%s", why);
  a.name = nm;
  mn_status st = annotation_push(p->t, "mn_trace_parse", &a, dnlen);
  if (st != MN_OK) return st;
  if (p->state < ST_ANNOT) p->state = ST_ANNOT;
  p->count++;
  return MN_OK;
}

static mn_status parse_meta(mn__parser_t *p, const char *line, size_t len) {
  if (p->state == ST_FRAMES || p->state == ST_STACKS) return perr(p, "meta line after a frame or stack line");
  if (p->state == ST_ANNOT) return perr(p, "meta line after an annotate line");
  if (p->state != ST_META) return perr(p, "meta line after the first pre or event line");
  size_t i = 0;
  while (i < len && is_blank(line[i])) i++;
  i += 4; /* "meta" */
  while (i < len && is_blank(line[i])) i++;
  size_t k0 = i;
  while (i < len && !is_blank(line[i])) i++;
  size_t klen = i - k0;
  if (klen == 0) return perr(p, "meta line without a key");
  if (!meta_key_ok(line + k0, klen))
    return perr(p, "meta key \"%.*s\" is not 1-%d characters of [A-Za-z0-9_.-]", (int)(klen > 64 ? 64 : klen),
                line + k0, MN_TRACE_META_KEY_MAX);
  while (i < len && is_blank(line[i])) i++;
  size_t vlen = len - i;
  while (vlen > 0 && is_blank(line[i + vlen - 1])) vlen--;
  if (memchr(line + i, '\r', vlen)) return perr(p, "carriage return inside the meta value");
  switch (mn__nameset_insert(&p->meta_keys, line + k0, klen, p->t->nmeta, NULL)) {
    case MN__NAMESET_NEW: break;
    case MN__NAMESET_DUPLICATE: return perr(p, "duplicate meta key %.*s", (int)klen, line + k0);
    case MN__NAMESET_NOMEM: return mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_parse", "out of host memory");
  }
  mn_status st = meta_append(p->t, line + k0, klen, line + i, vlen);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, "mn_trace_parse");
}

/* One line (len bytes, no newline, CR removed). */
static mn_status parse_line(mn__parser_t *p, const char *line, size_t len) {
  if (memchr(line, '\0', len)) return perr(p, "NUL byte in line");
  size_t i = 0;
  while (i < len && is_blank(line[i])) i++;
  if (p->state == ST_VERSION) {
    char buf[MN_TRACE_LINE_MAX + 1], *f[3];
    memcpy(buf, line, len);
    buf[len] = '\0';
    size_t nf = split_fields(buf, f, 2);
    if (nf < 1 || strcmp(f[0], "mnemo-trace") != 0)
      return perr(p, "not a mnemo trace: the first line must be \"mnemo-trace %d\"", MN_TRACE_FORMAT_VERSION);
    uint64_t v;
    if (nf != 2 || !mn__parse_dec(f[1], &v)) return perr(p, "bad version line (expected \"mnemo-trace <version>\")");
    if (v < 1 || v > MN_TRACE_FORMAT_VERSION)
      return perr(p, "unsupported trace version %" PRIu64 " (this reader knows versions 1 to %d)", v,
                  MN_TRACE_FORMAT_VERSION);
    p->t->version = (unsigned)v;
    p->state = ST_META;
    return MN_OK;
  }
  if (i == len) return MN_OK; /* blank */
  if (p->state == ST_END) return perr(p, "text after the end line");
  if (line[i] == '#') return MN_OK;
  bool is_meta = len - i >= 4 && memcmp(line + i, "meta", 4) == 0 && (len - i == 4 || is_blank(line[i + 4]));
  if (is_meta) return parse_meta(p, line, len);
  char why[96];
  if (!mn__text_printable(line, len, why, sizeof why)) return perr(p, "%s", why);
  size_t wlen = 0;
  while (i + wlen < len && !is_blank(line[i + wlen])) wlen++;
  if (wlen == 5 && memcmp(line + i, "frame", 5) == 0) return parse_frame(p, line, len);
  if (wlen == 5 && memcmp(line + i, "stack", 5) == 0) return parse_stack(p, line, len);
  if (wlen == 8 && memcmp(line + i, "annotate", 8) == 0) return parse_annotate(p, line, len);
  char buf[MN_TRACE_LINE_MAX + 1], *f[MN__TRACE_MAX_FIELDS];
  memcpy(buf, line, len);
  buf[len] = '\0';
  size_t nf = split_fields(buf, f, MN__TRACE_MAX_FIELDS);
  if (strcmp(f[0], "end") == 0) {
    uint64_t n;
    if (nf != 2 || !mn__parse_dec(f[1], &n)) return perr(p, "bad end line (expected \"end <count>\")");
    if (n != p->count)
      return perr(p, "end line counts %" PRIu64 " %s lines, the file has %" PRIu64 " (damaged or edited)", n,
                  p->t->version >= 4 ? "pre, event and annotate" : "pre and event", p->count);
    p->state = ST_END;
    return MN_OK;
  }
  if (strcmp(f[0], "pre") == 0) {
    if (p->state == ST_EVENTS) return perr(p, "pre line after an event line");
    p->state = ST_PRE;
    return parse_entry(p, f, nf, true);
  }
  if (f[0][0] >= '0' && f[0][0] <= '9') {
    p->state = ST_EVENTS;
    return parse_entry(p, f, nf, false);
  }
  return perr(p, "unknown line kind \"%.32s\" (expected meta, %spre, %send, # or a time)", f[0],
              p->t->version >= 3 ? "frame, stack, " : "", p->t->version >= 4 ? "annotate, " : "");
}

mn_status mn_trace_parse(const char *text, size_t len, const char *name, mn_trace_t **out) {
  MN__CHECK_ARG(out != NULL && (text != NULL || len == 0), "text and out must not be NULL");
  mn__parser_t p = {.name = name ? name : "<memory>", .line = 0, .state = ST_VERSION};
  if (len == 0) return mn__error(MN_ERR_FORMAT, __func__, "%s: empty file (no \"mnemo-trace\" line)", p.name);
  mn_status st = mn_trace_create(&p.t);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn__nameset_init(&p.meta_keys, 0);
  mn__lines_t lines = {.text = text, .len = len, .max = MN_TRACE_LINE_MAX};
  char why[96];
  const char *s = NULL;
  size_t n = 0;
  mn__line_result lr;
  while ((lr = mn__lines_next(&lines, &s, &n, why, sizeof why)) != MN__LINE_END) {
    p.line = lines.line;
    if (lr == MN__LINE_BAD) {
      st = perr(&p, "%s", why);
      goto fail;
    }
    st = parse_line(&p, s, n);
    if (st != MN_OK) goto fail;
  }
  if (p.state != ST_END) {
    st = perr(&p, "truncated file: no end line after %" PRIu64 " %s lines", p.count,
              p.t->version >= 4 ? "pre, event and annotate" : "pre and event");
    goto fail;
  }
  st = trace_match(p.t, NULL, p.name, __func__);
  if (st != MN_OK) goto fail;
  mn__nameset_free(&p.meta_keys);
  *out = p.t;
  return MN_OK;
fail:
  mn__nameset_free(&p.meta_keys);
  mn_trace_destroy(p.t);
  return st;
}

mn_status mn_trace_read(const char *path, mn_trace_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__trace_parse_file(__func__, path, mn_trace_parse, out);
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct mn__strbuf_s {
  char *p;
  size_t len, cap;
  bool oom;
} mn__strbuf_t;

static void sb_printf(mn__strbuf_t *b, const char *fmt, ...) MN__PRINTF(2, 3);
static void sb_printf(mn__strbuf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)k < b->cap - b->len) {
      b->len += (size_t)k;
      return;
    }
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap - b->len <= (size_t)k) cap *= 2;
    char *np = mn__realloc(b->p, cap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
}

/* Appends s[0..n) percent-encoded (a file: "-" when empty). */
static void sb_encode(mn__strbuf_t *b, const char *s, size_t n, bool is_file) {
  static const char hex[] = "0123456789ABCDEF";
  if (is_file && n == 0) {
    sb_printf(b, "-");
    return;
  }
  char chunk[256];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k + 3 > sizeof chunk) {
      sb_printf(b, "%.*s", (int)k, chunk);
      k = 0;
    }
    unsigned char c = (unsigned char)s[i];
    if (must_escape(s, n, i, is_file)) {
      chunk[k++] = '%';
      chunk[k++] = hex[c >> 4];
      chunk[k++] = hex[c & 15];
    } else {
      chunk[k++] = (char)c;
    }
  }
  sb_printf(b, "%.*s", (int)k, chunk);
}

static mn_status check_writable(const mn_trace_t *t) {
  mn__nameset_t seen;
  mn__nameset_init(&seen, t->nmeta);
  mn_status st = MN_OK;
  for (size_t i = 0; i < t->nmeta && st == MN_OK; i++) {
    const char *k = t->meta[i].key, *v = t->meta[i].value;
    if (!k || !v || !meta_key_ok(k, strlen(k)) || strpbrk(v, "\r\n") || is_blank(v[0]) ||
        (v[0] && is_blank(v[strlen(v) - 1])) || 5 + strlen(k) + 1 + strlen(v) > MN_TRACE_LINE_MAX) {
      st = mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "meta entry %zu (%.64s) breaks the format", i,
                     k ? k : "(null)");
      break;
    }
    switch (mn__nameset_insert(&seen, k, strlen(k), i, NULL)) {
      case MN__NAMESET_NEW: break;
      case MN__NAMESET_DUPLICATE:
        st = mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "duplicate meta key %s", k);
        break;
      case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, "mn_trace_format", "out of host memory"); break;
    }
  }
  mn__nameset_free(&seen);
  if (st != MN_OK) return st;
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if ((unsigned)e->action >= MN_TRACE_ACTION_COUNT || (e->pre && !pre_action_ok(e->action)) ||
        (e->pre && i > 0 && !t->entries[i - 1].pre) || (e->action == MN_TRACE_ALLOC && e->size == 0) ||
        e->device > INT32_MAX || e->stack > t->nstacks)
      return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "entry %zu breaks the format", i);
  }
  for (size_t i = 0; i < t->nframes; i++) {
    const mn_trace_frame_t *f = &t->frames[i];
    if (!f->file || !f->name ||
        frame_line_len(i + 1, f->file, strlen(f->file), f->name, strlen(f->name), f->line) > MN_TRACE_LINE_MAX)
      return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "frame %zu breaks the format", i + 1);
  }
  if (t->nstacks && (!t->stack_start || !t->stack_frames || t->stack_start[0] != 0))
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "the stack arrays are missing");
  for (size_t s = 1; s <= t->nstacks; s++) {
    if (t->stack_start[s] <= t->stack_start[s - 1])
      return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "stack %zu has no frames", s);
    for (uint32_t k = t->stack_start[s - 1]; k < t->stack_start[s]; k++)
      if (t->stack_frames[k] == 0 || t->stack_frames[k] > t->nframes)
        return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "stack %zu names frame %" PRIu32
                         ", not a frame of the trace", s, t->stack_frames[k]);
  }
  if (t->nannotations && !t->annotations)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "the annotations array is missing");
  for (size_t i = 0; i < t->nannotations; i++) {
    const mn_trace_annotation_t *a = &t->annotations[i];
    if ((unsigned)a->stage >= 3 || a->device > INT32_MAX || a->stack > t->nstacks || !a->name ||
        a->entry > t->nentries || (i > 0 && a->entry < t->annotations[i - 1].entry) ||
        annotation_line_len(a, strlen(a->name)) > MN_TRACE_LINE_MAX)
      return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_format", "annotation %zu breaks the format", i);
  }
  st = trace_match(t, NULL, NULL, "mn_trace_format");
  if (st == MN_ERR_FORMAT) st = MN_ERR_INVALID_ARGUMENT; /* a trace to write that breaks the format */
  return st;
}

mn_status mn_trace_format(const mn_trace_t *trace, char **text, size_t *len) {
  MN__CHECK_ARG(trace != NULL && text != NULL, "trace and text must not be NULL");
  mn_status st = check_writable(trace);
  if (st != MN_OK) return st;
  mn__strbuf_t b = {0};
  /* Version 4 when there are annotations, else 3 when there are frames
   * (stacks need them), else 1 unless an entry is on another device than 0. */
  bool v4 = trace->nannotations > 0, v3 = v4 || trace->nframes > 0, v2 = v3;
  for (size_t i = 0; i < trace->nentries && !v2; i++) v2 = trace->entries[i].device != 0;
  sb_printf(&b, "mnemo-trace %d\n", v4 ? 4 : v3 ? 3 : v2 ? 2 : 1);
  for (size_t i = 0; i < trace->nmeta; i++) {
    if (trace->meta[i].value[0]) sb_printf(&b, "meta %s %s\n", trace->meta[i].key, trace->meta[i].value);
    else sb_printf(&b, "meta %s\n", trace->meta[i].key);
  }
  for (size_t i = 0; i < trace->nframes; i++) {
    const mn_trace_frame_t *f = &trace->frames[i];
    sb_printf(&b, "frame %zu %" PRIu32 " ", i + 1, f->line);
    sb_encode(&b, f->file, strlen(f->file), true);
    if (f->name[0]) {
      sb_printf(&b, " ");
      sb_encode(&b, f->name, strlen(f->name), false);
    }
    sb_printf(&b, "\n");
  }
  for (size_t s = 1; s <= trace->nstacks; s++) {
    /* The innermost MN_TRACE_STACK_MAX frames, fewer when the line would be too long. */
    const uint32_t *ids = trace->stack_frames + trace->stack_start[s - 1];
    size_t n = trace->stack_start[s] - trace->stack_start[s - 1], k = 0, ll = 6 + dec_len(s);
    while (k < n && k < MN_TRACE_STACK_MAX && ll + 1 + dec_len(ids[k]) <= MN_TRACE_LINE_MAX) ll += 1 + dec_len(ids[k++]);
    sb_printf(&b, "stack %zu", s);
    for (size_t j = 0; j < k; j++) sb_printf(&b, " %" PRIu32, ids[j]);
    sb_printf(&b, "\n");
  }
  size_t k = 0; /* the next annotation */
  for (size_t i = 0; i <= trace->nentries; i++) {
    for (; k < trace->nannotations && trace->annotations[k].entry == i; k++) {
      const mn_trace_annotation_t *a = &trace->annotations[k];
      sb_printf(&b, "annotate %" PRIu64 " %" PRIu32 " %s %" PRIu32, a->time_us, a->device, k_stage_names[a->stage],
                a->stack);
      if (a->name[0]) {
        sb_printf(&b, " ");
        sb_encode(&b, a->name, strlen(a->name), false);
      }
      sb_printf(&b, "\n");
    }
    if (i == trace->nentries) break;
    const mn_trace_entry_t *e = &trace->entries[i];
    if (e->pre) sb_printf(&b, "pre");
    else sb_printf(&b, "%" PRIu64, e->time_us);
    sb_printf(&b, " %s %" PRIu64 " 0x%" PRIx64 " %" PRIu64, mn_trace_action_name(e->action), e->stream,
              e->address, e->size);
    if (v3) sb_printf(&b, " %" PRIu64 " %" PRIu32 " %" PRIu32, e->block_size, e->device, e->stack);
    else if (v2) sb_printf(&b, " %" PRIu64 " %" PRIu32, e->block_size, e->device);
    else if (e->block_size) sb_printf(&b, " %" PRIu64, e->block_size);
    sb_printf(&b, "\n");
  }
  sb_printf(&b, "end %zu\n", trace->nentries + trace->nannotations);
  if (b.oom) {
    free(b.p);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory formatting %zu entries", trace->nentries);
  }
  *text = b.p;
  if (len) *len = b.len;
  return MN_OK;
}

mn_status mn_trace_write(const mn_trace_t *trace, const char *path) {
  MN__CHECK_ARG(trace != NULL && path != NULL, "trace and path must not be NULL");
  char *text = NULL;
  size_t len = 0;
  mn_status st = mn_trace_format(trace, &text, &len);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = mn__file_write_atomic(__func__, path, text, len);
  if (st == MN_ERR_NOT_FOUND) st = MN_ERR_IO; /* this call's status for a folder it cannot write in */
  free(text);
  return st;
}

/* ---- recorder ------------------------------------------------------------------ */

void mn_trace_recorder_sink(void *user, const mn_trace_event_t *event) {
  mn_trace_t *t = user;
  if (!t || !event) return;
  if ((unsigned)event->action >= MN_TRACE_ACTION_COUNT ||
      (event->action == MN_TRACE_ALLOC && event->size == 0 && event->requested_size == 0)) {
    t->dropped++;
    return;
  }
  if (t->nentries == 0 && t->origin_ns == 0) {
    t->origin_ns = event->time_ns;
    char v[32], dev[32];
    snprintf(v, sizeof v, "%" PRIu64, event->time_ns / 1000);
    mn_device_format(event->device, dev, sizeof dev);
    if (mn_trace_meta_set(t, "recorded_by", "mnemo") != MN_OK || mn_trace_meta_set(t, "device", dev) != MN_OK ||
        mn_trace_meta_set(t, "time_origin_us", v) != MN_OK)
      t->dropped++;
  }
  mn_trace_entry_t e;
  memset(&e, 0, sizeof e);
  e.action = event->action;
  e.time_us = event->time_ns > t->origin_ns ? (event->time_ns - t->origin_ns) / 1000 : 0;
  e.stream = event->stream_id;
  e.address = (uint64_t)event->address;
  e.size = event->size;
  bool block_event = event->action == MN_TRACE_ALLOC || event->action == MN_TRACE_FREE_REQUESTED ||
                     event->action == MN_TRACE_FREE_COMPLETED;
  if (block_event && event->requested_size) e.size = event->requested_size;
  if (event->action == MN_TRACE_ALLOC) e.block_size = event->size;
  if (mn_trace_append(t, &e) != MN_OK) t->dropped++;
}
