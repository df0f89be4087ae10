/* mnemo/export.h: MN_API, the mark on every public function of libmnemo, and
 * MN_NODISCARD, the must-use mark on those that return mn_status. The
 * library is built with hidden visibility, so only what carries MN_API is
 * exported from libmnemo.so (tests/test_abi.sh checks both directions).
 * Macros only: no state, nothing to synchronize. */
#ifndef MNEMO_EXPORT_H
#define MNEMO_EXPORT_H

/* Default (exported) visibility on GCC and Clang; nothing elsewhere. Applies
 * to the static library too, where it is harmless. */
#if defined(__GNUC__) || defined(__clang__)
#define MN_API __attribute__((visibility("default")))
#else
#define MN_API
#endif

/* On every public function that returns mn_status: the compiler warns when a
 * caller drops the status. (GCC does not accept a (void) cast as "ignored on
 * purpose"; assign it, or test it.) */
#if defined(__GNUC__) || defined(__clang__)
#define MN_NODISCARD __attribute__((warn_unused_result))
#else
#define MN_NODISCARD
#endif

#endif /* MNEMO_EXPORT_H */
