/* tests/view_chain_quant.c: the view-chain interpreter's quant ops
 * (docs/VIEW_CHAINS.md); see view_chain_internal.h. Single thread per chain. */
#include "view_chain_internal.h"

chain_ext_result chain_quant_op(chain_t *c, const char *name, int na, char **a, mn_view_t **next, mn_status *st) {
  (void)c;
  (void)name;
  (void)na;
  (void)a;
  (void)next;
  (void)st;
  return CHAIN_NOT_MINE;
}
