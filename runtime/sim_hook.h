/* runtime/sim_hook.h: what the SIM backend lets the layers above it hook
 * into (mn_sim_configure asks them to let go of the devices); thread-safe. */
#ifndef MNEMO_RUNTIME_SIM_HOOK_H
#define MNEMO_RUNTIME_SIM_HOOK_H

#include <stdbool.h>

#include "mnemo/status.h"

/* Called by mn_sim_configure with before = true ahead of its idle check: the
 * hook gives back what it holds on the SIM devices, or refuses with a status
 * and message (then nothing is reconfigured); and with before = false once the
 * new configuration is in place, to re-read the devices. `func` names the
 * public call for messages. */
typedef mn_status (*mn__sim_configure_hook_fn)(bool before, const char *func);
/* Sets the one hook (the allocator layer's default-allocator table). */
void mn__sim_set_configure_hook(mn__sim_configure_hook_fn fn);

#endif /* MNEMO_RUNTIME_SIM_HOOK_H */
