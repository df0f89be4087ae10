/* bench/bench_copy.c: copy engine bandwidth, host <-> device and device ->
 * device, 4 KiB to 1 GiB: pinned, pageable blocking, pageable staged
 * non_blocking. One figure per line, in `mnemo bench`'s convention: GBps =
 * (bytes read + bytes written) / seconds of the fastest rep, 1 GB = 1e9 bytes
 * (an n-byte copy counts 2n). The ceiling is measured in the same run, reps
 * interleaved with the case's: the best rate of the raw backend copy
 * (mn_memcpy_async, cudaMemcpyAsync on CUDA, of the same pinned or device
 * buffers) and of the case itself, so pct_of_ceiling <= 100 by construction;
 * ceiling_set_by_case = 1 says the case was faster than the raw copy at that
 * size. On SIM the figures are host memcpy speeds, not a GPU's.
 * Single-threaded bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/harness.h"
#include "mnemo/mnemo.h"

typedef enum { H2D, D2H, D2D, PEER } direction;
typedef enum { PINNED, PAGEABLE_BLOCKING, PAGEABLE_STAGED, PEER_DIRECT, PEER_STAGED } variant;

typedef struct config {
  mn_device_t dev, dev2; /* dev2: the second device of PEER */
  direction dir;
  variant var;
} config;

typedef struct buffers {
  size_t n;
  void *dev, *dev2, *pinned, *pageable;
  mn_allocator_t *pool;
  mn_stream_t *stream;
} buffers;

static void buffers_free(const config *c, buffers *b) {
  if (b->stream) MN_BENCH_OK(mn_stream_synchronize(b->stream));
  if (b->dev) MN_BENCH_OK(mn_device_raw_free(c->dev, b->dev));
  if (b->dev2) MN_BENCH_OK(mn_device_raw_free(c->dir == PEER ? c->dev2 : c->dev, b->dev2));
  if (b->pinned) MN_BENCH_OK(mn_allocator_free(b->pool, b->pinned));
  free(b->pageable);
  if (b->stream) MN_BENCH_OK(mn_stream_destroy(b->stream));
}

static mn_status buffers_make(const config *c, size_t n, buffers *b) {
  memset(b, 0, sizeof *b);
  b->n = n;
  mn_status st = mn_stream_create(c->dev, &b->stream);
  if (st == MN_OK) st = mn_device_raw_alloc(c->dev, n, &b->dev);
  if (st == MN_OK && (c->dir == D2D || c->dir == PEER))
    st = mn_device_raw_alloc(c->dir == PEER ? c->dev2 : c->dev, n, &b->dev2);
  if (st == MN_OK) st = mn_pinned_allocator_get_default(c->dev, &b->pool);
  if (st == MN_OK) st = mn_allocator_alloc(b->pool, n, NULL, &b->pinned);
  if (st == MN_OK && (b->pageable = malloc(n)) == NULL) st = MN_ERR_OUT_OF_MEMORY;
  if (st == MN_OK) {
    memset(b->pinned, 1, n); /* touch every page */
    memset(b->pageable, 2, n);
    st = mn_memset_async(c->dev, b->dev, 3, n, b->stream);
  }
  if (st == MN_OK) st = mn_stream_synchronize(b->stream);
  if (st != MN_OK) buffers_free(c, b);
  return st;
}

/* One copy of the variant, complete when it returns. */
static mn_status copy_once(const config *c, const buffers *b, variant v) {
  mn_device_t cpu = mn_device_cpu();
  unsigned nb = MN_COPY_NON_BLOCKING;
  mn_status st = MN_OK;
  switch (c->dir) {
    case H2D:
      if (v == PINNED) st = mn_copy_bytes(c->dev, b->dev, cpu, b->pinned, b->n, b->stream, nb | MN_COPY_SRC_PINNED);
      if (v == PAGEABLE_BLOCKING) st = mn_copy_bytes(c->dev, b->dev, cpu, b->pageable, b->n, b->stream, 0);
      if (v == PAGEABLE_STAGED) st = mn_copy_bytes(c->dev, b->dev, cpu, b->pageable, b->n, b->stream, nb);
      break;
    case D2H:
      if (v == PINNED) st = mn_copy_bytes(cpu, b->pinned, c->dev, b->dev, b->n, b->stream, nb | MN_COPY_DST_PINNED);
      if (v == PAGEABLE_BLOCKING) st = mn_copy_bytes(cpu, b->pageable, c->dev, b->dev, b->n, b->stream, 0);
      if (v == PAGEABLE_STAGED) st = mn_copy_bytes(cpu, b->pageable, c->dev, b->dev, b->n, b->stream, nb);
      break;
    case D2D:
      st = mn_copy_bytes(c->dev, b->dev2, c->dev, b->dev, b->n, b->stream, nb);
      break;
    case PEER:
      st = mn_copy_bytes(c->dev2, b->dev2, c->dev, b->dev, b->n, b->stream,
                         nb | (v == PEER_STAGED ? MN_COPY_NO_PEER : 0));
      break;
  }
  return st == MN_OK ? mn_stream_synchronize(b->stream) : st;
}

/* The ceiling: the backend's own async copy of the same pinned buffer (or
 * device buffers), then a synchronize. */
static mn_status ceiling_once(const config *c, const buffers *b) {
  mn_device_t cpu = mn_device_cpu();
  mn_status st = MN_OK;
  if (c->dir == H2D) st = mn_memcpy_async(c->dev, b->dev, cpu, b->pinned, b->n, b->stream);
  if (c->dir == D2H) st = mn_memcpy_async(cpu, b->pinned, c->dev, b->dev, b->n, b->stream);
  if (c->dir == D2D) st = mn_memcpy_async(c->dev, b->dev2, c->dev, b->dev, b->n, b->stream);
  if (c->dir == PEER) st = mn_memcpy_peer_async(c->dev2, b->dev2, c->dev, b->dev, b->n, b->stream);
  return st == MN_OK ? mn_stream_synchronize(b->stream) : st;
}

/* The fastest of `reps` timed runs of the variant and of the raw copy,
 * interleaved (so both see the same machine state), in seconds. */
static void best_times(const config *c, const buffers *b, int reps, double *own, double *raw) {
  *own = *raw = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = mn_bench_now_s();
    mn_status st = ceiling_once(c, b);
    double t1 = mn_bench_now_s();
    if (st == MN_OK && t1 - t0 < *raw) *raw = t1 - t0;
    st = copy_once(c, b, c->var);
    double t2 = mn_bench_now_s();
    if (st == MN_OK && t2 - t1 < *own) *own = t2 - t1;
  }
}

static void bench_copy(mn_bench_t *bb, void *arg) {
  const config *c = arg;
  size_t n = (size_t)mn_bench_arg(bb, 0);
  buffers b;
  if (buffers_make(c, n, &b) != MN_OK) {
    mn_bench_error(bb, mn_last_error());
    return;
  }
  while (mn_bench_next(bb)) {
    if (copy_once(c, &b, c->var) != MN_OK) {
      mn_bench_error(bb, mn_last_error());
      break;
    }
  }
  /* No SetBytesProcessed: Google Benchmark would print a second, differently
   * counted rate (bytes once, 1024-based) next to GBps. */
  int reps = (int)(((size_t)256 << 20) / n);
  reps = reps < 5 ? 5 : reps > 41 ? 41 : reps;
  double t_own, t_raw;
  best_times(c, &b, reps, &t_own, &t_raw);
  if (t_own >= 1e30 || t_raw >= 1e30) {
    mn_bench_error(bb, mn_last_error());
    buffers_free(c, &b);
    return;
  }
  double moved = 2.0 * (double)n; /* read n + written n */
  double own = moved / t_own / 1e9, raw = moved / t_raw / 1e9, ceiling = own > raw ? own : raw;
  mn_bench_counter(bb, "GBps", own);
  mn_bench_counter(bb, "ceiling_GBps", ceiling);
  mn_bench_counter(bb, "pct_of_ceiling", 100.0 * own / ceiling);
  mn_bench_counter(bb, "ceiling_set_by_case", own > raw ? 1.0 : 0.0);
  buffers_free(c, &b);
}

static void add(const char *dev_name, config *c, const char *what, int64_t max_size) {
  char name[128];
  snprintf(name, sizeof name, "copy/%s/%s", dev_name, what);
  for (int64_t n = 4096; n <= max_size; n *= 4) mn_bench_register(name, bench_copy, c, 1, &n);
}

int main(int argc, char **argv) {
  static config cfgs[2][12];
  const int64_t gib = (int64_t)1 << 30;
  int ncuda = 0, k = 0;
  MN_BENCH_OK(mn_device_count(MN_DEVICE_CUDA, &ncuda));
  for (int d = 0; d < 2; d++) {
    mn_device_t dev = d == 0 ? mn_device_sim(0) : mn_device_cuda(0);
    const char *dn = d == 0 ? "sim" : "cuda";
    if (d == 1 && ncuda == 0) break;
    static const char *names[3] = {"pinned", "pageable_blocking", "pageable_staged"};
    k = 0;
    for (int dir = 0; dir < 2; dir++)
      for (int v = 0; v < 3; v++) {
        char what[64];
        snprintf(what, sizeof what, "%s_%s", dir == H2D ? "h2d" : "d2h", names[v]);
        cfgs[d][k] = (config){.dev = dev, .dir = (direction)dir, .var = (variant)v};
        add(dn, &cfgs[d][k++], what, gib);
      }
    cfgs[d][k] = (config){.dev = dev, .dir = D2D, .var = PINNED};
    add(dn, &cfgs[d][k++], "d2d", gib);
    bool peer = d == 1 && ncuda >= 2;
    if (peer) {
      cfgs[d][k] = (config){.dev = dev, .dev2 = mn_device_cuda(1), .dir = PEER, .var = PEER_DIRECT};
      add(dn, &cfgs[d][k++], "peer", gib);
      cfgs[d][k] = (config){.dev = dev, .dev2 = mn_device_cuda(1), .dir = PEER, .var = PEER_STAGED};
      add(dn, &cfgs[d][k++], "peer_staged_through_host", gib);
    }
  }
  fprintf(stderr, "bench_copy: GBps = (bytes read + bytes written) / seconds of the fastest rep, 1 GB = 1e9 bytes;\n"
                  "  ceiling_GBps = the best of the raw copy and the case at that size (ceiling_set_by_case = 1: the case)\n");
  return mn_bench_main(argc, argv);
}
