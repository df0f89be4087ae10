/* tests/test_nccl_gpu.c: the NCCL module on cuda:0 (label gpu; skipped
 * without a GPU, fails without one when MNEMO_REQUIRE_GPU=1): a one-rank
 * communicator, a pool whose segments are NCCL memory (mn_nccl_source)
 * registered with it, an all-reduce (sum, float32) out of place and in place
 * on pool memory, the result checked on the host, then the pool destroyed
 * (its segments deregistered) and everything given back. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>

#include "mn_test.h"
#include "mnemo/nccl.h"
#include "runtime/cuda_device.h"

#define N ((size_t)1 << 20) /* floats: 4 MiB per buffer */

#define CHECK_NCCL(call)                                                                     \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    MN_CHECK(r_ == ncclSuccess);                                                             \
    if (r_ != ncclSuccess) fprintf(stderr, "%s: %s\n", #call, ncclGetErrorString(r_));        \
  } while (0)

int main(void) {
  mn_test_require_cuda();
  const mn_device_t dev = mn_device_cuda(0), cpu = mn_device_cpu();
  MN_CHECK_OK(mn__cuda_set_current(0)); /* ncclCommInitRank uses the current device */
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclGetUniqueId(&id));
  CHECK_NCCL(ncclCommInitRank(&comm, 1, id, 0));
  if (!comm) return mn_test_finish();

  mn_allocator_t *a = NULL;
  MN_CHECK_OK(mn_caching_allocator_create(dev, NULL, &a));
  mn_mempool_source_t src;
  MN_CHECK_OK(mn_nccl_source(&src));
  mn_mempool_options_t opts = {.source = &src};
  mn_mempool_t *pool = NULL;
  if (a) MN_CHECK_OK(mn_mempool_create(a, &opts, &pool));
  if (!pool) return mn_test_finish();

  MN_CHECK_OK(mn_nccl_register_pool(comm, pool));
  float *send = NULL, *recv = NULL;
  MN_CHECK_OK(mn_mempool_use(pool));
  MN_CHECK_OK(mn_allocator_alloc(a, N * sizeof(float), NULL, (void **)&send));
  MN_CHECK_OK(mn_allocator_alloc(a, N * sizeof(float), NULL, (void **)&recv));
  MN_CHECK_OK(mn_mempool_unuse(pool));
  MN_CHECK(mn_nccl_registered_count(comm, pool) >= 1);
  mn_snapshot_t *snap = NULL;
  MN_CHECK_OK(mn_mempool_snapshot(pool, &snap));
  if (snap) {
    MN_CHECK(mn_nccl_registered_count(comm, pool) == snap->nsegments);
    mn_snapshot_free(snap);
  }

  float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  mn_stream_t *s = NULL;
  MN_CHECK_OK(mn_stream_create(dev, &s));
  if (host && back && send && recv && s) {
    for (size_t i = 0; i < N; i++) host[i] = (float)(i % 1000) * 0.5f - 7.0f;
    MN_CHECK_OK(mn_memcpy_async(dev, send, cpu, host, N * sizeof(float), s));
    MN_CHECK_OK(mn_memset_async(dev, recv, 0, N * sizeof(float), s));
    cudaStream_t cs = (cudaStream_t)mn_stream_native(s);
    CHECK_NCCL(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, cs)); /* one rank: the sum is the input */
    CHECK_NCCL(ncclAllReduce(recv, recv, N, ncclFloat, ncclSum, comm, cs)); /* in place */
    MN_CHECK_OK(mn_memcpy_async(cpu, back, dev, recv, N * sizeof(float), s));
    MN_CHECK_OK(mn_stream_synchronize(s));
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) bad += back[i] != host[i];
    MN_CHECK(bad == 0);
    if (bad) fprintf(stderr, "%zu of %zu floats differ (back[1]=%g, want %g)\n", bad, N, back[1], host[1]);
  }
  free(host);
  free(back);

  /* Destroying the pool frees its segments: each is deregistered first. */
  MN_CHECK_OK(mn_allocator_free(a, send));
  MN_CHECK_OK(mn_allocator_free(a, recv));
  MN_CHECK_OK(mn_stream_destroy(s));
  MN_CHECK_OK(mn_mempool_destroy(pool));
  MN_CHECK(mn_nccl_registered_count(comm, pool) == 0);
  MN_CHECK_OK(mn_nccl_deregister_pool(comm, pool));
  CHECK_NCCL(ncclCommDestroy(comm));
  MN_CHECK_OK(mn_allocator_check_invariants(a));
  mn_allocator_destroy(a);
  mn_test_release_cuda_caches();
  printf("test_nccl_gpu: one-rank all-reduce on registered pool memory of %s\n", "cuda:0");
  return mn_test_finish();
}
