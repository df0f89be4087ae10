/* kernels/strided.h: the generic CPU strided copy, a reference N-d loop used
 * by the copy engine for CPU views of any layout and to pack and unpack
 * strided host sides through contiguous staging. Pure functions: thread-safe. */
#ifndef MNEMO_KERNELS_STRIDED_H
#define MNEMO_KERNELS_STRIDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One operand: the element at multi-index i lives at
 * data + (sum_d i[d] * strides[d] - origin) * itemsize. Strides are in
 * elements and non-negative; origin is 0 except for packed chunks. */
typedef struct mn__strided_s {
  char *data;
  int ndim;
  int64_t sizes[MN_MAX_DIMS];
  int64_t strides[MN_MAX_DIMS];
  int64_t origin;
} mn__strided_t;

/* A contiguous buffer of `shape`'s geometry holding only the elements
 * [begin, ...) of that shape, the first at buf[0]: a staging chunk. */
void mn__strided_packed(void *buf, const mn__strided_t *shape, int64_t begin, mn__strided_t *out);

/* Copies the elements [begin, end) (row-major order of the common shape) of
 * src into dst. pre: same ndim and sizes, 0 <= begin <= end <= numel, the
 * two do not overlap. itemsize is any positive size (1..16 are fast paths). */
/* Copies `run` items of `item` bytes from s to d; steps in bytes (memcpy when
 * both are dense; fixed-size moves for 1..16-byte items). */
void mn__copy_row(char *d, int64_t dstep, const char *s, int64_t sstep, int64_t run, size_t item);
void mn__cpu_strided_copy(const mn__strided_t *dst, const mn__strided_t *src, size_t itemsize, int64_t begin,
                          int64_t end);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_KERNELS_STRIDED_H */
