// kernels/cuda_launch.h: the one way mnemo's CUDA kernels are launched,
// mn__launch(kernel, grid, block, shared_bytes, stream, args...). It returns the
// launch's own cudaError_t (cudaLaunchKernel), so no launcher reads or clears
// the calling thread's last CUDA error, which belongs to the host application.
// Built with MN_CUDA_EMULATION (tests/cuda_emu), the same call runs the kernel
// on the host through the launch emulation instead. mn__launch_1d sizes a
// grid-stride kernel's grid by its occupancy (kernels/cuda_grid.h) and
// mn__launched turns a launch's error into mnemo's status. C++ only (CUDA
// sources).
// Threading: as cudaLaunchKernel; the emulation serializes launches.
#ifndef MNEMO_KERNELS_CUDA_LAUNCH_H
#define MNEMO_KERNELS_CUDA_LAUNCH_H

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda_grid.h"
#include "runtime/error.h"

namespace mn_launch_detail {
// Stops the argument pack from taking part in deduction: the kernel's own
// parameter types decide, and each argument converts to its parameter.
template <typename T> struct same { typedef T type; };

template <typename... P>
cudaError_t typed(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                  typename same<P>::type... args) {
#if defined(MN_CUDA_EMULATION)
  return mn_emu_launch(kernel, grid, block, shared, stream, args...);
#else
  void *ptrs[] = {static_cast<void *>(&args)...};
  return cudaLaunchKernel(reinterpret_cast<const void *>(kernel), grid, block, ptrs, shared, stream);
#endif
}
}  // namespace mn_launch_detail

// Launches kernel<<<grid, block, shared, stream>>>(args...); every kernel of
// mnemo takes at least one argument.
template <typename... P, typename... A>
static inline cudaError_t mn__launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
                                     cudaStream_t stream, A... args) {
  static_assert(sizeof...(P) == sizeof...(A) && sizeof...(P) > 0, "one argument per kernel parameter");
  return mn_launch_detail::typed<P...>(kernel, grid, block, shared, stream, args...);
}

// Launches a grid-stride kernel of THREADS-thread blocks over `work` items,
// its grid sized by its own occupancy on `device` (kernels/cuda_grid.h).
template <auto K, int THREADS, typename... A>
static inline cudaError_t mn__launch_1d(int device, int64_t work, cudaStream_t s, A... args) {
  return mn__launch(K, mn_grid::grid_for<K, THREADS>(device, work), THREADS, 0, s, args...);
}

// MN_OK for a launch that went out; else MN_ERR_DEVICE naming the public
// call, what was launched, the device and CUDA's error (the failed launch's
// own error, which is cleared here).
static inline mn_status mn__launched(cudaError_t err, const char *func, const char *what, int device) {
  if (err == cudaSuccess) return MN_OK;
  (void)cudaGetLastError();
  return mn__error(MN_ERR_DEVICE, func, "launching %s on cuda:%d failed: %s (%s)", what, device,
                   cudaGetErrorName(err), cudaGetErrorString(err));
}

#endif /* MNEMO_KERNELS_CUDA_LAUNCH_H */
