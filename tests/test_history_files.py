"""A pool's history, snapshot and log with hostile sizes, paths and targets (issue 32,
root causes 2 and 3): every refusal is its documented AML error, a refused size is not
remembered, and no caller's file descriptor is written into or closed."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

import aml_core
from aml_core import files
from aml_core.errors import (
    AMLDomainError,
    AMLMemoryError,
    AMLPermissionError,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)

MAX_ENTRIES = 1 << 24  # docs/reliability.md: the largest history ring


@pytest.fixture
def pool():
    with aml_core.area("host") as area:
        p = aml_core.pool(area)
        yield p
        p.close()


@pytest.mark.parametrize("entries", [MAX_ENTRIES + 1, 2**40, 2**62, 2**63 - 1])
def test_record_history_past_the_largest_ring_is_edom_and_forgotten(
    pool, entries: int, tmp_path: Path
) -> None:
    with pytest.raises(AMLDomainError, match="max_entries"):
        pool.record_history(max_entries=entries)
    # The refused size is not remembered: the log and close work.
    pool.log_to(tmp_path / "log.csv")
    b = pool.mmap(100)
    pool.munmap(b)
    pool.log_to(None)
    assert len((tmp_path / "log.csv").read_text().splitlines()) == 3
    assert pool.snapshot().history == ()


@pytest.mark.parametrize("entries", [2**63, 2**64])
def test_record_history_of_a_size_past_the_address_space_is_edom(pool, entries: int) -> None:
    with pytest.raises(AMLDomainError):
        pool.record_history(max_entries=entries)


@pytest.mark.parametrize("frames", [2**31, 2**40])
def test_record_history_max_frames_past_a_c_int_is_edom(pool, frames: int) -> None:
    with pytest.raises(AMLDomainError, match="max_frames"):
        pool.record_history(stacks="python", max_frames=frames)
    pool.record_history(stacks="python", max_frames=4)  # still works
    pool.munmap(pool.mmap(10))
    history = pool.snapshot().history
    assert [e.action for e in history if e.action in ("alloc", "free")] == ["alloc", "free"]
    assert all(len(e.frames) <= 4 for e in history)


def test_a_ring_the_system_cannot_allocate_is_enomem_and_forgotten(pool, monkeypatch) -> None:
    kernel = pool._kernel

    def refuse(*args: object) -> None:
        raise MemoryError

    monkeypatch.setattr(type(pool), "_set_trace", lambda self: refuse())
    with pytest.raises(AMLMemoryError, match="cannot be allocated"):
        pool.record_history(max_entries=1000)
    assert (pool._history_entries, pool._history_frames) == (0, 0)
    monkeypatch.undo()
    assert kernel is pool._kernel
    pool.close()  # nothing remembered to fail again


@pytest.mark.parametrize("bad", [None, 42, 3.5, b"", "", "a\0b", ["x"]])
def test_dump_refuses_what_is_not_a_path(pool, bad: object) -> None:
    error = AMLTypeError if not isinstance(bad, str | bytes) else AMLValueError
    with pytest.raises(error):
        pool.snapshot().dump(bad)  # type: ignore[arg-type]


def test_dump_never_writes_into_a_callers_descriptor(pool, tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(AMLTypeError, match="path"):
            pool.snapshot().dump(w)  # type: ignore[arg-type]
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # nothing was written
        os.write(w, b"x")  # and the descriptor is still open
        assert os.read(r, 1) == b"x"
    finally:
        os.close(r)
        os.close(w)


def _paths(tmp_path: Path) -> list[tuple[str, type[Exception], int]]:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    return [
        (str(tmp_path / "missing" / "snap.pickle"), AMLValueError, errno.ENOENT),
        (str(tmp_path / "dir"), AMLValueError, errno.EISDIR),
        (str(tmp_path / "file" / "snap.pickle"), AMLValueError, errno.ENOTDIR),
        (str(tmp_path / ("n" * 300)), AMLValueError, errno.ENAMETOOLONG),
    ]


def test_dump_to_a_bad_path_is_its_aml_error(pool, tmp_path: Path) -> None:
    snap = pool.snapshot()
    for path, error, code in _paths(tmp_path):
        with pytest.raises(error) as info:
            snap.dump(path)
        assert info.value.native is not None, path
        assert info.value.native.code == code, path


def test_dump_to_a_full_disk_is_enomem(pool) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(AMLMemoryError) as info:
        pool.snapshot().dump("/dev/full")
    assert info.value.native is not None
    assert info.value.native.code == errno.ENOSPC


def test_dump_writes_what_pytorch_reads(pool, tmp_path: Path) -> None:
    pool.record_history()
    pool.munmap(pool.mmap(1000))
    pool.snapshot().dump(tmp_path / "s.pickle")
    data = pickle.loads((tmp_path / "s.pickle").read_bytes())
    assert [e["action"] for e in data["device_traces"][0]][-2:] == ["free_requested", "free_completed"]


@pytest.mark.parametrize("bad", [42, 3.5, b"", "", ["x"]])
def test_log_to_refuses_what_is_not_a_path_or_callable(pool, bad: object) -> None:
    error = AMLTypeError if not isinstance(bad, str | bytes) else AMLValueError
    with pytest.raises(error):
        pool.log_to(bad)  # type: ignore[arg-type]


def test_log_to_a_bad_path_is_its_aml_error_and_keeps_the_old_log(pool, tmp_path: Path) -> None:
    seen: list[object] = []
    pool.log_to(seen.append)
    for path, error, code in _paths(tmp_path):
        with pytest.raises(error) as info:
            pool.log_to(path)
        assert info.value.native is not None, path
        assert info.value.native.code == code, path
    with pytest.raises(AMLTypeError):
        pool.log_to(42)  # type: ignore[arg-type]
    assert pool._log is not None  # a target refused before any change


def test_log_to_a_read_only_file_is_eperm(pool, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes read-only files")
    f = tmp_path / "ro.csv"
    f.write_text("")
    f.chmod(0o400)
    with pytest.raises(AMLPermissionError):
        pool.log_to(f)


@pytest.mark.parametrize(
    ("code", "aml"),
    [
        (errno.ENOENT, ErrorCode.EINVAL),
        (errno.ENOTDIR, ErrorCode.EINVAL),
        (errno.EISDIR, ErrorCode.EINVAL),
        (errno.ENAMETOOLONG, ErrorCode.EINVAL),
        (errno.ELOOP, ErrorCode.EINVAL),
        (errno.EINVAL, ErrorCode.EINVAL),
        (errno.EEXIST, ErrorCode.EINVAL),
        (errno.ENXIO, ErrorCode.EINVAL),
        (errno.EBADF, ErrorCode.EINVAL),
        (errno.EACCES, ErrorCode.EPERM),
        (errno.EPERM, ErrorCode.EPERM),
        (errno.EROFS, ErrorCode.EPERM),
        (errno.ENOSPC, ErrorCode.ENOMEM),
        (errno.EDQUOT, ErrorCode.ENOMEM),
        (errno.EFBIG, ErrorCode.ENOMEM),
        (errno.ENOMEM, ErrorCode.ENOMEM),
        (errno.EMFILE, ErrorCode.ENOMEM),
        (errno.ENFILE, ErrorCode.ENOMEM),
        (errno.EBUSY, ErrorCode.EBUSY),
        (errno.ETXTBSY, ErrorCode.EBUSY),
        (errno.EAGAIN, ErrorCode.EBUSY),
        (errno.EOPNOTSUPP, ErrorCode.ENOTSUP),
        (errno.EIO, ErrorCode.FAILURE),
        (errno.EXDEV, ErrorCode.FAILURE),
    ],
)
def test_the_file_errno_table_literally(code: int, aml: ErrorCode) -> None:
    """docs/reliability.md's table, copied here by hand (not from the code's table)."""
    err = files.error(OSError(code, os.strerror(code)), "doing it")
    assert err.code is aml
    assert err.native is not None
    assert err.native.code == code
    assert err.native.name == errno.errorcode[code]
    assert "doing it" in str(err)
