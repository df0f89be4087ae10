/* profiling/report.c: the report page of one trace (mn_report_build). Being
 * moved here from tools/cmd_report.c. */
#include "profiling/pages.h"

mn_status mn_report_build(const mn_trace_t *trace, const mn_report_options_t *options, mn_report_t **out) {
  (void)trace;
  (void)options;
  (void)out;
  return mn__error(MN_ERR_NOT_SUPPORTED, "mn_report_build", "not built yet");
}
