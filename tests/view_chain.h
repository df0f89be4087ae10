/* tests/view_chain.h: runs one line of the view-chain language (docs/VIEW_CHAINS.md)
 * and formats its result as one JSON line; shared by view_driver, fuzz_views and tests. */
#ifndef MNEMO_TESTS_VIEW_CHAIN_H
#define MNEMO_TESTS_VIEW_CHAIN_H

#include "mnemo/mnemo.h"

/* Runs `line` with creation ops on `dev`. Writes the JSON object (no newline)
 * into a malloc'ed *json (the caller frees it). Returns MN_OK when the chain
 * ran, MN_ERR_FORMAT for a line that does not parse, the failing status of an
 * operation that refused (the JSON then holds {"error": message}), and
 * MN_ERR_INTERNAL when a view broke its invariants (mn_view_check) or a
 * refusal came without a message: a bug. */
mn_status mn_chain_run(const char *line, mn_device_t dev, char **json);

#endif /* MNEMO_TESTS_VIEW_CHAIN_H */
