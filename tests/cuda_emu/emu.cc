// tests/cuda_emu/emu.cc: the CUDA launch emulation (see cuda_runtime.h here).
// A launch runs on the calling host thread: each thread of a block is a fiber
// (its own stack) and __syncthreads is a real barrier: a fiber that reaches it
// yields, and the block goes on only when every fiber still running has
// arrived (fibers that returned no longer count, as on the GPU). Blocks run
// one after another, their threads in ascending order on even blocks and in
// descending order on odd ones (a missing barrier then reads stale shared
// memory in both directions). Also: the runtime calls mnemo's kernels make
// (device, attributes, occupancy, async copies, errors) on one emulated device
// with few SMs, and the device guard of runtime/cuda_device.h.
// Fibers switch through a few lines of assembly on x86-64 (no system call, no
// signal mask), through ucontext elsewhere; under AddressSanitizer every switch
// is announced (__sanitizer_start/finish_switch_fiber).
// Threading: launches from any thread, one at a time (a global mutex); each
// host thread that launches keeps its own fibers, which never change thread.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <vector>

#if !defined(__x86_64__) && !defined(MN_EMU_UCONTEXT)
#define MN_EMU_UCONTEXT 1  // define it to use ucontext on x86-64 too
#endif
#ifdef MN_EMU_UCONTEXT
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MN_EMU_ASAN 1
#endif
#endif
#ifdef MN_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include "cuda_runtime.h"
#include "mn_emu.h"
#include "runtime/cuda_device.h"
#include "runtime/error.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

#ifndef MN_EMU_UCONTEXT
// mn_emu_switch(&save, to): saves the callee-saved registers, the SSE and x87
// control words and the stack pointer (into *save) and resumes the context
// whose stack pointer is `to` (System V x86-64).
extern "C" void mn_emu_switch(void **save, void *to);
__asm__(
    ".text\n"
    ".globl mn_emu_switch\n"
    ".hidden mn_emu_switch\n"
    ".type mn_emu_switch,@function\n"
    "mn_emu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size mn_emu_switch, .-mn_emu_switch\n");
#endif

namespace {

constexpr int kSms = 2;  // few SMs: grid-stride loops take more than one step
constexpr unsigned kMaxBlockThreads = 1024;
constexpr size_t kMaxShared = 48 * 1024;
constexpr size_t kStackBytes = 256 * 1024;  // per fiber (Debug + ASan frames are large)

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t err) {
  last_error = err;
  return err;
}

[[noreturn]] void die(const char *what) {
  fprintf(stderr, "mnemo CUDA emulation: %s\n", what);
  abort();
}

struct Sched;

// Where a suspended stack resumes, and ASan's fake-stack handle for it.
struct Ctx {
#ifdef MN_EMU_UCONTEXT
  ucontext_t uc;
#else
  void *sp = nullptr;
#endif
  void *asan_fake = nullptr;
};

// One emulated thread: a stack and the context it is suspended in.
struct Fiber {
  Sched *sched = nullptr;
  unsigned index = 0;
  char *map = nullptr;    // the mapping: a guard page, then the stack
  char *stack = nullptr;  // lowest usable byte
  size_t stack_size = 0;
  bool done = false, waiting = false;
  Ctx ctx;
};

// A host thread's fibers and the context that schedules them.
struct Sched {
  std::vector<Fiber *> fibers;
  const std::function<void()> *body = nullptr;
  Ctx ctx;
  const void *host_stack = nullptr;  // the host thread's stack (ASan)
  size_t host_stack_size = 0;
};

// Launch state: one launch at a time.
std::mutex &launch_lock() {
  static std::mutex *m = new std::mutex();  // never destroyed: launches may run at exit
  return *m;
}
mn_emu_stats_t stats;  // under launch_lock
unsigned fail_launches, fail_copies;  // mn_emu_inject_fault; under launch_lock

// Every Sched stays reachable (the leak checker sees them; threads come and go
// rarely: SIM stream workers).
std::vector<Sched *> &all_scheds() {
  static std::vector<Sched *> *v = new std::vector<Sched *>();
  return *v;
}
thread_local Sched *my_sched = nullptr;
thread_local Fiber *running = nullptr;   // the fiber now running on this thread
thread_local Fiber *starting = nullptr;  // handed to a fiber's first entry

// Suspends the running code in `from` and resumes `to`, whose stack is
// [stack, stack + size) (ASan is told of the switch).
void switch_ctx(Ctx &from, Ctx &to, const void *stack, size_t size) {
#ifdef MN_EMU_ASAN
  __sanitizer_start_switch_fiber(&from.asan_fake, stack, size);
#else
  (void)stack;
  (void)size;
#endif
#ifdef MN_EMU_UCONTEXT
  if (swapcontext(&from.uc, &to.uc) != 0) die("swapcontext failed");
#else
  mn_emu_switch(&from.sp, to.sp);
#endif
#ifdef MN_EMU_ASAN
  __sanitizer_finish_switch_fiber(from.asan_fake, nullptr, nullptr);
#endif
}

void to_fiber(Sched &s, Fiber &f) {
  running = &f;
  switch_ctx(s.ctx, f.ctx, f.stack, f.stack_size);
  running = nullptr;
}

void to_sched(Fiber &f) {
  Sched &s = *f.sched;
  switch_ctx(f.ctx, s.ctx, s.host_stack, s.host_stack_size);
}

// A fiber's whole life: run the block's body, report done, wait for the next
// block. It never returns.
extern "C" void fiber_main(void) {
  Fiber &f = *starting;
  Sched &s = *f.sched;
#ifdef MN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.host_stack, &s.host_stack_size);
#endif
  for (;;) {
    (*s.body)();
    f.done = true;
    to_sched(f);
  }
}

Fiber *new_fiber(Sched &s, unsigned index) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) return nullptr;
  if (mprotect(m, page, PROT_NONE) != 0) {  // a stack overflow faults
    munmap(m, kStackBytes + page);
    return nullptr;
  }
  Fiber *f = new Fiber();
  f->sched = &s;
  f->index = index;
  f->map = static_cast<char *>(m);
  f->stack = f->map + page;
  f->stack_size = kStackBytes;
#ifdef MN_EMU_UCONTEXT
  if (getcontext(&f->ctx.uc) != 0) die("getcontext failed");
  f->ctx.uc.uc_stack.ss_sp = f->stack;
  f->ctx.uc.uc_stack.ss_size = f->stack_size;
  f->ctx.uc.uc_link = nullptr;
  makecontext(&f->ctx.uc, fiber_main, 0);
#else
  // The frame mn_emu_switch pops: control words, six registers, then "return"
  // into fiber_main with the stack as right after a call (rsp % 16 == 8).
  uintptr_t top = ((uintptr_t)(f->stack + f->stack_size)) & ~(uintptr_t)15;
  uint64_t *sp = reinterpret_cast<uint64_t *>(top);
  *--sp = 0;                                   // fiber_main's return address: none
  *--sp = (uint64_t)(uintptr_t)&fiber_main;    // where mn_emu_switch returns to
  for (int r = 0; r < 6; r++) *--sp = 0;       // rbp rbx r12 r13 r14 r15
  *--sp = 0x1F80ull | (0x037Full << 32);       // MXCSR, x87 control word: the defaults
  f->ctx.sp = sp;
#endif
  return f;
}

Sched &sched() {
  if (!my_sched) {
    my_sched = new Sched();
    all_scheds().push_back(my_sched);  // under launch_lock
  }
  return *my_sched;
}

// Runs one block of n threads to completion.
void run_block(Sched &s, unsigned n, bool reverse) {
  for (unsigned i = 0; i < n; i++) {
    s.fibers[i]->done = false;
    s.fibers[i]->waiting = false;
  }
  const dim3 bd = blockDim;
  for (;;) {
    unsigned waiting = 0;
    for (unsigned k = 0; k < n; k++) {
      Fiber &f = *s.fibers[reverse ? n - 1 - k : k];
      if (f.done) continue;
      f.waiting = false;
      threadIdx = uint3{f.index % bd.x, (f.index / bd.x) % bd.y, f.index / (bd.x * bd.y)};
      starting = &f;
      to_fiber(s, f);
      if (f.waiting) waiting++;
    }
    if (waiting == 0) return;
    stats.barriers++;  // every live thread arrived: release them
  }
}

}  // namespace

void __syncthreads() {
  Fiber *f = running;
  if (!f) die("__syncthreads outside an emulated kernel");
  f->waiting = true;
  to_sched(*f);
  running = f;
}

namespace mn_emu {

cudaError_t run(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const std::function<void()> &body) {
  (void)stream;  // the emulation runs each launch to completion at once
  std::lock_guard<std::mutex> launch(launch_lock());
  const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535 ||
      nthreads == 0 || nthreads > kMaxBlockThreads || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      shared > kMaxShared) {
    stats.refused++;
    return fail(cudaErrorInvalidConfiguration);
  }
  if (running) die("a kernel launched a kernel (not emulated)");
  if (fail_launches > 0) {
    fail_launches--;
    stats.faults++;
    return fail(cudaErrorLaunchOutOfResources);
  }
  Sched &s = sched();
  while (s.fibers.size() < nthreads) {
    Fiber *f = new_fiber(s, (unsigned)s.fibers.size());
    if (!f) return fail(cudaErrorLaunchOutOfResources);
    s.fibers.push_back(f);
  }
  stats.launches++;
  if ((uint64_t)grid.x * grid.y * grid.z > 1) stats.multi_block++;
  if (nthreads > stats.max_block_threads) stats.max_block_threads = nthreads;
  s.body = &body;
  blockDim = block;
  gridDim = grid;
  uint64_t linear = 0;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++, linear++) {
        blockIdx = uint3{x, y, z};
        stats.blocks++;
        stats.threads += nthreads;
        run_block(s, (unsigned)nthreads, linear % 2 == 1);
      }
  s.body = nullptr;
  return cudaSuccess;
}

}  // namespace mn_emu

extern "C" void mn_emu_stats(mn_emu_stats_t *out) {
  std::lock_guard<std::mutex> launch(launch_lock());
  *out = stats;
}

extern "C" void mn_emu_stats_reset(void) {
  std::lock_guard<std::mutex> launch(launch_lock());
  stats = mn_emu_stats_t{};
}

extern "C" void mn_emu_inject_fault(mn_emu_fault what, unsigned count) {
  std::lock_guard<std::mutex> launch(launch_lock());
  if (what == MN_EMU_FAULT_LAUNCH) fail_launches = count;
  if (what == MN_EMU_FAULT_MEMCPY) fail_copies = count;
}

const char *cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorStubLibrary: return "cudaErrorStubLibrary";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t err) {
  return err == cudaSuccess ? "no error" : "error in the CUDA launch emulation (tests/cuda_emu)";
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaGetDevice(int *device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = (int)kMaxBlockThreads; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = kSms; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  (void)kind;
  (void)stream;
  {
    std::lock_guard<std::mutex> launch(launch_lock());
    if (fail_copies > 0) {
      fail_copies--;
      stats.faults++;
      return fail(cudaErrorInvalidValue);
    }
  }
  if (count && (!dst || !src)) return fail(cudaErrorInvalidValue);
  if (count) memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func, int blockSize,
                                                          size_t dynamicSMemSize) {
  if (!blocks || !func || blockSize <= 0 || blockSize > (int)kMaxBlockThreads || dynamicSMemSize > kMaxShared)
    return fail(cudaErrorInvalidValue);
  int n = 2048 / blockSize;
  *blocks = n > 32 ? 32 : n;
  return cudaSuccess;
}

// ---- the device guard of runtime/cuda_device.h on the emulated device ----------

extern "C" mn_status mn__cuda_guard_enter(mn__cuda_guard_t *g, const char *func, int index, bool force) {
  g->restore = -1;
  int cur = current_device;
  if (!force && cur == index) return MN_OK;
  if (cudaSetDevice(index) != cudaSuccess) {
    (void)cudaGetLastError();
    return mn__error(MN_ERR_NO_DEVICE, func, "cuda:%d does not exist (the emulation has one device)", index);
  }
  if (cur != index) g->restore = cur;
  return MN_OK;
}

extern "C" void mn__cuda_guard_leave(mn__cuda_guard_t *g) {
  if (g->restore < 0) return;
  if (cudaSetDevice(g->restore) != cudaSuccess) (void)cudaGetLastError();
  g->restore = -1;
}
