/* mnemo/dlpack.h: DLPack interchange: export any view as DLManagedTensor (legacy)
 * or DLManagedTensorVersioned (DLPack >= 1.0) and import either without a copy. */
#ifndef MNEMO_DLPACK_H
#define MNEMO_DLPACK_H

/*
 * Structs: the system's <dlpack/dlpack.h> (Debian's libdlpack-dev) when it is
 * present or already included (any version); the DLPack 0.6 core (DLDevice,
 * DLDataType, DLTensor, DLManagedTensor) is defined here, ABI-identical, only
 * when no dlpack.h exists (then include no dlpack.h after this header).
 * DLPack 0.x headers lack the versioned tensor of DLPack 1.0: DLPackVersion,
 * DLManagedTensorVersioned and the flag bits are then defined here with the
 * 1.0 layout (guarded by DLPACK_MAJOR_VERSION, which 1.x
 * headers define). Define MNEMO_DLPACK_NO_SYSTEM_HEADER to never include it.
 * See docs/VIEWS.md for the dtype and device mapping.
 */
#include <stdint.h>

#include "mnemo/view.h"

#if !defined(DLPACK_DLPACK_H_) && !defined(MNEMO_DLPACK_NO_SYSTEM_HEADER) && defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(DLPACK_DLPACK_H_) && !defined(DLPACK_VERSION)
/* DLPack 0.6 core, ABI-identical to dlpack/dlpack.h (no dlpack.h of any
 * version, whose include guard is DLPACK_DLPACK_H_, was found). */
#define DLPACK_VERSION 60
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
} DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
} DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif /* no dlpack.h */

#ifndef DLPACK_MAJOR_VERSION
/* DLPack 1.0's versioned managed tensor (same layout as dlpack.h 1.x). */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif /* !DLPACK_MAJOR_VERSION */

/* Type codes of DLPack >= 0.8 / 1.1 that 0.6 headers lack (values as dlpack.h). */
#define MN_DLPACK_CODE_BOOL 6
#define MN_DLPACK_CODE_FLOAT8_E4M3FN 10
#define MN_DLPACK_CODE_FLOAT8_E5M2 12
/* The DLPack version mnemo's versioned tensors carry. */
#define MN_DLPACK_MAJOR 1
#define MN_DLPACK_MINOR 1

/* Exports v (shape, strides in elements, data = address of element 0,
 * byte_offset 0). The tensor holds a storage reference: the memory stays
 * alive until the consumer calls (*out)->deleter(*out), exactly once. CPU ->
 * kDLCPU, CUDA -> kDLCUDA, SIM -> kDLExtDev (device_id = SIM index). */
MN_API MN_NODISCARD mn_status mn_view_to_dlpack(const mn_view_t *v, DLManagedTensor **out);
MN_API MN_NODISCARD mn_status mn_view_to_dlpack_versioned(const mn_view_t *v, DLManagedTensorVersioned **out);

/* Imports a DLPack tensor as a view without a copy. On success mnemo owns
 * `t`: its deleter runs when the last view of the new storage is destroyed;
 * on failure `t` stays the caller's (nothing is called). Refused: lanes != 1,
 * unknown type codes, negative strides or sizes, more than MN_MAX_DIMS dims,
 * devices other than kDLCPU/kDLCUDAHost (CPU), kDLCUDA/kDLCUDAManaged (CUDA),
 * kDLExtDev (SIM); versioned: a major version other than 1 and read-only
 * tensors (mnemo views are writable). NULL strides mean row-major. */
MN_API MN_NODISCARD mn_status mn_view_from_dlpack(DLManagedTensor *t, mn_view_t **out);
MN_API MN_NODISCARD mn_status mn_view_from_dlpack_versioned(DLManagedTensorVersioned *t, mn_view_t **out);

#ifdef __cplusplus
}
#endif
#endif /* MNEMO_DLPACK_H */
