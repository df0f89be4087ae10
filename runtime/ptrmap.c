/* runtime/ptrmap.c: the address -> (size, data) hash map of the CPU backend,
 * the allocators and the adaptors (open addressing, linear probing).
 * Not thread-safe: callers lock. */
#include <stdlib.h>
#include <string.h>

#include "runtime/ptrmap.h"
#include "runtime/debug.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

#define MN__ADDRMAP_MIN_CAP 64

void mn__addrmap_init(mn__addrmap_t *m) { memset(m, 0, sizeof *m); }

void mn__addrmap_fini(mn__addrmap_t *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

/* Doubles the table (false: out of host memory, the map unchanged). */
static bool addrmap_grow(mn__addrmap_t *m) {
  size_t cap = m->cap ? m->cap * 2 : MN__ADDRMAP_MIN_CAP;
  if (cap < m->cap || cap > SIZE_MAX / sizeof *m->slots) return false;
  /* on cache lines of its own: maps kept per thread (the caching allocator's
   * lanes) share no line through their tables */
  size_t bytes = (cap * sizeof(mn__addrmap_entry_t) + 63) / 64 * 64;
  mn__addrmap_entry_t *slots = mn__aligned_alloc(64, bytes);
  if (!slots) return false;
  memset(slots, 0, bytes);
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key) mn__addrmap_place(slots, cap, m->slots[i]);
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
  return true;
}

mn_status mn__addrmap_reserve_slow(mn__addrmap_t *m, size_t extra) {
  while ((m->count + extra) * 4 > m->cap * 3)
    if (!addrmap_grow(m))
      return mn__error(MN_ERR_OUT_OF_MEMORY, "mn__addrmap_reserve", "out of host memory for %zu tracked pointers",
                       m->count + extra);
  return MN_OK;
}

mn_status mn__addrmap_insert(mn__addrmap_t *m, uintptr_t key, size_t size, void *data) {
  if (key == 0) return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "key must not be 0");
  if (mn__addrmap_find(m, key))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "address %p is already present", (void *)key);
  /* Keep the load at most 3/4; when growing fails, a table with at least two
   * free slots still takes the entry (one must stay free to end probes). */
  if ((m->count + 1) * 4 > m->cap * 3 && !addrmap_grow(m) && m->count + 2 > m->cap)
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory for %zu tracked pointers",
                     m->count + 1);
  mn__addrmap_place(m->slots, m->cap, (mn__addrmap_entry_t){.key = key, .size = size, .data = data});
  m->count++;
  return MN_OK;
}

bool mn__addrmap_remove(mn__addrmap_t *m, uintptr_t key, mn__addrmap_entry_t *out) {
  mn__addrmap_entry_t *e = mn__addrmap_find(m, key);
  if (!e) return false;
  if (out) *out = *e;
  mn__addrmap_remove_entry(m, e);
  return true;
}

void mn__addrmap_remove_entry_slow(mn__addrmap_t *m, mn__addrmap_entry_t *e) {
  size_t mask = m->cap - 1, hole = (size_t)(e - m->slots);
  /* Backward shift: move later entries of the probe run into the hole when
   * their home slot does not lie cyclically in (hole, j]. */
  for (size_t j = (hole + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
    size_t home = mn__addrmap_home(m, m->slots[j].key);
    bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    m->slots[hole] = m->slots[j];
    hole = j;
  }
  m->slots[hole] = (mn__addrmap_entry_t){0};
  m->count--;
}
