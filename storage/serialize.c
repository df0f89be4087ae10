/* storage/serialize.c: mnemo's save/load format (docs/SAVE_FORMAT.md): named
 * views, storages written once and shared again on load, CRC32 over header and
 * blobs; plus the helpers both formats share. Stateless, thread-safe. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "mnemo/serialize.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"
#include "runtime/nameset.h"
#include "storage/serialize_util.h"

/* ---- shared helpers ---------------------------------------------------------- */

void mn__buf_put(mn__buf_t *b, const void *p, size_t n) {
  if (b->failed || n == 0) return;
  if (n > SIZE_MAX - b->len) {
    b->failed = true;
    return;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
    unsigned char *d = mn__realloc(b->data, cap);
    if (!d) {
      b->failed = true;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  if (p) memcpy(b->data + b->len, p, n);
  else memset(b->data + b->len, 0, n);
  b->len += n;
}

void mn__buf_zeros(mn__buf_t *b, size_t n) { mn__buf_put(b, NULL, n); }

void mn__buf_u16(mn__buf_t *b, uint16_t v) {
  unsigned char x[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  mn__buf_put(b, x, 2);
}

void mn__buf_u32(mn__buf_t *b, uint32_t v) {
  unsigned char x[4];
  for (int i = 0; i < 4; i++) x[i] = (unsigned char)(v >> (8 * i));
  mn__buf_put(b, x, 4);
}

void mn__buf_u64(mn__buf_t *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (8 * i));
  mn__buf_put(b, x, 8);
}

uint32_t mn__le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t mn__le64(const unsigned char *p) { return (uint64_t)mn__le32(p) | (uint64_t)mn__le32(p + 4) << 32; }

mn_status mn__load_file(const char *func, const char *path, mn_device_t dev, mn__load_buffer_fn load,
                        mn_named_views_t **out) {
  void *data = NULL;
  size_t size = 0;
  mn_status st = mn__file_read_all(func, path, &data, &size);
  if (st != MN_OK) return st;
  st = load(data, size, dev, out);
  free(data);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

mn_status mn__check_names(const char *func, size_t count, const char *const *names, const mn_view_t *const *views) {
  if (count && (!names || !views)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "names and views must not be NULL");
  mn__nameset_t seen;
  mn__nameset_init(&seen, count);
  mn_status st = MN_OK;
  for (size_t i = 0; i < count && st == MN_OK; i++) {
    size_t j = 0;
    if (!names[i] || !names[i][0]) st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "name %zu is NULL or empty", i);
    else if (!views[i]) st = mn__error(MN_ERR_INVALID_ARGUMENT, func, "view %zu ('%s') is NULL", i, names[i]);
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

mn_status mn__storage_host_bytes(const char *func, const mn_storage_t *s, const unsigned char **bytes,
                                 unsigned char **owned) {
  *owned = NULL;
  size_t n = mn_storage_nbytes(s);
  if (mn_storage_device(s).type == MN_DEVICE_CPU || n == 0) {
    *bytes = mn_storage_data(s);
    return MN_OK;
  }
  unsigned char *h = mn__malloc(n);
  if (!h) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory (%zu bytes)", n);
  mn_status st = mn_copy_bytes(mn_device_cpu(), h, mn_storage_device(s), mn_storage_data(s), n, NULL, 0);
  if (st != MN_OK) {
    free(h);
    return mn__error_wrap(st, func);
  }
  *bytes = h;
  *owned = h;
  return MN_OK;
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

/* ---- CRC32 (IEEE 802.3, reflected, as zlib's crc32) ------------------------------- */

/* Slicing-by-8: eight tables, eight bytes per step (about 8x the bytewise loop). */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_of(const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
        crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* ---- the mnemo format -------------------------------------------------------------- */

static const unsigned char MAGIC[8] = {'M', 'N', 'E', 'M', 'O', 'S', 'A', 'V'};
#define FORMAT_VERSION 1u
#define FIXED_BYTES 40u   /* magic, version, flags, header_size, nstorages, nviews */
#define STORAGE_RECORD 24u
#define VIEW_FIXED 20u    /* name_len, storage index, dtype, ndim, offset */
#define BLOB_ALIGN 64u
#define MAX_NAME 65535u

static uint64_t align_up(uint64_t v) { return (v + BLOB_ALIGN - 1) / BLOB_ALIGN * BLOB_ALIGN; }

mn_status mn_save_buffer(size_t count, const char *const *names, const mn_view_t *const *views, void **data,
                         size_t *size) {
  MN__CHECK_ARG(data != NULL && size != NULL, "data and size must not be NULL");
  mn_status st = mn__check_names(__func__, count, names, views);
  if (st != MN_OK) return st;
  for (size_t i = 0; i < count; i++)
    if (strlen(names[i]) > MAX_NAME)
      return mn__error(MN_ERR_INVALID_ARGUMENT, __func__, "name %zu is longer than %u bytes", i, MAX_NAME);
  /* the distinct storages, in order of first use */
  const mn_storage_t **stor = mn__calloc(count ? count : 1, sizeof *stor);
  uint32_t *index = mn__calloc(count ? count : 1, sizeof *index);
  if (!stor || !index) {
    free(stor);
    free(index);
    return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  /* keyed by the pointer's bytes, held in stor[] itself (a slot is only
   * reused while its storage is not in the set) */
  mn__nameset_t seen;
  mn__nameset_init(&seen, count);
  size_t ns = 0;
  for (size_t i = 0; i < count; i++) {
    size_t k = ns;
    stor[ns] = mn_view_storage(views[i]);
    mn__nameset_result r = mn__nameset_insert(&seen, (const char *)&stor[ns], sizeof stor[ns], ns, &k);
    if (r == MN__NAMESET_NOMEM) {
      mn__nameset_free(&seen);
      free(stor);
      free(index);
      return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
    }
    if (r == MN__NAMESET_NEW) ns++;
    index[i] = (uint32_t)k;
  }
  mn__nameset_free(&seen);
  mn__buf_t b = {0};
  mn__buf_put(&b, MAGIC, 8);
  mn__buf_u32(&b, FORMAT_VERSION);
  mn__buf_u32(&b, 0);
  mn__buf_u64(&b, 0); /* header_size, patched below */
  mn__buf_u64(&b, ns);
  mn__buf_u64(&b, count);
  size_t records = b.len;
  mn__buf_zeros(&b, ns * STORAGE_RECORD); /* patched once blob offsets are known */
  for (size_t i = 0; i < count; i++) {
    const mn_view_t *v = views[i];
    size_t nl = strlen(names[i]);
    int nd = mn_view_ndim(v);
    mn__buf_u32(&b, (uint32_t)nl);
    mn__buf_put(&b, names[i], nl);
    mn__buf_u32(&b, index[i]);
    mn__buf_u16(&b, (uint16_t)mn_view_dtype(v));
    mn__buf_u16(&b, (uint16_t)nd);
    mn__buf_u64(&b, (uint64_t)mn_view_offset(v));
    for (int d = 0; d < nd; d++) mn__buf_u64(&b, (uint64_t)mn_view_size(v, d));
    for (int d = 0; d < nd; d++) mn__buf_u64(&b, (uint64_t)mn_view_stride(v, d));
  }
  uint64_t header_size = b.len + 4;
  st = MN_OK;
  if (!b.failed) {
    for (int i = 0; i < 8; i++) b.data[16 + i] = (unsigned char)(header_size >> (8 * i));
    /* blobs: each storage whole, 64-byte aligned */
    uint64_t at = align_up(header_size);
    mn__buf_t blobs = {0};
    for (size_t k = 0; k < ns && st == MN_OK; k++) {
      const unsigned char *bytes = NULL;
      unsigned char *owned = NULL;
      st = mn__storage_host_bytes(__func__, stor[k], &bytes, &owned);
      if (st != MN_OK) break;
      size_t n = mn_storage_nbytes(stor[k]);
      mn__buf_zeros(&blobs, (size_t)(at - header_size) - blobs.len);
      mn__buf_put(&blobs, bytes, n);
      mn_device_t dev = mn_storage_device(stor[k]);
      unsigned char *r = b.data + records + k * STORAGE_RECORD;
      uint64_t fields[2] = {n, at};
      for (int f = 0; f < 2; f++)
        for (int i = 0; i < 8; i++) r[8 * f + i] = (unsigned char)(fields[f] >> (8 * i));
      uint32_t crc = crc32_of(bytes, n), devw = (uint32_t)dev.type << 16 | ((uint32_t)dev.index & 0xFFFF);
      for (int i = 0; i < 4; i++) r[16 + i] = (unsigned char)(crc >> (8 * i));
      for (int i = 0; i < 4; i++) r[20 + i] = (unsigned char)(devw >> (8 * i));
      free(owned);
      at = align_up(at + n);
    }
    if (st == MN_OK) {
      mn__buf_u32(&b, crc32_of(b.data, b.len));
      mn__buf_put(&b, blobs.data, blobs.len);
      if (blobs.failed) b.failed = true;
    }
    free(blobs.data);
  }
  free(stor);
  free(index);
  if (st != MN_OK || b.failed) {
    free(b.data);
    return st != MN_OK ? st : mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  }
  *data = b.data;
  *size = b.len;
  return MN_OK;
}

mn_status mn_save(const char *path, size_t count, const char *const *names, const mn_view_t *const *views) {
  MN__CHECK_ARG(path != NULL, "path must not be NULL");
  void *data = NULL;
  size_t size = 0;
  mn_status st = mn_save_buffer(count, names, views, &data, &size);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  st = mn__file_write_atomic(__func__, path, data, size);
  free(data);
  return st;
}

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

#define BAD(...) mn__error(MN_ERR_FORMAT, __func__, __VA_ARGS__)

mn_status mn_load_buffer(const void *data, size_t size, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(out != NULL && (data != NULL || size == 0), "data and out must not be NULL");
  mn_status st = mn_device_check(dev);
  if (st != MN_OK) return mn__error_wrap(st, __func__);
  const unsigned char *p = data;
  if (size < FIXED_BYTES + 4) return BAD("truncated: %zu bytes, fewer than the %u of an empty file", size, FIXED_BYTES + 4);
  if (memcmp(p, MAGIC, 8) != 0) return BAD("not a mnemo save file (bad magic)");
  uint32_t version = mn__le32(p + 8), flags = mn__le32(p + 12);
  if (version != FORMAT_VERSION) return BAD("unsupported format version %u (this build reads %u)", version, FORMAT_VERSION);
  if (flags != 0) return BAD("unknown flags 0x%x", flags);
  uint64_t header_size = mn__le64(p + 16), ns = mn__le64(p + 24), nv = mn__le64(p + 32);
  if (header_size < FIXED_BYTES + 4 || header_size > size)
    return BAD("header size %llu is outside the file's %zu bytes (truncated?)", (unsigned long long)header_size, size);
  uint32_t want = mn__le32(p + header_size - 4), got = crc32_of(p, (size_t)header_size - 4);
  if (want != got) return BAD("header checksum mismatch (stored 0x%08x, computed 0x%08x): the file is corrupt", want, got);
  if (ns > (header_size - FIXED_BYTES) / STORAGE_RECORD || nv > (header_size - FIXED_BYTES) / VIEW_FIXED)
    return BAD("%llu storages and %llu views cannot fit a %llu-byte header", (unsigned long long)ns,
               (unsigned long long)nv, (unsigned long long)header_size);
  /* storages: canonical layout, checksummed blobs */
  const unsigned char *recs = p + FIXED_BYTES;
  uint64_t at = align_up(header_size), prev_end = header_size;
  for (uint64_t k = 0; k < ns; k++) {
    const unsigned char *r = recs + k * STORAGE_RECORD;
    uint64_t n = mn__le64(r), off = mn__le64(r + 8);
    if (off != at) return BAD("storage %llu starts at byte %llu, expected %llu", (unsigned long long)k,
                              (unsigned long long)off, (unsigned long long)at);
    if (off > size || n > size - off)
      return BAD("storage %llu (%llu bytes at %llu) runs past the end of the %zu-byte file (truncated?)",
                 (unsigned long long)k, (unsigned long long)n, (unsigned long long)off, size);
    for (uint64_t z = prev_end; z < off; z++)
      if (p[z]) return BAD("padding byte %llu before storage %llu is not zero", (unsigned long long)z, (unsigned long long)k);
    prev_end = off + n;
    if (mn__le32(r + 16) != crc32_of(p + off, (size_t)n))
      return BAD("storage %llu checksum mismatch: the file is corrupt", (unsigned long long)k);
    at = align_up(off + n);
    if (k + 1 == ns) at = off + n;
  }
  uint64_t end = ns ? at : header_size;
  if (end != size) return BAD("the file has %zu bytes, its contents end at %llu", size, (unsigned long long)end);
  /* storages on dev */
  mn_storage_t **stor = mn__calloc(ns ? (size_t)ns : 1, sizeof *stor);
  mn_named_views_t *res = NULL;
  if (!stor) return mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
  mn__nameset_t seen; /* the names so far: a duplicate is found in linear time */
  mn__nameset_init(&seen, (size_t)nv);
  st = mn__named_views_new(__func__, (size_t)nv, &res);
  for (uint64_t k = 0; k < ns && st == MN_OK; k++) {
    const unsigned char *r = recs + k * STORAGE_RECORD;
    st = mn_storage_from_buffer_copy(dev, p + mn__le64(r + 8), (size_t)mn__le64(r), &stor[k]);
    if (st != MN_OK) st = mn__error_wrap(st, __func__);
  }
  /* views */
  reader_t rd_ = {p, FIXED_BYTES + (size_t)ns * STORAGE_RECORD, (size_t)header_size - 4};
  for (uint64_t i = 0; i < nv && st == MN_OK; i++) {
    const unsigned char *q = NULL;
    if (!rd(&rd_, 4, &q)) {
      st = BAD("view %llu: header ends inside its record", (unsigned long long)i);
      break;
    }
    uint32_t nl = mn__le32(q);
    const unsigned char *name = NULL;
    if (nl == 0 || nl > MAX_NAME || !rd(&rd_, nl, &name) || memchr(name, 0, nl)) {
      st = BAD("view %llu: bad name (length %u)", (unsigned long long)i, nl);
      break;
    }
    if (!rd(&rd_, 16, &q)) {
      st = BAD("view %llu: header ends inside its record", (unsigned long long)i);
      break;
    }
    uint32_t si = mn__le32(q);
    unsigned dtype = (unsigned)q[4] | (unsigned)q[5] << 8, nd = (unsigned)q[6] | (unsigned)q[7] << 8;
    uint64_t off = mn__le64(q + 8);
    if (si >= ns) {
      st = BAD("view %llu refers to storage %u of %llu", (unsigned long long)i, si, (unsigned long long)ns);
      break;
    }
    if (!mn_dtype_is_valid((mn_dtype)dtype) || nd > MN_MAX_DIMS || off > INT64_MAX) {
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
    res->names[i] = mn__malloc(nl + 1);
    if (!res->names[i]) {
      st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory");
      break;
    }
    memcpy(res->names[i], name, nl);
    res->names[i][nl] = '\0';
    res->count = (size_t)i + 1;
    switch (mn__nameset_insert(&seen, res->names[i], nl, (size_t)i, NULL)) {
      case MN__NAMESET_NEW: break;
      case MN__NAMESET_DUPLICATE: st = BAD("name '%s' appears twice", res->names[i]); break;
      case MN__NAMESET_NOMEM: st = mn__error(MN_ERR_OUT_OF_MEMORY, __func__, "out of host memory"); break;
    }
    if (st != MN_OK) break;
    st = mn_view_create(stor[si], (mn_dtype)dtype, (int)nd, sizes, strides, (int64_t)off, &res->views[i]);
    if (st == MN_ERR_OUT_OF_MEMORY) break; /* mn_view_create's message */
    if (st != MN_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", mn__last_error_detail());
      st = BAD("view '%s' does not fit its storage: %s", res->names[i], why);
    }
  }
  if (st == MN_OK && rd_.at != rd_.end)
    st = BAD("%zu unread bytes at the end of the header", rd_.end - rd_.at);
  mn__nameset_free(&seen);
  for (uint64_t k = 0; k < ns; k++) mn_storage_release(stor[k]);
  free(stor);
  return mn__named_views_finish(st, res, out);
}

mn_status mn_load(const char *path, mn_device_t dev, mn_named_views_t **out) {
  MN__CHECK_ARG(path != NULL && out != NULL, "path and out must not be NULL");
  return mn__load_file(__func__, path, dev, mn_load_buffer, out);
}
