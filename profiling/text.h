/* profiling/text.h: what the trace readers in profiling/ share (trace files,
 * RMM CSV logs, and the replay and the CLI's report, which pair each free with its
 * alloc): file reads, lines, numbers, errors, address sorting, alloc/free
 * matching; any thread. */
#ifndef MNEMO_PROFILING_TEXT_H
#define MNEMO_PROFILING_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/status.h"
#include "mnemo/trace.h"
#include "runtime/error.h"

/* For each free_requested of the trace the index of its alloc, and for each
 * alloc its free_requested (SIZE_MAX while live at the end; SIZE_MAX for every
 * other entry), addresses taken per device: match holds nentries slots. One pass
 * (profiling/trace.c); MN_ERR_FORMAT on a trace that is not valid, out of memory. */
mn_status mn__trace_match(const mn_trace_t *trace, size_t *match);

/* Walks text[0..len) line by line; `line` counts the lines handed out (1-based
 * once the first is out), `max` is the longest line accepted. */
typedef struct mn__lines_s {
  const char *text;
  size_t len, pos, max;
  uint64_t line;
} mn__lines_t;

typedef enum mn__line_result { MN__LINE_OK, MN__LINE_END, MN__LINE_BAD } mn__line_result;

/* The next line without its "\n" or "\r\n" in *s, *n. MN__LINE_BAD (why says
 * it: too many lines, a line longer than max, a last line with no newline),
 * MN__LINE_END after the last line. */
mn__line_result mn__lines_next(mn__lines_t *r, const char **s, size_t *n, char *why, size_t whysize);
/* Whether s[0..n) is printable ASCII or tabs; else why names the byte and column. */
bool mn__text_printable(const char *s, size_t n, char *why, size_t whysize);
/* A decimal of 1..20 digits that fits in 64 bits (no sign, no blanks). */
bool mn__parse_dec(const char *s, uint64_t *out);
/* "0x" (or "0X") and 1..16 hex digits. */
bool mn__parse_hex(const char *s, uint64_t *out);

/* An allocation event by (device, address), for sorting to pair allocs with frees. */
typedef struct mn__addr_ref_s {
  uint64_t address;
  size_t index; /* the event's index */
  uint32_t device;
} mn__addr_ref_t;
/* qsort order: device, then address, then index. */
int mn__addr_ref_cmp(const void *a, const void *b);

/* A reader of one text format into a trace (mn_trace_parse, mn_trace_import_rmm_csv). */
typedef mn_status (*mn__trace_text_fn)(const char *text, size_t len, const char *name, mn_trace_t **out);
/* Reads the file at path whole and hands it to `parse` (path names the lines in
 * its errors); a failure's message is prefixed with func. */
mn_status mn__trace_parse_file(const char *func, const char *path, mn__trace_text_fn parse, mn_trace_t **out);

/* MN_ERR_FORMAT with the message "<func>: <name>:<line>: <formatted>". */
mn_status mn__text_error(const char *func, const char *name, uint64_t line, const char *fmt, ...) MN__PRINTF(4, 5);

#endif /* MNEMO_PROFILING_TEXT_H */
