/* kernels/strided_cpu.c: the generic CPU strided copy (kernels/strided.h):
 * dims of size 1 dropped, mergeable dims coalesced (the planner's
 * mn__plan_dims, in row-major order), then rows copied with
 * memcpy when both sides are dense, element by element otherwise. Thread-safe. */
#include <string.h>

#include "kernels/plan.h"
#include "kernels/strided.h"

void mn__strided_packed(void *buf, const mn__strided_t *shape, int64_t begin, mn__strided_t *out) {
  memset(out, 0, sizeof *out);
  out->data = buf;
  out->ndim = shape->ndim;
  int64_t acc = 1;
  for (int d = shape->ndim - 1; d >= 0; d--) {
    out->sizes[d] = shape->sizes[d];
    out->strides[d] = acc;
    acc *= shape->sizes[d] > 1 ? shape->sizes[d] : 1;
  }
  out->origin = begin;
}

/* The common shape in row-major order, innermost first, size-1 dims dropped
 * and dims merged where both operands allow it: the planner's first step. */
typedef struct coalesced {
  int n;
  int64_t size[MN_MAX_DIMS];
  int64_t sd[MN_MAX_DIMS], ss[MN_MAX_DIMS]; /* dst and src strides */
} coalesced;

static void coalesce(const mn__strided_t *dst, const mn__strided_t *src, coalesced *c) {
  c->n = mn__plan_dims(dst, src, false, c->size, c->sd, c->ss);
}

#define MN__ROW_CASE(N)                                                         \
  case N:                                                                       \
    for (int64_t i = 0; i < run; i++) memcpy(d + i * dstep, s + i * sstep, N); \
    return;

void mn__copy_row(char *d, int64_t dstep, const char *s, int64_t sstep, int64_t run, size_t item) {
  if (dstep == (int64_t)item && sstep == (int64_t)item) {
    memcpy(d, s, (size_t)run * item);
    return;
  }
  switch (item) {
    MN__ROW_CASE(1)
    MN__ROW_CASE(2)
    MN__ROW_CASE(4)
    MN__ROW_CASE(8)
    MN__ROW_CASE(16)
    default:
      for (int64_t i = 0; i < run; i++) memcpy(d + i * dstep, s + i * sstep, item);
  }
}

void mn__cpu_strided_copy(const mn__strided_t *dst, const mn__strided_t *src, size_t itemsize, int64_t begin,
                          int64_t end) {
  if (begin >= end) return;
  coalesced c;
  coalesce(dst, src, &c);
  int64_t idx[MN_MAX_DIMS];
  int64_t rest = begin, od = -dst->origin, os = -src->origin; /* element offsets of the current position */
  for (int k = 0; k < c.n; k++) {
    idx[k] = rest % c.size[k];
    rest /= c.size[k];
    od += idx[k] * c.sd[k];
    os += idx[k] * c.ss[k];
  }
  int64_t item = (int64_t)itemsize, left = end - begin;
  for (;;) {
    int64_t run = c.size[0] - idx[0];
    if (run > left) run = left;
    mn__copy_row(dst->data + od * item, c.sd[0] * item, src->data + os * item, c.ss[0] * item, run, itemsize);
    left -= run;
    if (left == 0) return;
    /* The row is done: back to its start, then carry into the outer dims. */
    od -= idx[0] * c.sd[0];
    os -= idx[0] * c.ss[0];
    idx[0] = 0;
    for (int k = 1; k < c.n; k++) {
      idx[k]++;
      od += c.sd[k];
      os += c.ss[k];
      if (idx[k] < c.size[k]) break;
      od -= c.size[k] * c.sd[k];
      os -= c.size[k] * c.ss[k];
      idx[k] = 0;
    }
  }
}
