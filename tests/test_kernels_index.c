/* tests/test_kernels_index.c: the gather/scatter kernels (kernels/index.h)
 * on the CPU (run at once, split over the pool when large) and on a SIM
 * device (queued host work): the cases of tests/test_kernels_index_cases.h
 * against the naive reference, bit-exact.
 * Threading: the main thread and the SIM stream's worker. */
#include "test_kernels_index_cases.h"

int main(void) {
  mn_test_configure_sim(1, (size_t)1 << 30);
  const mn_device_t devs[2] = {mn_device_cpu(), mn_device_sim(0)};
  for (int i = 0; i < 2; i++) {
    ki_dev = devs[i];
    printf("-- %s\n", i == 0 ? "cpu" : "sim:0");
    MN_CHECK_OK(mn_stream_create(ki_dev, &ki_stream));
    ki_run_all();
    MN_CHECK_OK(mn_stream_synchronize(ki_stream));
    MN_CHECK_OK(mn_stream_destroy(ki_stream));
  }
  mn_test_release_sim_caches();
  return mn_test_finish();
}
