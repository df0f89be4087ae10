/* profiling/idtable.h: the pieces the interning tables of the profiling layer share
 * (a trace's frames and stacks in trace.c, the recorder's raw stacks in recorder.c):
 * arrays that grow by doubling, and an open-addressing table of ids (uint32, 0 =
 * empty, linear probing over a power-of-two table kept at most half full) whose
 * hashes live beside the interned items. The caller compares items itself while it
 * probes. No state of their own; each table has one owner (or its owner's lock). */
#ifndef MNEMO_PROFILING_IDTABLE_H
#define MNEMO_PROFILING_IDTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Grows a[] (elem bytes each, *cap slots) to hold `need`; false (a and *cap
 * unchanged) for want of memory or on overflow. */
bool mn__array_grow(void **a, size_t *cap, size_t need, size_t elem);

/* Makes room for one more id in a table holding `used` ids (hashes[id - 1]
 * places each id already in when the table is rebuilt larger); false (the
 * table unchanged) for want of memory. */
bool mn__idtable_reserve(uint32_t **slots, size_t *cap, size_t used, const uint64_t *hashes);

/* Puts id at hash h's first empty slot (after mn__idtable_reserve). */
void mn__idtable_put(uint32_t *slots, size_t cap, uint64_t h, uint32_t id);

#endif /* MNEMO_PROFILING_IDTABLE_H */
