/* runtime/hd.h: MN__HD, the qualifiers of the inline functions shared by host
 * C code and the CUDA kernels (host+device): runtime/narrow_float.h,
 * kernels/cast.h, kernels/divmod.h, kernels/philox.h; and MN__FMUL and
 * friends, float arithmetic that rounds the same on both. Threading: nothing
 * but macros. */
#ifndef MNEMO_RUNTIME_HD_H
#define MNEMO_RUNTIME_HD_H

#if defined(__CUDACC__)
#define MN__HD __host__ __device__ __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define MN__HD static inline __attribute__((always_inline))
#else
#define MN__HD static inline
#endif

/* Exact float arithmetic that no compiler contracts into an FMA (the random
 * fill must give the same bits on CPU and GPU). C11 builds do not contract. */
#if defined(__CUDA_ARCH__)
#define MN__FMUL(a, b) __fmul_rn((a), (b))
#define MN__FADD(a, b) __fadd_rn((a), (b))
#define MN__DMUL(a, b) __dmul_rn((a), (b))
#define MN__DADD(a, b) __dadd_rn((a), (b))
#else
#define MN__FMUL(a, b) ((a) * (b))
#define MN__FADD(a, b) ((a) + (b))
#define MN__DMUL(a, b) ((a) * (b))
#define MN__DADD(a, b) ((a) + (b))
#endif

#endif /* MNEMO_RUNTIME_HD_H */
