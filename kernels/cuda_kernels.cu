// kernels/cuda_kernels.cu: the CUDA fill and copy behind mn_kernel_fill and
// mn_kernel_copy on CUDA memory, launched on a caller's stream (extern "C").
// Each launcher makes its device current inside a device guard
// (runtime/cuda_device.h) and restores the caller's before returning.
// Threading: any thread; no state but kernels/cuda_grid.h's caches (atomics).
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_grid.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_launch.h"
#include "runtime/cuda_device.h"
#include "runtime/error.h"

namespace {

constexpr unsigned kFillThreads = 256;   // >= 16: head and tail bytes need 16 threads

// Byte j (0..15, little-endian) of a 16-byte unit, without spilling it to memory.
__device__ __forceinline__ unsigned char byte_of(uint4 w, size_t j) {
  const unsigned k = (unsigned)(j & 15u);
  const unsigned word = k < 8u ? (k < 4u ? w.x : w.y) : (k < 12u ? w.z : w.w);
  return (unsigned char)(word >> ((k & 3u) * 8u));
}

// Fills nbytes at dst with a pattern whose period (the itemsize) divides 16.
// Layout: `head` bytes up to the first 16-byte boundary, `nvec` 16-byte units,
// then fewer than 16 tail bytes. `wide` is the pattern as it reads from the
// first aligned unit on (rotated by head % itemsize), so the byte at offset t
// from dst is byte (t - head) mod 16 of `wide`, head and tail included.
__global__ void mn_fill_kernel(unsigned char *__restrict__ dst, size_t nbytes, size_t head,
                               size_t nvec, uint4 wide) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  uint4 *__restrict__ body = reinterpret_cast<uint4 *>(dst + head);
  for (size_t i = tid; i < nvec; i += stride) body[i] = wide;

  if (tid < head) dst[tid] = byte_of(wide, tid - head);  // unsigned wrap keeps mod 16 right
  const size_t tail_start = head + nvec * 16u;
  if (tid < nbytes - tail_start) {
    const size_t t = tail_start + tid;
    dst[t] = byte_of(wide, t - head);
  }
}

bool valid_itemsize(size_t itemsize) {
  return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16;
}

}  // namespace

extern "C" mn_status mn__cuda_fill(int device, void *stream, void *dst, size_t count,
                                   size_t itemsize, const void *pattern) {
  if (count == 0) return MN_OK;
  if (!valid_itemsize(itemsize)) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "itemsize=%zu is not 1, 2, 4, 8 or 16",
                     itemsize);
  }
  if (dst == NULL || pattern == NULL) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "dst=%p pattern=%p: both must be non-NULL",
                     dst, pattern);
  }
  if (count > SIZE_MAX / itemsize) {
    return mn__error(MN_ERR_OVERFLOW, __func__, "count=%zu * itemsize=%zu overflows size_t", count,
                     itemsize);
  }
  const size_t nbytes = count * itemsize;
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;

  size_t head = (16u - (size_t)((uintptr_t)dst & 15u)) & 15u;
  if (head > nbytes) head = nbytes;
  const size_t nvec = (nbytes - head) / 16u;

  const unsigned char *p = static_cast<const unsigned char *>(pattern);
  unsigned char w[16];
  for (size_t i = 0; i < 16; i++) w[i] = p[(head + i) % itemsize];
  uint4 wide;
  memcpy(&wide, w, sizeof wide);

  const size_t work = nvec > 16 ? nvec : 16;
  const unsigned blocks = mn_grid::grid_for<mn_fill_kernel, kFillThreads>(device, (int64_t)work);
  cudaError_t err = mn__launch(mn_fill_kernel, blocks, kFillThreads, 0, static_cast<cudaStream_t>(stream),
                               static_cast<unsigned char *>(dst), nbytes, head, nvec, wide);
  mn__cuda_guard_leave(&guard);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // the failed launch's own error, reported here
    return mn__error(MN_ERR_DEVICE, __func__,
                     "launching fill (dst=%p, count=%zu, itemsize=%zu, %u blocks) on cuda:%d "
                     "stream=%p failed: %s (%s)",
                     dst, count, itemsize, blocks, device, stream, cudaGetErrorName(err),
                     cudaGetErrorString(err));
  }
  return MN_OK;
}

// Device-to-device copies go through the copy engines (cudaMemcpyAsync), which
// already run at full bandwidth for any alignment.
extern "C" mn_status mn__cuda_copy(int device, void *stream, void *dst, const void *src,
                                   size_t nbytes) {
  if (nbytes == 0) return MN_OK;
  if (dst == NULL || src == NULL) {
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "dst=%p src=%p: both must be non-NULL",
                     dst, src);
  }
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;
  cudaError_t err = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(stream));
  mn__cuda_guard_leave(&guard);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return mn__error(MN_ERR_DEVICE, __func__,
                     "cudaMemcpyAsync(dst=%p, src=%p, nbytes=%zu, device-to-device) on cuda:%d "
                     "stream=%p failed: %s (%s)",
                     dst, src, nbytes, device, stream, cudaGetErrorName(err),
                     cudaGetErrorString(err));
  }
  return MN_OK;
}
