/* runtime/meta.h: the meta predicate: whether a device is the meta device
 * (sizes, no bytes), and PyTorch's refusal of a copy out of it. One
 * definition for every layer that refuses to read a meta operand (storages,
 * views, the copy engine, the save formats). Header-only, no state: any
 * thread. */
#ifndef MNEMO_RUNTIME_META_H
#define MNEMO_RUNTIME_META_H

#include <stdbool.h>

#include "mnemo/mnemo.h"

/* Whether dev is the meta device: it has sizes and no data. */
static inline bool mn__is_meta(mn_device_t dev) { return dev.type == MN_DEVICE_META; }

/* PyTorch's refusal of a copy out of a meta tensor (storages and views alike). */
#define MN__META_NO_DATA "Cannot copy out of meta tensor; no data!"

#endif /* MNEMO_RUNTIME_META_H */
