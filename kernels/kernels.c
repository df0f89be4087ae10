/* kernels/kernels.c: dispatch of the fill and copy kernels by device: CPU code
 * runs at once on CPU memory and as queued host work on SIM streams; CUDA memory
 * goes to the CUDA launchers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_kernels.h"
#include "kernels/reference.h"
#include "mnemo/mnemo.h"
#include "profiling/nvtx.h"
#include "runtime/error.h"

/* Fills count items of itemsize bytes by doubling copies of the first item. */
static void cpu_fill(void *dst, size_t count, size_t itemsize, const void *pattern) {
  if (count == 0) return;
  if (itemsize == 1) {
    memset(dst, *(const unsigned char *)pattern, count);
    return;
  }
  unsigned char *d = dst;
  size_t total = count * itemsize, done = itemsize;
  memcpy(d, pattern, itemsize);
  while (done < total) {
    size_t n = done < total - done ? done : total - done;
    memcpy(d + done, d, n);
    done += n;
  }
}

typedef struct fill_job {
  void *dst;
  size_t count, itemsize;
  unsigned char pattern[16];
} fill_job;

static void fill_job_run(void *arg) {
  fill_job *j = arg;
  cpu_fill(j->dst, j->count, j->itemsize, j->pattern);
  free(j);
}

mn_status mn_kernel_fill(mn_stream_t *stream, void *dst, size_t count, size_t itemsize, const void *pattern) {
  MN__CHECK_ARG(stream != NULL && pattern != NULL, "stream and pattern must not be NULL");
  MN__CHECK_ARG(itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16,
                "itemsize=%zu is not 1, 2, 4, 8 or 16", itemsize);
  if (count == 0) return MN_OK;
  MN__CHECK_ARG(dst != NULL, "dst must not be NULL (count=%zu)", count);
  MN__CHECK_ARG(count <= SIZE_MAX / itemsize, "count=%zu x itemsize=%zu overflows", count, itemsize);
  mn_device_t dev = mn_stream_device(stream);
  mn_status st = MN_OK;
  mn__nvtx_push("mnemo.fill", (uint64_t)(count * itemsize));
  switch (dev.type) {
    case MN_DEVICE_CPU:
      cpu_fill(dst, count, itemsize, pattern);
      break;
    case MN_DEVICE_SIM: {
      fill_job *j = malloc(sizeof *j);
      if (!j) {
        st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
        break;
      }
      *j = (fill_job){.dst = dst, .count = count, .itemsize = itemsize};
      memcpy(j->pattern, pattern, itemsize);
      st = mn_stream_launch_host(stream, fill_job_run, j);
      if (st != MN_OK) free(j);
      break;
    }
    case MN_DEVICE_CUDA:
#ifdef MNEMO_HAVE_CUDA
      st = mn__cuda_fill(dev.index, mn_stream_native(stream), dst, count, itemsize, pattern);
#else
      st = mn__error(MN_ERR_NOT_SUPPORTED, __func__, "built without CUDA");
#endif
      break;
    default:
      st = mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "invalid device type");
  }
  mn__nvtx_pop();
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

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

/* ---- strided copy with cast, strided fill, contiguous cast ---------------- */

/* One strided job: geometry copied out of the views, so SIM streams can run it
 * after the caller's views are gone (the memory itself is the caller's to keep). */
typedef struct strided_job {
  mn__strided_t dst, src;
  mn_dtype dst_dtype, src_dtype;
  bool fill;
  unsigned char pattern[16];
} strided_job;

static void strided_job_run(void *arg) {
  strided_job *j = arg;
  int64_t n = 1;
  for (int d = 0; d < j->dst.ndim; d++) n *= j->dst.sizes[d];
  if (j->fill)
    mn__ref_fill(&j->dst, mn_dtype_itemsize(j->dst_dtype), j->pattern);
  else if (j->dst_dtype == j->src_dtype)
    mn__cpu_strided_copy(&j->dst, &j->src, mn_dtype_itemsize(j->dst_dtype), 0, n);
  else
    mn__ref_copy_cast(&j->dst, j->dst_dtype, &j->src, j->src_dtype, 0, n);
}

static void strided_job_run_free(void *arg) {
  strided_job_run(arg);
  free(arg);
}

/* Runs the job now (CPU) or queues it on the SIM stream; CUDA is not here yet. */
static mn_status strided_job_submit(mn_stream_t *stream, const strided_job *job, const char *func) {
  mn_device_t dev = mn_stream_device(stream);
  switch (dev.type) {
    case MN_DEVICE_CPU: {
      strided_job j = *job;
      strided_job_run(&j);
      return MN_OK;
    }
    case MN_DEVICE_SIM: {
      strided_job *j = malloc(sizeof *j);
      if (!j) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
      *j = *job;
      mn_status st = mn_stream_launch_host(stream, strided_job_run_free, j);
      if (st != MN_OK) free(j);
      return st;
    }
    default:
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "strided and casting kernels on %s memory are not implemented yet",
                       mn_device_type_name(dev.type));
  }
}

/* Checks that `v` lives on the stream's device and has no stride 0 on a dim
 * of size > 1 when it is written to. */
static mn_status check_operand(mn_stream_t *stream, const mn_view_t *v, bool written, const char *what,
                               const char *func) {
  if (!mn_device_equal(mn_view_device(v), mn_stream_device(stream)))
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "%s view is on another device than the stream", what);
  if (written)
    for (int d = 0; d < mn_view_ndim(v); d++)
      if (mn_view_stride(v, d) == 0 && mn_view_size(v, d) > 1)
        return mn__error(MN_ERR_INVALID_ARGUMENT, func,
                         "unsupported operation: more than one element of the written-to tensor refers to a single "
                         "memory location (stride 0 at dim %d)",
                         d);
  return MN_OK;
}

mn_status mn_kernel_copy_view(mn_stream_t *stream, const mn_view_t *dst, const mn_view_t *src) {
  MN__CHECK_ARG(stream != NULL && dst != NULL && src != NULL, "stream, dst and src must not be NULL");
  mn_status st = check_operand(stream, dst, true, "dst", __func__);
  if (st == MN_OK) st = check_operand(stream, src, false, "src", __func__);
  if (st != MN_OK) return st;
  MN__CHECK_ARG(mn_view_ndim(dst) == mn_view_ndim(src), "ndim differs (dst %d, src %d)", mn_view_ndim(dst),
                mn_view_ndim(src));
  for (int d = 0; d < mn_view_ndim(dst); d++)
    MN__CHECK_ARG(mn_view_size(dst, d) == mn_view_size(src, d), "size at dim %d differs (dst %lld, src %lld)", d,
                  (long long)mn_view_size(dst, d), (long long)mn_view_size(src, d));
  if (mn_view_numel(dst) == 0) return MN_OK;
  strided_job job = {.dst_dtype = mn_view_dtype(dst), .src_dtype = mn_view_dtype(src)};
  mn__strided_of_view(dst, &job.dst);
  mn__strided_of_view(src, &job.src);
  if (job.dst_dtype == job.src_dtype && job.dst.data == job.src.data &&
      memcmp(job.dst.strides, job.src.strides, sizeof job.dst.strides) == 0)
    return MN_OK;
  mn__nvtx_push(job.dst_dtype == job.src_dtype ? "mnemo.copy" : "mnemo.cast",
                (uint64_t)mn_view_numel(dst) * mn_dtype_itemsize(job.dst_dtype));
  st = strided_job_submit(stream, &job, __func__);
  mn__nvtx_pop();
  return st;
}

mn_status mn_kernel_fill_view(mn_stream_t *stream, const mn_view_t *dst, mn_scalar_t value) {
  MN__CHECK_ARG(stream != NULL && dst != NULL, "stream and dst must not be NULL");
  mn_status st = check_operand(stream, dst, true, "dst", __func__);
  if (st != MN_OK) return st;
  strided_job job = {.dst_dtype = mn_view_dtype(dst), .fill = true};
  st = mn_scalar_to_bytes(value, job.dst_dtype, job.pattern);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (mn_view_numel(dst) == 0) return MN_OK;
  if (mn_view_is_contiguous(dst))
    return mn_kernel_fill(stream, mn_view_data(dst), (size_t)mn_view_numel(dst), mn_dtype_itemsize(job.dst_dtype),
                          job.pattern);
  mn__strided_of_view(dst, &job.dst);
  mn__nvtx_push("mnemo.fill", (uint64_t)mn_view_numel(dst) * mn_dtype_itemsize(job.dst_dtype));
  st = strided_job_submit(stream, &job, __func__);
  mn__nvtx_pop();
  return st;
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
  strided_job job = {.dst_dtype = dst_dtype, .src_dtype = src_dtype};
  job.dst = (mn__strided_t){.data = dst, .ndim = 1, .sizes = {(int64_t)count}, .strides = {1}};
  job.src = (mn__strided_t){.data = (char *)src, .ndim = 1, .sizes = {(int64_t)count}, .strides = {1}};
  mn__nvtx_push("mnemo.cast", (uint64_t)(count * di));
  mn_status st = strided_job_submit(stream, &job, __func__);
  mn__nvtx_pop();
  return st;
}
