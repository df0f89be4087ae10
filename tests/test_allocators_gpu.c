/* tests/test_allocators_gpu.c: the allocator conformance battery on cuda:0
 * (naive, async, adaptors, stacks, caching when built) and the PyTorch/CuPy
 * entry points with real CUDA streams; skips (77) without a GPU. */
#define MN_ALLOC_TEST_GPU 1
#include "test_allocators.c" /* one battery, two devices: see its main() */
