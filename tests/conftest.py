# tests.support.streams: the ``host`` fixture (a StreamedHost) of the pool and kernel tests.
pytest_plugins = ["aml_core.testing", "tests.support.streams"]
