/* tests/view_chain_quant.c: the view-chain interpreter's quantized ops
 * (docs/VIEW_CHAINS.md, mnemo/quantized.h); see view_chain_internal.h:
 *   quantize SCALE ZERO_POINT DTYPE   quantize_per_tensor of the current view
 *   dequantize                        float32 values of a quantized view
 *   int_repr                          its stored integers (packed: the bytes)
 *   values V...                       a new 1-d float32 view of the values
 *                                     (torch.tensor([V...])) on the chain's
 *                                     device: the family's random roots
 * Single thread per chain. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "view_chain_internal.h"

/* A finite or infinite double, the whole token ("nan", "inf" as strtod reads them). */
static bool parse_double(const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double d = strtod(s, &end);
  if (end == s || *end != '\0') return false;
  *out = d;
  return true;
}

chain_ext_result chain_quant_op(chain_t *c, const char *name, int na, char **a, mn_view_t **next, mn_status *st) {
  if (strcmp(name, "quantize") == 0) {
    double scale = 0;
    int64_t zp = 0;
    mn_dtype dt = MN_DTYPE_COUNT;
    if (na != 3 || !parse_double(a[0], &scale) || !chain_parse_i64(a[1], &zp) || mn_dtype_parse(a[2], &dt) != MN_OK) {
      chain_parse_fail(c, "%s takes SCALE ZERO_POINT DTYPE", name);
      return CHAIN_FAILED;
    }
    if (chain_too_big(c, c->cur)) return CHAIN_FAILED;
    *st = mn_view_quantize_per_tensor(c->cur, scale, zp, dt, NULL, next);
    return CHAIN_NEXT;
  }
  if (strcmp(name, "dequantize") == 0 || strcmp(name, "int_repr") == 0) {
    if (na != 0) {
      chain_parse_fail(c, "%s takes no arguments", name);
      return CHAIN_FAILED;
    }
    if (chain_too_big(c, c->cur)) return CHAIN_FAILED;
    *st = name[0] == 'd' ? mn_view_dequantize(c->cur, NULL, next) : mn_view_int_repr(c->cur, NULL, next);
    return CHAIN_NEXT;
  }
  if (strcmp(name, "values") == 0) {
    const int64_t n = na;
    mn_view_t *h = NULL;
    *st = mn_view_empty(mn_device_cpu(), MN_DTYPE_FLOAT32, 1, &n, &h);
    if (*st != MN_OK) return CHAIN_NEXT;
    float *p = mn_view_data(h);
    for (int i = 0; i < na; i++) {
      double d = 0;
      if (!parse_double(a[i], &d)) {
        mn_view_destroy(h);
        chain_parse_fail(c, "%s takes numbers", name);
        return CHAIN_FAILED;
      }
      p[i] = (float)d;
    }
    *st = mn_view_to(h, c->dev, MN_DTYPE_FLOAT32, false, NULL, next);
    if (*st == MN_OK) *st = chain_wait_dev(c->dev);
    mn_view_destroy(h);
    return CHAIN_NEXT;
  }
  return CHAIN_NOT_MINE;
}
