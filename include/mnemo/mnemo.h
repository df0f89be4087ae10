/* mnemo/mnemo.h: the umbrella header, with the version macros; include this
 * one header to use the whole public API. */
#ifndef MNEMO_MNEMO_H
#define MNEMO_MNEMO_H

#define MNEMO_VERSION_MAJOR 0
#define MNEMO_VERSION_MINOR 1
#define MNEMO_VERSION_PATCH 0
#define MNEMO_VERSION_STRING "0.1.0"

#include "mnemo/status.h"
#include "mnemo/dtype.h"
#include "mnemo/env.h"
#include "mnemo/device.h"
#include "mnemo/sim.h"
#include "mnemo/graph.h"
#include "mnemo/allocator.h"
#include "mnemo/caching.h"
#include "mnemo/graph.h"
#include "mnemo/mempool.h"
#include "mnemo/share.h"
#include "mnemo/adaptors.h"
#include "mnemo/pluggable.h"
#include "mnemo/pinned.h"
#include "mnemo/storage.h"
#include "mnemo/view.h"
#include "mnemo/index.h"
#include "mnemo/quantized.h"
#include "mnemo/copy.h"
#include "mnemo/kernels.h"
#include "mnemo/trace.h"
#include "mnemo/serialize.h"
#include "mnemo/profiling.h"
/* DLPack interchange of views */
#include "mnemo/dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string at run time ("0.1.0"). */
MN_API const char *mn_version(void);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_MNEMO_H */
