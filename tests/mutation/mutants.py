"""A scripted mutation check (issue 32, item 8) over the modules behind issue 32's
behaviours, Python and compiled: each mutant is one deliberate bug (a textual change of
one module), with the tests that must catch it. :func:`run` applies each in a copy of the
repository, runs its tests there, and counts it killed when they fail.
``python -m tests.mutation.mutants`` runs them all and prints the score; ``--subset`` the
quick ones CI runs (tests/mutation/test_mutation.py); ``--compiled`` only the Cython ones;
``--only TEXT`` (repeatable) those whose name holds TEXT.

A mutant of a compiled module (a ``.pyx``) is built before its tests run: only its own
extension, in the copy (Cython, then the C or C++ compiler at ``-O0``: the same code, built
faster), with setup.py's directives; the copy's original source and extension are put back
(with their times, so that no later build sees them as changed) before the next mutant.
A build that fails is an error of the check, never a kill.
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
    #: the extension rebuilt for a mutant of a shared ``.pxd`` (inline code compiled into
    #: the modules that cimport it) or of a ``.pxi`` (a part of the ``.pyx`` that includes
    #: it, e.g. ``_kernel_heaps.pxi`` of ``_kernel``); a ``.pyx`` mutant rebuilds its own
    module: str | None = None

    @property
    def compiled(self) -> bool:
        """A mutant of a Cython module: its extension is rebuilt before its tests run."""
        return self.path.endswith((".pyx", ".pxd", ".pxi"))

    @property
    def extension(self) -> str:
        """The one extension this mutant's build makes."""
        if self.path.endswith((".pxd", ".pxi")):
            if self.module is None:
                raise ValueError(
                    f"{self.name}: a .pxd or .pxi mutant names the extension it rebuilds (module=)"
                )
            return self.module
        return Path(self.path).stem


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
        "an mbind of the stock's first page only (a bound area's small mappings)",
        "aml_core/host/stock.py",
        "_os.mbind(ptr, STOCK_SIZE,",
        "_os.mbind(ptr, 4096,",
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
    ),  # -- compiled modules (.pyx): each is rebuilt (its one extension) in the copy ----------
    Mutant(
        "a tail of exactly the split minimum left unsplit",
        "aml_core/_kernel_heaps.pxi",
        "if rest >= self.split_min(slab.heap):",
        "if rest > self.split_min(slab.heap):",
        ("tests/test_kernel_rules.py", "tests/test_kernel.py", "tests/test_pool.py"),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a request of exactly the small maximum in the large heap",
        "aml_core/_kernel_heaps.pxi",
        "n <= self._small_max) else 1",
        "n < self._small_max) else 1",
        (
            "tests/test_kernel_rules.py",
            "tests/test_kernel.py",
            "tests/test_pool.py",
            "tests/test_pool_config.py",
        ),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a 10 MiB request given a medium slab",
        "aml_core/_kernel_slabs.pxi",
        "if n < 10 * MIB:",
        "if n <= 10 * MIB:",
        (
            "tests/test_kernel_rules.py",
            "tests/test_kernel.py",
            "tests/test_pool.py",
            "tests/test_pool_config.py",
        ),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a stream's hit leaves its held count",
        "aml_core/_kernel_heaps.pxi",
        "        self._held[stream] -= 1\n",
        "",
        (
            "tests/test_kernel_rules.py::test_a_host_order_miss_waits_for_no_stream_whose_blocks_were_taken_again",
        ),
        quick=True,  # CI: one mutant of each compiled module
        module="_kernel",
    ),
    Mutant(
        "the kernel's live-table erase skipped",
        "aml_core/_kernel_heaps.pxi",
        "    addr_remove_at(m.slots, m.cap, <size_t>i)\n    m.count -= 1\n",
        "",
        ("tests/test_kernel.py",),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a freed block's requested bytes still counted",
        "aml_core/_kernel_heaps.pxi",
        "        self.requested -= b.requested\n        return b",
        "        return b",
        ("tests/test_kernel.py",),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a block freed onto a stream still counted in use",
        "aml_core/_kernel_heaps.pxi",
        "            self.blocks -= b.size\n            b.has_stream = True",
        "            b.has_stream = True",
        ("tests/test_kernel.py",),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "coalescing skips the next free neighbour",
        "aml_core/_kernel_heaps.pxi",
        "if nxt != NULL and nxt.state == B_FREE:",
        "if False:",
        ("tests/test_kernel.py", "tests/test_pool.py"),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a stream's block freed in host order",
        "aml_core/_kernel_heaps.pxi",
        "            self.put_back(b, b.has_stream, b.stream)",
        "            self.put_back(b, False, 0)",
        ("tests/test_kernel_rules.py", "tests/test_kernel.py", "tests/test_compiled_hooks.py"),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a running stream's blocks reclaimed without waiting",
        "aml_core/_kernel_streams.pxi",
        "                if rc == -1:\n                    st.synchronize(deref(hit).first)",
        "                if rc == -1:\n                    pass",
        ("tests/test_kernel.py", "tests/test_pool_streams.py"),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "a failed buffer construction strands its block",
        "aml_core/_kernel.pyx",
        "            b = self.unlive(addr)\n            if b != NULL and self.put_back(",
        "            b = NULL\n            if b != NULL and self.put_back(",
        ("tests/test_kernel.py",),
        quick=False,
    ),
    Mutant(
        "a released slab still counted reserved",
        "aml_core/_kernel_slabs.pxi",
        "        self.reserved -= slab.size\n        self.native_frees += 1",
        "        self.native_frees += 1",
        ("tests/test_kernel.py", "tests/test_pool.py"),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "trim releases past what it may keep",
        "aml_core/_kernel_slabs.pxi",
        "            if <size_t>(self.reserved - self.blocks) <= keep:\n                break",
        "            if <size_t>(self.reserved - self.blocks) < keep:\n                break",
        (
            "tests/test_kernel_rules.py",
            "tests/test_kernel.py",
            "tests/test_pool.py",
            "tests/test_pool_limits.py",
        ),
        quick=False,
        module="_kernel",
    ),
    Mutant(
        "the area's live-table erase skipped",
        "aml_core/_buffer_table.pxi",
        "            self._remove_at(i)\n",
        "            pass\n",
        ("tests/test_area_bookkeeping.py",),
        quick=False,
        module="_buffer",
    ),
    Mutant(
        "a live-table removal without the back-shift",
        "aml_core/_addrmap.pxd",
        "        slots[i] = slots[j]\n        i = j",
        "        break",
        ("tests/test_area_bookkeeping.py", "tests/test_host_area.py"),
        quick=False,
        module="_buffer",
    ),
    Mutant(
        "an unmap leaves its bytes counted",
        "aml_core/_buffer_table.pxi",
        "        self._bytes -= buf.size\n        self._unmaps += 1\n        return 0",
        "        self._unmaps += 1\n        return 0",
        ("tests/test_area_bookkeeping.py",),
        quick=False,
        module="_buffer",
    ),
    Mutant(
        "a viewed buffer unmapped (no EBUSY)",
        "aml_core/_buffer_table.pxi",
        "        if buf.exports:\n            raise AMLBusyError(",
        "        if False:\n            raise AMLBusyError(",
        ("tests/test_area_bookkeeping.py::test_a_viewed_buffer_is_busy_then_freed",),
        quick=True,  # CI: one mutant of each compiled module
        module="_buffer",
    ),
    Mutant(
        "a failed buffer construction leaks its native allocation",
        "aml_core/_allocator.pyx",
        "                if self.mode == N_HOST:\n                    a.c_free_host(p)\n"
        "                else:\n                    a.c_free(p)\n            raise",
        "                pass\n            raise",
        ("tests/test_native_allocator.py::test_a_failed_buffer_construction_frees_the_native_allocation",),
        quick=True,  # CI: one mutant of each compiled module
    ),
    Mutant(
        "a failed native free forgets its buffer",
        "aml_core/_allocator.pyx",
        "            area._restore(buf)  # the memory is still there: keep tracking it",
        "            pass",
        ("tests/test_native_allocator.py",),
        quick=False,
    ),
    Mutant(
        "a managed size of whole granules rounded up once more",
        "aml_core/_allocator.pyx",
        "alloc = (n + g - 1) // g * g",
        "alloc = (n + g) // g * g",
        ("tests/test_native_allocator.py",),
        quick=False,
    ),
    Mutant(
        "a hand-over without the wait on the event",
        "aml_core/_allocator.pyx",
        "        return self.c_stream_wait_event(<void *><uintptr_t>stream, event[0], 0)",
        "        return 0",
        ("tests/test_kernel.py", "tests/test_pool_streams.py", "tests/test_native_allocator.py"),
        quick=False,
    ),
    Mutant(
        "the event query's not-ready check inverted",
        "aml_core/_allocator.pyx",
        "if rc == self.not_ready:",
        "if rc != self.not_ready:",
        ("tests/test_kernel.py", "backends/hip/tests/test_hip_kernel.py"),
        quick=False,
    ),
    Mutant(
        "a hook's fast free not counted",
        "aml_core/_hooks.pyx",
        "        aml_count(&st.live, -1)\n        aml_count(&st.fast_frees, 1)",
        "        aml_count(&st.fast_frees, 1)",
        ("tests/test_compiled_hooks.py",),
        quick=False,
    ),
    Mutant(
        "a hook's failed slow malloc counted live",
        "aml_core/_hooks.pyx",
        "        if addr:\n            aml_count(&st.live, 1)",
        "        if True:\n            aml_count(&st.live, 1)",
        ("tests/test_compiled_hooks.py",),
        quick=False,
    ),
    Mutant(
        "a hook's failed slow free counted freed",
        "aml_core/_hooks.pyx",
        "        if status == 0:\n            aml_count(&st.live, -1)\n        elif status == 1:",
        "        if status <= 0:\n            aml_count(&st.live, -1)\n        elif status == 1:",
        ("tests/test_compiled_hooks.py::test_failed_pytorch_calls_leave_the_live_count",),
        quick=True,  # CI: one mutant of each compiled module
    ),
    Mutant(
        "the fast-path interface's installed() fails",
        "aml_core/_fastpath.pyx",
        "    cdef int installed(self, AreaBase area) except -1:\n        return 0",
        "    cdef int installed(self, AreaBase area) except -1:\n        return -1",
        ("tests/test_native_allocator.py::test_mmap_and_munmap_run_compiled",),
        quick=True,  # CI: one mutant of each compiled module
    ),
)

_COPIED = ("aml_core", "tests", "docs", "pyproject.toml", "VERSION", "README.md", "backends", "setup.py")

#: Builds one compiled module of aml_core in place (run in the copy, the module's name as
#: its argument): setup.py's directives and C++ list, read from it, not repeated here.
_BUILD_ONE = """
import ast, sys
from Cython.Build import cythonize
from setuptools import Extension, setup
found = {}
for node in ast.parse(open("setup.py").read()).body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        if node.targets[0].id in ("DIRECTIVES", "CPP"):
            found[node.targets[0].id] = ast.literal_eval(node.value)
name = sys.argv[1]
ext = Extension(f"aml_core.{name}", [f"aml_core/{name}.pyx"], extra_compile_args=["-O0"],
                language="c++" if name in found["CPP"] else None)
setup(script_args=["-q", "build_ext", "--inplace", "--build-temp", sys.argv[2]],
      ext_modules=cythonize([ext], compiler_directives=found["DIRECTIVES"], force=True, quiet=True))
"""


def _copy(to: Path) -> None:
    for name in _COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(
                src, to / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis", "*.o")
            )
        elif src.exists():
            shutil.copy2(src, to / name)


def _built(where: Path, module: str) -> list[Path]:
    """The files of ``module``'s build in the copy (its generated C/C++ and extension)."""
    return [p for p in (where / "aml_core").glob(f"{module}.*") if p.suffix not in (".pyx", ".pxd")]


def _build(where: Path, module: str, env: dict[str, str]) -> None:
    """Build the copy's ``aml_core/<module>.pyx`` into its extension, in place."""
    proc = subprocess.run(
        [sys.executable, "-c", _BUILD_ONE, module, str(where / "build" / "mutant")],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the mutant of {module} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _restore(where: Path, m: Mutant) -> None:
    """Put the original source back in the copy, and, for a compiled mutant, the original
    build of its extension (copy2 keeps their times: the next build sees nothing changed)."""
    shutil.copy2(ROOT / m.path, where / m.path)
    if m.compiled:
        module = m.extension
        for p in _built(where, module):
            p.unlink()
        for p in _built(ROOT, module):
            shutil.copy2(p, where / "aml_core" / p.name)


def run(mutants: tuple[Mutant, ...], verbose: bool = True) -> list[tuple[Mutant, bool, float]]:
    """(mutant, killed, seconds) of each, run in one copy of the repository; the seconds
    of a compiled mutant include its build."""
    results = []
    with tempfile.TemporaryDirectory(prefix="aml-mutants-") as tmp:
        where = Path(tmp)
        _copy(where)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": tmp,
            "PYTHONDONTWRITEBYTECODE": "1",
            "AML_FUZZ_SECONDS": "0",
            "PYTHONPATH": str(where),
        }
        # Every mutant's tests must pass on the unmutated copy first: a test that fails
        # anyway (its environment, a flaky machine) would count as a kill.
        started = time.monotonic()
        baseline = _run_tests(where, tuple(dict.fromkeys(test for m in mutants for test in m.tests)), env)
        if baseline.returncode != 0:
            raise RuntimeError(f"the mutants' tests fail on the unmutated code:\n{baseline.stdout[-3000:]}")
        if verbose:
            print(
                f"baseline  {time.monotonic() - started:5.1f} s  the mutants' tests pass unmutated",
                flush=True,
            )
        for m in mutants:
            target = where / m.path
            original = target.read_text()
            assert original.count(m.old) == 1, f"{m.name}: the text to mutate is not in {m.path} once"
            t = time.monotonic()
            target.write_text(original.replace(m.old, m.new))
            try:
                if m.compiled:
                    _build(where, m.extension, env)
                proc = _run_tests(where, m.tests, env)
            finally:
                _restore(where, m)
            seconds = time.monotonic() - t
            # A test failed (1), or the tests crashed (a signal: a compiled mutant may
            # corrupt memory); 2..5: pytest could not run them, an error of the check.
            killed = proc.returncode == 1 or proc.returncode < 0
            if proc.returncode not in (0, 1) and proc.returncode >= 0:
                raise RuntimeError(f"{m.name}: pytest exited {proc.returncode}:\n{proc.stdout[-2000:]}")
            if verbose:
                print(
                    f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.1f} s  {m.name} ({m.path})",
                    flush=True,
                )
                if killed:
                    by = (
                        _first_failure(proc.stdout)
                        if proc.returncode == 1
                        else f"a crash (signal {-proc.returncode})"
                    )
                    print(f"           by {by}", flush=True)
            results.append((m, killed, seconds))
    return results


def _first_failure(output: str) -> str:
    """The test that failed, from pytest's short summary (``FAILED tests/...::test``)."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0].split(" ", 1)[1]
    return "?"


def _run_tests(where: Path, tests: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subset", action="store_true", help="only the quick mutants (CI)")
    parser.add_argument("--compiled", action="store_true", help="only the mutants of compiled modules")
    parser.add_argument(
        "--only", action="append", default=[], help="only the mutants whose name holds this text (repeatable)"
    )
    args = parser.parse_args()
    chosen = tuple(
        m
        for m in MUTANTS
        if (m.quick or not args.subset)
        and (m.compiled or not args.compiled)
        and (not args.only or any(text in m.name for text in args.only))
    )
    results = run(chosen)
    killed = sum(k for _, k, _ in results)
    print(f"mutation score: {killed}/{len(results)} killed in {sum(s for *_, s in results):.0f} s")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
