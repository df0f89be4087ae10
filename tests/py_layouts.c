/* tests/py_layouts.c: prints, as one JSON object, what the Python package's
 * ctypes mirrors must agree with: every mirrored struct's sizeof and its
 * fields' offsets and sizes, and the enum and #define values the package uses,
 * all read by the compiler from the headers of include/mnemo. tests/python/test_bindings.py
 * runs it and compares with the ctypes classes and mnemo._lib's constants.
 * A field's kind: "i" integer (enums included), "b" bool, "f" floating, "o"
 * anything else (pointers, arrays, structs, unions).
 * A struct the package mirrors gets one STRUCT line here (its fields in
 * declaration order); a constant one VALUE line. A field name the header
 * lacks fails to compile, so this list cannot drift either.
 * Threading: a single-threaded program. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include "mnemo/mnemo.h"

/* The anonymous union of mn_scalar_t (mnemo._lib._ScalarValue). */
typedef __typeof__(((mn_scalar_t *)0)->v) mn_scalar_value_t;

static int first_struct = 1, first_field;

static void begin(const char *name, size_t size) {
  printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": [", first_struct ? "" : ",", name, size);
  first_struct = 0;
  first_field = 1;
}

static void field(const char *name, size_t offset, size_t size, char kind) {
  printf("%s[\"%s\", %zu, %zu, \"%c\"]", first_field ? "" : ", ", name, offset, size, kind);
  first_field = 0;
}

static int first_value = 1;

static void value(const char *name, long long v) {
  printf("%s\n  \"%s\": %lld", first_value ? "" : ",", name, v);
  first_value = 0;
}

#define STRUCT(T, ...)                 \
  do {                                 \
    typedef T S_;                      \
    begin(#T, sizeof(S_));             \
    __VA_ARGS__                        \
    printf("]}");                      \
  } while (0);
#define KIND(x)                                                                                \
  _Generic((x), _Bool: 'b', char: 'i', signed char: 'i', unsigned char: 'i', short: 'i',         \
           unsigned short: 'i', int: 'i', unsigned: 'i', long: 'i', unsigned long: 'i',          \
           long long: 'i', unsigned long long: 'i', float: 'f', double: 'f', long double: 'f',   \
           default: 'o')
#define F(f) field(#f, offsetof(S_, f), sizeof(((S_ *)0)->f), KIND(((S_ *)0)->f));
#define VALUE(name) value(#name, (long long)(name));

/* Every struct the package mirrors, by its C name. */
#define MIRRORED_STRUCTS \
  STRUCT(mn_device_t, F(type) F(index)) \
  STRUCT(mn_scalar_value_t, F(b) F(i) F(u) F(f) F(c)) \
  STRUCT(mn_scalar_t, F(kind) F(v)) \
  STRUCT(mn_stat_t, F(current) F(peak) F(allocated) F(freed)) \
  STRUCT(mn_alloc_stats_t, F(size) F(version) F(allocation) F(segment) F(active) F(inactive_split) F(allocated_bytes) F(reserved_bytes) F(active_bytes) F(inactive_split_bytes) F(requested_bytes) F(oversize_allocations) F(oversize_segments) F(num_alloc_retries) F(num_ooms) F(num_sync_all_streams) F(num_device_alloc) F(num_device_free) F(max_split_size)) \
  STRUCT(mn_snapshot_block_t, F(address) F(size) F(requested_size) F(state)) \
  STRUCT(mn_snapshot_segment_t, F(device) F(address) F(total_size) F(allocated_size) F(active_size) F(requested_size) F(stream_id) F(is_large) F(is_expandable) F(pool_id) F(nblocks) F(blocks)) \
  STRUCT(mn_snapshot_t, F(nsegments) F(segments)) \
  STRUCT(mn_caching_config_t, F(max_split_size) F(max_non_split_rounding) F(garbage_collection_threshold) F(roundup_power2_divisions) F(expandable_segments) F(per_process_memory_fraction) F(backend)) \
  STRUCT(mn_pinned_config_t, F(size_class_divisions) F(use_host_register)) \
  STRUCT(mn_mempool_options_t, F(source) F(no_split) F(use_on_oom)) \
  STRUCT(mn_device_props_t, F(device) F(name) F(total_memory) F(cc_major) F(cc_minor) F(multiprocessors) F(alloc_granularity) F(supports_vmm) F(is_host_accessible)) \
  STRUCT(mn_dtype_info_t, F(dtype) F(name) F(itemsize) F(kind) F(is_signed)) \
  STRUCT(mn_trace_entry_t, F(action) F(pre) F(time_us) F(stream) F(address) F(size) F(block_size) F(device) F(line) F(stack)) \
  STRUCT(mn_trace_meta_t, F(key) F(value)) \
  STRUCT(mn_trace_frame_t, F(file) F(name) F(line)) \
  STRUCT(mn_trace_annotation_t, F(time_us) F(entry) F(device) F(stack) F(stage) F(name)) \
  STRUCT(mn_trace_t, F(version) F(nentries) F(entries) F(nmeta) F(meta) F(capacity) F(meta_capacity) F(origin_ns) F(dropped) F(nframes) F(frames) F(nstacks) F(stack_start) F(stack_frames) F(nannotations) F(annotations) F(intern_)) \
  STRUCT(mn_trace_recorder_stats_t, F(recorded) F(overwritten) F(held) F(capacity) F(max_frames) F(stacks) F(stack_pcs) F(stackless)) \
  STRUCT(mn_replay_step_t, F(entry) F(allocated) F(reserved) F(requested)) \
  STRUCT(mn_replay_oom_t, F(entry) F(size) F(recorded) F(reproduced)) \
  STRUCT(mn_replay_options_t, F(skip_pre) F(skip_empty_cache) F(trace_device) F(oom_retries) F(on_step) F(on_step_user) F(stop_after) F(at_stop) F(at_stop_user) F(skip_pre_segments) F(live_ptrs) F(replay_ooms) F(on_oom) F(on_oom_user)) \
  STRUCT(mn_replay_result_t, F(allocs) F(frees) F(pre_allocs) F(ooms) F(skipped_frees) F(retries) F(empty_caches) F(trace_device) F(trace_devices) F(streams) F(peak_allocated) F(peak_reserved) F(peak_requested) F(reserved_after_pre) F(allocated_after_pre) F(ratio) F(device_allocs) F(device_allocs_events) F(device_frees) F(peak_device_mapped) F(op_ns) F(ns_per_op) F(stats_from_allocator) F(pre_segments) F(pre_segments_laid_out) F(recorded_ooms) F(ooms_reproduced)) \
  STRUCT(mn_trace_device_t, F(index) F(label) F(host) F(entries) F(pre_allocs) F(oom_lines) F(oom_capacity) F(release_capacity) F(partial_releases)) \
  STRUCT(mn_report_options_t, F(configs) F(nconfigs) F(capacity) F(trace_device) F(name) F(title) F(output) F(on_progress) F(progress_user)) \
  STRUCT(mn_diff_options_t, F(config) F(trace_device) F(name_a) F(name_b) F(page) F(title) F(output) F(top) F(on_progress) F(progress_user)) \
  STRUCT(mn_report_t, F(page) F(page_size) F(summary) F(json) F(notes)) \
  STRUCT(mn_sim_config_t, F(device_count) F(capacity) F(granularity) F(eager) F(no_peer_access)) \
  STRUCT(mn_named_views_t, F(count) F(names) F(views) F(nmeta) F(meta_keys) F(meta_values)) \
  STRUCT(DLDevice, F(device_type) F(device_id)) \
  STRUCT(DLDataType, F(code) F(bits) F(lanes)) \
  STRUCT(DLTensor, F(data) F(device) F(ndim) F(dtype) F(shape) F(strides) F(byte_offset)) \
  STRUCT(DLManagedTensor, F(dl_tensor) F(manager_ctx) F(deleter)) \
  STRUCT(DLPackVersion, F(major) F(minor)) \
  STRUCT(DLManagedTensorVersioned, F(version) F(manager_ctx) F(deleter) F(flags) F(dl_tensor))

/* Every enum value and #define the package uses. */
#define STATUS_VALUE(sym, val, name, text) VALUE(sym)
#define DTYPE_VALUE(sym, val, ...) VALUE(sym)
#define VALUES                                                                                      \
  MN_STATUS_MAP(STATUS_VALUE)                                                                       \
  MN_DTYPE_MAP(DTYPE_VALUE)                                                                         \
  VALUE(MN_DTYPE_COUNT)                                                                             \
  VALUE(MN_DEVICE_CPU) VALUE(MN_DEVICE_CUDA) VALUE(MN_DEVICE_SIM) VALUE(MN_DEVICE_META)             \
  VALUE(MN_DEVICE_TYPE_COUNT)                                                                       \
  VALUE(MN_KIND_BOOL) VALUE(MN_KIND_UINT) VALUE(MN_KIND_INT) VALUE(MN_KIND_FLOAT)                   \
  VALUE(MN_KIND_COMPLEX) VALUE(MN_KIND_QUANTIZED)                                                   \
  VALUE(MN_SCALAR_BOOL) VALUE(MN_SCALAR_INT) VALUE(MN_SCALAR_UINT) VALUE(MN_SCALAR_FLOAT)           \
  VALUE(MN_SCALAR_COMPLEX)                                                                          \
  VALUE(MN_STORAGE_ALLOCATOR) VALUE(MN_STORAGE_FOREIGN) VALUE(MN_STORAGE_FILE)                      \
  VALUE(MN_STORAGE_SHARED) VALUE(MN_STORAGE_IPC)                                                    \
  VALUE(MN_POOL_ALL) VALUE(MN_POOL_SMALL) VALUE(MN_POOL_LARGE) VALUE(MN_POOL_COUNT)                 \
  VALUE(MN_BLOCK_ACTIVE) VALUE(MN_BLOCK_ACTIVE_PENDING_FREE) VALUE(MN_BLOCK_INACTIVE)               \
  VALUE(MN_TRACE_ALLOC) VALUE(MN_TRACE_FREE_REQUESTED) VALUE(MN_TRACE_FREE_COMPLETED)               \
  VALUE(MN_TRACE_SEGMENT_ALLOC) VALUE(MN_TRACE_SEGMENT_FREE) VALUE(MN_TRACE_SEGMENT_MAP)            \
  VALUE(MN_TRACE_SEGMENT_UNMAP) VALUE(MN_TRACE_EMPTY_CACHE) VALUE(MN_TRACE_OOM)                     \
  VALUE(MN_TRACE_ACTION_COUNT)                                                                      \
  VALUE(MN_TRACE_ANNOTATION_MARK) VALUE(MN_TRACE_ANNOTATION_START) VALUE(MN_TRACE_ANNOTATION_END)   \
  VALUE(MN_MAX_DIMS) VALUE(MN_VIEW_END) VALUE(MN_VIEW_OFFSET_KEEP) VALUE(MN_ROUNDUP_BUCKETS)        \
  VALUE(MN_DEVICE_NAME_MAX) VALUE(MN_ALLOC_STATS_VERSION) VALUE(MN_SHM_HANDLE_MAX)                  \
  VALUE(MN_DLPACK_MAJOR) VALUE(MN_DLPACK_MINOR) VALUE(MN_REPORT_MAX_CONFIGS)                         \
  VALUE(kDLCPU) VALUE(kDLCUDA) VALUE(kDLCUDAHost) VALUE(kDLExtDev) VALUE(kDLCUDAManaged)            \
  VALUE(DLPACK_FLAG_BITMASK_READ_ONLY) VALUE(DLPACK_FLAG_BITMASK_IS_COPIED)

int main(void) {
  printf("{\"structs\": {");
  MIRRORED_STRUCTS
  printf("\n},\n\"values\": {");
  VALUES
  printf("\n}}\n");
  return 0;
}
