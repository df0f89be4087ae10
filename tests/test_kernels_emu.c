/* tests/test_kernels_emu.c: every CUDA kernel (kernels/cuda_*.cu) run on the host
 * through the launch emulation (tests/cuda_emu, preset emu): the shared kernel
 * matrix of tests/test_kernels_cases.h (every dtype pair x layouts, fills,
 * casts, random fills, bit-exact against the scalar reference) on a SIM device,
 * whose kernels in this build are the emulated CUDA ones, and the cases of
 * tests/test_kernels_emu_cases.h (aligned dense random fills, 64-bit indices,
 * refusals, failed launches), the gather/scatter cases of
 * tests/test_kernels_index_cases.h (kernels/cuda_index.cu against the naive
 * row-major reference: accumulate order bit-identical to the CPU's); then the
 * counters prove the kernels ran
 * emulated, and the emulation checks itself: a real barrier, per-block shared
 * memory, grid-stride loops, refused configurations.
 * Threading: the main thread and the SIM stream's worker. */
#include "cuda_emu/mn_emu.h"
#include "test_kernels_cases.h"
#include "test_kernels_emu_cases.h"
#include "test_kernels_index_cases.h"
#include "kernels/index_kern.h"

/* The gather/scatter launcher's failures, on host memory (emulation only):
 * a failed launch is MN_ERR_DEVICE naming the kernel and writes nothing; an
 * item size with no kernel is refused. */
MN_TEST(index_launch_failures_are_reported) {
  static float dst[64], src[64];
  static int32_t idx[8] = {3, -1, 0, 7, 2, -8, 5, 1};
  for (int i = 0; i < 64; i++) src[i] = (float)i + 1.0f;
  memset(dst, 0, sizeof dst);
  mn__index_geom_t g;
  memset(&g, 0, sizeof g);
  g.op = MN__IX_GATHER;
  g.dtype = MN_DTYPE_FLOAT32;
  g.item = 4;
  g.ndim = 1;
  g.n = 1;
  g.numel = 8;
  g.dst = (char *)dst;
  g.src = (const char *)src;
  g.size[0] = 8;
  g.ds[0] = 4;
  g.idx[0] = (const char *)idx;
  g.isize[0] = 8;
  g.istride[0] = 4;
  g.is[0][0] = 4;
  mn_emu_inject_fault(MN_EMU_FAULT_LAUNCH, 1);
  MN_CHECK_ERR(mn__cuda_index(0, NULL, &g), MN_ERR_DEVICE, "gather");
  for (int i = 0; i < 64; i++) MN_CHECK(dst[i] == 0.0f);
  g.op = MN__IX_SCATTER_ADD;
  mn_emu_inject_fault(MN_EMU_FAULT_LAUNCH, 1);
  MN_CHECK_ERR(mn__cuda_index(0, NULL, &g), MN_ERR_DEVICE, "scatter with accumulate");
  g.item = 3;
  MN_CHECK_ERR(mn__cuda_index(0, NULL, &g), MN_ERR_INVALID_ARGUMENT, "no CUDA kernel");
  g.item = 4;
  g.op = MN__IX_GATHER;
  MN_CHECK_OK(mn__cuda_index(0, NULL, &g)); /* and the next launch runs */
  for (int i = 0; i < 8; i++) MN_CHECK(dst[i] == src[idx[i] < 0 ? idx[i] + 8 : idx[i]]);
}

/* The emulator's own checks live in emu_selftest.cc (C++: it launches kernels). */
int mn_emu_selftest(void);

int main(void) {
  mn_test_configure_sim(1, (size_t)1 << 30);
  kc_dev = mn_device_sim(0);
  MN_CHECK_OK(mn_stream_create(kc_dev, &kc_stream));
  mn_emu_stats_reset();
  kc_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats_t s;
  mn_emu_stats(&s);
  printf("emulation: %llu launches (%llu of several blocks), %llu blocks, %llu threads, %llu barriers\n",
         (unsigned long long)s.launches, (unsigned long long)s.multi_block, (unsigned long long)s.blocks,
         (unsigned long long)s.threads, (unsigned long long)s.barriers);
  MN_CHECK(s.launches > 1000);        /* the matrix ran through the CUDA kernels */
  MN_CHECK(s.multi_block > 0);        /* grid-stride loops over several blocks */
  MN_CHECK(s.blocks > s.launches);
  MN_CHECK(s.barriers > 0);           /* tiled transposes met at __syncthreads */
  MN_CHECK(s.refused == 0);           /* no launcher built a configuration CUDA refuses */
  MN_CHECK(s.faults == 0);
  MN_CHECK(s.max_block_threads == 256);
  kc_run_emu_cases();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats(&s);
  const mn_emu_stats_t before = s; /* the failure cases above refused launches on purpose */
  ki_dev = kc_dev;
  ki_stream = kc_stream;
  ki_run_all();
  MN_CHECK_OK(mn_stream_synchronize(kc_stream));
  mn_emu_stats(&s);
  printf("emulation: %llu gather/scatter launches\n", (unsigned long long)(s.launches - before.launches));
  MN_CHECK(s.launches - before.launches > 500); /* the index cases ran through kernels/cuda_index.cu */
  MN_CHECK(s.multi_block > before.multi_block);
  MN_CHECK(s.refused == before.refused && s.faults == before.faults);
  MN_RUN(index_launch_failures_are_reported);
  MN_CHECK_OK(mn_stream_destroy(kc_stream));
  MN_CHECK(mn_emu_selftest() == 0);
  mn_test_release_sim_caches();
  return mn_test_finish();
}
