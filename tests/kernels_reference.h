/* tests/kernels_reference.h: the tests' oracle for the kernels: element-by-element
 * copy with dtype cast and fill over any strided geometry. Slow, obviously correct. */
#ifndef MNEMO_TESTS_KERNELS_REFERENCE_H
#define MNEMO_TESTS_KERNELS_REFERENCE_H

#include <stdint.h>

#include "kernels/strided.h"
#include "mnemo/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts one element of src_dtype at `src` into dst_dtype at `dst` with the
 * rules of mn_scalar_to_bytes (mnemo/dtype.h). */
void mn__ref_cast_element(void *dst, mn_dtype dst_dtype, const void *src, mn_dtype src_dtype);
/* Elements [begin, end) (row-major order of the common shape) of src, cast to
 * dst's dtype, written to dst. pre: same ndim and sizes; valid dtypes. */
void mn__ref_copy_cast(const mn__strided_t *dst, mn_dtype dst_dtype, const mn__strided_t *src,
                       mn_dtype src_dtype, int64_t begin, int64_t end);
/* Writes the itemsize-byte pattern into every element of dst. */
void mn__ref_fill(const mn__strided_t *dst, size_t itemsize, const void *pattern);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_TESTS_KERNELS_REFERENCE_H */
