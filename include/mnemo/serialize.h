/* mnemo/serialize.h: saving and loading sets of named views: mnemo's own
 * format (sharing kept, checksummed; docs/SAVE_FORMAT.md) and safetensors.
 * Every call is self-contained and thread-safe; loaders never trust the input. */
#ifndef MNEMO_SERIALIZE_H
#define MNEMO_SERIALIZE_H

#include <stddef.h>

#include "mnemo/device.h"
#include "mnemo/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a loader returns: count names and views (views[i] is named
 * names[i]; the result owns them), plus the safetensors "__metadata__"
 * string pairs (nmeta = 0 for mnemo files). */
typedef struct mn_named_views_s {
  size_t count;
  char **names;
  mn_view_t **views;
  size_t nmeta;
  char **meta_keys;
  char **meta_values;
} mn_named_views_t;

/* Destroys the views (dropping their storages' references) and the names. NULL is a no-op. */
MN_API void mn_named_views_free(mn_named_views_t *nv);
/* The view called `name`, borrowed; NULL when there is none. */
MN_API mn_view_t *mn_named_views_find(const mn_named_views_t *nv, const char *name);

/* ---- mnemo format (docs/SAVE_FORMAT.md) ---------------------------------------
 * Saves `count` views under unique, non-empty names. Every storage reached is
 * written once, whole, whatever its device (device memory is copied to the
 * host, blocking); views keep dtype, sizes, strides and offset. The file is
 * written under a temporary name and renamed into place. */
MN_API MN_NODISCARD mn_status mn_save(const char *path, size_t count, const char *const *names, const mn_view_t *const *views);
/* The same bytes into a malloc'd buffer (*data; the caller frees it). */
MN_API MN_NODISCARD mn_status mn_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views, void **data,
                         size_t *size);
/* Loads a file onto `dev` (storages from its default allocator): views that
 * shared a storage share one again. A truncated, corrupt (checksums) or
 * malformed file is MN_ERR_FORMAT with a message; a missing one
 * MN_ERR_NOT_FOUND. *out untouched on failure. */
MN_API MN_NODISCARD mn_status mn_load(const char *path, mn_device_t dev, mn_named_views_t **out);
MN_API MN_NODISCARD mn_status mn_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out);

/* ---- safetensors ------------------------------------------------------------------
 * Writes views that do not alias (two views whose byte ranges in one storage
 * overlap are refused), each stored contiguously whatever its layout, with
 * optional "__metadata__" string pairs. complex128 has no safetensors dtype
 * (MN_ERR_NOT_SUPPORTED). */
MN_API MN_NODISCARD mn_status mn_safetensors_save(const char *path, size_t count, const char *const *names,
                              const mn_view_t *const *views, size_t nmeta, const char *const *meta_keys,
                              const char *const *meta_values);
MN_API MN_NODISCARD mn_status mn_safetensors_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views,
                                     size_t nmeta, const char *const *meta_keys, const char *const *meta_values,
                                     void **data, size_t *size);
/* Reads a safetensors file onto `dev`: one contiguous view (and storage) per
 * tensor, in file order of data offsets. The header is checked strictly:
 * MN_ERR_FORMAT for bad JSON, unknown dtypes, shapes that do not match their
 * byte ranges, ranges out of the buffer, overlapping or leaving holes, and
 * header lengths over 100,000,000 bytes or past the end of the file. */
MN_API MN_NODISCARD mn_status mn_safetensors_load(const char *path, mn_device_t dev, mn_named_views_t **out);
MN_API MN_NODISCARD mn_status mn_safetensors_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_SERIALIZE_H */
