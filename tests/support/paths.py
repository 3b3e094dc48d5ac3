"""Where the tests find the checkout: `ROOT` (the repository), `TESTS` (this folder's parent, the
test tree), `FIXTURES` (the captures from real servers, `tests/fixtures/`) and the promtool unit
tests, which ship beside the rules they test (`alerts/tests/`, `direct/alerts/tests/`: users run
them with `promtool test rules`). Test modules live in tier folders (`tests/sidecar/`,
`tests/generate/`, …) and read every path from here, so that moving a module between tiers
changes none of its paths."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"

# Each bundle's folder (its rule files) and the promtool unit tests beside them: every *.yaml there
# is a scenario, picked up by the runners without a list to update.
SIDECAR_BUNDLE = ROOT / "alerts"
DIRECT_BUNDLE = ROOT / "direct" / "alerts"
BUNDLES = {"sidecar": SIDECAR_BUNDLE, "direct": DIRECT_BUNDLE}


def promtool_scenarios(bundle: Path | None = None) -> list[Path]:
    """The committed `promtool test rules` files: of one bundle, or of both (sidecar first)."""
    folders = [bundle] if bundle else list(BUNDLES.values())
    return [path for folder in folders for path in sorted((folder / "tests").glob("*.yaml"))]
