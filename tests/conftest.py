"""Shared test setup: `support` (fakes, server helpers, the CI policy) is importable from every test,
and the suite's plugin (support/plugin.py: tiers, time limits, shared servers, end-of-run summary)
is loaded."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["support.plugin"]
