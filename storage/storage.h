/* storage/storage.h: what the floors above the storage (views: view.c)
 * need of storage.c beyond the public API: a view's hold on its storage.
 * Internal; thread-safe (atomic counts). */
#ifndef MNEMO_STORAGE_STORAGE_H
#define MNEMO_STORAGE_STORAGE_H

#include "mnemo/mnemo.h"

/* A view's hold on its storage (storage.c): a reference, and one count among
 * the storage's live views, which mn_storage_resize refuses to move. Every
 * view takes its storage with attach and gives it back with detach. */
mn_storage_t *mn__storage_view_attach(mn_storage_t *s);
void mn__storage_view_detach(mn_storage_t *s);

#endif /* MNEMO_STORAGE_STORAGE_H */
