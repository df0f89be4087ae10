/* kernels/kernels.c: dispatch of the fill and copy kernels by device: CPU code
 * runs at once on CPU memory and as queued host work on SIM streams; CUDA memory
 * goes to the CUDA launchers. Every op is planned first (kernels/plan.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_exec.h"
#include "kernels/ops.h"
#include "kernels/cuda_kernels.h"
#include "kernels/philox.h"
#include "kernels/plan.h"
#include "kernels/pool.h"
#include "mnemo/kernels.h"
#include "runtime/checked.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/nvtx.h"

mn_status mn_kernel_copy(mn_stream_t *stream, void *dst, const void *src, size_t nbytes) {
  MN__CHECK_ARG(stream != NULL, "stream must not be NULL");
  if (nbytes == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL (nbytes=%zu)", nbytes);
  mn_device_t dev = mn_stream_device(stream);
  mn_status st;
  mn__nvtx_push("mnemo.copy", (uint64_t)nbytes);
#ifdef MNEMO_HAVE_CUDA
  if (dev.type == MN_DEVICE_CUDA)
    st = mn__cuda_copy(dev.index, mn_stream_native(stream), dst, src, nbytes);
  else
#endif
    st = mn_memcpy_async(dev, dst, dev, src, nbytes, stream);
  mn__nvtx_pop();
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* ---- planned copy with cast, strided fill, contiguous cast, random fill ---- */

typedef enum job_op { JOB_PLAN, JOB_RANDOM, JOB_QUANT } job_op;

/* One job: the plan (or the random fill's geometry) copied out of the views,
 * so SIM streams can run it after the caller's views are gone (the memory
 * itself is the caller's to keep alive until the stream reaches it). */
typedef struct kernel_job {
  job_op op;
  bool emulated; /* MNEMO_KERNEL_EMU: a SIM job run by the emulated CUDA kernels */
  mn__plan_t plan;
  unsigned char pattern[16];
  /* JOB_RANDOM */
  mn__strided_t rdst;
  mn_dtype rdtype;
  mn__rand_params_t rp;
  /* JOB_QUANT */
  mn__quant_t q;
} kernel_job;

typedef struct random_ctx {
  const kernel_job *j;
  int64_t n, ntasks;
} random_ctx;

/* Elements [b, e) of the row-major order of the fill's view. */
static void random_task(void *arg, int64_t task) {
  const random_ctx *c = arg;
  const mn__strided_t *v = &c->j->rdst;
  int64_t per = c->n / c->ntasks, extra = c->n % c->ntasks;
  int64_t b = task * per + (task < extra ? task : extra), e = b + per + (task < extra ? 1 : 0);
  if (b >= e) return;
  int64_t item = (int64_t)mn_dtype_itemsize(c->j->rdtype), idx[MN_MAX_DIMS], off = 0, rest = b;
  for (int d = v->ndim - 1; d >= 0; d--) {
    idx[d] = rest % v->sizes[d];
    rest /= v->sizes[d];
    off += idx[d] * v->strides[d];
  }
  for (int64_t i = b;;) {
    mn__rand_elem(&c->j->rp, (int)c->j->rdtype, (uint64_t)i, v->data + off * item);
    if (++i == e) return;
    for (int d = v->ndim - 1; d >= 0; d--) {
      off += v->strides[d];
      if (++idx[d] < v->sizes[d]) break;
      off -= v->sizes[d] * v->strides[d];
      idx[d] = 0;
    }
  }
}

static void kernel_job_run(void *arg) {
  kernel_job *j = arg;
#ifdef MNEMO_KERNEL_EMU
  /* The SIM device is mnemo's simulated GPU: in this build its kernels are the
   * CUDA kernels, run on the host by tests/cuda_emu (one emulated device, the
   * launch complete when it returns). A refused launch is a launcher bug the
   * tests must see: stop loudly. */
  if (j->emulated) {
    mn_status st = j->op == JOB_PLAN    ? mn__cuda_exec(0, NULL, &j->plan, j->pattern)
                   : j->op == JOB_QUANT ? mn__cuda_quant(0, NULL, &j->q)
                                        : mn__cuda_random(0, NULL, &j->rdst, (int)j->rdtype, &j->rp);
    if (st != MN_OK) {
      fprintf(stderr, "mnemo: emulated CUDA kernel failed: %s\n", mn_last_error());
      abort();
    }
    return;
  }
#endif
  if (j->op == JOB_PLAN) {
    mn__cpu_exec(&j->plan, j->pattern);
    return;
  }
  if (j->op == JOB_QUANT) {
    const int64_t n = mn__quant_units(&j->q);
    for (int64_t u = 0; u < n; u++) {
      if (j->q.dequant)
        mn__dequant_unit(&j->q, u);
      else
        mn__quant_unit(&j->q, u);
    }
    return;
  }
  random_ctx c = {.j = j, .n = 1};
  for (int d = 0; d < j->rdst.ndim; d++) c.n *= j->rdst.sizes[d];
  int64_t want = c.n / 65536 + 1;
  c.ntasks = want < 4 * mn__pool_threads() ? want : 4 * mn__pool_threads();
  mn__pool_run(random_task, &c, c.ntasks);
}

static void kernel_job_run_free(void *arg) {
  kernel_job_run(arg);
  free(arg);
}

/* Runs the job now (CPU), queues it on the SIM stream, or launches the CUDA
 * kernels on the stream's native stream. */
static mn_status kernel_job_submit(mn_stream_t *stream, const kernel_job *job, const char *func) {
  mn_device_t dev = mn_stream_device(stream);
  switch (dev.type) {
    case MN_DEVICE_CPU: {
      kernel_job_run((void *)job);
      return MN_OK;
    }
    case MN_DEVICE_SIM: {
      kernel_job *j = mn__malloc(sizeof *j);
      if (!j) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
      *j = *job;
#ifdef MNEMO_KERNEL_EMU
      j->emulated = true;
#endif
      mn_status st = mn_stream_launch_host(stream, kernel_job_run_free, j);
      if (st != MN_OK) free(j);
      return st;
    }
    case MN_DEVICE_CUDA:
#ifdef MNEMO_HAVE_CUDA
      if (job->op == JOB_PLAN) return mn__cuda_exec(dev.index, mn_stream_native(stream), &job->plan, job->pattern);
      if (job->op == JOB_QUANT) return mn__cuda_quant(dev.index, mn_stream_native(stream), &job->q);
      return mn__cuda_random(dev.index, mn_stream_native(stream), &job->rdst, job->rdtype, &job->rp);
#else
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "built without CUDA");
#endif
    case MN_DEVICE_META:
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "meta: no kernel runs on the meta device (it holds no data)");
    default:
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid device type");
  }
}

static int64_t strided_numel(const mn__strided_t *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
  return n;
}

/* A written operand may not have stride 0 on a dim of size > 1 (ATen's
 * assert_no_internal_overlap). */
static mn_status check_written(const mn__strided_t *t, const char *func) {
  for (int d = 0; d < t->ndim; d++)
    if (t->strides[d] == 0 && t->sizes[d] > 1)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                       "unsupported operation: more than one element of the written-to tensor refers to a single "
                       "memory location (stride 0 at dim %d)",
                       d);
  return MN_OK;
}

bool mn__strided_is_dense(const mn__strided_t *t) {
  int perm[MN_MAX_DIMS], n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] >= 2) perm[n++] = d;
  for (int i = 1; i < n; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && t->strides[perm[j]] < t->strides[perm[j - 1]]; j--) {
      int x = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = x;
    }
  int64_t want = 1;
  for (int i = 0; i < n; i++) {
    if (t->strides[perm[i]] != want) return false;
    want *= t->sizes[perm[i]];
  }
  return true;
}

void mn__strided_extent(const mn__strided_t *t, size_t itemsize, uintptr_t *lo, uintptr_t *hi) {
  size_t bytes = 0; /* an operand that passed its view's bounds check always fits; saturate otherwise */
  if (!mn__strided_span_bytes(t->ndim, t->sizes, t->strides, 0, itemsize, &bytes)) bytes = SIZE_MAX;
  *lo = (uintptr_t)t->data;
  *hi = bytes > UINTPTR_MAX - *lo ? UINTPTR_MAX : *lo + bytes;
}

/* The same elements: same start, item size, sizes and strides (size-1 dims aside). */
static bool same_operand(const mn__strided_t *a, size_t aitem, const mn__strided_t *b, size_t bitem) {
  if (a->data != b->data || aitem != bitem || a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d])) return false;
  return true;
}

mn__overlap mn__strided_overlap(const mn__strided_t *a, size_t aitem, const mn__strided_t *b, size_t bitem) {
  if (strided_numel(a) == 0 || strided_numel(b) == 0) return MN__OVERLAP_NO;
  if (same_operand(a, aitem, b, bitem)) return MN__OVERLAP_FULL; /* ATen: a is b */
  uintptr_t alo, ahi, blo, bhi;
  mn__strided_extent(a, aitem, &alo, &ahi);
  mn__strided_extent(b, bitem, &blo, &bhi);
  if (!(alo < bhi && blo < ahi)) return MN__OVERLAP_NO;
  if (!mn__strided_is_dense(a) || !mn__strided_is_dense(b)) return MN__OVERLAP_TOO_HARD;
  /* dense: the extents are exactly their bytes */
  if (alo == blo && ahi == bhi && a->ndim == b->ndim &&
      memcmp(a->strides, b->strides, (size_t)a->ndim * sizeof *a->strides) == 0)
    return MN__OVERLAP_FULL;
  return MN__OVERLAP_PARTIAL;
}

/* Plans the operation over dst's geometry (src NULL: a fill of `pattern`,
 * dst_dtype's item size of it) and submits it inside its NVTX range. */
static mn_status run_plan(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dst_dtype, const mn__strided_t *src,
                          mn_dtype src_dtype, const void *pattern, const char *range, const char *func) {
  kernel_job job;
  memset(&job, 0, sizeof job);
  job.op = JOB_PLAN;
  if (pattern) memcpy(job.pattern, pattern, mn_dtype_itemsize(dst_dtype));
  mn__plan_make(&job.plan, dst, dst_dtype, src, src_dtype);
  mn__nvtx_push(range, (uint64_t)job.plan.numel * job.plan.dst_item);
  mn_status st = kernel_job_submit(stream, &job, func);
  mn__nvtx_pop();
  return st;
}

mn_status mn__kernel_copy_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dst_dtype,
                                  const mn__strided_t *src, mn_dtype src_dtype, const char *func) {
  mn_status st = check_written(dst, func);
  if (st != MN_OK) return st;
  if (dst->ndim != src->ndim)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "ndim differs (dst %d, src %d)", dst->ndim, src->ndim);
  for (int d = 0; d < dst->ndim; d++)
    if (dst->sizes[d] != src->sizes[d])
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "size at dim %d differs (dst %lld, src %lld)", d,
                       (long long)dst->sizes[d], (long long)src->sizes[d]);
  if (strided_numel(dst) == 0) return MN_OK;
  /* ATen's assert_no_partial_overlap: two dense operands whose bytes meet
   * without being the same elements would read what the copy wrote. The same
   * elements are a no-op of one dtype, an in-place cast (element by element)
   * of two. */
  mn__overlap ov = mn__strided_overlap(dst, mn_dtype_itemsize(dst_dtype), src, mn_dtype_itemsize(src_dtype));
  if (ov == MN__OVERLAP_FULL && dst_dtype == src_dtype) return MN_OK;
  if (ov == MN__OVERLAP_PARTIAL)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                     "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
                     "a single memory location. Please clone() the tensor before performing the operation.");
  /* contiguous same-dtype plans: split memcpy on the CPU pool, cudaMemcpyAsync on CUDA */
  return run_plan(stream, dst, dst_dtype, src, src_dtype, NULL, dst_dtype == src_dtype ? "mnemo.copy" : "mnemo.cast",
                  func);
}

mn_status mn__kernel_fill_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dtype, const void *pattern,
                                  const char *func) {
  mn_status st = check_written(dst, func);
  if (st != MN_OK || strided_numel(dst) == 0) return st;
  /* contiguous fills: split over the CPU pool; the 16-byte pattern kernel on CUDA */
  return run_plan(stream, dst, dtype, NULL, dtype, pattern, "mnemo.fill", func);
}

/* A dtype of each fill item size: only its size matters to a fill plan. */
static mn_dtype dtype_of_itemsize(size_t itemsize) {
  switch (itemsize) {
    case 1: return MN_DTYPE_UINT8;
    case 2: return MN_DTYPE_UINT16;
    case 4: return MN_DTYPE_UINT32;
    case 8: return MN_DTYPE_UINT64;
    default: return MN_DTYPE_COMPLEX128;
  }
}

mn_status mn_kernel_fill(mn_stream_t *stream, void *dst, size_t count, size_t itemsize, const void *pattern) {
  MN__CHECK_ARG(stream != NULL && pattern != NULL, "stream and pattern must not be NULL");
  MN__CHECK_ARG(itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16,
                "itemsize=%zu is not 1, 2, 4, 8 or 16", itemsize);
  if (count == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL, "dst must not be NULL (count=%zu)", count);
  MN__CHECK_ARG(count <= SIZE_MAX / itemsize, "count=%zu x itemsize=%zu overflows", count, itemsize);
  MN__CHECK_ARG(count <= (size_t)INT64_MAX, "count=%zu is too large", count);
  mn__strided_t sd = {.data = dst, .ndim = 1, .sizes = {(int64_t)count}, .strides = {1}};
  mn_status st = run_plan(stream, &sd, dtype_of_itemsize(itemsize), NULL, dtype_of_itemsize(itemsize), pattern,
                          "mnemo.fill", __func__);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_kernel_cast(mn_stream_t *stream, void *dst, mn_dtype dst_dtype, const void *src, mn_dtype src_dtype,
                         size_t count) {
  MN__CHECK_ARG(stream != NULL, "stream must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dst_dtype) && mn_dtype_is_valid(src_dtype), "invalid dtype (dst %d, src %d)",
                (int)dst_dtype, (int)src_dtype);
  if (count == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL (count=%zu)", count);
  MN__CHECK_ARG(count <= (size_t)INT64_MAX / 16, "count=%zu is too large", count);
  size_t di = mn_dtype_itemsize(dst_dtype), si = mn_dtype_itemsize(src_dtype);
  MN__CHECK_ARG(dst == src ? di == si
                           : ((const char *)dst + count * di <= (const char *)src ||
                              (const char *)src + count * si <= (const char *)dst),
                "dst and src overlap");
  if (dst_dtype == src_dtype) return dst == src ? MN_OK : mn_kernel_copy(stream, dst, src, count * di);
  mn__strided_t sd = {.data = dst, .ndim = 1, .sizes = {(int64_t)count}, .strides = {1}};
  mn__strided_t ss = {.data = (char *)src, .ndim = 1, .sizes = {(int64_t)count}, .strides = {1}};
  return run_plan(stream, &sd, dst_dtype, &ss, src_dtype, NULL, "mnemo.cast", __func__);
}

uint64_t mn_kernel_random_blocks(mn_dtype dtype, int64_t numel, bool normal) {
  if (numel <= 0) return 0;
  const uint64_t per = mn__rand_per_block((int)dtype, normal);
  return ((uint64_t)numel + per - 1) / per;
}

mn_status mn__kernel_random_strided(mn_stream_t *stream, const mn__strided_t *dst, mn_dtype dtype, uint64_t seed,
                                    uint64_t offset, bool normal, double a, double b, const char *func) {
  mn_status st = check_written(dst, func);
  if (st != MN_OK) return st;
  if (dtype != MN_DTYPE_FLOAT16 && dtype != MN_DTYPE_BFLOAT16 && dtype != MN_DTYPE_FLOAT32 &&
      dtype != MN_DTYPE_FLOAT64)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "random fill needs a float16, bfloat16, float32 or float64 view, not %s",
                     mn_dtype_name(dtype));
  if (!(a == a) || !(b == b) || a - a != 0 || b - b != 0)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "parameters must be finite (%g, %g)", a, b);
  int64_t numel = strided_numel(dst);
  if (numel == 0) return MN_OK;
  kernel_job job;
  memset(&job, 0, sizeof job);
  job.op = JOB_RANDOM;
  job.rdst = *dst;
  job.rdtype = dtype;
  job.rp = (mn__rand_params_t){.seed = seed, .offset = offset, .normal = normal, .a = a, .b = b,
                               .af = (float)a, .bf = (float)b};
  mn__nvtx_push("mnemo.fill", (uint64_t)numel * mn_dtype_itemsize(dtype));
  st = kernel_job_submit(stream, &job, func);
  mn__nvtx_pop();
  return st;
}

mn_status mn__kernel_quant(mn_stream_t *stream, const mn__quant_t *q, const char *func) {
  if (q->numel == 0) return MN_OK;
  kernel_job job;
  memset(&job, 0, sizeof job);
  job.op = JOB_QUANT;
  job.q = *q;
  mn__nvtx_push(q->dequant ? "mnemo.dequantize" : "mnemo.quantize", (uint64_t)q->numel);
  mn_status st = kernel_job_submit(stream, &job, func);
  mn__nvtx_pop();
  return st;
}
