import gc
counts = {"drop": 0, "teardown": 0, "gc": 0}
def pytest_configure(config):
    from tests.support import dropped_machine, ipc_machine
    d0 = dropped_machine.DroppedMachine._drop
    def _drop(self, make):
        counts["drop"] += 1
        return d0(self, make)
    dropped_machine.DroppedMachine._drop = _drop
    t0 = ipc_machine.IpcMachine.teardown
    def teardown(self):
        counts["teardown"] += 1
        return t0(self)
    ipc_machine.IpcMachine.teardown = teardown
    gc.callbacks.append(lambda phase, info: counts.__setitem__("gc", counts["gc"] + (phase == "start")))
def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"COUNTS {counts}")
