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
} mn__addrmap_t;

/* A zeroed struct is a valid empty map; init just says so. */
void mn__addrmap_init(mn__addrmap_t *m);
/* Frees the table (not the payloads); the map is empty and usable again. */
void mn__addrmap_fini(mn__addrmap_t *m);
/* Adds key -> (size, data). MN_ERR_INVALID_ARGUMENT when key is 0 or already
 * present; MN_ERR_OUT_OF_MEMORY when the table cannot grow. */
mn_status mn__addrmap_insert(mn__addrmap_t *m, uintptr_t key, size_t size, void *data);
/* Makes room for `extra` more entries, so that as many mn__addrmap_put calls
 * cannot fail; MN_ERR_OUT_OF_MEMORY when the table cannot grow. */
mn_status mn__addrmap_reserve(mn__addrmap_t *m, size_t extra);
/* Adds key -> (size, data) without checks. pre: room reserved, key non-zero and absent. */
void mn__addrmap_put(mn__addrmap_t *m, uintptr_t key, size_t size, void *data);
/* The entry for key, or NULL. Valid until the next insert or remove. */
mn__addrmap_entry_t *mn__addrmap_find(const mn__addrmap_t *m, uintptr_t key);
/* Removes key, copying its entry to *out (optional). false when absent. */
bool mn__addrmap_remove(mn__addrmap_t *m, uintptr_t key, mn__addrmap_entry_t *out);
/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].key) ... */

#endif /* MNEMO_RUNTIME_PTRMAP_H */
