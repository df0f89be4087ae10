/* storage/storage_ops.c: the operations on a storage's bytes (mnemo/storage.h):
 * copy from a host buffer, resize, fill, copy, clone, to, pin_memory,
 * byteswap, convert, and the debug print (tolist, format, print). Built on
 * storage.c's lifetime (storage/storage_internal.h), the copy engine
 * (mn_copy_bytes) and the kernels; a floor above both (docs/ARCHITECTURE.md).
 * Device work is ordered on the given stream or the device's default one.
 * resize must not race other uses of a storage; the rest follow the public
 * header's rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/meta.h"
#include "runtime/strbuf.h"
#include "storage/storage_internal.h"

/* ---- a storage from a host buffer -------------------------------------------- */

mn_status mn_storage_from_buffer_copy(mn_device_t dev, const void *data, size_t nbytes, mn_storage_t **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  MN__CHECK_ARG(data != NULL || nbytes == 0, "data must not be NULL (nbytes=%zu)", nbytes);
  mn_storage_t *s = NULL;
  mn_status st = MN_OK;
  if (mn__is_meta(dev)) { /* to(meta): the bytes are not read */
    st = mn_storage_create(dev, nbytes, NULL, NULL, out);
    return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
  }
  st = mn_storage_create(dev, nbytes, NULL, NULL, &s);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (nbytes) st = mn_copy_bytes(dev, s->data, mn_device_cpu(), data, nbytes, NULL, 0);
  if (st != MN_OK) {
    mn_storage_release(s);
    return mn__error_wrap(st, __func__);
  }
  *out = s;
  return MN_OK;
}

/* ---- size and contents ------------------------------------------------------ */

/* The stream device work on s is ordered on: `given` (a stream of s's device)
 * or the device's default stream. */
static mn_status work_stream(const char *func, const mn_storage_t *s, mn_stream_t *given, mn_stream_t **out) {
  if (given) {
    if (!mn_device_equal(mn_stream_device(given), s->device)) {
      char a[32], b[32];
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "stream of %s cannot order work on a storage of %s",
                       mn_device_format(mn_stream_device(given), a, sizeof a),
                       mn_device_format(s->device, b, sizeof b));
    }
    *out = given;
    return MN_OK;
  }
  mn_status st = mn_stream_default(s->device, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

static mn_status not_resizable(const char *func, const mn_storage_t *s) {
  return mn__error(MN_ERR_INVALID_STATE, func, "storage of kind '%s' (%zu bytes) is not resizable",
                   mn_storage_kind_name(s->kind), s->nbytes);
}

mn_status mn_storage_resize(mn_storage_t *s, size_t nbytes, mn_stream_t *stream) {
  MN__CHECK_ARG(s != NULL, "s must not be NULL");
  if (s->kind != MN_STORAGE_ALLOCATOR) return not_resizable(__func__, s);
  if (nbytes == s->nbytes) return MN_OK;
  /* Every resize moves the bytes to a new block: a view would reach past the
   * end of a smaller one, and memory handed out through a view (DLPack,
   * numpy's __array_interface__, mn_view_data) would dangle. Refused. */
  long views = atomic_load_explicit(&s->views, memory_order_relaxed);
  if (views > 0)
    return mn__error(MN_ERR_INVALID_STATE, __func__,
                     "storage of %zu bytes has %ld live view(s): a resize to %zu bytes would move the bytes they "
                     "reach; destroy the views first (or resize a clone)",
                     s->nbytes, views, nbytes);
  /* Device storages: the copy and the old block's last use are ordered on a
   * stream of the storage's device (its default when NULL). CPU storages copy
   * at once (NULL) or after the given stream's earlier work (any device). */
  if (s->device.type != MN_DEVICE_CPU) {
    mn_status sst = work_stream(__func__, s, stream, &stream);
    if (sst != MN_OK) return sst;
  }
  void *p = NULL;
  mn_status st = mn_allocator_alloc(s->allocator, nbytes, stream, &p);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (mn__is_meta(s->device)) { /* nothing to keep: the new block replaces the old */
    mn__ignore(mn_allocator_free(s->allocator, s->meta_block)); /* as below: counted by the allocator */
    s->meta_block = p;
    s->nbytes = nbytes;
    return MN_OK;
  }
  size_t keep = nbytes < s->nbytes ? nbytes : s->nbytes;
  if (keep) st = mn_copy_bytes(s->device, p, s->device, s->data, keep, stream, MN_COPY_NON_BLOCKING);
  if (st != MN_OK) {
    mn__ignore(mn_allocator_free(s->allocator, p)); /* rollback: the copy failure is reported */
    return mn__error_wrap(st, __func__);
  }
  if (s->data && stream && keep) {
    /* The old block must outlive the copy queued on `stream`. */
    if (mn_allocator_record_stream(s->allocator, s->data, stream) != MN_OK) {
      mn_status sy = mn_stream_synchronize(stream);
      if (sy != MN_OK) { /* cannot know the copy is done: keep the old block, drop the new */
        mn__ignore(mn_allocator_free(s->allocator, p));
        return mn__error_wrap(sy, __func__);
      }
    }
  }
  /* The storage holds the new block from here; a failed free of the old one
   * cannot be undone (the allocator counts it). */
  mn__ignore(mn_allocator_free(s->allocator, s->data));
  s->data = p;
  s->nbytes = nbytes;
  return MN_OK;
}

mn_status mn_storage_fill(mn_storage_t *s, int value, mn_stream_t *stream) {
  MN__CHECK_ARG(s != NULL, "s must not be NULL");
  mn_stream_t *str = NULL;
  mn_status st = work_stream(__func__, s, stream, &str);
  if (st != MN_OK) return st;
  if (mn__is_meta(s->device)) return MN_OK; /* a write into meta: checked, nothing to write */
  unsigned char b = (unsigned char)value;
  st = mn_kernel_fill(str, s->data, s->nbytes, 1, &b);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* nbytes / itemsize of dtype, refusing invalid dtypes and a remainder. */
static mn_status count_items(const char *func, const mn_storage_t *s, mn_dtype dtype, size_t *count) {
  if (!mn_dtype_is_valid(dtype)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid dtype %d", (int)dtype);
  size_t item = mn_dtype_itemsize(dtype);
  if (s->nbytes % item)
    return mn__error(MN_ERR_INVALID_ARGUMENT, func, "nbytes=%zu is not a multiple of the %zu-byte item size of %s",
                     s->nbytes, item, mn_dtype_name(dtype));
  *count = s->nbytes / item;
  return MN_OK;
}

mn_status mn_storage_fill_typed(mn_storage_t *s, mn_dtype dtype, mn_scalar_t value, mn_stream_t *stream) {
  MN__CHECK_ARG(s != NULL, "s must not be NULL");
  size_t count = 0;
  mn_status st = count_items(__func__, s, dtype, &count);
  if (st != MN_OK) return st;
  unsigned char pattern[16];
  st = mn_scalar_to_bytes(value, dtype, pattern);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_stream_t *str = NULL;
  st = work_stream(__func__, s, stream, &str);
  if (st != MN_OK) return st;
  if (mn__is_meta(s->device)) return MN_OK;
  st = mn_kernel_fill(str, s->data, count, mn_dtype_itemsize(dtype), pattern);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_storage_copy(mn_storage_t *dst, const mn_storage_t *src, bool non_blocking, mn_stream_t *stream) {
  MN__CHECK_ARG(dst != NULL && src != NULL, "dst and src must not be NULL");
  if (dst->nbytes != src->nbytes)
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "sizes differ: dst has %zu bytes, src %zu", dst->nbytes,
                     src->nbytes);
  if (mn__is_meta(src->device) && !mn__is_meta(dst->device))
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, MN__META_NO_DATA);
  if (dst == src || dst->nbytes == 0 || mn__is_meta(dst->device)) return MN_OK;
  mn_status st = mn_copy_bytes(dst->device, dst->data, src->device, src->data, dst->nbytes, stream,
                               non_blocking ? MN_COPY_NON_BLOCKING : 0);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

/* A new storage of nbytes on s's device: s's allocator when it has one. */
static mn_status make_like(const char *func, const mn_storage_t *s, size_t nbytes, mn_stream_t *stream,
                           mn_storage_t **out) {
  mn_allocator_t *a = s->kind == MN_STORAGE_ALLOCATOR ? s->allocator : NULL;
  mn_status st = mn_storage_create(s->device, nbytes, a, stream, out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

mn_status mn_storage_clone(const mn_storage_t *s, mn_stream_t *stream, mn_storage_t **out) {
  MN__CHECK_ARG(s != NULL && out != NULL, "s and out must not be NULL");
  mn_stream_t *str = NULL;
  mn_status st = work_stream(__func__, s, stream, &str);
  if (st != MN_OK) return st;
  mn_storage_t *c = NULL;
  st = make_like(__func__, s, s->nbytes, str, &c);
  if (st != MN_OK) return st;
  if (s->nbytes && !mn__is_meta(s->device))
    st = mn_copy_bytes(s->device, c->data, s->device, s->data, s->nbytes, str, MN_COPY_NON_BLOCKING);
  if (st != MN_OK) {
    mn_storage_release(c);
    return mn__error_wrap(st, __func__);
  }
  *out = c;
  return MN_OK;
}

mn_status mn_storage_to(const mn_storage_t *s, mn_device_t dev, bool non_blocking, mn_stream_t *stream,
                        mn_storage_t **out) {
  MN__CHECK_ARG(s != NULL && out != NULL, "s and out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (mn_device_equal(dev, s->device)) {
    *out = mn_storage_retain((mn_storage_t *)s);
    return MN_OK;
  }
  if (mn__is_meta(s->device)) return mn__error(MN_ERR_NOT_SUPPORTED, __func__, MN__META_NO_DATA);
  mn_allocator_t *a = NULL;
  if (non_blocking && dev.type == MN_DEVICE_CPU) {
    st = mn_pinned_allocator_get_default(s->device, &a);
    if (st != MN_OK) return mn__error_wrap(st, __func__);
  }
  mn_stream_t *alloc_stream = stream && mn_device_equal(mn_stream_device(stream), dev) ? stream : NULL;
  mn_storage_t *c = NULL;
  st = mn_storage_create(dev, s->nbytes, a, alloc_stream, &c);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (s->nbytes && !mn__is_meta(dev)) /* to(meta) reads nothing */
    st = mn_copy_bytes(dev, c->data, s->device, s->data, s->nbytes, stream, non_blocking ? MN_COPY_NON_BLOCKING : 0);
  if (st != MN_OK) {
    mn_storage_release(c);
    return mn__error_wrap(st, __func__);
  }
  *out = c;
  return MN_OK;
}

mn_status mn_storage_pin_memory(const mn_storage_t *s, mn_device_t pin_device, mn_storage_t **out) {
  MN__CHECK_ARG(s != NULL && out != NULL, "s and out must not be NULL");
  if (s->device.type != MN_DEVICE_CPU) {
    char name[32];
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "only CPU storages can be pinned; this one is on %s",
                     mn_device_format(s->device, name, sizeof name));
  }
  mn_allocator_t *a = NULL;
  mn_status st = mn_pinned_allocator_get_default(pin_device, &a);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  mn_storage_t *c = NULL;
  st = mn_storage_create(s->device, s->nbytes, a, NULL, &c);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  if (s->nbytes) memcpy(c->data, s->data, s->nbytes);
  *out = c;
  return MN_OK;
}

/* ---- byteswap ------------------------------------------------------------------ */

typedef struct swap_job_s {
  unsigned char *data;
  size_t nbytes, item;
} swap_job_t;

static void swap_bytes(unsigned char *p, size_t nbytes, size_t item) {
  for (size_t at = 0; at < nbytes; at += item)
    for (size_t i = 0, j = item - 1; i < j; i++, j--) {
      unsigned char t = p[at + i];
      p[at + i] = p[at + j];
      p[at + j] = t;
    }
}

static void swap_job_run(void *arg) {
  swap_job_t *j = arg;
  swap_bytes(j->data, j->nbytes, j->item);
  free(j);
}

mn_status mn_storage_byteswap(mn_storage_t *s, size_t item_size, mn_stream_t *stream) {
  MN__CHECK_ARG(s != NULL, "s must not be NULL");
  MN__CHECK_ARG(item_size == 1 || item_size == 2 || item_size == 4 || item_size == 8 || item_size == 16,
                "item_size=%zu is not 1, 2, 4, 8 or 16", item_size);
  MN__CHECK_ARG(s->nbytes % item_size == 0, "nbytes=%zu is not a multiple of item_size=%zu", s->nbytes, item_size);
  if (mn__is_meta(s->device)) return meta_refuse(__func__, "byteswap");
  mn_stream_t *str = NULL;
  mn_status st = work_stream(__func__, s, stream, &str);
  if (st != MN_OK) return st;
  if (item_size == 1 || s->nbytes == 0) return MN_OK;
  switch (s->device.type) {
    case MN_DEVICE_CPU:
      swap_bytes(s->data, s->nbytes, item_size);
      return MN_OK;
    case MN_DEVICE_SIM: {
      swap_job_t *j = mn__malloc(sizeof *j);
      if (!j) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
      *j = (swap_job_t){s->data, s->nbytes, item_size};
      st = mn_stream_launch_host(str, swap_job_run, j);
      if (st != MN_OK) {
        free(j);
        return mn__error_wrap(st, __func__);
      }
      return MN_OK;
    }
#ifdef MNEMO_HAVE_CUDA
    default: { /* CUDA memory: through a host copy */
      unsigned char *h = mn__malloc(s->nbytes);
      if (!h) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory (%zu bytes)", s->nbytes);
      st = mn_copy_bytes(mn_device_cpu(), h, s->device, s->data, s->nbytes, str, 0);
      if (st == MN_OK) {
        swap_bytes(h, s->nbytes, item_size);
        st = mn_copy_bytes(s->device, s->data, mn_device_cpu(), h, s->nbytes, str, 0);
      }
      free(h);
      return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
    }
#else
    default: /* CPU, SIM and meta are all a build without CUDA has */
      return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "built without CUDA");
#endif
  }
}

mn_status mn_storage_byteswap_dtype(mn_storage_t *s, mn_dtype dtype, mn_stream_t *stream) {
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  size_t item = mn_dtype_itemsize(dtype);
  if (mn_dtype_is_complex(dtype)) item /= 2;
  mn_status st = mn_storage_byteswap(s, item, stream);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}

mn_status mn_storage_convert(const mn_storage_t *s, mn_dtype src_dtype, mn_dtype dst_dtype, mn_stream_t *stream,
                             mn_storage_t **out) {
  MN__CHECK_ARG(s != NULL && out != NULL, "s and out must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dst_dtype), "invalid dst_dtype %d", (int)dst_dtype);
  if (mn__is_meta(s->device)) return meta_refuse(__func__, "convert (a cast reads every byte)");
  if (mn_dtype_is_quantized(src_dtype) || mn_dtype_is_quantized(dst_dtype))
    return mn__error(MN_ERR_INVALID_ARGUMENT, __func__,
                     "converting %s to %s: quantized dtypes have no element conversion (a quantized storage's "
                     "values need a scale and zero point: use mn_view_quantize_per_tensor / mn_view_dequantize)",
                     mn_dtype_name(src_dtype), mn_dtype_name(dst_dtype));
  size_t count = 0;
  mn_status st = count_items(__func__, s, src_dtype, &count);
  if (st != MN_OK) return st;
  size_t di = mn_dtype_itemsize(dst_dtype);
  if (count > SIZE_MAX / di)
    return mn__error(MN_ERR_OVERFLOW, __func__, "%zu items of %zu bytes overflow", count, di);
  mn_stream_t *str = NULL;
  st = work_stream(__func__, s, stream, &str);
  if (st != MN_OK) return st;
  mn_storage_t *c = NULL;
  st = make_like(__func__, s, count * di, str, &c);
  if (st != MN_OK) return st;
  if (count) st = mn_kernel_cast(str, c->data, dst_dtype, s->data, src_dtype, count);
  if (st != MN_OK) {
    mn_storage_release(c);
    return mn__error_wrap(st, __func__);
  }
  *out = c;
  return MN_OK;
}

/* ---- debug print ---------------------------------------------------------------------- */

static void text_scalar(mn__strbuf_t *t, mn_scalar_t v) {
  switch (v.kind) {
    case MN_SCALAR_BOOL: mn__strbuf_printf(t, "%s", v.v.b ? "true" : "false"); break;
    case MN_SCALAR_INT: mn__strbuf_printf(t, "%lld", (long long)v.v.i); break;
    case MN_SCALAR_UINT: mn__strbuf_printf(t, "%llu", (unsigned long long)v.v.u); break;
    case MN_SCALAR_FLOAT: mn__strbuf_printf(t, "%.8g", v.v.f); break;
    case MN_SCALAR_COMPLEX: mn__strbuf_printf(t, "(%.8g%+.8gj)", v.v.c[0], v.v.c[1]); break;
  }
}

mn_status mn_storage_tolist(const mn_storage_t *s, mn_dtype dtype, mn_scalar_t *out, size_t max, size_t *count) {
  MN__CHECK_ARG(s != NULL && count != NULL && (out != NULL || max == 0), "s, out and count must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  if (mn__is_meta(s->device)) return mn__error(MN_ERR_NOT_SUPPORTED, __func__, MN__META_NO_DATA);
  size_t item = mn_dtype_itemsize(dtype), n = s->nbytes / item;
  if (n > max) n = max;
  const unsigned char *src = s->data;
  unsigned char *tmp = NULL;
  if (n && s->device.type != MN_DEVICE_CPU) {
    tmp = mn__malloc(n * item);
    if (!tmp) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    mn_status st = mn_copy_bytes(mn_device_cpu(), tmp, s->device, s->data, n * item, NULL, 0);
    if (st != MN_OK) {
      free(tmp);
      return mn__error_wrap(st, __func__);
    }
    src = tmp;
  }
  /* dtype was checked above: the conversion cannot fail */
  for (size_t i = 0; i < n; i++) mn__ignore(mn_scalar_from_bytes(dtype, src + i * item, &out[i]));
  free(tmp);
  *count = n;
  return MN_OK;
}

mn_status mn_storage_format(const mn_storage_t *s, mn_dtype dtype, size_t max_items, char *buf, size_t bufsize,
                            size_t *len) {
  MN__CHECK_ARG(s != NULL && (buf != NULL || bufsize == 0), "s and buf must not be NULL");
  MN__CHECK_ARG(mn_dtype_is_valid(dtype), "invalid dtype %d", (int)dtype);
  size_t item = mn_dtype_itemsize(dtype), total = s->nbytes / item;
  size_t n = total < max_items ? total : max_items;
  if (mn__is_meta(s->device)) n = 0; /* sizes only: no element is read */
  mn_scalar_t *vals = NULL;
  if (n) {
    vals = mn__malloc(n * sizeof *vals);
    if (!vals) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    mn_status st = mn_storage_tolist(s, dtype, vals, n, &n);
    if (st != MN_OK) {
      free(vals);
      return mn__error_wrap(st, __func__);
    }
  }
  mn__strbuf_t t = {buf, bufsize, 0};
  char dev[32];
  mn__strbuf_printf(&t, "storage(%s, %zu bytes, %s", mn_device_format(s->device, dev, sizeof dev), s->nbytes,
           mn_storage_kind_name(s->kind));
  if (s->kind == MN_STORAGE_ALLOCATOR) mn__strbuf_printf(&t, " '%s'", mn_allocator_name(s->allocator));
  if (s->kind == MN_STORAGE_FILE) mn__strbuf_printf(&t, " '%s' %s", s->filename, s->file_shared ? "shared" : "private");
  mn__strbuf_printf(&t, ", refcount %ld%s%s) as %s [", mn_storage_refcount(s), mn_storage_is_pinned(s) ? ", pinned" : "",
           mn_storage_is_resizable(s) ? ", resizable" : "", mn_dtype_name(dtype));
  for (size_t i = 0; i < n; i++) {
    if (i) mn__strbuf_printf(&t, ", ");
    text_scalar(&t, vals[i]);
  }
  if (mn__is_meta(s->device)) mn__strbuf_printf(&t, "%zu items, no data", total);
  else if (total > n) mn__strbuf_printf(&t, "%s... %zu more", n ? ", " : "", total - n);
  mn__strbuf_printf(&t, "]");
  if (s->nbytes % item) mn__strbuf_printf(&t, " + %zu bytes", s->nbytes % item);
  free(vals);
  if (bufsize) buf[t.len < bufsize ? t.len : bufsize - 1] = '\0';
  if (len) *len = t.len;
  return MN_OK;
}

mn_status mn_storage_print(const mn_storage_t *s, mn_dtype dtype, size_t max_items, FILE *f) {
  size_t len = 0;
  mn_status st = mn_storage_format(s, dtype, max_items, NULL, 0, &len);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  char *buf = mn__malloc(len + 1);
  if (!buf) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  st = mn_storage_format(s, dtype, max_items, buf, len + 1, NULL);
  if (st == MN_OK) fprintf(f ? f : stdout, "%s\n", buf);
  free(buf);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, __func__);
}
