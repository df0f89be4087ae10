/* storage/copy.c: the copy engine's entry points (mnemo/copy.h): argument
 * checks, the choice of path (direct, staged, peer) and completion of
 * blocking copies. Every path is built from storage/copy_staged.c's queued
 * range copy; calls go down to copy_staged.c only, never back. Thread-safe:
 * the configuration is read under a lock when a copy starts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/error.h"
#include "runtime/meta.h"
#include "runtime/nvtx.h"
#include "storage/copy_staged.h"
#include "storage/view_internal.h"

#define MAX_PEER_INDEX 64
#define MAX_HOST_THREADS 64
#define MAX_STAGING_BUFFERS 64

/* ---- configuration ----------------------------------------------------------- */

static pthread_mutex_t g_cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static mn_copy_config_t g_cfg;
static bool g_cfg_set;

mn_copy_config_t mn_copy_config_default(void) {
  return (mn_copy_config_t){.chunk_bytes = (size_t)8 << 20, .staging_buffers = 4, .host_threads = 1};
}

mn_status mn_copy_set_config(const mn_copy_config_t *config) {
  mn_copy_config_t c = config ? *config : mn_copy_config_default();
  MN__CHECK_ARG(c.chunk_bytes >= 16, "chunk_bytes=%zu must be at least 16", c.chunk_bytes);
  MN__CHECK_ARG(c.staging_buffers >= 2 && c.staging_buffers <= MAX_STAGING_BUFFERS,
                "staging_buffers=%u is not in 2..%d", c.staging_buffers, MAX_STAGING_BUFFERS);
  MN__CHECK_ARG(c.host_threads >= 1 && c.host_threads <= MAX_HOST_THREADS, "host_threads=%u is not in 1..%d",
                c.host_threads, MAX_HOST_THREADS);
  pthread_mutex_lock(&g_cfg_lock);
  g_cfg = c;
  g_cfg_set = true;
  pthread_mutex_unlock(&g_cfg_lock);
  return MN_OK;
}

mn_status mn_copy_get_config(mn_copy_config_t *out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  pthread_mutex_lock(&g_cfg_lock);
  *out = g_cfg_set ? g_cfg : mn_copy_config_default();
  pthread_mutex_unlock(&g_cfg_lock);
  return MN_OK;
}

/* ---- sides -------------------------------------------------------------------- */

static mn_device_t cpu_dev(void) { return mn_device_cpu(); }
static bool is_cpu(mn_device_t d) { return d.type == MN_DEVICE_CPU; }

/* Whether host pointer p is page-locked for copies with `other` (the device
 * side; for a CPU -> CPU copy: for any backend). */
static bool pinned_for(const void *p, mn_device_t other) {
  if (is_cpu(other)) return mn_is_pinned(p);
  bool pinned = false;
  if (mn_device_host_is_pinned(other, p, &pinned) != MN_OK) {
    mn_clear_error(); /* a failed query means "not known pinned": the pageable path is always safe */
    return false;
  }
  return pinned;
}

/* Fills the pinned flags of the host sides and checks the caller's claims. */
static mn_status classify_host_sides(mn__copy_t *c) {
  static const char *names[2] = {"dst", "src"};
  static const unsigned claims[2] = {MN_COPY_DST_PINNED, MN_COPY_SRC_PINNED};
  mn__copy_side_t *sides[2] = {&c->dst, &c->src};
  for (int i = 0; i < 2; i++) {
    mn__copy_side_t *s = sides[i], *other = sides[1 - i];
    bool claimed = (c->flags & claims[i]) != 0;
    char dn[32];
    if (!is_cpu(s->dev)) {
      if (claimed)
        return mn__error(MN_ERR_INVALID_ARGUMENT, c->func, "%s is declared pinned (MN_COPY_%s_PINNED) but is memory of %s, not host memory",
                         names[i], i ? "SRC" : "DST", mn_device_format(s->dev, dn, sizeof dn));
      continue;
    }
    s->pinned = pinned_for(s->t.data, other->dev);
    if (claimed && !s->pinned)
      return mn__error(MN_ERR_INVALID_ARGUMENT, c->func,
                       "%s=%p is declared pinned (MN_COPY_%s_PINNED) but is not page-locked host memory for %s",
                       names[i], (void *)s->t.data, i ? "SRC" : "DST", mn_device_format(other->dev, dn, sizeof dn));
  }
  return MN_OK;
}

static void side_from_view(const mn_view_t *v, mn__copy_side_t *out) {
  memset(out, 0, sizeof *out);
  out->dev = mn_view_device(v);
  mn__strided_of_view(v, &out->t);
  out->contiguous = mn_view_is_contiguous(v);
}

static void side_from_bytes(mn_device_t dev, const void *p, size_t n, mn__copy_side_t *out) {
  memset(out, 0, sizeof *out);
  out->dev = dev;
  out->t.data = (char *)p;
  out->t.ndim = 1;
  out->t.sizes[0] = (int64_t)n;
  out->t.strides[0] = 1;
  out->contiguous = true;
}

/* Sides in one device's memory must be the same elements (*noop) or
 * disjoint (the kernels' overlap check, kernels/ops.h); the CPU also allows
 * overlapping contiguous ranges (memmove). */
static mn_status check_overlap(const mn__copy_t *c, bool *noop) {
  *noop = false;
  if (!mn_device_equal(c->dst.dev, c->src.dev)) return MN_OK;
  mn__overlap ov = mn__strided_overlap(&c->dst.t, c->item, &c->src.t, c->item);
  if (ov == MN__OVERLAP_NO) return MN_OK;
  if (ov == MN__OVERLAP_FULL) { /* the same elements: nothing to copy */
    *noop = true;
    return MN_OK;
  }
  if (is_cpu(c->dst.dev) && c->dst.contiguous && c->src.contiguous) return MN_OK;
  uintptr_t dl, dh, sl, sh;
  mn__strided_extent(&c->dst.t, c->item, &dl, &dh);
  mn__strided_extent(&c->src.t, c->item, &sl, &sh);
  return mn__error(MN_ERR_INVALID_ARGUMENT, c->func, "dst [%p, %p) and src [%p, %p) overlap", (void *)dl, (void *)dh,
                   (void *)sl, (void *)sh);
}

/* The ordering stream: the given one (of a device side, or any stream for a
 * CPU -> CPU copy), else the default stream of the device side (dst's for two
 * devices; the CPU's for a CPU copy, which runs at once). */
static mn_status resolve_stream(const char *func, mn_device_t dd, mn_device_t sd, mn_stream_t *given,
                                mn_stream_t **out) {
  if (given) {
    mn_device_t g = mn_stream_device(given);
    if ((is_cpu(dd) && is_cpu(sd)) || (!is_cpu(dd) && mn_device_equal(g, dd)) ||
        (!is_cpu(sd) && mn_device_equal(g, sd))) {
      *out = given;
      return MN_OK;
    }
    char a[32], b[32], x[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "a stream of %s cannot order a copy %s -> %s",
                     mn_device_format(g, x, sizeof x), mn_device_format(sd, a, sizeof a),
                     mn_device_format(dd, b, sizeof b));
  }
  mn_status st = mn_stream_default(!is_cpu(dd) ? dd : !is_cpu(sd) ? sd : cpu_dev(), out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* ---- paths ----------------------------------------------------------------------- */

/* A pinned pool block used by a queued copy is kept from reuse until the
 * stream has passed the copy. */
static mn_status protect_pool_block(const mn__copy_side_t *host, mn_stream_t *s) {
  mn_allocator_t *pool = NULL;
  if (mn_pinned_allocator_lookup(host->t.data, &pool) != MN_OK) {
    mn_clear_error(); /* registered or cudaHostAlloc'd memory: the caller keeps it alive */
    return MN_OK;
  }
  return mn_allocator_record_stream(pool, host->t.data, s);
}

static bool one_range_can_do_it(const mn__copy_t *c) {
  return (c->dst.contiguous && c->src.contiguous) ||
         (c->dst.dev.type != MN_DEVICE_CUDA && c->src.dev.type != MN_DEVICE_CUDA);
}

static _Atomic bool g_peer_enabled[MN_DEVICE_TYPE_COUNT][MAX_PEER_INDEX][MAX_PEER_INDEX];

/* Lets `peer` reach the memory of `owner`'s default allocator: a caching
 * allocator's expandable pages need a grant of their own (mapped memory is
 * reachable only from the devices granted, as cuMemMap memory), as PyTorch's
 * copies enable peer access through its caching allocator. Other default
 * allocators (raw memory) are covered by mn_device_enable_peer_access. */
static mn_status grant_default_allocator(mn_device_t owner, mn_device_t peer) {
  mn_allocator_t *a = NULL;
  if (mn_allocator_get_default(owner, &a) != MN_OK || strcmp(mn_allocator_name(a), "caching") != 0) {
    mn_clear_error(); /* nothing of a caching allocator to grant */
    return MN_OK;
  }
  return mn_caching_allocator_enable_peer_access(a, peer);
}

/* Whether dst and src (two devices) reach each other directly; enables the
 * access both ways the first time (the default allocators' memory too). */
static mn_status peer_usable(mn_device_t dst, mn_device_t src, bool *usable) {
  bool can = false, back = false;
  mn_status st = mn_device_can_access_peer(dst, src, &can);
  if (st == MN_OK && can) st = mn_device_can_access_peer(src, dst, &back);
  if (st != MN_OK || !can || !back) {
    *usable = false;
    return st;
  }
  bool cached = dst.index < MAX_PEER_INDEX && src.index < MAX_PEER_INDEX;
  if (!cached || !atomic_load(&g_peer_enabled[dst.type][dst.index][src.index])) {
    st = mn_device_enable_peer_access(dst, src);
    if (st == MN_OK) st = mn_device_enable_peer_access(src, dst);
    if (st == MN_OK) st = grant_default_allocator(src, dst);
    if (st == MN_OK) st = grant_default_allocator(dst, src);
    if (st != MN_OK) return st;
    if (cached) atomic_store(&g_peer_enabled[dst.type][dst.index][src.index], true);
  }
  *usable = true;
  return MN_OK;
}

static mn_status copy_run(const mn__copy_t *c) {
  if (c->dst.dev.type == MN_DEVICE_CUDA && !c->dst.contiguous)
    return mn__error(MN_ERR_NOT_SUPPORTED, c->func,
                     "dst is a non-contiguous CUDA view: device-side strided copies need the strided CUDA kernels");
  if (c->src.dev.type == MN_DEVICE_CUDA && !c->src.contiguous)
    return mn__error(MN_ERR_NOT_SUPPORTED, c->func,
                     "src is a non-contiguous CUDA view: device-side strided copies need the strided CUDA kernels");
  bool nb = (c->flags & MN_COPY_NON_BLOCKING) != 0, dh = is_cpu(c->dst.dev), sh = is_cpu(c->src.dev);
  mn_stream_t *s = c->stream;
  mn_status st;
  if (dh && sh) {
    st = c->dst.contiguous && c->src.contiguous
             ? mn__copy_enqueue_range(s, &c->dst, &c->src, c->item, 0, c->numel)
             : mn__copy_launch_host_range(s, &c->dst.t, &c->src.t, c->item, 0, c->numel, c->cfg.host_threads);
  } else if (dh || sh) {
    const mn__copy_side_t *host = sh ? &c->src : &c->dst;
    if (one_range_can_do_it(c) && (host->pinned || !nb)) {
      st = mn__copy_enqueue_range(s, &c->dst, &c->src, c->item, 0, c->numel);
      if (st == MN_OK && host->pinned) st = protect_pool_block(host, s);
    } else {
      st = sh ? mn__copy_staged_h2d(c) : mn__copy_staged_d2h(c);
    }
  } else if (mn_device_equal(c->dst.dev, c->src.dev)) {
    st = mn__copy_enqueue_range(s, &c->dst, &c->src, c->item, 0, c->numel);
  } else {
    bool peer = false;
    st = (c->flags & MN_COPY_NO_PEER) ? MN_OK : peer_usable(c->dst.dev, c->src.dev, &peer);
    if (st == MN_OK)
      st = peer ? mn__copy_enqueue_range(s, &c->dst, &c->src, c->item, 0, c->numel) : mn__copy_staged_d2d(c);
  }
  if (st == MN_OK && !nb) st = mn_stream_synchronize(s);
  return st;
}

/* Shared start of both entry points: configuration, stream, overlap. */
static mn_status copy_start(mn__copy_t *c, mn_stream_t *stream) {
  mn_status st = mn_copy_get_config(&c->cfg);
  if (st == MN_OK) st = resolve_stream(c->func, c->dst.dev, c->src.dev, stream, &c->stream);
  if (st != MN_OK || c->numel == 0) return st;
  bool noop = false;
  st = check_overlap(c, &noop);
  if (st != MN_OK || noop) return st;
  st = classify_host_sides(c);
  if (st != MN_OK) return st;
  st = copy_run(c);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, c->func);
}

/* Copies with a meta side move no byte: out of meta there is no data
 * (PyTorch's message), into meta nothing to write to (views and storages
 * make such writes no-ops before they get here). */
static mn_status refuse_meta(const char *func, mn_device_t dst, mn_device_t src) {
  if (mn__is_meta(src))
    return mn__error(MN_ERR_NOT_SUPPORTED, func, MN__META_NO_DATA);
  if (mn__is_meta(dst))
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "the meta device holds no bytes to copy into");
  return MN_OK;
}

mn_status mn_copy_bytes(mn_device_t dst_dev, void *dst, mn_device_t src_dev, const void *src, size_t nbytes,
                        mn_stream_t *stream, unsigned flags) {
  MN__CHECK_ARG((flags & ~(unsigned)MN_COPY_FLAGS_ALL) == 0, "unknown flags 0x%x", flags & ~(unsigned)MN_COPY_FLAGS_ALL);
  mn_status st = mn_device_check(dst_dev);
  if (st == MN_OK) st = mn_device_check(src_dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if ((st = refuse_meta(__func__, dst_dev, src_dev)) != MN_OK) return st;
  MN__CHECK_ARG(nbytes == 0 || (dst != NULL && src != NULL), "dst and src must not be NULL (nbytes=%zu)", nbytes);
  MN__CHECK_ARG(nbytes <= (size_t)INT64_MAX, "nbytes=%zu is too large", nbytes);
  mn__copy_t c;
  memset(&c, 0, sizeof c);
  c.func = __func__;
  side_from_bytes(dst_dev, dst, nbytes, &c.dst);
  side_from_bytes(src_dev, src, nbytes, &c.src);
  c.item = 1;
  c.numel = (int64_t)nbytes;
  c.flags = flags;
  mn__nvtx_push("mnemo.copy_bytes", (uint64_t)nbytes);
  st = copy_start(&c, stream);
  mn__nvtx_pop();
  return st;
}

static const char *format_shape(const mn_view_t *v, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < mn_view_ndim(v) && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)mn_view_size(v, d));
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* Same-device casting copies, and strided copies inside one CUDA device: the
 * kernels (mnemo/kernels.h) on `stream` (NULL: the device's default). */
static mn_status copy_by_kernel(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream, bool non_blocking) {
  mn_device_t dev = mn_view_device(dst);
  mn_stream_t *s = stream;
  mn_status st = MN_OK;
  if (s == NULL) st = mn_stream_default(dev, &s);
  else if (!mn_device_equal(mn_stream_device(s), dev)) {
    char a[32], b[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, "mn_copy_view", "a stream of %s cannot order a kernel copy on %s",
                     mn_device_format(mn_stream_device(s), a, sizeof a), mn_device_format(dev, b, sizeof b));
  }
  if (st == MN_OK) st = mn_kernel_copy_view(s, dst, src);
  if (st == MN_OK && !non_blocking) st = mn_stream_synchronize(s);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, "mn_copy_view");
}

mn_status mn_copy_view(mn_view_t *dst, const mn_view_t *src, mn_stream_t *stream, bool non_blocking) {
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL");
  mn_status mst = refuse_meta(__func__, mn_view_device(dst), mn_view_device(src));
  if (mst != MN_OK) return mst;
  bool same = mn_view_ndim(dst) == mn_view_ndim(src);
  for (int d = 0; same && d < mn_view_ndim(dst); d++) same = mn_view_size(dst, d) == mn_view_size(src, d);
  if (!same) {
    char a[256], b[256];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "shapes differ: dst %s, src %s", format_shape(dst, a, sizeof a),
                     format_shape(src, b, sizeof b));
  }
  for (int d = 0; d < mn_view_ndim(dst); d++)
    if (mn_view_stride(dst, d) == 0 && mn_view_size(dst, d) > 1)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                       "dst has stride 0 at dim %d (size %lld): its elements would overlap", d,
                       (long long)mn_view_size(dst, d));
  bool same_dev = mn_device_equal(mn_view_device(dst), mn_view_device(src));
  if (mn_view_dtype(dst) != mn_view_dtype(src) && !same_dev)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "dtypes differ (dst %s, src %s) across devices: cast on one device first (mn_kernel_copy_view)",
                     mn_dtype_name(mn_view_dtype(dst)), mn_dtype_name(mn_view_dtype(src)));
  if (same_dev && (mn_view_dtype(dst) != mn_view_dtype(src) ||
                   (mn_view_device(dst).type == MN_DEVICE_CUDA &&
                    (!mn_view_is_contiguous(dst) || !mn_view_is_contiguous(src)))))
    return copy_by_kernel(dst, src, stream, non_blocking);
  mn__copy_t c;
  memset(&c, 0, sizeof c);
  c.func = __func__;
  side_from_view(dst, &c.dst);
  side_from_view(src, &c.src);
  c.item = mn_dtype_itemsize(mn_view_dtype(dst));
  c.numel = mn_view_numel(dst);
  c.flags = non_blocking ? MN_COPY_NON_BLOCKING : 0;
  mn__nvtx_push("mnemo.copy_view", (uint64_t)c.numel * (uint64_t)c.item);
  mn_status st = copy_start(&c, stream);
  mn__nvtx_pop();
  return st;
}

/* Empties the default pinned pool of every device that has one. */
static mn_status empty_default_pools(void) {
  static const mn_device_type types[] = {MN_DEVICE_CPU, MN_DEVICE_CUDA, MN_DEVICE_SIM};
  mn_status first = MN_OK;
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    int n = 0;
    if (mn_device_count(types[t], &n) != MN_OK) continue;
    for (int i = 0; i < n && i < MAX_PEER_INDEX; i++) {
      mn_allocator_t *pool = NULL;
      mn_status st = mn_pinned_allocator_get_default((mn_device_t){types[t], i}, &pool);
      if (st == MN_OK) st = mn_allocator_empty_cache(pool);
      if (st != MN_OK && first == MN_OK) first = st;
    }
  }
  return first;
}

mn_status mn_copy_engine_reset(void) {
  mn_status st = mn__copy_staged_reset();
  mn_status pools = empty_default_pools();
  if (st == MN_OK) st = pools;
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
