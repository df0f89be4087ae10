// kernels/cuda_grid.h: grid sizes of mnemo's grid-stride CUDA kernels: the
// blocks the work needs, at most what the device runs at once (its SMs times
// the kernel's occupancy from cudaOccupancyMaxActiveBlocksPerMultiprocessor:
// 64-bit index kernels fit fewer blocks per SM than 32-bit ones), queried once
// per kernel and device. Call with the kernel's device current (inside the
// launcher's device guard). C++ only (CUDA sources and their host emulation).
// Threading: any thread; the caches are relaxed atomics (threads racing on a
// first query store the same answer).
#ifndef MNEMO_KERNELS_CUDA_GRID_H
#define MNEMO_KERNELS_CUDA_GRID_H

#include <cuda_runtime.h>

#include <atomic>
#include <stdint.h>

namespace mn_grid {

constexpr int kDevices = 64;              // devices cached; others are asked every time
constexpr int kFallbackBlocksPerSm = 8;   // the occupancy query failed
constexpr int64_t kFallbackBlocks = 1024; // the SM count query failed

// A positive per-device figure, asked of CUDA through `query` (0 when CUDA
// cannot tell, its error cleared) until it answers, then kept in `cache`.
template <typename Q>
static inline int cached_per_device(std::atomic<int> *cache, int device, Q query) {
  const bool cached = device >= 0 && device < kDevices;
  int v = cached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (v > 0) return v;
  v = query();
  if (v > 0 && cached) cache[device].store(v, std::memory_order_relaxed);
  return v;
}

// SMs of `device`; 0 when CUDA cannot tell (its error cleared).
static inline int sm_count(int device) {
  static std::atomic<int> cache[kDevices];
  return cached_per_device(cache, device, [device] {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && v > 0) return v;
    (void)cudaGetLastError();
    return 0;
  });
}

// Blocks of THREADS threads (no dynamic shared memory) of kernel K one SM of
// `device` holds; kFallbackBlocksPerSm when CUDA cannot tell (error cleared).
template <auto K, int THREADS>
int blocks_per_sm(int device) {
  static std::atomic<int> cache[kDevices];
  const int v = cached_per_device(cache, device, [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K, THREADS, 0) == cudaSuccess && n > 0) return n;
    (void)cudaGetLastError();
    return 0;
  });
  return v > 0 ? v : kFallbackBlocksPerSm;
}

// Blocks of THREADS threads for `work` items of kernel K (one item per thread
// and step): at least 1, at most one full wave of the device.
template <auto K, int THREADS>
unsigned grid_for(int device, int64_t work) {
  const int sms = sm_count(device);
  const int64_t cap = sms > 0 ? (int64_t)sms * blocks_per_sm<K, THREADS>(device) : kFallbackBlocks;
  int64_t blocks = (work + THREADS - 1) / THREADS;
  if (blocks > cap) blocks = cap;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

}  // namespace mn_grid

#endif /* MNEMO_KERNELS_CUDA_GRID_H */
