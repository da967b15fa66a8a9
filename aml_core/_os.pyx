# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
"""aml_core._os: the Linux calls behind the host backend.

mmap with any flags and an alignment (a PROT_NONE reservation trimmed around an aligned
MAP_FIXED mapping), munmap, madvise, and the NUMA system calls mbind, get_mempolicy
and move_pages through syscall(2) with the SYS_* numbers of <sys/syscall.h>, so no
architecture table is written by hand and libnuma is not needed.

Every function validates its arguments before the call, releases the GIL around the
system call and raises OSError(errno, strerror, function) on failure; the Python side
(aml_core.host) translates errno into AML errors.
"""

from libc.errno cimport E2BIG, EBUSY, EINVAL, ENOENT, ENOMEM, errno
from libc.stdint cimport uintptr_t
from libc.string cimport memset, strerror
from posix.mman cimport (
    MAP_ANONYMOUS,
    MAP_FAILED,
    MAP_FIXED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    PROT_NONE,
    madvise as c_madvise,
    mmap as c_mmap,
    munmap as c_munmap,
)
from posix.types cimport off_t
from posix.unistd cimport _SC_PAGESIZE, sysconf
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc

cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)

cdef extern from "<sys/syscall.h>":
    const long SYS_mbind
    const long SYS_get_mempolicy
    const long SYS_move_pages

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

# get_mempolicy flags (<linux/mempolicy.h>, stable kernel ABI)
cdef enum:
    MPOL_F_ADDR = 1 << 1
    MPOL_F_MEMS_ALLOWED = 1 << 2
    MAX_NODES = 1024
    # unsigned longs in a node mask: enough for MAX_NODES bits where a long has 32 bits
    # or more (Cython enums cannot use sizeof)
    MASK_LONGS = 32  # MAX_NODES / 32

cdef size_t LONG_BITS = 8 * sizeof(unsigned long)

PAGE_SIZE = sysconf(_SC_PAGESIZE)


cdef object raise_errno(int err, str function):
    raise OSError(err, strerror(err).decode(), function)


def mmap(unsigned long long length, int prot, int flags, int fd, unsigned long long offset,
         unsigned long long alignment, /):
    """mmap(length, prot, flags, fd, offset, alignment) -> address"""
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    if length == 0 or length > <unsigned long long>PY_SSIZE_T_MAX:
        raise_errno(EINVAL, "mmap")
    if alignment != 0 and (alignment & (alignment - 1)) != 0:
        raise_errno(EINVAL, "mmap")
    if alignment > (1ULL << 40):
        raise_errno(EINVAL, "mmap")
    cdef void *out = MAP_FAILED
    cdef void *res
    cdef int err = 0
    cdef size_t span, head
    cdef uintptr_t base, aligned, end, tail_start
    with nogil:
        if alignment <= page:
            out = c_mmap(NULL, <size_t>length, prot, flags, fd, <off_t>offset)
            if out == MAP_FAILED:
                err = errno
        else:
            span = <size_t>length + <size_t>alignment
            if span < <size_t>length:
                err = ENOMEM
            else:
                res = c_mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                if res == MAP_FAILED:
                    err = errno
                else:
                    base = <uintptr_t>res
                    aligned = (base + <uintptr_t>alignment - 1) & ~(<uintptr_t>alignment - 1)
                    out = c_mmap(<void *>aligned, <size_t>length, prot, flags | MAP_FIXED, fd,
                                 <off_t>offset)
                    if out == MAP_FAILED:
                        err = errno
                        c_munmap(res, span)
                    else:
                        head = aligned - base
                        end = aligned + <size_t>length
                        # Round the tail start up to a page: the mapping owns whole pages.
                        tail_start = (end + page - 1) & ~(<uintptr_t>page - 1)
                        if head:
                            c_munmap(res, head)
                        if base + span > tail_start:
                            c_munmap(<void *>tail_start, base + span - tail_start)
    if out == MAP_FAILED:
        raise_errno(err, "mmap")
    return <unsigned long long><uintptr_t>out


def munmap(unsigned long long address, unsigned long long length, /):
    """munmap(address, length)"""
    cdef int rc, err = 0
    with nogil:
        rc = c_munmap(<void *><uintptr_t>address, <size_t>length)
        if rc != 0:
            err = errno
    if rc != 0:
        raise_errno(err, "munmap")


def madvise(unsigned long long address, unsigned long long length, int advice, /):
    """madvise(address, length, advice)"""
    cdef int rc, err = 0
    with nogil:
        rc = c_madvise(<void *><uintptr_t>address, <size_t>length, advice)
        if rc != 0:
            err = errno
    if rc != 0:
        raise_errno(err, "madvise")


cdef int nodes_to_mask(object nodes, unsigned long *mask) except -1:
    memset(mask, 0, MASK_LONGS * sizeof(unsigned long))  # the callers' masks
    cdef long node
    for item in nodes:
        node = item
        if node < 0 or node >= MAX_NODES:
            raise ValueError(f"NUMA node {node} is outside 0..{MAX_NODES - 1}")
        mask[node // LONG_BITS] |= 1UL << (node % LONG_BITS)
    return 0


cdef list mask_to_list(const unsigned long *mask):
    cdef long node
    return [node for node in range(MAX_NODES) if mask[node // LONG_BITS] & (1UL << (node % LONG_BITS))]


def mbind(unsigned long long address, unsigned long long length, int mode, nodes, unsigned int flags, /):
    """mbind(address, length, mode, nodes, flags)"""
    cdef unsigned long mask[MASK_LONGS]
    nodes_to_mask(nodes, mask)
    cdef bint empty = True
    cdef int i
    for i in range(MASK_LONGS):
        if mask[i]:
            empty = False
    cdef long rc
    cdef int err = 0
    with nogil:
        rc = syscall(SYS_mbind, <unsigned long>address, <unsigned long>length, <unsigned long>mode,
                     <unsigned long *>NULL if empty else mask,
                     <unsigned long>0 if empty else <unsigned long>(MAX_NODES + 1), flags)
        if rc != 0:
            err = errno
    if rc != 0:
        raise_errno(err, "mbind")


def get_mempolicy(address, /):
    """get_mempolicy(address or None) -> (mode, nodes): the policy of the page at address,
    or of the calling thread."""
    cdef unsigned long long addr = 0
    cdef unsigned long flags = 0
    if address is not None:
        addr = address
        flags = MPOL_F_ADDR
    cdef unsigned long mask[MASK_LONGS]
    memset(mask, 0, sizeof(mask))
    cdef int mode = 0
    cdef long rc
    cdef int err = 0
    with nogil:
        rc = syscall(SYS_get_mempolicy, &mode, mask, <unsigned long>(MAX_NODES + 1),
                     <unsigned long>addr, flags)
        if rc != 0:
            err = errno
    if rc != 0:
        raise_errno(err, "get_mempolicy")
    return mode, mask_to_list(mask)


def mems_allowed():
    """mems_allowed() -> the nodes this process may use"""
    cdef unsigned long mask[MASK_LONGS]
    memset(mask, 0, sizeof(mask))
    cdef long rc
    cdef int err = 0
    with nogil:
        rc = syscall(SYS_get_mempolicy, <int *>NULL, mask, <unsigned long>(MAX_NODES + 1),
                     <unsigned long>0, <unsigned long>MPOL_F_MEMS_ALLOWED)
        if rc != 0:
            err = errno
    if rc != 0:
        raise_errno(err, "get_mempolicy")
    return mask_to_list(mask)


cdef size_t move_pages_count(unsigned long long address, unsigned long long length, size_t page) except 0:
    """The pages of a move_pages(2) range (page_nodes, move_pages): EINVAL unless it is
    page-aligned and not empty, E2BIG past 2**24 pages."""
    if address % page != 0 or length == 0:
        raise_errno(EINVAL, "move_pages")
    cdef size_t count = (<size_t>length + page - 1) // page
    if count > (1u << 24):
        raise_errno(E2BIG, "move_pages")
    return count


def page_nodes(unsigned long long address, unsigned long long length, /):
    """page_nodes(address, length) -> the node of each page, or -errno (a move_pages query)"""
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    cdef size_t count = move_pages_count(address, length, page)
    cdef void **pages = <void **>PyMem_RawMalloc(count * sizeof(void *))
    cdef int *status = <int *>PyMem_RawMalloc(count * sizeof(int))
    cdef size_t i
    cdef long rc
    cdef int err = 0
    try:
        if pages == NULL or status == NULL:
            raise MemoryError()
        for i in range(count):
            pages[i] = <void *><uintptr_t>(address + i * page)
            status[i] = -ENOENT
        with nogil:
            rc = syscall(SYS_move_pages, 0, <unsigned long>count, pages, <void *>NULL, status, 0)
            if rc != 0:
                err = errno
        if rc != 0:
            raise_errno(err, "move_pages")
        return [status[i] for i in range(count)]
    finally:
        PyMem_RawFree(pages)
        PyMem_RawFree(status)


#: The status a page has until move_pages(2) answers for it: the kernel stops at the first
#: batch it cannot migrate (it returns how many pages it did not move) and leaves the
#: statuses of that batch and of every page after it unwritten.
cdef enum:
    UNANSWERED = -4095


def move_pages(unsigned long long address, unsigned long long length, nodes, int flags, int retries=0, /):
    """move_pages(address, length, nodes, flags, retries=0) -> (rc, {status: pages}): move
    each page of a page-aligned range to a node of ``nodes``, page i to
    ``nodes[i % len(nodes)]`` (one move_pages(2) call). Then the pages it answered -EBUSY,
    or left unanswered, are looked up with one query (move_pages without nodes: no move,
    no drain of the CPUs' page lists): a page found on its target moved (the subpages of
    a transparent huge page after its first are answered -EBUSY by the call that queued
    the huge page, and move with it), an unanswered one gets the node it is on; the
    others, still -EBUSY (a transient state), are moved again, up to ``retries`` calls,
    each looked up the same way. rc is the first call's result (the number of pages it
    could not move, 0 when all were); the dict counts the per-page status: a node number
    for a page now there, -errno for one not moved (-ENOENT: no page yet)"""
    cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
    cdef size_t count = move_pages_count(address, length, page)
    cdef list targets = list(nodes)
    cdef size_t ntargets = len(targets)
    if ntargets == 0 or ntargets > MAX_NODES:
        raise_errno(EINVAL, "move_pages")
    cdef int target[MAX_NODES]
    cdef size_t i, j
    cdef long node
    for i in range(ntargets):
        node = targets[i]
        if node < 0 or node >= MAX_NODES:
            raise ValueError(f"NUMA node {node} is outside 0..{MAX_NODES - 1}")
        target[i] = <int>node
    cdef void **pages = <void **>PyMem_RawMalloc(count * sizeof(void *))
    cdef int *dest = <int *>PyMem_RawMalloc(count * sizeof(int))
    cdef int *status = <int *>PyMem_RawMalloc(count * sizeof(int))
    # per-page results: nodes 0..MAX_NODES-1, then -1..-4095 (errno values)
    cdef size_t *counts = <size_t *>PyMem_RawMalloc((MAX_NODES + 4096) * sizeof(size_t))
    cdef long rc, qrc
    cdef int err = 0
    cdef int st
    cdef int attempt
    cdef size_t busy, again
    # the pages looked up again (-EBUSY or unanswered): their index, address, target and
    # new status; sized by the first lookup's count (each later one is a subset of it)
    cdef size_t *busy_at = NULL
    cdef void **busy_pages = NULL
    cdef int *busy_dest = NULL
    cdef int *busy_status = NULL
    try:
        if pages == NULL or dest == NULL or status == NULL or counts == NULL:
            raise MemoryError()
        memset(counts, 0, (MAX_NODES + 4096) * sizeof(size_t))
        with nogil:
            j = 0
            for i in range(count):
                pages[i] = <void *><uintptr_t>(address + i * page)
                dest[i] = target[j]
                status[i] = UNANSWERED
                j += 1
                if j == ntargets:
                    j = 0
            rc = syscall(SYS_move_pages, 0, <unsigned long>count, pages, dest, status, flags)
            if rc < 0:
                err = errno
            attempt = 0
            while rc >= 0:
                busy = 0
                for i in range(count):
                    st = status[i]
                    if st == -EBUSY or st == UNANSWERED:
                        busy += 1
                if busy == 0:
                    break
                if busy_at == NULL:
                    busy_at = <size_t *>PyMem_RawMalloc(busy * sizeof(size_t))
                    busy_pages = <void **>PyMem_RawMalloc(busy * sizeof(void *))
                    busy_dest = <int *>PyMem_RawMalloc(busy * sizeof(int))
                    busy_status = <int *>PyMem_RawMalloc(busy * sizeof(int))
                    if busy_at == NULL or busy_pages == NULL or busy_dest == NULL or busy_status == NULL:
                        break  # no room to look: the pages keep their status
                j = 0
                for i in range(count):
                    st = status[i]
                    if st == -EBUSY or st == UNANSWERED:
                        busy_at[j] = i
                        busy_pages[j] = pages[i]
                        busy_status[j] = -ENOENT
                        j += 1
                # where are they? (a query: nodes NULL)
                qrc = syscall(SYS_move_pages, 0, <unsigned long>busy, busy_pages, <void *>NULL, busy_status, 0)
                if qrc < 0:
                    break  # the pages keep their status
                again = 0
                for j in range(busy):
                    i = busy_at[j]
                    if busy_status[j] == dest[i]:
                        status[i] = dest[i]  # moved (with its huge page, or since)
                    elif status[i] == UNANSWERED:
                        status[i] = busy_status[j]  # not attempted: where it is
                    else:  # -EBUSY and not on its target: move it again
                        busy_at[again] = i
                        busy_pages[again] = pages[i]
                        busy_dest[again] = dest[i]
                        busy_status[again] = UNANSWERED
                        again += 1
                if again == 0 or attempt == retries:
                    break
                attempt += 1
                qrc = syscall(SYS_move_pages, 0, <unsigned long>again, busy_pages, busy_dest, busy_status, flags)
                if qrc < 0:
                    break  # the pages stay -EBUSY
                for j in range(again):
                    status[busy_at[j]] = busy_status[j]
            if rc >= 0:
                for i in range(count):
                    st = status[i]
                    if 0 <= st < MAX_NODES:
                        counts[st] += 1
                    elif -4096 < st < 0:
                        counts[MAX_NODES - 1 - st] += 1
                    else:
                        counts[MAX_NODES + 4095] += 1
        if rc < 0:
            raise_errno(err, "move_pages")
        out = {}
        for i in range(<size_t>(MAX_NODES + 4096)):
            if counts[i]:
                out[<long>i if i < <size_t>MAX_NODES else MAX_NODES - 1 - <long>i] = counts[i]
        return rc, out
    finally:
        PyMem_RawFree(pages)
        PyMem_RawFree(dest)
        PyMem_RawFree(status)
        PyMem_RawFree(counts)
        PyMem_RawFree(busy_at)
        PyMem_RawFree(busy_pages)
        PyMem_RawFree(busy_dest)
        PyMem_RawFree(busy_status)


def touch(unsigned long long address, unsigned long long length, unsigned long long stride, int byte, /):
    """touch(address, length, stride, byte): write ``byte`` every ``stride`` bytes
    (first-touch pages for placement checks and benchmarks)"""
    if stride == 0:
        raise_errno(EINVAL, "touch")
    cdef volatile unsigned char *p = <volatile unsigned char *><uintptr_t>address
    cdef unsigned long long i = 0
    with nogil:
        while i < length:
            p[i] = <unsigned char>byte
            i += stride
