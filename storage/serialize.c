/* storage/serialize.c: mnemo's save/load format (docs/SAVE_FORMAT.md): named
 * views, storages written once and shared again on load, CRC32 over header and
 * blobs; plus the helpers both formats share. Saves stream the file and loads
 * read or map it (storage/serialize_io.c). Stateless, thread-safe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "mnemo/quantized.h"
#include "mnemo/serialize.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "runtime/meta.h"
#include "runtime/nameset.h"
#include "storage/crc32.h"
#include "storage/serialize_util.h"

/* ---- shared helpers ---------------------------------------------------------- */

/* Little-endian integers appended to a growing buffer (runtime/strbuf.h:
 * mn__sbuf_t, whose `oom` records an allocation failure). */
static void buf_u16(mn__sbuf_t *b, uint16_t v) {
  unsigned char x[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  mn__sbuf_write(b, x, 2);
}

static void buf_u32(mn__sbuf_t *b, uint32_t v) {
  unsigned char x[4];
  for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
  mn__sbuf_write(b, x, 4);
}

static void buf_u64(mn__sbuf_t *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
  mn__sbuf_write(b, x, 8);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t mn__le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

mn_status mn__check_names(const char *func, size_t count, const char *const *names, const mn_view_t *const *views) {
  if (count && (!names || !views)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "names and views must not be NULL");
  mn__nameset_t seen;
  mn__nameset_init(&seen, count);
  mn_status st = MN_OK;
  for (size_t i = 0; i < count && st == MN_OK; i++) {
    size_t j = 0;
    if (!names[i] || !names[i][0]) st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "name %zu is NULL or empty", i);
    else if (!views[i]) st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "view %zu ('%s') is NULL", i, names[i]);
    else if (mn__is_meta(mn_view_device(views[i])))
      st = mn__error(MN_ERR_NOT_SUPPORTED, func, "view %zu ('%s') is on the meta device: it has no data to save", i,
                     names[i]);
    else switch (mn__nameset_insert(&seen, names[i], strlen(names[i]), i, &j)) {
      case MN__NAMESET_NEW: break;
      case MN__NAMESET_DUPLICATE:
        st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "name '%s' is used twice (views %zu and %zu)", names[i], j, i);
        break;
      case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory"); break;
    }
  }
  mn__nameset_free(&seen);
  return st;
}

mn_status mn__named_views_new(const char *func, size_t count, mn_named_views_t **out) {
  mn_named_views_t *nv = mn__calloc(1, sizeof *nv);
  if (nv && count) {
    nv->names = mn__calloc(count, sizeof *nv->names);
    nv->views = mn__calloc(count, sizeof *nv->views);
  }
  if (!nv || (count && (!nv->names || !nv->views))) {
    mn_named_views_free(nv);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  *out = nv;
  return MN_OK;
}

mn_status mn__named_views_finish(mn_status st, mn_named_views_t *res, mn_named_views_t **out) {
  if (st != MN_OK) {
    mn_named_views_free(res);
    return st;
  }
  *out = res;
  return MN_OK;
}

void mn_named_views_free(mn_named_views_t *nv) {
  if (!nv) return;
  for (size_t i = 0; i < nv->count; i++) {
    if (nv->names) free(nv->names[i]);
    if (nv->views) mn_view_destroy(nv->views[i]);
  }
  for (size_t i = 0; i < nv->nmeta; i++) {
    free(nv->meta_keys[i]);
    free(nv->meta_values[i]);
  }
  free(nv->names);
  free(nv->views);
  free(nv->meta_keys);
  free(nv->meta_values);
  free(nv);
}

mn_view_t *mn_named_views_find(const mn_named_views_t *nv, const char *name) {
  if (!nv || !name) return NULL;
  for (size_t i = 0; i < nv->count; i++)
    if (nv->names[i] && strcmp(nv->names[i], name) == 0) return nv->views[i];
  return NULL;
}

/* ---- the mnemo format -------------------------------------------------------------- */

static const unsigned char MAGIC[8] = {'M', 'N', 'E', 'M', 'O', 'S', 'A', 'V'};
#define FORMAT_VERSION 1u
#define FORMAT_VERSION_QUANT 2u /* version 1 plus scale and zero point after a quantized view's record */
#define VIEW_QPARAMS 16u         /* f64 scale, i64 zero point */
#define FIXED_BYTES 40u   /* magic, version, flags, header_size, nstorages, nviews */
#define STORAGE_RECORD 24u
#define VIEW_FIXED 20u    /* name_len, storage index, dtype, ndim, offset */
#define BLOB_ALIGN 64u
#define MAX_NAME 65535u

static uint64_t align_up(uint64_t v) { return (v + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN; }


/* ---- save: plan, then stream ------------------------------------------------------- */

/* What a save writes: the distinct storages in order of first use and the
 * header, whole but for the checksums, which emit_save fills in as the bytes
 * go by. */
typedef struct save_plan_s {
  size_t ns;
  const mn_storage_t **stor;
  mn__sbuf_t hdr;
  uint64_t size; /* of the file */
} save_plan_t;

static void plan_free(save_plan_t *pl) {
  free(pl->stor);
  free(pl->hdr.p);
}

static mn_status plan_save(const char *func, size_t count, const char *const *names, const mn_view_t *const *views,
                           save_plan_t *pl) {
  *pl = (save_plan_t){0};
  mn_status st = mn__check_names(func, count, names, views);
  if (st != MN_OK) return st;
  for (size_t i = 0; i < count; i++)
    if (strlen(names[i]) > MAX_NAME)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "name %zu is longer than %u bytes", i, MAX_NAME);
  /* version 2 only when a view is quantized (its scale and zero point):
   * files without one stay readable by version-1 readers */
  uint32_t version = FORMAT_VERSION;
  for (size_t i = 0; i < count; i++)
    if (mn_view_is_quantized(views[i])) version = FORMAT_VERSION_QUANT;
  /* the distinct storages, in order of first use */
  pl->stor = mn__calloc(count ? count : 1, sizeof *pl->stor);
  uint32_t *index = mn__calloc(count ? count : 1, sizeof *index);
  if (!pl->stor || !index) {
    free(index);
    plan_free(pl);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  /* keyed by the pointer's bytes, held in stor[] itself (a slot is only
   * reused while its storage is not in the set) */
  mn__nameset_t seen;
  mn__nameset_init(&seen, count);
  size_t ns = 0;
  for (size_t i = 0; i < count; i++) {
    size_t k = ns;
    pl->stor[ns] = mn_view_storage(views[i]);
    mn__nameset_result r = mn__nameset_insert(&seen, (const char *)&pl->stor[ns], sizeof pl->stor[ns], ns, &k);
    if (r == MN__NAMESET_NOMEM) {
      mn__nameset_free(&seen);
      free(index);
      plan_free(pl);
      return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
    }
    if (r == MN__NAMESET_NEW) ns++;
    index[i] = (uint32_t)k;
  }
  mn__nameset_free(&seen);
  pl->ns = ns;
  /* the header's size first: the records hold the blobs' offsets */
  uint64_t header_size = FIXED_BYTES + (uint64_t)ns * STORAGE_RECORD + 4;
  for (size_t i = 0; i < count; i++)
    header_size += VIEW_FIXED + strlen(names[i]) + 16 * (uint64_t)mn_view_ndim(views[i]) +
                   (mn_view_is_quantized(views[i]) ? VIEW_QPARAMS : 0);
  mn__sbuf_t *b = &pl->hdr;
  mn__sbuf_write(b, MAGIC, 8);
  buf_u32(b, version);
  buf_u32(b, 0);
  buf_u64(b, header_size);
  buf_u64(b, ns);
  buf_u64(b, count);
  uint64_t at = align_up(header_size), end = header_size;
  for (size_t k = 0; k < ns; k++) {
    uint64_t n = mn_storage_nbytes(pl->stor[k]);
    mn_device_t dev = mn_storage_device(pl->stor[k]);
    buf_u64(b, n);
    buf_u64(b, at);
    buf_u32(b, 0); /* the blob's CRC32, as it is written */
    buf_u32(b, (uint32_t)dev.type << 16 | ((uint32_t)dev.index & 0xFFFF));
    end = at + n;
    at = align_up(end);
  }
  for (size_t i = 0; i < count; i++) {
    const mn_view_t *v = views[i];
    size_t nl = strlen(names[i]);
    int nd = mn_view_ndim(v);
    buf_u32(b, (uint32_t)nl);
    mn__sbuf_write(b, names[i], nl);
    buf_u32(b, index[i]);
    buf_u16(b, (uint16_t)mn_view_dtype(v));
    buf_u16(b, (uint16_t)nd);
    buf_u64(b, (uint64_t)mn_view_offset(v));
    for (int d = 0; d < nd; d++) buf_u64(b, (uint64_t)mn_view_size(v, d));
    for (int d = 0; d < nd; d++) buf_u64(b, (uint64_t)mn_view_stride(v, d));
    if (mn_view_is_quantized(v)) {
      const double scale = mn_view_q_scale(v);
      uint64_t bits;
      memcpy(&bits, &scale, sizeof bits);
      buf_u64(b, bits);
      buf_u64(b, (uint64_t)mn_view_q_zero_point(v));
    }
  }
  buf_u32(b, 0); /* the header's CRC32, once the blobs' are in */
  free(index);
  if (b->oom) {
    plan_free(pl);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  pl->size = end;
  return MN_OK;
}

static void put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The header (checksums still 0), each blob at its offset after zero
 * padding, checksummed as it goes out; then the header again, complete. */
static mn_status emit_save(void *plan, mn__sink_t *s) {
  save_plan_t *pl = plan;
  unsigned char *h = (unsigned char *)pl->hdr.p;
  size_t hs = pl->hdr.len;
  mn__sink_put(s, h, hs);
  for (size_t k = 0; k < pl->ns; k++) {
    unsigned char *r = h + FIXED_BYTES + k * STORAGE_RECORD;
    uint64_t n = mn__le64(r), off = mn__le64(r + 8);
    mn__sink_zeros(s, (size_t)(off - s->pos));
    uint32_t crc = 0;
    mn_status st = mn__sink_put_storage(s, pl->stor[k], 0, (size_t)n, &crc);
    if (st != MN_OK) return st;
    put_le32(r + 16, crc);
  }
  put_le32(h + hs - 4, mn__crc32(0, h, hs - 4));
  mn__sink_patch(s, 0, h, hs);
  return MN_OK;
}

mn_status mn_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views, void **data,
                         size_t *size) {
  MN__CHECK_ARG(data != NULL && size != NULL, "data and size must not be NULL");
  save_plan_t pl;
  mn_status st = plan_save(__func__, count, names, views, &pl);
  if (st != MN_OK) return st;
  st = mn__save_buffer(__func__, pl.size, emit_save, &pl, data, size);
  plan_free(&pl);
  return st;
}

mn_status mn_save(const char *path, size_t count, const char *const *names, const mn_view_t *const *views) {
  MN__CHECK_ARG(path != NULL, "path must not be NULL");
  save_plan_t pl;
  mn_status st = plan_save(__func__, count, names, views, &pl);
  if (st != MN_OK) return st;
  st = mn__save_file(__func__, path, emit_save, &pl);
  plan_free(&pl);
  return st;
}

/* ---- load -------------------------------------------------------------------------- */

/* A bounds-checked reader over the header. */
typedef struct reader_s {
  const unsigned char *p;
  size_t at, end;
} reader_t;

static bool rd(reader_t *r, size_t n, const unsigned char **out) {
  if (n > r->end - r->at) return false;
  *out = r->p + r->at;
  r->at += n;
  return true;
}

#define BAD(...) mn__error(MN_ERR_FORMAT, func, __VA_ARGS__)

/* The load proper, from any source: the header is read (a copy, for files)
 * and checked whole before any storage is made. */
static mn_status load_mnemo(const char *func, mn__src_t *src, mn_device_t dev, mn_named_views_t **out) {
  size_t size = src->size;
  if (size < FIXED_BYTES + 4) return BAD("truncated: %zu bytes, fewer than the %u of an empty file", size, FIXED_BYTES + 4);
  const unsigned char *p = NULL;
  unsigned char *owned = NULL, fixed[FIXED_BYTES];
  mn_status st = mn__src_bytes(src, 0, FIXED_BYTES, &p, &owned);
  if (st != MN_OK) return st;
  memcpy(fixed, p, FIXED_BYTES);
  free(owned);
  owned = NULL;
  if (memcmp(fixed, MAGIC, 8) != 0) return BAD("not a mnemo save file (bad magic)");
  uint32_t version = le32(fixed + 8), flags = le32(fixed + 12);
  if (version != FORMAT_VERSION && version != FORMAT_VERSION_QUANT)
    return BAD("unsupported format version %u (this build reads %u and %u)", version, FORMAT_VERSION,
               FORMAT_VERSION_QUANT);
  if (flags != 0) return BAD("unknown flags 0x%x", flags);
  uint64_t header_size = mn__le64(fixed + 16), ns = mn__le64(fixed + 24), nv = mn__le64(fixed + 32);
  if (header_size < FIXED_BYTES + 4 || header_size > size)
    return BAD("header size %llu is outside the file's %zu bytes (truncated?)", (unsigned long long)header_size, size);
  /* the whole header, read once (a file's into memory): what is checked is what is used */
  st = mn__src_bytes(src, 0, (size_t)header_size, &p, &owned);
  if (st != MN_OK) return st;
  uint32_t want = le32(p + header_size - 4), got = mn__crc32(0, p, (size_t)header_size - 4);
  if (memcmp(p, fixed, FIXED_BYTES) != 0) st = BAD("the file changed while its header was read");
  else if (want != got)
    st = BAD("header checksum mismatch (stored 0x%08x, computed 0x%08x): the file is corrupt", want, got);
  else if (ns > (header_size - FIXED_BYTES) / STORAGE_RECORD || nv > (header_size - FIXED_BYTES) / VIEW_FIXED)
    st = BAD("%llu storages and %llu views cannot fit a %llu-byte header", (unsigned long long)ns,
             (unsigned long long)nv, (unsigned long long)header_size);
  /* storages: canonical layout, zero padding, nothing after the last */
  const unsigned char *recs = p + FIXED_BYTES;
  uint64_t at = align_up(header_size), prev_end = header_size;
  for (uint64_t k = 0; k < ns && st == MN_OK; k++) {
    const unsigned char *r = recs + k * STORAGE_RECORD;
    uint64_t n = mn__le64(r), off = mn__le64(r + 8);
    bool zero = true;
    if (off != at) {
      st = BAD("storage %llu starts at byte %llu, expected %llu", (unsigned long long)k, (unsigned long long)off,
               (unsigned long long)at);
    } else if (off > size || n > size - off) {
      st = BAD("storage %llu (%llu bytes at %llu) runs past the end of the %zu-byte file (truncated?)",
               (unsigned long long)k, (unsigned long long)n, (unsigned long long)off, size);
    } else if ((st = mn__src_zeros(src, prev_end, (size_t)(off - prev_end), &zero)) == MN_OK && !zero) {
      st = BAD("padding before storage %llu (bytes %llu..%llu) is not zero", (unsigned long long)k,
               (unsigned long long)prev_end, (unsigned long long)off);
    }
    prev_end = off + n;
    at = k + 1 == ns ? off + n : align_up(off + n);
  }
  uint64_t end = ns ? at : header_size;
  if (st == MN_OK && end != size)
    st = BAD("the file has %zu bytes, its contents end at %llu", size, (unsigned long long)end);
  if (st != MN_OK) {
    free(owned);
    return st;
  }
  /* storages on dev, each checked against its checksum */
  mn_storage_t **stor = mn__calloc(ns ? (size_t)ns : 1, sizeof *stor);
  mn_named_views_t *res = NULL;
  if (!stor) {
    free(owned);
    return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  }
  mn__nameset_t seen; /* the names so far: a duplicate is found in linear time */
  mn__nameset_init(&seen, (size_t)nv);
  st = mn__named_views_new(func, (size_t)nv, &res);
  for (uint64_t k = 0; k < ns && st == MN_OK; k++) {
    const unsigned char *r = recs + k * STORAGE_RECORD;
    uint32_t crc = le32(r + 16);
    char what[48];
    snprintf(what, sizeof what, "storage %llu", (unsigned long long)k);
    st = mn__src_storage(src, dev, mn__le64(r + 8), (size_t)mn__le64(r), BLOB_ALIGN, &crc, what, &stor[k]);
  }
  /* views */
  reader_t rd_ = {p, FIXED_BYTES + (size_t)ns * STORAGE_RECORD, (size_t)header_size - 4};
  for (uint64_t i = 0; i < nv && st == MN_OK; i++) {
    const unsigned char *q = NULL;
    if (!rd(&rd_, 4, &q)) {
      st = BAD("view %llu: header ends inside its record", (unsigned long long)i);
      break;
    }
    uint32_t nl = le32(q);
    const unsigned char *name = NULL;
    if (nl == 0 || nl > MAX_NAME || !rd(&rd_, nl, &name) || memchr(name, 0, nl)) {
      st = BAD("view %llu: bad name (length %u)", (unsigned long long)i, nl);
      break;
    }
    if (!rd(&rd_, 16, &q)) {
      st = BAD("view %llu: header ends inside its record", (unsigned long long)i);
      break;
    }
    uint32_t si = le32(q);
    unsigned dtype = (unsigned)q[4] | (unsigned)q[5] << 8, nd = (unsigned)q[6] | (unsigned)q[7] << 8;
    uint64_t off = mn__le64(q + 8);
    if (si >= ns) {
      st = BAD("view %llu refers to storage %u of %llu", (unsigned long long)i, si, (unsigned long long)ns);
      break;
    }
    const bool quantized = mn_dtype_is_quantized((mn_dtype)dtype);
    if (!mn_dtype_is_valid((mn_dtype)dtype) || (quantized && version < FORMAT_VERSION_QUANT) || nd > MN_MAX_DIMS ||
        off > INT64_MAX) {
      st = BAD("view %llu: bad dtype %u, ndim %u or offset", (unsigned long long)i, dtype, nd);
      break;
    }
    int64_t sizes[MN_MAX_DIMS], strides[MN_MAX_DIMS];
    if (!rd(&rd_, 16 * (size_t)nd, &q)) {
      st = BAD("view %llu: header ends inside its sizes", (unsigned long long)i);
      break;
    }
    bool neg = false;
    for (unsigned d = 0; d < nd; d++) {
      uint64_t a = mn__le64(q + 8 * d), c = mn__le64(q + 8 * (nd + d));
      neg |= a > INT64_MAX || c > INT64_MAX;
      sizes[d] = (int64_t)a;
      strides[d] = (int64_t)c;
    }
    if (neg) {
      st = BAD("view %llu: a size or stride is negative", (unsigned long long)i);
      break;
    }
    double scale = 0;
    int64_t zero_point = 0;
    if (quantized) {
      if (!rd(&rd_, VIEW_QPARAMS, &q)) {
        st = BAD("view %llu: header ends inside its scale and zero point", (unsigned long long)i);
        break;
      }
      uint64_t bits = mn__le64(q);
      memcpy(&scale, &bits, sizeof scale);
      zero_point = (int64_t)mn__le64(q + 8);
    }
    res->names[i] = mn__malloc(nl + 1);
    if (!res->names[i]) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
      break;
    }
    memcpy(res->names[i], name, nl);
    res->names[i][nl] = '\0';
    res->count = (size_t)i + 1;
    switch (mn__nameset_insert(&seen, res->names[i], nl, (size_t)i, NULL)) {
      case MN__NAMESET_NEW: break;
      case MN__NAMESET_DUPLICATE: st = BAD("name '%s' appears twice", res->names[i]); break;
      case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory"); break;
    }
    if (st != MN_OK) break;
    if (quantized) /* checks the scale and zero point too */
      st = mn_view_create_quantized(stor[si], (mn_dtype)dtype, (int)nd, sizes, strides, (int64_t)off, scale,
                                    zero_point, &res->views[i]);
    else
      st = mn_view_create(stor[si], (mn_dtype)dtype, (int)nd, sizes, strides, (int64_t)off, &res->views[i]);
    if (st == MN_ERR_OUT_OF_MEMORY) break; /* mn_view_create's message */
    if (st != MN_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", mn__last_error_detail());
      st = BAD("view '%s' %s: %s", res->names[i],
               quantized ? "is not a valid quantized view" : "does not fit its storage", why);
    }
  }
  if (st == MN_OK && rd_.at != rd_.end)
    st = BAD("%zu unread bytes at the end of the header", rd_.end - rd_.at);
  mn__nameset_free(&seen);
  for (uint64_t k = 0; k < ns; k++) mn_storage_release(stor[k]);
  free(stor);
  free(owned);
  return mn__named_views_finish(st, res, out);
}

mn_status mn_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(out != NULL && (data != NULL || size == 0), "data and out must not be NULL");
  return mn__load_buffer(__func__, data, size, dev, load_mnemo, out);
}

mn_status mn_load(const char *path, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__load_path(__func__, path, dev, 0, load_mnemo, out);
}

mn_status mn_load_ex(const char *path, mn_device_t dev, unsigned flags, mn_named_views_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__load_path(__func__, path, dev, flags, load_mnemo, out);
}
