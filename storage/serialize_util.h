/* storage/serialize_util.h: internals the two file formats share (growable
 * byte buffer, atomic file write, whole-file load, result building). */
#ifndef MNEMO_STORAGE_SERIALIZE_UTIL_H
#define MNEMO_STORAGE_SERIALIZE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/serialize.h"
#include "mnemo/storage.h"

/* A growable byte buffer; `failed` records an allocation failure (every
 * later put is ignored). */
typedef struct mn__buf_s {
  unsigned char *data;
  size_t len, cap;
  bool failed;
} mn__buf_t;

void mn__buf_put(mn__buf_t *b, const void *p, size_t n);
void mn__buf_zeros(mn__buf_t *b, size_t n);
void mn__buf_u16(mn__buf_t *b, uint16_t v);
void mn__buf_u32(mn__buf_t *b, uint32_t v);
void mn__buf_u64(mn__buf_t *b, uint64_t v);
uint32_t mn__le32(const unsigned char *p);
uint64_t mn__le64(const unsigned char *p);


/* A loader of one format from memory (mn_load_buffer, mn_safetensors_load_buffer). */
typedef mn_status (*mn__load_buffer_fn)(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out);
/* Reads `path` (a regular file, runtime/fileio.h) into a heap buffer and hands
 * it to `load`: the bytes validated are the bytes used, whatever happens to
 * the file meanwhile (no mapping that could shrink: no SIGBUS). Errors are
 * prefixed with func. */
mn_status mn__load_file(const char *func, const char *path, mn_device_t dev, mn__load_buffer_fn load,
                        mn_named_views_t **out);

/* Refuses NULL, empty or duplicate names and NULL views. */
mn_status mn__check_names(const char *func, size_t count, const char *const *names, const mn_view_t *const *views);
/* The storage's bytes readable on the host: *bytes points into the storage
 * (CPU) or into *owned, a blocking copy the caller frees. */
mn_status mn__storage_host_bytes(const char *func, const mn_storage_t *s, const unsigned char **bytes,
                                 unsigned char **owned);
/* An empty result with room for `count` views (zeroed). */
mn_status mn__named_views_new(const char *func, size_t count, mn_named_views_t **out);
/* Ends a load: on MN_OK hands res to *out, else frees it; returns st. */
mn_status mn__named_views_finish(mn_status st, mn_named_views_t *res, mn_named_views_t **out);

#endif /* MNEMO_STORAGE_SERIALIZE_UTIL_H */
