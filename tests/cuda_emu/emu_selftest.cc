// tests/cuda_emu/emu_selftest.cc: checks of the launch emulation itself, run by
// tests/test_kernels_emu.c: every thread of every block runs once with its
// coordinates, __syncthreads is a real barrier (a block-wide reduction through
// shared memory that is wrong without one), shared memory is per block, threads
// that return early do not hold a barrier up, grid-stride loops cover their
// range, a missing barrier shows as stale reads, and configurations CUDA
// refuses are refused. Threading: called from the test's main thread.
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <vector>

#include "cuda_runtime.h"
#include "kernels/cuda_launch.h"
#include "mn_emu.h"

namespace {

int failures = 0;
#define EMU_CHECK(c)                                                          \
  do {                                                                        \
    if (!(c)) {                                                               \
      fprintf(stderr, "%s:%d: emulation check failed: %s\n", __FILE__, __LINE__, #c); \
      failures++;                                                             \
    }                                                                         \
  } while (0)

// out[global thread id] = its linear coordinates, once per thread.
__global__ void coords_kernel(unsigned *out, std::atomic<unsigned> *calls) {
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = b * 100000u + t;
  calls->fetch_add(1);
}

// A tree reduction in shared memory: each step reads what other threads wrote
// before the barrier; block b writes the sum of b*n .. b*n+n-1 to out[b].
__global__ void reduce_kernel(const unsigned *in, unsigned *out) {
  __shared__ unsigned s[256];
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = in[blockIdx.x * n + t];
  __syncthreads();
  for (unsigned half = n / 2; half > 0; half /= 2) {
    unsigned v = t < half ? s[t] + s[t + half] : 0;
    __syncthreads();
    if (t < half) s[t] = v;
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Half the threads leave before the barrier; the rest must still pass it.
__global__ void early_exit_kernel(unsigned *out) {
  __shared__ unsigned flag[1];
  if (threadIdx.x % 2 == 1) return;
  if (threadIdx.x == 0) flag[0] = blockIdx.x + 1;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = flag[0];
}

// A grid-stride loop: every element once, whatever the grid.
__global__ void stride_kernel(unsigned *out, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] += i + 1;
}

// Reads a neighbour's shared slot with (barrier = 1) or without a barrier.
__global__ void neighbour_kernel(unsigned *out, int barrier) {
  __shared__ unsigned s[64];
  const unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = blockIdx.x * 1000u + t + 1;
  if (barrier) __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n];
  if (barrier) __syncthreads();
  s[t] = 0;  // the next block starts from zeros (it would on the GPU only by chance)
}

}  // namespace

extern "C" int mn_emu_selftest(void) {
  failures = 0;
  {  // every thread once, 3-d grid and block
    const dim3 grid(3, 2, 2), block(4, 3, 2);
    const unsigned nb = 12, nt = 24;
    std::vector<unsigned> out(nb * nt, 0xFFFFFFFFu);
    std::atomic<unsigned> calls(0);
    EMU_CHECK(mn__launch(coords_kernel, grid, block, 0, nullptr, out.data(), &calls) == cudaSuccess);
    EMU_CHECK(calls.load() == nb * nt);
    unsigned bad = 0;
    for (unsigned b = 0; b < nb; b++)
      for (unsigned t = 0; t < nt; t++) bad += out[b * nt + t] != b * 100000u + t;
    EMU_CHECK(bad == 0);
  }
  {  // a real barrier and per-block shared memory
    const unsigned blocks = 5, n = 256;
    std::vector<unsigned> in(blocks * n), out(blocks, 0);
    for (unsigned i = 0; i < blocks * n; i++) in[i] = i;
    mn_emu_stats_t before, after;
    mn_emu_stats(&before);
    EMU_CHECK(mn__launch(reduce_kernel, blocks, n, 0, nullptr, (const unsigned *)in.data(), out.data()) ==
              cudaSuccess);
    mn_emu_stats(&after);
    for (unsigned b = 0; b < blocks; b++) {
      unsigned want = 0;
      for (unsigned i = 0; i < n; i++) want += b * n + i;
      EMU_CHECK(out[b] == want);
    }
    EMU_CHECK(after.barriers - before.barriers == blocks * (1 + 2 * 8));  // log2(256) = 8 steps
  }
  {  // threads that returned do not hold the barrier
    const unsigned blocks = 3, n = 64;
    std::vector<unsigned> out(blocks * n, 0);
    EMU_CHECK(mn__launch(early_exit_kernel, blocks, n, 0, nullptr, out.data()) == cudaSuccess);
    unsigned bad = 0;
    for (unsigned b = 0; b < blocks; b++)
      for (unsigned t = 0; t < n; t++) bad += out[b * n + t] != (t % 2 ? 0u : b + 1);
    EMU_CHECK(bad == 0);
  }
  {  // grid-stride loops with more elements than threads
    const unsigned n = 10007;
    std::vector<unsigned> out(n, 0);
    EMU_CHECK(mn__launch(stride_kernel, dim3(3), dim3(64), 0, nullptr, out.data(), n) == cudaSuccess);
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++) bad += out[i] != i + 1;
    EMU_CHECK(bad == 0);
  }
  {  // with the barrier every thread sees its neighbour's write; without it the
     // emulation shows the race (threads of a block run in turn between barriers,
     // ascending on even blocks, descending on odd ones), in every block
    const unsigned blocks = 2, n = 64;
    std::vector<unsigned> out(blocks * n, 0);
    EMU_CHECK(mn__launch(neighbour_kernel, dim3(blocks), dim3(n), 0, nullptr, out.data(), 1) == cudaSuccess);
    unsigned bad = 0;
    for (unsigned b = 0; b < blocks; b++)
      for (unsigned t = 0; t < n; t++) bad += out[b * n + t] != b * 1000u + (t + 1) % n + 1;
    EMU_CHECK(bad == 0);
    EMU_CHECK(mn__launch(neighbour_kernel, dim3(blocks), dim3(n), 0, nullptr, out.data(), 0) == cudaSuccess);
    for (unsigned b = 0; b < blocks; b++) {
      unsigned stale = 0;
      for (unsigned t = 0; t < n; t++) stale += out[b * n + t] != b * 1000u + (t + 1) % n + 1;
      EMU_CHECK(stale > 0);
    }
  }
  {  // configurations CUDA refuses
    unsigned sink[1];
    std::atomic<unsigned> calls(0);
    (void)cudaGetLastError();
    EMU_CHECK(mn__launch(coords_kernel, dim3(1), dim3(1025), 0, nullptr, sink, &calls) ==
              cudaErrorInvalidConfiguration);
    EMU_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    EMU_CHECK(cudaGetLastError() == cudaSuccess);
    EMU_CHECK(mn__launch(coords_kernel, dim3(0), dim3(32), 0, nullptr, sink, &calls) ==
              cudaErrorInvalidConfiguration);
    EMU_CHECK(mn__launch(coords_kernel, dim3(1, 65536), dim3(32), 0, nullptr, sink, &calls) ==
              cudaErrorInvalidConfiguration);
    EMU_CHECK(mn__launch(coords_kernel, dim3(1), dim3(1, 1, 65), 0, nullptr, sink, &calls) ==
              cudaErrorInvalidConfiguration);
    EMU_CHECK(mn__launch(coords_kernel, dim3(1), dim3(32), 64 * 1024, nullptr, sink, &calls) ==
              cudaErrorInvalidConfiguration);
    EMU_CHECK(calls.load() == 0);
    (void)cudaGetLastError();
  }
  {  // the emulated device
    int dev = -1, sms = 0;
    EMU_CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    EMU_CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    EMU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && sms >= 1);
  }
  printf("emulation self-test: %d failures\n", failures);
  return failures;
}
