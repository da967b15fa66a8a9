# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# Peer copies: the checks of both buffers (aml_core.gpu.peer.copy_peer).
cdef object _kind_device = None  # aml_core.specs.Kind.DEVICE, imported on first use


cdef BufferBase _peer_side(object buffer, str what, object backend):
    """``buffer`` as a copy_peer side: a live buffer of ``backend``'s, of device memory
    with a device index; AMLTypeError/AMLValueError saying which rule it breaks."""
    global _kind_device
    if _kind_device is None:
        from .specs import Kind
        _kind_device = Kind.DEVICE
    if not isinstance(buffer, BufferBase):
        raise AMLTypeError(f"{what} must be an aml Buffer, not {type(buffer).__name__}")
    cdef BufferBase buf = buffer
    if buf._area is None:
        raise AMLValueError(f"{what} was never mapped by an area")
    if buf.flags & F_RELEASED:
        raise AMLValueError(f"{what} was freed")
    area_backend = buf._area.backend
    if area_backend != backend:
        raise AMLValueError(f"{what} belongs to the {area_backend!r} backend, not {backend!r}")
    device = buf.device
    if buf.kind is not _kind_device or device is None or device < 0:
        raise AMLValueError(
            f"copy_peer copies device memory; {what} is {buf.kind.value} memory "
            "(use the area's read and write for host and managed memory)"
        )
    return buf


cdef inline object _offset(object value, str what):
    """An offset by the size rule (checks.size, zero allowed): exact ints in range at C
    speed, anything else through the rule itself."""
    if type(value) is int and 0 <= value <= MAX_SIZE:
        return value
    return _check_size(value, what, zero=True)


def peer_copy_args(dst, src, size, dst_offset, src_offset, backend, /):
    """peer_copy_args(dst, src, size, dst_offset, src_offset, backend, /) -> (dst_ptr, dst_device, src_ptr, src_device, n)

    The native arguments of a copy of ``size`` bytes (None: the rest of ``src`` after
    ``src_offset``) from ``src`` to ``dst`` (aml_core.gpu.peer.copy_peer documents the
    rules), or the error of the first rule broken; nothing is copied here."""
    cdef BufferBase d = _peer_side(dst, "dst", backend)
    cdef BufferBase s = _peer_side(src, "src", backend)
    d_off = _offset(dst_offset, "dst_offset")
    s_off = _offset(src_offset, "src_offset")
    if size is None:
        n = s.size - s_off
    elif type(size) is int and 0 < size <= MAX_SIZE:
        n = size
    else:
        n = _check_size(size)
    if n <= 0 or s_off + n > s.size:
        raise AMLValueError(f"{n} bytes at src_offset {s_off} are not inside src ({s.size} bytes)")
    if d_off + n > d.size:
        raise AMLValueError(f"{n} bytes at dst_offset {d_off} do not fit in dst ({d.size} bytes)")
    # The areas check the buffers are still theirs and live (a concurrent free raises).
    (<AreaBase>d._area)._lookup(d, None)
    (<AreaBase>s._area)._lookup(s, None)
    return d.device_ptr + d_off, d.device, s.device_ptr + s_off, s.device, n
