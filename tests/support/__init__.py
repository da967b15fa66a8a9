"""The repository's own test machinery, shared by the core's and the backends' suites and
not shipped in any wheel (the public conformance kit is :mod:`aml_core.testing`):

* :mod:`~tests.support.doubles`, :mod:`~tests.support.double_fixtures`: building the C
  driver doubles of aml-hip, aml-ze and aml-hsa, and the fixtures of a backend on its double;
* :mod:`~tests.support.faults`: the fault-injection tables' runner and test side;
* :mod:`~tests.support.ipc_peer`, :mod:`~tests.support.ipc_machine`: a long-lived second
  process on a double, and the IPC state machine over it;
* :mod:`~tests.support.stress`: many threads mapping and unmapping on one area;
* :mod:`~tests.support.dropped`: virtual memory dropped without close(), checked alike
  on every backend's double;
* :mod:`~tests.support.dmabuf`: dma-buf export of pooled blocks, expandable pools and bad
  input, checked alike on every backend.

A backend's tests import it as ``tests.support``: their ``<name>_helpers.py`` puts the
repository root on ``sys.path``, and the children they start get it on ``PYTHONPATH``
(``DoubleSuite.child_env``).
"""
