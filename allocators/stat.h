/* allocators/stat.h: updates of one mn_stat_t counter {current, peak,
 * allocated, freed}, shared by every allocator that keeps statistics; callers lock. */
#ifndef MNEMO_ALLOCATORS_STAT_H
#define MNEMO_ALLOCATORS_STAT_H

#include "mnemo/allocator.h"

/* On the alloc/free fast paths: inline. */
static inline void mn__stat_inc(mn_stat_t *s, int64_t amount) {
  s->current += amount;
  if (s->current > s->peak) s->peak = s->current;
  s->allocated += amount;
}

static inline void mn__stat_dec(mn_stat_t *s, int64_t amount) {
  s->current -= amount;
  s->freed += amount;
}

#endif /* MNEMO_ALLOCATORS_STAT_H */
