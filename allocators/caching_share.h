/* allocators/caching_share.h: opening a shared caching-allocator block in this
 * process (the importer's side of mnemo/share.h), for the storage layer.
 * Thread-safe. */
#ifndef MNEMO_ALLOCATORS_CACHING_SHARE_H
#define MNEMO_ALLOCATORS_CACHING_SHARE_H

#include "mnemo/mnemo.h"

typedef struct mn__share_import_s mn__share_import_t;

/* Checks h (its reference file sealed, every field what was exported),
 * holds a read lock on the export's reference file and maps its block on
 * dev (each piece sealed); *data: the block's first byte. Errors as
 * mn_storage_from_share_handle (reported under `func`); nothing is left
 * behind on failure. */
mn_status mn__share_open(const char *func, mn_device_t dev, const mn_share_handle_t *h, mn__share_import_t **out,
                         void **data);
/* Unmaps the block, then drops the lock (the exporter may reuse it). */
void mn__share_close(mn__share_import_t *imp);

#endif /* MNEMO_ALLOCATORS_CACHING_SHARE_H */
