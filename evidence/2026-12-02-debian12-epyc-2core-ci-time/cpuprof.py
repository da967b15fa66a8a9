"""pytest plugin: CPU seconds (user+sys, this process and reaped children) per test."""
import os, resource, time, threading
import pytest

_times = {}
_walls = {}

def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t = _cpu(); w = time.monotonic(); n = threading.active_count()
    yield
    _times[item.nodeid] = _cpu() - t
    _walls[item.nodeid] = (time.monotonic() - w, n, threading.active_count())

def pytest_terminal_summary(terminalreporter):
    tot = sum(_times.values())
    terminalreporter.write_line(f"CPU total over tests: {tot:.1f} s in {len(_times)} tests")
    by_file = {}
    for k, v in _times.items():
        f = k.split("::")[0]; by_file[f] = by_file.get(f, 0) + v
    terminalreporter.write_line("CPU by file (top 40):")
    for f, v in sorted(by_file.items(), key=lambda kv: -kv[1])[:40]:
        terminalreporter.write_line(f"  {v:7.2f} s  {f}")
    terminalreporter.write_line("CPU by test (top 40):")
    for k, v in sorted(_times.items(), key=lambda kv: -kv[1])[:40]:
        terminalreporter.write_line(f"  {v:7.2f} s  wall {_walls[k][0]:6.2f} threads {_walls[k][1]}->{_walls[k][2]}  {k}")
