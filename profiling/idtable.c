/* profiling/idtable.c: growing arrays and the open-addressing id tables of the
 * profiling layer's interning (profiling/idtable.h). No state; the caller owns
 * each table. */
#include "profiling/idtable.h"

#include <stdlib.h>

#include "runtime/hostmem.h"

bool mn__array_grow(void **a, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return false;
    ncap *= 2;
  }
  if (ncap > SIZE_MAX / elem) return false;
  void *na = mn__realloc(*a, ncap * elem);
  if (!na) return false;
  *a = na;
  *cap = ncap;
  return true;
}

bool mn__idtable_reserve(uint32_t **slots, size_t *cap, size_t used, const uint64_t *hashes) {
  if ((used + 1) * 2 <= *cap) return true;
  size_t ncap = *cap ? *cap * 2 : 64;
  uint32_t *ns = mn__calloc(ncap, sizeof *ns);
  if (!ns) return false;
  for (size_t i = 0; i < *cap; i++) {
    uint32_t id = (*slots)[i];
    if (id) mn__idtable_put(ns, ncap, hashes[id - 1], id);
  }
  free(*slots);
  *slots = ns;
  *cap = ncap;
  return true;
}

void mn__idtable_put(uint32_t *slots, size_t cap, uint64_t h, uint32_t id) {
  size_t k = (size_t)h & (cap - 1);
  while (slots[k]) k = (k + 1) & (cap - 1);
  slots[k] = id;
}
