/* profiling/devices.c: the devices of a trace and what the trace says of each
 * (recorded number, pinned host memory, the device's size as recorded from its
 * out-of-memory lines or partial cache releases): one rule for `mnemo replay`,
 * `mnemo report` and mnemo.profiling.replay. Thread-safe (reads the trace only). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/trace.h"
#include "profiling/analysis.h"
#include "runtime/checked.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"

/* The size as recorded of device d (see mn_trace_device_t). */
static void recorded_size(const mn_trace_t *t, bool pytorch, bool gc, mn_trace_device_t *d) {
  uint64_t reserved = 0, peak = 0, lo = 0, hi = UINT64_MAX, before = 0;
  const mn_trace_entry_t *prev = NULL;
  bool in_run = false, run_ok = false;
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    if (e->device != d->index) continue;
    if (in_run && e->action != MN_TRACE_SEGMENT_FREE) {
      in_run = false;
      if (run_ok && e->action == MN_TRACE_SEGMENT_ALLOC) {
        uint64_t l = mn__sat_add_u64(reserved, e->size), h = mn__sat_add_u64(before, e->size);
        if (l > lo) lo = l;
        if (h - 1 < hi) hi = h - 1;
        d->partial_releases++;
      }
    }
    if (e->action == MN_TRACE_SEGMENT_FREE && !e->pre && !in_run) {
      in_run = true;
      run_ok = !prev || prev->action != MN_TRACE_EMPTY_CACHE;
      before = reserved;
    }
    if (e->action == MN_TRACE_SEGMENT_ALLOC || e->action == MN_TRACE_SEGMENT_MAP) {
      reserved = mn__sat_add_u64(reserved, e->size);
      if (reserved > peak) peak = reserved;
    } else if (e->action == MN_TRACE_SEGMENT_FREE || e->action == MN_TRACE_SEGMENT_UNMAP) {
      reserved = e->size > reserved ? 0 : reserved - e->size;
    } else if (e->action == MN_TRACE_OOM) {
      /* mnemo's recorder writes 0x0 there (the free bytes unknown): no size from it */
      if (d->oom_lines++ == 0 && (e->address || pytorch)) d->oom_capacity = mn__sat_add_u64(reserved, e->address);
    }
    prev = e;
  }
  if (peak > lo) lo = peak;
  if (d->partial_releases && !gc && lo <= hi) d->release_capacity = lo;
}

mn_status mn_trace_devices(const mn_trace_t *t, mn_trace_device_t **out, size_t *nout) {
  if (!t || !out || !nout) return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_trace_devices", "NULL argument");
  uint64_t host = UINT64_MAX, one = 0;
  bool has_host = mn_trace_meta_get_u64(t, "host_device", &host) == MN_OK;
  bool multi = mn_trace_meta_get(t, "devices") != NULL;
  bool has_one = !multi && mn_trace_meta_get_u64(t, "device", &one) == MN_OK;
  mn_clear_error();
  /* distinct device indices, in order of first use (few: a linear set) */
  size_t n = 0, cap = 0;
  mn_trace_device_t *d = NULL;
  for (size_t i = 0; i < t->nentries; i++) {
    const mn_trace_entry_t *e = &t->entries[i];
    size_t k = 0;
    while (k < n && d[k].index != e->device) k++;
    if (k == n) {
      if (n == cap) {
        bool over = false;
        size_t ncap = cap ? mn__ck_size_mul(cap, 2, &over) : 4;
        size_t bytes = mn__ck_size_mul(ncap, sizeof *d, &over);
        mn_trace_device_t *nd = over ? NULL : mn__realloc(d, bytes);
        if (!nd) {
          free(d);
          return mn__error(over ? MN_ERR_OVERFLOW : MN_ERR_OUT_OF_MEMORY, "mn_trace_devices",
                           "no host memory for %zu devices", ncap);
        }
        d = nd;
        cap = ncap;
      }
      memset(&d[n], 0, sizeof d[n]);
      d[n].index = e->device;
      d[n].label = has_one && e->device == 0 ? one : e->device;
      d[n].host = has_host && d[n].label == host;
      n++;
    }
    d[k].entries++;
    d[k].pre_allocs += e->pre && e->action == MN_TRACE_ALLOC;
  }
  for (size_t a = 1; a < n; a++) /* sort by index (insertion: few devices) */
    for (size_t b = a; b > 0 && d[b - 1].index > d[b].index; b--) {
      mn_trace_device_t x = d[b];
      d[b] = d[b - 1];
      d[b - 1] = x;
    }
  const char *by = mn_trace_meta_get(t, "recorded_by");
  const char *conf = mn_trace_meta_get(t, "config");
  bool pytorch = by && !strcmp(by, "pytorch"), gc = conf && strstr(conf, "garbage_collection_threshold");
  for (size_t k = 0; k < n; k++) recorded_size(t, pytorch, gc, &d[k]);
  *out = d;
  *nout = n;
  return MN_OK;
}

void mn_trace_devices_free(mn_trace_device_t *devices) { free(devices); }

const char *mn__trace_size_as_recorded(const mn_trace_device_t *d, mn_sim_config_t *sc) {
  if (d->oom_capacity && d->oom_capacity <= SIZE_MAX && sc->granularity) {
    size_t g = sc->granularity, c = (size_t)d->oom_capacity / g * g;
    sc->capacity = c ? c : g;
    return "oom";
  }
  if (d->release_capacity && d->release_capacity <= SIZE_MAX - (1u << 30) && sc->granularity) {
    size_t g = sc->granularity;
    sc->capacity = ((size_t)d->release_capacity + g - 1) / g * g;
    return "releases";
  }
  return "default";
}

mn_status mn__sim_as_recorded(const mn_trace_t *t, uint32_t index, mn_sim_config_t *sc, const char **from) {
  *from = "default";
  mn_trace_device_t *d = NULL;
  size_t n = 0;
  mn_status st = mn_trace_devices(t, &d, &n);
  if (st != MN_OK) return st;
  for (size_t k = 0; k < n; k++)
    if (d[k].index == index && !d[k].host) *from = mn__trace_size_as_recorded(&d[k], sc);
  mn_trace_devices_free(d);
  return MN_OK;
}
