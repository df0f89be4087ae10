/* runtime/random.h: 64 unpredictable bits for what must not be guessed from
 * outside (the name-set hash key, temporary file names): getrandom(), or
 * where that has nothing to give, the clock, the pid, addresses and a counter
 * mixed. Not for simulation or tests (those use seeded generators). Any thread. */
#ifndef MNEMO_RUNTIME_RANDOM_H
#define MNEMO_RUNTIME_RANDOM_H

#include <stdint.h>

uint64_t mn__random_u64(void);

#endif /* MNEMO_RUNTIME_RANDOM_H */
