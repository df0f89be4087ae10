/* allocators/allocator_internal.h: what the dispatch (allocators/allocator.c)
 * shares with the files of allocators/ above it: how an optional vtable slot
 * is read, and the vtable check every public entry point makes. Thread-safe
 * (both only read the vtable). */
#ifndef MNEMO_ALLOCATORS_ALLOCATOR_INTERNAL_H
#define MNEMO_ALLOCATORS_ALLOCATOR_INTERNAL_H

#include <stddef.h>

#include "mnemo/mnemo.h"

/* An optional slot of vt, or NULL where vt (compiled against an older, shorter
 * header) ends before it. Read the required slots (name, alloc, free) directly
 * once mn__allocator_vtable_check has passed. */
#define MN__SLOT(vt, slot) \
  ((vt)->size >= offsetof(mn_allocator_vtable_t, slot) + sizeof((vt)->slot) ? (vt)->slot : NULL)

/* MN_OK when vt can be dispatched (a size that covers the required slots, a
 * version this library knows, name, alloc and free set); else
 * MN_ERR_INVALID_ARGUMENT with a message naming func and the fault. */
mn_status mn__allocator_vtable_check(const char *func, const mn_allocator_vtable_t *vt);

/* Marks vt (a valid vtable of this library, static and const, whose alloc
 * writes *out only on success) as the one the dispatch calls without its
 * per-call slot checks. One at a time: the caching allocator's, the default. */
void mn__allocator_vtable_trust(const mn_allocator_vtable_t *vt);

#endif /* MNEMO_ALLOCATORS_ALLOCATOR_INTERNAL_H */
