/* kernels/cpu_exec.c: the CPU executor (kernels/cpu_exec.h): one typed row
 * converter per dtype pair (kernels/cast.h, folded by constant dtypes), a
 * blocked transpose, strided rows and fills, split over the pool. Thread-safe. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cast.h"
#include "kernels/cpu_exec.h"
#include "kernels/cpu_transpose.h"
#include "kernels/pool.h"
#include "kernels/strided.h"
#include "runtime/fileio.h"

#define MN__PAR_BYTES ((int64_t)1 << 20) /* below this, one thread */
#define MN__TASK_BYTES ((int64_t)1 << 18) /* roughly the bytes per task */
/* Streaming stores (transposes: whole dst lines, no read for ownership;
 * dense fills) from this many bytes read + written, and never below the
 * last-level cache's size: operands that fit in the cache stay there for the
 * next kernel (a loop over the same buffers never leaves it), where streaming
 * them out to DRAM made a 4 MiB transpose 3-5x slower than a 3.9 MiB one. */
#define MN__STREAM_MIN_BYTES ((int64_t)8 << 20)
#define MN__LLC_DEFAULT ((int64_t)32 << 20)

/* The last-level cache's bytes: cpu0's index3 in Linux's sysfs (sysconf's
 * figure is the whole package's on some AMD parts), MN__LLC_DEFAULT when
 * unknown. Computed once; racing first calls compute the same value. */
static int64_t llc_bytes(void) {
  static atomic_llong cached; /* 0: not yet */
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v > 0) return v;
  v = MN__LLC_DEFAULT;
#if defined(__linux__)
  char buf[32];
  if (mn__file_read_small("/sys/devices/system/cpu/cpu0/cache/index3/size", buf, sizeof buf) > 0) {
    int64_t x = 0;
    int k = 0;
    for (; buf[k] >= '0' && buf[k] <= '9' && x < ((int64_t)1 << 40); k++) x = x * 10 + (buf[k] - '0');
    x <<= buf[k] == 'K' ? 10 : buf[k] == 'M' ? 20 : buf[k] == 'G' ? 30 : 0;
    if (x >= ((int64_t)1 << 20) && x <= ((int64_t)1 << 34)) v = x;
  }
#endif
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

/* Whether an operation reading and writing `bytes` in all streams its stores. */
static bool stream_stores(int64_t bytes) {
  int64_t llc = llc_bytes();
  return bytes >= (llc > MN__STREAM_MIN_BYTES ? llc : MN__STREAM_MIN_BYTES);
}

/* ---- row converters: 17 x 17, each with a unit-step loop that vectorizes ---- */

/* x86-64 with GCC: each converter also built for AVX2 and AVX-512 (picked at
 * load time by ifunc); IEEE results are the same on every path (C11: no FMA
 * contraction). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define MN__CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MN__CLONES
#endif

/* float32/float64 -> integers (not bool), dense rows: the saturating
 * conversion of cast.h goes through int64, which AVX2 and SSE have no vector
 * instruction for, so the loops stayed scalar. A block whose values all lie
 * in [-2^31, 2^31) (no NaN) truncates through int32 instead: the same value,
 * then wrapped to the dst width as cast.h does, and a loop that vectorizes at
 * every x86 level. Any other block takes the element path. */
#define MN__F2I_BLOCK 256
static inline int f2i_fast(int D, int S) {
  if (S != MN_DTYPE_FLOAT32 && S != MN_DTYPE_FLOAT64) return 0;
  switch (D) {
    case MN_DTYPE_INT8: case MN_DTYPE_UINT8: case MN_DTYPE_INT16: case MN_DTYPE_UINT16:
    case MN_DTYPE_INT32: case MN_DTYPE_UINT32: case MN_DTYPE_INT64: case MN_DTYPE_UINT64: return 1;
    default: return 0;
  }
}
#define MN__F2I_LOOP(ST, DT)                                                                        \
  for (int64_t i = 0; i < m; i++) {                                                                 \
    ST x;                                                                                           \
    memcpy(&x, sb + i * (int64_t)sizeof(ST), sizeof x);                                             \
    const DT r = (DT)(int64_t)(int32_t)((x >= (ST)-0x1p31) & (x < (ST)0x1p31) ? x : (ST)0);         \
    memcpy(db + i * (int64_t)sizeof(DT), &r, sizeof r);                                             \
  }
#define MN__F2I_DST(ST)                                                                             \
  switch (D) {                                                                                      \
    case MN_DTYPE_INT8: case MN_DTYPE_UINT8: MN__F2I_LOOP(ST, uint8_t) break;                       \
    case MN_DTYPE_INT16: case MN_DTYPE_UINT16: MN__F2I_LOOP(ST, uint16_t) break;                    \
    case MN_DTYPE_INT32: case MN_DTYPE_UINT32: MN__F2I_LOOP(ST, uint32_t) break;                    \
    default: MN__F2I_LOOP(ST, uint64_t) break;                                                      \
  }
__attribute__((always_inline)) static inline void f2i_dense(int D, int64_t di, int S, int64_t si, char *d, const char *s, int64_t n) {
  for (int64_t b = 0; b < n; b += MN__F2I_BLOCK) {
    const int64_t m = n - b < MN__F2I_BLOCK ? n - b : MN__F2I_BLOCK;
    const char *sb = s + b * si;
    char *db = d + b * di;
    /* first the check (reads only: in-place casts read each element before
     * writing it), then one path for the whole block */
    int all = 1;
    for (int64_t i = 0; i < m; i++) {
      if (S == MN_DTYPE_FLOAT32) {
        float x;
        memcpy(&x, sb + i * 4, 4);
        all &= (x >= -0x1p31f) & (x < 0x1p31f);
      } else {
        double x;
        memcpy(&x, sb + i * 8, 8);
        all &= (x >= -0x1p31) & (x < 0x1p31);
      }
    }
    if (!all) { /* out of int32's range or NaN somewhere: saturate element by element */
      for (int64_t i = 0; i < m; i++) mn__cast_elem(D, db + i * di, S, sb + i * si);
    } else if (S == MN_DTYPE_FLOAT32) {
      MN__F2I_DST(float)
    } else {
      MN__F2I_DST(double)
    }
  }
}

#define MN__CV_DEF(D, DSIZE, S, SSIZE)                                                             \
  MN__CLONES static void cv_##D##_##S(char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n) {      \
    enum { DI = DSIZE, SI = SSIZE };                         \
    if (dstep == DI && sstep == SI && f2i_fast(MN_DTYPE_##D, MN_DTYPE_##S)) {                      \
      f2i_dense(MN_DTYPE_##D, DI, MN_DTYPE_##S, SI, d, s, n);                                              \
    } else if (dstep == DI && sstep == SI) {                                                       \
      for (int64_t i = 0; i < n; i++) mn__cast_elem(MN_DTYPE_##D, d + i * DI, MN_DTYPE_##S, s + i * SI); \
    } else {                                                                                       \
      for (int64_t i = 0; i < n; i++) mn__cast_elem(MN_DTYPE_##D, d + i * dstep, MN_DTYPE_##S, s + i * sstep); \
    }                                                                                              \
  }

MN__DT_PAIRS(MN__CV_DEF)

/* The element-row converter of a dtype pair: n elements, byte steps. */
typedef void (*cast_row_fn)(char *dst, int64_t dstep, const char *src, int64_t sstep, int64_t n);

#define MN__CV_ENTRY(D, DSIZE, S, SSIZE) [MN_DTYPE_##D][MN_DTYPE_##S] = cv_##D##_##S,
static const cast_row_fn cv_table[MN_DTYPE_COUNT][MN_DTYPE_COUNT] = {MN__DT_PAIRS(MN__CV_ENTRY)};

/* ---- same-dtype fills by item size (rows: mn__copy_row, kernels/strided.h) ---- */

#define MN__FILL_CASE(N)                                                   \
  case N: {                                                                \
    unsigned char v[N];                                                    \
    memcpy(v, pat, N);                                                     \
    for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, v, N);           \
    return;                                                                \
  }

/* stream: the whole fill is large enough for streaming stores (stream_stores). */
static void fill_row(char *d, int64_t dstep, int64_t n, size_t item, const unsigned char *pat, bool stream) {
  if (item == 1 && dstep == 1) {
    memset(d, pat[0], (size_t)n);
    return;
  }
#if defined(__SSE2__)
  if (dstep == (int64_t)item && n * dstep >= 8192 && 16 % item == 0) {
    /* dense: aligned 16-byte stores of the pattern, streaming ones (no read
     * for ownership, not left in the cache) when the fill is large */
    size_t total = (size_t)n * item, head = (16 - ((uintptr_t)d & 15)) & 15, k;
    unsigned char wide[16];
    for (k = 0; k < head; k++) d[k] = (char)pat[k % item];
    for (k = 0; k < 16; k++) wide[k] = pat[(head + k) % item];
    __m128i w = _mm_loadu_si128((const __m128i *)wide);
    size_t body = (total - head) & ~(size_t)15;
    if (stream) {
      for (k = 0; k < body; k += 16) _mm_stream_si128((__m128i *)(d + head + k), w);
      _mm_sfence();
    } else {
      for (k = 0; k < body; k += 16) _mm_store_si128((__m128i *)(d + head + k), w);
    }
    for (k = head + body; k < total; k++) d[k] = (char)pat[k % item];
    return;
  }
#endif
  if (dstep == (int64_t)item && n * dstep >= 8192 && 4096 % item == 0) {
    /* dense: a 4 KiB block of the pattern, copied out of L1 */
    _Alignas(64) unsigned char blk[4096];
    for (size_t k = 0; k < sizeof blk; k += item) memcpy(blk + k, pat, item);
    size_t total = (size_t)n * item, done = 0;
    for (; done + sizeof blk <= total; done += sizeof blk) memcpy(d + done, blk, sizeof blk);
    memcpy(d + done, blk, total - done);
    return;
  }
  switch (item) {
    MN__FILL_CASE(1)
    MN__FILL_CASE(2)
    MN__FILL_CASE(4)
    MN__FILL_CASE(8)
    MN__FILL_CASE(16)
    default:
      for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, pat, item);
  }
}

/* A cast row from a 1-byte source through the 256-entry table. */
#define MN__LUT_CASE(N)                                                                  \
  case N:                                                                                \
    for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, lut + (size_t)s[i * sstep] * N, N); \
    return;

static void lut_row(const unsigned char *lut, size_t di, char *d, int64_t dstep, const unsigned char *s,
                    int64_t sstep, int64_t n) {
  switch (di) {
    MN__LUT_CASE(1)
    MN__LUT_CASE(2)
    MN__LUT_CASE(4)
    MN__LUT_CASE(8)
    MN__LUT_CASE(16)
    default: break;
  }
}

/* ---- the work of one plan, in tasks --------------------------------------------- */

typedef struct exec_ctx {
  const mn__plan_t *p;
  const unsigned char *pattern;
  bool stream_fill; /* fills: streaming stores (stream_stores) */
  bool stream_copy; /* same-dtype contiguous copies: streaming stores */
  cast_row_fn cv; /* NULL: same dtype */
  const unsigned char *lut; /* 1-byte sources: the 256 converted values (dst items) */
  int64_t ntasks;
  int64_t units;      /* rows (generic), elements (contig), row panels or casting tiles x batch (transpose) */
  /* transpose */
  mn__tr2d_t tr;                  /* the 2-d transpose over dims 0 and tdim at batch index 0 */
  int64_t tb;                     /* casting: tile edge in elements; else panel rows */
  int64_t jblocks;                /* casting: tiles along dim tdim; else panels along dim 0 */
  int nouter;                     /* dims other than 0 and tdim */
  int64_t osize[MN_MAX_DIMS], ods[MN_MAX_DIMS], oss[MN_MAX_DIMS];
} exec_ctx;

/* One cast row: the table for 1-byte sources, the converter otherwise. */
static void cast_row(const struct exec_ctx *c, char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n);

static void range_of(const exec_ctx *c, int64_t task, int64_t *b, int64_t *e) {
  int64_t per = c->units / c->ntasks, extra = c->units % c->ntasks;
  *b = task * per + (task < extra ? task : extra);
  *e = *b + per + (task < extra ? 1 : 0);
}

static void cast_row(const exec_ctx *c, char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n) {
  if (c->lut)
    lut_row(c->lut, c->p->dst_item, d, dstep, (const unsigned char *)s, sstep, n);
  else
    c->cv(d, dstep, s, sstep, n);
}

/* A same-dtype contiguous piece: memcpy, or when the whole copy is past the
 * last-level cache (stream_stores), dst's 64-byte lines wholly inside with
 * 16-byte streaming stores: no read for ownership of dst lines that the copy
 * overwrites whole (glibc's memcpy streams only from its own threshold, here
 * 192 MiB, computed from the package's cache size). */
static void copy_piece(char *d, const char *s, size_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 4096) {
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
      __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
      __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
      __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
      _mm_stream_si128((__m128i *)(void *)d, a);
      _mm_stream_si128((__m128i *)(void *)(d + 16), b);
      _mm_stream_si128((__m128i *)(void *)(d + 32), x);
      _mm_stream_si128((__m128i *)(void *)(d + 48), y);
    }
    memcpy(d, s, n);
    _mm_sfence(); /* the streamed lines are visible before the task ends */
    return;
  }
#endif
  (void)stream;
  memcpy(d, s, n);
}

static void contig_task(void *arg, int64_t task) {
  const exec_ctx *c = arg;
  const mn__plan_t *p = c->p;
  int64_t b, e;
  range_of(c, task, &b, &e);
  char *d = p->dst + b * (int64_t)p->dst_item;
  if (p->kind == MN__PLAN_FILL) {
    fill_row(d, (int64_t)p->dst_item, e - b, p->dst_item, c->pattern, c->stream_fill);
    return;
  }
  const char *s = p->src + b * (int64_t)p->src_item;
  if (c->cv)
    cast_row(c, d, (int64_t)p->dst_item, s, (int64_t)p->src_item, e - b);
  else
    copy_piece(d, s, (size_t)(e - b) * p->dst_item, c->stream_copy);
}

/* Rows [b, e) of dim 0, walking dims 1.. incrementally. */
static void rows_task(void *arg, int64_t task) {
  const exec_ctx *c = arg;
  const mn__plan_t *p = c->p;
  int64_t b, e;
  range_of(c, task, &b, &e);
  if (b >= e) return;
  int64_t di = (int64_t)p->dst_item, si = (int64_t)p->src_item;
  int64_t idx[MN_MAX_DIMS], od = 0, os = 0, rest = b;
  for (int k = 1; k < p->ndim; k++) {
    idx[k] = rest % p->sizes[k];
    rest /= p->sizes[k];
    od += idx[k] * p->dst_strides[k];
    os += idx[k] * p->src_strides[k];
  }
  int64_t n0 = p->sizes[0], dstep = p->dst_strides[0] * di, sstep = p->src_strides[0] * si;
  for (int64_t r = b;;) {
    char *d = p->dst + od * di;
    if (p->kind == MN__PLAN_FILL)
      fill_row(d, dstep, n0, p->dst_item, c->pattern, c->stream_fill);
    else if (c->cv)
      cast_row(c, d, dstep, p->src + os * si, sstep, n0);
    else
      mn__copy_row(d, dstep, p->src + os * si, sstep, n0, p->dst_item);
    if (++r == e) return;
    for (int k = 1; k < p->ndim; k++) {
      od += p->dst_strides[k];
      os += p->src_strides[k];
      if (++idx[k] < p->sizes[k]) break;
      od -= p->sizes[k] * p->dst_strides[k];
      os -= p->sizes[k] * p->src_strides[k];
      idx[k] = 0;
    }
  }
}


/* The dst and src element offsets of batch index o over the outer dims. */
static void outer_offsets(const exec_ctx *c, int64_t o, int64_t *od, int64_t *os) {
  *od = *os = 0;
  for (int k = 0; k < c->nouter; k++) {
    int64_t x = o % c->osize[k];
    o /= c->osize[k];
    *od += x * c->ods[k];
    *os += x * c->oss[k];
  }
}

/* Same dtype: units are panels of src rows (mn__tr_panel_rows) x batch
 * index; each is one mn__cpu_transpose_2d call over all cols. */
static void transpose_task(void *arg, int64_t task) {
  const exec_ctx *c = arg;
  const mn__plan_t *p = c->p;
  int64_t b, e;
  range_of(c, task, &b, &e);
  int64_t di = (int64_t)p->dst_item, si = (int64_t)p->src_item, ni = p->sizes[0];
  for (int64_t u = b; u < e; u++) {
    int64_t pb = u % c->jblocks, od, os;
    outer_offsets(c, u / c->jblocks, &od, &os);
    mn__tr2d_t t = c->tr;
    t.dst += od * di;
    t.src += os * si;
    int64_t r0 = pb * c->tb;
    mn__cpu_transpose_2d(&t, r0, r0 + c->tb < ni ? r0 + c->tb : ni);
  }
}

/* Casting: tiles of tb x tb; src rows are cast into a 16 KiB buffer (dst
 * items), which is then transposed into dst. */
static void transpose_cast_task(void *arg, int64_t task) {
  const exec_ctx *c = arg;
  const mn__plan_t *p = c->p;
  int64_t b, e;
  range_of(c, task, &b, &e);
  int64_t di = (int64_t)p->dst_item, si = (int64_t)p->src_item;
  int64_t ni = p->sizes[0], nj = p->sizes[p->tdim];
  int64_t dsj = p->dst_strides[p->tdim] * di, ssi = p->src_strides[0] * si;
  _Alignas(64) unsigned char buf[64 * 64 * 4];
  for (int64_t u = b; u < e; u++) {
    int64_t jb = u % c->jblocks, od, os;
    outer_offsets(c, u / c->jblocks, &od, &os);
    int64_t j0 = jb * c->tb, jn = nj - j0 < c->tb ? nj - j0 : c->tb;
    char *dbase = p->dst + od * di + j0 * dsj;
    const char *sbase = p->src + os * si + j0 * si;
    for (int64_t i0 = 0; i0 < ni; i0 += c->tb) {
      int64_t in = ni - i0 < c->tb ? ni - i0 : c->tb;
      const char *s = sbase + i0 * ssi;
      for (int64_t i = 0; i < in; i++) cast_row(c, (char *)buf + i * c->tb * di, di, s + i * ssi, si, jn);
      mn__tr2d_t t = c->tr;
      t.dst = dbase + i0 * di;
      t.src = (const char *)buf;
      t.sld = c->tb * di;
      t.rows = in;
      t.cols = jn;
      mn__cpu_transpose_2d(&t, 0, in);
    }
  }
}

void mn__cpu_exec(const mn__plan_t *p, const void *pattern) {
  if (p->numel == 0) return;
  exec_ctx c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.pattern = pattern;
  if (p->kind != MN__PLAN_FILL && p->dst_dtype != p->src_dtype) c.cv = cv_table[p->dst_dtype][p->src_dtype];
  _Alignas(64) unsigned char lut[256 * 16];
  if (c.cv && p->src_item == 1 && p->numel >= 4096) { /* the same converter, once per byte value */
    unsigned char all[256];
    for (int k = 0; k < 256; k++) all[k] = (unsigned char)k;
    c.cv((char *)lut, (int64_t)p->dst_item, (const char *)all, 1, 256);
    c.lut = lut;
  }
  int64_t bytes = p->numel * (int64_t)(p->dst_item + (p->kind == MN__PLAN_FILL ? 0 : p->src_item));
  c.stream_fill = p->kind == MN__PLAN_FILL && stream_stores(bytes);
  c.stream_copy = p->kind == MN__PLAN_CONTIG && !c.cv && stream_stores(bytes);
  int64_t want = bytes < MN__PAR_BYTES ? 1 : bytes / MN__TASK_BYTES;
  void (*fn)(void *, int64_t);
  bool contig = p->kind == MN__PLAN_CONTIG ||
                (p->kind == MN__PLAN_FILL && p->ndim == 1 && p->dst_strides[0] == 1);
  if (contig) {
    c.units = p->numel;
    fn = contig_task;
  } else if (p->kind == MN__PLAN_TRANSPOSE) {
    /* dst[i + j * dsj] = src[i * ssi + j] over dims 0 (i) and tdim (j), the
     * other dims a batch; streaming stores when dst is large */
    c.tr.dst = p->dst;
    c.tr.src = p->src;
    c.tr.dld = p->dst_strides[p->tdim] * (int64_t)p->dst_item;
    c.tr.sld = p->src_strides[0] * (int64_t)p->src_item;
    c.tr.rows = p->sizes[0];
    c.tr.cols = p->sizes[p->tdim];
    c.tr.item = p->dst_item;
    c.tr.isa = mn__tr_best_isa();
    c.tr.stream = stream_stores(p->numel * (int64_t)(p->dst_item + p->src_item));
    if (c.cv) { /* tiles of tb x tb along j (tb * tb * dst_item <= 16 KiB) */
      c.tb = p->dst_item <= 4 ? 64 : 32;
      c.jblocks = (p->sizes[p->tdim] + c.tb - 1) / c.tb;
      fn = transpose_cast_task;
    } else { /* panels of tb src rows (i) */
      c.tb = mn__tr_panel_rows(p->dst_item, c.tr.stream);
      c.jblocks = (p->sizes[0] + c.tb - 1) / c.tb;
      fn = transpose_task;
    }
    for (int k = 1; k < p->ndim; k++) {
      if (k == p->tdim) continue;
      c.osize[c.nouter] = p->sizes[k];
      c.ods[c.nouter] = p->dst_strides[k];
      c.oss[c.nouter] = p->src_strides[k];
      c.nouter++;
    }
    c.units = c.jblocks * (p->numel / (p->sizes[0] * p->sizes[p->tdim]));
  } else {
    c.units = p->numel / p->sizes[0];
    fn = rows_task;
  }
  /* same-dtype contiguous copies: one piece per thread (copy_piece: memcpy,
   * or streaming stores past the cache; glibc's memcpy takes its own
   * streaming path only on pieces past its threshold) */
  if (contig && p->kind == MN__PLAN_CONTIG && !c.cv && want > 1) {
    int64_t th = mn__pool_threads();
    want = want < th ? want : th;
  }
  c.ntasks = want < c.units ? want : c.units;
  if (c.ntasks < 1) c.ntasks = 1;
  if (c.ntasks == 1)
    fn(&c, 0);
  else
    mn__pool_run(fn, &c, c.ntasks);
}
