/* kernels/kernels.c: dispatch of the fill and copy kernels by device: CPU code
 * runs at once on CPU memory and as queued host work on SIM streams; CUDA memory
 * goes to the CUDA launchers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_kernels.h"
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
