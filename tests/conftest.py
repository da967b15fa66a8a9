pytest_plugins = ["aml_core.testing"]
