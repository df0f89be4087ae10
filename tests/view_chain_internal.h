/* tests/view_chain_internal.h: what the view-chain interpreter's op families
 * share (tests/view_chain.c runs the view ops; view_chain_index.c and
 * view_chain_quant.c add the advanced-indexing and quantized ops): the chain
 * state, argument parsers, failure helpers and the JSON buffer. Single
 * thread: one chain at a time per chain_t. */
#ifndef MNEMO_TESTS_VIEW_CHAIN_INTERNAL_H
#define MNEMO_TESTS_VIEW_CHAIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mnemo/mnemo.h"

#define MAX_TOK 64
#define MAX_ELEMS (1 << 20) /* the driver refuses to materialize more */

typedef struct {
  char *buf;
  size_t len, cap;
} sbuf;

typedef struct {
  int ntok;
  char *tok[MAX_TOK];
} op_t;

typedef struct {
  mn_device_t dev;
  mn_view_t *root; /* the creation op's result */
  mn_view_t *cur;
  char err[512];
  mn_status st;
} chain_t;

void chain_sb_printf(sbuf *b, const char *fmt, ...);
void chain_sb_json_string(sbuf *b, const char *s);
bool chain_parse_i64(const char *s, int64_t *out);
bool chain_parse_int(const char *s, int *out);
/* "none" -> dflt */
bool chain_parse_opt(const char *s, int64_t dflt, int64_t *out);
/* "1,2,3" or "-" (empty list); at most MN_MAX_DIMS + 1 items */
bool chain_parse_list(const char *s, int64_t *out, int *n);
bool chain_parse_scalar(const char *s, mn_scalar_t *out);
/* Fails the chain with the library's message (returns false). */
bool chain_lib_fail(chain_t *c, mn_status st);
/* Fails the chain as a parse error (returns false). */
bool chain_parse_fail(chain_t *c, const char *fmt, const char *what);
/* Fails the chain with the driver's own message and status (returns false). */
bool chain_fail(chain_t *c, mn_status st, const char *msg);
/* Replaces the current view by `next` (owned). */
void chain_advance(chain_t *c, mn_view_t *next);
/* True (and the chain failed) when v has more elements than the driver materializes. */
bool chain_too_big(chain_t *c, const mn_view_t *v);
/* Waits for dev's work (nothing to do on the CPU). */
mn_status chain_wait_dev(mn_device_t dev);
/* A new contiguous arange(prod(sizes)) of dtype on dev, viewed as sizes. */
mn_status chain_make_arange(mn_device_t dev, mn_dtype dt, int ndim, const int64_t *sizes, mn_view_t **out);

/* What an op family's runner did with an op (chain_index_op, chain_quant_op). */
typedef enum {
  CHAIN_NOT_MINE = 0, /* not one of the family's ops */
  CHAIN_NEXT,         /* ran: *st is its status and, on MN_OK, *next the new current view */
  CHAIN_INPLACE,      /* an in-place op ran and succeeded: the current view stays */
  CHAIN_FAILED        /* refused or unparsable: c->st and c->err are set */
} chain_ext_result;

/* Advanced indexing ops (tests/view_chain_index.c, docs/VIEW_CHAINS.md). */
chain_ext_result chain_index_op(chain_t *c, const char *name, int na, char **a, mn_view_t **next, mn_status *st);
/* Quantized ops (tests/view_chain_quant.c). */
chain_ext_result chain_quant_op(chain_t *c, const char *name, int na, char **a, mn_view_t **next, mn_status *st);

#endif /* MNEMO_TESTS_VIEW_CHAIN_INTERNAL_H */
