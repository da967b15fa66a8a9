# A table keyed by address, in C: open addressing, linear probing, deletion by backward
# shift (no tombstones). Key 0 is an empty slot (no live memory is at address 0). The
# one implementation of an area's live table (AreaBase._slots, _buffer.pyx: the value a
# borrowed Buffer) and of a pool kernel's live blocks (PoolKernel._live, _kernel.pyx: the
# value a Block). The caller keeps the capacity (a power of two, or 0) and the count.
from libc.stdlib cimport calloc
from libc.stdlib cimport free as cfree


cdef struct AddrSlot:
    unsigned long long key  # the address; 0: empty
    void *value


cdef inline size_t addr_hash(unsigned long long key) noexcept nogil:
    # Addresses are aligned: mix the high bits into the low ones.
    cdef unsigned long long h = key * 0x9E3779B97F4A7C15ULL
    return <size_t>(h ^ (h >> 29))


cdef inline Py_ssize_t addr_find(AddrSlot *slots, size_t cap, unsigned long long key) noexcept nogil:
    """The slot of ``key``, or -1."""
    if cap == 0 or key == 0:
        return -1
    cdef size_t mask = cap - 1
    cdef size_t i = addr_hash(key) & mask
    cdef unsigned long long k
    while True:
        k = slots[i].key
        if k == key:
            return <Py_ssize_t>i
        if k == 0:
            return -1
        i = (i + 1) & mask


cdef inline void addr_put(AddrSlot *slots, size_t cap, unsigned long long key, void *value) noexcept nogil:
    """Enter ``key`` (absent; a free slot left) with ``value``."""
    cdef size_t mask = cap - 1
    cdef size_t i = addr_hash(key) & mask
    while slots[i].key != 0:
        i = (i + 1) & mask
    slots[i].key = key
    slots[i].value = value


cdef inline AddrSlot *addr_grown(AddrSlot *slots, size_t cap) noexcept nogil:
    """The entries of ``slots`` (``cap`` of them) in a new table of twice the slots (64
    at first), ``slots`` freed; NULL without memory (``slots`` untouched)."""
    cdef size_t new_cap = 64 if cap == 0 else cap * 2
    cdef AddrSlot *grown = <AddrSlot *>calloc(new_cap, sizeof(AddrSlot))
    if grown == NULL:
        return NULL
    cdef size_t i
    for i in range(cap):
        if slots[i].key != 0:
            addr_put(grown, new_cap, slots[i].key, slots[i].value)
    cfree(slots)
    return grown


cdef inline void addr_remove_at(AddrSlot *slots, size_t cap, size_t at) noexcept nogil:
    """Empty slot ``at``, shifting back the entries whose probe passed it."""
    cdef size_t mask = cap - 1
    cdef size_t i = at
    cdef size_t j = i
    cdef size_t home
    while True:
        j = (j + 1) & mask
        if slots[j].key == 0:
            break
        home = addr_hash(slots[j].key) & mask
        # The entry at j stays if its home lies cyclically in (i, j].
        if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        slots[i] = slots[j]
        i = j
    slots[i].key = 0
    slots[i].value = NULL
