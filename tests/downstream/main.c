/* tests/downstream/main.c: a downstream program built against an installed
 * mnemo; it runs the skeleton on the CPU and SIM devices. */
#include <stdio.h>

#include <mnemo/mnemo.h>

int main(void) {
  const int64_t n = 16;
  mn_device_t devs[2] = {mn_device_cpu(), mn_device_sim(0)};
  for (int i = 0; i < 2; i++) {
    mn_view_t *v = NULL, *h = NULL;
    if (mn_view_empty(devs[i], MN_DTYPE_INT16, 1, &n, &v) != MN_OK ||
        mn_view_empty(mn_device_cpu(), MN_DTYPE_INT16, 1, &n, &h) != MN_OK ||
        mn_view_fill(v, mn_scalar_int(42), NULL) != MN_OK || mn_view_copy(h, v, NULL) != MN_OK ||
        mn_device_synchronize(devs[i]) != MN_OK) {
      fprintf(stderr, "downstream: %s\n", mn_last_error());
      return 1;
    }
    int ok = ((const int16_t *)mn_view_data(h))[15] == 42;
    mn_view_destroy(v);
    mn_view_destroy(h);
    if (!ok) return 1;
  }
  printf("downstream ok, mnemo %s\n", mn_version());
  return 0;
}
