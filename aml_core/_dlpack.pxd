# The DLPack 1.x ABI (dlpack.h, https://github.com/dmlc/dlpack): the structs aml exports.
# Declared here as Cython structs, so no copy of dlpack.h is needed to build.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    DLPACK_MAJOR_VERSION = 1
    DLPACK_MINOR_VERSION = 0
    kDLUInt = 1
    # Bit of DLManagedTensorVersioned.flags: the consumer must not write.
    DLPACK_FLAG_BITMASK_READ_ONLY = 1

cdef struct DLDevice:
    int32_t device_type
    int32_t device_id

cdef struct DLDataType:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef struct DLTensor:
    void *data
    DLDevice device
    int32_t ndim
    DLDataType dtype
    int64_t *shape
    int64_t *strides
    uint64_t byte_offset

cdef struct DLManagedTensor:
    DLTensor dl_tensor
    void *manager_ctx
    void (*deleter)(DLManagedTensor *self) noexcept nogil

cdef struct DLPackVersion:
    uint32_t major
    uint32_t minor

cdef struct DLManagedTensorVersioned:
    DLPackVersion version
    void *manager_ctx
    void (*deleter)(DLManagedTensorVersioned *self) noexcept nogil
    uint64_t flags
    DLTensor dl_tensor
