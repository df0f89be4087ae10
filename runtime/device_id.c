/* runtime/device_id.c: device values and their names, below the device layer:
 * making and comparing mn_device_t, the device type names, parsing and
 * formatting "cuda:1", byte counts ("512M"), whether the build has CUDA, the
 * one "no device ..." error.
 * No backend is reached from here, so the backends call down to it and
 * runtime/device.c calls both. Pure functions: any thread. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mnemo/mnemo.h"
#include "runtime/device_internal.h"
#include "runtime/error.h"

/* ---- device values ---------------------------------------------------- */

mn_device_t mn_device_cpu(void) { return (mn_device_t){MN_DEVICE_CPU, 0}; }
mn_device_t mn_device_cuda(int index) { return (mn_device_t){MN_DEVICE_CUDA, index}; }
mn_device_t mn_device_sim(int index) { return (mn_device_t){MN_DEVICE_SIM, index}; }

bool mn_device_equal(mn_device_t a, mn_device_t b) {
  return a.type == b.type && a.index == b.index;
}

const char *mn_device_type_name(mn_device_type type) {
  switch (type) {
    case MN_DEVICE_CPU: return "cpu";
    case MN_DEVICE_CUDA: return "cuda";
    case MN_DEVICE_SIM: return "sim";
    case MN_DEVICE_META: return "meta";
    default: return "invalid";
  }
}

mn_status mn_device_parse(const char *text, mn_device_t *out) {
  MN__CHECK_ARG(text != NULL && out != NULL, "text and out must not be NULL");
  static const mn_device_type types[] = {MN_DEVICE_CPU, MN_DEVICE_CUDA, MN_DEVICE_SIM, MN_DEVICE_META};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const char *name = mn_device_type_name(types[i]);
    size_t n = strlen(name);
    if (strncasecmp(text, name, n) != 0) continue;
    const char *rest = text + n;
    long index = 0;
    if (*rest == ':') {
      char *end = NULL;
      errno = 0;
      if (!isdigit((unsigned char)rest[1])) break;
      index = strtol(rest + 1, &end, 10);
      if (errno || *end != '\0' || index >= MN__MAX_DEVICES) break;
    } else if (*rest != '\0') {
      break;
    }
    if ((types[i] == MN_DEVICE_CPU || types[i] == MN_DEVICE_META) && index != 0) break;
    *out = (mn_device_t){types[i], (int)index};
    return MN_OK;
  }
  return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                   "cannot parse device \"%s\" (expected cpu, meta, cuda[:N] or sim[:N], N < %d)",
                   text, MN__MAX_DEVICES);
}

const char *mn_device_format(mn_device_t dev, char *buf, size_t bufsize) {
  if (!buf || bufsize == 0) return buf;
  if ((dev.type == MN_DEVICE_CPU || dev.type == MN_DEVICE_META) && dev.index == 0) /* "cpu:1" only names a missing device */
    snprintf(buf, bufsize, "%s", mn_device_type_name(dev.type));
  else
    snprintf(buf, bufsize, "%s:%d", mn_device_type_name(dev.type), dev.index);
  return buf;
}

mn_status mn_bytes_parse(const char *text, size_t *out) {
  MN__CHECK_ARG(text != NULL && out != NULL, "text and out must not be NULL");
  char *end = NULL;
  errno = 0;
  unsigned long long v = isdigit((unsigned char)text[0]) ? strtoull(text, &end, 10) : 0;
  unsigned shift = 0;
  bool ok = end != NULL && errno == 0;
  if (ok) {
    switch (*end) {
      case 'k': case 'K': shift = 10; end++; break;
      case 'm': case 'M': shift = 20; end++; break;
      case 'g': case 'G': shift = 30; end++; break;
      case 't': case 'T': shift = 40; end++; break;
      default: break;
    }
    if (shift && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    ok = *end == '\0' && (!shift || v <= (SIZE_MAX >> shift));
  }
  if (!ok)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "cannot parse \"%.64s\" as a byte count (e.g. 4096, 512M, 80GiB)", text);
  *out = (size_t)(v << shift);
  return MN_OK;
}

bool mn_build_has_cuda(void) {
#ifdef MNEMO_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

/* ---- a missing device ---------------------------------------------------- */

mn_status mn__device_missing(const char *func, mn_device_t dev, int count) {
  char name[32];
  return mn__error(MN_ERR_NO_DEVICE, func, "no device %s (%d %s device%s present%s)",
                   mn_device_format(dev, name, sizeof name), count, mn_device_type_name(dev.type),
                   count == 1 ? "" : "s",
                   dev.type == MN_DEVICE_CUDA && !mn_build_has_cuda() ? "; built without CUDA" : "");
}
