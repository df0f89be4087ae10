/* profiling/diff.c: two traces compared, as text, JSON and a page
 * (mn_diff_build). Being moved here from tools/cmd_diff.c. */
#include "profiling/pages.h"

mn_status mn_diff_build(const mn_trace_t *a, const mn_trace_t *b, const mn_diff_options_t *options, mn_report_t **out) {
  (void)a;
  (void)b;
  (void)options;
  (void)out;
  return mn__error(MN_ERR_NOT_SUPPORTED, "mn_diff_build", "not built yet");
}
