/* allocators/ptrmap.h: the pointer map moved down to runtime/ptrmap.h (the CPU
 * backend uses it too); this name stays for the code that includes it. */
#ifndef MNEMO_ALLOCATORS_ADDRMAP_H
#define MNEMO_ALLOCATORS_ADDRMAP_H
#include "runtime/ptrmap.h"
#endif /* MNEMO_ALLOCATORS_ADDRMAP_H */
