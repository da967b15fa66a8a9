"""A scripted mutation check (issue 32, item 8) over the Python modules behind issue 32's
behaviours: each mutant is one deliberate bug (a textual change of one module), with the
tests that must catch it. :func:`run` applies each in a copy of the repository, runs its
tests there, and counts it killed when they fail. ``python -m tests.mutation.mutants``
runs them all and prints the score; ``--subset`` the quick ones CI runs
(tests/mutation/test_mutation.py, under 60 s).

Compiled modules (.pyx) are left out here: a mutant of one needs a rebuild of its
extension (minutes); their behaviours are covered by the state machines and fault tables
whose own holes the audit closed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]


@attrs.frozen
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str
    new: str
    tests: tuple[str, ...]
    quick: bool = True  # in the CI subset


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "a missing path is FAILURE",
        "aml_core/files.py",
        "errno.ENOENT: ErrorCode.EINVAL,",
        "errno.ENOENT: ErrorCode.FAILURE,",
        ("tests/test_history_files.py::test_dump_to_a_bad_path_is_its_aml_error",),
        quick=False,
    ),
    Mutant(
        "dump writes into a caller's descriptor",
        "aml_core/pool/_history.py",
        '        files.path(path, "the snapshot\'s path")\n        data = pickle.dumps',
        "        data = pickle.dumps",
        ("tests/test_history_files.py::test_dump_never_writes_into_a_callers_descriptor",),
    ),
    Mutant(
        "no largest history ring",
        "aml_core/pool/_history.py",
        "if entries > MAX_ENTRIES:",
        "if False:",
        ("tests/test_history_files.py::test_record_history_past_the_largest_ring_is_edom_and_forgotten",),
        quick=False,  # a ring of 2**24 + 1 events is allocated: a few seconds
    ),
    Mutant(
        "a refused ring size remembered",
        "aml_core/pool/_history.py",
        "self._history_entries, self._history_frames = old  # a refused size is forgotten",
        "pass",
        ("tests/test_history_files.py::test_a_ring_the_system_cannot_allocate_is_enomem_and_forgotten",),
        quick=False,
    ),
    Mutant(
        "the snapshot unpickler admits any global",
        "aml_core/snapshot_file.py",
        "        found = _ADMITTED.get((module, name))",
        "        found = super().find_class(module, name)",
        ("tests/test_plot.py::test_a_crafted_snapshot_runs_nothing",),
        quick=False,
    ),
    Mutant(
        "an interrupt of a callback not held",
        "aml_core/pool/_callbacks.py",
        '        if getattr(_local, "held", None) is None:\n'
        "            _local.held = exc\n"
        "        raise Interrupted",
        "        raise\n        raise Interrupted",
        (
            "tests/reliability/test_callback_interrupts.py::test_an_interrupted_log_callback_in_mmap_gives_the_block_back",
        ),
    ),
    Mutant(
        "the mmap keeps its block after an interrupt",
        "aml_core/pool/_pool.py",
        "return _callbacks.after_take(addr, self._give_block_back)",
        "return addr",
        (
            "tests/reliability/test_callback_interrupts.py::test_an_interrupted_log_callback_in_mmap_gives_the_block_back",
        ),
        quick=False,
    ),
    Mutant(
        "a freed buffer tracked again after an interrupt",
        "aml_core/pool/_pool.py",
        "        if _callbacks.was_freed(buf):\n            return",
        "        if False:\n            return",
        (
            "tests/reliability/test_callback_interrupts.py::test_an_interrupted_log_callback_in_munmap_frees_the_buffer_once",
        ),
    ),
    Mutant(
        "a socket name past sun_path accepted",
        "aml_core/host/ipc.py",
        'if flags & ~_READONLY or b"\\0" in name or len(name) > _NAME_MAX:',
        'if flags & ~_READONLY or b"\\0" in name:',
        ("tests/test_host_ipc_abuse.py::test_a_socket_name_past_sun_path_is_tampered",),
    ),
    Mutant(
        "a refusal decoded strictly",
        "aml_core/host/ipc.py",
        'why = msg[3:].decode(errors="backslashreplace")',
        "why = msg[3:].decode()",
        ("tests/test_host_ipc_abuse.py::test_a_refusal_that_is_not_utf8_is_an_aml_value_error",),
    ),
    Mutant(
        "idle connections served one at a time",
        "aml_core/host/ipc.py",
        "                sel.register(conn, selectors.EVENT_READ, conn)",
        "                conn.setblocking(True)\n                conn.settimeout(_SERVE_TIMEOUT)\n"
        "                with contextlib.suppress(Exception):\n"
        "                    self._answer(conn, conn.recv(64))\n"
        "                conn.close()\n                continue",
        ("tests/test_host_ipc_abuse.py::test_idle_connections_never_starve_a_real_importer",),
        quick=False,
    ),
    Mutant(
        "a dma-buf offset past the fd's end accepted",
        "aml_core/gpu/ops_sharing.py",
        "            if end is not None and offset + size > end:",
        "            if False:",
        ("tests/test_dmabuf_answers.py",),
    ),
    Mutant(
        "an offset past any file accepted",
        "aml_core/gpu/ops_sharing.py",
        "        elif offset + size > _OFF_MAX:",
        "        elif False:",
        ("tests/test_dmabuf_answers.py",),
    ),
    Mutant(
        "pool_stats_summary of anything",
        "aml_core/memory.py",
        "    if not isinstance(stats, PoolStats):",
        "    if False:",
        ("tests/test_memory_report.py::test_pool_stats_summary_of_what_is_not_pool_stats_is_a_type_error",),
    ),
    Mutant(
        "an importer that does not revalidate",
        "aml_core/ipc.py",
        "    revalidate(handle)\n    if handle.backend != backend:",
        "    if handle.backend != backend:",
        ("tests/reliability/test_audit.py::test_every_tampered_field_is_refused_by_ipc_open",),
    ),
    Mutant(
        "EACCES mapped to EINVAL",
        "aml_core/host/numa.py",
        "errno.EACCES: ErrorCode.EPERM,",
        "errno.EACCES: ErrorCode.EINVAL,",
        ("tests/reliability/test_audit.py::test_the_host_errno_table_literally",),
    ),
    Mutant(
        "an mbind of the first page only",
        "aml_core/host/numa.py",
        "_os.mbind(address, length,",
        "_os.mbind(address, min(length, 4096),",
        ("tests/reliability/test_audit.py::test_the_policy_holds_at_the_first_a_middle_and_the_last_page",),
    ),
    Mutant(
        "an mbind of the first page only (the area's fast path)",
        "aml_core/host/area.py",
        "_os.mbind(ptr, size,",
        "_os.mbind(ptr, min(size, 4096),",
        ("tests/reliability/test_audit.py::test_the_policy_holds_at_the_first_a_middle_and_the_last_page",),
    ),
    Mutant(
        "the codec lets bare errors out",
        "aml_core/codec.py",
        "    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:",
        "    except ZeroDivisionError as exc:",
        ("tests/fuzz/test_fuzz.py::test_hypothesis_fuzz",),
        quick=False,
    ),
    Mutant(
        "the plot tool's errors as tracebacks",
        "aml_core/plot.py",
        '        print(f"aml: error: {exc}", file=sys.stderr)\n        return 1',
        "        raise",
        ("tests/test_plot.py::test_malformed_input_is_one_error_line_and_status_1",),
    ),
    Mutant(
        "the guide's memfd import from offset 0",
        "docs/backend-authoring.md",
        "base + handle.offset - start, handle.size",
        "base, handle.size",
        ("tests/test_backend_guide.py::test_guide_backend_passes_the_kit",),
        quick=False,
    ),
)

_COPIED = ("aml_core", "tests", "docs", "pyproject.toml", "VERSION", "README.md", "backends")


def _copy(to: Path) -> None:
    for name in _COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(
                src, to / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis", "*.o")
            )
        elif src.exists():
            shutil.copy2(src, to / name)


def run(mutants: tuple[Mutant, ...], verbose: bool = True) -> list[tuple[Mutant, bool, float]]:
    """(mutant, killed, seconds) of each, run in one copy of the repository."""
    results = []
    with tempfile.TemporaryDirectory(prefix="aml-mutants-") as tmp:
        where = Path(tmp)
        _copy(where)
        for m in mutants:
            target = where / m.path
            original = target.read_text()
            assert original.count(m.old) == 1, f"{m.name}: the text to mutate is not in {m.path} once"
            target.write_text(original.replace(m.old, m.new))
            t = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests],
                cwd=where,
                env={
                    "PATH": "/usr/bin:/bin",
                    "HOME": tmp,
                    "PYTHONDONTWRITEBYTECODE": "1",
                    "AML_FUZZ_SECONDS": "0",
                    "PYTHONPATH": str(where),
                },
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            seconds = time.monotonic() - t
            target.write_text(original)
            killed = proc.returncode == 1  # a test failed (2..5: pytest could not run them)
            if proc.returncode not in (0, 1):
                raise RuntimeError(f"{m.name}: pytest exited {proc.returncode}:\n{proc.stdout[-2000:]}")
            if verbose:
                print(
                    f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.1f} s  {m.name} ({m.path})",
                    flush=True,
                )
            results.append((m, killed, seconds))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subset", action="store_true", help="only the quick mutants (CI)")
    args = parser.parse_args()
    chosen = tuple(m for m in MUTANTS if m.quick or not args.subset)
    results = run(chosen)
    killed = sum(k for _, k, _ in results)
    print(f"mutation score: {killed}/{len(results)} killed in {sum(s for *_, s in results):.0f} s")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
