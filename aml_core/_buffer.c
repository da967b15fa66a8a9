/*
 * aml_core._buffer: the base type of every aml Buffer.
 *
 * It gives a buffer at an arbitrary address (host memory from mmap, pinned memory
 * from a GPU runtime, device memory) the two zero-copy protocols Python has:
 *
 *   - the buffer protocol (memoryview, numpy.frombuffer), for host-accessible memory;
 *   - DLPack capsules (__dlpack__), unversioned ("dltensor") and 1.x versioned
 *     ("dltensor_versioned"), for any memory, with the device the area names.
 *
 * Both count their live exports. An area refuses to free a buffer while a view or
 * a DLPack consumer still holds it (Buffer._release() returns False), so freed
 * memory is never reachable from Python: no use-after-free, no crash.
 *
 * Python 3.11 has no Python-level buffer protocol (PEP 688 came in 3.12): this is
 * why these few lines are C.
 *
 * The hot path of every area is here too: a buffer carries its Python attributes
 * (area, kind, device, device_ptr, native) in its C struct and is made in one call
 * (AreaBase._new_buffer, the C base of aml_core.area.Area), and LiveTable holds an
 * area's live mappings and counters. LiveTable's methods run no Python code (a dict
 * keyed by exact ints, the buffers' C fields, no allocation of collectable objects
 * before their snapshot, and every reference they drop is dropped last), so each is
 * atomic under the GIL: mmap and munmap need no Python lock in the common case.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

/* ---- DLPack 1.0 ABI (dlpack.h) ------------------------------------------ */
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
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
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1ULL << 0)
#define DLPACK_MAJOR 1
#define DLPACK_MINOR 0

/* ---- the type ------------------------------------------------------------ */
#define F_HOST 1     /* host-accessible: buffer protocol allowed */
#define F_READONLY 2 /* exports are read-only */
#define F_RELEASED 4 /* freed: no new export */

typedef struct {
    PyObject_HEAD
    unsigned long long ptr;
    Py_ssize_t size;
    int flags;
    int dl_device_type;
    int dl_device_id;
    Py_ssize_t exports;
    PyObject *key;        /* ptr as an exact int (NULL until bound): the live-table key */
    PyObject *area;       /* the attributes aml_core.buffer.Buffer documents */
    PyObject *kind;
    PyObject *device;
    PyObject *device_ptr;
    PyObject *native;
    PyObject *weakreflist;
} BufferBase;

static PyTypeObject BufferBaseType;

/* The exact int of an address: `given` itself when it is one (no allocation). */
static PyObject *
key_of(PyObject *given, unsigned long long ptr)
{
    if (given != NULL && PyLong_CheckExact(given))
        return Py_NewRef(given);
    return PyLong_FromUnsignedLongLong(ptr);
}

static int
as_long(PyObject *obj, long *out)
{
    *out = PyLong_AsLong(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Parse (ptr, size) as _bind does. Returns 0, or -1 with an exception set. */
static int
parse_range(PyObject *ptr_obj, PyObject *size_obj, unsigned long long *ptr, Py_ssize_t *size)
{
    *ptr = PyLong_AsUnsignedLongLong(ptr_obj);
    if (*ptr == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *size = PyLong_AsSsize_t(size_obj);
    if (*size == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static const char *released_msg =
    "this aml buffer was freed: its memory can no longer be viewed";

static int
bb_getbuffer(PyObject *obj, Py_buffer *view, int flags)
{
    BufferBase *self = (BufferBase *)obj;
    if (self->flags & F_RELEASED) {
        PyErr_SetString(PyExc_BufferError, released_msg);
        view->obj = NULL;
        return -1;
    }
    if (!(self->flags & F_HOST)) {
        PyErr_SetString(PyExc_BufferError,
                        "this aml buffer is device memory, not host-accessible: "
                        "use DLPack (__dlpack__) or __cuda_array_interface__");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, obj, (void *)(uintptr_t)self->ptr, self->size,
                          (self->flags & F_READONLY) ? 1 : 0, flags) < 0)
        return -1;
    self->exports++;
    return 0;
}

static void
bb_releasebuffer(PyObject *obj, Py_buffer *view)
{
    (void)view;
    ((BufferBase *)obj)->exports--;
}

static PyBufferProcs bb_as_buffer = {bb_getbuffer, bb_releasebuffer};

static PyObject *
bb_bind(BufferBase *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* _bind(ptr, size, flags, dl_device_type, dl_device_id) */
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_bind(ptr, size, flags, dl_device_type, dl_device_id)");
        return NULL;
    }
    unsigned long long ptr;
    Py_ssize_t size;
    if (parse_range(args[0], args[1], &ptr, &size) < 0)
        return NULL;
    /* An exported buffer may only grow in place (a growable VMM buffer): views
     * of the old range stay valid. */
    if (self->exports != 0 && (ptr != self->ptr || size < self->size)) {
        PyErr_SetString(PyExc_BufferError, "an exported buffer can only grow in place");
        return NULL;
    }
    long flags, dt, did;
    if (as_long(args[2], &flags) < 0 || as_long(args[3], &dt) < 0 || as_long(args[4], &did) < 0)
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be >= 0");
        return NULL;
    }
    if (self->key == NULL || ptr != self->ptr) {
        PyObject *key = key_of(args[0], ptr);
        if (key == NULL)
            return NULL;
        Py_XSETREF(self->key, key);
    }
    self->ptr = ptr;
    self->size = size;
    self->flags = (int)(flags & (F_HOST | F_READONLY));
    self->dl_device_type = (int)dt;
    self->dl_device_id = (int)did;
    Py_RETURN_NONE;
}

static PyObject *
bb_release(BufferBase *self, PyObject *noargs)
{
    (void)noargs;
    if (self->exports > 0)
        Py_RETURN_FALSE;
    self->flags |= F_RELEASED;
    Py_RETURN_TRUE;
}

static PyObject *
bb_revive(BufferBase *self, PyObject *noargs)
{
    (void)noargs;
    self->flags &= ~F_RELEASED;
    Py_RETURN_NONE;
}

/* ---- DLPack -------------------------------------------------------------- */
typedef struct {
    PyObject *owner; /* a strong reference to the BufferBase */
    int64_t shape[1];
} DLContext;

static void
dl_drop_owner(DLContext *ctx)
{
    /* Consumers may call the deleter from any thread, with or without the GIL,
     * possibly at interpreter exit. */
    if (ctx == NULL)
        return;
    if (Py_IsInitialized()) {
        PyGILState_STATE st = PyGILState_Ensure();
        ((BufferBase *)ctx->owner)->exports--;
        Py_DECREF(ctx->owner);
        PyGILState_Release(st);
    }
    PyMem_RawFree(ctx);
}

static void
dl_delete_unversioned(DLManagedTensor *t)
{
    if (t == NULL)
        return;
    dl_drop_owner((DLContext *)t->manager_ctx);
    PyMem_RawFree(t);
}

static void
dl_delete_versioned(DLManagedTensorVersioned *t)
{
    if (t == NULL)
        return;
    dl_drop_owner((DLContext *)t->manager_ctx);
    PyMem_RawFree(t);
}

static void
dl_capsule_unversioned(PyObject *capsule)
{
    /* Called when the capsule dies. A consumer that took ownership renamed it
     * to "used_dltensor" and will call the deleter itself. */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *t = (DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor");
        if (t && t->deleter)
            t->deleter(t);
    } else {
        PyErr_Clear();
    }
}

static void
dl_capsule_versioned(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedTensorVersioned *t =
            (DLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (t && t->deleter)
            t->deleter(t);
    } else {
        PyErr_Clear();
    }
}

static void
dl_fill(DLTensor *dl, BufferBase *self, DLContext *ctx)
{
    ctx->shape[0] = (int64_t)self->size;
    dl->data = (void *)(uintptr_t)self->ptr;
    dl->device.device_type = self->dl_device_type;
    dl->device.device_id = self->dl_device_id;
    dl->ndim = 1;
    dl->dtype.code = 1; /* kDLUInt */
    dl->dtype.bits = 8;
    dl->dtype.lanes = 1;
    dl->shape = ctx->shape;
    dl->strides = NULL;
    dl->byte_offset = 0;
}

static PyObject *
bb_dlpack_capsule(BufferBase *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* _dlpack_capsule(versioned: bool, readonly: bool) -> PyCapsule */
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_dlpack_capsule(versioned, readonly)");
        return NULL;
    }
    int versioned = PyObject_IsTrue(args[0]);
    int readonly = PyObject_IsTrue(args[1]);
    if (versioned < 0 || readonly < 0)
        return NULL;
    if (self->flags & F_RELEASED) {
        PyErr_SetString(PyExc_BufferError, released_msg);
        return NULL;
    }
    if (self->dl_device_type <= 0) {
        PyErr_SetString(PyExc_BufferError, "this aml buffer has no DLPack device");
        return NULL;
    }
    DLContext *ctx = PyMem_RawMalloc(sizeof(DLContext));
    if (ctx == NULL)
        return PyErr_NoMemory();
    ctx->owner = (PyObject *)self;
    PyObject *capsule;
    if (versioned) {
        DLManagedTensorVersioned *t = PyMem_RawCalloc(1, sizeof(*t));
        if (t == NULL) {
            PyMem_RawFree(ctx);
            return PyErr_NoMemory();
        }
        t->version.major = DLPACK_MAJOR;
        t->version.minor = DLPACK_MINOR;
        t->manager_ctx = ctx;
        t->deleter = dl_delete_versioned;
        t->flags = (readonly || (self->flags & F_READONLY)) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
        dl_fill(&t->dl_tensor, self, ctx);
        capsule = PyCapsule_New(t, "dltensor_versioned", dl_capsule_versioned);
        if (capsule == NULL) {
            PyMem_RawFree(t);
            PyMem_RawFree(ctx);
            return NULL;
        }
    } else {
        DLManagedTensor *t = PyMem_RawCalloc(1, sizeof(*t));
        if (t == NULL) {
            PyMem_RawFree(ctx);
            return PyErr_NoMemory();
        }
        t->manager_ctx = ctx;
        t->deleter = dl_delete_unversioned;
        dl_fill(&t->dl_tensor, self, ctx);
        capsule = PyCapsule_New(t, "dltensor", dl_capsule_unversioned);
        if (capsule == NULL) {
            PyMem_RawFree(t);
            PyMem_RawFree(ctx);
            return NULL;
        }
    }
    Py_INCREF(self);
    self->exports++;
    return capsule;
}

static PyObject *
bb_get_exports(BufferBase *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->exports);
}

static PyObject *
bb_get_released(BufferBase *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->flags & F_RELEASED);
}

static PyObject *
bb_get_host_accessible(BufferBase *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->flags & F_HOST);
}

static PyObject *
bb_get_readonly(BufferBase *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->flags & F_READONLY);
}

static PyObject *
bb_dlpack_device(BufferBase *self, PyObject *noargs)
{
    (void)noargs;
    return Py_BuildValue("(ii)", self->dl_device_type, self->dl_device_id);
}

static PyMethodDef bb_methods[] = {
    {"_bind", (PyCFunction)(void (*)(void))bb_bind, METH_FASTCALL,
     "_bind(ptr, size, flags, dl_device_type, dl_device_id): set the memory this object describes."},
    {"_release", (PyCFunction)bb_release, METH_NOARGS,
     "Mark the buffer freed and return True, or return False if views or DLPack consumers still hold it."},
    {"_revive", (PyCFunction)bb_revive, METH_NOARGS,
     "Undo _release() (the native free failed and the memory is still there)."},
    {"_dlpack_capsule", (PyCFunction)(void (*)(void))bb_dlpack_capsule, METH_FASTCALL,
     "_dlpack_capsule(versioned, readonly): a DLPack capsule of the bytes, as uint8[size]."},
    {"__dlpack_device__", (PyCFunction)bb_dlpack_device, METH_NOARGS,
     "The DLPack (device_type, device_id) of this buffer."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
bb_get_ptr(BufferBase *self, void *closure)
{
    (void)closure;
    if (self->key != NULL)
        return Py_NewRef(self->key);
    return PyLong_FromUnsignedLongLong(self->ptr);
}

static PyMemberDef bb_members[] = {
    {"size", T_PYSSIZET, offsetof(BufferBase, size), READONLY, "Size in bytes."},
    {"area", T_OBJECT_EX, offsetof(BufferBase, area), 0, "The area that made this buffer."},
    {"kind", T_OBJECT_EX, offsetof(BufferBase, kind), 0, "The kind of memory."},
    {"device", T_OBJECT_EX, offsetof(BufferBase, device), 0, "The device index, or None."},
    {"device_ptr", T_OBJECT_EX, offsetof(BufferBase, device_ptr), 0, "The address devices use."},
    {"native", T_OBJECT_EX, offsetof(BufferBase, native), 0,
     "Backend-specific data the area needs to free the mapping."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef bb_getset[] = {
    {"ptr", (getter)bb_get_ptr, NULL, "Address of the first byte.", NULL},
    {"exports", (getter)bb_get_exports, NULL,
     "Number of live buffer-protocol views and DLPack consumers.", NULL},
    {"freed", (getter)bb_get_released, NULL, "True once the buffer was freed.", NULL},
    {"host_accessible", (getter)bb_get_host_accessible, NULL,
     "True if the host can read and write the memory (buffer protocol allowed).", NULL},
    {"readonly", (getter)bb_get_readonly, NULL, "True if exports are read-only.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* The attributes may form cycles (a buffer whose native data refers back to it, a
 * buffer and its area's live table): the collector sees them. */
static int
bb_traverse(BufferBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->area);
    Py_VISIT(self->kind);
    Py_VISIT(self->device);
    Py_VISIT(self->device_ptr);
    Py_VISIT(self->native);
    return 0;
}

static int
bb_clear(BufferBase *self)
{
    Py_CLEAR(self->area);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->device);
    Py_CLEAR(self->device_ptr);
    Py_CLEAR(self->native);
    return 0;
}

static void
bb_dealloc(BufferBase *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    bb_clear(self);
    Py_CLEAR(self->key);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject BufferBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aml_core._buffer.BufferBase",
    .tp_doc = "Base of aml buffers: an address range with counted zero-copy exports.",
    .tp_basicsize = sizeof(BufferBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)bb_dealloc,
    .tp_traverse = (traverseproc)bb_traverse,
    .tp_clear = (inquiry)bb_clear,
    .tp_free = PyObject_GC_Del,
    .tp_weaklistoffset = offsetof(BufferBase, weakreflist),
    .tp_as_buffer = &bb_as_buffer,
    .tp_methods = bb_methods,
    .tp_members = bb_members,
    .tp_getset = bb_getset,
};

/* ---- make_buffer: a bound buffer in one call ------------------------------ */
static PyObject *empty_tuple;

/* (device_type, device_id) from a 2-tuple (or any sequence). */
static int
dl_pair(PyObject *obj, long *dt, long *did)
{
    if (PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 2)
        return (as_long(PyTuple_GET_ITEM(obj, 0), dt) < 0 ||
                as_long(PyTuple_GET_ITEM(obj, 1), did) < 0) ? -1 : 0;
    for (Py_ssize_t i = 0; i < 2; i++) {
        PyObject *item = PySequence_GetItem(obj, i);
        if (item == NULL)
            return -1;
        int rc = as_long(item, i == 0 ? dt : did);
        Py_DECREF(item);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* A new bound buffer from a[12] = (type, area, kind, area_device, ptr, size,
 * host_accessible, readonly, dl_device, device_ptr, native, device): device_ptr None
 * means ptr, device None means area_device. */
static PyObject *
make_buffer(PyObject *const *a)
{
    PyObject *type = a[0];
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &BufferBaseType)) {
        PyErr_Format(PyExc_TypeError, "buffer_type must be a Buffer class, not %R", type);
        return NULL;
    }
    unsigned long long ptr;
    Py_ssize_t size;
    if (parse_range(a[4], a[5], &ptr, &size) < 0)
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be >= 0");
        return NULL;
    }
    int host = PyObject_IsTrue(a[6]);
    if (host < 0)
        return NULL;
    int readonly = PyObject_IsTrue(a[7]);
    if (readonly < 0)
        return NULL;
    long dt, did;
    if (dl_pair(a[8], &dt, &did) < 0)
        return NULL;
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_new(tp, empty_tuple, NULL);
    if (obj == NULL)
        return NULL;
    if (!PyObject_TypeCheck(obj, &BufferBaseType)) {
        PyErr_Format(PyExc_TypeError, "%.200s.__new__ returned %.200s, not a buffer", tp->tp_name,
                     Py_TYPE(obj)->tp_name);
        Py_DECREF(obj);
        return NULL;
    }
    BufferBase *self = (BufferBase *)obj;
    PyObject *key = key_of(a[4], ptr);
    if (key == NULL) {
        Py_DECREF(obj);
        return NULL;
    }
    Py_XSETREF(self->key, key);
    self->ptr = ptr;
    self->size = size;
    self->flags = (host ? F_HOST : 0) | (readonly ? F_READONLY : 0);
    self->dl_device_type = (int)dt;
    self->dl_device_id = (int)did;
    Py_XSETREF(self->area, Py_NewRef(a[1]));
    Py_XSETREF(self->kind, Py_NewRef(a[2]));
    Py_XSETREF(self->device, Py_NewRef(a[11] == Py_None ? a[3] : a[11]));
    Py_XSETREF(self->device_ptr, Py_NewRef(a[9] == Py_None ? key : a[9]));
    Py_XSETREF(self->native, Py_NewRef(a[10]));
    return obj;
}

/* ---- LiveTable: an area's live mappings and counters ---------------------- */
/* A signed 128-bit count of bytes: exact whatever the sizes (as Python ints were). */
typedef struct {
    uint64_t lo;
    int64_t hi;
} Count;

static void
count_add(Count *c, Py_ssize_t n)
{
    uint64_t lo = c->lo + (uint64_t)n;
    c->hi += lo < c->lo;
    c->lo = lo;
}

static void
count_sub(Count *c, Py_ssize_t n)
{
    c->hi -= c->lo < (uint64_t)n;
    c->lo -= (uint64_t)n;
}

static int
count_gt(Count a, Count b)
{
    return a.hi != b.hi ? a.hi > b.hi : a.lo > b.lo;
}

static PyObject *
count_int(Count c)
{
    if (c.hi == 0)
        return PyLong_FromUnsignedLongLong(c.lo);
    if (c.hi == -1 && (c.lo >> 63))
        return PyLong_FromLongLong((long long)c.lo);
    PyObject *hi = PyLong_FromLongLong(c.hi);
    PyObject *lo = PyLong_FromUnsignedLongLong(c.lo);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *high = NULL, *out = NULL;
    if (hi != NULL && lo != NULL && shift != NULL && (high = PyNumber_Lshift(hi, shift)) != NULL)
        out = PyNumber_Add(high, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(high);
    return out;
}

typedef struct {
    PyObject_HEAD
    PyObject *live;    /* dict: address (exact int) -> buffer, oldest first */
    int closed;
    int fast;          /* take() may act (the area checks targets as Area._lookup does) */
    Py_ssize_t pins;   /* holders of the area's lock: the fast paths step aside */
    Count bytes;
    Count peak;
    long long maps;
    long long unmaps;
} LiveTable;

static PyTypeObject LiveTableType;

static BufferBase *
as_buffer(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &BufferBaseType)) {
        PyErr_Format(PyExc_TypeError, "expected an aml buffer, not %.200s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    BufferBase *b = (BufferBase *)obj;
    if (b->key == NULL && (b->key = PyLong_FromUnsignedLongLong(b->ptr)) == NULL)
        return NULL;
    return b;
}

/* live[key] = buf. The value it replaces, if any, is returned as a new reference in
 * *replaced: the caller drops it once its state is consistent (dropping a buffer may
 * run Python code). */
static int
lt_put(LiveTable *self, PyObject *key, PyObject *buf, PyObject **replaced)
{
    PyObject *old = PyDict_GetItemWithError(self->live, key);
    if (old == NULL && PyErr_Occurred())
        return -1;
    Py_XINCREF(old);
    if (PyDict_SetItem(self->live, key, buf) < 0) {
        Py_XDECREF(old);
        return -1;
    }
    *replaced = old;
    return 0;
}

/* Remove live[key] (known present); the caller holds a reference to the value. */
static int
lt_del(LiveTable *self, PyObject *key, BufferBase *b)
{
    if (PyDict_DelItem(self->live, key) < 0)
        return -1;
    count_sub(&self->bytes, b->size);
    self->unmaps++;
    return 0;
}

static PyObject *
lt_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fast", NULL};
    int fast = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:LiveTable", kwlist, &fast))
        return NULL;
    LiveTable *self = (LiveTable *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fast = fast;
    self->live = PyDict_New();
    if (self->live == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
lt_traverse(LiveTable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->live);
    return 0;
}

static int
lt_clear(LiveTable *self)
{
    /* Break cycles but stay usable (empty and closed): finalizers may still call us. */
    self->closed = 1;
    if (self->live != NULL)
        PyDict_Clear(self->live);
    return 0;
}

static void
lt_dealloc(LiveTable *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->live);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
lt_add(LiveTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* add(buffer, locked=False) -> bool */
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "add(buffer, locked=False)");
        return NULL;
    }
    BufferBase *b = as_buffer(args[0]);
    if (b == NULL)
        return NULL;
    int locked = nargs > 1 ? PyObject_IsTrue(args[1]) : 0;
    if (locked < 0)
        return NULL;
    if (self->closed || (self->pins && !locked))
        Py_RETURN_FALSE;
    PyObject *old;
    if (lt_put(self, b->key, args[0], &old) < 0)
        return NULL;
    count_add(&self->bytes, b->size);
    self->maps++;
    if (count_gt(self->bytes, self->peak))
        self->peak = self->bytes;
    Py_XDECREF(old);
    Py_RETURN_TRUE;
}

static PyObject *
lt_take(LiveTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* take(area, buffer_or_ptr, size) -> the buffer, released and removed, or None
     * when anything is off: closed, pinned, not a live exact match, exported. */
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take(area, buffer_or_ptr, size)");
        return NULL;
    }
    PyObject *target = args[1], *size = args[2], *key, *found;
    if (self->closed || self->pins || !self->fast)
        Py_RETURN_NONE;
    if (PyObject_TypeCheck(target, &BufferBaseType)) {
        BufferBase *t = (BufferBase *)target;
        if (t->area != args[0] || (t->flags & F_RELEASED) || t->key == NULL)
            Py_RETURN_NONE;
        key = t->key;
    } else if (PyLong_CheckExact(target)) {
        key = target;
    } else {
        Py_RETURN_NONE;
    }
    found = PyDict_GetItemWithError(self->live, key);
    if (found == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (found != target && target != key)
        Py_RETURN_NONE;  /* another buffer lives at this address */
    BufferBase *b = (BufferBase *)found;
    if (size != Py_None) {
        if (!PyLong_CheckExact(size))
            Py_RETURN_NONE;
        Py_ssize_t n = PyLong_AsSsize_t(size);
        if (n == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (n <= 0 || n != b->size)
            Py_RETURN_NONE;
    }
    if (b->exports != 0 || (b->flags & F_RELEASED))
        Py_RETURN_NONE;
    Py_INCREF(found);
    b->flags |= F_RELEASED;
    if (lt_del(self, key, b) < 0) {
        b->flags &= ~F_RELEASED;
        Py_DECREF(found);
        return NULL;
    }
    return found;
}

static PyObject *
lt_remove(LiveTable *self, PyObject *arg)
{
    /* remove(buffer): del live[buffer.ptr] and count the unmap (KeyError if absent). */
    BufferBase *b = as_buffer(arg);
    if (b == NULL)
        return NULL;
    PyObject *old = PyDict_GetItemWithError(self->live, b->key);
    if (old == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, b->key);
        return NULL;
    }
    Py_INCREF(old);
    int rc = lt_del(self, b->key, b);
    Py_DECREF(old);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
lt_restore(LiveTable *self, PyObject *arg)
{
    /* restore(buffer): undo a take/remove whose native free failed. */
    BufferBase *b = as_buffer(arg);
    if (b == NULL)
        return NULL;
    PyObject *old;
    b->flags &= ~F_RELEASED;
    if (lt_put(self, b->key, arg, &old) < 0)
        return NULL;
    count_add(&self->bytes, b->size);
    self->unmaps--;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *
lt_resized(LiveTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* resized(buffer, old_size) -> bool: count a live buffer's new size. */
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "resized(buffer, old_size)");
        return NULL;
    }
    BufferBase *b = as_buffer(args[0]);
    if (b == NULL)
        return NULL;
    Py_ssize_t old = PyLong_AsSsize_t(args[1]);
    if (old == -1 && PyErr_Occurred())
        return NULL;
    PyObject *found = PyDict_GetItemWithError(self->live, b->key);
    if (found != args[0]) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_FALSE;
    }
    count_sub(&self->bytes, old);
    count_add(&self->bytes, b->size);
    if (count_gt(self->bytes, self->peak))
        self->peak = self->bytes;
    Py_RETURN_TRUE;
}

static PyObject *
lt_drain(LiveTable *self, PyObject *noargs)
{
    /* drain() -> list: close the table and return the live buffers, oldest first,
     * counted as unmapped. */
    (void)noargs;
    PyObject *live = PyDict_Values(self->live);
    if (live == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(live); i++) {
        count_sub(&self->bytes, ((BufferBase *)PyList_GET_ITEM(live, i))->size);
        self->unmaps++;
    }
    PyDict_Clear(self->live);
    self->closed = 1;
    return live;
}

static PyObject *
lt_stats(LiveTable *self, PyObject *noargs)
{
    /* stats() -> (bytes_in_use, peak_bytes, live_mappings, total_maps, total_unmaps) */
    (void)noargs;
    PyObject *bytes = count_int(self->bytes);
    PyObject *peak = count_int(self->peak);
    if (bytes == NULL || peak == NULL) {
        Py_XDECREF(bytes);
        Py_XDECREF(peak);
        return NULL;
    }
    return Py_BuildValue("(NNnLL)", bytes, peak, PyDict_GET_SIZE(self->live), self->maps,
                         self->unmaps);
}

static PyObject *
lt_get(LiveTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* get(ptr, default=None) -> the buffer live at this address, or default */
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(ptr, default=None)");
        return NULL;
    }
    PyObject *found = PyDict_GetItemWithError(self->live, args[0]);
    if (found != NULL)
        return Py_NewRef(found);
    if (PyErr_Occurred())
        return NULL;
    return Py_NewRef(nargs > 1 ? args[1] : Py_None);
}

static PyObject *
lt_buffers(LiveTable *self, PyObject *noargs)
{
    (void)noargs;
    PyObject *live = PyDict_Values(self->live);
    if (live == NULL)
        return NULL;
    PyObject *out = PyList_AsTuple(live);
    Py_DECREF(live);
    return out;
}

static PyObject *
lt_pin(LiveTable *self, PyObject *noargs)
{
    (void)noargs;
    self->pins++;
    Py_RETURN_NONE;
}

static PyObject *
lt_unpin(LiveTable *self, PyObject *noargs)
{
    (void)noargs;
    if (self->pins > 0)
        self->pins--;
    Py_RETURN_NONE;
}

static PyObject *
lt_get_closed(LiveTable *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->closed);
}

static PyObject *
lt_get_pins(LiveTable *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->pins);
}

static Py_ssize_t
lt_length(LiveTable *self)
{
    return PyDict_GET_SIZE(self->live);
}

static PyMethodDef lt_methods[] = {
    {"add", (PyCFunction)(void (*)(void))lt_add, METH_FASTCALL,
     "add(buffer, locked=False) -> bool: track a new buffer and count the map. False (and "
     "nothing done) if the table is closed, or pinned and the caller does not hold the lock."},
    {"take", (PyCFunction)(void (*)(void))lt_take, METH_FASTCALL,
     "take(area, buffer_or_ptr, size) -> buffer or None: the fast munmap. If the table is "
     "fast, neither closed nor pinned, and the target is a live buffer of `area` (or the exact int "
     "address of one), size is None or its size and it has no export: mark it freed, remove "
     "it, count the unmap and return it. Otherwise None and nothing done."},
    {"remove", (PyCFunction)lt_remove, METH_O,
     "remove(buffer): remove a released buffer and count the unmap (KeyError if absent)."},
    {"restore", (PyCFunction)lt_restore, METH_O,
     "restore(buffer): revive a buffer whose native free failed and track it again."},
    {"resized", (PyCFunction)(void (*)(void))lt_resized, METH_FASTCALL,
     "resized(buffer, old_size) -> bool: count the new size of a live buffer (False if it "
     "is not live here)."},
    {"drain", (PyCFunction)lt_drain, METH_NOARGS,
     "drain() -> list: close the table; return its buffers, oldest first, counted as unmapped."},
    {"stats", (PyCFunction)lt_stats, METH_NOARGS,
     "stats() -> (bytes_in_use, peak_bytes, live_mappings, total_maps, total_unmaps)."},
    {"get", (PyCFunction)(void (*)(void))lt_get, METH_FASTCALL,
     "get(ptr, default=None): the buffer live at this base address."},
    {"buffers", (PyCFunction)lt_buffers, METH_NOARGS, "The live buffers, oldest first."},
    {"pin", (PyCFunction)lt_pin, METH_NOARGS,
     "Make add (without locked) and take refuse until unpin(): the area's lock holds."},
    {"unpin", (PyCFunction)lt_unpin, METH_NOARGS, "Undo one pin()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lt_getset[] = {
    {"closed", (getter)lt_get_closed, NULL, "True once drained.", NULL},
    {"pins", (getter)lt_get_pins, NULL, "Current pin count.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMappingMethods lt_as_mapping = {
    .mp_length = (lenfunc)lt_length,
};

static PyTypeObject LiveTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aml_core._buffer.LiveTable",
    .tp_doc = "LiveTable(fast=True): the live mappings of an area and its counters; every method is "
              "atomic under the GIL. fast=False turns take() off (an area whose _lookup differs).",
    .tp_basicsize = sizeof(LiveTable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = lt_new,
    .tp_dealloc = (destructor)lt_dealloc,
    .tp_traverse = (traverseproc)lt_traverse,
    .tp_clear = (inquiry)lt_clear,
    .tp_free = PyObject_GC_Del,
    .tp_as_mapping = &lt_as_mapping,
    .tp_methods = lt_methods,
    .tp_getset = lt_getset,
};

/* ---- AreaBase: the part of aml_core.area.Area that is C ------------------- */
/* Area's kind and device, and _new_buffer, which backends call on every mmap with
 * keywords (a Python function would cost more than the rest of Area.mmap). */
typedef struct {
    PyObject_HEAD
    PyObject *kind;
    PyObject *device;
} AreaBase;

static PyObject *str_buffer_type;
static PyObject *str_kind;
#define NB_ARGS 8
static const char *const nb_names[NB_ARGS] = {
    "ptr", "size", "host_accessible", "readonly", "dl_device", "device_ptr", "native", "device",
};
static PyObject *nb_kw[NB_ARGS]; /* interned nb_names */
static PyObject *default_dl_device; /* (0, 0) */

static int
ab_traverse(AreaBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->kind);
    Py_VISIT(self->device);
    return 0;
}

static int
ab_clear(AreaBase *self)
{
    Py_CLEAR(self->kind);
    Py_CLEAR(self->device);
    return 0;
}

static void
ab_dealloc(AreaBase *self)
{
    PyObject_GC_UnTrack(self);
    ab_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ab_new_buffer(AreaBase *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* _new_buffer(ptr, size, *, host_accessible, readonly=False, dl_device=(0, 0),
     *             device_ptr=None, native=None, device=None) */
    PyObject *v[NB_ARGS] = {NULL};
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "_new_buffer() takes 3 positional arguments but %zd were given",
                     nargs + 1);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int at = -1;
        for (int j = 0; j < NB_ARGS && at < 0; j++)
            if (name == nb_kw[j])
                at = j;
        for (int j = 0; j < NB_ARGS && at < 0; j++)
            if (PyUnicode_Compare(name, nb_kw[j]) == 0)
                at = j;
        if (PyErr_Occurred())
            return NULL;
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "_new_buffer() got an unexpected keyword argument '%U'", name);
            return NULL;
        }
        if (v[at] != NULL) {
            PyErr_Format(PyExc_TypeError, "_new_buffer() got multiple values for argument '%U'", name);
            return NULL;
        }
        v[at] = args[nargs + k];
    }
    for (int j = 0; j < 3; j++) {
        if (v[j] == NULL) {
            PyErr_Format(PyExc_TypeError, "_new_buffer() missing 1 required %s argument: '%s'",
                         j < 2 ? "positional" : "keyword-only", nb_names[j]);
            return NULL;
        }
    }
    if (self->kind == NULL) /* not initialized: the usual AttributeError */
        return PyObject_GetAttr((PyObject *)self, str_kind);
    PyObject *type = PyObject_GetAttr((PyObject *)self, str_buffer_type);
    if (type == NULL)
        return NULL;
    PyObject *a[12] = {
        type,
        (PyObject *)self,
        self->kind,
        self->device == NULL ? Py_None : self->device,
        v[0],
        v[1],
        v[2],
        v[3] == NULL ? Py_False : v[3],
        v[4] == NULL ? default_dl_device : v[4],
        v[5] == NULL ? Py_None : v[5],
        v[6] == NULL ? Py_None : v[6],
        v[7] == NULL ? Py_None : v[7],
    };
    PyObject *out = make_buffer(a);
    Py_DECREF(type);
    return out;
}

static PyMethodDef ab_methods[] = {
    {"_new_buffer", (PyCFunction)(void (*)(void))ab_new_buffer, METH_FASTCALL | METH_KEYWORDS,
     "_new_buffer(ptr, size, *, host_accessible, readonly=False, dl_device=(0, 0), "
     "device_ptr=None, native=None, device=None)\n--\n\n"
     "A new buffer of this area's buffer_type, bound to the memory and to this area "
     "(device_ptr defaults to ptr, device to the area's)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ab_members[] = {
    {"kind", T_OBJECT_EX, offsetof(AreaBase, kind), 0, "The kind of memory this area allocates."},
    {"device", T_OBJECT_EX, offsetof(AreaBase, device), 0, "The area's device index, or None."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject AreaBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aml_core._buffer.AreaBase",
    .tp_doc = "The C part of aml_core.area.Area: kind, device and _new_buffer.",
    .tp_basicsize = sizeof(AreaBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)ab_dealloc,
    .tp_traverse = (traverseproc)ab_traverse,
    .tp_clear = (inquiry)ab_clear,
    .tp_free = PyObject_GC_Del,
    .tp_methods = ab_methods,
    .tp_members = ab_members,
};

/* ---- module -------------------------------------------------------------- */
static PyObject *
mod_address_of(PyObject *module, PyObject *obj)
{
    /* address_of(obj) -> (address, nbytes, readonly) of any buffer exporter. */
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = Py_BuildValue("(KnO)", (unsigned long long)(uintptr_t)view.buf, view.len,
                                  view.readonly ? Py_True : Py_False);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef mod_methods[] = {
    {"address_of", mod_address_of, METH_O,
     "address_of(obj) -> (address, nbytes, readonly) of a contiguous buffer exporter."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "aml_core._buffer",
    "Counted zero-copy exports (buffer protocol, DLPack) for aml buffers.", -1, mod_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__buffer(void)
{
    /* object.__new__: instances are zeroed, and abstract classes refuse to instantiate. */
    AreaBaseType.tp_new = PyBaseObject_Type.tp_new;
    if (PyType_Ready(&BufferBaseType) < 0 || PyType_Ready(&LiveTableType) < 0 ||
        PyType_Ready(&AreaBaseType) < 0)
        return NULL;
    if (empty_tuple == NULL) {
        if ((empty_tuple = PyTuple_New(0)) == NULL ||
            (default_dl_device = Py_BuildValue("(ii)", 0, 0)) == NULL ||
            (str_buffer_type = PyUnicode_InternFromString("buffer_type")) == NULL ||
            (str_kind = PyUnicode_InternFromString("kind")) == NULL)
            return NULL;
        for (int j = 0; j < NB_ARGS; j++)
            if ((nb_kw[j] = PyUnicode_InternFromString(nb_names[j])) == NULL)
                return NULL;
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&BufferBaseType);
    if (PyModule_AddObject(m, "BufferBase", (PyObject *)&BufferBaseType) < 0) {
        Py_DECREF(&BufferBaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&LiveTableType);
    if (PyModule_AddObject(m, "LiveTable", (PyObject *)&LiveTableType) < 0) {
        Py_DECREF(&LiveTableType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&AreaBaseType);
    if (PyModule_AddObject(m, "AreaBase", (PyObject *)&AreaBaseType) < 0) {
        Py_DECREF(&AreaBaseType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HOST", F_HOST) < 0 ||
        PyModule_AddIntConstant(m, "READONLY", F_READONLY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
