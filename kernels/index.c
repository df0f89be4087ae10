/* kernels/index.c: the gather and scatter kernels of kernels/index.h: checks
 * of the operands, the prepared geometry (kernels/index_kern.h), the CPU
 * executor, and dispatch by device like the copy kernels (kernels/kernels.c):
 * at once on the CPU (split over kernels/pool.h when the work is large), a
 * heap job queued with mn_stream_launch_host on SIM streams (the emulated
 * CUDA kernels in the MNEMO_KERNEL_EMU build), the CUDA launchers
 * (kernels/cuda_index.cu) on CUDA streams.
 *
 * Order: the CPU walks positions in row-major order. Split over threads, a
 * scatter is split only along a "parallel" dim (dst stride != 0): positions
 * that reach one destination differ only on the serial dims (dst stride 0,
 * the index terms), so they stay in one task, in row-major order, and the
 * result is the single-threaded one bit for bit, accumulate included.
 * Thread-safe: no state; the pool serializes nothing of ours. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_kernels.h"
#include "kernels/index.h"
#include "kernels/index_kern.h"
#include "kernels/pool.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/nvtx.h"

#define MN__IX_PAR_BYTES ((int64_t)1 << 19)  /* moved bytes below which one thread runs */
#define MN__IX_TASK_BYTES ((int64_t)1 << 17) /* roughly the bytes per task */

/* ---- the geometry ---------------------------------------------------------- */

static mn_status check_operands(const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                                const mn__index_ops_t *ix, int op, const char *func) {
  if (!dst || !src || !ix) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "dst, src and indices must not be NULL");
  if (!mn_dtype_is_valid(dtype)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid dtype %d", (int)dtype);
  size_t item = mn_dtype_itemsize(dtype);
  if (item != 1 && item != 2 && item != 4 && item != 8 && item != 16)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "no gather/scatter kernel for %s (item size %zu)",
                     mn_dtype_name(dtype), item);
  if (op == MN__IX_SCATTER_ADD && !mn__ix_can_add(dtype))
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "accumulate is not supported for %s", mn_dtype_name(dtype));
  if (ix->n < 1 || ix->n > MN__INDEX_MAX)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%d index operands (1 .. %d)", ix->n, MN__INDEX_MAX);
  const mn__strided_t *shape = op == MN__IX_GATHER ? dst : src;
  if (shape->ndim < 0 || shape->ndim > MN_MAX_DIMS)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "ndim %d out of range", shape->ndim);
  const mn__strided_t *ops[2 + MN__INDEX_MAX] = {dst, src};
  for (int j = 0; j < ix->n; j++) {
    if (ix->idx_dtype[j] != MN_DTYPE_INT32 && ix->idx_dtype[j] != MN_DTYPE_INT64)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "index %d has dtype %s (int32 or int64 expected)", j,
                       mn_dtype_name(ix->idx_dtype[j]));
    if (ix->size[j] < 1 || ix->stride[j] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "index %d: indexed dim of size %lld, stride %lld", j,
                       (long long)ix->size[j], (long long)ix->stride[j]);
    ops[2 + j] = &ix->idx[j];
  }
  for (int k = 0; k < 2 + ix->n; k++) {
    if (ops[k]->ndim != shape->ndim)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "operand %d has %d dims, the iteration shape %d", k,
                       ops[k]->ndim, shape->ndim);
    for (int d = 0; d < shape->ndim; d++) {
      if (ops[k]->sizes[d] != shape->sizes[d])
        return mn__error(MN_ERR_INVALID_ARGUMENT, func, "operand %d: size %lld at dim %d, the iteration shape's %lld",
                         k, (long long)ops[k]->sizes[d], d, (long long)shape->sizes[d]);
      if (ops[k]->strides[d] < 0)
        return mn__error(MN_ERR_INVALID_ARGUMENT, func, "operand %d: negative stride at dim %d", k, d);
    }
  }
  /* the gathered-into operand is written once per position */
  if (op == MN__IX_GATHER)
    for (int d = 0; d < dst->ndim; d++)
      if (dst->strides[d] == 0 && dst->sizes[d] > 1)
        return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                         "unsupported operation: more than one element of the written-to tensor refers to a single "
                         "memory location (stride 0 at dim %d)",
                         d);
  return MN_OK;
}

/* Fills *g; g->numel == 0 when there is nothing to do. */
static void geom_make(mn__index_geom_t *g, int op, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                      const mn__index_ops_t *ix) {
  memset(g, 0, sizeof *g);
  const int64_t item = (int64_t)mn_dtype_itemsize(dtype);
  g->op = op;
  g->dtype = (int)dtype;
  g->item = (int)item;
  g->n = ix->n;
  g->dst = dst->data - dst->origin * item;
  g->src = src->data - src->origin * item;
  for (int j = 0; j < ix->n; j++) {
    const int64_t ii = ix->idx_dtype[j] == MN_DTYPE_INT64 ? 8 : 4;
    g->idx[j] = ix->idx[j].data - ix->idx[j].origin * ii;
    g->idx64[j] = ii == 8;
    g->isize[j] = ix->size[j];
    g->istride[j] = ix->stride[j] * item;
  }
  const mn__strided_t *shape = op == MN__IX_GATHER ? dst : src;
  int64_t numel = 1;
  int nd = 0;
  for (int d = 0; d < shape->ndim; d++) {
    const int64_t sz = shape->sizes[d];
    numel *= sz;
    if (sz == 1) continue;
    int64_t ds = dst->strides[d] * item, ss = src->strides[d] * item, is[MN__INDEX_MAX];
    for (int j = 0; j < ix->n; j++) is[j] = ix->idx[j].strides[d] * (g->idx64[j] ? 8 : 4);
    bool merge = nd > 0 && g->ds[nd - 1] == ds * sz && g->ss[nd - 1] == ss * sz;
    for (int j = 0; merge && j < ix->n; j++) merge = g->is[j][nd - 1] == is[j] * sz;
    if (merge) {
      g->size[nd - 1] *= sz;
    } else {
      g->size[nd] = sz;
      nd++;
    }
    g->ds[nd - 1] = ds;
    g->ss[nd - 1] = ss;
    for (int j = 0; j < ix->n; j++) g->is[j][nd - 1] = is[j];
  }
  if (nd == 0) { /* one element */
    g->size[0] = 1;
    nd = 1;
  }
  g->ndim = nd;
  g->numel = numel;
}

/* ---- the CPU executor ------------------------------------------------------ */

/* The index term (bytes into the data operand) at index offsets io[]. */
static inline int64_t index_term(const mn__index_geom_t *g, const int64_t *io) {
  int64_t k = 0;
  for (int j = 0; j < g->n; j++) k += mn__ix_load(g->idx[j] + io[j], g->idx64[j], g->isize[j]) * g->istride[j];
  return k;
}

/* n items of one row, the index term fixed (k): gather reads src + k, scatter
 * writes dst + k. */
static void row_fixed(const mn__index_geom_t *g, char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n,
                      int64_t k) {
  if (g->op == MN__IX_GATHER) {
    mn__copy_row(d, dstep, s + k, sstep, n, (size_t)g->item);
  } else if (g->op == MN__IX_SCATTER) {
    mn__copy_row(d + k, dstep, s, sstep, n, (size_t)g->item); /* a dstep of 0: the last write wins */
  } else {
    for (int64_t i = 0; i < n; i++) mn__ix_add(g->dtype, d + k + i * dstep, s + i * sstep);
  }
}

/* One index operand varying along the row: typed loops by item size and
 * index dtype. G: gather (the index moves the read), else scatter. */
#define MN__IX_LOOP(N, IT, G)                                                        \
  for (int64_t i = 0; i < n; i++) {                                                  \
    IT v;                                                                            \
    memcpy(&v, ip + i * istep, sizeof v);                                            \
    const int64_t k = ((int64_t)v + (v < 0 ? isize : 0)) * ist;                      \
    if (G)                                                                           \
      memcpy(d + i * dstep, s + i * sstep + k, N);                                   \
    else                                                                             \
      memcpy(d + i * dstep + k, s + i * sstep, N);                                   \
  }
#define MN__IX_ITEMS(IT, G)                        \
  switch (g->item) {                               \
    case 1: MN__IX_LOOP(1, IT, G) return;          \
    case 2: MN__IX_LOOP(2, IT, G) return;          \
    case 4: MN__IX_LOOP(4, IT, G) return;          \
    case 8: MN__IX_LOOP(8, IT, G) return;          \
    default: MN__IX_LOOP(16, IT, G) return;        \
  }

static void row_one_index(const mn__index_geom_t *g, char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n,
                          const char *ip, int64_t istep) {
  const int64_t isize = g->isize[0], ist = g->istride[0];
  if (g->op == MN__IX_GATHER) {
    if (g->idx64[0]) { MN__IX_ITEMS(int64_t, 1) } else { MN__IX_ITEMS(int32_t, 1) }
  } else if (g->op == MN__IX_SCATTER) {
    if (g->idx64[0]) { MN__IX_ITEMS(int64_t, 0) } else { MN__IX_ITEMS(int32_t, 0) }
  } else {
    for (int64_t i = 0; i < n; i++)
      mn__ix_add(g->dtype, d + i * dstep + mn__ix_load(ip + i * istep, g->idx64[0], isize) * ist, s + i * sstep);
  }
}
#undef MN__IX_ITEMS
#undef MN__IX_LOOP

/* A gather whose one index varies along the row but not from row to row
 * (index_select along the last axis): blocks of 8 rows share each index
 * load, and their 8 reads (random within each row) are independent misses in
 * flight together. rows x n positions; drow, srow: the rows' byte steps. */
#define MN__IX_BLOCK_LOOP(N, IT)                                                          \
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {                                              \
    const int64_t nb = rows - r0 < 8 ? rows - r0 : 8;                                     \
    char *d0 = d + r0 * drow;                                                             \
    const char *s0 = s + r0 * srow;                                                       \
    for (int64_t i = 0; i < n; i++) {                                                     \
      IT v;                                                                               \
      memcpy(&v, ip + i * istep, sizeof v);                                               \
      const int64_t k = ((int64_t)v + (v < 0 ? isize : 0)) * ist;                         \
      if (nb == 8) {                                                                      \
        for (int q = 0; q < 8; q++) memcpy(d0 + q * drow + i * dstep, s0 + q * srow + k, N); \
      } else {                                                                            \
        for (int64_t q = 0; q < nb; q++) memcpy(d0 + q * drow + i * dstep, s0 + q * srow + k, N); \
      }                                                                                   \
    }                                                                                     \
  }
#define MN__IX_BLOCK_ITEMS(IT)                     \
  switch (g->item) {                               \
    case 1: MN__IX_BLOCK_LOOP(1, IT) return;       \
    case 2: MN__IX_BLOCK_LOOP(2, IT) return;       \
    case 4: MN__IX_BLOCK_LOOP(4, IT) return;       \
    case 8: MN__IX_BLOCK_LOOP(8, IT) return;       \
    default: MN__IX_BLOCK_LOOP(16, IT) return;     \
  }

static void gather_row_block(const mn__index_geom_t *g, char *d, int64_t drow, int64_t dstep, const char *s,
                             int64_t srow, int64_t sstep, int64_t rows, int64_t n, const char *ip, int64_t istep) {
  const int64_t isize = g->isize[0], ist = g->istride[0];
  (void)sstep; /* 0: the caller's condition */
  if (g->idx64[0]) {
    MN__IX_BLOCK_ITEMS(int64_t)
  } else {
    MN__IX_BLOCK_ITEMS(int32_t)
  }
}
#undef MN__IX_BLOCK_ITEMS
#undef MN__IX_BLOCK_LOOP

/* Whole contiguous rows gathered by one index along dim 0 (index_select on
 * dim 0, an embedding lookup): a memcpy per row, and the start of the row
 * AHEAD positions on prefetched, since its address is random and no hardware
 * prefetcher finds it (the copy of each row then overlaps the next rows'
 * misses instead of waiting for its own). One thread, 16 MiB of float32:
 * 1.3-2.5x the odometer loop for rows of 1 KiB, 3-4x for rows of 8-256 B,
 * 1.0-1.15x for 4 KiB rows (bench/results/2026-11-29-loads-threads.md). */
static void gather_rows(const mn__index_geom_t *g) {
  enum { AHEAD = 4, PREFETCH_BYTES = 1024 };
  const int64_t rows = g->size[0], row = g->size[1] * g->item, istep = g->is[0][0];
  const int64_t ist = g->istride[0], isize = g->isize[0], pre = row < PREFETCH_BYTES ? row : PREFETCH_BYTES;
  const char *ip = g->idx[0];
  const int is64 = g->idx64[0];
  for (int64_t r = 0; r < rows; r++) {
    if (r + AHEAD < rows) {
      const char *q = g->src + (r + AHEAD) * g->ss[0] + mn__ix_load(ip + (r + AHEAD) * istep, is64, isize) * ist;
      for (int64_t b = 0; b < pre; b += 64) __builtin_prefetch(q + b, 0, 3);
    }
    memcpy(g->dst + r * g->ds[0], g->src + r * g->ss[0] + mn__ix_load(ip + r * istep, is64, isize) * ist, (size_t)row);
  }
}

/* Every position of g in row-major order. */
static void cpu_run(const mn__index_geom_t *g) {
  const int in = g->ndim - 1;
  if (g->op == MN__IX_GATHER && g->n == 1 && g->ndim == 2 && g->is[0][1] == 0 && g->ds[1] == g->item &&
      g->ss[1] == g->item) {
    gather_rows(g);
    return;
  }
  if (g->op == MN__IX_GATHER && g->n == 1 && in >= 1 && g->is[0][in] != 0 && g->ss[in] == 0 &&
      g->is[0][in - 1] == 0 && g->size[in - 1] >= 2) {
    /* gather_row_block over the last two dims, an odometer over the others */
    const int rd = in - 1;
    int64_t outer = 1, pos[MN_MAX_DIMS] = {0}, doff = 0, soff = 0, ioff = 0;
    for (int d = 0; d < rd; d++) outer *= g->size[d];
    for (int64_t o = 0; o < outer; o++) {
      gather_row_block(g, g->dst + doff, g->ds[rd], g->ds[in], g->src + soff, g->ss[rd], g->ss[in], g->size[rd],
                       g->size[in], g->idx[0] + ioff, g->is[0][in]);
      for (int d2 = rd - 1; d2 >= 0; d2--) {
        doff += g->ds[d2];
        soff += g->ss[d2];
        ioff += g->is[0][d2];
        if (++pos[d2] < g->size[d2]) break;
        doff -= g->size[d2] * g->ds[d2];
        soff -= g->size[d2] * g->ss[d2];
        ioff -= g->size[d2] * g->is[0][d2];
        pos[d2] = 0;
      }
    }
    return;
  }
  const int64_t n = g->size[in];
  int64_t outer = 1;
  for (int d = 0; d < in; d++) outer *= g->size[d];
  if (outer == 0 || n == 0) return;
  bool fixed = true; /* no index varies along the row */
  for (int j = 0; j < g->n; j++) fixed = fixed && g->is[j][in] == 0;
  int64_t pos[MN_MAX_DIMS] = {0}, doff = 0, soff = 0, io[MN__INDEX_MAX] = {0};
  for (int64_t o = 0;;) {
    char *d = g->dst + doff;
    const char *s = g->src + soff;
    if (fixed) {
      row_fixed(g, d, g->ds[in], s, g->ss[in], n, index_term(g, io));
    } else if (g->n == 1) {
      row_one_index(g, d, g->ds[in], s, g->ss[in], n, g->idx[0] + io[0], g->is[0][in]);
    } else {
      int64_t jo[MN__INDEX_MAX];
      memcpy(jo, io, sizeof jo);
      for (int64_t i = 0; i < n; i++) {
        row_fixed(g, d + i * g->ds[in], 0, s + i * g->ss[in], 0, 1, index_term(g, jo));
        for (int j = 0; j < g->n; j++) jo[j] += g->is[j][in];
      }
    }
    if (++o == outer) return;
    for (int d2 = in - 1; d2 >= 0; d2--) { /* odometer over the outer dims */
      doff += g->ds[d2];
      soff += g->ss[d2];
      for (int j = 0; j < g->n; j++) io[j] += g->is[j][d2];
      if (++pos[d2] < g->size[d2]) break;
      doff -= g->size[d2] * g->ds[d2];
      soff -= g->size[d2] * g->ss[d2];
      for (int j = 0; j < g->n; j++) io[j] -= g->size[d2] * g->is[j][d2];
      pos[d2] = 0;
    }
  }
}

typedef struct split_ctx {
  const mn__index_geom_t *g;
  int dim;
  int64_t ntasks;
} split_ctx;

/* Positions whose coordinate on ctx->dim lies in the task's share. */
static void split_task(void *arg, int64_t task) {
  const split_ctx *c = arg;
  const int64_t len = c->g->size[c->dim], per = len / c->ntasks, extra = len % c->ntasks;
  const int64_t b = task * per + (task < extra ? task : extra), e = b + per + (task < extra ? 1 : 0);
  if (b >= e) return;
  mn__index_geom_t sub = *c->g;
  sub.size[c->dim] = e - b;
  sub.dst += b * sub.ds[c->dim];
  sub.src += b * sub.ss[c->dim];
  for (int j = 0; j < sub.n; j++) sub.idx[j] += b * sub.is[j][c->dim];
  cpu_run(&sub);
}

/* Runs g on the CPU: split over the pool along one dim when the work is
 * large. A gather splits on any dim (every position writes its own
 * element); a scatter only on a parallel dim (dst stride != 0). */
static void cpu_exec(const mn__index_geom_t *g) {
  const int64_t bytes = g->numel * g->item;
  const int threads = bytes >= MN__IX_PAR_BYTES ? mn__pool_threads() : 1;
  if (threads <= 1) {
    cpu_run(g);
    return;
  }
  int64_t want = bytes / MN__IX_TASK_BYTES + 1;
  if (want > 4 * (int64_t)threads) want = 4 * (int64_t)threads;
  int dim = -1;
  for (int d = 0; d < g->ndim && dim < 0; d++) /* the outermost splittable dim with room for the tasks */
    if ((g->op == MN__IX_GATHER || g->ds[d] != 0) && g->size[d] >= want) dim = d;
  if (dim < 0) /* else the largest splittable dim */
    for (int d = 0; d < g->ndim; d++)
      if ((g->op == MN__IX_GATHER || g->ds[d] != 0) && g->size[d] > 1 && (dim < 0 || g->size[d] > g->size[dim]))
        dim = d;
  if (dim < 0) {
    cpu_run(g);
    return;
  }
  split_ctx c = {.g = g, .dim = dim, .ntasks = g->size[dim] < want ? g->size[dim] : want};
  mn__pool_run(split_task, &c, c.ntasks);
}

/* ---- dispatch ---------------------------------------------------------------- */

typedef struct index_job {
  bool emulated; /* MNEMO_KERNEL_EMU: a SIM job run by the emulated CUDA kernels */
  mn__index_geom_t g;
} index_job;

static void index_job_run_free(void *arg) {
  index_job *j = arg;
#ifdef MNEMO_KERNEL_EMU
  /* as kernels.c: the SIM device's kernels are the emulated CUDA ones; a
   * refused launch is a launcher bug the tests must see */
  if (j->emulated) {
    if (mn__cuda_index(0, NULL, &j->g) != MN_OK) {
      fprintf(stderr, "mnemo: emulated CUDA index kernel failed: %s\n", mn_last_error());
      abort();
    }
    free(j);
    return;
  }
#endif
  cpu_exec(&j->g);
  free(j);
}

static mn_status run_index(mn_stream_t *stream, int op, const mn__strided_t *dst, const mn__strided_t *src,
                           mn_dtype dtype, const mn__index_ops_t *ix, const char *func) {
  if (!stream) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream must not be NULL");
  mn_status st = check_operands(dst, src, dtype, ix, op, func);
  if (st != MN_OK) return st;
  mn__index_geom_t g;
  geom_make(&g, op, dst, src, dtype, ix);
  if (g.numel == 0) return MN_OK;
  mn_device_t dev = mn_stream_device(stream);
  mn__nvtx_push(op == MN__IX_GATHER ? "mnemo.gather" : "mnemo.scatter", (uint64_t)g.numel * (uint64_t)g.item);
  switch (dev.type) {
    case MN_DEVICE_CPU:
      cpu_exec(&g);
      st = MN_OK;
      break;
    case MN_DEVICE_SIM: {
      index_job *j = mn__malloc(sizeof *j);
      if (!j) {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
        break;
      }
      j->emulated = false;
#ifdef MNEMO_KERNEL_EMU
      j->emulated = true;
#endif
      j->g = g;
      st = mn_stream_launch_host(stream, index_job_run_free, j);
      if (st != MN_OK) free(j);
      break;
    }
    case MN_DEVICE_CUDA:
#ifdef MNEMO_HAVE_CUDA
      st = mn__cuda_index(dev.index, mn_stream_native(stream), &g);
#else
      st = mn__error(MN_ERR_NOT_SUPPORTED, func, "built without CUDA");
#endif
      break;
    default:
      st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "no gather/scatter kernel for this device type");
  }
  mn__nvtx_pop();
  return st;
}

mn_status mn__kernel_gather(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                            const mn__index_ops_t *ix, const char *func) {
  return run_index(stream, MN__IX_GATHER, dst, src, dtype, ix, func);
}

mn_status mn__kernel_scatter(mn_stream_t *stream, const mn__strided_t *dst, const mn__strided_t *src, mn_dtype dtype,
                             const mn__index_ops_t *ix, bool accumulate, const char *func) {
  return run_index(stream, accumulate ? MN__IX_SCATTER_ADD : MN__IX_SCATTER, dst, src, dtype, ix, func);
}
