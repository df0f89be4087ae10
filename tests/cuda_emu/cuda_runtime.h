// tests/cuda_emu/cuda_runtime.h: the CUDA launch emulation's stand-in for
// <cuda_runtime.h>. With it first on the include path and MN_CUDA_EMULATION
// defined, kernels/*.cu compile as host C++ and every launch (kernels/
// cuda_launch.h) runs on the calling host thread: each block's threads are
// fibers that meet at a real barrier in __syncthreads, blocks run one after
// another (so a kernel's __shared__ arrays, function-local statics here, are
// per block), and launches are serialized (emu.cc). A test harness for index
// arithmetic, tiling and edge handling, not a GPU: it shows nothing of timing,
// the memory model, coalescing, warps or occupancy (docs/KERNELS.md, "Kernel
// emulation").
// Only what mnemo's kernels use is here. __CUDA_ARCH__ and __CUDACC__ stay
// undefined: shared host/device code takes its host branches.
// Threading: launches from any thread; one runs at a time (a global mutex).
#ifndef MNEMO_TESTS_CUDA_EMU_CUDA_RUNTIME_H
#define MNEMO_TESTS_CUDA_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

// Aligned as CUDA's (8 and 16 bytes; uint3 4): a vector access at a lesser
// address, which faults a GPU, is what UBSan's alignment check reports here.
struct alignas(8) uint2 {
  unsigned x, y;
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
static_assert(sizeof(uint2) == 8 && alignof(uint2) == 8 && sizeof(uint4) == 16 && alignof(uint4) == 16,
              "CUDA's vector sizes and alignments");
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

// The calling emulated thread's coordinates (set for each thread of a block).
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

// Every live thread of the block waits here until all have arrived (threads
// that returned no longer count, as on the GPU). Only inside a kernel.
void __syncthreads();

template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorLaunchOutOfResources = 701,
} cudaError_t;

typedef struct mn_emu_stream_s *cudaStream_t;

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

const char *cudaGetErrorName(cudaError_t err);
const char *cudaGetErrorString(cudaError_t err);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind, cudaStream_t stream);
// Blocks of blockSize threads one emulated SM holds: its 2048 threads over the
// block, at most 32 (the kernel's registers are not known here).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func, int blockSize,
                                                          size_t dynamicSMemSize);
template <typename F>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, F *func, int blockSize,
                                                                        size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, reinterpret_cast<const void *>(func), blockSize,
                                                       dynamicSMemSize);
}

namespace mn_emu {
// Runs body once per thread of every block of the grid (after CUDA's launch
// checks: a bad configuration is cudaErrorInvalidConfiguration, recorded as
// the thread's last error as a launch would).
cudaError_t run(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const std::function<void()> &body);
}  // namespace mn_emu

// The emulated launch behind mn__launch (kernels/cuda_launch.h): each thread
// calls the kernel with its own copies of the arguments.
template <typename... P>
static inline cudaError_t mn_emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
                                        cudaStream_t stream, P... args) {
  return mn_emu::run(grid, block, shared, stream, [&]() { kernel(args...); });
}

#endif  // MNEMO_TESTS_CUDA_EMU_CUDA_RUNTIME_H
