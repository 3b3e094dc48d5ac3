"""Shared test setup: the suite's plugin (support/plugin.py: tiers, time limits, shared servers,
end-of-run summary) is loaded. `support` (fakes, server helpers, the CI policy) is importable from
every test because pyproject.toml's `pythonpath` puts tests/ on the path (with tools/ and bench/)."""

pytest_plugins = ["support.plugin"]
