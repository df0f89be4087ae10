/* mnemo/status.h: the status codes every fallible mnemo call returns, and the
 * thread-local message that says which call failed and which values were wrong. */
#ifndef MNEMO_STATUS_H
#define MNEMO_STATUS_H

#include "mnemo/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row per status: symbol, stable value, short name, meaning.
 * Values are never renumbered; new codes go at the end. */
#define MN_STATUS_MAP(X)                                                                        \
  X(MN_OK, 0, "ok", "success")                                                                  \
  X(MN_ERR_INVALID_ARGUMENT, 1, "invalid_argument", "an argument is invalid")                   \
  X(MN_ERR_OUT_OF_MEMORY, 2, "out_of_memory", "out of memory")                                  \
  X(MN_ERR_DEVICE, 3, "device_error", "the device or its driver failed")                        \
  X(MN_ERR_NOT_SUPPORTED, 4, "not_supported", "not supported by this build or device")          \
  X(MN_ERR_IO, 5, "io_error", "a file or I/O operation failed")                                 \
  X(MN_ERR_NO_DEVICE, 6, "no_device", "no such device")                                         \
  X(MN_ERR_INVALID_STATE, 7, "invalid_state", "the object is in the wrong state for this call") \
  X(MN_ERR_NOT_FOUND, 8, "not_found", "not found")                                              \
  X(MN_ERR_FORMAT, 9, "format_error", "malformed or corrupt input data")                        \
  X(MN_ERR_OVERFLOW, 10, "overflow", "a size or index computation overflows")                   \
  X(MN_ERR_INTERNAL, 11, "internal_error", "an internal invariant failed")                      \
  X(MN_ERR_BUSY, 12, "busy", "the object is still in use and cannot be destroyed yet")

typedef enum mn_status {
#define MN__STATUS_ENUM(sym, val, name, text) sym = val,
  MN_STATUS_MAP(MN__STATUS_ENUM)
#undef MN__STATUS_ENUM
} mn_status;

/* "invalid_argument" etc.; "unknown" for values outside the table. */
MN_API const char *mn_status_name(mn_status status);
/* A one-line English description of the status. */
MN_API const char *mn_status_string(mn_status status);

/* The message of the last failed mnemo call on this thread, naming the call and
 * the offending values ("mn_storage_create: nbytes=... exceeds ..."). Empty
 * string when no call has failed. Valid until the next mnemo call on this thread. */
MN_API const char *mn_last_error(void);
/* The status of the last failed call on this thread (MN_OK if none). */
MN_API MN_NODISCARD mn_status mn_last_status(void);
/* Forget the last error on this thread. */
MN_API void mn_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_STATUS_H */
