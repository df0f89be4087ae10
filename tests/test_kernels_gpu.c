/* tests/test_kernels_gpu.c: the cases of tests/test_kernels_cases.h on CUDA
 * memory, and the gather/scatter cases of tests/test_kernels_index_cases.h;
 * the random fill and the accumulating scatter must match the host's bits. Skips (77) without GPU. */
#include "test_kernels_cases.h"
#include "test_kernels_index_cases.h"

int main(void) {
  mn_test_require_cuda();
  kc_dev = mn_device_cuda(0);
  MN_CHECK_OK(mn_stream_create(kc_dev, &kc_stream));
  kc_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  ki_dev = kc_dev; /* gather/scatter (kernels/cuda_index.cu): the CPU's bits */
  ki_stream = kc_stream;
  ki_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  MN_CHECK_OK(mn_stream_destroy(kc_stream));
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
