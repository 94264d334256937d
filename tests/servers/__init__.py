"""Real servers for tests, started as pytest session fixtures (register with ``pytest_plugins``)."""
