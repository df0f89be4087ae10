/* profiling/summary.c: text tables of allocator statistics (memory_summary, as
 * torch.cuda.memory_summary()) and of snapshots (segments, blocks, fragmentation); pure. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "runtime/strbuf.h"

/* "12.34 GiB" style, right-aligned by the caller. */
static const char *human(int64_t v, bool bytes, char *b, size_t n) {
  if (!bytes) {
    snprintf(b, n, "%" PRId64, v);
    return b;
  }
  static const char *u[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double x = (double)(v < 0 ? -v : v);
  int k = 0;
  while (x >= 1024.0 && k < 5) {
    x /= 1024.0;
    k++;
  }
  if (k == 0) snprintf(b, n, "%s%" PRId64 " %s", v < 0 ? "-" : "", v < 0 ? -v : v, u[0]);
  else snprintf(b, n, "%s%.2f %s", v < 0 ? "-" : "", x, u[k]);
  return b;
}

mn_status mn_memory_summary(const mn_alloc_stats_t *stats, const char *title, char *buf, size_t bufsize,
                            size_t *needed) {
  MN__CHECK_ARG(stats != NULL, "stats must not be NULL");
  MN__CHECK_ARG(buf != NULL || bufsize == 0, "buf must not be NULL when bufsize > 0");
  mn__strbuf_t o = {buf, bufsize, 0};
  const char *rule = "|==================================================================================|\n";
  const char *thin = "|----------------------------------------------------------------------------------|\n";
  mn__strbuf_printf(&o, "%s", rule);
  mn__strbuf_printf(&o, "| %-80.80s |\n", title && *title ? title : "mnemo memory summary");
  mn__strbuf_printf(&o, "%s", thin);
  mn__strbuf_printf(&o, "| %-28s | %10s | %10s | %10s | %10s |\n", "Metric", "Cur Usage", "Peak Usage", "Tot Alloc",
             "Tot Freed");
  mn__strbuf_printf(&o, "%s", thin);
  static const char *pool_names[MN_POOL_COUNT] = {"all", "small pool", "large pool"};
  char c1[32], c2[32], c3[32], c4[32], label[64];
#define MN__SUM_ROW(name, text)                                                                        \
  do {                                                                                                 \
    bool bytes = strstr(#name, "bytes") != NULL;                                                       \
    for (int k = 0; k < MN_POOL_COUNT; k++) {                                                          \
      const mn_stat_t *s = &stats->name[k];                                                            \
      if (k == 0) snprintf(label, sizeof label, "%s", #name);                                         \
      else snprintf(label, sizeof label, "    from %s", pool_names[k]);                               \
      mn__strbuf_printf(&o, "| %-28.28s | %10s | %10s | %10s | %10s |\n", label, human(s->current, bytes, c1, 32), \
                 human(s->peak, bytes, c2, 32), human(s->allocated, bytes, c3, 32),                    \
                 human(s->freed, bytes, c4, 32));                                                      \
    }                                                                                                  \
    mn__strbuf_printf(&o, "%s", thin);                                                                        \
  } while (0);
#define MN__SUM_ROW_X(name, text) MN__SUM_ROW(name, text)
  MN_ALLOC_STATS_MAP(MN__SUM_ROW_X)
  char line[128];
#undef MN__SUM_ROW_X
#undef MN__SUM_ROW
  mn__strbuf_printf(&o, "| %-28s | %10s | %10s | %10s | %10s |\n", "oversize_allocations",
             human(stats->oversize_allocations.current, false, c1, 32),
             human(stats->oversize_allocations.peak, false, c2, 32),
             human(stats->oversize_allocations.allocated, false, c3, 32),
             human(stats->oversize_allocations.freed, false, c4, 32));
  mn__strbuf_printf(&o, "| %-28s | %10s | %10s | %10s | %10s |\n", "oversize_segments",
             human(stats->oversize_segments.current, false, c1, 32),
             human(stats->oversize_segments.peak, false, c2, 32),
             human(stats->oversize_segments.allocated, false, c3, 32),
             human(stats->oversize_segments.freed, false, c4, 32));
  mn__strbuf_printf(&o, "%s", thin);
  snprintf(line, sizeof line, "alloc retries: %" PRId64 ", OOMs: %" PRId64 ", synchronize all streams: %" PRId64,
           stats->num_alloc_retries, stats->num_ooms, stats->num_sync_all_streams);
  mn__strbuf_printf(&o, "| %-80.80s |\n", line);
  snprintf(line, sizeof line, "raw device allocs: %" PRId64 ", raw device frees: %" PRId64, stats->num_device_alloc,
           stats->num_device_free);
  mn__strbuf_printf(&o, "| %-80.80s |\n", line);
  if (stats->max_split_size >= 0) {
    snprintf(line, sizeof line, "max_split_size: %s", human(stats->max_split_size, true, c1, 32));
    mn__strbuf_printf(&o, "| %-80.80s |\n", line);
  }
  mn__strbuf_printf(&o, "%s", rule);
  if (needed) *needed = o.len + 1;
  if (bufsize == 0) return mn__error(MN_ERR_OVERFLOW, __func__, "the summary needs %zu bytes", o.len + 1);
  if (o.len >= bufsize) {
    buf[bufsize - 1] = '\0';
    return mn__error(MN_ERR_OVERFLOW, __func__, "the summary needs %zu bytes, the buffer holds %zu", o.len + 1,
                     bufsize);
  }
  return MN_OK;
}

mn_status mn_allocator_memory_summary(mn_allocator_t *a, char *buf, size_t bufsize, size_t *needed) {
  MN__CHECK_ARG(a != NULL, "allocator must not be NULL");
  mn_alloc_stats_t s;
  mn_status st = mn_allocator_get_stats(a, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  char title[96], dev[32];
  snprintf(title, sizeof title, "mnemo memory summary, device %s", mn_device_format(mn_allocator_device(a), dev, sizeof dev));
  st = mn_memory_summary(&s, title, buf, bufsize, needed);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

static const char *state_name(mn_block_state s) {
  switch (s) {
    case MN_BLOCK_ACTIVE: return "active";
    case MN_BLOCK_ACTIVE_PENDING_FREE: return "pending_free";
    case MN_BLOCK_INACTIVE: return "inactive";
  }
  return "?";
}

mn_status mn_snapshot_print(const mn_snapshot_t *snap, bool blocks, FILE *out) {
  MN__CHECK_ARG(snap != NULL && out != NULL, "snap and out must not be NULL");
  MN__CHECK_ARG(snap->nsegments == 0 || snap->segments != NULL, "snapshot with %zu segments and no array",
                snap->nsegments);
  char a[32], b[32], c[32], d[32], e[32];
  fprintf(out, "%-18s %-8s %-5s %12s %12s %12s %12s %12s %6s %6s\n", "segment", "stream", "pool", "size",
          "allocated", "active", "free", "largest free", "blocks", "frag");
  size_t tot = 0, alloc = 0, active = 0, freeb = 0, nblocks = 0;
  for (size_t i = 0; i < snap->nsegments; i++) {
    const mn_snapshot_segment_t *s = &snap->segments[i];
    size_t largest = 0, fr = 0;
    for (size_t k = 0; k < s->nblocks; k++)
      if (s->blocks[k].state == MN_BLOCK_INACTIVE) {
        fr += s->blocks[k].size;
        if (s->blocks[k].size > largest) largest = s->blocks[k].size;
      }
    double frag = fr ? 1.0 - (double)largest / (double)fr : 0.0;
    fprintf(out, "0x%016" PRIxPTR " %-8" PRIu64 " %-5s %12s %12s %12s %12s %12s %6zu %5.1f%%%s\n", s->address,
            s->stream_id, s->is_large ? "large" : "small", human((int64_t)s->total_size, true, a, 32),
            human((int64_t)s->allocated_size, true, b, 32), human((int64_t)s->active_size, true, c, 32),
            human((int64_t)fr, true, d, 32), human((int64_t)largest, true, e, 32), s->nblocks, frag * 100.0,
            s->is_expandable ? " expandable" : "");
    if (blocks)
      for (size_t k = 0; k < s->nblocks; k++) {
        const mn_snapshot_block_t *bl = &s->blocks[k];
        fprintf(out, "    0x%016" PRIxPTR " %12s %-12s requested %s\n", bl->address,
                human((int64_t)bl->size, true, a, 32), state_name(bl->state),
                human((int64_t)bl->requested_size, true, b, 32));
      }
    tot += s->total_size;
    alloc += s->allocated_size;
    active += s->active_size;
    freeb += fr;
    nblocks += s->nblocks;
  }
  fprintf(out, "%zu segments, %zu blocks: reserved %s, allocated %s, active %s, free %s (%.1f%% of reserved)\n",
          snap->nsegments, nblocks, human((int64_t)tot, true, a, 32), human((int64_t)alloc, true, b, 32),
          human((int64_t)active, true, c, 32), human((int64_t)freeb, true, d, 32),
          tot ? 100.0 * (double)freeb / (double)tot : 0.0);
  return ferror(out) ? mn__error(MN_ERR_IO, __func__, "cannot write the table") : MN_OK;
}
