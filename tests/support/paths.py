"""Where the tests find the checkout: `ROOT` (the repository), `TESTS` (this folder's parent, the
test tree) and `FIXTURES` (the captures from real servers, `tests/fixtures/`). Test modules live in
tier folders (`tests/sidecar/`, `tests/generate/`, …) and read every path from here, so that moving
a module between tiers changes none of its paths."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
