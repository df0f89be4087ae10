/* runtime/ptrmap.h: mn__addrmap, an internal open-addressing hash map from a non-zero
 * address to (size, data), used by the CPU backend (its live host allocations),
 * the caching allocator, the naive allocator, the adaptors and the
 * stream-ordered allocator to know their live pointers. Not thread-safe: the owner holds its own lock. */
#ifndef MNEMO_RUNTIME_PTRMAP_H
#define MNEMO_RUNTIME_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/status.h"
#include "runtime/debug.h"

/* One entry; key 0 marks an empty slot, so NULL is never a key. */
typedef struct mn__addrmap_entry_s {
  uintptr_t key;
  size_t size;  /* bytes, as the owner defines them */
  void *data;   /* owner's payload (may be NULL) */
} mn__addrmap_entry_t;

/* Linear probing with backward-shift deletion (no tombstones). The table only
 * grows: removing never allocates, and re-inserting an entry just removed
 * fails only if the host is out of memory and the table is full. */
typedef struct mn__addrmap_s {
  mn__addrmap_entry_t *slots; /* cap slots, or NULL while empty */
  size_t cap;                /* 0 or a power of two */
  size_t count;
  unsigned shift;            /* 64 - log2(cap) while cap > 0: mn__addrmap_slot's shift */
} mn__addrmap_t;

/* Fibonacci hashing: the top log2(cap) bits of the product, the best mixed
 * ones (aligned addresses differ only in their middle bits). */
static inline size_t mn__addrmap_slot(uintptr_t key, size_t cap) {
  uint64_t h = (uint64_t)key * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> (64 - __builtin_ctzll((unsigned long long)cap)));
}
/* The same for a map's table (its shift kept: no count of zeros per call). */
static inline size_t mn__addrmap_home(const struct mn__addrmap_s *m, uintptr_t key) {
  return (size_t)(((uint64_t)key * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift);
}

/* Places an entry known to be absent into a table with a free slot. */
static inline void mn__addrmap_place(mn__addrmap_entry_t *slots, size_t cap, mn__addrmap_entry_t e) {
  size_t i = mn__addrmap_slot(e.key, cap);
  while (slots[i].key) i = (i + 1) & (cap - 1);
  slots[i] = e;
}

mn_status mn__addrmap_reserve_slow(mn__addrmap_t *m, size_t extra);

/* A zeroed struct is a valid empty map; init just says so. */
void mn__addrmap_init(mn__addrmap_t *m);
/* Frees the table (not the payloads); the map is empty and usable again. */
void mn__addrmap_fini(mn__addrmap_t *m);
/* Adds key -> (size, data). MN_ERR_INVALID_ARGUMENT when key is 0 or already
 * present; MN_ERR_OUT_OF_MEMORY when the table cannot grow. */
mn_status mn__addrmap_insert(mn__addrmap_t *m, uintptr_t key, size_t size, void *data);
/* Makes room for `extra` more entries, so that as many mn__addrmap_put calls
 * cannot fail; MN_ERR_OUT_OF_MEMORY when the table cannot grow. */
static inline mn_status mn__addrmap_reserve(mn__addrmap_t *m, size_t extra) {
  return (m->count + extra) * 4 <= m->cap * 3 ? MN_OK : mn__addrmap_reserve_slow(m, extra);
}
/* The entry for key, or NULL. Valid until the next insert or remove. */
static inline mn__addrmap_entry_t *mn__addrmap_find(const mn__addrmap_t *m, uintptr_t key) {
  if (key == 0 || m->cap == 0) return NULL;
  for (size_t i = mn__addrmap_home(m, key);; i = (i + 1) & (m->cap - 1)) {
    if (m->slots[i].key == key) return &m->slots[i];
    if (m->slots[i].key == 0) return NULL;
  }
}
/* Adds key -> (size, data) without checks. pre: room reserved, key non-zero and absent. */
static inline void mn__addrmap_put(mn__addrmap_t *m, uintptr_t key, size_t size, void *data) {
  MN__ASSERT(key != 0 && (m->count + 1) * 4 <= m->cap * 3, "put of %#lx without a reserved slot (%zu of %zu)",
             (unsigned long)key, m->count, m->cap);
  MN__ASSERT(mn__addrmap_find(m, key) == NULL, "put of %#lx, which is present", (unsigned long)key);
  size_t i = mn__addrmap_home(m, key);
  while (m->slots[i].key) i = (i + 1) & (m->cap - 1);
  m->slots[i] = (mn__addrmap_entry_t){.key = key, .size = size, .data = data};
  m->count++;
}
void mn__addrmap_remove_entry_slow(mn__addrmap_t *m, mn__addrmap_entry_t *e);
/* Removes the entry e that mn__addrmap_find returned (no insert or remove
 * since). Inline when the next slot is empty (no probe run to shift back). */
static inline void mn__addrmap_remove_entry(mn__addrmap_t *m, mn__addrmap_entry_t *e) {
  size_t next = ((size_t)(e - m->slots) + 1) & (m->cap - 1);
  if (m->slots[next].key) {
    mn__addrmap_remove_entry_slow(m, e);
    return;
  }
  e->key = 0;
  e->size = 0;
  e->data = NULL;
  m->count--;
}
/* Removes key, copying its entry to *out (optional). false when absent. */
bool mn__addrmap_remove(mn__addrmap_t *m, uintptr_t key, mn__addrmap_entry_t *out);
/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].key) ... */

#endif /* MNEMO_RUNTIME_PTRMAP_H */
