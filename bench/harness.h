/* bench/harness.h: the C harness over Google Benchmark: benchmark bodies are C
 * functions that loop while mn_bench_next() is true; a C++ shim registers them. */
#ifndef MNEMO_BENCH_HARNESS_H
#define MNEMO_BENCH_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_bench_s mn_bench_t; /* wraps benchmark::State */

/* The body: loop `while (mn_bench_next(b)) { ... }`. */
typedef void (*mn_bench_fn)(mn_bench_t *b, void *arg);

/* Registers a benchmark named `name` (copied) with up to 4 integer arguments
 * (nargs of them); `arg` is passed through. Call before mn_bench_main. */
void mn_bench_register(const char *name, mn_bench_fn fn, void *arg, int nargs, const int64_t *args);
/* Only for a benchmark: run it on `threads` threads at once. */
void mn_bench_register_threads(const char *name, mn_bench_fn fn, void *arg, int threads);

bool mn_bench_next(mn_bench_t *b);
int64_t mn_bench_arg(mn_bench_t *b, int i);
int mn_bench_thread_index(mn_bench_t *b);
int mn_bench_threads(mn_bench_t *b);
/* Bytes processed per iteration (Google Benchmark reports bytes/s). */
void mn_bench_set_bytes(mn_bench_t *b, int64_t bytes_per_iteration);
/* Items processed per iteration (reported as items/s). */
void mn_bench_set_items(mn_bench_t *b, int64_t items_per_iteration);
/* A named counter shown in the table (e.g. "GB/s" or "pct_of_ceiling"). */
void mn_bench_counter(mn_bench_t *b, const char *name, double value);
/* Fails the run with a message (the benchmark is reported as an error). */
void mn_bench_error(mn_bench_t *b, const char *message);
void mn_bench_pause(mn_bench_t *b);
void mn_bench_resume(mn_bench_t *b);

/* A call the benchmark needs: when it fails, prints the call and mnemo's
 * message and exits (a benchmark that failed measured nothing). */
#define MN_BENCH_OK(call)                                                  \
  do {                                                                     \
    int mn_bench_st_ = (int)(call);                                        \
    if (mn_bench_st_ != 0) mn_bench_fail(#call, __FILE__, __LINE__);       \
  } while (0)
void mn_bench_fail(const char *call, const char *file, int line);

/* Monotonic clock in seconds, for bodies that time their own repetitions. */
double mn_bench_now_s(void);
/* Sorts v[0..n) and returns its median (v[n / 2]); n > 0. */
double mn_bench_median(double *v, size_t n);

/* Parses Google Benchmark flags and runs every registered benchmark. */
int mn_bench_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_BENCH_HARNESS_H */
