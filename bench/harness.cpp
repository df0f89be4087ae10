// bench/harness.cpp: the thin C++ shim that lets C functions be Google
// Benchmark benchmarks; the only C++ in mnemo outside CUDA kernels.
#include "bench/harness.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "mnemo/mnemo.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

struct mn_bench_s {
  benchmark::State *state;
  bool started;
};

extern "C" {

void mn_bench_register(const char *name, mn_bench_fn fn, void *arg, int nargs, const int64_t *args) {
  auto *b = benchmark::RegisterBenchmark(std::string(name).c_str(), [fn, arg](benchmark::State &st) {
    mn_bench_s wrap{&st, false};
    fn(&wrap, arg);
  });
  if (nargs > 0) b->Args(std::vector<int64_t>(args, args + nargs));
}

void mn_bench_register_threads(const char *name, mn_bench_fn fn, void *arg, int threads) {
  benchmark::RegisterBenchmark(std::string(name).c_str(), [fn, arg](benchmark::State &st) {
    mn_bench_s wrap{&st, false};
    fn(&wrap, arg);
  })->Threads(threads)->UseRealTime();
}

bool mn_bench_next(mn_bench_t *b) {
  // KeepRunning() counts the iteration it starts; the last call ends the loop.
  return b->state->KeepRunning();
}

int64_t mn_bench_arg(mn_bench_t *b, int i) { return b->state->range(i); }
int mn_bench_thread_index(mn_bench_t *b) { return static_cast<int>(b->state->thread_index()); }
int mn_bench_threads(mn_bench_t *b) { return static_cast<int>(b->state->threads()); }

void mn_bench_set_bytes(mn_bench_t *b, int64_t n) {
  b->state->SetBytesProcessed(static_cast<int64_t>(b->state->iterations()) * n);
}

void mn_bench_set_items(mn_bench_t *b, int64_t n) {
  b->state->SetItemsProcessed(static_cast<int64_t>(b->state->iterations()) * n);
}

void mn_bench_counter(mn_bench_t *b, const char *name, double value) { b->state->counters[name] = value; }
void mn_bench_error(mn_bench_t *b, const char *message) { b->state->SkipWithError(message); }
void mn_bench_pause(mn_bench_t *b) { b->state->PauseTiming(); }
void mn_bench_resume(mn_bench_t *b) { b->state->ResumeTiming(); }

int mn_bench_main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

void mn_bench_fail(const char *call, const char *file, int line) {
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, mn_last_error());
  std::exit(1);
}

double mn_bench_now_s(void) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double mn_bench_median(double *v, size_t n) {
  std::sort(v, v + n);
  return v[n / 2];
}

}  // extern "C"
