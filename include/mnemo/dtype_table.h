/* mnemo/dtype_table.h: MN_DTYPE_TABLE, the one table of every per-dtype fact
 * (value, name, item size, kind, float format, DLPack type, safetensors name,
 * finite range), as an X-macro that every layer expands (C and CUDA C++).
 * Macros only: no state, nothing to synchronize.
 *
 * Adding a dtype: one row here, plus its cast rows in kernels/cast.h (how an
 * element loads and stores); every other layer reads the row. A new float
 * format is a MN_DTYPE_FMT_* below, plus its row and conversion pair in
 * runtime/narrow_float.h (the casts and scalars expand it). The quantized
 * dtypes (MN_DTYPE_TABLE_QUANT) have no casts: kernels/cast.h's pairs cover
 * MN_DTYPE_TABLE_PLAIN only; quantize/dequantize are their own kernels. Values are
 * stable (never renumbered) and dense: 0 .. MN_DTYPE_COUNT - 1. */
#ifndef MNEMO_DTYPE_TABLE_H
#define MNEMO_DTYPE_TABLE_H

/* Float formats (column FMT): the encoding of a float element, or of each of
 * a complex element's two parts; NONE for bool and integers. */
#define MN_DTYPE_FMT_NONE 0
#define MN_DTYPE_FMT_BINARY16 1 /* IEEE half: 1-5-10, inf and NaN */
#define MN_DTYPE_FMT_BFLOAT16 2 /* 1-8-7, inf and NaN */
#define MN_DTYPE_FMT_BINARY32 3 /* IEEE single */
#define MN_DTYPE_FMT_BINARY64 4 /* IEEE double */
#define MN_DTYPE_FMT_E4M3FN 5   /* 1-4-3, no inf, NaN only 0x7F/0xFF, saturating */
#define MN_DTYPE_FMT_E5M2 6     /* 1-5-2, the top byte of binary16 */

/* MN_DTYPE_TABLE(X, A) expands X(A, columns...) once per dtype, in value
 * order; A is passed through untouched (a caller's extra argument, or any
 * token such as ~). The columns, in order:
 *   SFX      the symbol's suffix: MN_DTYPE_##SFX (BOOL -> MN_DTYPE_BOOL)
 *   VAL      the mn_dtype value
 *   NAME     canonical name (mn_dtype_name, PyTorch's without "torch.")
 *   SIZE     bytes per element (mn_dtype_itemsize)
 *   KIND     mn_dtype_kind
 *   FMT      MN_DTYPE_FMT_*: the float format (of each part, for complex)
 *   REAL     suffix of the dtype of the real part (complex; itself otherwise)
 *   DL_CODE  DLPack DLDataTypeCode: 0 kDLInt, 1 kDLUInt, 2 kDLFloat,
 *            4 kDLBfloat, 5 kDLComplex, 6 kDLBool, 10 kDLFloat8_e4m3fn,
 *            12 kDLFloat8_e5m2
 *   DL_BITS  DLPack bits per lane
 *   DL_LANES DLPack lanes
 *   ST_NAME  safetensors dtype string, or NULL when safetensors has none
 *   FMAX     largest finite value of a float or complex part (0 for others)
 *   HAS_INF  1 when the float format has infinities (0 for others)
 * A consumer that reads the first columns only may end its parameter list
 * with `...`, so later columns can be added without touching it. */
/* clang-format off */
#define MN_DTYPE_TABLE_PLAIN(X, A)                                                                    \
  /*  SFX            VAL  NAME             SIZE KIND             FMT                    REAL        DL_CODE,BITS,LANES ST_NAME     FMAX                     HAS_INF */ \
  X(A, BOOL,          0,  "bool",          1,   MN_KIND_BOOL,    MN_DTYPE_FMT_NONE,     BOOL,          6,   8, 1,   "BOOL",     0.0,                     0) \
  X(A, UINT8,         1,  "uint8",         1,   MN_KIND_UINT,    MN_DTYPE_FMT_NONE,     UINT8,         1,   8, 1,   "U8",       0.0,                     0) \
  X(A, INT8,          2,  "int8",          1,   MN_KIND_INT,     MN_DTYPE_FMT_NONE,     INT8,          0,   8, 1,   "I8",       0.0,                     0) \
  X(A, INT16,         3,  "int16",         2,   MN_KIND_INT,     MN_DTYPE_FMT_NONE,     INT16,         0,  16, 1,   "I16",      0.0,                     0) \
  X(A, INT32,         4,  "int32",         4,   MN_KIND_INT,     MN_DTYPE_FMT_NONE,     INT32,         0,  32, 1,   "I32",      0.0,                     0) \
  X(A, INT64,         5,  "int64",         8,   MN_KIND_INT,     MN_DTYPE_FMT_NONE,     INT64,         0,  64, 1,   "I64",      0.0,                     0) \
  X(A, FLOAT16,       6,  "float16",       2,   MN_KIND_FLOAT,   MN_DTYPE_FMT_BINARY16, FLOAT16,       2,  16, 1,   "F16",      65504.0,                 1) \
  X(A, BFLOAT16,      7,  "bfloat16",      2,   MN_KIND_FLOAT,   MN_DTYPE_FMT_BFLOAT16, BFLOAT16,      4,  16, 1,   "BF16",     3.3895313892515355e38,   1) \
  X(A, FLOAT32,       8,  "float32",       4,   MN_KIND_FLOAT,   MN_DTYPE_FMT_BINARY32, FLOAT32,       2,  32, 1,   "F32",      3.4028234663852886e38,   1) \
  X(A, FLOAT64,       9,  "float64",       8,   MN_KIND_FLOAT,   MN_DTYPE_FMT_BINARY64, FLOAT64,       2,  64, 1,   "F64",      1.7976931348623157e308,  1) \
  X(A, COMPLEX64,     10, "complex64",     8,   MN_KIND_COMPLEX, MN_DTYPE_FMT_BINARY32, FLOAT32,       5,  64, 1,   "C64",      3.4028234663852886e38,   1) \
  X(A, COMPLEX128,    11, "complex128",    16,  MN_KIND_COMPLEX, MN_DTYPE_FMT_BINARY64, FLOAT64,       5, 128, 1,   NULL,       1.7976931348623157e308,  1) \
  X(A, FLOAT8_E4M3FN, 12, "float8_e4m3fn", 1,   MN_KIND_FLOAT,   MN_DTYPE_FMT_E4M3FN,   FLOAT8_E4M3FN, 10,  8, 1,   "F8_E4M3",  448.0,                   0) \
  X(A, FLOAT8_E5M2,   13, "float8_e5m2",   1,   MN_KIND_FLOAT,   MN_DTYPE_FMT_E5M2,     FLOAT8_E5M2,   12,  8, 1,   "F8_E5M2",  57344.0,                 1) \
  X(A, UINT16,        14, "uint16",        2,   MN_KIND_UINT,    MN_DTYPE_FMT_NONE,     UINT16,        1,  16, 1,   "U16",      0.0,                     0) \
  X(A, UINT32,        15, "uint32",        4,   MN_KIND_UINT,    MN_DTYPE_FMT_NONE,     UINT32,        1,  32, 1,   "U32",      0.0,                     0) \
  X(A, UINT64,        16, "uint64",        8,   MN_KIND_UINT,    MN_DTYPE_FMT_NONE,     UINT64,        1,  64, 1,   "U64",      0.0,                     0)

/* The quantized rows (mnemo/quantized.h): no float format, no DLPack type
 * (DL_BITS 0: export refused), no safetensors name; their quantization facts
 * are in MN_DTYPE_QUANT_TABLE below. */
#define MN_DTYPE_TABLE_QUANT(X, A)                                                                    \
  X(A, QINT8,         17, "qint8",         1,   MN_KIND_QUANTIZED, MN_DTYPE_FMT_NONE,   QINT8,         0,   0, 0,   NULL,       0.0,                     0) \
  X(A, QUINT8,        18, "quint8",        1,   MN_KIND_QUANTIZED, MN_DTYPE_FMT_NONE,   QUINT8,        0,   0, 0,   NULL,       0.0,                     0) \
  X(A, QINT32,        19, "qint32",        4,   MN_KIND_QUANTIZED, MN_DTYPE_FMT_NONE,   QINT32,        0,   0, 0,   NULL,       0.0,                     0) \
  X(A, QUINT4X2,      20, "quint4x2",      1,   MN_KIND_QUANTIZED, MN_DTYPE_FMT_NONE,   QUINT4X2,      0,   0, 0,   NULL,       0.0,                     0) \
  X(A, QUINT2X4,      21, "quint2x4",      1,   MN_KIND_QUANTIZED, MN_DTYPE_FMT_NONE,   QUINT2X4,      0,   0, 0,   NULL,       0.0,                     0)

/* Every row: the plain ones, then the quantized ones. */
#define MN_DTYPE_TABLE(X, A) MN_DTYPE_TABLE_PLAIN(X, A) MN_DTYPE_TABLE_QUANT(X, A)

/* Quantization facts of the quantized rows, in value order:
 *   SFX    as above
 *   BITS   bits per element (8 * SIZE, or 4 / 2 for the packed ones)
 *   QMIN   smallest stored integer
 *   QMAX   largest stored integer
 *   INT    suffix of the underlying integer dtype (int_repr's dtype) */
#define MN_DTYPE_QUANT_TABLE(X, A)                          \
  X(A, QINT8,    8,  (-128),                 127,        INT8)  \
  X(A, QUINT8,   8,  0,                      255,        UINT8) \
  X(A, QINT32,   32, (-2147483647 - 1),      2147483647, INT32) \
  X(A, QUINT4X2, 4,  0,                      15,         UINT8) \
  X(A, QUINT2X4, 2,  0,                      3,          UINT8)
/* clang-format on */

/* The number of rows, as an integer constant expression. */
#define MN__DTYPE_TABLE_ONE(A, ...) +1
#define MN_DTYPE_TABLE_ROWS (0 MN_DTYPE_TABLE(MN__DTYPE_TABLE_ONE, ~))
/* The plain rows (0 .. MN_DTYPE_TABLE_PLAIN_ROWS - 1; the quantized ones follow). */
#define MN_DTYPE_TABLE_PLAIN_ROWS (0 MN_DTYPE_TABLE_PLAIN(MN__DTYPE_TABLE_ONE, ~))

#endif /* MNEMO_DTYPE_TABLE_H */
