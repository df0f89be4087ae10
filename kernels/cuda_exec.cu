// kernels/cuda_exec.cu: the CUDA executor of plans (kernels/plan.h): vectorized
// contiguous casts, tiled shared-memory transposes, generic N-d copy/cast/fill
// with magic-number division, and the Philox random fill; all launched on the
// caller's stream. Conversions come from kernels/cast.h (the CPU's, bit-exact).
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_launch.h"
#include "kernels/philox.h"
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

// Division by a fixed d < 2^31 of n < 2^31 with one multiply-high and a shift
// (Granlund-Montgomery): q = (umulhi(n, m) + n) >> s.
struct Div32 {
  uint32_t d, m, s;
  __host__ void init(uint32_t div) {
    d = div;
    s = 0;
    while ((1ull << s) < div) s++;
    m = (uint32_t)((((1ull << 32) * ((1ull << s) - div)) / div) + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (uint32_t)(((uint64_t)__umulhi(n, m) + n) >> s);
  }
};

// Byte offsets of element e in dst and src: dims innermost first.
struct OffCalc {
  int ndim;
  Div32 div[MN_MAX_DIMS];
  int64_t size[MN_MAX_DIMS];
  int64_t ds[MN_MAX_DIMS], ss[MN_MAX_DIMS];  // bytes
};

template <typename I>
__device__ __forceinline__ void offsets(const OffCalc &c, I e, I *od, I *os) {
  I d = 0, s = 0;
#pragma unroll 4
  for (int k = 0; k < c.ndim; k++) {
    I q, r;
    if (sizeof(I) == 4) {
      q = (I)c.div[k].div((uint32_t)e);
      r = e - q * (I)c.size[k];
    } else {
      q = e / (I)c.size[k];
      r = e - q * (I)c.size[k];
    }
    d += r * (I)c.ds[k];
    s += r * (I)c.ss[k];
    e = q;
  }
  *od = d;
  *os = s;
}

enum Mode { COPY = 0, CAST = 1, FILL = 2 };

// Generic N-d: one element per thread and step; DN = dst item bytes, SN = src
// item bytes (COPY: equal), casts through the runtime-dtype conversion.
template <int DN, int MODE, typename I>
__global__ void generic_kernel(char *__restrict__ dst, const char *__restrict__ src, I n, OffCalc c, int D, int S,
                               typename Bytes<DN>::T pattern) {
  typedef typename Bytes<DN>::T T;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
    I od, os;
    offsets<I>(c, e, &od, &os);
    if (MODE == FILL) {
      *reinterpret_cast<T *>(dst + od) = pattern;
    } else if (MODE == COPY) {
      *reinterpret_cast<T *>(dst + od) = __ldg(reinterpret_cast<const T *>(src + os));
    } else {
      T v;
      mn__cast_elem(D, &v, S, src + os);
      *reinterpret_cast<T *>(dst + od) = v;
    }
  }
}

// Contiguous cast: each thread converts VEC elements per step with one load of
// VEC*SI bytes and one store of VEC*DI bytes (16 bytes on the wider side).
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
  for (int64_t i = done + tid; i < n; i += step) mn__cast_elem(D, dst + i * DI, S, src + i * SI);
}

// Transpose tiles: dst[i + j*dsj] = src[i*ssi + j] over (i, j) in ni x nj,
// for every outer index. Reads along j and writes along i are both coalesced;
// the tile's row pitch makes column accesses bank-conflict-free.
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
              mn__cast_elem(p.D, &v, p.S, sp);
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
      offsets<I>(c, e, &od, &os);
      const W v = (W)mn__rand_lane_bits(&rp, DT, o, z, l);
      if (STORE == RAND_BYTES)
        memcpy(dst + od, &v, N);
      else
        *reinterpret_cast<W *>(dst + od) = v;
    }
  }
}

unsigned grid_for(int device, int64_t work) {
  int sms = 0;
  int64_t cap = 1024;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess && sms > 0)
    cap = (int64_t)sms * 8;
  else
    (void)cudaGetLastError();
  int64_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > cap) blocks = cap;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

mn_status launched(cudaError_t err, const char *func, const char *what, int device) {
  if (err == cudaSuccess) return MN_OK;
  (void)cudaGetLastError();  // the failed launch's own error, reported here
  return mn__error(MN_ERR_DEVICE, func, "launching %s on cuda:%d failed: %s (%s)", what, device,
                   cudaGetErrorName(err), cudaGetErrorString(err));
}

void offcalc_of_plan(const mn__plan_t *p, OffCalc *c) {
  memset(c, 0, sizeof *c);
  c->ndim = p->ndim;
  for (int k = 0; k < p->ndim; k++) {
    c->size[k] = p->sizes[k];
    c->div[k].init(p->sizes[k] < INT32_MAX ? (uint32_t)p->sizes[k] : 1u);
    c->ds[k] = p->dst_strides[k] * (int64_t)p->dst_item;
    c->ss[k] = p->src_strides[k] * (int64_t)p->src_item;
  }
}

template <int DN, int MODE>
cudaError_t launch_generic_n(const mn__plan_t *p, const OffCalc &c, cudaStream_t s, unsigned grid,
                             const void *pattern) {
  typename Bytes<DN>::T pat;
  memset(&pat, 0, sizeof pat);
  if (pattern) memcpy(&pat, pattern, DN);
  if (p->index64)
    return mn__launch(generic_kernel<DN, MODE, int64_t>, grid, kThreads, 0, s, p->dst, p->src, (int64_t)p->numel, c,
                      (int)p->dst_dtype, (int)p->src_dtype, pat);
  return mn__launch(generic_kernel<DN, MODE, uint32_t>, grid, kThreads, 0, s, p->dst, p->src, (uint32_t)p->numel, c,
                    (int)p->dst_dtype, (int)p->src_dtype, pat);
}

// Each launcher returns false when no kernel fits the plan, else true with the
// launch's error in *err.
template <int MODE>
bool launch_generic(const mn__plan_t *p, const OffCalc &c, cudaStream_t s, unsigned grid, const void *pattern,
                    cudaError_t *err) {
  switch (p->dst_item) {
    case 1: *err = launch_generic_n<1, MODE>(p, c, s, grid, pattern); return true;
    case 2: *err = launch_generic_n<2, MODE>(p, c, s, grid, pattern); return true;
    case 4: *err = launch_generic_n<4, MODE>(p, c, s, grid, pattern); return true;
    case 8: *err = launch_generic_n<8, MODE>(p, c, s, grid, pattern); return true;
    case 16: *err = launch_generic_n<16, MODE>(p, c, s, grid, pattern); return true;
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
#define MN__CU_CASE_S(A, S, sval, sname, SSIZE, ...)                                                    \
  case MN_DTYPE_##S:                                                                                    \
    *err = mn__launch(cast_contig_kernel<D, MN_DTYPE_##S, DI, SSIZE>, grid, kThreads, 0, s, p->dst, p->src,    \
                      (int64_t)p->numel, vector);                                                       \
    return true;
template <int D, int DI>
bool launch_cast_contig_to(const mn__plan_t *p, cudaStream_t s, unsigned grid, bool vector, cudaError_t *err) {
  switch (p->src_dtype) {
    MN_DTYPE_TABLE(MN__CU_CASE_S, ~)
    default: return false;
  }
}
#define MN__CU_CASE_D(A, D, dval, dname, DSIZE, ...) \
  case MN_DTYPE_##D: return launch_cast_contig_to<MN_DTYPE_##D, DSIZE>(p, s, grid, vector, err);

bool launch_cast_contig(const mn__plan_t *p, cudaStream_t s, unsigned grid, cudaError_t *err) {
  size_t wide = p->dst_item > p->src_item ? p->dst_item : p->src_item;
  const bool vector = (size_t)p->vec >= 16 / wide; // aligned for full 16-byte accesses
  switch (p->dst_dtype) {
    MN_DTYPE_TABLE(MN__CU_CASE_D, ~)
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
  mn_status st = mn__cuda_use_device(__func__, device);
  if (st != MN_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = grid_for(device, p->numel);
  const bool cast = p->kind != MN__PLAN_FILL && p->dst_dtype != p->src_dtype;
  bool ok;
  cudaError_t err = cudaSuccess;
  const char *what;
  if (p->kind == MN__PLAN_CONTIG) {
    what = "contiguous cast";
    ok = launch_cast_contig(p, s, grid, &err);
  } else if (p->kind == MN__PLAN_TRANSPOSE && transpose_tiles_pay(p)) {
    what = cast ? "transpose with cast" : "transpose";
    ok = cast ? launch_transpose<true>(p, s, &err) : launch_transpose<false>(p, s, &err);
  } else {
    OffCalc c;
    offcalc_of_plan(p, &c);
    what = p->kind == MN__PLAN_FILL ? "strided fill" : cast ? "strided cast" : "strided copy";
    ok = p->kind == MN__PLAN_FILL ? launch_generic<FILL>(p, c, s, grid, pattern, &err)
         : cast                   ? launch_generic<CAST>(p, c, s, grid, NULL, &err)
                                  : launch_generic<COPY>(p, c, s, grid, NULL, &err);
  }
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "no CUDA kernel for %s (%s <- %s, item %zu)", what,
                     mn_dtype_name(p->dst_dtype), mn_dtype_name(p->src_dtype), p->dst_item);
  return launched(err, __func__, what, device);
}

extern "C" mn_status mn__cuda_random(int device, void *stream, const mn__strided_t *dst, int dtype,
                                     const mn__rand_params_t *params) {
  // Logical row-major dims, innermost first, size-1 dropped, neighbours merged.
  OffCalc c;
  memset(&c, 0, sizeof c);
  int64_t n = 1, item = (int64_t)mn_dtype_itemsize((mn_dtype)dtype), maxoff = 0;
  for (int d = dst->ndim - 1; d >= 0; d--) {
    int64_t size = dst->sizes[d], stride = dst->strides[d] * item;
    n *= size;
    maxoff += (size - 1) * stride;
    if (size == 1) continue;
    int m = c.ndim - 1;
    if (m >= 0 && stride == c.ds[m] * c.size[m]) {
      c.size[m] *= size;
      continue;
    }
    c.size[c.ndim] = size;
    c.ds[c.ndim] = stride;
    c.ndim++;
  }
  if (n == 0) return MN_OK;
  for (int k = 0; k < c.ndim; k++) c.div[k].init(c.size[k] < INT32_MAX ? (uint32_t)c.size[k] : 1u);
  mn_status st = mn__cuda_use_device(__func__, device);
  if (st != MN_OK) return st;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  const int64_t per = mn__rand_per_block(dtype, params->normal);
  const unsigned grid = grid_for(device, (n + per - 1) / per);
  const bool wide = n + per > INT32_MAX || maxoff + item > INT32_MAX;
  const uintptr_t base = (uintptr_t)dst->data;
  const bool dense = c.ndim == 0 || (c.ndim == 1 && c.ds[0] == item);
  const int store = base % (uintptr_t)item != 0                               ? RAND_BYTES
                    : dense && base % (uintptr_t)(per * item < 16 ? per * item : 16) == 0 ? RAND_VEC
                                                                              : RAND_ALIGNED;
#define MN__CU_RAND_S(DT, ST)                                                                            \
  if (wide)                                                                                              \
    err = mn__launch(random_kernel<DT, ST, int64_t>, grid, kThreads, 0, s, dst->data, (int64_t)n, c, *params); \
  else                                                                                                   \
    err = mn__launch(random_kernel<DT, ST, uint32_t>, grid, kThreads, 0, s, dst->data, (uint32_t)n, c, *params);
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
    case MN_DTYPE_FLOAT64: MN__CU_RAND(MN_DTYPE_FLOAT64) break;
    default:
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "random fill of %s", mn_dtype_name((mn_dtype)dtype));
  }
#undef MN__CU_RAND
#undef MN__CU_RAND_S
  return launched(err, __func__, "random fill", device);
}
