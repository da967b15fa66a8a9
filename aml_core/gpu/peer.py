"""Copies between the device memory of two devices (``cudaMemcpyPeer`` / ``hipMemcpyPeer``)
from aml buffers, written once for CUDA and HIP (docs/aml-contract.md#peer-access).

:func:`copy_peer` checks both buffers before the native call: live, of the runtime's
backend, device memory (a DEVICE-kind buffer with a device index: an area's, a pool's,
a virtual-memory or an IPC import's), and the range inside each. The devices passed to
the runtime are the buffers' own, so a copy names the right pair of devices by
construction. The copy is synchronous: the bytes are at the destination when it returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import checks
from ..buffer import Buffer
from ..errors import AMLTypeError, AMLValueError
from ..specs import Kind

if TYPE_CHECKING:
    from .runtime import PeerOps

__all__ = ["copy_peer"]


def _device_buffer(buffer: object, what: str, backend: str) -> Buffer:
    if not isinstance(buffer, Buffer):
        raise AMLTypeError(f"{what} must be an aml Buffer, not {type(buffer).__name__}")
    if buffer.freed:
        raise AMLValueError(f"{what} was freed")
    if buffer.area.backend != backend:
        raise AMLValueError(f"{what} belongs to the {buffer.area.backend!r} backend, not {backend!r}")
    if buffer.kind is not Kind.DEVICE or buffer.device is None or buffer.device < 0:
        raise AMLValueError(
            f"copy_peer copies device memory; {what} is {buffer.kind.value} memory "
            "(use the area's read and write for host and managed memory)"
        )
    return buffer


def copy_peer(
    runtime: PeerOps,
    dst: Buffer,
    src: Buffer,
    size: int | None = None,
    *,
    dst_offset: int = 0,
    src_offset: int = 0,
) -> None:
    """Copy ``size`` bytes (default: the rest of ``src`` after ``src_offset``) from the
    device buffer ``src`` to the device buffer ``dst``, each on its own device, through
    the runtime's peer copy. EINVAL for a freed buffer, memory that is not device memory
    or a range outside either buffer; nothing is copied then."""
    name = runtime.traits.name
    d = _device_buffer(dst, "dst", name)
    s = _device_buffer(src, "src", name)
    d_off = checks.size(dst_offset, "dst_offset", zero=True)
    s_off = checks.size(src_offset, "src_offset", zero=True)
    n = s.size - s_off if size is None else checks.size(size)
    if n <= 0 or s_off + n > s.size:
        raise AMLValueError(f"{n} bytes at src_offset {s_off} are not inside src ({s.size} bytes)")
    if d_off + n > d.size:
        raise AMLValueError(f"{n} bytes at dst_offset {d_off} do not fit in dst ({d.size} bytes)")
    # The areas check the buffers are still theirs and live (a concurrent free raises).
    d.area._lookup(d, None)
    s.area._lookup(s, None)
    dst_device, src_device = d.device, s.device
    assert dst_device is not None  # by _device_buffer
    assert src_device is not None
    # Checked above (live buffers of this backend: their devices exist, their addresses are
    # not NULL; the range is inside both): the native operation directly, as an area's mmap.
    runtime._memcpy_peer(d.device_ptr + d_off, dst_device, s.device_ptr + s_off, src_device, n)
