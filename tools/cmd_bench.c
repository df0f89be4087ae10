/* tools/cmd_bench.c: `mnemo bench`: copy throughput as a user of the library
 * gets it (mn_view_copy, mn_copy_view, mn_view_fill on views, streams and the
 * pinned pool): transfers between the host and a device (pinned and pageable,
 * blocking and non_blocking), device and peer copies, strided copies (2-d
 * transpose, 4-d permutes), casts and fills, over a sweep of sizes. One
 * convention (GB/s = bytes read + bytes written per second, 1 GB = 1e9 bytes)
 * and, per memory domain and size, a ceiling measured in the same run that no
 * figure exceeds by construction. Output: a table, --json or --csv, and
 * --plot (a self-contained SVG). Single-threaded (the CLI's main thread); the
 * library's CPU pool runs the CPU kernels' threads. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "commands.h"
#include "trace_input.h"
#include "kernels/pool.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"

const char cmd_bench_about[] =
    "Copy throughput through the public API (docs/COPY.md, \"mnemo bench\"). Each rep\n"
    "is one call and a stream synchronize.\n"
    "GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes (an N-byte\n"
    "transfer counts 2N); best = the fastest rep, median = the median rep;\n"
    "ceiling = per domain and size, the best rate of the domain's raw primitive\n"
    "(host: memcpy, memset for fills; device: mn_memcpy_async D2D, mn_memset_async\n"
    "for fills; h2d/d2h: mn_memcpy_async of pinned memory; peer:\n"
    "mn_memcpy_peer_async) and of every case of the domain, so % of ceiling <= 100;\n"
    "\"set by\" says which. A progress bar on stderr when it is a terminal.\n";

enum {
  O_DEVICE = 1, O_TO, O_CASES, O_SIZES, O_REPS, O_MIN_TIME, O_JSON, O_CSV, O_PLOT, O_PROGRESS, O_NO_PROGRESS,
  O_SIM_DEVICES
};

const mn__cli_opt_t cmd_bench_opts[] = {
    {"device", 0, "D", O_DEVICE,
     "where the copies, casts and fills run (default: the best device, cuda:0 when present, else cpu; sim:0 is "
     "host memory, so its figures are host memcpy speeds, not a GPU's)"},
    {"to", 0, "D2", O_TO,
     "the other end of the transfers (default cpu: h2d/d2h; a second device of the same type: peer copies)"},
    {"cases", 0, "LIST", O_CASES,
     "names or groups, comma-separated (default all: every case that applies; groups transfer, h2d, d2h, peer, "
     "layout, cast, fill; names h2d_pinned_nb, h2d_pinned_blocking, h2d_pageable_nb, h2d_pageable_blocking, d2h_* "
     "alike, d2d, peer, peer_reverse, copy, transpose2d, nchw_to_nhwc, nhwc_to_nchw, cast_f32_f16, cast_f32_bf16, "
     "cast_f16_f32, cast_i64_f32, fill_f32, fill_u8)"},
    {"sizes", 0, "LIST|A..B", O_SIZES,
     "bytes of the source (of the destination for fills), e.g. 64K,1M,16M or 64K..64M (x4 steps up to B), at "
     "least 4K (default 64K..64M; 64K..256M on CUDA)"},
    {"reps", 0, "N", O_REPS,
     "at least N timed reps per measurement (default 5), more until --min-time, at most max(N, 5000)"},
    {"min-time", 0, "S", O_MIN_TIME,
     "seconds of reps per measurement (0..60; default 0.1, or less: from a quarter of it on, a measurement ends "
     "once its fastest rep has not improved by 1% over the last half of its time; given, always S)"},
    {"json", 0, NULL, O_JSON, "the results as JSON"},
    {"csv", 0, NULL, O_CSV, "the results as CSV"},
    {"plot", 0, "OUT.svg", O_PLOT, "an SVG of GB/s against size, one panel per domain"},
    {"progress", 0, NULL, O_PROGRESS, "a progress bar on stderr (default: when it is a terminal)"},
    {"no-progress", 0, NULL, O_NO_PROGRESS, "no progress bar"},
    {"sim-devices", 0, "N", O_SIM_DEVICES, "configure N SIM devices first (1..16; for --to sim:1)"},
    {NULL, 0, NULL, 0, NULL},
};

#define CONVENTION "GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes"
#define MIN_SIZE ((size_t)4096)
#define MAX_SIZE ((size_t)16 << 30)
#define MAX_SIZES 32
#define REPS_CAP 5000
#define STABLE_GAIN 0.01 /* adaptive reps: a best rep faster by more than this fraction counts as progress */
#define STABLE_AFTER 0.25 /* adaptive reps: the fraction of --min-time always spent */
#define MAX_REPS_ARG 100000

#define U8 MN_DTYPE_UINT8
#define F16 MN_DTYPE_FLOAT16
#define BF16 MN_DTYPE_BFLOAT16
#define F32 MN_DTYPE_FLOAT32
#define I64 MN_DTYPE_INT64

typedef enum op_kind {
  OP_H2D,
  OP_D2H,
  OP_D2D,
  OP_PEER,
  OP_PEER_BACK,
  OP_COPY,
  OP_TRANSPOSE2D,
  OP_NCHW_NHWC,
  OP_NHWC_NCHW,
  OP_CAST,
  OP_FILL
} op_kind;

typedef struct bench_case_s {
  const char *name, *group, *what;
  op_kind op;
  mn_dtype dst, src;
  bool pinned, non_blocking;
} bench_case_t;

static const bench_case_t g_cases[] = {
    {"h2d_pinned_nb", "h2d", "host -> device, pinned source, non_blocking", OP_H2D, U8, U8, true, true},
    {"h2d_pinned_blocking", "h2d", "host -> device, pinned source, blocking", OP_H2D, U8, U8, true, false},
    {"h2d_pageable_nb", "h2d", "host -> device, pageable source, non_blocking (staged)", OP_H2D, U8, U8, false,
     true},
    {"h2d_pageable_blocking", "h2d", "host -> device, pageable source, blocking", OP_H2D, U8, U8, false, false},
    {"d2h_pinned_nb", "d2h", "device -> host, pinned destination, non_blocking", OP_D2H, U8, U8, true, true},
    {"d2h_pinned_blocking", "d2h", "device -> host, pinned destination, blocking", OP_D2H, U8, U8, true, false},
    {"d2h_pageable_nb", "d2h", "device -> host, pageable destination, non_blocking (staged)", OP_D2H, U8, U8, false,
     true},
    {"d2h_pageable_blocking", "d2h", "device -> host, pageable destination, blocking", OP_D2H, U8, U8, false, false},
    {"d2d", "transfer", "device -> same device, contiguous", OP_D2D, U8, U8, false, true},
    {"peer", "peer", "--device -> --to, non_blocking", OP_PEER, U8, U8, false, true},
    {"peer_reverse", "peer", "--to -> --device, non_blocking", OP_PEER_BACK, U8, U8, false, true},
    {"copy", "layout", "float32, contiguous", OP_COPY, F32, F32, false, true},
    {"transpose2d", "layout", "float32 (R, C) transposed, made contiguous", OP_TRANSPOSE2D, F32, F32, false, true},
    {"nchw_to_nhwc", "layout", "float32 (1, 64, H, W) permuted (0, 2, 3, 1), made contiguous", OP_NCHW_NHWC, F32,
     F32, false, true},
    {"nhwc_to_nchw", "layout", "float32 (1, H, W, 64) permuted (0, 3, 1, 2), made contiguous", OP_NHWC_NCHW, F32,
     F32, false, true},
    {"cast_f32_f16", "cast", "float32 -> float16", OP_CAST, F16, F32, false, true},
    {"cast_f32_bf16", "cast", "float32 -> bfloat16", OP_CAST, BF16, F32, false, true},
    {"cast_f16_f32", "cast", "float16 -> float32", OP_CAST, F32, F16, false, true},
    {"cast_i64_f32", "cast", "int64 -> float32", OP_CAST, F32, I64, false, true},
    {"fill_f32", "fill", "float32 fill (bytes written only)", OP_FILL, F32, F32, false, true},
    {"fill_u8", "fill", "uint8 fill (bytes written only)", OP_FILL, U8, U8, false, true},
};
enum { NCASES = sizeof g_cases / sizeof g_cases[0] };

/* Memory domains: each has one raw primitive and its own ceiling. Fills (write
 * only) are domains of their own, with memset as their primitive. */
typedef enum dom_kind {
  DOM_HOST,
  DOM_HOST_FILL,
  DOM_DEVICE,
  DOM_DEVICE_FILL,
  DOM_H2D,
  DOM_D2H,
  DOM_PEER,
  DOM_PEER_BACK,
  NDOMS
} dom_kind;

typedef struct domain_s {
  bool used;
  char name[80];       /* "host", "cuda:0", "h2d cuda:0", "cuda:0->cuda:1" */
  const char *prim;    /* the primitive's name */
  char what[200];      /* one line for the table and the plot */
} domain_t;

/* One measurement: a case, or a domain's primitive (case_idx -1), at one size. */
typedef struct result_s {
  int case_idx;
  dom_kind dom;
  size_t size, moved;
  int reps;
  double best_s, median_s, best_gbps, median_gbps;
  double ceiling_gbps, pct;
  const char *set_by;
} result_t;

#define RND_DTYPES MN_DTYPE_COUNT
typedef struct rnd_s {
  unsigned char *bytes; /* RND_TILE random bytes, or NULL */
} rnd_t;

typedef struct bench_s {
  /* options */
  mn_device_t dev, other, xdev; /* xdev: the non-CPU end of h2d/d2h/d2d */
  bool has_x, has_peer;
  bool selected[NCASES];
  size_t sizes[MAX_SIZES];
  int nsizes, reps;
  double min_time;
  bool adaptive; /* --min-time not given: a measurement may stop once its best is stable */
  bool json, csv, progress;
  const char *plot;
  /* state */
  char devname[32], othername[32], xname[32], devdesc[160];
  mn_stream_t *cpu_stream, *xstream, *dstream, *ostream;
  bool own_xstream, own_ostream;
  mn_allocator_t *pool; /* xdev's pinned pool */
  domain_t doms[NDOMS];
  result_t *res;
  size_t nres, capres;
  double *times;
  size_t ntimes, captimes;
  rnd_t rnd[RND_DTYPES]; /* per dtype: random bytes for CPU sources (fill_random) */
  size_t step, nsteps;
} bench_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "64 KiB", "1.5 MiB". */
static const char *fmt_size(size_t n, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  size_t div = 1;
  while (u < 4 && n >= div * 1024) {
    div *= 1024;
    u++;
  }
  if (n % div == 0) snprintf(buf, len, "%zu %s", n / div, units[u]);
  else snprintf(buf, len, "%.2f %s", (double)n / (double)div, units[u]);
  return buf;
}

static bool is_cpu(mn_device_t d) { return d.type == MN_DEVICE_CPU; }

/* ---- options ------------------------------------------------------------------ */

static int bad(const char *fmt, const char *value) {
  fprintf(stderr, "mnemo bench: ");
  fprintf(stderr, fmt, value);
  fprintf(stderr, "\n");
  return 2;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

static int add_size(bench_t *b, size_t n, const char *token) {
  char buf[32];
  if (n < MIN_SIZE) {
    fprintf(stderr, "mnemo bench: --sizes: \"%s\" is %s, under the 4 KiB minimum\n", token, fmt_size(n, buf, sizeof buf));
    return 2;
  }
  if (n > MAX_SIZE) {
    fprintf(stderr, "mnemo bench: --sizes: \"%s\" is over the 16 GiB maximum\n", token);
    return 2;
  }
  for (int i = 0; i < b->nsizes; i++)
    if (b->sizes[i] == n) return 0;
  if (b->nsizes == MAX_SIZES) {
    fprintf(stderr, "mnemo bench: --sizes: at most %d sizes\n", MAX_SIZES);
    return 2;
  }
  b->sizes[b->nsizes++] = n;
  return 0;
}

/* "64K,1M,16M" or "64K..64M" (x4 steps from A while <= B), items comma-separated. */
static int parse_sizes(bench_t *b, const char *text) {
  char *copy = mn__strdup(text);
  if (!copy) return bad("out of host memory%s", "");
  int rc = 0;
  b->nsizes = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
    char *dots = strstr(tok, "..");
    size_t lo = 0, hi = 0;
    if (dots) {
      *dots = '\0';
      if (mn_bytes_parse(tok, &lo) != MN_OK || mn_bytes_parse(dots + 2, &hi) != MN_OK) {
        *dots = '.';
        rc = bad("--sizes: \"%s\" is not a range of byte counts (e.g. 64K..64M)", tok);
        break;
      }
      *dots = '.';
      if (lo > hi) {
        rc = bad("--sizes: \"%s\" goes down (A..B needs A <= B)", tok);
        break;
      }
      for (size_t n = lo; n <= hi && !rc; n *= 4) {
        rc = add_size(b, n, tok);
        if (n > hi / 4) break;
      }
    } else if (mn_bytes_parse(tok, &lo) != MN_OK) {
      rc = bad("--sizes: \"%s\" is not a byte count (e.g. 64K, 1M, 16M or 64K..64M)", tok);
    } else {
      rc = add_size(b, lo, tok);
    }
  }
  if (!rc && b->nsizes == 0) rc = bad("--sizes: \"%s\" names no size", text);
  free(copy);
  mn_clear_error();
  if (!rc) qsort(b->sizes, (size_t)b->nsizes, sizeof b->sizes[0], cmp_size);
  return rc;
}

static bool case_applies(const bench_t *b, const bench_case_t *c) {
  switch (c->op) {
    case OP_H2D:
    case OP_D2H:
    case OP_D2D: return b->has_x;
    case OP_PEER:
    case OP_PEER_BACK: return b->has_peer;
    default: return true;
  }
}

static const char *needs_text(op_kind op) {
  if (op == OP_PEER || op == OP_PEER_BACK)
    return "needs --device and --to on two devices of one type (e.g. --device sim:0 --to sim:1 --sim-devices 2)";
  return "needs a non-CPU device (--device cuda:0 or sim:0)";
}

static bool in_group(const bench_case_t *c, const char *group) {
  if (!strcmp(group, "all")) return true;
  if (!strcmp(group, "transfer")) return c->op <= OP_PEER_BACK;
  return !strcmp(c->group, group);
}

static bool is_group(const char *name) {
  static const char *groups[] = {"all", "transfer", "h2d", "d2h", "peer", "layout", "cast", "fill"};
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
    if (!strcmp(name, groups[i])) return true;
  return false;
}

/* After the devices are known: an explicit case that does not apply is an
 * error; a group keeps the cases that apply and must keep one. */
static int parse_cases(bench_t *b, const char *text) {
  char *copy = mn__strdup(text);
  if (!copy) return bad("out of host memory%s", "");
  int rc = 0;
  memset(b->selected, 0, sizeof b->selected);
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
    bool found = false;
    if (is_group(tok) && strcmp(tok, "peer") != 0) {
      int n = 0;
      for (int k = 0; k < NCASES; k++)
        if (in_group(&g_cases[k], tok) && case_applies(b, &g_cases[k])) b->selected[k] = true, n++;
      if (n == 0) {
        fprintf(stderr, "mnemo bench: --cases: no case of group \"%s\" applies to --device %s%s%s\n", tok,
                b->devname, is_cpu(b->other) ? "" : " --to ", is_cpu(b->other) ? "" : b->othername);
        rc = 2;
      }
      continue;
    }
    if (!strcmp(tok, "peer")) { /* a case name and a group: the group (peer, peer_reverse) */
      if (!b->has_peer) {
        fprintf(stderr, "mnemo bench: --cases: \"peer\" %s\n", needs_text(OP_PEER));
        rc = 2;
      }
      for (int k = 0; k < NCASES; k++)
        if (in_group(&g_cases[k], "peer")) b->selected[k] = b->has_peer;
      continue;
    }
    for (int k = 0; k < NCASES && !found; k++) {
      if (strcmp(tok, g_cases[k].name)) continue;
      found = true;
      if (!case_applies(b, &g_cases[k])) {
        fprintf(stderr, "mnemo bench: --cases: \"%s\" %s\n", tok, needs_text(g_cases[k].op));
        rc = 2;
      }
      b->selected[k] = true;
    }
    if (!found && !rc) {
      fprintf(stderr,
              "mnemo bench: --cases: unknown case \"%s\" (groups: all, transfer, h2d, d2h, peer, layout, cast, "
              "fill; names: `mnemo bench --help`)\n",
              tok);
      rc = 2;
    }
  }
  if (!rc) {
    int n = 0;
    for (int k = 0; k < NCASES; k++) n += b->selected[k];
    if (n == 0) rc = bad("--cases: \"%s\" names no case", text);
  }
  free(copy);
  return rc;
}

/* ---- views and operations ------------------------------------------------------ */

/* A contiguous view over a new storage on dev (from `alloc`, NULL: the default). */
static mn_status make_view(mn_device_t dev, mn_allocator_t *alloc, mn_dtype dt, int ndim, const int64_t *sizes,
                           mn_view_t **out) {
  if (!alloc) return mn_view_empty(dev, dt, ndim, sizes, out);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= sizes[i];
  mn_storage_t *s = NULL;
  mn_status st = mn_storage_create(dev, (size_t)n * mn_dtype_itemsize(dt), alloc, NULL, &s);
  if (st == MN_OK) st = mn_view_create(s, dt, ndim, sizes, NULL, 0, out);
  mn_storage_release(s);
  return st;
}

static mn_stream_t *stream_of(const bench_t *b, mn_device_t d) {
  if (is_cpu(d)) return b->cpu_stream;
  if (mn_device_equal(d, b->xdev)) return b->xstream;
  if (mn_device_equal(d, b->dev)) return b->dstream;
  return b->ostream;
}

/* Fills a source with random values (never time on zeros): uniform floats in
 * [0, 100) directly for float dtypes, the bytes of such floats for a 1-d
 * uint8 buffer of whole floats (the transfers' buffers), else cast from a
 * float32 temporary. */
static mn_status fill_random_gen(const bench_t *b, mn_view_t *v) {
  mn_device_t d = mn_view_device(v);
  mn_stream_t *s = stream_of(b, d);
  mn_dtype dt = mn_view_dtype(v);
  mn_status st;
  if (dt == F32 || dt == F16 || dt == BF16) {
    st = mn_kernel_random_uniform(s, v, 1234, 0, 0.0, 100.0);
  } else if (dt == U8 && mn_view_ndim(v) == 1 && mn_view_numel(v) % 4 == 0) {
    mn_view_t *f = NULL;
    st = mn_view_view_dtype(v, F32, &f);
    if (st == MN_OK) st = mn_kernel_random_uniform(s, f, 1234, 0, 0.0, 100.0);
    if (st == MN_OK) st = mn_stream_synchronize(s);
    mn_view_destroy(f);
  } else {
    mn_view_t *tmp = NULL;
    st = mn_view_empty(d, F32, mn_view_ndim(v), mn_view_sizes(v), &tmp);
    if (st == MN_OK) st = mn_kernel_random_uniform(s, tmp, 1234, 0, 0.0, 100.0);
    if (st == MN_OK) st = mn_view_copy(v, tmp, s);
    if (st == MN_OK) st = mn_stream_synchronize(s);
    mn_view_destroy(tmp);
  }
  if (st == MN_OK) st = mn_stream_synchronize(s);
  return st;
}

/* fill_random for contiguous CPU sources: one RND_TILE-byte block of random
 * values per dtype, generated once, repeated over the source (generating
 * every source whole took most of a default run; the values' order does not
 * matter to a copy, a cast or a permute, their being random does). */
#define RND_TILE ((size_t)1 << 20)
static mn_status fill_random(bench_t *b, mn_view_t *v) {
  mn_dtype dt = mn_view_dtype(v);
  size_t need = (size_t)mn_view_numel(v) * mn_dtype_itemsize(dt);
  if (!is_cpu(mn_view_device(v)) || !mn_view_is_contiguous(v) || (int)dt < 0 || (int)dt >= RND_DTYPES ||
      RND_TILE % mn_dtype_itemsize(dt) != 0)
    return fill_random_gen(b, v);
  rnd_t *r = &b->rnd[dt];
  if (!r->bytes) {
    int64_t e = (int64_t)(RND_TILE / mn_dtype_itemsize(dt));
    mn_view_t *t = NULL;
    mn_status st = mn_view_empty(mn_view_device(v), dt, 1, &e, &t);
    if (st == MN_OK) st = fill_random_gen(b, t);
    if (st == MN_OK && (r->bytes = mn__malloc(RND_TILE)) != NULL) memcpy(r->bytes, mn_view_data(t), RND_TILE);
    mn_view_destroy(t);
    if (st != MN_OK) return st;
    if (!r->bytes) return fill_random_gen(b, v);
  }
  unsigned char *d = mn_view_data(v);
  for (size_t o = 0; o < need; o += RND_TILE) memcpy(d + o, r->bytes, need - o < RND_TILE ? need - o : RND_TILE);
  return MN_OK;
}

typedef struct op_s {
  const bench_case_t *c; /* NULL: a primitive */
  dom_kind dom;
  mn_view_t *dst, *src, *read; /* read: the view the case reads (src or a permuted view of it) */
  mn_stream_t *stream;
  mn_device_t pd_dev, ps_dev;
  size_t nbytes, moved;
} op_t;

static void op_release(op_t *op) {
  if (op->stream && mn_stream_synchronize(op->stream) != MN_OK) mn_clear_error(); /* already reported */
  if (op->read != op->src) mn_view_destroy(op->read);
  mn_view_destroy(op->src);
  mn_view_destroy(op->dst);
  memset(op, 0, sizeof *op);
}

static int64_t isqrt64(int64_t n) {
  int64_t r = (int64_t)sqrt((double)n);
  while (r * r > n) r--;
  while ((r + 1) * (r + 1) <= n) r++;
  return r < 1 ? 1 : r;
}

static dom_kind case_domain(const bench_t *b, const bench_case_t *c) {
  switch (c->op) {
    case OP_H2D: return DOM_H2D;
    case OP_D2H: return DOM_D2H;
    case OP_D2D: return DOM_DEVICE;
    case OP_PEER: return DOM_PEER;
    case OP_PEER_BACK: return DOM_PEER_BACK;
    case OP_FILL: return is_cpu(b->dev) ? DOM_HOST_FILL : DOM_DEVICE_FILL;
    default: return is_cpu(b->dev) ? DOM_HOST : DOM_DEVICE;
  }
}

/* The two ends of a domain's primitive (and of its transfer cases). */
static void domain_ends(const bench_t *b, dom_kind d, mn_device_t *dst, mn_device_t *src) {
  mn_device_t cpu = mn_device_cpu();
  switch (d) {
    case DOM_HOST:
    case DOM_HOST_FILL: *dst = *src = cpu; break;
    case DOM_DEVICE:
    case DOM_DEVICE_FILL: *dst = *src = b->xdev; break;
    case DOM_H2D: *dst = b->xdev, *src = cpu; break;
    case DOM_D2H: *dst = cpu, *src = b->xdev; break;
    case DOM_PEER: *dst = b->other, *src = b->dev; break;
    default: *dst = b->dev, *src = b->other; break;
  }
}

/* Makes the buffers of a case (c) or of domain d's primitive (c NULL) at size n. */
static mn_status op_prepare(bench_t *b, const bench_case_t *c, dom_kind d, size_t n, op_t *op) {
  memset(op, 0, sizeof *op);
  op->c = c;
  op->dom = d;
  mn_status st = MN_OK;
  if (!c || c->op <= OP_PEER_BACK) { /* byte buffers */
    mn_device_t dd, sd;
    domain_ends(b, d, &dd, &sd);
    bool pinned = !c ? (d == DOM_H2D || d == DOM_D2H) : c->pinned;
    int64_t len = (int64_t)n;
    st = make_view(dd, is_cpu(dd) && !is_cpu(sd) && pinned ? b->pool : NULL, U8, 1, &len, &op->dst);
    if (st == MN_OK) st = make_view(sd, is_cpu(sd) && !is_cpu(dd) && pinned ? b->pool : NULL, U8, 1, &len, &op->src);
    if (st == MN_OK && (d == DOM_HOST_FILL || d == DOM_DEVICE_FILL)) { /* memset: no source */
      mn_view_destroy(op->src);
      op->src = NULL;
    }
    op->read = op->src;
    op->pd_dev = dd;
    op->ps_dev = sd;
    op->nbytes = n;
    op->moved = op->src ? 2 * n : n;
    op->stream = is_cpu(dd) ? stream_of(b, sd) : stream_of(b, dd);
    if (d == DOM_PEER || d == DOM_PEER_BACK) op->stream = b->dstream;
    if (st == MN_OK && op->src) st = fill_random(b, op->src);
    return st;
  }
  mn_device_t dev = b->dev;
  op->stream = stream_of(b, dev);
  size_t isz = mn_dtype_itemsize(c->src), dsz = mn_dtype_itemsize(c->dst);
  int64_t e = (int64_t)(n / (c->op == OP_FILL ? dsz : isz));
  switch (c->op) {
    case OP_COPY:
    case OP_CAST:
      st = make_view(dev, NULL, c->src, 1, &e, &op->src);
      if (st == MN_OK) st = make_view(dev, NULL, c->dst, 1, &e, &op->dst);
      op->read = op->src;
      break;
    case OP_TRANSPOSE2D: {
      int64_t r = isqrt64(e), cols = e / r, ss[2] = {r, cols}, ds[2] = {cols, r};
      e = r * cols;
      st = make_view(dev, NULL, c->src, 2, ss, &op->src);
      if (st == MN_OK) st = make_view(dev, NULL, c->dst, 2, ds, &op->dst);
      if (st == MN_OK) st = mn_view_t2d(op->src, &op->read);
      break;
    }
    case OP_NCHW_NHWC:
    case OP_NHWC_NCHW: {
      int64_t ch = 64, hw = e / ch < 1 ? 1 : e / ch, h = isqrt64(hw), w = hw / h;
      int64_t nchw[4] = {1, ch, h, w}, nhwc[4] = {1, h, w, ch};
      bool to_nhwc = c->op == OP_NCHW_NHWC;
      static const int p_nhwc[4] = {0, 2, 3, 1}, p_nchw[4] = {0, 3, 1, 2};
      e = ch * h * w;
      st = make_view(dev, NULL, c->src, 4, to_nhwc ? nchw : nhwc, &op->src);
      if (st == MN_OK) st = make_view(dev, NULL, c->dst, 4, to_nhwc ? nhwc : nchw, &op->dst);
      if (st == MN_OK) st = mn_view_permute(op->src, 4, to_nhwc ? p_nhwc : p_nchw, &op->read);
      break;
    }
    case OP_FILL:
      st = make_view(dev, NULL, c->dst, 1, &e, &op->dst);
      break;
    default: break;
  }
  op->moved = (size_t)e * dsz + (c->op == OP_FILL ? 0 : (size_t)e * isz);
  if (st == MN_OK && op->src) st = fill_random(b, op->src);
  return st;
}

/* The host primitives: memcpy (src) or memset (no src) of part `task` of n bytes. */
typedef struct host_parts_s {
  char *dst;
  const char *src;
  size_t n;
  int parts;
} host_parts_t;

static void host_part(void *ctx, int64_t task) {
  const host_parts_t *hp = ctx;
  size_t per = (hp->n / (size_t)hp->parts + 63) & ~(size_t)63, lo = (size_t)task * per;
  if (lo >= hp->n) return;
  size_t len = hp->n - lo < per ? hp->n - lo : per;
  if (hp->src) memcpy(hp->dst + lo, hp->src + lo, len);
  else memset(hp->dst + lo, 0x5a, len);
}

/* One rep: the call, then a synchronize of its stream. */
static mn_status op_run(const bench_t *b, const op_t *op) {
  mn_status st;
  const bench_case_t *c = op->c;
  if (!c) {
    void *d = mn_view_data(op->dst);
    const void *s = op->src ? mn_view_data(op->src) : NULL;
    if (op->dom == DOM_HOST || op->dom == DOM_HOST_FILL) {
      host_parts_t hp = {d, s, op->nbytes, 1};
      /* as the CPU kernels: one thread under 1 MiB, else one part per pool thread */
      if (op->nbytes >= ((size_t)1 << 20)) hp.parts = mn__pool_threads();
      if (hp.parts > 1) mn__pool_run(host_part, &hp, hp.parts);
      else host_part(&hp, 0);
      return MN_OK;
    }
    if (op->dom == DOM_DEVICE_FILL)
      st = mn_memset_async(op->pd_dev, d, 0x5a, op->nbytes, op->stream);
    else if (op->dom == DOM_PEER || op->dom == DOM_PEER_BACK)
      st = mn_memcpy_peer_async(op->pd_dev, d, op->ps_dev, s, op->nbytes, op->stream);
    else
      st = mn_memcpy_async(op->pd_dev, d, op->ps_dev, s, op->nbytes, op->stream);
  } else if (c->op == OP_FILL) {
    st = mn_view_fill(op->dst, c->dst == U8 ? mn_scalar_int(7) : mn_scalar_float(1.5), op->stream);
  } else if (!c->non_blocking) {
    st = mn_copy_view(op->dst, op->read, op->stream, false);
  } else {
    st = mn_view_copy(op->dst, op->read, op->stream);
  }
  (void)b;
  return st == MN_OK ? mn_stream_synchronize(op->stream) : st;
}

/* ---- measuring ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static bool push_time(bench_t *b, double t) {
  if (b->ntimes == b->captimes) {
    size_t cap = b->captimes ? 2 * b->captimes : 256;
    double *p = mn__realloc(b->times, cap * sizeof *p);
    if (!p) return false;
    b->times = p;
    b->captimes = cap;
  }
  b->times[b->ntimes++] = t;
  return true;
}

static const char *entry_name(const bench_t *b, int case_idx, dom_kind d) {
  return case_idx < 0 ? b->doms[d].prim : g_cases[case_idx].name;
}

static void progress_show(bench_t *b, const char *name, size_t size) {
  if (!b->progress) return;
  char sz[32];
  int pct = b->nsteps ? (int)(100.0 * (double)b->step / (double)b->nsteps) : 100;
  int bars = pct * 30 / 100;
  fprintf(stderr, "\rmnemo bench [%.*s%*s] %3d%% %-22.22s %-9s", bars, "==============================", 30 - bars, "",
          pct, name, fmt_size(size, sz, sizeof sz));
  fflush(stderr);
}

static void progress_clear(const bench_t *b) {
  if (!b->progress) return;
  fprintf(stderr, "\r%78s\r", "");
  fflush(stderr);
}

/* Times reps of a case or primitive at size n (times appended to b->times,
 * which the caller emptied); returns 0, or 1 after printing mnemo's message. */
static int measure_into(bench_t *b, int case_idx, dom_kind d, size_t n, size_t *moved) {
  const bench_case_t *c = case_idx < 0 ? NULL : &g_cases[case_idx];
  char sz[32];
  progress_show(b, entry_name(b, case_idx, d), n);
  op_t op;
  mn_status st = op_prepare(b, c, d, n, &op);
  if (st == MN_OK) st = op_run(b, &op); /* warm up: touches every page */
  int done = 0;
  double start = now_s(), best = 0, settled = start; /* settled: when best last improved by over STABLE_GAIN */
  while (st == MN_OK) {
    double t0 = now_s();
    st = op_run(b, &op);
    double t1 = now_s();
    if (st != MN_OK) break;
    double t = t1 - t0;
    if (!push_time(b, t > 0 ? t : 1e-9)) {
      progress_clear(b);
      op_release(&op);
      fprintf(stderr, "mnemo bench: out of host memory\n");
      return 1;
    }
    if (done == 0 || t < best * (1 - STABLE_GAIN)) settled = t1;
    if (done == 0 || t < best) best = t;
    done++;
    double ran = t1 - start;
    /* adaptive: after a quarter of --min-time, stop once the best rep has
     * not improved by STABLE_GAIN in the last half of the time spent */
    bool stable = b->adaptive && ran >= b->min_time * STABLE_AFTER && t1 - settled >= ran / 2;
    if (done >= b->reps &&
        (ran >= b->min_time || stable || done >= (b->reps > REPS_CAP ? b->reps : REPS_CAP)))
      break;
  }
  if (st != MN_OK) {
    progress_clear(b);
    fprintf(stderr, "mnemo bench: %s at %s on %s: %s\n", entry_name(b, case_idx, d), fmt_size(n, sz, sizeof sz),
            b->doms[d].name, mn_last_error());
    op_release(&op);
    return 1;
  }
  *moved = op.moved;
  op_release(&op);
  b->step++;
  return 0;
}

static int add_result(bench_t *b, int case_idx, dom_kind d, size_t n, size_t moved) {
  if (b->nres == b->capres) {
    size_t cap = b->capres ? 2 * b->capres : 64;
    result_t *p = mn__realloc(b->res, cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "mnemo bench: out of host memory\n");
      return 1;
    }
    b->res = p;
    b->capres = cap;
  }
  qsort(b->times, b->ntimes, sizeof b->times[0], cmp_double);
  size_t k = b->ntimes;
  result_t *r = &b->res[b->nres++];
  memset(r, 0, sizeof *r);
  r->case_idx = case_idx;
  r->dom = d;
  r->size = n;
  r->moved = moved;
  r->reps = (int)k;
  r->best_s = b->times[0];
  r->median_s = k % 2 ? b->times[k / 2] : 0.5 * (b->times[k / 2 - 1] + b->times[k / 2]);
  r->best_gbps = (double)moved / r->best_s / 1e9;
  r->median_gbps = (double)moved / r->median_s / 1e9;
  return 0;
}

/* Per size and domain: the primitive, every case of the domain, the
 * primitive again (its two runs pooled); then the ceiling of each. */
static int run_all(bench_t *b) {
  for (int si = 0; si < b->nsizes; si++) {
    size_t n = b->sizes[si];
    size_t first = b->nres;
    for (int d = 0; d < NDOMS; d++) {
      if (!b->doms[d].used) continue;
      size_t moved = 0;
      b->ntimes = 0;
      if (measure_into(b, -1, (dom_kind)d, n, &moved)) return 1;
      size_t prim_times = b->ntimes;
      double *saved = mn__malloc((prim_times ? prim_times : 1) * sizeof *saved);
      if (!saved) {
        progress_clear(b);
        fprintf(stderr, "mnemo bench: out of host memory\n");
        return 1;
      }
      memcpy(saved, b->times, prim_times * sizeof *saved);
      for (int k = 0; k < NCASES; k++) {
        if (!b->selected[k] || case_domain(b, &g_cases[k]) != (dom_kind)d) continue;
        size_t cm = 0;
        b->ntimes = 0;
        if (measure_into(b, k, (dom_kind)d, n, &cm) || add_result(b, k, (dom_kind)d, n, cm)) {
          free(saved);
          return 1;
        }
      }
      b->ntimes = 0;
      int rc = measure_into(b, -1, (dom_kind)d, n, &moved);
      for (size_t i = 0; rc == 0 && i < prim_times; i++)
        if (!push_time(b, saved[i])) rc = 1, fprintf(stderr, "mnemo bench: out of host memory\n");
      free(saved);
      if (rc || add_result(b, -1, (dom_kind)d, n, moved)) return 1;
    }
    /* The ceiling of (domain, size): the best rate of every measurement of it. */
    for (size_t i = first; i < b->nres; i++) {
      result_t *r = &b->res[i];
      double best = 0;
      const char *by = "";
      for (size_t j = first; j < b->nres; j++) {
        const result_t *q = &b->res[j];
        if (q->dom != r->dom) continue;
        /* ties go to the primitive */
        if (q->best_gbps > best || (q->best_gbps == best && q->case_idx < 0)) {
          best = q->best_gbps;
          by = entry_name(b, q->case_idx, q->dom);
        }
      }
      r->ceiling_gbps = best;
      r->set_by = by;
      r->pct = best > 0 ? 100.0 * r->best_gbps / best : 0;
    }
  }
  progress_clear(b);
  return 0;
}

/* ---- output ------------------------------------------------------------------- */

/* Results in output order: domain, primitive first then the cases in table
 * order, then size. */
static int cmp_result(const void *pa, const void *pb) {
  const result_t *a = pa, *b = pb;
  if (a->dom != b->dom) return a->dom < b->dom ? -1 : 1;
  if (a->case_idx != b->case_idx) return a->case_idx < b->case_idx ? -1 : 1;
  return a->size < b->size ? -1 : a->size > b->size;
}

static const char *sim_note(const bench_t *b) {
  bool sim = b->dev.type == MN_DEVICE_SIM || (b->has_x && b->xdev.type == MN_DEVICE_SIM);
  return sim ? "SIM is the simulated GPU: its memory is host memory, so the SIM figures are host memcpy speeds, "
               "not a GPU's"
             : NULL;
}

static const char *ceiling_rule =
    "per domain and size, the best rate of the domain's raw primitive and of every case of the domain "
    "(no figure exceeds it)";

static void print_table(const bench_t *b) {
  char s1[32], s2[32];
  int ncases = 0;
  for (int k = 0; k < NCASES; k++) ncases += b->selected[k];
  printf("mnemo bench on %s (%s): %d case%s x %d size%s (%s%s%s), at least %d rep%s and %.2g s each%s\n",
         b->devname, b->devdesc, ncases, ncases == 1 ? "" : "s", b->nsizes, b->nsizes == 1 ? "" : "s",
         fmt_size(b->sizes[0], s1, sizeof s1), b->nsizes > 1 ? " .. " : "",
         b->nsizes > 1 ? fmt_size(b->sizes[b->nsizes - 1], s2, sizeof s2) : "", b->reps, b->reps == 1 ? "" : "s",
         b->adaptive ? b->min_time * STABLE_AFTER : b->min_time,
         b->adaptive ? " (up to --min-time, until the best rep is stable)" : "");
  printf("%s; best: the fastest rep, median: the median rep\n", CONVENTION);
  printf("ceiling: %s;\n  %% ceil = best / ceiling; \"set by\" names the measurement that set it\n",
         ceiling_rule);
  if (sim_note(b)) printf("note: %s\n", sim_note(b));
  if (is_cpu(b->dev))
    printf("note: the CPU cases run on the kernels' CPU pool of %d thread%s (MNEMO_KERNEL_THREADS)\n",
           mn__pool_threads(), mn__pool_threads() == 1 ? "" : "s");
  int last_dom = -1, w = 4;
  for (size_t i = 0; i < b->nres; i++) {
    const result_t *r = &b->res[i];
    int len = (int)strlen(entry_name(b, r->case_idx, r->dom)) + (r->case_idx < 0 ? 12 : 0);
    if (len > w) w = len;
  }
  for (size_t i = 0; i < b->nres; i++) {
    const result_t *r = &b->res[i];
    if ((int)r->dom != last_dom) {
      last_dom = (int)r->dom;
      printf("\n%s: %s\n", b->doms[r->dom].name, b->doms[r->dom].what);
      printf("%-*s %9s %9s %6s %10s %12s %13s %7s  %s\n", w, "case", "size", "moved", "reps", "best GB/s",
             "median GB/s", "ceiling GB/s", "% ceil", "ceiling set by");
    }
    char name[48];
    snprintf(name, sizeof name, "%s%s", entry_name(b, r->case_idx, r->dom), r->case_idx < 0 ? " [primitive]" : "");
    printf("%-*s %9s %9s %6d %10.2f %12.2f %13.2f %6.1f%%  %s\n", w, name, fmt_size(r->size, s1, sizeof s1),
           fmt_size(r->moved, s2, sizeof s2), r->reps, r->best_gbps, r->median_gbps, r->ceiling_gbps, r->pct,
           r->set_by);
  }
}

static void print_json(const bench_t *b) {
  printf("{\"tool\": \"mnemo bench\", \"version\": ");
  mn__tools_json_str(stdout, mn_version());
  printf(", \"device\": ");
  mn__tools_json_str(stdout, b->devname);
  printf(", \"device_description\": ");
  mn__tools_json_str(stdout, b->devdesc);
  printf(", \"to\": ");
  mn__tools_json_str(stdout, b->othername);
  printf(",\n \"convention\": ");
  mn__tools_json_str(stdout, CONVENTION);
  printf(", \"best\": \"the fastest rep\", \"median\": \"the median rep\", \"ceiling_rule\": ");
  mn__tools_json_str(stdout, ceiling_rule);
  printf(",\n \"note\": ");
  if (sim_note(b)) mn__tools_json_str(stdout, sim_note(b));
  else printf("null");
  printf(", \"reps_min\": %d, \"min_time_s\": %g, \"adaptive_reps\": %s, \"sizes\": [", b->reps, b->min_time,
         b->adaptive ? "true" : "false");
  for (int i = 0; i < b->nsizes; i++) printf("%s%zu", i ? ", " : "", b->sizes[i]);
  printf("],\n \"domains\": [");
  const char *sep = "";
  for (int d = 0; d < NDOMS; d++) {
    if (!b->doms[d].used) continue;
    printf("%s{\"name\": ", sep);
    mn__tools_json_str(stdout, b->doms[d].name);
    printf(", \"primitive\": ");
    mn__tools_json_str(stdout, b->doms[d].prim);
    printf(", \"what\": ");
    mn__tools_json_str(stdout, b->doms[d].what);
    printf("}");
    sep = ", ";
  }
  printf("],\n \"results\": [\n");
  for (size_t i = 0; i < b->nres; i++) {
    const result_t *r = &b->res[i];
    printf("  {\"case\": ");
    mn__tools_json_str(stdout, entry_name(b, r->case_idx, r->dom));
    printf(", \"kind\": \"%s\", \"domain\": ", r->case_idx < 0 ? "primitive" : "case");
    mn__tools_json_str(stdout, b->doms[r->dom].name);
    if (r->case_idx >= 0) {
      printf(", \"what\": ");
      mn__tools_json_str(stdout, g_cases[r->case_idx].what);
    }
    printf(", \"size_bytes\": %zu, \"moved_bytes\": %zu, \"reps\": %d, \"best_s\": %.9g, \"median_s\": %.9g"
           ", \"best_gbps\": %.6g, \"median_gbps\": %.6g, \"ceiling_gbps\": %.6g, \"pct_of_ceiling\": %.4f"
           ", \"ceiling_set_by\": ",
           r->size, r->moved, r->reps, r->best_s, r->median_s, r->best_gbps, r->median_gbps, r->ceiling_gbps,
           r->pct);
    mn__tools_json_str(stdout, r->set_by);
    printf("}%s\n", i + 1 < b->nres ? "," : "");
  }
  printf(" ]}\n");
}

static void print_csv(const bench_t *b) {
  printf("device,domain,case,kind,size_bytes,moved_bytes,reps,best_s,median_s,best_gbps,median_gbps,"
         "ceiling_gbps,pct_of_ceiling,ceiling_set_by,convention\n");
  for (size_t i = 0; i < b->nres; i++) {
    const result_t *r = &b->res[i];
    printf("%s,%s,%s,%s,%zu,%zu,%d,%.9g,%.9g,%.6g,%.6g,%.6g,%.4f,%s,\"%s\"\n", b->devname, b->doms[r->dom].name,
           entry_name(b, r->case_idx, r->dom), r->case_idx < 0 ? "primitive" : "case", r->size, r->moved, r->reps,
           r->best_s, r->median_s, r->best_gbps, r->median_gbps, r->ceiling_gbps, r->pct, r->set_by, CONVENTION);
  }
}

/* ---- the SVG plot --------------------------------------------------------------- */

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*s, f);
    }
  }
}

static double nice_step(double raw) {
  if (raw <= 0) return 1;
  double p = pow(10.0, floor(log10(raw)));
  double m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
}

static const char *palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"};

enum { SVG_W = 900, SVG_TOP = 70, PANEL_H = 400, PL = 80, PR = 740, PT = 42, PB = 330 };

static void svg_panel(FILE *f, const bench_t *b, dom_kind d, int panel) {
  double y0 = SVG_TOP + (double)panel * PANEL_H;
  double lx0 = log2((double)b->sizes[0]), lx1 = log2((double)b->sizes[b->nsizes - 1]);
  if (lx1 - lx0 < 1e-9) lx0 -= 1, lx1 += 1;
  double ymax = 0;
  for (size_t i = 0; i < b->nres; i++)
    if (b->res[i].dom == d && b->res[i].ceiling_gbps > ymax) ymax = b->res[i].ceiling_gbps;
  double step = nice_step(ymax * 1.05 / 5);
  double ytop = step * ceil(ymax * 1.05 / step);
  if (ytop <= 0) ytop = 1;
#define SX(size) (PL + (PR - PL) * (log2((double)(size)) - lx0) / (lx1 - lx0))
#define SY(v) (y0 + PB - (PB - PT) * (v) / ytop)
  /* the title: "name: what it holds", then the primitive on a line of its own */
  char what[sizeof b->doms[d].what];
  snprintf(what, sizeof what, "%s", b->doms[d].what);
  char *rest = strstr(what, "; ");
  if (rest) *rest = '\0', rest += 2;
  fprintf(f, "<g class=\"panel\">\n<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", PL, y0 + 16);
  xml_text(f, b->doms[d].name);
  fprintf(f, ": ");
  xml_text(f, what);
  fprintf(f, "</text>\n");
  if (rest) {
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\">", PL, y0 + 32);
    xml_text(f, rest);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", PL, y0 + PT,
          PR - PL, PB - PT);
  for (double v = 0; v <= ytop + step * 1e-6; v += step) {
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", PL, SY(v), PR, SY(v));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", PL - 6, SY(v) + 4, v);
  }
  char sz[32];
  for (int i = 0; i < b->nsizes; i++) {
    double x = SX(b->sizes[i]);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>", x, y0 + PT, x, y0 + PB);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x, y0 + PB + 16,
            fmt_size(b->sizes[i], sz, sizeof sz));
  }
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">size (log2 scale)</text>\n",
          (PL + PR) / 2, y0 + PB + 34);
  fprintf(f,
          "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %d %.1f)\">"
          "GB/s (best rep)</text>\n",
          PL - 52, y0 + (PT + PB) / 2.0, PL - 52, y0 + (PT + PB) / 2.0);
  /* the ceiling, dashed */
  fprintf(f, "<polyline class=\"ceiling\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\" "
             "stroke-dasharray=\"7 5\" points=\"");
  for (size_t i = 0; i < b->nres; i++) {
    const result_t *r = &b->res[i];
    if (r->dom == d && r->case_idx < 0) fprintf(f, "%.1f,%.1f ", SX(r->size), SY(r->ceiling_gbps));
  }
  fprintf(f, "\"/>\n");
  double ly = y0 + PT + 6;
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\" "
             "stroke-dasharray=\"7 5\"/><text x=\"%d\" y=\"%.1f\" font-size=\"12\">ceiling</text>\n",
          PR + 16, ly, PR + 46, ly, PR + 52, ly + 4);
  int nth = 0;
  for (int k = 0; k < NCASES; k++) {
    if (!b->selected[k] || case_domain(b, &g_cases[k]) != d) continue;
    const char *color = palette[nth % (int)(sizeof palette / sizeof palette[0])];
    const char *dash = nth >= (int)(sizeof palette / sizeof palette[0]) ? " stroke-dasharray=\"2 2\"" : "";
    fprintf(f, "<polyline class=\"case\" data-case=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"",
            g_cases[k].name, color, dash);
    for (size_t i = 0; i < b->nres; i++) {
      const result_t *r = &b->res[i];
      if (r->dom == d && r->case_idx == k) fprintf(f, "%.1f,%.1f ", SX(r->size), SY(r->best_gbps));
    }
    fprintf(f, "\"/>\n");
    for (size_t i = 0; i < b->nres; i++) {
      const result_t *r = &b->res[i];
      if (r->dom == d && r->case_idx == k)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>", SX(r->size), SY(r->best_gbps), color);
    }
    nth++;
    ly += 18;
    fprintf(f, "\n<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
               "<text x=\"%d\" y=\"%.1f\" font-size=\"12\">%s</text>\n",
            PR + 16, ly, PR + 46, ly, color, dash, PR + 52, ly + 4, g_cases[k].name);
  }
  fprintf(f, "</g>\n");
#undef SX
#undef SY
}

static int write_plot(const bench_t *b) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    fprintf(stderr, "mnemo bench: out of host memory\n");
    return 1;
  }
  int npanels = 0;
  for (int d = 0; d < NDOMS; d++) npanels += b->doms[d].used;
  int h = SVG_TOP + npanels * PANEL_H;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "font-family=\"sans-serif\">\n", SVG_W, h, SVG_W, h);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n<title>mnemo bench on ");
  xml_text(f, b->devname);
  fprintf(f, "</title>\n<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">mnemo bench on ", PL);
  xml_text(f, b->devname);
  fprintf(f, " (");
  xml_text(f, b->devdesc);
  fprintf(f, "): best of at least %d rep%s</text>\n<text x=\"%d\" y=\"44\" font-size=\"12\">", b->reps,
          b->reps == 1 ? "" : "s", PL);
  xml_text(f, CONVENTION);
  fprintf(f, "; ceiling: the best of the primitive and every case at each size</text>\n");
  if (sim_note(b)) {
    fprintf(f, "<text x=\"%d\" y=\"60\" font-size=\"12\" fill=\"#a00\">", PL);
    xml_text(f, sim_note(b));
    fprintf(f, "</text>\n");
  }
  int panel = 0;
  for (int d = 0; d < NDOMS; d++)
    if (b->doms[d].used) svg_panel(f, b, (dom_kind)d, panel++);
  fprintf(f, "</svg>\n");
  bool ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  mn_status st = ok ? mn__file_write_atomic("mnemo bench", b->plot, buf, len) : MN_ERR_OUT_OF_MEMORY;
  free(buf);
  if (st != MN_OK) {
    fprintf(stderr, "%s\n", ok ? mn_last_error() : "mnemo bench: out of host memory");
    return 1;
  }
  return 0;
}

/* ---- set up ------------------------------------------------------------------- */

static void describe_device(bench_t *b) {
  mn_device_props_t p;
  if (mn_device_get_properties(b->dev, &p) != MN_OK) {
    mn_clear_error();
    snprintf(b->devdesc, sizeof b->devdesc, "%s", b->devname);
    return;
  }
  if (is_cpu(b->dev)) snprintf(b->devdesc, sizeof b->devdesc, "%s, %d cores", p.name, p.multiprocessors);
  else if (b->dev.type == MN_DEVICE_CUDA)
    snprintf(b->devdesc, sizeof b->devdesc, "%s, %d SMs", p.name, p.multiprocessors);
  else snprintf(b->devdesc, sizeof b->devdesc, "%s: host memory", p.name);
}

static void setup_domains(bench_t *b) {
  memset(b->doms, 0, sizeof b->doms);
  for (int k = 0; k < NCASES; k++)
    if (b->selected[k]) b->doms[case_domain(b, &g_cases[k])].used = true;
  domain_t *d = b->doms;
  snprintf(d[DOM_HOST].name, sizeof d[DOM_HOST].name, "host");
  d[DOM_HOST].prim = "memcpy";
  int th = mn__pool_threads();
  snprintf(d[DOM_HOST].what, sizeof d[DOM_HOST].what,
           "copies and casts in CPU memory; ceiling primitive: memcpy of the size (from 1 MiB split over the "
           "CPU pool's %d thread%s, as the CPU kernels)", th, th == 1 ? "" : "s");
  snprintf(d[DOM_HOST_FILL].name, sizeof d[DOM_HOST_FILL].name, "host fill");
  d[DOM_HOST_FILL].prim = "memset";
  snprintf(d[DOM_HOST_FILL].what, sizeof d[DOM_HOST_FILL].what,
           "fills in CPU memory (bytes written only); ceiling primitive: memset, split as memcpy");
  snprintf(d[DOM_DEVICE].name, sizeof d[DOM_DEVICE].name, "%s", b->xname);
  d[DOM_DEVICE].prim = "memcpy_async_d2d";
  snprintf(d[DOM_DEVICE].what, sizeof d[DOM_DEVICE].what,
           "copies and casts in %s memory; ceiling primitive: mn_memcpy_async %s -> %s of the size", b->xname,
           b->xname, b->xname);
  snprintf(d[DOM_DEVICE_FILL].name, sizeof d[DOM_DEVICE_FILL].name, "%s fill", b->xname);
  d[DOM_DEVICE_FILL].prim = "memset_async";
  snprintf(d[DOM_DEVICE_FILL].what, sizeof d[DOM_DEVICE_FILL].what,
           "fills in %s memory (bytes written only); ceiling primitive: mn_memset_async of the size", b->xname);
  snprintf(d[DOM_H2D].name, sizeof d[DOM_H2D].name, "h2d %s", b->xname);
  d[DOM_H2D].prim = "memcpy_async_h2d_pinned";
  snprintf(d[DOM_H2D].what, sizeof d[DOM_H2D].what,
           "cpu -> %s; ceiling primitive: mn_memcpy_async from a pinned pool block", b->xname);
  snprintf(d[DOM_D2H].name, sizeof d[DOM_D2H].name, "d2h %s", b->xname);
  d[DOM_D2H].prim = "memcpy_async_d2h_pinned";
  snprintf(d[DOM_D2H].what, sizeof d[DOM_D2H].what,
           "%s -> cpu; ceiling primitive: mn_memcpy_async into a pinned pool block", b->xname);
  snprintf(d[DOM_PEER].name, sizeof d[DOM_PEER].name, "%s->%s", b->devname, b->othername);
  d[DOM_PEER].prim = "memcpy_peer_async";
  snprintf(d[DOM_PEER].what, sizeof d[DOM_PEER].what, "%s -> %s; ceiling primitive: mn_memcpy_peer_async",
           b->devname, b->othername);
  snprintf(d[DOM_PEER_BACK].name, sizeof d[DOM_PEER_BACK].name, "%s->%s", b->othername, b->devname);
  d[DOM_PEER_BACK].prim = "memcpy_peer_async";
  snprintf(d[DOM_PEER_BACK].what, sizeof d[DOM_PEER_BACK].what, "%s -> %s; ceiling primitive: mn_memcpy_peer_async",
           b->othername, b->devname);
}

/* Parses a device option: 2 with a message when it is not a device name. */
static int parse_device(const char *opt, const char *text, mn_device_t *out) {
  if (mn_device_parse(text, out) == MN_OK) return 0;
  mn_clear_error();
  fprintf(stderr, "mnemo bench: %s \"%s\" is not a device (cpu, cuda[:N] or sim[:N])\n", opt, text);
  return 2;
}

/* 1 with mnemo's message when the device does not exist here. */
static int check_device(const char *opt, mn_device_t dev) {
  if (mn_device_check(dev) == MN_OK) return 0;
  char name[32];
  fprintf(stderr, "mnemo bench: %s %s: %s\n", opt, mn_device_format(dev, name, sizeof name), mn_last_error());
  return 1;
}

static int open_streams(bench_t *b) {
  mn_status st = mn_stream_default(mn_device_cpu(), &b->cpu_stream);
  if (st == MN_OK && b->has_x) {
    st = mn_stream_create(b->xdev, &b->xstream);
    b->own_xstream = st == MN_OK;
    if (st == MN_OK) st = mn_pinned_allocator_get_default(b->xdev, &b->pool);
  }
  if (st == MN_OK) b->dstream = is_cpu(b->dev) ? b->cpu_stream : b->xstream;
  if (st == MN_OK && b->has_peer) {
    st = mn_stream_create(b->other, &b->ostream);
    b->own_ostream = st == MN_OK;
  }
  if (st != MN_OK) {
    fprintf(stderr, "mnemo bench: %s\n", mn_last_error());
    return 1;
  }
  return 0;
}

static void close_streams(bench_t *b) {
  /* cleanup at exit; a failure here changes no figure */
  if (b->own_xstream && mn_stream_destroy(b->xstream) != MN_OK) mn_clear_error();
  if (b->own_ostream && mn_stream_destroy(b->ostream) != MN_OK) mn_clear_error();
  if (mn_copy_engine_reset() != MN_OK) mn_clear_error();
}

/* Before the run: --plot names a regular file (or none yet) in a folder that
 * exists and is writable, so a long run is not lost to a bad path (1). */
static int check_plot_path(const char *path) {
  if (mn__file_check_destination("mnemo bench: --plot", path) != MN_OK) {
    fprintf(stderr, "%s\n", mn_last_error());
    return 1;
  }
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, "mnemo bench: --plot %s: the folder %s does not exist or is not writable\n", path, dir);
    return 1;
  }
  return 0;
}

int cmd_bench(int argc, char **argv) {
  bench_t *b = mn__calloc(1, sizeof *b);
  if (!b) {
    fprintf(stderr, "mnemo bench: out of host memory\n");
    return 1;
  }
  const char *dev_text = NULL, *to_text = NULL, *cases_text = "all", *sizes_text = NULL;
  int sim_devices = 0, rc = 0;
  b->reps = 5;
  b->min_time = 0.1;
  b->adaptive = true;
  b->progress = isatty(2) != 0;
  mn__cli_t p;
  mn__cli_begin(&p, argc, argv);
  const char *v;
  int id = 0;
  while (!rc && (id = mn__cli_next(&p, &v)) > 0) {
    char *end = NULL;
    long n = 0;
    switch (id) {
    case O_JSON: b->json = true; break;
    case O_CSV: b->csv = true; break;
    case O_PROGRESS: b->progress = true; break;
    case O_NO_PROGRESS: b->progress = false; break;
    case O_DEVICE: dev_text = v; break;
    case O_TO: to_text = v; break;
    case O_CASES: cases_text = v; break;
    case O_SIZES: sizes_text = v; break;
    case O_PLOT: b->plot = v; break;
    case O_MIN_TIME: {
      double t = strtod(v, &end);
      if (end == v || *end || !(t >= 0 && t <= 60)) rc = bad("--min-time must be 0..60 seconds, not \"%s\"", v);
      else b->min_time = t, b->adaptive = false;
      break;
    }
    case O_REPS:
      n = strtol(v, &end, 10);
      if (end == v || *end || n < 1 || n > MAX_REPS_ARG) rc = bad("--reps must be 1..100000, not \"%s\"", v);
      else b->reps = (int)n;
      break;
    case O_SIM_DEVICES:
      n = strtol(v, &end, 10);
      if (end == v || *end || n < 1 || n > 16) rc = bad("--sim-devices must be 1..16, not \"%s\"", v);
      else sim_devices = (int)n;
      break;
    }
  }
  if (!rc && id < 0) rc = p.rc;
  if (!rc && id == 0 && p.nargs) rc = mn__cli_want_args(&p, 0, 0, "");
  if (rc || id < 0) { /* a usage error, or --help (0) */
    free(b);
    return rc;
  }
  if (!rc && b->json && b->csv) rc = bad("--json and --csv: choose one%s", "");
  if (!rc && b->plot && !*b->plot) rc = bad("--plot needs a file name%s", "");
  if (!rc && b->plot && !strcmp(b->plot, "-")) /* stdout holds the results: - is not a file name here */
    rc = bad("--plot %s: the SVG cannot share stdout with the results; name a file (./- for one named -)", b->plot);
  if (!rc && b->plot) rc = check_plot_path(b->plot);
  if (!rc) {
    if (sizes_text) rc = parse_sizes(b, sizes_text);
  }
  if (!rc && sim_devices) {
    mn_sim_config_t sc = mn_sim_config_default();
    sc.device_count = sim_devices;
    if (mn_sim_configure(&sc) != MN_OK) {
      fprintf(stderr, "mnemo bench: --sim-devices: %s\n", mn_last_error());
      rc = 1;
    }
  }
  /* Devices: names that are not devices (2) before devices that do not exist (1). */
  mn_device_t dev = mn_device_best(), other = mn_device_cpu();
  if (!rc && dev_text) rc = parse_device("--device", dev_text, &dev);
  if (!rc && to_text) rc = parse_device("--to", to_text, &other);
  if (!rc) rc = check_device("--device", dev);
  if (!rc) rc = check_device("--to", other);
  if (!rc) {
    b->dev = dev;
    b->other = other;
    mn_device_format(dev, b->devname, sizeof b->devname);
    mn_device_format(other, b->othername, sizeof b->othername);
    if (!is_cpu(dev) && !is_cpu(other)) {
      if (dev.type != other.type) {
        fprintf(stderr, "mnemo bench: --to %s: a device of another type than --device %s (peer copies are between "
                        "two devices of one type)\n", b->othername, b->devname);
        rc = 2;
      } else if (dev.index == other.index) {
        fprintf(stderr, "mnemo bench: --to %s is --device itself (d2d measures copies inside one device)\n",
                b->othername);
        rc = 2;
      }
      b->has_peer = true;
    }
    b->has_x = !is_cpu(dev) || !is_cpu(other);
    b->xdev = !is_cpu(dev) ? dev : other;
    mn_device_format(b->xdev, b->xname, sizeof b->xname);
  }
  if (!rc) rc = parse_cases(b, cases_text);
  if (!rc && !sizes_text) {
    size_t top = b->dev.type == MN_DEVICE_CUDA || (b->has_x && b->xdev.type == MN_DEVICE_CUDA) ? (size_t)256 << 20
                                                                                                  : (size_t)64 << 20;
    for (size_t n = (size_t)64 << 10; n <= top; n *= 4) b->sizes[b->nsizes++] = n;
  }
  if (rc) {
    free(b);
    return rc;
  }
  describe_device(b);
  setup_domains(b);
  for (int d = 0; d < NDOMS; d++) {
    if (!b->doms[d].used) continue;
    int n = 2;
    for (int k = 0; k < NCASES; k++) n += b->selected[k] && case_domain(b, &g_cases[k]) == (dom_kind)d;
    b->nsteps += (size_t)n * (size_t)b->nsizes;
  }
  rc = open_streams(b);
  if (!rc) rc = run_all(b);
  close_streams(b);
  if (!rc) {
    qsort(b->res, b->nres, sizeof b->res[0], cmp_result);
    if (b->json) print_json(b);
    else if (b->csv) print_csv(b);
    else print_table(b);
    if (b->plot) {
      fflush(stdout);
      rc = write_plot(b);
      if (!rc && !b->json && !b->csv) printf("plot: %s\n", b->plot);
    }
  }
  free(b->res);
  free(b->times);
  for (int i = 0; i < RND_DTYPES; i++) free(b->rnd[i].bytes);
  free(b);
  return rc;
}
