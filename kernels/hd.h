/* kernels/hd.h: MN__HD, the qualifiers of the inline functions shared by the
 * CPU executor (C) and the CUDA kernels (host+device): kernels/cast.h,
 * kernels/divmod.h, kernels/philox.h. Threading: nothing but macros. */
#ifndef MNEMO_KERNELS_HD_H
#define MNEMO_KERNELS_HD_H

#if defined(__CUDACC__)
#define MN__HD __host__ __device__ __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define MN__HD static inline __attribute__((always_inline))
#else
#define MN__HD static inline
#endif

#endif /* MNEMO_KERNELS_HD_H */
