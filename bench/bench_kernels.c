/* bench/bench_kernels.c: the copy, cast, fill and gather kernels on CPU (and
 * CUDA when present): bytes read + written per second and the ratio to the ceiling
 * measured in the same run: the best of the raw primitive (memcpy/memset on
 * CPU; cudaMemcpy D2D / cudaMemset via mn_memcpy_async / mn_memset_async on
 * CUDA) and the case, so pct_of_ceiling <= 100 (ceiling_set_by_case names the
 * exceptions). Gathers (index_select along an axis, take_along_axis) call
 * the internal kernel (kernels/index.h) directly, int64 indices, negatives
 * included; their bytes: the gathered elements read + written, plus the
 * indices read. The api_ gathers are the same work through the public calls
 * (mn_view_index_select, mn_view_gather): index validation and a new result
 * storage each time included, as numpy.take / take_along_axis without out=.
 * Single-threaded bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#endif

#include "bench/harness.h"
#include "kernels/index.h"
#include "mnemo/mnemo.h"

typedef enum { OP_COPY, OP_CAST, OP_FILL } op_kind;

/* dst is contiguous over `sizes`; src (OP_COPY) lays its dims out in memory
 * in the order `perm` (outermost first); OP_CAST casts contiguous src. */
typedef struct kcase {
  const char *name;
  op_kind op;
  mn_dtype dt, st;
  int ndim;
  int64_t sizes[4];
  int perm[4];
  bool cuda_only, cpu_only;
} kcase;

#define F32 MN_DTYPE_FLOAT32
#define BF16 MN_DTYPE_BFLOAT16
#define F16 MN_DTYPE_FLOAT16
#define I8 MN_DTYPE_INT8
#define E4M3 MN_DTYPE_FLOAT8_E4M3FN
#define I64 MN_DTYPE_INT64

/* Names: op/dtype/shape; the same names are used by bench/cpu_vs_numpy.py;
 * bench/gpu/compare_torch.py measures the CUDA cases at >= 256 MiB against
 * PyTorch. CPU shapes are smaller where marked. */
static const kcase cases[] = {
    {"copy/f32/16M", OP_COPY, F32, F32, 1, {1 << 24}, {0}, false, false},
    {"transpose/f32/4096x4096", OP_COPY, F32, F32, 2, {4096, 4096}, {1, 0}, false, false},
    {"transpose/bf16/4096x4096", OP_COPY, BF16, BF16, 2, {4096, 4096}, {1, 0}, false, false},
    {"transpose/i8/4096x4096", OP_COPY, I8, I8, 2, {4096, 4096}, {1, 0}, false, false},
    {"transpose/i64/2048x4096", OP_COPY, I64, I64, 2, {2048, 4096}, {1, 0}, false, true},
    {"transpose/f32/4095x4097", OP_COPY, F32, F32, 2, {4095, 4097}, {1, 0}, false, false},
    {"transpose/bf16/4095x4097", OP_COPY, BF16, BF16, 2, {4095, 4097}, {1, 0}, false, false},
    {"transpose/i8/4095x4097", OP_COPY, I8, I8, 2, {4095, 4097}, {1, 0}, false, false},
    {"transpose/f32/8192x8192", OP_COPY, F32, F32, 2, {8192, 8192}, {1, 0}, true, false},
    {"transpose/bf16/8192x8192", OP_COPY, BF16, BF16, 2, {8192, 8192}, {1, 0}, true, false},
    {"transpose/i8/8192x8192", OP_COPY, I8, I8, 2, {8192, 8192}, {1, 0}, true, false},
    /* logical dst (N, H, W, C) contiguous, src stored N, C, H, W */
    {"nchw_to_nhwc/f32/64x256x56x56", OP_COPY, F32, F32, 4, {64, 56, 56, 256}, {0, 3, 1, 2}, true, false},
    {"nchw_to_nhwc/bf16/64x256x56x56", OP_COPY, BF16, BF16, 4, {64, 56, 56, 256}, {0, 3, 1, 2}, true, false},
    {"nhwc_to_nchw/bf16/64x256x56x56", OP_COPY, BF16, BF16, 4, {64, 256, 56, 56}, {0, 2, 3, 1}, true, false},
    {"nchw_to_nhwc/f32/8x256x56x56", OP_COPY, F32, F32, 4, {8, 56, 56, 256}, {0, 3, 1, 2}, false, true},
    {"nhwc_to_nchw/f32/8x256x56x56", OP_COPY, F32, F32, 4, {8, 256, 56, 56}, {0, 2, 3, 1}, false, true},
    /* (B, H, S, D) -> its last-two swap made contiguous: logical (B, H, D, S) */
    {"attn_swap/f16/8x32x1024x128", OP_COPY, F16, F16, 4, {8, 32, 128, 1024}, {0, 1, 3, 2}, true, false},
    {"attn_swap/f16/4x16x512x128", OP_COPY, F16, F16, 4, {4, 16, 128, 512}, {0, 1, 3, 2}, false, true},
    {"cast/f32_to_bf16/16M", OP_CAST, BF16, F32, 1, {1 << 24}, {0}, false, false},
    {"cast/bf16_to_f32/16M", OP_CAST, F32, BF16, 1, {1 << 24}, {0}, false, false},
    {"cast/f32_to_f16/16M", OP_CAST, F16, F32, 1, {1 << 24}, {0}, false, false},
    {"cast/f16_to_f32/16M", OP_CAST, F32, F16, 1, {1 << 24}, {0}, false, false},
    {"cast/f32_to_e4m3/16M", OP_CAST, E4M3, F32, 1, {1 << 24}, {0}, false, false},
    {"cast/e4m3_to_f32/16M", OP_CAST, F32, E4M3, 1, {1 << 24}, {0}, false, false},
    {"cast/f32_to_i64/16M", OP_CAST, I64, F32, 1, {1 << 24}, {0}, false, false},
    {"fill/f32/16M", OP_FILL, F32, F32, 1, {1 << 24}, {0}, false, false},
    {"fill/bf16/16M", OP_FILL, BF16, BF16, 1, {1 << 24}, {0}, false, false},
};

/* Gathers: src contiguous (rows, cols); `nidx` int64 indices along `axis`
 * (numpy.take(src, idx, axis)), or with `along` an (rows, nidx) index
 * (numpy.take_along_axis(src, idx, 1)). Names as above. */
typedef struct gcase {
  const char *name;
  mn_dtype dt;
  int64_t rows, cols;
  int axis;
  int64_t nidx;
  bool along;
  bool api; /* through mnemo/index.h (allocating, validating) */
} gcase;

static const gcase gathers[] = {
    {"index_select0/f32/16384x256", F32, 16384, 256, 0, 16384, false, false},
    {"index_select0/bf16/16384x256", BF16, 16384, 256, 0, 16384, false, false},
    {"index_select1/f32/4096x4096", F32, 4096, 4096, 1, 1024, false, false},
    {"take_along1/f32/4096x1024", F32, 4096, 1024, 1, 1024, true, false},
    {"take_along1/i64/4096x1024", I64, 4096, 1024, 1, 1024, true, false},
    {"api_index_select0/f32/16384x256", F32, 16384, 256, 0, 16384, false, true},
    {"api_index_select1/f32/4096x4096", F32, 4096, 4096, 1, 1024, false, true},
    {"api_gather1/f32/4096x1024", F32, 4096, 1024, 1, 1024, true, true},
};

typedef struct bcfg {
  const kcase *c; /* or */
  const gcase *g;
  mn_device_t dev;
} bcfg;

typedef struct bufs {
  mn_stream_t *stream;
  mn_storage_t *ds, *ss, *cs; /* dst, src, ceiling scratch */
  mn_view_t *dv, *sv;
  size_t dbytes, sbytes, moved; /* moved: bytes read + written by one op */
  /* OP_GATHER: the index storage and the kernel's operands */
  mn_storage_t *is;
  mn__strided_t gdst, gsrc;
  mn__index_ops_t gix;
  mn_view_t *iv; /* api_ gathers: the index view (src view: sv) */
} bufs;

static void bufs_free(bufs *b) {
  if (b->stream) MN_BENCH_OK(mn_stream_synchronize(b->stream));
  mn_view_destroy(b->dv);
  mn_view_destroy(b->sv);
  mn_view_destroy(b->iv);
  mn_storage_release(b->ds);
  mn_storage_release(b->ss);
  mn_storage_release(b->cs);
  mn_storage_release(b->is);
  if (b->stream) MN_BENCH_OK(mn_stream_destroy(b->stream));
}

/* OP_GATHER: random data, random int64 indices in [-size + 1, size - 2]
 * (negatives wrap), the operands of mn__kernel_gather. */
static mn_status gather_make(const bcfg *cfg, bufs *b) {
  const gcase *c = cfg->g;
  const int64_t R = c->rows, C = c->cols, isz = c->axis == 0 ? R : C;
  const int64_t orow = c->axis == 0 ? c->nidx : R, ocol = c->axis == 0 ? C : c->nidx;
  const int64_t nsrc = R * C, nout = orow * ocol, nind = c->along ? R * c->nidx : c->nidx;
  const size_t item = mn_dtype_itemsize(c->dt);
  b->dbytes = (size_t)nout * item;
  b->sbytes = (size_t)nsrc * item;
  b->moved = 2 * b->dbytes + (size_t)nind * 8;
  mn_status st = mn_stream_create(cfg->dev, &b->stream);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->dbytes, NULL, b->stream, &b->ds);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->sbytes, NULL, b->stream, &b->ss);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, (size_t)nind * 8, NULL, b->stream, &b->is);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->moved + 256, NULL, b->stream, &b->cs);
  mn_view_t *tmp = NULL;
  int64_t n = nsrc > nind ? nsrc : nind;
  if (st == MN_OK) st = mn_view_empty(cfg->dev, F32, 1, &n, &tmp);
  if (st == MN_OK) st = mn_kernel_random_uniform(b->stream, tmp, 1234, 0, -100.0, 100.0);
  if (st == MN_OK) st = mn_kernel_cast(b->stream, mn_storage_data(b->ss), c->dt, mn_view_data(tmp), F32, (size_t)nsrc);
  if (st == MN_OK) st = mn_kernel_random_uniform(b->stream, tmp, 99, 0, (double)(1 - isz), (double)(isz - 1));
  if (st == MN_OK) st = mn_kernel_cast(b->stream, mn_storage_data(b->is), I64, mn_view_data(tmp), F32, (size_t)nind);
  if (st == MN_OK) st = mn_kernel_fill(b->stream, mn_storage_data(b->ds), b->dbytes, 1, "\x5a");
  if (st == MN_OK) st = mn_kernel_fill(b->stream, mn_storage_data(b->cs), b->moved + 256, 1, "\x11");
  if (st == MN_OK) st = mn_stream_synchronize(b->stream);
  mn_view_destroy(tmp);
  if (st != MN_OK) return st;
  /* iteration shape: the output's (orow, ocol) */
  b->gdst = (mn__strided_t){.data = mn_storage_data(b->ds), .ndim = 2, .sizes = {orow, ocol}, .strides = {ocol, 1}};
  b->gsrc = (mn__strided_t){.data = mn_storage_data(b->ss), .ndim = 2, .sizes = {orow, ocol},
                            .strides = {c->axis == 0 ? 0 : C, c->axis == 0 ? 1 : 0}};
  memset(&b->gix, 0, sizeof b->gix);
  b->gix.n = 1;
  b->gix.idx[0] = (mn__strided_t){.data = mn_storage_data(b->is), .ndim = 2, .sizes = {orow, ocol},
                                  .strides = {c->along ? c->nidx : c->axis == 0 ? 1 : 0,
                                              c->along ? 1 : c->axis == 0 ? 0 : 1}};
  b->gix.idx_dtype[0] = I64;
  b->gix.size[0] = isz;
  b->gix.stride[0] = c->axis == 0 ? C : 1;
  if (c->api) {
    /* indices in [0, size): index_select and gather refuse negatives, as PyTorch */
    int64_t ssz[2] = {R, C}, isz2[2] = {R, c->nidx};
    int64_t *ip = mn_storage_data(b->is);
    for (int64_t i = 0; i < nind; i++) ip[i] = ip[i] < 0 ? ip[i] + isz : ip[i];
    st = mn_view_create(b->ss, c->dt, 2, ssz, NULL, 0, &b->sv);
    if (st == MN_OK) st = mn_view_create(b->is, I64, c->along ? 2 : 1, c->along ? isz2 : &c->nidx, NULL, 0, &b->iv);
  }
  return st;
}

static mn_status bufs_make(const bcfg *cfg, bufs *b) {
  memset(b, 0, sizeof *b);
  if (cfg->g) {
    mn_status st = gather_make(cfg, b);
    if (st != MN_OK) bufs_free(b);
    return st;
  }
  const kcase *c = cfg->c;
  int64_t n = 1, strides[4];
  for (int d = 0; d < c->ndim; d++) n *= c->sizes[d];
  int64_t acc = 1;
  for (int i = c->ndim - 1; i >= 0; i--) {
    strides[c->perm[i]] = acc;
    acc *= c->sizes[c->perm[i]];
  }
  b->dbytes = (size_t)n * mn_dtype_itemsize(c->dt);
  b->sbytes = (size_t)n * mn_dtype_itemsize(c->st);
  b->moved = b->dbytes + (c->op == OP_FILL ? 0 : b->sbytes);
  mn_status st = mn_stream_create(cfg->dev, &b->stream);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->dbytes, NULL, b->stream, &b->ds);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->sbytes, NULL, b->stream, &b->ss);
  if (st == MN_OK) st = mn_storage_create(cfg->dev, b->moved + 256, NULL, b->stream, &b->cs);
  if (st == MN_OK) st = mn_view_create(b->ds, c->dt, c->ndim, c->sizes, NULL, 0, &b->dv);
  if (st == MN_OK)
    st = mn_view_create(b->ss, c->st, c->ndim, c->sizes, c->op == OP_CAST ? NULL : strides, 0, &b->sv);
  /* Random data (never time on zeros): uniform floats, cast to src's dtype. */
  mn_view_t *tmp = NULL;
  if (st == MN_OK) st = mn_view_empty(cfg->dev, F32, 1, &n, &tmp);
  if (st == MN_OK) st = mn_kernel_random_uniform(b->stream, tmp, 1234, 0, -100.0, 100.0);
  if (st == MN_OK) st = mn_kernel_cast(b->stream, mn_storage_data(b->ss), c->st, mn_view_data(tmp), F32, (size_t)n);
  if (st == MN_OK) st = mn_kernel_fill(b->stream, mn_storage_data(b->ds), b->dbytes, 1, "\x5a");
  if (st == MN_OK) st = mn_kernel_fill(b->stream, mn_storage_data(b->cs), b->moved + 256, 1, "\x11");
  if (st == MN_OK) st = mn_stream_synchronize(b->stream);
  mn_view_destroy(tmp);
  if (st != MN_OK) bufs_free(b);
  return st;
}

/* One operation, queued (not waited for). */
static mn_status op_launch(const bcfg *cfg, const bufs *b) {
  if (cfg->g && cfg->g->api) {
    mn_view_t *out = NULL;
    mn_status st = cfg->g->along ? mn_view_gather(b->sv, cfg->g->axis, b->iv, b->stream, &out)
                                 : mn_view_index_select(b->sv, cfg->g->axis, b->iv, b->stream, &out);
    mn_view_destroy(out); /* the storage stays until the stream reaches the gather */
    return st;
  }
  if (cfg->g) return mn__kernel_gather(b->stream, &b->gdst, &b->gsrc, cfg->g->dt, &b->gix, "bench");
  if (cfg->c->op == OP_FILL) return mn_kernel_fill_view(b->stream, b->dv, mn_scalar_float(1.5));
  return mn_kernel_copy_view(b->stream, b->dv, b->sv);
}

static mn_status op_once(const bcfg *cfg, const bufs *b) {
  mn_status st = op_launch(cfg, b);
  return st == MN_OK ? mn_stream_synchronize(b->stream) : st;
}

/* The ceiling for the same bytes: a device copy of moved/2 bytes (read +
 * write = moved) inside a scratch storage, or a memset of the dst bytes. */
static mn_status ceiling_launch(const bcfg *cfg, const bufs *b) {
  if (cfg->c && cfg->c->op == OP_FILL) return mn_memset_async(cfg->dev, mn_storage_data(b->ds), 0x3f, b->dbytes, b->stream);
  char *scratch = mn_storage_data(b->cs); /* two halves of moved/2 bytes (256-byte aligned) */
  size_t half = (b->moved / 2 + 255) & ~(size_t)255;
  return mn_memcpy_async(cfg->dev, scratch + half, cfg->dev, scratch, b->moved / 2, b->stream);
}

/* Median GB/s over `reps` timings of a batch of queued operations and one
 * synchronize (launch latency overlaps the previous operation on a GPU). */
static double median_gbps(const bcfg *cfg, const bufs *b, bool ceiling, int reps) {
  enum { BATCH = 4 };
  double t[64];
  for (int r = 0; r < reps; r++) {
    double t0 = mn_bench_now_s();
    mn_status st = MN_OK;
    for (int k = 0; k < BATCH && st == MN_OK; k++) st = ceiling ? ceiling_launch(cfg, b) : op_launch(cfg, b);
    if (st == MN_OK) st = mn_stream_synchronize(b->stream);
    t[r] = st == MN_OK ? (mn_bench_now_s() - t0) / BATCH : 1e30;
  }
  return (double)b->moved / mn_bench_median(t, (size_t)reps) / 1e9;
}

static void bench_kernel(mn_bench_t *bb, void *arg) {
  const bcfg *cfg = arg;
  bufs b;
  if (bufs_make(cfg, &b) != MN_OK) {
    mn_bench_error(bb, mn_last_error());
    return;
  }
  while (mn_bench_next(bb)) {
    if (op_once(cfg, &b) != MN_OK) {
      mn_bench_error(bb, mn_last_error());
      break;
    }
  }
  /* No SetBytesProcessed: Google Benchmark would print a second, differently
   * counted rate next to GBps. */
  const int reps = 11;
  double ceil1 = median_gbps(cfg, &b, true, reps), own = median_gbps(cfg, &b, false, reps),
         ceil2 = median_gbps(cfg, &b, true, reps);
  /* The ceiling by construction (as `mnemo bench`): the best of the raw
   * primitive and the case itself; ceiling_set_by_case = 1 when the case was
   * the faster (the CPU kernels run on the pool's threads, memcpy on one). */
  double raw = ceil1 > ceil2 ? ceil1 : ceil2, ceiling = own > raw ? own : raw;
  mn_bench_counter(bb, "GBps", own);
  mn_bench_counter(bb, "ceiling_GBps", ceiling);
  mn_bench_counter(bb, "pct_of_ceiling", 100.0 * own / ceiling);
  mn_bench_counter(bb, "ceiling_set_by_case", own > raw ? 1.0 : 0.0);
  bufs_free(&b);
}

int main(int argc, char **argv) {
  enum { NC = sizeof cases / sizeof cases[0], NG = sizeof gathers / sizeof gathers[0] };
  static bcfg cfgs[2][NC], gcfgs[2][NG];
  int ncuda = 0;
  MN_BENCH_OK(mn_device_count(MN_DEVICE_CUDA, &ncuda));
  for (int d = 0; d < 2; d++) {
    if (d == 1 && ncuda == 0) break;
    for (int k = 0; k < NC; k++) {
      const kcase *c = &cases[k];
      if ((d == 0 && c->cuda_only) || (d == 1 && c->cpu_only)) continue;
      cfgs[d][k] = (bcfg){.c = c, .dev = d == 0 ? mn_device_cpu() : mn_device_cuda(0)};
      char name[160];
      snprintf(name, sizeof name, "kernels/%s/%s", d == 0 ? "cpu" : "cuda", c->name);
      mn_bench_register(name, bench_kernel, &cfgs[d][k], 0, NULL);
    }
    for (int k = 0; k < NG; k++) {
      gcfgs[d][k] = (bcfg){.g = &gathers[k], .dev = d == 0 ? mn_device_cpu() : mn_device_cuda(0)};
      char name[160];
      snprintf(name, sizeof name, "kernels/%s/%s", d == 0 ? "cpu" : "cuda", gathers[k].name);
      mn_bench_register(name, bench_kernel, &gcfgs[d][k], 0, NULL);
    }
  }
  return mn_bench_main(argc, argv);
}
