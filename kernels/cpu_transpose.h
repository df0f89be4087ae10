/* kernels/cpu_transpose.h: the CPU executor's 2-d transpose (kernels/cpu_exec.c
 * runs every TRANSPOSE plan as a batch of these): register-blocked tiles per
 * item size (SSE2 baseline, AVX2 when the CPU has it, portable C elsewhere),
 * and for large operands a staged path that writes whole dst cache lines with
 * streaming stores. Pure functions of their arguments: thread-safe; two calls
 * may run at once on disjoint row ranges of the same transpose. */
#ifndef MNEMO_KERNELS_CPU_TRANSPOSE_H
#define MNEMO_KERNELS_CPU_TRANSPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Instruction sets of the tile kernels; mn__tr_best_isa() is what this CPU
 * runs (tests pick lower ones to cover every kernel on one machine). */
typedef enum mn__tr_isa { MN__TR_PORTABLE = 0, MN__TR_SSE2 = 1, MN__TR_AVX2 = 2 } mn__tr_isa;
mn__tr_isa mn__tr_best_isa(void);

/* One 2-d transpose: for i < rows, j < cols, the `item` bytes at
 * src + i * sld + j * item go to dst + j * dld + i * item (lds in bytes; any
 * item size; any address alignment; the operands must not overlap). */
typedef struct mn__tr2d_s {
  char *dst;
  const char *src;
  int64_t dld, sld;
  int64_t rows, cols;
  size_t item;
  mn__tr_isa isa; /* at most mn__tr_best_isa() */
  /* Write whole, aligned dst cache lines with non-temporal stores (no read
   * for ownership; the result is not left in the cache): for large operands. */
  bool stream;
} mn__tr2d_t;

/* Rows [r0, r1) of t (0 <= r0 <= r1 <= t->rows), all cols. Calls with the
 * same t on disjoint row ranges write disjoint bytes (streaming or not, any
 * dst alignment), so they may run on different threads. */
void mn__cpu_transpose_2d(const mn__tr2d_t *t, int64_t r0, int64_t r1);
/* The row count callers best split a transpose at (a multiple of 16), for
 * t->stream = stream: a task of these rows holds whole tiles. */
int64_t mn__tr_panel_rows(size_t item, bool stream);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_CPU_TRANSPOSE_H */
