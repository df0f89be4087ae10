/* profiling/stacks.c: the stack rule of the reports and the CLI (profiling/stacks.h): the frames
 * never shown (PyTorch memory_viz's filter and the caching allocator's frames) and
 * the first user frame a stack is grouped under. Pure functions; any thread. */
#include "profiling/stacks.h"

#include <string.h>

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !memcmp(s + n - m, suffix, m);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static const char *basename_of(const char *file) {
  const char *b = file;
  for (const char *p = file; *p; p++)
    if (*p == '/' || *p == '\\') b = p + 1;
  return b;
}

static bool contains_any(const char *s, const char *const *list, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (strstr(s, list[k])) return true;
  return false;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A Python frame: its file ends with .py (.pyw, .pyx) or is a "<...>" pseudo file
 * (<frozen ...>, <string>, <eval_with_key>.N). Every other frame is native (C/C++). */
static bool frame_is_python(const mn_trace_frame_t *f) {
  const char *file = f->file ? f->file : "";
  return file[0] == '<' || ends_with(file, ".py") || ends_with(file, ".pyw") || ends_with(file, ".pyx");
}

/* PyTorch's memory_viz (torch/cuda/_memory_viz.py _frame_filter, MemoryViz.js
 * frameFilter) drops frames whose function name contains one of these... */
static const char *const omit_names[] = {
    "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "__libc_start_main",
    "PyEval_",        "PyObject_",                 "PyFunction_",
    /* ...and mnemo also drops the caching allocators' own frames (c10::cuda::
     * CUDACachingAllocator::Native::DeviceCachingAllocator::malloc, ...::allocate,
     * the host allocator's), which every allocation's stack opens with. */
    "CachingAllocator::",
};
/* ...or whose file contains one of these (the dispatcher's wrappers, CPython's
 * interpreter loop and call machinery). */
static const char *const omit_files[] = {
    "core/boxing",    "/Register",     "/Redispatch",     "pythonrun.c", "Modules/main.c", "Objects/call.c",
    "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h",
};

bool mn__frame_is_internal(const mn_trace_frame_t *f) {
  if (frame_is_python(f)) return false;
  const char *name = f->name ? f->name : "", *file = f->file ? f->file : "";
  /* memory_viz matches "_start" anywhere in a name, which also hides user
   * functions such as on_epoch_start; the process entry point is named exactly that */
  if (!strcmp(name, "_start")) return true;
  if (contains_any(name, omit_names, COUNT(omit_names)) || contains_any(file, omit_files, COUNT(omit_files)))
    return true;
  /* recorded stacks often keep only the base name (RegisterCUDA.cpp), which
   * memory_viz's "/Register" misses */
  const char *base = basename_of(file);
  return starts_with(base, "Register") || starts_with(base, "Redispatch");
}

/* A native frame whose "file" is an object file or a shared library (thread48.o,
 * libc.so.6, libtorch_cuda.so), not a source file: never a group key. */
static bool frame_is_binary(const mn_trace_frame_t *f) {
  if (frame_is_python(f)) return false;
  const char *file = f->file ? f->file : "";
  static const char *const ext[] = {".o", ".so", ".a", ".dylib", ".dll", ".exe"};
  for (size_t k = 0; k < COUNT(ext); k++)
    if (ends_with(file, ext[k])) return true;
  const char *so = strstr(file, ".so.");
  if (!so) return false;
  for (const char *p = so + 4; *p; p++) /* libc.so.6, libcudart.so.12.4.127 */
    if (!(*p == '.' || (*p >= '0' && *p <= '9'))) return false;
  return true;
}

/* torch's own top-level folders and modules: a source tree's torch/ is the torch
 * package only when one of these follows it */
static const char *const torch_src[] = {
    "nn",       "autograd", "optim",   "utils",       "cuda",         "amp",          "backends",
    "_dynamo",  "_inductor", "_functorch", "_higher_order_ops", "distributed", "fx", "jit",
    "_refs",    "_prims",   "_decomp", "_subclasses", "_library",     "_ops.py",      "_tensor.py",
    "functional.py", "overrides.py", "serialization.py", "random.py", "storage.py",
};

static bool is_sep(char c) { return c == '/' || c == '\\'; }

/* A Python frame inside the torch package (site-packages/torch/..., torch/...,
 * or a source tree's torch/nn, torch/autograd, ...; a folder merely named torch,
 * as in /opt/torch/.venv/lib/..., is not it), or <frozen ...> / <string>. */
static bool frame_is_torch_python(const mn_trace_frame_t *f) {
  if (!frame_is_python(f)) return false;
  const char *file = f->file ? f->file : "";
  if (starts_with(file, "<frozen ") || !strcmp(file, "<string>")) return true;
  if (starts_with(file, "torch") && is_sep(file[5])) return true; /* a relative torch/... */
  for (const char *p = file; (p = strstr(p, "torch")) != NULL; p++) {
    if (p == file || !is_sep(p[-1]) || !is_sep(p[5])) continue;
    const char *before = p - 1; /* the separator before "torch" */
    static const char *const pkgs[] = {"site-packages", "dist-packages"};
    for (size_t k = 0; k < COUNT(pkgs); k++) {
      size_t n = strlen(pkgs[k]);
      if ((size_t)(before - file) >= n && !memcmp(before - n, pkgs[k], n)) return true;
    }
    const char *rest = p + 6;
    for (size_t k = 0; k < COUNT(torch_src); k++) {
      size_t n = strlen(torch_src[k]);
      if (!strncmp(rest, torch_src[k], n) && (rest[n] == '\0' || is_sep(rest[n]))) return true;
    }
  }
  return false;
}

static bool is_autograd_node(const mn_trace_frame_t *f) {
  const char *name = f->name ? f->name : "";
  return starts_with(name, "torch::autograd::") && (strstr(name, "::apply(") || ends_with(name, "::apply"));
}

/* The kinds of first user frame, in the order the rule tries them. */
enum tier { PY_USER, PY_ANY, AUTOGRAD_NODE, NATIVE_SOURCE, NATIVE_ANY, NTIERS };

static bool in_tier(const mn_trace_frame_t *f, enum tier k) {
  bool py = frame_is_python(f);
  switch (k) {
    case PY_USER:
      return py && !frame_is_torch_python(f);
    case PY_ANY:
      return py;
    case AUTOGRAD_NODE:
      return !py && is_autograd_node(f);
    case NATIVE_SOURCE:
      return !py && f->file && f->file[0] && !mn__frame_is_internal(f) && !frame_is_binary(f);
    default:
      return !py && !mn__frame_is_internal(f) && !frame_is_binary(f);
  }
}

/* The frames kept after the key: its tier's (the native tiers keep every
 * non-internal native frame outside object files). */
static bool follows(const mn_trace_frame_t *f, enum tier k) {
  return k <= PY_ANY ? in_tier(f, k) : in_tier(f, NATIVE_ANY);
}

size_t mn__stack_user_frames(const mn_trace_t *t, uint32_t stack, uint32_t *out, size_t max) {
  const uint32_t *fr = NULL;
  size_t n = stack ? mn_trace_stack_get(t, stack, &fr) : 0;
  for (int k = 0; k < NTIERS; k++) {
    size_t first = n;
    for (size_t j = 0; j < n && first == n; j++) {
      const mn_trace_frame_t *f = mn_trace_frame_get(t, fr[j]);
      if (f && in_tier(f, (enum tier)k)) first = j;
    }
    if (first == n) continue;
    size_t m = 0;
    for (size_t j = first; j < n; j++) {
      const mn_trace_frame_t *f = mn_trace_frame_get(t, fr[j]);
      if (!f || (j > first && !follows(f, (enum tier)k))) continue;
      if (m < max) out[m] = fr[j];
      m++;
    }
    return m;
  }
  return 0;
}

uint32_t mn__stack_key(const mn_trace_t *t, uint32_t stack) {
  uint32_t key = 0;
  return mn__stack_user_frames(t, stack, &key, 1) ? key : 0;
}

size_t mn__stack_shown_frames(const mn_trace_t *t, uint32_t stack, uint32_t *out, size_t max) {
  const uint32_t *fr = NULL;
  size_t n = stack ? mn_trace_stack_get(t, stack, &fr) : 0, m = 0;
  for (size_t j = 0; j < n; j++) {
    const mn_trace_frame_t *f = mn_trace_frame_get(t, fr[j]);
    if (!f || mn__frame_is_internal(f)) continue;
    if (m < max) out[m] = fr[j];
    m++;
  }
  return m;
}
