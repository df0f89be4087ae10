/* storage/dlpack.c: DLPack export (a view's storage reference travels with the
 * managed tensor) and zero-copy import over foreign-memory storages. Thread-safe. */
#include "mnemo/dlpack.h"

#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"
#include "runtime/checked.h"
#include "runtime/error.h"
#include "runtime/hostmem.h"
#include "storage/view_internal.h"

/* ---- dtype and device mapping ----------------------------------------------- */

/* The DLPack type of every dtype (mnemo/dtype_table.h). */
#define DL_ROW(A, sfx, val, nm, size, knd, fmt, real, dlc, dlb, dll, ...) [val] = {.code = dlc, .bits = dlb, .lanes = dll},
static const DLDataType DL_TYPES[MN_DTYPE_COUNT] = {MN_DTYPE_TABLE(DL_ROW, ~)};
#undef DL_ROW
/* The table's DLPack codes are dlpack.h's. */
_Static_assert(kDLInt == 0 && kDLUInt == 1 && kDLFloat == 2 && kDLBfloat == 4 && kDLComplex == 5 &&
                   MN_DLPACK_CODE_BOOL == 6 && MN_DLPACK_CODE_FLOAT8_E4M3FN == 10 && MN_DLPACK_CODE_FLOAT8_E5M2 == 12,
               "DLPack type codes");

static mn_status dtype_to_dl(mn_dtype dt, DLDataType *out, const char *func) {
  if (!mn_dtype_is_valid(dt)) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid dtype %d", (int)dt);
  if (DL_TYPES[dt].bits == 0) /* the quantized dtypes */
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack has no type for the quantized dtype %s (dequantize or int_repr first)",
                     mn_dtype_name(dt));
  *out = DL_TYPES[dt];
  return MN_OK;
}

static mn_status dtype_from_dl(DLDataType t, mn_dtype *out, const char *func) {
  if (t.lanes != 1)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack dtype with %u lanes is not supported (only 1)", t.lanes);
  for (int d = 0; d < MN_DTYPE_COUNT; d++) {
    DLDataType m;
    if (dtype_to_dl((mn_dtype)d, &m, func) != MN_OK) continue;
    if (m.code == t.code && m.bits == t.bits) {
      *out = (mn_dtype)d;
      return MN_OK;
    }
  }
  return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack dtype code %u with %u bits has no mnemo dtype", t.code, t.bits);
}

static mn_status device_to_dl(mn_device_t dev, DLDevice *out, const char *func) {
  switch (dev.type) {
    case MN_DEVICE_CPU: *out = (DLDevice){kDLCPU, 0}; return MN_OK;
    case MN_DEVICE_CUDA: *out = (DLDevice){kDLCUDA, dev.index}; return MN_OK;
    case MN_DEVICE_SIM: *out = (DLDevice){kDLExtDev, dev.index}; return MN_OK;
    case MN_DEVICE_META:
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "Cannot pack tensors on meta (the meta device has no data)");
    default: return mn__error(MN_ERR_INVALID_ARGUMENT, func, "invalid device type %d", (int)dev.type);
  }
}

static mn_status device_from_dl(DLDevice d, mn_device_t *out, const char *func) {
  switch ((int)d.device_type) {
    case kDLCPU:
    case kDLCUDAHost: *out = mn_device_cpu(); break;
    case kDLCUDA:
    case kDLCUDAManaged: *out = mn_device_cuda(d.device_id); break;
    case kDLExtDev: *out = mn_device_sim(d.device_id); break;
    default:
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack device type %d is not supported", (int)d.device_type);
  }
  mn_status st = mn_device_check(*out);
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

/* ---- export ------------------------------------------------------------------------ */

typedef struct {
  union {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } m;
  mn_view_t *view; /* holds the storage reference */
  int64_t shape[MN_MAX_DIMS];
  int64_t strides[MN_MAX_DIMS];
} export_ctx;

static void export_free(export_ctx *c) {
  mn_view_destroy(c->view);
  free(c);
}
static void legacy_deleter(DLManagedTensor *self) { export_free(self->manager_ctx); }
static void versioned_deleter(DLManagedTensorVersioned *self) { export_free(self->manager_ctx); }

/* Exports v as a legacy or a versioned managed tensor (c->m.legacy or
 * c->m.versioned), holding its own view of v's storage. */
static mn_status export_view(const mn_view_t *v, bool versioned, export_ctx **out, const char *func) {
  if (!v) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "view must not be NULL");
  DLDataType dt = {0};
  DLDevice dev = {0};
  mn_status st = dtype_to_dl(v->dtype, &dt, func);
  if (st == MN_OK) st = device_to_dl(mn_view_device(v), &dev, func);
  if (st != MN_OK) return st;
  export_ctx *c = mn__calloc(1, sizeof *c);
  if (!c) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  mn__geom_t g;
  mn__geom_of(v, &g);
  st = mn__view_from_geom(v, &g, func, &c->view);
  if (st != MN_OK) {
    free(c);
    return st;
  }
  memcpy(c->shape, v->sizes, sizeof c->shape);
  memcpy(c->strides, v->strides, sizeof c->strides);
  DLTensor t = {.data = mn_view_data(v), .device = dev, .ndim = v->ndim, .dtype = dt,
                .shape = c->shape, .strides = c->strides, .byte_offset = 0};
  if (versioned)
    c->m.versioned = (DLManagedTensorVersioned){.version = {MN_DLPACK_MAJOR, MN_DLPACK_MINOR}, .manager_ctx = c,
                                                .deleter = versioned_deleter, .flags = 0, .dl_tensor = t};
  else
    c->m.legacy = (DLManagedTensor){.dl_tensor = t, .manager_ctx = c, .deleter = legacy_deleter};
  *out = c;
  return MN_OK;
}

mn_status mn_view_to_dlpack(const mn_view_t *v, DLManagedTensor **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  export_ctx *c = NULL;
  mn_status st = export_view(v, false, &c, __func__);
  if (st == MN_OK) *out = &c->m.legacy;
  return st;
}

mn_status mn_view_to_dlpack_versioned(const mn_view_t *v, DLManagedTensorVersioned **out) {
  MN__CHECK_ARG(out != NULL, "out must not be NULL");
  export_ctx *c = NULL;
  mn_status st = export_view(v, true, &c, __func__);
  if (st == MN_OK) *out = &c->m.versioned;
  return st;
}

/* ---- import ------------------------------------------------------------------------ */

typedef struct {
  DLManagedTensor *legacy;
  DLManagedTensorVersioned *versioned;
  int armed; /* 0 while the import may still fail: the caller keeps the tensor */
} import_ctx;

static void import_deleter(void *ctx, void *data) {
  (void)data;
  import_ctx *c = ctx;
  if (c->armed) {
    if (c->legacy && c->legacy->deleter) c->legacy->deleter(c->legacy);
    if (c->versioned && c->versioned->deleter) c->versioned->deleter(c->versioned);
  }
  free(c);
}

/* Validates t, then wraps its memory in a storage whose last release calls
 * the producer's deleter (legacy or versioned, whichever is not NULL). */
static mn_status import_common(const DLTensor *t, DLManagedTensor *legacy, DLManagedTensorVersioned *versioned,
                               const char *func, mn_view_t **out) {
  if (t->ndim < 0 || t->ndim > MN_MAX_DIMS)
    return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack tensor has %d dims; mnemo supports 0..%d", (int)t->ndim,
                     MN_MAX_DIMS);
  if (t->ndim > 0 && !t->shape) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "DLPack tensor has no shape");
  mn_dtype dt = MN_DTYPE_UINT8;
  mn_device_t dev = mn_device_cpu();
  mn_status st = dtype_from_dl(t->dtype, &dt, func);
  if (st == MN_OK) st = device_from_dl(t->device, &dev, func);
  if (st != MN_OK) return st;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] < 0)
      return mn__error(MN_ERR_INVALID_ARGUMENT, func, "DLPack size %lld at dim %d is negative", (long long)t->shape[d],
                       d);
  int64_t strides[MN_MAX_DIMS];
  if (t->strides) memcpy(strides, t->strides, (size_t)t->ndim * sizeof *strides);
  else if (!mn__contiguous_strides(t->shape, t->ndim, strides))
    return mn__error(MN_ERR_OVERFLOW, func, "DLPack tensor's contiguous strides overflow int64");
  for (int d = 0; d < t->ndim; d++) {
    if (strides[d] < 0)
      return mn__error(MN_ERR_NOT_SUPPORTED, func, "DLPack stride %lld at dim %d is negative (not supported)",
                       (long long)strides[d], d);
  }
  /* The bytes the geometry reaches, addressable from data + byte_offset. */
  size_t nbytes = 0;
  bool ovf = !mn__strided_span_bytes(t->ndim, t->shape, strides, 0, mn_dtype_itemsize(dt), &nbytes);
  if (!ovf && t->data) mn__ck_size_add(mn__ck_size_add((uintptr_t)t->data, t->byte_offset, &ovf), nbytes, &ovf);
  if (ovf) return mn__error(MN_ERR_OVERFLOW, func, "DLPack tensor spans more bytes than the address space");
  char *data = t->data ? (char *)t->data + t->byte_offset : NULL;
  if (!data && nbytes) return mn__error(MN_ERR_INVALID_ARGUMENT, func, "DLPack tensor has no data");
  import_ctx *c = mn__calloc(1, sizeof *c);
  if (!c) return mn__error(MN_ERR_OUT_OF_MEMORY, func, "out of host memory");
  c->legacy = legacy;
  c->versioned = versioned;
  mn_storage_t *s = NULL;
  st = mn_storage_from_buffer(dev, data, nbytes, import_deleter, c, &s);
  if (st != MN_OK) {
    free(c);
    return mn__error_wrap(st, func);
  }
  st = mn_view_create(s, dt, t->ndim, t->shape, strides, 0, out);
  if (st == MN_OK) c->armed = 1; /* from now on the storage owns the tensor */
  mn_storage_release(s);         /* on failure: frees c without calling the producer */
  return st == MN_OK ? MN_OK : mn__error_wrap(st, func);
}

mn_status mn_view_from_dlpack(DLManagedTensor *t, mn_view_t **out) {
  MN__CHECK_ARG(t != NULL && out != NULL, "tensor and out must not be NULL");
  return import_common(&t->dl_tensor, t, NULL, __func__, out);
}

mn_status mn_view_from_dlpack_versioned(DLManagedTensorVersioned *t, mn_view_t **out) {
  MN__CHECK_ARG(t != NULL && out != NULL, "tensor and out must not be NULL");
  if (t->version.major != MN_DLPACK_MAJOR)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__, "DLPack major version %u is not supported (only %d)",
                     t->version.major, MN_DLPACK_MAJOR);
  if (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY)
    return mn__error(MN_ERR_NOT_SUPPORTED, __func__,
                     "read-only DLPack tensors are not supported (mnemo views are writable)");
  return import_common(&t->dl_tensor, NULL, t, __func__, out);
}
