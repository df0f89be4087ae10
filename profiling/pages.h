/* profiling/pages.h: what the two report builders (report.c: one trace; diff.c:
 * two traces compared) share: handing their texts over as one mn_report_t, and
 * telling the caller what they are doing. No state; any thread. */
#ifndef MNEMO_PROFILING_PAGES_H
#define MNEMO_PROFILING_PAGES_H

#include "mnemo/profiling.h"
#include "mnemo/sim.h"
#include "runtime/error.h"
#include "runtime/strbuf.h"

/* Makes *out from the builder's texts, taking them over (each buffer is empty
 * afterwards, on success and on failure; page NULL: a report without one). The
 * first buffer that ran out of host memory, or no memory for the report
 * itself: MN_ERR_OUT_OF_MEMORY under `func`, everything freed, *out untouched. */
mn_status mn__report_finish(const char *func, mn__sbuf_t *page, mn__sbuf_t *summary, mn__sbuf_t *json,
                            mn__sbuf_t *notes, mn_report_t **out);

/* Ends a builder's use of the SIM device: puts its configuration back as
 * `found` (the one read when the call began), only where it changed (a
 * reconfiguration is refused while the caller holds SIM memory). Returns st
 * with its message kept when st failed; else MN_OK, or the restore's failure
 * under `func` ("restoring the SIM device: <message>"). */
mn_status mn__report_sim_restore(const char *func, const mn_sim_config_t *found, mn_status st);

/* Calls fn(user, text) with the formatted text (cut at 511 bytes); nothing
 * when fn is NULL. */
void mn__report_progress(mn_report_progress_fn fn, void *user, const char *fmt, ...) MN__PRINTF(3, 4);

/* Checks one trace's report options as mn_report_build does before it reads the
 * trace (report.c): the configs parse, at most MN_REPORT_MAX_CONFIGS of them,
 * trace_device in -1..1000, the capacity accepted by the SIM device (tried, then
 * the configuration as found put back). MN_OK, or MN_ERR_INVALID_ARGUMENT with a
 * message under mn_report_build (a failure reading or restoring the SIM device
 * as it came). The CLI checks its options so before it imports a snapshot. */
mn_status mn__report_check_options(const mn_report_options_t *o);

#endif /* MNEMO_PROFILING_PAGES_H */
