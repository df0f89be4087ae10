/* python/mnemo/_speedups.c: the compiled fast paths of the Python package
 * (CPython C API), for the calls on small objects where ctypes' per-call cost
 * dominates: the base type of mnemo.View (its handle, kept objects and
 * allocator box, freed in tp_finalize without a Python __del__; shape, ndim,
 * basic indexing and tolist of CPU views), mnemo.empty's common case and
 * storage element reads and writes. Everything else stays in Python over
 * ctypes, and mnemo/view.py has the same members in pure Python for when
 * this module is not built (or MNEMO_PURE_PYTHON=1): the two must behave the
 * same, and tests/python run both.
 *
 * The module does not link libmnemo: mnemo._lib loads the library once with
 * ctypes, and _bind() hands this module the addresses of the C functions it
 * calls (by name, through the same CDLL), so both paths use the one loaded
 * library. The pointers are declared with the public headers' own types
 * (__typeof__), so the compiler checks every call against include/mnemo.
 * Any case a fast path does not handle exactly (another device, a dtype, an
 * argument type, an error status) goes to the Python implementation, which
 * gives the same result or raises mnemo's usual exception.
 *
 * Threading: every function runs with the GIL held; a handle is taken out of
 * its object (set to NULL) before it is destroyed, with no Python code in
 * between, so it is freed once (as mnemo._owner's rule). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#include "mnemo/dlpack.h"
#include "mnemo/dtype.h"
#include "mnemo/quantized.h"
#include "mnemo/storage.h"
#include "mnemo/view.h"

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 */
static PyObject *Py_NewRef(PyObject *o) {
  Py_INCREF(o);
  return o;
}
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *o) {
  Py_INCREF(o);
  if (PyModule_AddObject(m, name, o) < 0) {
    Py_DECREF(o);
    return -1;
  }
  return 0;
}
#endif

/* ---- the library's functions (addresses from _bind) ---------------------- */
#define FUNCS(X)                                                                                                      \
  X(mn_view_destroy)                                                                                                  \
  X(mn_view_ndim)                                                                                                     \
  X(mn_view_sizes)                                                                                                    \
  X(mn_view_strides)                                                                                                  \
  X(mn_view_data)                                                                                                     \
  X(mn_view_dtype)                                                                                                    \
  X(mn_view_device)                                                                                                   \
  X(mn_view_slice)                                                                                                    \
  X(mn_view_select)                                                                                                   \
  X(mn_view_empty)                                                                                                    \
  X(mn_view_create)                                                                                                   \
  X(mn_view_fill)                                                                                                     \
  X(mn_view_t2d)                                                                                                      \
  X(mn_view_transpose)                                                                                                \
  X(mn_view_view)                                                                                                     \
  X(mn_view_to_dlpack)                                                                                                \
  X(mn_view_from_dlpack)                                                                                              \
  X(mn_view_from_dlpack_versioned)                                                                                    \
  X(mn_dtype_itemsize)                                                                                                \
  X(mn_dtype_is_quantized)                                                                                            \
  X(mn_scalar_from_bytes)                                                                                             \
  X(mn_storage_nbytes)                                                                                                \
  X(mn_storage_data)                                                                                                  \
  X(mn_storage_device)

#define DECLARE_POINTER(name) static __typeof__(&name) p_##name;
FUNCS(DECLARE_POINTER)
#undef DECLARE_POINTER

static int bound;                 /* _bind() succeeded */
static PyTypeObject *view_class;  /* mnemo.View (a subclass of ViewBase) */
static PyObject *pin_fn;          /* mnemo._owner.pin(box) */
static PyObject *unpin_fn;        /* mnemo._owner.unpin(box) */
static PyObject *pin_view_fn;     /* mnemo._owner.pin_view(handle) */
static PyObject *boxes;           /* mnemo._owner._boxes (a dict): empty, no allocator to pin */
static PyObject *str_getitem_slow, *str_tolist_slow, *str_t_slow, *str_transpose_slow, *str_view_slow,
    *str_dlpack_device_slow, *empty_tuple;

/* ---- ViewBase ----------------------------------------------------------------- */
typedef struct {
  PyObject_HEAD
  PyObject *handle; /* an int (the mn_view_t*), or NULL/None once taken */
  PyObject *keep;   /* allocator objects kept alive (a tuple) */
  PyObject *box;    /* mnemo._owner.AllocatorBox or NULL/None */
  PyObject *weakrefs;
} ViewBase;

static mn_view_t *handle_of(ViewBase *self) {
  if (self->handle == NULL || self->handle == Py_None) return NULL;
  return (mn_view_t *)PyLong_AsVoidPtr(self->handle);
}

/* Frees the handle once and lets the allocator box go (what View.__del__ does). */
static void view_finalize(PyObject *obj) {
  ViewBase *self = (ViewBase *)obj;
  PyObject *h = self->handle;
  if (h == NULL || h == Py_None || !bound) return;
  self->handle = NULL; /* taken: nobody else frees it */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  mn_view_t *v = (mn_view_t *)PyLong_AsVoidPtr(h);
  Py_DECREF(h);
  if (v != NULL) p_mn_view_destroy(v);
  PyErr_Clear();
  if (self->box != NULL && self->box != Py_None) {
    PyObject *r = PyObject_CallOneArg(unpin_fn, self->box);
    if (r == NULL) PyErr_WriteUnraisable(obj);
    Py_XDECREF(r);
  }
  PyErr_Restore(type, value, tb);
}

static int view_traverse(ViewBase *self, visitproc visit, void *arg) {
  Py_VISIT(self->keep);
  Py_VISIT(self->box);
  return 0;
}

static int view_clear(ViewBase *self) {
  Py_CLEAR(self->keep);
  return 0;
}

static void view_dealloc(ViewBase *self) {
  if (Py_TYPE(self)->tp_finalize != NULL && PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) return;
  PyObject_GC_UnTrack(self);
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  Py_CLEAR(self->handle);
  Py_CLEAR(self->keep);
  Py_CLEAR(self->box);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A new View owning `h`, with `keep` and the box of the view it comes from
 * (pinned once more), or with the box looked up from the handle (box NULL). */
static PyObject *new_view(mn_view_t *h, PyObject *keep, PyObject *box) {
  ViewBase *out = (ViewBase *)view_class->tp_alloc(view_class, 0);
  PyObject *hv = out != NULL ? PyLong_FromVoidPtr(h) : NULL;
  if (hv == NULL) {
    Py_XDECREF(out);
    p_mn_view_destroy(h);
    return NULL;
  }
  PyObject *pinned;
  if (box != NULL) {
    pinned = box == Py_None ? Py_NewRef(Py_None) : PyObject_CallOneArg(pin_fn, box);
  } else if (PyDict_GET_SIZE(boxes) == 0) {
    pinned = Py_NewRef(Py_None);
  } else {
    pinned = PyObject_CallOneArg(pin_view_fn, hv);
  }
  if (pinned == NULL) {
    Py_DECREF(hv);
    Py_DECREF(out);
    p_mn_view_destroy(h);
    return NULL;
  }
  out->keep = Py_NewRef(keep != NULL ? keep : empty_tuple);
  out->box = pinned;
  out->handle = hv; /* last: the view owns the handle from here on */
  return (PyObject *)out;
}

static PyObject *view_get_shape(ViewBase *self, void *closure) {
  mn_view_t *h = handle_of(self);
  if (h == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "mnemo: the view has no handle (released)");
    return NULL;
  }
  int n = p_mn_view_ndim(h);
  const int64_t *sizes = p_mn_view_sizes(h);
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *x = PyLong_FromLongLong(sizes[i]);
    if (x == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static PyObject *view_get_ndim(ViewBase *self, void *closure) {
  mn_view_t *h = handle_of(self);
  if (h == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "mnemo: the view has no handle (released)");
    return NULL;
  }
  return PyLong_FromLong(p_mn_view_ndim(h));
}

/* One basic index (an exact int or a slice with step > 0) applied at `*dim`
 * of `cur`; NULL (no error set) when the Python path must do it. */
static mn_view_t *index_one(const mn_view_t *cur, PyObject *k, int *dim) {
  int ndim = p_mn_view_ndim(cur);
  if (*dim >= ndim) return NULL;
  mn_view_t *out = NULL;
  if (PyLong_CheckExact(k)) {
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(k, &overflow);
    if (overflow || (i == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return NULL;
    }
    int64_t size = p_mn_view_sizes(cur)[*dim];
    if (i < -size || i >= size) return NULL;
    if (p_mn_view_select(cur, *dim, (int64_t)i, &out) != MN_OK) return NULL;
    return out;
  }
  if (PySlice_Check(k)) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(k, &start, &stop, &step) < 0) {
      PyErr_Clear();
      return NULL;
    }
    if (step <= 0) return NULL;
    if (p_mn_view_slice(cur, *dim, (int64_t)start, (int64_t)stop, (int64_t)step, &out) != MN_OK) return NULL;
    *dim += 1;
    return out;
  }
  return NULL;
}

/* The fast part of View.__getitem__: ints, slices (step > 0) and tuples of
 * them; everything else (and every error) through View._getitem_slow. */
static PyObject *view_subscript(ViewBase *self, PyObject *key) {
  mn_view_t *h = bound ? handle_of(self) : NULL;
  if (h != NULL) {
    mn_view_t *res = NULL;
    int dim = 0;
    if (PyTuple_CheckExact(key)) {
      Py_ssize_t n = PyTuple_GET_SIZE(key);
      const mn_view_t *cur = h;
      for (Py_ssize_t i = 0; i < n; i++) {
        mn_view_t *next = index_one(cur, PyTuple_GET_ITEM(key, i), &dim);
        if (cur != h) p_mn_view_destroy((mn_view_t *)cur);
        cur = next;
        if (cur == NULL) break;
      }
      res = (n > 0 && cur != h) ? (mn_view_t *)cur : NULL;
    } else {
      res = index_one(h, key, &dim);
    }
    if (res != NULL) return new_view(res, self->keep, self->box != NULL ? self->box : Py_None);
  }
  PyErr_Clear();
  return PyObject_CallMethodOneArg((PyObject *)self, str_getitem_slow, key);
}

static PyObject *scalar_value(const mn_scalar_t *s) {
  switch (s->kind) {
  case MN_SCALAR_BOOL: return PyBool_FromLong(s->v.b);
  case MN_SCALAR_INT: return PyLong_FromLongLong(s->v.i);
  case MN_SCALAR_UINT: return PyLong_FromUnsignedLongLong(s->v.u);
  case MN_SCALAR_FLOAT: return PyFloat_FromDouble(s->v.f);
  case MN_SCALAR_COMPLEX: return PyComplex_FromDoubles(s->v.c[0], s->v.c[1]);
  }
  PyErr_SetString(PyExc_SystemError, "mnemo: unknown scalar kind");
  return NULL;
}

static PyObject *element(mn_dtype dt, const char *p) {
  switch (dt) { /* the common dtypes read directly (the values mn_scalar_from_bytes gives) */
  case MN_DTYPE_FLOAT32: {
    float f;
    memcpy(&f, p, sizeof f);
    return PyFloat_FromDouble(f);
  }
  case MN_DTYPE_FLOAT64: {
    double d;
    memcpy(&d, p, sizeof d);
    return PyFloat_FromDouble(d);
  }
  case MN_DTYPE_INT64: {
    int64_t i;
    memcpy(&i, p, sizeof i);
    return PyLong_FromLongLong(i);
  }
  case MN_DTYPE_INT32: {
    int32_t i;
    memcpy(&i, p, sizeof i);
    return PyLong_FromLong(i);
  }
  case MN_DTYPE_UINT8: return PyLong_FromLong(*(const uint8_t *)p);
  default: break;
  }
  mn_scalar_t s;
  if (p_mn_scalar_from_bytes(dt, p, &s) != MN_OK) {
    PyErr_SetString(PyExc_SystemError, "mnemo: mn_scalar_from_bytes failed");
    return NULL;
  }
  return scalar_value(&s);
}

static PyObject *tolist_dim(mn_dtype dt, size_t item, const char *p, int d, int ndim, const int64_t *sizes,
                            const int64_t *strides) {
  if (d == ndim) return element(dt, p);
  PyObject *list = PyList_New((Py_ssize_t)sizes[d]);
  if (list == NULL) return NULL;
  for (int64_t i = 0; i < sizes[d]; i++) {
    PyObject *x = tolist_dim(dt, item, p + i * strides[d] * (int64_t)item, d + 1, ndim, sizes, strides);
    if (x == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, x);
  }
  return list;
}

/* View.tolist() of CPU views of non-quantized dtypes; others through
 * View._tolist_slow (numpy). */
static PyObject *view_tolist(ViewBase *self, PyObject *unused) {
  mn_view_t *h = bound ? handle_of(self) : NULL;
  if (h != NULL) {
    mn_dtype dt = p_mn_view_dtype(h);
    if (p_mn_view_device(h).type == MN_DEVICE_CPU && !p_mn_dtype_is_quantized(dt)) {
      const char *p = p_mn_view_data(h);
      int ndim = p_mn_view_ndim(h);
      return tolist_dim(dt, p_mn_dtype_itemsize(dt), p, 0, ndim, p_mn_view_sizes(h), p_mn_view_strides(h));
    }
  }
  PyErr_Clear();
  return PyObject_CallMethodNoArgs((PyObject *)self, str_tolist_slow);
}

/* self.<name>(*args, **kwargs): the Python path of a method. */
static PyObject *call_slow(PyObject *self, PyObject *name, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  PyErr_Clear();
  PyObject *meth = PyObject_GetAttr(self, name);
  if (meth == NULL) return NULL;
  PyObject *r = PyObject_Vectorcall(meth, args, (size_t)nargs, kwnames);
  Py_DECREF(meth);
  return r;
}

/* An exact int that fits a C int, else 0 (no error set). */
static int small_int(PyObject *x, int *out) {
  if (!PyLong_CheckExact(x)) return 0;
  int overflow = 0;
  long v = PyLong_AsLongAndOverflow(x, &overflow);
  if (overflow || v < INT32_MIN || v > INT32_MAX || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return 0;
  }
  *out = (int)v;
  return 1;
}

static PyObject *derived(ViewBase *self, mn_view_t *out) {
  return new_view(out, self->keep, self->box != NULL ? self->box : Py_None);
}

static PyObject *view_t(ViewBase *self, PyObject *unused) {
  mn_view_t *h = bound ? handle_of(self) : NULL, *out = NULL;
  if (h != NULL && p_mn_view_t2d(h, &out) == MN_OK) return derived(self, out);
  return call_slow((PyObject *)self, str_t_slow, NULL, 0, NULL);
}

static PyObject *view_transpose(ViewBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  mn_view_t *h = bound ? handle_of(self) : NULL, *out = NULL;
  int d0, d1;
  if (h != NULL && kwnames == NULL && nargs == 2 && small_int(args[0], &d0) && small_int(args[1], &d1) &&
      p_mn_view_transpose(h, d0, d1, &out) == MN_OK)
    return derived(self, out);
  return call_slow((PyObject *)self, str_transpose_slow, args, nargs, kwnames);
}

static PyObject *view_view(ViewBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  mn_view_t *h = bound ? handle_of(self) : NULL, *out = NULL;
  if (h != NULL && kwnames == NULL && nargs >= 1) {
    PyObject *const *items = args;
    Py_ssize_t n = nargs;
    if (nargs == 1 && (PyTuple_CheckExact(args[0]) || PyList_CheckExact(args[0]))) {
      items = PySequence_Fast_ITEMS(args[0]);
      n = PySequence_Fast_GET_SIZE(args[0]);
    }
    int64_t shape[MN_MAX_DIMS];
    int ok = n <= MN_MAX_DIMS;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
      int overflow = 0;
      ok = PyLong_CheckExact(items[i]);
      if (ok) shape[i] = PyLong_AsLongLongAndOverflow(items[i], &overflow);
      ok = ok && !overflow && !PyErr_Occurred();
    }
    if (ok && p_mn_view_view(h, (int)n, n ? shape : NULL, &out) == MN_OK) return derived(self, out);
  }
  return call_slow((PyObject *)self, str_view_slow, args, nargs, kwnames);
}

static PyObject *view_dlpack_device(ViewBase *self, PyObject *unused) {
  mn_view_t *h = bound ? handle_of(self) : NULL;
  if (h != NULL) {
    mn_device_t d = p_mn_view_device(h);
    if (d.type == MN_DEVICE_CPU) return Py_BuildValue("(ii)", (int)kDLCPU, 0);
    if (d.type == MN_DEVICE_CUDA) return Py_BuildValue("(ii)", (int)kDLCUDA, d.index);
    if (d.type == MN_DEVICE_SIM) return Py_BuildValue("(ii)", (int)kDLExtDev, d.index);
  }
  return call_slow((PyObject *)self, str_dlpack_device_slow, NULL, 0, NULL);
}

static PyMemberDef view_members[] = {
    {"_handle", T_OBJECT, offsetof(ViewBase, handle), 0, "the mn_view_t* (an int), None once given up"},
    {"_keep", T_OBJECT, offsetof(ViewBase, keep), 0, "allocator objects this view keeps alive"},
    {"_box", T_OBJECT, offsetof(ViewBase, box), 0, "the allocator box this view counts on (mnemo._owner)"},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef view_getset[] = {
    {"shape", (getter)view_get_shape, NULL, "The sizes, a tuple of ints.", NULL},
    {"ndim", (getter)view_get_ndim, NULL, "The number of dims.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef view_methods[] = {
    {"tolist", (PyCFunction)view_tolist, METH_NOARGS, "The values as nested Python lists (a scalar for a 0-d view)."},
    {"t", (PyCFunction)view_t, METH_NOARGS, "Transposes a 2-d view; 0-d and 1-d views come back as they are."},
    {"transpose", (PyCFunction)(void (*)(void))view_transpose, METH_FASTCALL | METH_KEYWORDS, "Swaps two dims."},
    {"view", (PyCFunction)(void (*)(void))view_view, METH_FASTCALL | METH_KEYWORDS,
     "view(*shape): the same elements in a new shape (one -1 inferred); refused when the layout needs a copy (use "
     "reshape). view(dtype): the bytes as another dtype (PyTorch's rules)."},
    {"__dlpack_device__", (PyCFunction)view_dlpack_device, METH_NOARGS,
     "(DLPack device type, index): (1, 0) CPU, (2, i) CUDA, (12, i) SIM."},
    {NULL, NULL, 0, NULL}};

static PyMappingMethods view_mapping = {0, (binaryfunc)view_subscript, 0};

/* view[i] through the sequence protocol (PySequence_GetItem, as a Python
 * class with __getitem__ has): makes a View a sequence to torch.tensor() and
 * numpy, which then ask len() (View.__len__). */
static PyObject *view_item(ViewBase *self, Py_ssize_t i) {
  PyObject *k = PyLong_FromSsize_t(i);
  if (k == NULL) return NULL;
  PyObject *r = view_subscript(self, k);
  Py_DECREF(k);
  return r;
}

static PySequenceMethods view_sequence = {.sq_item = (ssizeargfunc)view_item};

static PyTypeObject ViewBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mnemo._speedups.ViewBase",
    .tp_doc = "The C base of mnemo.View: the handle, its freeing and the fast paths (mnemo/_speedups.c).",
    .tp_basicsize = sizeof(ViewBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)view_dealloc,
    .tp_finalize = view_finalize,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_weaklistoffset = offsetof(ViewBase, weakrefs),
    .tp_members = view_members,
    .tp_getset = view_getset,
    .tp_methods = view_methods,
    .tp_as_mapping = &view_mapping,
    .tp_as_sequence = &view_sequence,
};

/* ---- module functions ------------------------------------------------------------- */
/* empty(size, dtype_value, device_type, device_index): a new contiguous View,
 * or None when the Python path must make it (size not plain ints, an error). */
static PyObject *sp_empty(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4 || !bound) Py_RETURN_NONE;
  PyObject *size = args[0];
  if (!PyTuple_CheckExact(size)) Py_RETURN_NONE;
  if (PyTuple_GET_SIZE(size) == 1 && (PyTuple_CheckExact(PyTuple_GET_ITEM(size, 0)) ||
                                      PyList_CheckExact(PyTuple_GET_ITEM(size, 0))))
    size = PyTuple_GET_ITEM(size, 0);
  PyObject *seq = PySequence_Fast(size, "");
  if (seq == NULL) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int64_t sizes[MN_MAX_DIMS];
  int ok = n <= MN_MAX_DIMS;
  for (Py_ssize_t i = 0; ok && i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
    int overflow = 0;
    long long v = PyLong_CheckExact(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : -1;
    ok = PyLong_CheckExact(x) && !overflow && v >= 0;
    sizes[i] = v;
  }
  Py_DECREF(seq);
  long dt = PyLong_AsLong(args[1]), dtype_ = PyLong_AsLong(args[2]), index = PyLong_AsLong(args[3]);
  if (!ok || PyErr_Occurred()) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  mn_device_t dev = {(mn_device_type)dtype_, (int)index};
  mn_view_t *out = NULL;
  if (p_mn_view_empty(dev, (mn_dtype)dt, (int)n, n ? sizes : NULL, &out) != MN_OK) Py_RETURN_NONE;
  return new_view(out, NULL, NULL);
}

/* Reads the storage, element index and dtype arguments of storage_getitem and
 * storage_setitem: 0 when the Python path must do it. */
static int storage_element(PyObject *const *args, mn_storage_t **s, mn_dtype *dt, int64_t *index) {
  if (!bound || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[2])) return 0;
  *s = (mn_storage_t *)PyLong_AsVoidPtr(args[0]);
  *dt = (mn_dtype)PyLong_AsLong(args[1]);
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(args[2], &overflow);
  if (*s == NULL || overflow || PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  size_t item = p_mn_dtype_itemsize(*dt);
  if (item == 0) return 0;
  int64_t n = (int64_t)(p_mn_storage_nbytes(*s) / item);
  if (i < -n || i >= n) return 0;
  *index = i < 0 ? i + n : i;
  return 1;
}

/* storage_getitem(storage_handle, dtype_value, index): element `index` of a
 * CPU storage read as dtype; NotImplemented for the Python path. */
static PyObject *sp_storage_getitem(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  mn_storage_t *s;
  mn_dtype dt;
  int64_t i;
  if (nargs != 3 || !storage_element(args, &s, &dt, &i) || p_mn_storage_device(s).type != MN_DEVICE_CPU)
    Py_RETURN_NOTIMPLEMENTED;
  const char *p = p_mn_storage_data(s);
  return element(dt, p + i * (int64_t)p_mn_dtype_itemsize(dt));
}

/* storage_setitem(storage_handle, dtype_value, index, value): writes a bool,
 * int, float or complex into element `index` as mn_view_fill of a one-element
 * view does (any device, range-checked); NotImplemented for the Python path
 * (other value types, an error: the Python path raises it). */
static PyObject *sp_storage_setitem(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  mn_storage_t *s;
  mn_dtype dt;
  int64_t i;
  if (nargs != 4 || !storage_element(args, &s, &dt, &i)) Py_RETURN_NOTIMPLEMENTED;
  PyObject *v = args[3];
  mn_scalar_t sc;
  memset(&sc, 0, sizeof sc);
  if (PyBool_Check(v)) {
    sc.kind = MN_SCALAR_BOOL;
    sc.v.b = v == Py_True;
  } else if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      Py_RETURN_NOTIMPLEMENTED;
    }
    sc.kind = MN_SCALAR_INT;
    sc.v.i = x;
  } else if (PyFloat_CheckExact(v)) {
    sc.kind = MN_SCALAR_FLOAT;
    sc.v.f = PyFloat_AS_DOUBLE(v);
  } else if (PyComplex_CheckExact(v)) {
    sc.kind = MN_SCALAR_COMPLEX;
    sc.v.c[0] = PyComplex_RealAsDouble(v);
    sc.v.c[1] = PyComplex_ImagAsDouble(v);
  } else {
    Py_RETURN_NOTIMPLEMENTED;
  }
  if (dt == MN_DTYPE_UINT8 && sc.kind == MN_SCALAR_INT && sc.v.i >= 0 && sc.v.i <= 255 &&
      p_mn_storage_device(s).type == MN_DEVICE_CPU) { /* a byte of a CPU storage: nothing to convert or check */
    ((uint8_t *)p_mn_storage_data(s))[i] = (uint8_t)sc.v.i;
    Py_RETURN_NONE;
  }
  const int64_t one = 1;
  mn_view_t *view = NULL;
  if (p_mn_view_create(s, dt, 1, &one, NULL, i, &view) != MN_OK) Py_RETURN_NOTIMPLEMENTED;
  mn_status st = p_mn_view_fill(view, sc, NULL);
  p_mn_view_destroy(view);
  if (st != MN_OK) Py_RETURN_NOTIMPLEMENTED;
  Py_RETURN_NONE;
}

/* The destructor of a capsule this module made: a capsule nobody consumed
 * still owns its managed tensor (mnemo.interop's _capsule_destructor). */
static void capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
  } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
  }
}

/* to_dlpack(view): the legacy "dltensor" capsule of a CPU view (no copy), or
 * None for the Python path (another device, an error). */
static PyObject *sp_to_dlpack(PyObject *mod, PyObject *view) {
  if (!bound || !PyObject_TypeCheck(view, &ViewBaseType)) Py_RETURN_NONE;
  mn_view_t *h = handle_of((ViewBase *)view);
  DLManagedTensor *m = NULL;
  if (h == NULL || p_mn_view_device(h).type != MN_DEVICE_CPU || p_mn_view_to_dlpack(h, &m) != MN_OK) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  PyObject *cap = PyCapsule_New(m, "dltensor", capsule_destructor);
  if (cap == NULL && m->deleter != NULL) m->deleter(m);
  return cap;
}

/* from_dlpack_capsule(capsule): a View of a "dltensor" or "dltensor_versioned"
 * capsule (renamed "used_..." once mnemo owns the tensor); None when it is
 * not one (or was consumed), the mn_status (an int) when mnemo refuses the
 * tensor: the capsule keeps it, and the caller raises the status. */
static PyObject *sp_from_dlpack_capsule(PyObject *mod, PyObject *cap) {
  if (!bound || !PyCapsule_CheckExact(cap)) Py_RETURN_NONE;
  mn_view_t *out = NULL;
  mn_status st;
  const char *used;
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    st = p_mn_view_from_dlpack_versioned(PyCapsule_GetPointer(cap, "dltensor_versioned"), &out);
    used = "used_dltensor_versioned";
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    st = p_mn_view_from_dlpack(PyCapsule_GetPointer(cap, "dltensor"), &out);
    used = "used_dltensor";
  } else {
    Py_RETURN_NONE;
  }
  if (st != MN_OK) return PyLong_FromLong((long)st);
  if (PyCapsule_SetName(cap, used) < 0) { /* cannot happen for a valid capsule: keep the tensor's owner unique */
    p_mn_view_destroy(out);
    return NULL;
  }
  return new_view(out, NULL, NULL);
}

/* _bind(addresses, view_class, pin, unpin, pin_view, boxes): the
 * library's function addresses (a dict name -> int) and the Python objects the
 * fast paths call back. */
static PyObject *sp_bind(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyDict_Check(args[0]) || !PyType_Check(args[1]) || !PyDict_Check(args[5])) {
    PyErr_SetString(PyExc_TypeError, "mnemo._speedups._bind(addresses, View, pin, unpin, pin_view, boxes)");
    return NULL;
  }
  if (!PyType_IsSubtype((PyTypeObject *)args[1], &ViewBaseType)) {
    PyErr_SetString(PyExc_TypeError, "mnemo._speedups._bind: the view class must derive from ViewBase");
    return NULL;
  }
#define LOOKUP(name)                                                                                                  \
  {                                                                                                                   \
    PyObject *a = PyDict_GetItemString(args[0], #name);                                                               \
    void *ptr = a != NULL ? PyLong_AsVoidPtr(a) : NULL;                                                               \
    if (ptr == NULL) {                                                                                                \
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "mnemo._speedups._bind: no address for " #name);        \
      return NULL;                                                                                                    \
    }                                                                                                                 \
    p_##name = (__typeof__(p_##name))ptr;                                                                             \
  }
  FUNCS(LOOKUP)
#undef LOOKUP
  Py_XSETREF(view_class, (PyTypeObject *)Py_NewRef(args[1]));
  Py_XSETREF(pin_fn, Py_NewRef(args[2]));
  Py_XSETREF(unpin_fn, Py_NewRef(args[3]));
  Py_XSETREF(pin_view_fn, Py_NewRef(args[4]));
  Py_XSETREF(boxes, Py_NewRef(args[5]));
  bound = 1;
  Py_RETURN_NONE;
}

static PyObject *sp_names(PyObject *mod, PyObject *unused) {
  static const char *const names[] = {
#define NAME(name) #name,
      FUNCS(NAME)
#undef NAME
  };
  size_t n = sizeof names / sizeof names[0];
  PyObject *t = PyTuple_New((Py_ssize_t)n);
  for (size_t i = 0; t != NULL && i < n; i++) {
    PyObject *s = PyUnicode_FromString(names[i]);
    if (s == NULL) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
  }
  return t;
}

static PyMethodDef module_methods[] = {
    {"_bind", (PyCFunction)(void (*)(void))sp_bind, METH_FASTCALL, "Binds the library's functions and callbacks."},
    {"_names", sp_names, METH_NOARGS, "The names of the C functions _bind needs."},
    {"empty", (PyCFunction)(void (*)(void))sp_empty, METH_FASTCALL,
     "empty(size, dtype_value, device_type, device_index): a new View, or None."},
    {"to_dlpack", sp_to_dlpack, METH_O, "to_dlpack(view): a legacy DLPack capsule of a CPU view, or None."},
    {"from_dlpack_capsule", sp_from_dlpack_capsule, METH_O,
     "from_dlpack_capsule(capsule): a View, None (not a DLPack capsule) or the mn_status of a refusal."},
    {"storage_getitem", (PyCFunction)(void (*)(void))sp_storage_getitem, METH_FASTCALL,
     "storage_getitem(storage, dtype_value, index): the element, or NotImplemented."},
    {"storage_setitem", (PyCFunction)(void (*)(void))sp_storage_setitem, METH_FASTCALL,
     "storage_setitem(storage, dtype_value, index, value): None, or NotImplemented."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "mnemo._speedups",
                                        "The compiled fast paths of mnemo (see mnemo/_speedups.c).", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void);
PyMODINIT_FUNC PyInit__speedups(void) {
  str_getitem_slow = PyUnicode_InternFromString("_getitem_slow");
  str_tolist_slow = PyUnicode_InternFromString("_tolist_slow");
  str_t_slow = PyUnicode_InternFromString("_t_slow");
  str_transpose_slow = PyUnicode_InternFromString("_transpose_slow");
  str_view_slow = PyUnicode_InternFromString("_view_slow");
  str_dlpack_device_slow = PyUnicode_InternFromString("_dlpack_device_slow");
  empty_tuple = PyTuple_New(0);
  if (str_getitem_slow == NULL || str_tolist_slow == NULL || str_t_slow == NULL || str_transpose_slow == NULL ||
      str_view_slow == NULL || str_dlpack_device_slow == NULL || empty_tuple == NULL)
    return NULL;
  if (PyType_Ready(&ViewBaseType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL) return NULL;
  if (PyModule_AddObjectRef(m, "ViewBase", (PyObject *)&ViewBaseType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
