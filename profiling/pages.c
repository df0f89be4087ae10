/* profiling/pages.c: the report pages' public odds and ends (options'
 * defaults, writing a page, freeing a report) and what the two builders share
 * (profiling/pages.h). No state; any thread. */
#include "profiling/pages.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/fileio.h"
#include "runtime/hostmem.h"

mn_report_options_t mn_report_options_default(void) {
  mn_report_options_t o = {0};
  o.trace_device = -1;
  return o;
}

mn_diff_options_t mn_diff_options_default(void) {
  mn_diff_options_t o = {0};
  o.trace_device = -1;
  return o;
}

mn_status mn_report_write(const mn_report_t *report, const char *path) {
  if (!report || !path) return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_report_write", "NULL argument");
  if (!report->page)
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_report_write",
                     "the report has no page (a comparison built without mn_diff_options_t.page)");
  return mn__file_write_atomic("mn_report_write", path, report->page, report->page_size);
}

void mn_report_free(mn_report_t *report) {
  if (!report) return;
  free(report->page);
  free(report->summary);
  free(report->json);
  free(report->notes);
  free(report);
}

mn_status mn__report_finish(const char *func, mn__sbuf_t *page, mn__sbuf_t *summary, mn__sbuf_t *json,
                            mn__sbuf_t *notes, mn_report_t **out) {
  mn_report_t *r = mn__calloc(1, sizeof *r);
  bool oom = !r || (page && page->oom) || summary->oom || json->oom || notes->oom;
  if (r && !oom) {
    if (page) r->page = mn__sbuf_take(page, &r->page_size);
    r->summary = mn__sbuf_take(summary, NULL);
    r->json = mn__sbuf_take(json, NULL);
    r->notes = mn__sbuf_take(notes, NULL);
    oom = (page && !r->page) || !r->summary || !r->json || !r->notes;
  }
  if (page) mn__sbuf_free(page);
  mn__sbuf_free(summary);
  mn__sbuf_free(json);
  mn__sbuf_free(notes);
  if (oom) {
    mn_report_free(r);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "no host memory for the report's text");
  }
  *out = r;
  return MN_OK;
}

static bool same_sim_config(const mn_sim_config_t *x, const mn_sim_config_t *y) {
  return x->device_count == y->device_count && x->capacity == y->capacity && x->granularity == y->granularity &&
         x->eager == y->eager && x->no_peer_access == y->no_peer_access;
}

mn_status mn__report_sim_restore(const char *func, const mn_sim_config_t *found, mn_status st) {
  mn__error_saved_t saved;
  mn__error_save(&saved);
  mn_sim_config_t now;
  mn_status rs = mn_sim_get_config(&now);
  if (rs == MN_OK && !same_sim_config(&now, found)) rs = mn_sim_configure(found);
  if (st != MN_OK || rs == MN_OK) {
    mn__error_restore(&saved);
    return st;
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", mn_last_error());
  return mn__error(rs, func, "restoring the SIM device: %s", msg);
}

void mn__report_progress(mn_report_progress_fn fn, void *user, const char *fmt, ...) {
  if (!fn) return;
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fn(user, text);
}
