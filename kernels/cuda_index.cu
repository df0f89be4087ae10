// kernels/cuda_index.cu: the CUDA gather and scatter kernels of advanced
// indexing (kernels/index.h), run on a prepared geometry (kernels/index_kern.h)
// on the caller's stream inside a device guard that restores the caller's
// device.
//
// Gather: one thread per position (grid-stride), 32-bit magic-number division
// of the position when the iteration has fewer than 2^31 positions, 64-bit
// division otherwise (the copy kernels' index64 rule).
// Scatter: one thread per combination of the "parallel" dims (dst stride !=
// 0), which walks the "serial" dims (dst stride 0: the positions that may
// reach one destination through their indices) in row-major order. Positions
// that meet at a destination therefore meet in one thread, in the CPU's
// order: no atomics, results (accumulate included) bit-identical to the
// CPU's. The price: a scatter whose every dim is serial (all positions onto
// one line of dst) runs in one thread.
// Alignment: items and indices move through naturally aligned types when
// every base address is aligned to its item size (strides are in items),
// byte by byte otherwise (a foreign buffer may be misaligned).
// Threading: any thread; no state but kernels/cuda_grid.h's caches.
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda_grid.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_launch.h"
#include "kernels/divmod.h"
#include "kernels/index_kern.h"
#include "runtime/cuda_device.h"
#include "runtime/error.h"

namespace {

constexpr int kThreads = 256;

template <int N> struct Item;
template <> struct Item<1> { typedef unsigned char T; };
template <> struct Item<2> { typedef unsigned short T; };
template <> struct Item<4> { typedef unsigned int T; };
template <> struct Item<8> { typedef uint2 T; };
template <> struct Item<16> { typedef uint4 T; };

typedef mn__index_geom_t Geom;

// The divisors of the dims a kernel decomposes a linear number over, in the
// order it decomposes (innermost first), and those dims.
struct Walk {
  int nd;
  int dim[MN_MAX_DIMS];
  mn__div32_t div[MN_MAX_DIMS];
  // scatter: the serial dims, outermost first, and their position count
  int ns;
  int sdim[MN_MAX_DIMS];
  int64_t nserial;
};

template <bool ALIGNED>
__device__ __forceinline__ int64_t load_index(const char *p, int is64, int64_t size) {
  if (ALIGNED) {
    const int64_t v = is64 ? *reinterpret_cast<const int64_t *>(p) : (int64_t)*reinterpret_cast<const int32_t *>(p);
    return v < 0 ? v + size : v;
  }
  return mn__ix_load(p, is64, size);
}

// Byte offsets of linear number e over w's dims: *od, *os, and io[j] into
// each index operand.
template <typename I>
__device__ __forceinline__ void decompose(const Geom &g, const Walk &w, I e, int64_t *od, int64_t *os, int64_t *io) {
  int64_t d = 0, s = 0;
#pragma unroll
  for (int j = 0; j < MN__INDEX_MAX; j++) io[j] = 0;
  for (int q = 0; q < w.nd; q++) {
    const int dim = w.dim[q];
    I r;
    if (sizeof(I) == 4) {
      const uint32_t qq = mn__div32(w.div[q], (uint32_t)e);
      r = (I)((uint32_t)e - qq * w.div[q].d);
      e = (I)qq;
    } else {
      const I qq = e / (I)g.size[dim];
      r = e - qq * (I)g.size[dim];
      e = qq;
    }
    d += (int64_t)r * g.ds[dim];
    s += (int64_t)r * g.ss[dim];
#pragma unroll
    for (int j = 0; j < MN__INDEX_MAX; j++)
      if (j < g.n) io[j] += (int64_t)r * g.is[j][dim];
  }
  *od = d;
  *os = s;
}

// The index term (bytes into the data operand) at index offsets io.
template <bool ALIGNED>
__device__ __forceinline__ int64_t index_term(const Geom &g, const int64_t *io) {
  int64_t t = 0;
#pragma unroll
  for (int j = 0; j < MN__INDEX_MAX; j++)
    if (j < g.n) t += load_index<ALIGNED>(g.idx[j] + io[j], g.idx64[j], g.isize[j]) * g.istride[j];
  return t;
}

template <int N, bool ALIGNED>
__device__ __forceinline__ void move(char *d, const char *s) {
  typedef typename Item<N>::T T;
  if (ALIGNED)
    *reinterpret_cast<T *>(d) = *reinterpret_cast<const T *>(s);
  else
    memcpy(d, s, N);
}

// dst[p] = src[p + index term], one thread per position p.
template <int N, typename I, bool ALIGNED>
__global__ void gather_kernel(Geom g, Walk w, I n) {
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
    int64_t od, os, io[MN__INDEX_MAX];
    decompose<I>(g, w, e, &od, &os, io);
    move<N, ALIGNED>(g.dst + od, g.src + os + index_term<ALIGNED>(g, io));
  }
}

// One thread per combination of the parallel dims (w's dims); it walks the
// serial dims in row-major order. ACC: dst += src (mn__ix_add), else dst = src.
template <int N, typename I, bool ALIGNED, bool ACC>
__global__ void scatter_kernel(Geom g, Walk w, I n) {
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
    int64_t od, os, io[MN__INDEX_MAX];
    decompose<I>(g, w, e, &od, &os, io);
    int64_t pos[MN_MAX_DIMS];
    for (int q = 0; q < w.ns; q++) pos[q] = 0;
    for (int64_t c = 0;;) {
      const int64_t k = index_term<ALIGNED>(g, io);
      if (ACC)
        mn__ix_add_al(g.dtype, g.dst + od + k, g.src + os, ALIGNED);
      else
        move<N, ALIGNED>(g.dst + od + k, g.src + os);
      if (++c == w.nserial) break;
      for (int q = w.ns - 1; q >= 0; q--) {  // odometer over the serial dims (dst stride 0)
        const int dim = w.sdim[q];
        os += g.ss[dim];
#pragma unroll
        for (int j = 0; j < MN__INDEX_MAX; j++)
          if (j < g.n) io[j] += g.is[j][dim];
        if (++pos[q] < g.size[dim]) break;
        os -= g.size[dim] * g.ss[dim];
#pragma unroll
        for (int j = 0; j < MN__INDEX_MAX; j++)
          if (j < g.n) io[j] -= g.size[dim] * g.is[j][dim];
        pos[q] = 0;
      }
    }
  }
}

// mn__launch_1d with this file's block size.
template <auto K, typename... A>
cudaError_t launch_1d(int device, int64_t work, cudaStream_t s, A... args) {
  return mn__launch_1d<K, kThreads>(device, work, s, args...);
}

template <int N, bool ALIGNED>
cudaError_t launch_n(int device, const Geom &g, const Walk &w, int64_t n, bool wide, cudaStream_t s) {
  if (g.op == MN__IX_GATHER) {
    if (wide) return launch_1d<gather_kernel<N, int64_t, ALIGNED>>(device, n, s, g, w, (int64_t)n);
    return launch_1d<gather_kernel<N, uint32_t, ALIGNED>>(device, n, s, g, w, (uint32_t)n);
  }
  if (g.op == MN__IX_SCATTER_ADD) {
    if (wide) return launch_1d<scatter_kernel<N, int64_t, ALIGNED, true>>(device, n, s, g, w, (int64_t)n);
    return launch_1d<scatter_kernel<N, uint32_t, ALIGNED, true>>(device, n, s, g, w, (uint32_t)n);
  }
  if (wide) return launch_1d<scatter_kernel<N, int64_t, ALIGNED, false>>(device, n, s, g, w, (int64_t)n);
  return launch_1d<scatter_kernel<N, uint32_t, ALIGNED, false>>(device, n, s, g, w, (uint32_t)n);
}

template <int N>
cudaError_t launch_item(int device, const Geom &g, const Walk &w, int64_t n, bool wide, bool aligned, cudaStream_t s) {
  if (aligned) return launch_n<N, true>(device, g, w, n, wide, s);
  return launch_n<N, false>(device, g, w, n, wide, s);
}

}  // namespace

extern "C" mn_status mn__cuda_index(int device, void *stream, const mn__index_geom_t *g) {
  if (g->numel == 0) return MN_OK;
  // the dims the threads cover, innermost first: all (gather) or the parallel ones (scatter)
  Walk w;
  memset(&w, 0, sizeof w);
  int64_t n = 1;
  w.nserial = 1;
  for (int d = g->ndim - 1; d >= 0; d--) {
    if (g->op != MN__IX_GATHER && g->ds[d] == 0) continue;
    w.dim[w.nd] = d;
    w.div[w.nd] = mn__div32_of_size(g->size[d]);
    w.nd++;
    n *= g->size[d];
  }
  for (int d = 0; d < g->ndim; d++)
    if (g->op != MN__IX_GATHER && g->ds[d] == 0) {
      w.sdim[w.ns++] = d;
      w.nserial *= g->size[d];
    }
  const bool wide = n > (int64_t)MN__DIV32_MAX;
  bool aligned = (uintptr_t)g->dst % (uintptr_t)g->item == 0 && (uintptr_t)g->src % (uintptr_t)g->item == 0;
  for (int j = 0; j < g->n; j++) aligned = aligned && (uintptr_t)g->idx[j] % (g->idx64[j] ? 8u : 4u) == 0;
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  bool ok = true;
  switch (g->item) {
    case 1: err = launch_item<1>(device, *g, w, n, wide, aligned, s); break;
    case 2: err = launch_item<2>(device, *g, w, n, wide, aligned, s); break;
    case 4: err = launch_item<4>(device, *g, w, n, wide, aligned, s); break;
    case 8: err = launch_item<8>(device, *g, w, n, wide, aligned, s); break;
    case 16: err = launch_item<16>(device, *g, w, n, wide, aligned, s); break;
    default: ok = false;
  }
  mn__cuda_guard_leave(&guard);
  const char *what = g->op == MN__IX_GATHER ? "gather" : g->op == MN__IX_SCATTER ? "scatter" : "scatter with accumulate";
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "no CUDA kernel for %s of item size %d", what, g->item);
  return mn__launched(err, __func__, what, device);
}
