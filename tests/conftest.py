pytest_plugins = ["testing.fixtures"]
