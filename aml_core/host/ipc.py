"""Host memory shared between processes: the memfd-backed buffers of ``HostArea(ipc=True)``,
exported as :class:`~aml_core.ipc.IpcHandle` and opened in another process with
:func:`aml_core.ipc_open`.

Memory. Each buffer of an ipc area is a memfd (``memfd_create`` with ``MFD_CLOEXEC |
MFD_ALLOW_SEALING``, plus ``MFD_HUGETLB`` for huge pages) of the mapping's length, sealed
against shrinking and growing (``F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL``: no process
holding the file can cut the pages from under another's mapping, which would be SIGBUS),
mapped ``MAP_SHARED``; the area keeps the descriptor open while the buffer lives (one
descriptor per live buffer: mind ``RLIMIT_NOFILE``).

The fd crosses with ``SCM_RIGHTS``. The first export of a process starts a daemon thread
listening on an abstract unix socket (``aml-ipc-<pid>-<random>``, nothing in the file
system); the handle names that socket and a random 128-bit token per export. The importer
connects, checks with ``SO_PEERCRED`` that the process answering is the handle's ``pid``,
sends the token and receives a duplicate of the memfd, which it maps and closes. Why not
``pidfd_getfd`` (what aml-ze's IPC uses): it needs ptrace rights over the exporter
(``PTRACE_MODE_ATTACH_REALCREDS``), which sibling processes such as MPI ranks or a child
opening its parent's export do not have under Yama ``ptrace_scope`` 1 (Ubuntu's default)
without the exporter calling ``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)``, which opens it to
any ptrace; not at all under ``ptrace_scope`` 2 or 3 or in a container without
``CAP_SYS_PTRACE``; and a descriptor number can be reused once the buffer is freed. A unix
socket reaches any process of the same user in the same network and pid namespace (the
server answers only its own user and root), and a token names one export, not a number.

Lifetime. The server answers a token while the exported buffer lives, unless its export
was closed (``export.close()``); freeing the buffer withdraws its tokens and closes the
descriptor. The importer's mapping holds the memfd's pages: the memory lives until every
process has unmapped it (the exporter's munmap does not take it from an importer). The
exporter's thread must get the GIL to answer: an exporter blocked in native code that
holds the GIL makes ``ipc_open`` wait (up to :data:`TIMEOUT` seconds, then
:class:`~aml_core.errors.AMLFailure`). The thread serves every connected importer at once
(a selector): a connection that sends no token within ``_SERVE_TIMEOUT`` seconds is
closed, and past ``_MAX_WAITING`` waiting connections the oldest is, so idle or hostile
local clients never keep a real importer waiting.

NUMA. The exporter's ``mbind`` on its shared mapping sets the shmem file's shared policy,
which the kernel keeps with the file: the importer's ``get_mempolicy`` on its mapping
reports the exporter's policy and nodes, and a page first touched by either process is
placed by it. (An ``mbind`` by the importer would change it for both.)

Checks on import, each an :class:`~aml_core.errors.AMLValueError`: a handle of another
backend or not a host memfd handle (magic and version), opened in its exporter's process,
a socket answered by another pid than the handle's, a token the exporter does not serve
(closed export, freed buffer, tampered), a file other than the one the handle names (inode
and device), an unsealed file, and ``offset + size`` past the file's size.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap as _mmap
import os
import secrets
import selectors
import socket
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TypedDict

import attrs

from .. import _os
from ..area import Area, compiled_mmap
from ..buffer import Buffer, DLDeviceType, native_as
from ..errors import AMLFailure, AMLValueError
from ..ipc import IpcExport, IpcHandle, importable
from ..specs import Capability, Kind
from ..stream import StreamLike
from . import numa

__all__ = [
    "HostIpcImportArea",
    "HostIpcOptions",
    "HostIpcOptionsDict",
    "Memfd",
    "export",
    "ipc_open",
    "memfd",
    "release",
]

#: ``MFD_HUGE_SHIFT`` (<linux/memfd.h>): log2 of the huge page size goes here.
MFD_HUGE_SHIFT = 26
#: The seals of every exported memfd (<linux/fcntl.h>).
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
#: Seconds an importer waits for the exporter's answer.
TIMEOUT = 30.0
#: Seconds the exporter's server gives one importer to send its token.
_SERVE_TIMEOUT = 5.0
#: Connections the server keeps waiting for their token; past it the oldest is closed.
_MAX_WAITING = 256
#: The longest abstract socket name: sun_path's 108 bytes, less the leading NUL.
_NAME_MAX = 107

_MAGIC = b"AMLMFD\x00\x01"  # a host memfd handle, layout version 1
_HEAD = struct.Struct("<8sB16sQQ")  # magic, flags, token, inode, device; then the socket name
_READONLY = 1
_TOKEN = 16
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CPU = (int(DLDeviceType.CPU), 0)
_OFF_MAX = (1 << 63) - 1


@contextlib.contextmanager
def _named(function: str) -> Iterator[None]:
    """Name an OSError after the system call that failed (for numa.os_error)."""
    try:
        yield
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, function) from None


class Memfd:
    """The native record of a buffer of an ipc area: its mapping's length and its memfd
    (-1 once freed). Mutated only under the server's lock."""

    __slots__ = ("fd", "length")

    def __init__(self, length: int, fd: int) -> None:
        self.length = length
        self.fd = fd

    def __repr__(self) -> str:
        return f"Memfd(length={self.length}, fd={self.fd})"


def memfd(length: int, huge_page_size: int) -> int:
    """A new sealed memfd of ``length`` bytes (huge pages of ``huge_page_size`` if not 0);
    OSError(errno, ..., the failing call) on failure, with nothing left open."""
    if length > _OFF_MAX:  # no file is that large: what an anonymous mmap says of it
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), "memfd_create")
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    if huge_page_size:
        flags |= os.MFD_HUGETLB | ((huge_page_size.bit_length() - 1) << MFD_HUGE_SHIFT)
    with _named("memfd_create"):
        fd = os.memfd_create("aml-host", flags)
    try:
        with _named("ftruncate"):
            os.ftruncate(fd, length)
        with _named("fcntl(F_ADD_SEALS)"):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- the exporter's side: the server ------------------------------------------------------
class _Server:
    """This process's answers to importers: token -> (the buffer's record, its export)."""

    def __init__(self) -> None:
        # Re-entrant: a GC-driven free (release) may run in the server thread inside it.
        self._lock = threading.RLock()
        self._offers: dict[bytes, tuple[Memfd, weakref.ref[IpcExport]]] = {}
        self._listener: socket.socket | None = None
        self._name = b""

    def address(self) -> bytes:
        """The abstract socket's name (without the leading NUL), the server started."""
        with self._lock:
            if self._listener is None:
                name = f"aml-ipc-{os.getpid()}-{secrets.token_hex(8)}".encode()
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
                try:
                    sock.bind(b"\0" + name)
                    sock.listen(64)
                except BaseException:
                    sock.close()
                    raise
                threading.Thread(target=self._serve, args=(sock,), name="aml-host-ipc", daemon=True).start()
                self._listener, self._name = sock, name
            return self._name

    def offer(self, token: bytes, record: Memfd, export: IpcExport) -> None:
        """Serve the buffer ``record`` belongs to under ``token`` (of ``export``)."""
        with self._lock:
            if record.fd < 0:
                raise AMLValueError("the buffer was freed while being exported")
            # Forget the tokens of exports closed by their owner (they are refused anyway).
            for old in [t for t, (_, ref) in self._offers.items() if (e := ref()) is not None and e.closed]:
                del self._offers[old]
            self._offers[token] = (record, weakref.ref(export))

    def release(self, record: Memfd) -> list[IpcExport]:
        """Withdraw a freed buffer's tokens and close its memfd; its exports still alive."""
        with self._lock:
            gone = [t for t, (r, _) in self._offers.items() if r is record]
            exports = [self._offers.pop(t)[1]() for t in gone]
            fd, record.fd = record.fd, -1
            if fd >= 0:
                os.close(fd)
        return [e for e in exports if e is not None]

    def after_fork(self) -> None:
        """In a forked child: the parent's server is not this process's (its thread is
        gone; the listening socket copy is closed)."""
        self._lock = threading.RLock()
        if self._listener is not None:
            self._listener.close()
        self._listener, self._name, self._offers = None, b"", {}

    def _serve(self, sock: socket.socket) -> None:
        """Serve every connected importer at once (one thread, a selector): a connection
        is answered as soon as its token arrives, and closed if none came within
        :data:`_SERVE_TIMEOUT` seconds; past :data:`_MAX_WAITING` connections waiting,
        the oldest is closed. So idle connections (a slow, stopped or hostile client)
        never keep a real importer waiting (they used to be served one at a time, each
        given up to 5 s: seven idle ones made a real ``ipc_open`` time out)."""
        sel = selectors.DefaultSelector()
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, None)
        waiting: dict[socket.socket, float] = {}  # connection -> its deadline, oldest first

        def drop(conn: socket.socket) -> None:
            waiting.pop(conn, None)
            with contextlib.suppress(KeyError, ValueError, OSError):
                sel.unregister(conn)
            conn.close()

        while True:
            now = time.monotonic()
            for conn in [c for c, deadline in waiting.items() if deadline <= now]:
                drop(conn)
            timeout = max(0.0, min(waiting.values()) - now) if waiting else None
            try:
                ready = sel.select(timeout)
            except OSError:  # pragma: no cover - the selector's own failure: retry
                time.sleep(0.05)
                continue
            for key, _ in ready:
                if key.data is None:
                    if sock.fileno() < 0:
                        return  # closed
                    self._accept(sock, sel, waiting, drop)
                    continue
                conn = key.data  # registered with itself as its data
                waiting.pop(conn, None)
                sel.unregister(conn)
                try:
                    with conn:
                        conn.settimeout(_SERVE_TIMEOUT)  # the answer: a few bytes and a descriptor
                        self._answer(conn, conn.recv(64))
                except Exception:  # one importer's failure is its own: keep serving the others
                    continue

    def _accept(
        self,
        sock: socket.socket,
        sel: selectors.BaseSelector,
        waiting: dict[socket.socket, float],
        drop: Callable[[socket.socket], None],
    ) -> None:
        """Take every pending connection; refuse other users at once."""
        while True:
            try:
                conn, _ = sock.accept()
            except BlockingIOError:
                return
            except OSError:
                if sock.fileno() < 0:
                    return
                time.sleep(0.05)  # out of descriptors (EMFILE...): the importer waits, retry
                return
            try:
                _, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
                if uid not in (os.geteuid(), 0):
                    with conn:
                        conn.settimeout(0.1)
                        conn.send(b"NO:the exporter serves only its own user and root")
                    continue
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ, conn)
            except Exception:
                conn.close()
                continue
            waiting[conn] = time.monotonic() + _SERVE_TIMEOUT
            if len(waiting) > _MAX_WAITING:
                drop(next(iter(waiting)))  # the oldest waiting connection

    def _answer(self, conn: socket.socket, token: bytes) -> None:
        dup = -1
        with self._lock:
            entry = self._offers.get(token)
            if entry is not None:
                record, ref = entry
                export = ref()
                if export is not None and export.closed:
                    why = "the export was closed"
                elif record.fd < 0:
                    why = "the exported buffer was freed"
                else:
                    why = ""
                    dup = os.dup(record.fd)
            else:
                why = (
                    "the exporter does not serve this handle: its export was closed or its buffer "
                    "freed, or it is tampered"
                )
        if dup < 0:
            conn.send(b"NO:" + why.encode())
            return
        try:
            socket.send_fds(conn, [b"OK"], [dup])
        finally:
            os.close(dup)


_SERVER = _Server()
os.register_at_fork(after_in_child=_SERVER.after_fork)


def export(buf: Buffer, record: Memfd, readonly: bool) -> IpcExport:
    """The export of a live buffer of an ipc area (``HostArea.ipc_export``)."""
    name = _SERVER.address()
    try:
        st = os.fstat(record.fd)
    except OSError:
        raise AMLValueError("the buffer was freed while being exported") from None
    token = secrets.token_bytes(_TOKEN)
    data = _HEAD.pack(_MAGIC, _READONLY if readonly else 0, token, st.st_ino, st.st_dev) + name
    handle = IpcHandle(backend="host", device=buf.device or 0, size=buf.size, data=data, pid=os.getpid())
    result = IpcExport(buf, handle)
    _SERVER.offer(token, record, result)
    return result


def release(record: Memfd) -> list[IpcExport]:
    """Withdraw the tokens of a buffer being freed and close its memfd; returns its live
    exports (the caller closes them)."""
    return _SERVER.release(record)


# -- the importer's side ------------------------------------------------------------------
@attrs.frozen
class _Head:
    readonly: bool
    token: bytes
    inode: int
    device: int
    name: bytes


def _parse(handle: IpcHandle) -> _Head:
    data = handle.data
    if len(data) <= _HEAD.size or data[:8] != _MAGIC:
        raise AMLValueError(
            "not a host memfd IPC handle (bad magic or version): from another backend, or tampered"
        )
    _, flags, token, inode, device = _HEAD.unpack_from(data)
    name = data[_HEAD.size :]
    if flags & ~_READONLY or b"\0" in name or len(name) > _NAME_MAX:
        raise AMLValueError("the host memfd IPC handle has unknown flags or a bad socket name: tampered")
    return _Head(bool(flags & _READONLY), token, inode, device, name)


def _fetch(handle: IpcHandle, head: _Head) -> int:
    """The exporter's memfd, duplicated into this process (close it)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC) as sock:
        sock.settimeout(TIMEOUT)
        try:
            sock.connect(b"\0" + head.name)
        except TimeoutError:
            raise AMLFailure(
                f"the exporting process {handle.pid} accepted no connection within {TIMEOUT:g} s: its "
                "queue of connections is full (other clients connected and sent nothing)"
            ) from None
        except (FileNotFoundError, ConnectionRefusedError):
            raise AMLValueError(
                f"no aml exporter answers at {head.name.decode(errors='replace')!r}: the exporting "
                f"process {handle.pid} has exited (or is in another network namespace), or the handle "
                "is tampered"
            ) from None
        except OSError as exc:
            raise AMLFailure(f"connecting to the exporter of this IPC handle failed: {exc}") from None
        pid, _, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        if pid != handle.pid:
            raise AMLValueError(
                f"the IPC handle says pid {handle.pid}, but process {pid} serves its socket: tampered"
            )
        try:
            sock.send(head.token)
            msg, fds, flags, _ = socket.recv_fds(sock, 1024, 1, socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            raise AMLFailure(
                f"the exporting process {pid} took the connection but did not answer within "
                f"{TIMEOUT:g} s: its server thread did not run (the process is stopped, or a thread "
                "of it holds the GIL in native code)"
            ) from None
        except OSError as exc:
            raise AMLFailure(f"receiving the exporter's memfd failed: {exc}") from None
    if msg == b"OK" and len(fds) == 1 and not flags & socket.MSG_CTRUNC:
        return fds[0]
    for fd in fds:
        os.close(fd)
    if msg.startswith(b"NO:"):
        why = msg[3:].decode(errors="backslashreplace")  # a hostile exporter's bytes, shown
        raise AMLValueError(f"the exporting process {pid} refused this IPC handle: {why}")
    raise AMLFailure(f"the exporting process {pid} answered {msg[:32]!r} with {len(fds)} descriptors")


def _span(fd: int, handle: IpcHandle, head: _Head) -> tuple[int, int]:
    """(file offset, length) of the pages to map for ``handle``, after checking the file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_dev) != (head.inode, head.device):
        raise AMLValueError("the exporter sent another file than the one the IPC handle names: tampered")
    if not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
        raise AMLValueError("the exporter's memfd is not sealed against shrinking: refused (SIGBUS risk)")
    end = handle.offset + handle.size
    if end > st.st_size:
        raise AMLValueError(
            f"the IPC handle claims {handle.size} bytes at offset {handle.offset}; the exported "
            f"memory has {st.st_size}"
        )
    # Map whole pages of the file (its block size: the huge page size of a hugetlbfs memfd).
    page = max(_os.PAGE_SIZE, st.st_blksize)
    start = handle.offset - handle.offset % page
    length = -(-(end - start) // page) * page
    return start, min(length, st.st_size - start)


@attrs.frozen
class HostIpcOptions:
    """mmap options of the import area: the handle to open."""

    handle: IpcHandle | None = None


class HostIpcOptionsDict(TypedDict, total=False):
    """:class:`HostIpcOptions` as a mapping, typed."""

    handle: IpcHandle | None


@attrs.frozen
class _Mapping:
    base: int
    length: int


class HostIpcImportArea(Area):
    """The host IPC handles opened in this process (one area per process: ``ipc_open``
    makes it). Each open maps the exporter's pages again (another address, another
    Buffer); ``buf.area.munmap(buf)`` unmaps it."""

    options_type = HostIpcOptions

    @compiled_mmap
    def mmap(
        self,
        size: int,
        options: HostIpcOptions | HostIpcOptionsDict | None = None,
        *,
        stream: StreamLike = None,
    ) -> Buffer:
        """Open a host IPC handle as a buffer of ``size`` bytes (what
        :func:`aml_core.ipc_open` does: call that instead).

        Options (:class:`HostIpcOptions`, or a :class:`HostIpcOptionsDict` of its keys):

        - ``handle``: the :class:`~aml_core.ipc.IpcHandle` to open (required).

        Errors of the import area: :class:`~aml_core.errors.AMLValueError` without a
        handle and for every refused handle (see :mod:`aml_core.host.ipc`);
        :class:`~aml_core.errors.AMLFailure` when the exporter does not answer in time;
        mmap(2)'s errors by their errno (aml_core.host.numa.OS_ERRORS)."""
        return super().mmap(size, options)

    def __init__(self) -> None:
        """The host import area of this process (``ipc_open`` makes it)."""
        super().__init__(
            backend="host",
            kind=Kind.HOST,
            capabilities=Capability.BUFFER_PROTOCOL | Capability.DLPACK | Capability.IPC,
        )

    def open(self, handle: IpcHandle) -> Buffer:
        """Map a handle exported by another process."""
        handle = importable(handle, self.backend)
        return self.mmap(handle.size, HostIpcOptions(handle))

    def _allocate(self, size: int, options: HostIpcOptions) -> Buffer:
        handle = options.handle
        if handle is None:
            raise AMLValueError("the host IPC import area maps handles: use aml_core.ipc_open(handle)")
        head = _parse(handle)
        fd = _fetch(handle, head)
        try:
            start, length = _span(fd, handle, head)
            prot = _mmap.PROT_READ if head.readonly else _mmap.PROT_READ | _mmap.PROT_WRITE
            base = _os.mmap(length, prot, _mmap.MAP_SHARED, fd, start, 0)
        except OSError as exc:
            raise numa.os_error(exc) from None
        finally:
            os.close(fd)
        return self._new_buffer(
            base + handle.offset - start,
            size,
            host_accessible=True,
            readonly=head.readonly,
            dl_device=_CPU,
            native=_Mapping(base, length),
        )

    def _free(self, buffer: Buffer) -> None:
        mapping = native_as(buffer, _Mapping)
        try:
            _os.munmap(mapping.base, mapping.length)
        except OSError as exc:
            raise numa.os_error(exc) from None


_imports: HostIpcImportArea | None = None
_imports_lock = threading.Lock()


def ipc_open(handle: IpcHandle) -> Buffer:
    """``aml_core.ipc_open`` of a host handle: a buffer of this process's import area."""
    global _imports
    with _imports_lock:
        if _imports is None or _imports.closed:
            _imports = HostIpcImportArea()
        area = _imports
    return area.open(handle)
