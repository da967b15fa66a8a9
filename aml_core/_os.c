/*
 * aml_core._os: the Linux calls behind the host backend.
 *
 * mmap with any flags and an alignment (a PROT_NONE reservation trimmed around an
 * aligned MAP_FIXED mapping), munmap, madvise, and the NUMA system calls mbind,
 * get_mempolicy and move_pages through syscall(2) with the C library's SYS_*
 * numbers, so no architecture table is written by hand and libnuma is not needed.
 *
 * Every function validates its arguments before the call, releases the GIL
 * around the system call and raises OSError(errno) on failure; the Python side
 * (aml_core.host) translates errno into AML errors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_NODES 1024
#define MASK_LONGS (MAX_NODES / (8 * sizeof(unsigned long)))

static PyObject *
raise_errno(int err, const char *function)
{
    PyObject *args = Py_BuildValue("(iss)", err, strerror(err), function);
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static int
is_pow2(unsigned long long v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static PyObject *
os_mmap(PyObject *module, PyObject *args)
{
    /* mmap(length, prot, flags, fd, offset, alignment) -> address */
    (void)module;
    unsigned long long length, alignment, offset;
    int prot, flags, fd;
    if (!PyArg_ParseTuple(args, "KiiiKK", &length, &prot, &flags, &fd, &offset, &alignment))
        return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (length == 0 || length > (unsigned long long)PY_SSIZE_T_MAX)
        return raise_errno(EINVAL, "mmap");
    if (alignment != 0 && !is_pow2(alignment))
        return raise_errno(EINVAL, "mmap");
    if (alignment > (1ULL << 40))
        return raise_errno(EINVAL, "mmap");
    void *out;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    if (alignment <= page) {
        out = mmap(NULL, (size_t)length, prot, flags, fd, (off_t)offset);
        if (out == MAP_FAILED)
            err = errno;
    } else {
        size_t span = (size_t)length + (size_t)alignment;
        if (span < (size_t)length) {
            err = ENOMEM;
            out = MAP_FAILED;
        } else {
            void *res = mmap(NULL, span, PROT_NONE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (res == MAP_FAILED) {
                err = errno;
                out = MAP_FAILED;
            } else {
                uintptr_t base = (uintptr_t)res;
                uintptr_t aligned = (base + (uintptr_t)alignment - 1) & ~((uintptr_t)alignment - 1);
                out = mmap((void *)aligned, (size_t)length, prot, flags | MAP_FIXED, fd,
                           (off_t)offset);
                if (out == MAP_FAILED) {
                    err = errno;
                    munmap(res, span);
                } else {
                    size_t head = aligned - base;
                    size_t end = aligned + (size_t)length;
                    /* Round the tail start up to a page: the mapping owns whole pages. */
                    uintptr_t tail_start = (end + page - 1) & ~(page - 1);
                    if (head)
                        munmap(res, head);
                    if (base + span > tail_start)
                        munmap((void *)tail_start, base + span - tail_start);
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (out == MAP_FAILED)
        return raise_errno(err, "mmap");
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)out);
}

static PyObject *
os_munmap(PyObject *module, PyObject *args)
{
    (void)module;
    unsigned long long addr, length;
    if (!PyArg_ParseTuple(args, "KK", &addr, &length))
        return NULL;
    int rc, err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = munmap((void *)(uintptr_t)addr, (size_t)length);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(err, "munmap");
    Py_RETURN_NONE;
}

static PyObject *
os_madvise(PyObject *module, PyObject *args)
{
    (void)module;
    unsigned long long addr, length;
    int advice;
    if (!PyArg_ParseTuple(args, "KKi", &addr, &length, &advice))
        return NULL;
    int rc, err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = madvise((void *)(uintptr_t)addr, (size_t)length, advice);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(err, "madvise");
    Py_RETURN_NONE;
}

static int
nodes_to_mask(PyObject *nodes, unsigned long *mask)
{
    memset(mask, 0, MASK_LONGS * sizeof(unsigned long));
    PyObject *seq = PySequence_Fast(nodes, "nodes must be a sequence of node numbers");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        long node = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (node == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (node < 0 || node >= MAX_NODES) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "NUMA node %ld is outside 0..%d", node, MAX_NODES - 1);
            return -1;
        }
        mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *
mask_to_list(const unsigned long *mask)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (long node = 0; node < MAX_NODES; node++) {
        if (mask[node / (8 * sizeof(unsigned long))] & (1UL << (node % (8 * sizeof(unsigned long))))) {
            PyObject *v = PyLong_FromLong(node);
            if (v == NULL || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(v);
        }
    }
    return out;
}

static PyObject *
os_mbind(PyObject *module, PyObject *args)
{
    /* mbind(addr, length, mode, nodes, flags) */
    (void)module;
    unsigned long long addr, length;
    int mode;
    unsigned int flags;
    PyObject *nodes;
    if (!PyArg_ParseTuple(args, "KKiOI", &addr, &length, &mode, &nodes, &flags))
        return NULL;
    unsigned long mask[MASK_LONGS];
    if (nodes_to_mask(nodes, mask) < 0)
        return NULL;
    int empty = 1;
    for (size_t i = 0; i < MASK_LONGS; i++)
        if (mask[i])
            empty = 0;
    long rc;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_mbind, (unsigned long)addr, (unsigned long)length, (unsigned long)mode,
                 empty ? NULL : mask, empty ? 0UL : (unsigned long)MAX_NODES + 1, flags);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(err, "mbind");
    Py_RETURN_NONE;
}

#ifndef MPOL_F_NODE
#define MPOL_F_NODE (1 << 0)
#endif
#ifndef MPOL_F_ADDR
#define MPOL_F_ADDR (1 << 1)
#endif
#ifndef MPOL_F_MEMS_ALLOWED
#define MPOL_F_MEMS_ALLOWED (1 << 2)
#endif

static PyObject *
os_get_mempolicy(PyObject *module, PyObject *args)
{
    /* get_mempolicy(addr or None) -> (mode, nodes): the policy of the page at addr,
     * or of the calling thread. */
    (void)module;
    PyObject *addr_obj;
    if (!PyArg_ParseTuple(args, "O", &addr_obj))
        return NULL;
    unsigned long long addr = 0;
    unsigned long flags = 0;
    if (addr_obj != Py_None) {
        addr = PyLong_AsUnsignedLongLong(addr_obj);
        if (PyErr_Occurred())
            return NULL;
        flags = MPOL_F_ADDR;
    }
    unsigned long mask[MASK_LONGS];
    memset(mask, 0, sizeof(mask));
    int mode = 0;
    long rc;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)MAX_NODES + 1,
                 (unsigned long)addr, flags);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(err, "get_mempolicy");
    PyObject *list = mask_to_list(mask);
    if (list == NULL)
        return NULL;
    return Py_BuildValue("(iN)", mode, list);
}

static PyObject *
os_mems_allowed(PyObject *module, PyObject *noargs)
{
    (void)module;
    (void)noargs;
    unsigned long mask[MASK_LONGS];
    memset(mask, 0, sizeof(mask));
    long rc;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)MAX_NODES + 1, 0UL,
                 (unsigned long)MPOL_F_MEMS_ALLOWED);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(err, "get_mempolicy");
    return mask_to_list(mask);
}

static PyObject *
os_page_nodes(PyObject *module, PyObject *args)
{
    /* page_nodes(addr, length) -> [node or -errno for each page] (move_pages query). */
    (void)module;
    unsigned long long addr, length;
    if (!PyArg_ParseTuple(args, "KK", &addr, &length))
        return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (addr % page != 0 || length == 0)
        return raise_errno(EINVAL, "move_pages");
    size_t count = ((size_t)length + page - 1) / page;
    if (count > (1u << 24))
        return raise_errno(E2BIG, "move_pages");
    void **pages = PyMem_RawMalloc(count * sizeof(void *));
    int *status = PyMem_RawMalloc(count * sizeof(int));
    if (pages == NULL || status == NULL) {
        PyMem_RawFree(pages);
        PyMem_RawFree(status);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < count; i++) {
        pages[i] = (void *)(uintptr_t)(addr + i * page);
        status[i] = -ENOENT;
    }
    long rc;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_move_pages, 0, (unsigned long)count, pages, NULL, status, 0);
    if (rc != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    PyMem_RawFree(pages);
    if (rc != 0) {
        PyMem_RawFree(status);
        return raise_errno(err, "move_pages");
    }
    PyObject *out = PyList_New((Py_ssize_t)count);
    if (out != NULL) {
        for (size_t i = 0; i < count; i++) {
            PyObject *v = PyLong_FromLong(status[i]);
            if (v == NULL) {
                Py_DECREF(out);
                out = NULL;
                break;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)i, v);
        }
    }
    PyMem_RawFree(status);
    return out;
}

static PyObject *
os_write_pattern(PyObject *module, PyObject *args)
{
    /* touch(addr, length, stride, byte): write one byte every `stride` bytes
     * (first-touch pages for placement checks and benchmarks). */
    (void)module;
    unsigned long long addr, length, stride;
    int byte;
    if (!PyArg_ParseTuple(args, "KKKi", &addr, &length, &stride, &byte))
        return NULL;
    if (stride == 0)
        return raise_errno(EINVAL, "touch");
    Py_BEGIN_ALLOW_THREADS
    volatile unsigned char *p = (volatile unsigned char *)(uintptr_t)addr;
    for (unsigned long long i = 0; i < length; i += stride)
        p[i] = (unsigned char)byte;
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"mmap", os_mmap, METH_VARARGS,
     "mmap(length, prot, flags, fd, offset, alignment) -> address"},
    {"munmap", os_munmap, METH_VARARGS, "munmap(address, length)"},
    {"madvise", os_madvise, METH_VARARGS, "madvise(address, length, advice)"},
    {"mbind", os_mbind, METH_VARARGS, "mbind(address, length, mode, nodes, flags)"},
    {"get_mempolicy", os_get_mempolicy, METH_VARARGS,
     "get_mempolicy(address or None) -> (mode, nodes)"},
    {"mems_allowed", os_mems_allowed, METH_NOARGS, "mems_allowed() -> nodes this process may use"},
    {"page_nodes", os_page_nodes, METH_VARARGS,
     "page_nodes(address, length) -> node of each page, or -errno (move_pages query)"},
    {"touch", os_write_pattern, METH_VARARGS,
     "touch(address, length, stride, byte): write `byte` every `stride` bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "aml_core._os", "Linux memory system calls for the host backend.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__os(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "PAGE_SIZE", (long)sysconf(_SC_PAGESIZE)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
