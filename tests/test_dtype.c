/* tests/test_dtype.c: the dtype table, name parsing, scalar conversions, and the
 * narrow floats checked exhaustively and against a slow nearest-value reference. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mn_test.h"

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* xorshift64*: a fixed-seed generator, so runs are reproducible. */
static uint64_t rng_next(void) {
  uint64_t x = rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng_state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static double f64_from(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* ---- the dtype table ------------------------------------------------------ */

typedef struct expect_row {
  mn_dtype dtype;
  const char *name;
  size_t itemsize;
  mn_dtype_kind kind;
  bool is_signed;
} expect_row;

/* Written out by hand (not from MN_DTYPE_MAP) so the table is checked. */
static const expect_row expected_rows[] = {
    {MN_DTYPE_BOOL, "bool", 1, MN_KIND_BOOL, false},
    {MN_DTYPE_UINT8, "uint8", 1, MN_KIND_UINT, false},
    {MN_DTYPE_INT8, "int8", 1, MN_KIND_INT, true},
    {MN_DTYPE_INT16, "int16", 2, MN_KIND_INT, true},
    {MN_DTYPE_INT32, "int32", 4, MN_KIND_INT, true},
    {MN_DTYPE_INT64, "int64", 8, MN_KIND_INT, true},
    {MN_DTYPE_FLOAT16, "float16", 2, MN_KIND_FLOAT, true},
    {MN_DTYPE_BFLOAT16, "bfloat16", 2, MN_KIND_FLOAT, true},
    {MN_DTYPE_FLOAT32, "float32", 4, MN_KIND_FLOAT, true},
    {MN_DTYPE_FLOAT64, "float64", 8, MN_KIND_FLOAT, true},
    {MN_DTYPE_COMPLEX64, "complex64", 8, MN_KIND_COMPLEX, true},
    {MN_DTYPE_COMPLEX128, "complex128", 16, MN_KIND_COMPLEX, true},
    {MN_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1, MN_KIND_FLOAT, true},
    {MN_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1, MN_KIND_FLOAT, true},
    {MN_DTYPE_UINT16, "uint16", 2, MN_KIND_UINT, false},
    {MN_DTYPE_UINT32, "uint32", 4, MN_KIND_UINT, false},
    {MN_DTYPE_UINT64, "uint64", 8, MN_KIND_UINT, false},
    {MN_DTYPE_QINT8, "qint8", 1, MN_KIND_QUANTIZED, true},
    {MN_DTYPE_QUINT8, "quint8", 1, MN_KIND_QUANTIZED, false},
    {MN_DTYPE_QINT32, "qint32", 4, MN_KIND_QUANTIZED, true},
    {MN_DTYPE_QUINT4X2, "quint4x2", 1, MN_KIND_QUANTIZED, false},
    {MN_DTYPE_QUINT2X4, "quint2x4", 1, MN_KIND_QUANTIZED, false},
};
#define N_ROWS ((int)(sizeof expected_rows / sizeof expected_rows[0]))

MN_TEST(test_table_entries) {
  MN_CHECK(N_ROWS == MN_DTYPE_COUNT);
  for (int i = 0; i < N_ROWS; ++i) {
    const expect_row *r = &expected_rows[i];
    const mn_dtype_info_t *info = mn_dtype_info(r->dtype);
    MN_CHECK(info != NULL);
    if (info == NULL) continue;
    MN_CHECK(info->dtype == r->dtype);
    MN_CHECK(strcmp(info->name, r->name) == 0);
    MN_CHECK(info->itemsize == r->itemsize);
    MN_CHECK(info->kind == r->kind);
    MN_CHECK(info->is_signed == r->is_signed);
    MN_CHECK(mn_dtype_is_valid(r->dtype));
    MN_CHECK(strcmp(mn_dtype_name(r->dtype), r->name) == 0);
    MN_CHECK(mn_dtype_itemsize(r->dtype) == r->itemsize);
    MN_CHECK(mn_dtype_is_floating(r->dtype) == (r->kind == MN_KIND_FLOAT));
    MN_CHECK(mn_dtype_is_complex(r->dtype) == (r->kind == MN_KIND_COMPLEX));
  }
  /* Values are stable. */
  MN_CHECK(MN_DTYPE_BOOL == 0 && MN_DTYPE_FLOAT32 == 8 && MN_DTYPE_FLOAT8_E4M3FN == 12 &&
           MN_DTYPE_UINT64 == 16);
}

MN_TEST(test_invalid_dtypes) {
  const int bad[] = {-1, MN_DTYPE_COUNT, MN_DTYPE_COUNT + 1, 1000, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    mn_dtype d = (mn_dtype)bad[i];
    MN_CHECK(mn_dtype_info(d) == NULL);
    MN_CHECK(!mn_dtype_is_valid(d));
    MN_CHECK(strcmp(mn_dtype_name(d), "invalid") == 0);
    MN_CHECK(mn_dtype_itemsize(d) == 0);
    MN_CHECK(!mn_dtype_is_floating(d));
    MN_CHECK(!mn_dtype_is_complex(d));
  }
}

/* ---- the one dtype table (mnemo/dtype_table.h) ---------------------------- */

typedef struct table_row {
  mn_dtype sym; /* MN_DTYPE_##SFX */
  int val;
  const char *name;
  size_t size;
  mn_dtype_kind kind;
  int fmt;
  mn_dtype real;
  int dl_code, dl_bits, dl_lanes;
  const char *st_name;
  double fmax;
  int has_inf;
} table_row;

#define TABLE_ROW(A, sfx, val, nm, size, knd, fmt, real, dlc, dlb, dll, st, fmax, inf) \
  {MN_DTYPE_##sfx, val, nm, size, knd, fmt, MN_DTYPE_##real, dlc, dlb, dll, st, fmax, inf},
static const table_row table_rows[] = {MN_DTYPE_TABLE(TABLE_ROW, ~)};
#undef TABLE_ROW
#define N_TABLE ((int)(sizeof table_rows / sizeof table_rows[0]))

/* Adds one unit in the last place to a little-endian integer of n bytes. */
static void bytes_increment(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n && ++p[i] == 0; i++) {
  }
}

/* Every row's columns agree with what the library does with that dtype: its
 * info and name parsing, scalar bytes (largest finite value, infinities), the
 * real part of complex views, DLPack export and import, safetensors save and
 * load. A row with a wrong or missing column fails here. */
MN_TEST(test_table_columns) {
  MN_CHECK(N_TABLE == MN_DTYPE_COUNT && MN_DTYPE_TABLE_ROWS == MN_DTYPE_COUNT);
  mn_device_t cpu = mn_device_cpu();
  for (int i = 0; i < N_TABLE; ++i) {
    const table_row *r = &table_rows[i];
    mn_test_case = r->name;
    MN_CHECK(r->val == i && (int)r->sym == r->val); /* value order, dense */
    const mn_dtype d = r->sym;
    const mn_dtype_info_t *info = mn_dtype_info(d);
    MN_CHECK(info != NULL);
    if (info == NULL) continue;
    MN_CHECK(strcmp(info->name, r->name) == 0 && info->itemsize == r->size && info->kind == r->kind);
    mn_dtype parsed = MN_DTYPE_COUNT;
    char torch_name[64];
    snprintf(torch_name, sizeof torch_name, "torch.%s", r->name);
    MN_CHECK(mn_dtype_parse(r->name, &parsed) == MN_OK && parsed == d);
    MN_CHECK(mn_dtype_parse(torch_name, &parsed) == MN_OK && parsed == d);

    /* float format, largest finite value, infinities */
    const bool floating = r->kind == MN_KIND_FLOAT || r->kind == MN_KIND_COMPLEX;
    MN_CHECK(floating == (r->fmt != MN_DTYPE_FMT_NONE));
    MN_CHECK(floating == (r->fmax > 0.0));
    if (floating) {
      const size_t part = r->kind == MN_KIND_COMPLEX ? r->size / 2 : r->size;
      unsigned char b[16] = {0};
      mn_scalar_t back;
      MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_float(r->fmax), d, b));
      MN_CHECK_OK(mn_scalar_from_bytes(d, b, &back));
      const double got = r->kind == MN_KIND_COMPLEX ? back.v.c[0] : back.v.f;
      MN_CHECK(got == r->fmax);     /* representable */
      bytes_increment(b, part);     /* the next encoding up is inf or NaN */
      MN_CHECK_OK(mn_scalar_from_bytes(d, b, &back));
      const double next = r->kind == MN_KIND_COMPLEX ? back.v.c[0] : back.v.f;
      MN_CHECK(!isfinite(next));
      MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_float(INFINITY), d, b));
      MN_CHECK_OK(mn_scalar_from_bytes(d, b, &back));
      const double inf = r->kind == MN_KIND_COMPLEX ? back.v.c[0] : back.v.f;
      MN_CHECK((isinf(inf) != 0) == (r->has_inf != 0));
    } else {
      MN_CHECK(r->has_inf == 0);
    }

    /* the real part */
    const int64_t two = 2;
    mn_view_t *v = NULL;
    MN_CHECK_OK(mn_view_empty(cpu, d, 1, &two, &v));
    if (v == NULL) continue;
    const bool quantized = r->kind == MN_KIND_QUANTIZED;
    if (quantized) /* quantized views are written by quantize only */
      MN_CHECK(mn_view_fill(v, mn_scalar_int(0), NULL) == MN_ERR_INVALID_ARGUMENT);
    else
      MN_CHECK_OK(mn_view_fill(v, mn_scalar_int(0), NULL));
    if (r->kind == MN_KIND_COMPLEX) {
      mn_view_t *re = NULL;
      MN_CHECK_OK(mn_view_real(v, &re));
      MN_CHECK(re != NULL && mn_view_dtype(re) == r->real);
      mn_view_destroy(re);
      MN_CHECK(2 * mn_dtype_itemsize(r->real) == r->size && table_rows[r->real].fmt == r->fmt);
    } else {
      MN_CHECK(r->real == d);
    }

    /* DLPack: the export carries the row's type, the import gives the dtype back */
    DLManagedTensor *t = NULL;
    if (r->dl_bits == 0) /* no DLPack type (the quantized rows): refused */
      MN_CHECK(mn_view_to_dlpack(v, &t) == MN_ERR_NOT_SUPPORTED && t == NULL);
    else
      MN_CHECK_OK(mn_view_to_dlpack(v, &t));
    if (t != NULL) {
      MN_CHECK(t->dl_tensor.dtype.code == r->dl_code && t->dl_tensor.dtype.bits == r->dl_bits &&
               t->dl_tensor.dtype.lanes == r->dl_lanes);
      mn_view_t *imported = NULL;
      MN_CHECK_OK(mn_view_from_dlpack(t, &imported)); /* takes t */
      MN_CHECK(imported != NULL && mn_view_dtype(imported) == d);
      mn_view_destroy(imported);
    }

    /* safetensors: the row's name in the header, and back; none: refused */
    const char *names[1] = {"x"};
    const mn_view_t *views[1] = {v};
    void *data = NULL;
    size_t size = 0;
    mn_status st = mn_safetensors_save_buffer(1, names, views, 0, NULL, NULL, &data, &size);
    if (r->st_name == NULL) {
      MN_CHECK(st == MN_ERR_NOT_SUPPORTED);
    } else {
      MN_CHECK(st == MN_OK);
      char want[64];
      snprintf(want, sizeof want, "\"dtype\":\"%s\"", r->st_name);
      MN_CHECK(data != NULL && size > 8 && memmem(data, size, want, strlen(want)) != NULL);
      mn_named_views_t *nv = NULL;
      MN_CHECK_OK(mn_safetensors_load_buffer(data, size, cpu, &nv));
      MN_CHECK(nv != NULL && nv->count == 1 && mn_view_dtype(nv->views[0]) == d);
      mn_named_views_free(nv);
    }
    free(data);
    mn_view_destroy(v);
  }
  mn_test_case = "test_table_columns";
  /* names and safetensors names are unique */
  for (int i = 0; i < N_TABLE; ++i)
    for (int j = i + 1; j < N_TABLE; ++j) {
      MN_CHECK(strcmp(table_rows[i].name, table_rows[j].name) != 0);
      MN_CHECK(!table_rows[i].st_name || !table_rows[j].st_name ||
               strcmp(table_rows[i].st_name, table_rows[j].st_name) != 0);
    }
}

/* ---- parsing -------------------------------------------------------------- */

static void check_parses(const char *name, mn_dtype want) {
  mn_dtype got = (mn_dtype)-7;
  mn_status st = mn_dtype_parse(name, &got);
  mn_test_checks++;
  if (st != MN_OK || got != want) {
    mn_test_failures++;
    fprintf(stderr, "[%s] parse(\"%s\") -> %s, %d; wanted %s\n", mn_test_case, name,
            mn_status_name(st), (int)got, mn_dtype_name(want));
  }
}

/* Parses `name` as written, upper-cased, mixed-case and with "torch."/"TORCH.". */
static void check_parses_all_forms(const char *name, mn_dtype want) {
  char buf[96];
  size_t n = strlen(name);
  check_parses(name, want);
  for (size_t i = 0; i <= n; ++i) buf[i] = (char)((name[i] >= 'a' && name[i] <= 'z') ? name[i] - 32 : name[i]);
  check_parses(buf, want);
  for (size_t i = 0; i <= n; ++i) buf[i] = (char)((i % 2 == 0 && name[i] >= 'a' && name[i] <= 'z') ? name[i] - 32 : name[i]);
  check_parses(buf, want);
  snprintf(buf, sizeof buf, "torch.%s", name);
  check_parses(buf, want);
  snprintf(buf, sizeof buf, "TORCH.%s", name);
  check_parses(buf, want);
  snprintf(buf, sizeof buf, "Torch.%s", name);
  check_parses(buf, want);
}

MN_TEST(test_parse_canonical) {
  for (int i = 0; i < N_ROWS; ++i) {
    check_parses_all_forms(expected_rows[i].name, expected_rows[i].dtype);
    /* name -> dtype -> name */
    mn_dtype d;
    MN_CHECK_OK(mn_dtype_parse(mn_dtype_name(expected_rows[i].dtype), &d));
    MN_CHECK(d == expected_rows[i].dtype);
  }
}

MN_TEST(test_parse_aliases) {
  static const struct {
    const char *name;
    mn_dtype dtype;
  } aliases[] = {
      {"float", MN_DTYPE_FLOAT32},           {"double", MN_DTYPE_FLOAT64},
      {"half", MN_DTYPE_FLOAT16},            {"long", MN_DTYPE_INT64},
      {"int", MN_DTYPE_INT32},               {"short", MN_DTYPE_INT16},
      {"char", MN_DTYPE_INT8},               {"byte", MN_DTYPE_UINT8},
      {"cfloat", MN_DTYPE_COMPLEX64},        {"complex_float", MN_DTYPE_COMPLEX64},
      {"cdouble", MN_DTYPE_COMPLEX128},      {"complex_double", MN_DTYPE_COMPLEX128},
      {"bf16", MN_DTYPE_BFLOAT16},           {"f16", MN_DTYPE_FLOAT16},
      {"fp16", MN_DTYPE_FLOAT16},            {"f32", MN_DTYPE_FLOAT32},
      {"fp32", MN_DTYPE_FLOAT32},            {"f64", MN_DTYPE_FLOAT64},
      {"fp64", MN_DTYPE_FLOAT64},            {"i8", MN_DTYPE_INT8},
      {"i16", MN_DTYPE_INT16},               {"i32", MN_DTYPE_INT32},
      {"i64", MN_DTYPE_INT64},               {"u8", MN_DTYPE_UINT8},
      {"u16", MN_DTYPE_UINT16},              {"u32", MN_DTYPE_UINT32},
      {"u64", MN_DTYPE_UINT64},              {"c64", MN_DTYPE_COMPLEX64},
      {"c128", MN_DTYPE_COMPLEX128},         {"fp8_e4m3", MN_DTYPE_FLOAT8_E4M3FN},
      {"fp8_e4m3fn", MN_DTYPE_FLOAT8_E4M3FN}, {"e4m3", MN_DTYPE_FLOAT8_E4M3FN},
      {"e4m3fn", MN_DTYPE_FLOAT8_E4M3FN},    {"float8_e4m3", MN_DTYPE_FLOAT8_E4M3FN},
      {"f8e4m3", MN_DTYPE_FLOAT8_E4M3FN},    {"f8e4m3fn", MN_DTYPE_FLOAT8_E4M3FN},
      {"fp8_e5m2", MN_DTYPE_FLOAT8_E5M2},    {"e5m2", MN_DTYPE_FLOAT8_E5M2},
      {"f8e5m2", MN_DTYPE_FLOAT8_E5M2},
  };
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; ++i)
    check_parses_all_forms(aliases[i].name, aliases[i].dtype);
  check_parses("BFloat16", MN_DTYPE_BFLOAT16);
  check_parses("torch.Float8_E4M3FN", MN_DTYPE_FLOAT8_E4M3FN);
}

MN_TEST(test_parse_bad_names) {
  static const char *const bad[] = {
      "",          "float33",       "torch.",    "TORCH.",       "chalf",       "b8",
      "float8_e4m3fnuz", "float8_e5m2fnuz", " float", "float ", "torch.torch.float",
      "torch",     "torch.f",       "complex32", "int128",       "uint",        "quint16",
      "fp8",       "f8",            "floa",      "float32x",     "torch float", "bool\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\"", bad[i]);
    mn_dtype out = (mn_dtype)12345;
    MN_CHECK_ERR(mn_dtype_parse(bad[i], &out), MN_ERR_INVALID_ARGUMENT, needle);
    MN_CHECK(out == (mn_dtype)12345);
    MN_CHECK(mn_last_status() == MN_ERR_INVALID_ARGUMENT);
    MN_CHECK(strstr(mn_last_error(), "mn_dtype_parse") != NULL);
  }
  mn_dtype out = MN_DTYPE_UINT32;
  MN_CHECK_ERR(mn_dtype_parse(NULL, &out), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK(out == MN_DTYPE_UINT32);
  MN_CHECK_ERR(mn_dtype_parse("float", NULL), MN_ERR_INVALID_ARGUMENT, "NULL");

  /* A very long name is quoted (truncated) without overflowing anything. */
  char longname[400];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  MN_CHECK_ERR(mn_dtype_parse(longname, &out), MN_ERR_INVALID_ARGUMENT, "\"xxxxxxxx");
  MN_CHECK(out == MN_DTYPE_UINT32);
}

/* ---- the slow reference for narrow floats --------------------------------- */

typedef struct ref_format {
  const char *name;
  mn_dtype dtype;
  int mbits, ebits, bias;
  unsigned max_finite; /* encoding of the largest finite magnitude */
  bool saturate;       /* overflow gives max_finite instead of inf */
  unsigned inf;        /* encoding of +inf (unused when saturating) */
  unsigned nan;        /* the NaN the encoder produces, sign clear */
  unsigned sign;
  unsigned (*encode)(float);
  float (*decode)(unsigned);
  double table[1 << 15]; /* value of encodings 0 .. max_finite + 1 (the last is virtual) */
} ref_format;

static unsigned enc_half(float f) { return mn_float_to_half(f); }
static float dec_half(unsigned v) { return mn_half_to_float((uint16_t)v); }
static unsigned enc_bf16(float f) { return mn_float_to_bfloat16(f); }
static float dec_bf16(unsigned v) { return mn_bfloat16_to_float((uint16_t)v); }
static unsigned enc_e4m3(float f) { return mn_float_to_e4m3fn(f); }
static float dec_e4m3(unsigned v) { return mn_e4m3fn_to_float((uint8_t)v); }
static unsigned enc_e5m2(float f) { return mn_float_to_e5m2(f); }
static float dec_e5m2(unsigned v) { return mn_e5m2_to_float((uint8_t)v); }

static ref_format fmt_half = {"float16", MN_DTYPE_FLOAT16, 10, 5, 15, 0x7BFF, false, 0x7C00, 0x7E00,
                              0x8000, enc_half, dec_half, {0}};
static ref_format fmt_bf16 = {"bfloat16", MN_DTYPE_BFLOAT16, 7, 8, 127, 0x7F7F, false, 0x7F80, 0x7FC0,
                              0x8000, enc_bf16, dec_bf16, {0}};
static ref_format fmt_e4m3 = {"float8_e4m3fn", MN_DTYPE_FLOAT8_E4M3FN, 3, 4, 7, 0x7E, true, 0, 0x7F,
                              0x80, enc_e4m3, dec_e4m3, {0}};
static ref_format fmt_e5m2 = {"float8_e5m2", MN_DTYPE_FLOAT8_E5M2, 2, 5, 15, 0x7B, false, 0x7C, 0x7F,
                              0x80, enc_e5m2, dec_e5m2, {0}};
static ref_format *const all_formats[] = {&fmt_half, &fmt_bf16, &fmt_e4m3, &fmt_e5m2};
#define N_FORMATS 4

/* The magnitude of a sign-cleared encoding from its fields, by ldexp. */
static double ref_field_value(const ref_format *F, unsigned k) {
  unsigned exp = k >> F->mbits;
  unsigned man = k & ((1u << F->mbits) - 1);
  if (exp == 0) return ldexp((double)man, 1 - F->bias - F->mbits);
  return ldexp((double)((1u << F->mbits) + man), (int)exp - F->bias - F->mbits);
}

static void ref_init(void) {
  for (int i = 0; i < N_FORMATS; ++i) {
    ref_format *F = all_formats[i];
    for (unsigned k = 0; k <= F->max_finite + 1; ++k) F->table[k] = ref_field_value(F, k);
  }
}

/* Whether an encoding is a NaN, for the decoding check. */
static bool ref_is_nan(const ref_format *F, unsigned v) {
  unsigned mag = v & (F->sign - 1);
  if (F->saturate) return mag == 0x7F; /* e4m3fn: only S.1111.111 */
  unsigned emask = ((1u << F->ebits) - 1) << F->mbits;
  return (mag & emask) == emask && (mag & ((1u << F->mbits) - 1)) != 0;
}

static bool ref_is_inf(const ref_format *F, unsigned v) {
  return !F->saturate && (v & (F->sign - 1)) == F->inf;
}

/* A magnitude to encode, compared exactly against doubles. */
typedef struct ref_mag {
  bool is_int;
  uint64_t u; /* when is_int */
  double d;   /* otherwise: finite, >= 0 */
} ref_mag;

static int cmp_mag(const ref_mag *a, double t) {
  if (!a->is_int) return a->d < t ? -1 : a->d > t ? 1 : 0;
  if (t >= 0x1p64) return -1;
  uint64_t ti = (uint64_t)t;          /* t >= 0 here: truncation is exact floor */
  double tf = t - (double)ti;         /* exact */
  if (a->u != ti) return a->u < ti ? -1 : 1;
  return tf > 0 ? -1 : 0;
}

/* Reference encoder: nearest of the sorted finite values, ties to the even
 * encoding; beyond the largest finite value the virtual next encoding stands
 * for overflow. */
static unsigned ref_encode_mag(const ref_format *F, bool neg, const ref_mag *a) {
  unsigned sign = neg ? F->sign : 0;
  unsigned top = F->max_finite + 1;
  unsigned over = F->saturate ? F->max_finite : F->inf;
  if (cmp_mag(a, F->table[top]) >= 0) return sign | over;
  unsigned lo = 0, hi = top; /* table[lo] <= a < table[hi] */
  while (hi - lo > 1) {
    unsigned mid = lo + (hi - lo) / 2;
    if (cmp_mag(a, F->table[mid]) >= 0) lo = mid;
    else hi = mid;
  }
  unsigned k;
  if (cmp_mag(a, F->table[lo]) == 0) {
    k = lo;
  } else {
    double midv = (F->table[lo] + F->table[hi]) / 2; /* exact: few significant bits */
    int c = cmp_mag(a, midv);
    k = c < 0 ? lo : c > 0 ? hi : ((lo & 1) == 0 ? lo : hi);
  }
  if (k == top) return sign | over;
  return sign | k;
}

static unsigned ref_encode_double(const ref_format *F, double x) {
  bool neg = signbit(x) != 0;
  if (isnan(x)) return (neg ? F->sign : 0) | F->nan;
  if (isinf(x)) return (neg ? F->sign : 0) | (F->saturate ? F->max_finite : F->inf);
  ref_mag a = {false, 0, fabs(x)};
  return ref_encode_mag(F, neg, &a);
}

static unsigned ref_encode_int(const ref_format *F, bool neg, uint64_t mag) {
  ref_mag a = {true, mag, 0};
  return ref_encode_mag(F, neg, &a);
}

/* The encoding through the scalar path (double input, no float in between). */
static unsigned scalar_encode(const ref_format *F, mn_scalar_t s) {
  uint8_t buf[16] = {0};
  if (mn_scalar_to_bytes(s, F->dtype, buf) != MN_OK) return 0xFFFFFFFFu;
  if (mn_dtype_itemsize(F->dtype) == 1) return buf[0];
  uint16_t v;
  memcpy(&v, buf, sizeof v);
  return v;
}

/* Counts and reports (the first few) mismatches of one kind. */
typedef struct mismatch_log {
  const char *what;
  long count;
} mismatch_log;

static void log_mismatch(mismatch_log *log, const ref_format *F, double x, unsigned got, unsigned want) {
  if (log->count++ < 8)
    fprintf(stderr, "[%s] %s %s(%a = %.17g) -> 0x%X, reference 0x%X\n", mn_test_case, log->what,
            F->name, x, x, got, want);
}

/* Checks the float encoder and the double (scalar) encoder on x. */
static void check_encode_float(const ref_format *F, float f, mismatch_log *lf, mismatch_log *ld) {
  unsigned want = ref_encode_double(F, (double)f);
  unsigned got = F->encode(f);
  if (got != want) log_mismatch(lf, F, (double)f, got, want);
  unsigned gotd = scalar_encode(F, mn_scalar_float((double)f));
  if (gotd != want) log_mismatch(ld, F, (double)f, gotd, want);
}

static void check_encode_double(const ref_format *F, double x, mismatch_log *ld) {
  unsigned want = ref_encode_double(F, x);
  unsigned got = scalar_encode(F, mn_scalar_float(x));
  if (got != want) log_mismatch(ld, F, x, got, want);
}

/* ---- narrow float tests --------------------------------------------------- */

MN_TEST(test_narrow_decode_exhaustive) {
  for (int fi = 0; fi < N_FORMATS; ++fi) {
    const ref_format *F = all_formats[fi];
    unsigned n = F->sign << 1;
    long bad_value = 0, bad_round_trip = 0, bad_nan = 0;
    for (unsigned v = 0; v < n; ++v) {
      float f = F->decode(v);
      bool neg = (v & F->sign) != 0;
      if (ref_is_nan(F, v)) {
        /* NaN decodes to a NaN of the same sign; encodes to the canonical NaN. */
        if (!isnan(f) || (signbit(f) != 0) != neg) bad_nan++;
        if (F->encode(f) != ((neg ? F->sign : 0) | F->nan)) bad_nan++;
        continue;
      }
      double want;
      if (ref_is_inf(F, v)) want = INFINITY;
      else want = F->table[v & (F->sign - 1)];
      if (neg) want = -want;
      /* bit-exact, so the sign of zero counts */
      if (f64_bits((double)f) != f64_bits(want)) {
        if (bad_value++ < 8)
          fprintf(stderr, "[%s] %s decode 0x%X -> %a, want %a\n", mn_test_case, F->name, v, (double)f, want);
      }
      unsigned back = F->encode(f);
      if (back != v) {
        if (bad_round_trip++ < 8)
          fprintf(stderr, "[%s] %s 0x%X -> %a -> 0x%X\n", mn_test_case, F->name, v, (double)f, back);
      }
      /* and through the scalar path */
      if (scalar_encode(F, mn_scalar_float((double)f)) != v) bad_round_trip++;
    }
    MN_CHECK(bad_value == 0);
    MN_CHECK(bad_round_trip == 0);
    MN_CHECK(bad_nan == 0);
  }
}

MN_TEST(test_narrow_encode_boundaries) {
  for (int fi = 0; fi < N_FORMATS; ++fi) {
    const ref_format *F = all_formats[fi];
    mismatch_log lf = {"float", 0}, ld = {"double", 0};
    for (unsigned k = 0; k <= F->max_finite; ++k) {
      double a = F->table[k], b = F->table[k + 1];
      double mid = (a + b) / 2;
      for (int sgn = 0; sgn < 2; ++sgn) {
        double s = sgn ? -1.0 : 1.0;
        /* the representable values, their float neighbours, the midpoints (ties)
         * and the floats on either side of them */
        const double xs[] = {a, mid, b};
        for (int j = 0; j < 3; ++j) {
          float f = (float)(s * xs[j]);
          if (isinf(f)) continue; /* bf16's virtual next value, 2^128 */
          MN_CHECK((double)f == s * xs[j]); /* all exactly representable in float */
          check_encode_float(F, f, &lf, &ld);
          check_encode_float(F, nextafterf(f, INFINITY), &lf, &ld);
          check_encode_float(F, nextafterf(f, -INFINITY), &lf, &ld);
        }
        /* doubles just beside a tie: a float would collapse them onto the tie */
        check_encode_double(F, s * mid, &ld);
        check_encode_double(F, nextafter(s * mid, INFINITY), &ld);
        check_encode_double(F, nextafter(s * mid, -INFINITY), &ld);
        check_encode_double(F, s * (a + (b - a) * 0.25), &ld);
        check_encode_double(F, s * (a + (b - a) * 0.75), &ld);
      }
    }
    /* specials */
    const float fs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN,
                        -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e-30f, 1e30f, 1.0f, -1.0f,
                        f32_from(0x7F800001u), f32_from(0xFFC00001u), f32_from(0x007FFFFFu)};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; ++i) check_encode_float(F, fs[i], &lf, &ld);
    const double ds[] = {DBL_MAX, -DBL_MAX, DBL_MIN, DBL_TRUE_MIN, -DBL_TRUE_MIN, 1e300, -1e-300,
                         0x1p-1000, 0x1p1000};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; ++i) check_encode_double(F, ds[i], &ld);
    /* every float subnormal with a few set bits, and the float binade boundaries */
    for (int e = -149; e <= 127; ++e) {
      double p = ldexp(1.0, e);
      check_encode_float(F, (float)p, &lf, &ld);
      check_encode_float(F, nextafterf((float)p, 0.0f), &lf, &ld);
      check_encode_float(F, (float)(p * 1.5), &lf, &ld);
      check_encode_float(F, -(float)p, &lf, &ld);
    }
    MN_CHECK(lf.count == 0);
    MN_CHECK(ld.count == 0);
  }
}

MN_TEST(test_narrow_encode_random) {
  rng_state = 0x0123456789ABCDEFull;
  for (int fi = 0; fi < N_FORMATS; ++fi) {
    const ref_format *F = all_formats[fi];
    mismatch_log lf = {"random float", 0}, ld = {"random double", 0};
    /* arbitrary float bit patterns */
    for (int i = 0; i < 300000; ++i) check_encode_float(F, f32_from((uint32_t)(rng_next() >> 32)), &lf, &ld);
    /* floats and doubles within (and a little around) the format's range */
    int lo = 1 - F->bias - F->mbits - 3, hi = (1 << F->ebits) - F->bias + 2;
    for (int i = 0; i < 200000; ++i) {
      uint64_t r = rng_next();
      int e = lo + (int)(r % (uint64_t)(hi - lo + 1));
      double m = 1.0 + (double)(rng_next() >> 12) * 0x1p-52; /* [1, 2) with 52 random bits */
      double x = ldexp((r >> 40) & 1 ? -m : m, e);
      check_encode_double(F, x, &ld);
      check_encode_float(F, (float)x, &lf, &ld);
    }
    MN_CHECK(lf.count == 0);
    MN_CHECK(ld.count == 0);
  }
}

MN_TEST(test_narrow_known_values) {
  MN_CHECK(mn_float_to_half(1.0f) == 0x3C00);
  MN_CHECK(mn_float_to_half(-2.0f) == 0xC000);
  MN_CHECK(mn_float_to_half(65504.0f) == 0x7BFF);
  MN_CHECK(mn_float_to_half(65519.0f) == 0x7BFF);
  MN_CHECK(mn_float_to_half(65520.0f) == 0x7C00);
  MN_CHECK(mn_float_to_half(-INFINITY) == 0xFC00);
  MN_CHECK(mn_float_to_half(0x1p-24f) == 0x0001);
  MN_CHECK(mn_float_to_half(0x1p-25f) == 0x0000);            /* tie to even (0) */
  MN_CHECK(mn_float_to_half(0x1.000002p-25f) == 0x0001);     /* just above the tie */
  MN_CHECK(mn_float_to_half(0x3p-25f) == 0x0002);            /* 1.5 ulp: tie, up to even */
  MN_CHECK(mn_float_to_half(NAN) == 0x7E00);
  MN_CHECK(mn_float_to_half(-NAN) == 0xFE00);
  MN_CHECK(mn_float_to_half(-0.0f) == 0x8000);
  MN_CHECK(mn_half_to_float(0x3555) == 0x1.554p-2f);

  MN_CHECK(mn_float_to_bfloat16(1.0f) == 0x3F80);
  MN_CHECK(mn_float_to_bfloat16(f32_from(0x3F808000u)) == 0x3F80); /* tie, even */
  MN_CHECK(mn_float_to_bfloat16(f32_from(0x3F818000u)) == 0x3F82); /* tie, up to even */
  MN_CHECK(mn_float_to_bfloat16(f32_from(0x3F808001u)) == 0x3F81);
  MN_CHECK(mn_float_to_bfloat16(FLT_MAX) == 0x7F80);
  MN_CHECK(mn_float_to_bfloat16(f32_from(0x7FFFFFFFu)) == 0x7FC0); /* NaN not rounded to inf */
  MN_CHECK(mn_float_to_bfloat16(f32_from(0xFF800001u)) == 0xFFC0);
  MN_CHECK(mn_bfloat16_to_float(0x4049) == 3.140625f);

  MN_CHECK(mn_float_to_e4m3fn(448.0f) == 0x7E);
  MN_CHECK(mn_float_to_e4m3fn(1000.0f) == 0x7E);
  MN_CHECK(mn_float_to_e4m3fn(470.0f) == 0x7E);
  MN_CHECK(mn_float_to_e4m3fn(-1e30f) == 0xFE);
  MN_CHECK(mn_float_to_e4m3fn(INFINITY) == 0x7E);
  MN_CHECK(mn_float_to_e4m3fn(-INFINITY) == 0xFE);
  MN_CHECK(mn_float_to_e4m3fn(NAN) == 0x7F);
  MN_CHECK(mn_float_to_e4m3fn(-NAN) == 0xFF);
  MN_CHECK(mn_float_to_e4m3fn(0x1p-9f) == 0x01);
  MN_CHECK(mn_float_to_e4m3fn(0x1p-10f) == 0x00);
  MN_CHECK(mn_float_to_e4m3fn(0x1.8p-9f) == 0x02);
  MN_CHECK(mn_float_to_e4m3fn(1.0f) == 0x38);
  MN_CHECK(mn_e4m3fn_to_float(0x7E) == 448.0f);
  MN_CHECK(mn_e4m3fn_to_float(0x01) == 0x1p-9f);
  MN_CHECK(isnan(mn_e4m3fn_to_float(0x7F)) && isnan(mn_e4m3fn_to_float(0xFF)));
  MN_CHECK(!isinf(mn_e4m3fn_to_float(0x78)) && mn_e4m3fn_to_float(0x78) == 256.0f);

  MN_CHECK(mn_float_to_e5m2(57344.0f) == 0x7B);
  MN_CHECK(mn_float_to_e5m2(61439.0f) == 0x7B);
  MN_CHECK(mn_float_to_e5m2(61440.0f) == 0x7C); /* tie above the max rounds to inf */
  MN_CHECK(mn_float_to_e5m2(-1e10f) == 0xFC);
  MN_CHECK(mn_float_to_e5m2(NAN) == 0x7F);
  MN_CHECK(mn_float_to_e5m2(-NAN) == 0xFF);
  MN_CHECK(mn_float_to_e5m2(0x1p-16f) == 0x01);
  MN_CHECK(mn_e5m2_to_float(0x7C) == INFINITY);
  MN_CHECK(mn_e5m2_to_float(0x3C) == 1.0f);
}

/* ---- scalar conversions --------------------------------------------------- */

static uint64_t to_u(mn_scalar_t s, mn_dtype d) {
  uint8_t buf[16];
  memset(buf, 0xAB, sizeof buf);
  mn_status st = mn_scalar_to_bytes(s, d, buf);
  if (st != MN_OK) return 0xDEADull;
  switch (mn_dtype_itemsize(d)) {
    case 1: return buf[0];
    case 2: { uint16_t v; memcpy(&v, buf, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, buf, 4); return v; }
    default: { uint64_t v; memcpy(&v, buf, 8); return v; }
  }
}

static int64_t to_i(mn_scalar_t s, mn_dtype d) {
  uint64_t u = to_u(s, d);
  switch (mn_dtype_itemsize(d)) {
    case 1: return (int8_t)(uint8_t)u;
    case 2: return (int16_t)(uint16_t)u;
    case 4: return (int32_t)(uint32_t)u;
    default: return (int64_t)u;
  }
}

static float to_f32(mn_scalar_t s) { return f32_from((uint32_t)to_u(s, MN_DTYPE_FLOAT32)); }
static double to_f64(mn_scalar_t s) { return f64_from(to_u(s, MN_DTYPE_FLOAT64)); }

MN_TEST(test_scalar_constructors) {
  MN_CHECK(mn_scalar_bool(true).kind == MN_SCALAR_BOOL && mn_scalar_bool(true).v.b);
  MN_CHECK(mn_scalar_int(-5).kind == MN_SCALAR_INT && mn_scalar_int(-5).v.i == -5);
  MN_CHECK(mn_scalar_uint(UINT64_MAX).kind == MN_SCALAR_UINT && mn_scalar_uint(UINT64_MAX).v.u == UINT64_MAX);
  MN_CHECK(mn_scalar_float(2.5).kind == MN_SCALAR_FLOAT && mn_scalar_float(2.5).v.f == 2.5);
  mn_scalar_t c = mn_scalar_complex(1.5, -2.0);
  MN_CHECK(c.kind == MN_SCALAR_COMPLEX && c.v.c[0] == 1.5 && c.v.c[1] == -2.0);
}

MN_TEST(test_scalar_float_to_int) {
  MN_CHECK(to_u(mn_scalar_float(-1.5), MN_DTYPE_UINT8) == 255);
  MN_CHECK(to_i(mn_scalar_float(300.0), MN_DTYPE_INT8) == 44);
  MN_CHECK(to_i(mn_scalar_float(NAN), MN_DTYPE_INT32) == 0);
  MN_CHECK(to_i(mn_scalar_float(-NAN), MN_DTYPE_INT64) == 0);
  MN_CHECK(to_u(mn_scalar_float(NAN), MN_DTYPE_UINT64) == 0);
  MN_CHECK(to_i(mn_scalar_float(1e30), MN_DTYPE_INT64) == INT64_MAX);
  MN_CHECK(to_i(mn_scalar_float(-1e30), MN_DTYPE_INT64) == INT64_MIN);
  MN_CHECK(to_i(mn_scalar_float(INFINITY), MN_DTYPE_INT64) == INT64_MAX);
  MN_CHECK(to_i(mn_scalar_float(-INFINITY), MN_DTYPE_INT64) == INT64_MIN);
  MN_CHECK(to_i(mn_scalar_float(0x1p63), MN_DTYPE_INT64) == INT64_MAX);
  MN_CHECK(to_i(mn_scalar_float(-0x1p63), MN_DTYPE_INT64) == INT64_MIN);
  MN_CHECK(to_i(mn_scalar_float(0x1.fffffffffffffp62), MN_DTYPE_INT64) == (int64_t)0x7FFFFFFFFFFFFC00ll);
  MN_CHECK(to_u(mn_scalar_float(1e30), MN_DTYPE_UINT64) == UINT64_MAX);
  MN_CHECK(to_u(mn_scalar_float(INFINITY), MN_DTYPE_UINT64) == UINT64_MAX);
  MN_CHECK(to_u(mn_scalar_float(0x1p64), MN_DTYPE_UINT64) == UINT64_MAX);
  MN_CHECK(to_u(mn_scalar_float(0x1p63), MN_DTYPE_UINT64) == (UINT64_C(1) << 63));
  MN_CHECK(to_u(mn_scalar_float(0x1.fffffffffffffp63), MN_DTYPE_UINT64) == 0xFFFFFFFFFFFFF800ull);
  MN_CHECK(to_u(mn_scalar_float(-1.0), MN_DTYPE_UINT64) == UINT64_MAX); /* -1 wrapped */
  MN_CHECK(to_u(mn_scalar_float(-1e30), MN_DTYPE_UINT64) == (UINT64_C(1) << 63)); /* INT64_MIN wrapped */
  MN_CHECK(to_i(mn_scalar_float(2.9), MN_DTYPE_INT32) == 2);
  MN_CHECK(to_i(mn_scalar_float(-2.9), MN_DTYPE_INT32) == -2);
  MN_CHECK(to_i(mn_scalar_float(-0.5), MN_DTYPE_INT16) == 0);
  MN_CHECK(to_i(mn_scalar_float(1e30), MN_DTYPE_INT32) == -1); /* INT64_MAX wrapped */
  MN_CHECK(to_i(mn_scalar_float(4294967296.0 + 7.0), MN_DTYPE_INT32) == 7);
  MN_CHECK(to_i(mn_scalar_float(-129.0), MN_DTYPE_INT8) == 127);
  MN_CHECK(to_u(mn_scalar_float(65536.0 + 65535.0), MN_DTYPE_UINT16) == 65535);
  MN_CHECK(to_u(mn_scalar_float(-1.0), MN_DTYPE_UINT32) == 0xFFFFFFFFu);
  MN_CHECK(to_u(mn_scalar_complex(-3.7, 100.0), MN_DTYPE_UINT8) == 253);
}

MN_TEST(test_scalar_int_wrap) {
  MN_CHECK(to_u(mn_scalar_int(-1), MN_DTYPE_UINT16) == 65535);
  MN_CHECK(to_i(mn_scalar_uint(UINT64_MAX), MN_DTYPE_INT64) == -1);
  MN_CHECK(to_i(mn_scalar_int(INT64_MIN), MN_DTYPE_INT32) == 0);
  MN_CHECK(to_i(mn_scalar_int(128), MN_DTYPE_INT8) == -128);
  MN_CHECK(to_i(mn_scalar_int(-129), MN_DTYPE_INT8) == 127);
  MN_CHECK(to_u(mn_scalar_int(256 + 3), MN_DTYPE_UINT8) == 3);
  MN_CHECK(to_u(mn_scalar_int(INT64_MIN), MN_DTYPE_UINT64) == (UINT64_C(1) << 63));
  MN_CHECK(to_i(mn_scalar_uint(0x80000000u), MN_DTYPE_INT32) == INT32_MIN);
  MN_CHECK(to_u(mn_scalar_uint(0x123456789ull), MN_DTYPE_UINT32) == 0x23456789u);
  MN_CHECK(to_i(mn_scalar_bool(true), MN_DTYPE_INT64) == 1);
  MN_CHECK(to_u(mn_scalar_bool(false), MN_DTYPE_UINT8) == 0);
  /* every int8/uint8 target against the modular rule, over a range of ints */
  long bad = 0;
  for (int64_t v = -70000; v <= 70000; v += 7) {
    if (to_i(mn_scalar_int(v), MN_DTYPE_INT8) != (int8_t)(uint8_t)(uint64_t)v) bad++;
    if (to_u(mn_scalar_int(v), MN_DTYPE_UINT8) != (uint8_t)(uint64_t)v) bad++;
    if (to_i(mn_scalar_int(v), MN_DTYPE_INT16) != (int16_t)(uint16_t)(uint64_t)v) bad++;
    if (to_u(mn_scalar_int(v), MN_DTYPE_UINT16) != (uint16_t)(uint64_t)v) bad++;
  }
  MN_CHECK(bad == 0);
}

MN_TEST(test_scalar_bool) {
  MN_CHECK(to_u(mn_scalar_float(NAN), MN_DTYPE_BOOL) == 1);
  MN_CHECK(to_u(mn_scalar_float(0.0), MN_DTYPE_BOOL) == 0);
  MN_CHECK(to_u(mn_scalar_float(-0.0), MN_DTYPE_BOOL) == 0);
  MN_CHECK(to_u(mn_scalar_float(1e-300), MN_DTYPE_BOOL) == 1);
  MN_CHECK(to_u(mn_scalar_complex(0, 1), MN_DTYPE_BOOL) == 1);
  MN_CHECK(to_u(mn_scalar_complex(0, 0), MN_DTYPE_BOOL) == 0);
  MN_CHECK(to_u(mn_scalar_complex(-0.0, 0), MN_DTYPE_BOOL) == 0);
  MN_CHECK(to_u(mn_scalar_int(256), MN_DTYPE_BOOL) == 1); /* not wrapped */
  MN_CHECK(to_u(mn_scalar_int(0), MN_DTYPE_BOOL) == 0);
  MN_CHECK(to_u(mn_scalar_uint(UINT64_C(1) << 63), MN_DTYPE_BOOL) == 1);
  MN_CHECK(to_u(mn_scalar_bool(true), MN_DTYPE_BOOL) == 1);
  MN_CHECK(to_u(mn_scalar_bool(false), MN_DTYPE_BOOL) == 0);
  /* bool to every other dtype is 0 or 1 */
  MN_CHECK(to_f32(mn_scalar_bool(true)) == 1.0f);
  MN_CHECK(to_u(mn_scalar_bool(true), MN_DTYPE_FLOAT16) == 0x3C00);
  MN_CHECK(to_u(mn_scalar_bool(true), MN_DTYPE_BFLOAT16) == 0x3F80);
  MN_CHECK(to_u(mn_scalar_bool(true), MN_DTYPE_FLOAT8_E4M3FN) == 0x38);
  MN_CHECK(to_u(mn_scalar_bool(false), MN_DTYPE_FLOAT8_E5M2) == 0x00);
}

MN_TEST(test_scalar_to_floats) {
  MN_CHECK(to_f32(mn_scalar_complex(2.5, 1)) == 2.5f);
  MN_CHECK(to_f64(mn_scalar_complex(-7.25, 1e9)) == -7.25);
  MN_CHECK(to_u(mn_scalar_float(65520.0), MN_DTYPE_FLOAT16) == 0x7C00);
  MN_CHECK(to_u(mn_scalar_float(65519.0), MN_DTYPE_FLOAT16) == 0x7BFF);
  MN_CHECK(to_u(mn_scalar_float(1000.0), MN_DTYPE_FLOAT8_E4M3FN) == 0x7E);
  MN_CHECK(mn_e4m3fn_to_float(0x7E) == 448.0f);
  MN_CHECK(to_u(mn_scalar_float(-1000.0), MN_DTYPE_FLOAT8_E4M3FN) == 0xFE);
  MN_CHECK(to_u(mn_scalar_complex(1.0, 5.0), MN_DTYPE_FLOAT16) == 0x3C00);
  /* double rounding: 1 + 2^-11 + 2^-40 is above the half tie, but as a float it
   * is exactly the tie, which would round down to 1.0 */
  MN_CHECK(to_u(mn_scalar_float(1.0 + 0x1p-11 + 0x1p-40), MN_DTYPE_FLOAT16) == 0x3C01);
  MN_CHECK(mn_float_to_half((float)(1.0 + 0x1p-11 + 0x1p-40)) == 0x3C00);
  MN_CHECK(to_u(mn_scalar_float(1.0 + 0x1p-8 + 0x1p-40), MN_DTYPE_BFLOAT16) == 0x3F81);
  MN_CHECK(to_u(mn_scalar_float(0x1p-149 * 0.75), MN_DTYPE_BFLOAT16) == 0x0000);
  MN_CHECK(to_f32(mn_scalar_float(0x1p-149 * 0.75)) == 0x1p-149f);
  MN_CHECK(isinf(to_f32(mn_scalar_float(1e300))));
  MN_CHECK(isnan(to_f32(mn_scalar_float(NAN))));
  MN_CHECK(isnan(to_f64(mn_scalar_complex(NAN, 0))));
  MN_CHECK(to_f64(mn_scalar_float(0.1)) == 0.1);

  /* integers: C conversion for float32/float64 (one rounding) */
  MN_CHECK(to_f32(mn_scalar_int(INT64_MAX)) == 0x1p63f);
  MN_CHECK(to_f32(mn_scalar_int((INT64_C(1) << 62) + (INT64_C(1) << 38) + 1)) == 0x1.000002p62f);
  MN_CHECK(to_f64(mn_scalar_int(INT64_MIN)) == -0x1p63);
  MN_CHECK(to_f64(mn_scalar_uint(UINT64_MAX)) == 0x1p64);
  MN_CHECK(to_f64(mn_scalar_int((INT64_C(1) << 53) + 1)) == 0x1p53);
  MN_CHECK(to_f32(mn_scalar_uint(UINT64_MAX)) == 0x1p64f);
  MN_CHECK(to_f32(mn_scalar_int(-3)) == -3.0f);
}

MN_TEST(test_scalar_int_to_narrow) {
  /* one rounding straight from the integer: through double this would be a tie */
  int64_t v = (INT64_C(1) << 62) + (INT64_C(1) << 54) + 1;
  MN_CHECK(to_u(mn_scalar_int(v), MN_DTYPE_BFLOAT16) == 0x5E81);
  MN_CHECK(to_u(mn_scalar_int(-v), MN_DTYPE_BFLOAT16) == 0xDE81);
  MN_CHECK(to_u(mn_scalar_int((INT64_C(1) << 62) + (INT64_C(1) << 54)), MN_DTYPE_BFLOAT16) == 0x5E80);
  MN_CHECK(to_u(mn_scalar_int((INT64_C(1) << 62) + 3 * (INT64_C(1) << 54)), MN_DTYPE_BFLOAT16) == 0x5E82);
  MN_CHECK(to_u(mn_scalar_uint(UINT64_MAX), MN_DTYPE_BFLOAT16) == 0x5F80);
  MN_CHECK(to_u(mn_scalar_int(INT64_MIN), MN_DTYPE_BFLOAT16) == 0xDF00);
  MN_CHECK(to_u(mn_scalar_int(65504), MN_DTYPE_FLOAT16) == 0x7BFF);
  MN_CHECK(to_u(mn_scalar_int(65520), MN_DTYPE_FLOAT16) == 0x7C00);
  MN_CHECK(to_u(mn_scalar_int(-70000), MN_DTYPE_FLOAT16) == 0xFC00);
  MN_CHECK(to_u(mn_scalar_int(2049), MN_DTYPE_FLOAT16) == 0x6800); /* tie, even */
  MN_CHECK(to_u(mn_scalar_int(2051), MN_DTYPE_FLOAT16) == 0x6802);
  MN_CHECK(to_u(mn_scalar_int(INT64_MAX), MN_DTYPE_FLOAT8_E4M3FN) == 0x7E);
  MN_CHECK(to_u(mn_scalar_int(INT64_MIN), MN_DTYPE_FLOAT8_E4M3FN) == 0xFE);
  MN_CHECK(to_u(mn_scalar_int(0), MN_DTYPE_FLOAT8_E4M3FN) == 0x00);
  MN_CHECK(to_u(mn_scalar_int(17), MN_DTYPE_FLOAT8_E4M3FN) == 0x58); /* 17 -> 16 (tie, even) */
  MN_CHECK(to_u(mn_scalar_uint(UINT64_MAX), MN_DTYPE_FLOAT8_E5M2) == 0x7C);

  /* random integers of every bit length against the reference */
  rng_state = 0xFEEDFACECAFEBEEFull;
  mismatch_log log = {"int", 0};
  for (int i = 0; i < 100000; ++i) {
    int bits = (int)(rng_next() % 64) + 1;
    uint64_t mag = rng_next() >> (64 - bits);
    bool neg = (rng_next() & 1) != 0;
    for (int fi = 0; fi < N_FORMATS; ++fi) {
      const ref_format *F = all_formats[fi];
      /* unsigned */
      unsigned want = ref_encode_int(F, false, mag);
      unsigned got = scalar_encode(F, mn_scalar_uint(mag));
      if (got != want) log_mismatch(&log, F, (double)mag, got, want);
      /* signed (magnitudes up to 2^63) */
      uint64_t m = mag >> 1;
      int64_t sv = neg ? -(int64_t)m : (int64_t)m;
      want = ref_encode_int(F, neg && m != 0, m);
      got = scalar_encode(F, mn_scalar_int(sv));
      if (got != want) log_mismatch(&log, F, (double)sv, got, want);
    }
  }
  MN_CHECK(log.count == 0);
}

MN_TEST(test_scalar_to_complex) {
  float c64[2];
  double c128[2];
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(1.5, -2.25), MN_DTYPE_COMPLEX64, c64));
  MN_CHECK(c64[0] == 1.5f && c64[1] == -2.25f);
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_float(3.0), MN_DTYPE_COMPLEX64, c64));
  MN_CHECK(c64[0] == 3.0f && c64[1] == 0.0f && !signbit(c64[1]));
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_int(-4), MN_DTYPE_COMPLEX128, c128));
  MN_CHECK(c128[0] == -4.0 && c128[1] == 0.0);
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_uint(UINT64_MAX), MN_DTYPE_COMPLEX128, c128));
  MN_CHECK(c128[0] == 0x1p64 && c128[1] == 0.0);
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_bool(true), MN_DTYPE_COMPLEX64, c64));
  MN_CHECK(c64[0] == 1.0f && c64[1] == 0.0f);
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(0.1, 1e300), MN_DTYPE_COMPLEX64, c64));
  MN_CHECK(c64[0] == 0.1f && isinf(c64[1]));
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(0.1, -0.3), MN_DTYPE_COMPLEX128, c128));
  MN_CHECK(c128[0] == 0.1 && c128[1] == -0.3);
}

MN_TEST(test_scalar_errors) {
  uint8_t buf[16];
  MN_CHECK_ERR(mn_scalar_to_bytes(mn_scalar_int(1), (mn_dtype)-1, buf), MN_ERR_INVALID_ARGUMENT, "-1");
  char count[16];
  snprintf(count, sizeof count, "%d", (int)MN_DTYPE_COUNT);
  MN_CHECK_ERR(mn_scalar_to_bytes(mn_scalar_int(1), MN_DTYPE_COUNT, buf), MN_ERR_INVALID_ARGUMENT, count);
  MN_CHECK_ERR(mn_scalar_to_bytes(mn_scalar_int(1), MN_DTYPE_INT32, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  mn_scalar_t weird = mn_scalar_int(1);
  weird.kind = (mn_scalar_kind)99;
  MN_CHECK_ERR(mn_scalar_to_bytes(weird, MN_DTYPE_INT32, buf), MN_ERR_INVALID_ARGUMENT, "99");
  mn_scalar_t s = mn_scalar_int(42);
  memset(buf, 0, sizeof buf);
  MN_CHECK_ERR(mn_scalar_from_bytes((mn_dtype)99, buf, &s), MN_ERR_INVALID_ARGUMENT, "99");
  MN_CHECK_ERR(mn_scalar_from_bytes(MN_DTYPE_INT8, NULL, &s), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK_ERR(mn_scalar_from_bytes(MN_DTYPE_INT8, buf, NULL), MN_ERR_INVALID_ARGUMENT, "NULL");
  MN_CHECK(s.kind == MN_SCALAR_INT && s.v.i == 42);
}

/* ---- from_bytes ----------------------------------------------------------- */

/* bytes -> scalar -> bytes gives the same bytes, and the scalar has the kind
 * the dtype implies. */
static void check_round_trip(mn_dtype d, const void *bytes, long *bad) {
  mn_scalar_t s;
  uint8_t back[17]; /* one guard byte past the largest item */
  size_t n = mn_dtype_itemsize(d);
  memset(back, 0xCD, sizeof back);
  if (mn_scalar_from_bytes(d, bytes, &s) != MN_OK || mn_scalar_to_bytes(s, d, back) != MN_OK ||
      memcmp(bytes, back, n) != 0 || back[n] != 0xCD) {
    if ((*bad)++ < 8) fprintf(stderr, "[%s] %s round trip failed\n", mn_test_case, mn_dtype_name(d));
    return;
  }
  mn_scalar_kind want;
  /* a quantized element reads as its stored integer */
  switch (mn_dtype_info(mn_dtype_quant_underlying(d))->kind) {
    case MN_KIND_BOOL: want = MN_SCALAR_BOOL; break;
    case MN_KIND_UINT: want = MN_SCALAR_UINT; break;
    case MN_KIND_INT: want = MN_SCALAR_INT; break;
    case MN_KIND_FLOAT: want = MN_SCALAR_FLOAT; break;
    default: want = MN_SCALAR_COMPLEX; break;
  }
  if (s.kind != want) (*bad)++;
}

static bool is_nan_bytes(mn_dtype d, const uint8_t *b) {
  mn_scalar_t s;
  if (mn_scalar_from_bytes(d, b, &s) != MN_OK) return false;
  if (s.kind == MN_SCALAR_FLOAT) return isnan(s.v.f);
  if (s.kind == MN_SCALAR_COMPLEX) return isnan(s.v.c[0]) || isnan(s.v.c[1]);
  return false;
}

MN_TEST(test_from_bytes_round_trip) {
  rng_state = 0x1234567887654321ull;
  for (int i = 0; i < N_ROWS; ++i) {
    mn_dtype d = expected_rows[i].dtype;
    size_t n = mn_dtype_itemsize(d);
    long bad = 0, tried = 0;
    uint8_t b[16];
    if (d == MN_DTYPE_BOOL) {
      for (unsigned v = 0; v < 2; ++v) {
        b[0] = (uint8_t)v;
        check_round_trip(d, b, &bad);
        tried++;
      }
    } else if (n <= 2) {
      for (unsigned v = 0; v < (1u << (8 * n)); ++v) {
        memcpy(b, &(uint16_t){(uint16_t)v}, 2);
        if (n == 1) b[0] = (uint8_t)v;
        if (is_nan_bytes(d, b)) continue;
        check_round_trip(d, b, &bad);
        tried++;
      }
    } else {
      for (int k = 0; k < 20000; ++k) {
        for (size_t j = 0; j < n; j += 8) {
          uint64_t r = rng_next();
          memcpy(b + j, &r, 8 < n - j ? 8 : n - j);
        }
        if (is_nan_bytes(d, b)) continue;
        check_round_trip(d, b, &bad);
        tried++;
      }
      /* extremes */
      memset(b, 0, sizeof b);
      check_round_trip(d, b, &bad);
      memset(b, 0xFF, sizeof b);
      if (!is_nan_bytes(d, b)) check_round_trip(d, b, &bad);
      tried += 2;
    }
    MN_CHECK(tried > 0);
    if (bad != 0) fprintf(stderr, "[%s] %s: %ld bad\n", mn_test_case, mn_dtype_name(d), bad);
    MN_CHECK(bad == 0);
  }
}

MN_TEST(test_from_bytes_values) {
  mn_scalar_t s;
  uint8_t b1 = 2;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_BOOL, &b1, &s));
  MN_CHECK(s.kind == MN_SCALAR_BOOL && s.v.b);
  int8_t i8 = -5;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_INT8, &i8, &s));
  MN_CHECK(s.kind == MN_SCALAR_INT && s.v.i == -5);
  uint64_t u64 = UINT64_MAX;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_UINT64, &u64, &s));
  MN_CHECK(s.kind == MN_SCALAR_UINT && s.v.u == UINT64_MAX);
  uint8_t u8 = 200;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_UINT8, &u8, &s));
  MN_CHECK(s.kind == MN_SCALAR_UINT && s.v.u == 200);
  uint16_t h = 0x3C00;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_FLOAT16, &h, &s));
  MN_CHECK(s.kind == MN_SCALAR_FLOAT && s.v.f == 1.0);
  uint8_t e = 0x7E;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_FLOAT8_E4M3FN, &e, &s));
  MN_CHECK(s.kind == MN_SCALAR_FLOAT && s.v.f == 448.0);
  e = 0x7F;
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_FLOAT8_E4M3FN, &e, &s));
  MN_CHECK(s.kind == MN_SCALAR_FLOAT && isnan(s.v.f));
  float c[2] = {1.5f, -0.5f};
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_COMPLEX64, c, &s));
  MN_CHECK(s.kind == MN_SCALAR_COMPLEX && s.v.c[0] == 1.5 && s.v.c[1] == -0.5);
  /* unaligned input and output */
  uint8_t buf[24] = {0};
  double x = -123.456;
  memcpy(buf + 1, &x, sizeof x);
  MN_CHECK_OK(mn_scalar_from_bytes(MN_DTYPE_FLOAT64, buf + 1, &s));
  MN_CHECK(s.kind == MN_SCALAR_FLOAT && s.v.f == x);
  MN_CHECK_OK(mn_scalar_to_bytes(mn_scalar_complex(1, 2), MN_DTYPE_COMPLEX128, buf + 3));
  double y[2];
  memcpy(y, buf + 3, sizeof y);
  MN_CHECK(y[0] == 1.0 && y[1] == 2.0);
}

int main(void) {
  ref_init();
  MN_RUN(test_table_entries);
  MN_RUN(test_invalid_dtypes);
  MN_RUN(test_table_columns);
  MN_RUN(test_parse_canonical);
  MN_RUN(test_parse_aliases);
  MN_RUN(test_parse_bad_names);
  MN_RUN(test_narrow_decode_exhaustive);
  MN_RUN(test_narrow_encode_boundaries);
  MN_RUN(test_narrow_encode_random);
  MN_RUN(test_narrow_known_values);
  MN_RUN(test_scalar_constructors);
  MN_RUN(test_scalar_float_to_int);
  MN_RUN(test_scalar_int_wrap);
  MN_RUN(test_scalar_bool);
  MN_RUN(test_scalar_to_floats);
  MN_RUN(test_scalar_int_to_narrow);
  MN_RUN(test_scalar_to_complex);
  MN_RUN(test_scalar_errors);
  MN_RUN(test_from_bytes_round_trip);
  MN_RUN(test_from_bytes_values);
  return mn_test_finish();
}
