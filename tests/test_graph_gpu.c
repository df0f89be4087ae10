/* tests/test_graph_gpu.c: stream capture and graphs on cuda:0 (label gpu): the
 * scenario test_graph runs on SIM (tests/graph_scenario.h): fork/join
 * capture replayed three times, markers and reaches across a fork and a join,
 * destroy hooks, and a synchronize that invalidates a capture. Skipped
 * without a device (fails where MNEMO_REQUIRE_GPU=1). Single-threaded. */
#include "graph_scenario.h"
#include "mn_test.h"

static mn_device_t DEV;

MN_TEST(capture_replay_on_gpu) { graph_scenario_capture_replay(DEV); }
MN_TEST(markers_on_gpu) { graph_scenario_markers(DEV); }
/* The failing synchronize is an API error compute-sanitizer would report:
 * left to the plain run. */
MN_TEST(illegal_sync_on_gpu) {
  if (mn_test_under_sanitizer()) return;
  graph_scenario_illegal_sync(DEV);
}

int main(void) {
  mn_test_require_cuda();
  DEV = mn_device_cuda(0);
  MN_RUN(capture_replay_on_gpu);
  MN_RUN(markers_on_gpu);
  MN_RUN(illegal_sync_on_gpu);
  mn_test_release_cuda_caches();
  return mn_test_finish();
}
