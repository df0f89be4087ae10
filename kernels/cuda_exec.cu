// kernels/cuda_exec.cu: the CUDA executor of plans (kernels/plan.h): vectorized
// contiguous casts, tiled shared-memory transposes, generic N-d copy/cast/fill
// with magic-number division (kernels/divmod.h), and the Philox random fill;
// all launched on the caller's stream inside a device guard that restores the
// caller's device. Conversions come from kernels/cast.h (the CPU's, bit-exact).
//
// Alignment: the fast kernels (contiguous casts, transposes) and the generic
// kernels' ALIGNED variants access items through naturally aligned types, so
// they run only when both base addresses are aligned to their item sizes
// (strides are in items); a storage over a foreign buffer
// (mn_storage_from_buffer, DLPack) may not be, and then the generic kernels'
// byte-wise variants run: such an operand never faults the context.
// Overlap: dst and src may share bytes (an in-place cast of one storage: the
// same elements, same item size; or views the overlap check cannot decide).
// The kernels whose pointers are __restrict__ and load through the read-only
// cache (__ldg) run only when the byte ranges of dst and src are disjoint;
// otherwise the generic kernels run with plain loads (their `alias` flag).
// Threading: any thread; no state but kernels/cuda_grid.h's caches.
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/cuda_grid.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_launch.h"
#include "kernels/divmod.h"
#include "kernels/philox.h"
#include "kernels/quant.h"
#include "runtime/cuda_device.h"
#include "runtime/error.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;      // transpose tile edge
constexpr int kTileRows = 8;   // transpose block: 32 x 8 threads

// A register type of exactly N bytes (16-byte vectors where N is 16).
template <int N> struct Bytes;
template <> struct Bytes<1> { typedef unsigned char T; };
template <> struct Bytes<2> { typedef unsigned short T; };
template <> struct Bytes<4> { typedef unsigned int T; };
template <> struct Bytes<8> { typedef uint2 T; };
template <> struct Bytes<16> { typedef uint4 T; };

typedef mn__offcalc_t OffCalc;

// Byte offsets of element e in dst and src: kernels/divmod.h's walk for 32-bit
// indices (every size < 2^31), 64-bit division otherwise.
__device__ __forceinline__ void offsets(const OffCalc &c, uint32_t e, uint32_t *od, uint32_t *os) {
  mn__offcalc_offsets32(&c, e, od, os);
}
__device__ __forceinline__ void offsets(const OffCalc &c, int64_t e, int64_t *od, int64_t *os) {
  int64_t d = 0, s = 0;
#pragma unroll 4
  for (int k = 0; k < c.ndim; k++) {
    const int64_t q = e / c.size[k], r = e - q * c.size[k];
    d += r * c.ds[k];
    s += r * c.ss[k];
    e = q;
  }
  *od = d;
  *os = s;
}

enum Mode { COPY = 0, CAST = 1, FILL = 2 };

// Generic N-d: one element per thread and step; DN = dst item bytes (COPY: the
// src's too), casts through the runtime-dtype conversion. ALIGNED: both base
// addresses are aligned to their item sizes, items move through naturally
// aligned types; else byte by byte. alias: dst and src may share bytes, so no
// read-only-cache loads (no __restrict__ either: the pointers may alias).
template <int DN, int MODE, typename I, bool ALIGNED>
__global__ void generic_kernel(char *dst, const char *src, I n, OffCalc c, int D, int S,
                               typename Bytes<DN>::T pattern, bool alias) {
  typedef typename Bytes<DN>::T T;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
    I od, os;
    offsets(c, e, &od, &os);
    if (MODE == FILL) {
      if (ALIGNED)
        *reinterpret_cast<T *>(dst + od) = pattern;
      else
        memcpy(dst + od, &pattern, DN);
    } else if (MODE == COPY) {
      if (ALIGNED) {
        const T *sp = reinterpret_cast<const T *>(src + os);
        *reinterpret_cast<T *>(dst + od) = alias ? *sp : __ldg(sp);
      } else {
        memcpy(dst + od, src + os, DN);
      }
    } else {  // load typed, convert into a register, store DN bytes
      T v;
      mn__cast_store(D, &v, mn__cast_load_al(S, src + os, ALIGNED));
      if (ALIGNED)
        *reinterpret_cast<T *>(dst + od) = v;
      else
        memcpy(dst + od, &v, DN);
    }
  }
}

// Contiguous cast: each thread converts VEC elements per step with one load of
// VEC*SI bytes and one store of VEC*DI bytes (16 bytes on the wider side).
// pre: dst and src aligned to their item sizes, their bytes disjoint.
template <int D, int S, int DI, int SI>
__global__ void cast_contig_kernel(char *__restrict__ dst, const char *__restrict__ src, int64_t n, bool vector) {
  constexpr int W = DI > SI ? DI : SI;
  constexpr int VEC = 16 / W > 0 ? 16 / W : 1;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vector && VEC > 1) {
    typedef typename Bytes<VEC * SI>::T ST;
    typedef typename Bytes<VEC * DI>::T DT;
    const int64_t nvec = n / VEC;
    for (int64_t v = tid; v < nvec; v += step) {
      union { ST w; unsigned char b[VEC * SI]; } in;
      union { DT w; unsigned char b[VEC * DI]; } out;
      in.w = __ldg(reinterpret_cast<const ST *>(src) + v);
#pragma unroll
      for (int k = 0; k < VEC; k++) mn__cast_elem(D, out.b + k * DI, S, in.b + k * SI);
      reinterpret_cast<DT *>(dst)[v] = out.w;
    }
    done = nvec * VEC;
  }
  for (int64_t i = done + tid; i < n; i += step) mn__cast_elem_al(D, dst + i * DI, S, src + i * SI, 1);
}

// Transpose tiles: dst[i + j*dsj] = src[i*ssi + j] over (i, j) in ni x nj,
// for every outer index. Reads along j and writes along i are both coalesced;
// the tile's row pitch makes column accesses bank-conflict-free.
// pre: dst and src aligned to their item sizes, their bytes disjoint.
struct TrParams {
  char *dst;
  const char *src;
  int64_t ni, nj, dsj, ssi;  // bytes strides
  int64_t nbatch;
  int nouter;
  int64_t osize[MN_MAX_DIMS], ods[MN_MAX_DIMS], oss[MN_MAX_DIMS];  // bytes strides
  int D, S, SI;
};

template <int N> struct Pitch { static constexpr int value = kTile + (N == 1 ? 4 : N == 2 ? 2 : 1); };

template <int N, bool CAST>
__global__ void __launch_bounds__(kTile *kTileRows) transpose_kernel(TrParams p) {
  typedef typename Bytes<N>::T T;
  __shared__ T tile[kTile][Pitch<N>::value];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t itiles = (p.ni + kTile - 1) / kTile, jtiles = (p.nj + kTile - 1) / kTile;
  for (int64_t b = blockIdx.z; b < p.nbatch; b += gridDim.z) {
    int64_t od = 0, os = 0, rest = b;
    for (int k = 0; k < p.nouter; k++) {
      int64_t x = rest % p.osize[k];
      rest /= p.osize[k];
      od += x * p.ods[k];
      os += x * p.oss[k];
    }
    for (int64_t jt = blockIdx.y; jt < jtiles; jt += gridDim.y)
      for (int64_t it = blockIdx.x; it < itiles; it += gridDim.x) {
        const int64_t i0 = it * kTile, j0 = jt * kTile;
        // load: threads along j (src-contiguous)
#pragma unroll
        for (int r = 0; r < kTile; r += kTileRows) {
          const int64_t i = i0 + ty + r, j = j0 + tx;
          if (i < p.ni && j < p.nj) {
            const char *sp = p.src + os + i * p.ssi + j * p.SI;
            T v;
            if (CAST)
              mn__cast_store(p.D, &v, mn__cast_load_al(p.S, sp, 1));
            else
              v = __ldg(reinterpret_cast<const T *>(sp));
            tile[ty + r][tx] = v;
          }
        }
        __syncthreads();
        // store: threads along i (dst-contiguous)
#pragma unroll
        for (int r = 0; r < kTile; r += kTileRows) {
          const int64_t j = j0 + ty + r, i = i0 + tx;
          if (i < p.ni && j < p.nj) *reinterpret_cast<T *>(p.dst + od + i * N + j * p.dsj) = tile[tx][ty + r];
        }
        __syncthreads();
      }
  }
}

// Random fill: one thread per Philox block (4 elements; 2 for uniform float64),
// so each block and its Box-Muller pairs are computed once. VEC: dst is dense
// (one dim, unit stride) and aligned to a whole block's bytes, written with one
// or two 16-byte (8 for 2-byte items) stores; else ALIGNED: typed stores at the
// strided offsets; else byte copies (a storage from a foreign buffer may be
// misaligned for the item).
template <int N> struct Word;
template <> struct Word<2> { typedef unsigned short T; };
template <> struct Word<4> { typedef unsigned int T; };
template <> struct Word<8> { typedef unsigned long long T; };

enum RandStore { RAND_BYTES = 0, RAND_ALIGNED = 1, RAND_VEC = 2 };

template <int DT, int STORE, typename I>
__global__ void random_kernel(char *__restrict__ dst, I n, OffCalc c, mn__rand_params_t rp) {
  constexpr int N = DT == MN_DTYPE_FLOAT64 ? 8 : DT == MN_DTYPE_FLOAT32 ? 4 : 2;
  typedef typename Word<N>::T W;
  const unsigned per = mn__rand_per_block(DT, rp.normal);
  const I nblocks = (I)((n + (I)per - 1) / (I)per);
  for (I b = (I)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += (I)gridDim.x * blockDim.x) {
    const mn__philox_out_t o = mn__philox_block(rp.seed, rp.offset + (uint64_t)b);
    float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (rp.normal) mn__normal4(o, z);
    const I e0 = b * (I)per;
    if (STORE == RAND_VEC && e0 + (I)per <= n) {
      W w[4];
#pragma unroll
      for (unsigned l = 0; l < 4; l++) w[l] = l < per ? (W)mn__rand_lane_bits(&rp, DT, o, z, l) : (W)0;
      char *q = dst + (size_t)e0 * N;
      if (N == 2) {  // 4 half-precision values: one 8-byte store
        uint2 v;
        v.x = (unsigned)w[0] | ((unsigned)w[1] << 16);
        v.y = (unsigned)w[2] | ((unsigned)w[3] << 16);
        *reinterpret_cast<uint2 *>(q) = v;
      } else if (N == 4) {  // 4 floats: one 16-byte store
        *reinterpret_cast<uint4 *>(q) = make_uint4((unsigned)w[0], (unsigned)w[1], (unsigned)w[2], (unsigned)w[3]);
      } else {  // doubles, 2 per 16-byte store
        const unsigned long long w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
        reinterpret_cast<uint4 *>(q)[0] =
            make_uint4((unsigned)w0, (unsigned)(w0 >> 32), (unsigned)w1, (unsigned)(w1 >> 32));
        if (per == 4)
          reinterpret_cast<uint4 *>(q)[1] =
              make_uint4((unsigned)w2, (unsigned)(w2 >> 32), (unsigned)w3, (unsigned)(w3 >> 32));
      }
      continue;
    }
#pragma unroll
    for (unsigned l = 0; l < 4; l++) {
      const I e = e0 + (I)l;
      if (l >= per || e >= n) break;
      I od, os;
      offsets(c, e, &od, &os);
      const W v = (W)mn__rand_lane_bits(&rp, DT, o, z, l);
      if (STORE == RAND_BYTES)
        memcpy(dst + od, &v, N);
      else
        *reinterpret_cast<W *>(dst + od) = v;
    }
  }
}

// mn__launch_1d with this file's block size.
template <auto K, typename... A>
cudaError_t launch_1d(int device, int64_t work, cudaStream_t s, A... args) {
  return mn__launch_1d<K, kThreads>(device, work, s, args...);
}

// Both base addresses aligned to their item sizes (strides are in items, so
// every element is): the typed kernels may run.
bool plan_aligned(const mn__plan_t *p) {
  return (uintptr_t)p->dst % p->dst_item == 0 &&
         (p->kind == MN__PLAN_FILL || (uintptr_t)p->src % p->src_item == 0);
}

// One past the last byte an operand of the plan reaches from its start.
uintptr_t plan_end(const char *base, const int64_t *strides, size_t item, const mn__plan_t *p) {
  uintptr_t end = (uintptr_t)base + item;
  for (int k = 0; k < p->ndim; k++) end += (uintptr_t)((p->sizes[k] - 1) * strides[k] * (int64_t)item);
  return end;
}

// Whether the byte ranges of dst and src meet (conservative: interleaved
// operands that share no byte count too; they only lose __ldg).
bool plan_overlaps(const mn__plan_t *p) {
  if (p->kind == MN__PLAN_FILL) return false;
  const uintptr_t d0 = (uintptr_t)p->dst, s0 = (uintptr_t)p->src;
  return d0 < plan_end(p->src, p->src_strides, p->src_item, p) && s0 < plan_end(p->dst, p->dst_strides, p->dst_item, p);
}

template <int DN, int MODE, bool ALIGNED>
cudaError_t launch_generic_a(int device, const mn__plan_t *p, const OffCalc &c, cudaStream_t s,
                             typename Bytes<DN>::T pat, bool alias) {
  if (p->index64)
    return launch_1d<generic_kernel<DN, MODE, int64_t, ALIGNED>>(device, p->numel, s, p->dst, p->src,
                                                                 (int64_t)p->numel, c, (int)p->dst_dtype,
                                                                 (int)p->src_dtype, pat, alias);
  return launch_1d<generic_kernel<DN, MODE, uint32_t, ALIGNED>>(device, p->numel, s, p->dst, p->src,
                                                                (uint32_t)p->numel, c, (int)p->dst_dtype,
                                                                (int)p->src_dtype, pat, alias);
}

template <int DN, int MODE>
cudaError_t launch_generic_n(int device, const mn__plan_t *p, const OffCalc &c, cudaStream_t s, const void *pattern,
                             bool aligned, bool alias) {
  typename Bytes<DN>::T pat;
  memset(&pat, 0, sizeof pat);
  if (pattern) memcpy(&pat, pattern, DN);
  // one-byte copies and fills are always aligned: no byte-wise variant of them
  if constexpr (DN == 1 && MODE != CAST) {
    return launch_generic_a<DN, MODE, true>(device, p, c, s, pat, alias);
  } else {
    if (aligned) return launch_generic_a<DN, MODE, true>(device, p, c, s, pat, alias);
    return launch_generic_a<DN, MODE, false>(device, p, c, s, pat, alias);
  }
}

// Each launcher returns false when no kernel fits the plan, else true with the
// launch's error in *err.
template <int MODE>
bool launch_generic(int device, const mn__plan_t *p, cudaStream_t s, const void *pattern, bool aligned, bool alias,
                    cudaError_t *err) {
  OffCalc c;
  mn__offcalc_of_plan(p, &c);
  switch (p->dst_item) {
    case 1: *err = launch_generic_n<1, MODE>(device, p, c, s, pattern, aligned, alias); return true;
    case 2: *err = launch_generic_n<2, MODE>(device, p, c, s, pattern, aligned, alias); return true;
    case 4: *err = launch_generic_n<4, MODE>(device, p, c, s, pattern, aligned, alias); return true;
    case 8: *err = launch_generic_n<8, MODE>(device, p, c, s, pattern, aligned, alias); return true;
    case 16: *err = launch_generic_n<16, MODE>(device, p, c, s, pattern, aligned, alias); return true;
  }
  return false;
}

template <bool CAST>
bool launch_transpose(const mn__plan_t *p, cudaStream_t s, cudaError_t *err) {
  TrParams t;
  memset(&t, 0, sizeof t);
  t.dst = p->dst;
  t.src = p->src;
  t.ni = p->sizes[0];
  t.nj = p->sizes[p->tdim];
  t.dsj = p->dst_strides[p->tdim] * (int64_t)p->dst_item;
  t.ssi = p->src_strides[0] * (int64_t)p->src_item;
  t.nbatch = 1;
  for (int k = 1; k < p->ndim; k++) {
    if (k == p->tdim) continue;
    t.osize[t.nouter] = p->sizes[k];
    t.ods[t.nouter] = p->dst_strides[k] * (int64_t)p->dst_item;
    t.oss[t.nouter] = p->src_strides[k] * (int64_t)p->src_item;
    t.nbatch *= p->sizes[k];
    t.nouter++;
  }
  t.D = p->dst_dtype;
  t.S = p->src_dtype;
  t.SI = (int)p->src_item;
  int64_t it = (t.ni + kTile - 1) / kTile, jt = (t.nj + kTile - 1) / kTile;
  dim3 grid((unsigned)(it < 65535 ? it : 65535), (unsigned)(jt < 65535 ? jt : 65535),
            (unsigned)(t.nbatch < 65535 ? t.nbatch : 65535));
  dim3 block(kTile, kTileRows);
  switch (p->dst_item) {
    case 1: *err = mn__launch(transpose_kernel<1, CAST>, grid, block, 0, s, t); return true;
    case 2: *err = mn__launch(transpose_kernel<2, CAST>, grid, block, 0, s, t); return true;
    case 4: *err = mn__launch(transpose_kernel<4, CAST>, grid, block, 0, s, t); return true;
    case 8: *err = mn__launch(transpose_kernel<8, CAST>, grid, block, 0, s, t); return true;
    case 16: *err = mn__launch(transpose_kernel<16, CAST>, grid, block, 0, s, t); return true;
  }
  return false;
}

// The contiguous-cast kernel of every pair, chosen by a switch over both dtypes:
// the dst switch picks the instantiation (D, its item size DI) whose switch
// over src launches the kernel; rows from MN_DTYPE_TABLE (mnemo/dtype_table.h).
#define MN__CU_CASE_S(A, S, sval, sname, SSIZE, ...)                                                          \
  case MN_DTYPE_##S:                                                                                          \
    *err = launch_1d<cast_contig_kernel<D, MN_DTYPE_##S, DI, SSIZE>>(device, p->numel, s, p->dst, p->src,    \
                                                                     (int64_t)p->numel, vector);              \
    return true;
template <int D, int DI>
bool launch_cast_contig_to(int device, const mn__plan_t *p, cudaStream_t s, bool vector, cudaError_t *err) {
  switch (p->src_dtype) {
    MN_DTYPE_TABLE_PLAIN(MN__CU_CASE_S, ~) // quantized: no casts
    default: return false;
  }
}
#define MN__CU_CASE_D(A, D, dval, dname, DSIZE, ...) \
  case MN_DTYPE_##D: return launch_cast_contig_to<MN_DTYPE_##D, DSIZE>(device, p, s, vector, err);

bool launch_cast_contig(int device, const mn__plan_t *p, cudaStream_t s, cudaError_t *err) {
  size_t wide = p->dst_item > p->src_item ? p->dst_item : p->src_item;
  const bool vector = (size_t)p->vec >= 16 / wide; // aligned for full 16-byte accesses
  switch (p->dst_dtype) {
    MN_DTYPE_TABLE_PLAIN(MN__CU_CASE_D, ~)
    default: return false;
  }
}

// Whether the tiled transpose beats the generic kernel: a side shorter than a
// tile leaves most of each tile's threads idle (NCHW->NHWC with C=3 uses 3 of 32
// rows). Measured on an H100 (bench/results/gpu-h100-2026-11-23.md, NCHW->NHWC
// of 224x224 images, float32 / bfloat16): generic over tiled 11x / 11x at C=2,
// 2.8x / 3.0x at C=8, 1.45x / 1.6x at C=16, 1.07x / 1.16x at C=24; tiled over
// generic 1.19x / 1.34x at C=32. So tiles need both sides of at least a tile.
bool transpose_tiles_pay(const mn__plan_t *p) { return p->sizes[0] >= kTile && p->sizes[p->tdim] >= kTile; }

}  // namespace

extern "C" mn_status mn__cuda_exec(int device, void *stream, const mn__plan_t *p, const void *pattern) {
  if (p->numel == 0) return MN_OK;
  if (p->kind == MN__PLAN_CONTIG && p->dst_dtype == p->src_dtype)
    return mn__cuda_copy(device, stream, p->dst, p->src, (size_t)p->numel * p->dst_item);
  if (p->kind == MN__PLAN_FILL && p->ndim == 1 && p->dst_strides[0] == 1)
    return mn__cuda_fill(device, stream, p->dst, (size_t)p->numel, p->dst_item, pattern);
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool cast = p->kind != MN__PLAN_FILL && p->dst_dtype != p->src_dtype;
  const bool aligned = plan_aligned(p), alias = plan_overlaps(p);
  bool ok;
  cudaError_t err = cudaSuccess;
  const char *what;
  if (p->kind == MN__PLAN_CONTIG && aligned && !alias) {
    what = "contiguous cast";
    ok = launch_cast_contig(device, p, s, &err);
  } else if (p->kind == MN__PLAN_TRANSPOSE && transpose_tiles_pay(p) && aligned && !alias) {
    what = cast ? "transpose with cast" : "transpose";
    ok = cast ? launch_transpose<true>(p, s, &err) : launch_transpose<false>(p, s, &err);
  } else {
    what = p->kind == MN__PLAN_FILL ? "strided fill" : cast ? "strided cast" : "strided copy";
    ok = p->kind == MN__PLAN_FILL ? launch_generic<FILL>(device, p, s, pattern, aligned, alias, &err)
         : cast                   ? launch_generic<CAST>(device, p, s, NULL, aligned, alias, &err)
                                  : launch_generic<COPY>(device, p, s, NULL, aligned, alias, &err);
  }
  mn__cuda_guard_leave(&guard);
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "no CUDA kernel for %s (%s <- %s, item %zu)", what,
                     mn_dtype_name(p->dst_dtype), mn_dtype_name(p->src_dtype), p->dst_item);
  return mn__launched(err, __func__, what, device);
}

extern "C" mn_status mn__cuda_random(int device, void *stream, const mn__strided_t *dst, int dtype,
                                     const mn__rand_params_t *params) {
  // Logical row-major dims, innermost first, size-1 dropped, neighbours merged.
  OffCalc c;
  int64_t n = 0, end = 0;
  const int64_t item = (int64_t)mn_dtype_itemsize((mn_dtype)dtype);
  mn__offcalc_of_rows(dst, (size_t)item, &c, &n, &end);
  if (n == 0) return MN_OK;
  if (dtype != MN_DTYPE_FLOAT16 && dtype != MN_DTYPE_BFLOAT16 && dtype != MN_DTYPE_FLOAT32 &&
      dtype != MN_DTYPE_FLOAT64)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "random fill of %s", mn_dtype_name((mn_dtype)dtype));
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  const int64_t per = mn__rand_per_block(dtype, params->normal), blocks = (n + per - 1) / per;
  const bool wide = n + per > INT32_MAX || end > INT32_MAX;
  const uintptr_t base = (uintptr_t)dst->data;
  const bool dense = c.ndim == 0 || (c.ndim == 1 && c.ds[0] == item);
  const int store = base % (uintptr_t)item != 0                                             ? RAND_BYTES
                    : dense && base % (uintptr_t)(per * item < 16 ? per * item : 16) == 0 ? RAND_VEC
                                                                                            : RAND_ALIGNED;
#define MN__CU_RAND_S(DT, ST)                                                                                   \
  if (wide)                                                                                                     \
    err = launch_1d<random_kernel<DT, ST, int64_t>>(device, blocks, s, dst->data, (int64_t)n, c, *params);     \
  else                                                                                                          \
    err = launch_1d<random_kernel<DT, ST, uint32_t>>(device, blocks, s, dst->data, (uint32_t)n, c, *params);
#define MN__CU_RAND(DT)                                                                                  \
  if (store == RAND_VEC) {                                                                               \
    MN__CU_RAND_S(DT, RAND_VEC)                                                                          \
  } else if (store == RAND_ALIGNED) {                                                                    \
    MN__CU_RAND_S(DT, RAND_ALIGNED)                                                                      \
  } else {                                                                                               \
    MN__CU_RAND_S(DT, RAND_BYTES)                                                                        \
  }
  switch (dtype) {
    case MN_DTYPE_FLOAT16: MN__CU_RAND(MN_DTYPE_FLOAT16) break;
    case MN_DTYPE_BFLOAT16: MN__CU_RAND(MN_DTYPE_BFLOAT16) break;
    case MN_DTYPE_FLOAT32: MN__CU_RAND(MN_DTYPE_FLOAT32) break;
    default: MN__CU_RAND(MN_DTYPE_FLOAT64) break;
  }
#undef MN__CU_RAND
#undef MN__CU_RAND_S
  mn__cuda_guard_leave(&guard);
  return mn__launched(err, __func__, "random fill", device);
}

// ---- quantize / dequantize (kernels/quant.h): one contiguous job ----------
namespace {
__global__ void quant_kernel(mn__quant_t j) {
  const int64_t n = mn__quant_units(&j);
  for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (int64_t)gridDim.x * blockDim.x) {
    if (j.dequant)
      mn__dequant_unit(&j, u);
    else
      mn__quant_unit(&j, u);
  }
}
}  // namespace

extern "C" mn_status mn__cuda_quant(int device, void *stream, const mn__quant_t *job) {
  const int64_t n = mn__quant_units(job);
  if (n == 0) return MN_OK;
  mn__cuda_guard_t guard;
  mn_status st = mn__cuda_guard_enter(&guard, __func__, device, false);
  if (st != MN_OK) return st;
  cudaError_t err = launch_1d<quant_kernel>(device, n, static_cast<cudaStream_t>(stream), *job);
  mn__cuda_guard_leave(&guard);
  return mn__launched(err, __func__, job->dequant ? "dequantize" : "quantize", device);
}
