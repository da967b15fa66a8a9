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
} BufferBase;

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
    unsigned long long ptr = PyLong_AsUnsignedLongLong(args[0]);
    if (ptr == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    /* An exported buffer may only grow in place (a growable VMM buffer): views
     * of the old range stay valid. */
    if (self->exports != 0 && (ptr != self->ptr || size < self->size)) {
        PyErr_SetString(PyExc_BufferError, "an exported buffer can only grow in place");
        return NULL;
    }
    long flags = PyLong_AsLong(args[2]);
    long dt = PyLong_AsLong(args[3]);
    long did = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be >= 0");
        return NULL;
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

static PyMemberDef bb_members[] = {
    {"ptr", T_ULONGLONG, offsetof(BufferBase, ptr), READONLY, "Address of the first byte."},
    {"size", T_PYSSIZET, offsetof(BufferBase, size), READONLY, "Size in bytes."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef bb_getset[] = {
    {"exports", (getter)bb_get_exports, NULL,
     "Number of live buffer-protocol views and DLPack consumers.", NULL},
    {"freed", (getter)bb_get_released, NULL, "True once the buffer was freed.", NULL},
    {"host_accessible", (getter)bb_get_host_accessible, NULL,
     "True if the host can read and write the memory (buffer protocol allowed).", NULL},
    {"readonly", (getter)bb_get_readonly, NULL, "True if exports are read-only.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BufferBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aml_core._buffer.BufferBase",
    .tp_doc = "Base of aml buffers: an address range with counted zero-copy exports.",
    .tp_basicsize = sizeof(BufferBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_as_buffer = &bb_as_buffer,
    .tp_methods = bb_methods,
    .tp_members = bb_members,
    .tp_getset = bb_getset,
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
    if (PyType_Ready(&BufferBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&BufferBaseType);
    if (PyModule_AddObject(m, "BufferBase", (PyObject *)&BufferBaseType) < 0) {
        Py_DECREF(&BufferBaseType);
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
