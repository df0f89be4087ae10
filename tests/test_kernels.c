/* tests/test_kernels.c: the copy, cast, fill and random kernels on CPU memory
 * (run at once) and SIM memory (queued host work): tests/test_kernels_cases.h. */
#include "test_kernels_cases.h"

int main(void) {
  mn_test_configure_sim(1, (size_t)1 << 30);
  const mn_device_t devs[2] = {mn_device_cpu(), mn_device_sim(0)};
  for (int k = 0; k < 2; k++) {
    kc_dev = devs[k];
    printf("== %s\n", k == 0 ? "cpu" : "sim:0");
    MN_CHECK_OK(mn_stream_create(kc_dev, &kc_stream));
    kc_run_all();
    MN_CHECK_OK(mn_stream_synchronize(kc_stream));
    MN_CHECK_OK(mn_stream_destroy(kc_stream));
  }
  mn_test_release_sim_caches();
  return mn_test_finish();
}
