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
 * streamed (no copy of it in memory: CPU storages are written from where
 * they are, device ones through a bounded staging buffer) under a temporary
 * name and renamed into place. */
MN_API MN_NODISCARD mn_status mn_save(const char *path, size_t count, const char *const *names,
                                      const mn_view_t *const *views);
/* The same bytes into a malloc'd buffer (*data; the caller frees it). */
MN_API MN_NODISCARD mn_status mn_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views,
                                             void **data, size_t *size);
/* Loads a file onto `dev`: views that shared a storage share one again. On
 * the CPU the storages are the file's bytes themselves, mapped privately
 * (MN_LOAD_MAP below: no copy; writes stay in this process); elsewhere, or
 * with MN_LOAD_COPY, copies in the device's default allocator. Every
 * checksum is verified (which reads every byte once) unless
 * MN_LOAD_NO_VERIFY. A truncated, corrupt (checksums) or malformed file is
 * MN_ERR_FORMAT with a message; a missing one MN_ERR_NOT_FOUND. *out
 * untouched on failure. */
MN_API MN_NODISCARD mn_status mn_load(const char *path, mn_device_t dev, mn_named_views_t **out);

/* Flags of mn_load_ex and mn_safetensors_load_ex (values are stable; 0 is
 * what mn_load and mn_safetensors_load do). */
enum {
  /* CPU: each storage whose bytes in the file are aligned for its data (all
   * of a mnemo file's; a safetensors tensor at a multiple of its item size)
   * is a MAP_PRIVATE, read-write mapping of the file, kept until the last
   * storage over it is released (MN_STORAGE_FOREIGN: not resizable); the
   * others are copies. Writes copy the page they touch and never reach the
   * file. The file must not shrink while such storages live (touching a page
   * past its new end raises SIGBUS, as for any mapping; mn_save and
   * mn_safetensors_save replace files by renaming, never in place), and
   * bytes not yet written show changes others make to the file in place.
   * The default on the CPU; ignored on other devices. */
  MN_LOAD_MAP = 1u << 0,
  /* Copies in the device's default allocator (read straight into them on
   * the CPU, through a bounded staging buffer into device memory): storages
   * independent of the file, resizable. Excludes MN_LOAD_MAP. */
  MN_LOAD_COPY = 1u << 1,
  /* mnemo files: the storages' checksums are not computed (the header's
   * still is), so a mapped load touches no page of the data: a corrupt byte
   * goes unnoticed. No effect on safetensors files, which carry none. */
  MN_LOAD_NO_VERIFY = 1u << 2,
  MN_LOAD_FLAGS_ALL = (1u << 3) - 1
};
/* mn_load with MN_LOAD_* flags (MN_ERR_INVALID_ARGUMENT for unknown bits
 * or MN_LOAD_MAP | MN_LOAD_COPY). */
MN_API MN_NODISCARD mn_status mn_load_ex(const char *path, mn_device_t dev, unsigned flags, mn_named_views_t **out);
MN_API MN_NODISCARD mn_status mn_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out);

/* ---- safetensors ------------------------------------------------------------------
 * Writes views that do not alias (two views whose byte ranges in one storage
 * overlap are refused), each stored contiguously whatever its layout, with
 * optional "__metadata__" string pairs. complex128 has no safetensors dtype
 * (MN_ERR_NOT_SUPPORTED). */
MN_API MN_NODISCARD mn_status mn_safetensors_save(const char *path, size_t count, const char *const *names,
                                                  const mn_view_t *const *views, size_t nmeta,
                                                  const char *const *meta_keys, const char *const *meta_values);
MN_API MN_NODISCARD mn_status mn_safetensors_save_buffer(size_t count, const char *const *names,
                                                         const mn_view_t *const *views, size_t nmeta,
                                                         const char *const *meta_keys, const char *const *meta_values,
                                                         void **data, size_t *size);
/* Reads a safetensors file onto `dev`: one contiguous view (and storage) per
 * tensor, in file order of data offsets; on the CPU the storages map the
 * file (MN_LOAD_MAP above: no copy), elsewhere they are copies. The header
 * is checked strictly:
 * MN_ERR_FORMAT for bad JSON, unknown dtypes, shapes that do not match their
 * byte ranges, ranges out of the buffer, overlapping or leaving holes, and
 * header lengths over 100,000,000 bytes or past the end of the file. */
MN_API MN_NODISCARD mn_status mn_safetensors_load(const char *path, mn_device_t dev, mn_named_views_t **out);
/* mn_safetensors_load with MN_LOAD_* flags (as mn_load_ex). */
MN_API MN_NODISCARD mn_status mn_safetensors_load_ex(const char *path, mn_device_t dev, unsigned flags,
                                                     mn_named_views_t **out);
MN_API MN_NODISCARD mn_status mn_safetensors_load_buffer(const void *data, size_t size, mn_device_t dev,
                                                         mn_named_views_t **out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_SERIALIZE_H */
