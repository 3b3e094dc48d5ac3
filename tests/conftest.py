"""Shared test setup: `support` (fake vLLM, Prometheus helpers) is importable from every test."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
