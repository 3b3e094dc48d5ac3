#!/usr/bin/env bash
# The full test suite, on a fresh machine too: installs what is missing, then lint, stale-artifact
# check, and every test (unit, promtool, real Prometheus/Alertmanager, real vLLM on the CPU).
#   scripts/test.sh [pytest args]         everything (what CI runs: .ci/run)
#   scripts/test.sh --fast [pytest args]  the fast tier: unit, fuzz, promtool and lint tests, no
#                                         server started, nothing slow (pytest -m "not server and
#                                         not slow"; tiers in tests/support/plugin.py), 300
#                                         fuzz inputs a property instead of 3,400
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Both tiers run on several pytest-xdist workers: most tests wait on real servers' clocks. Tests that
# share something costly (the real vLLM, dockerd, the browser, a module's stack) stay on one worker
# (tests/support/workers.py decides the groups and queues the long ones first).
WORKERS=(-n 3 --dist loadgroup)
TIER=()
PURPOSE=test
if [ "${1:-}" = "--fast" ]; then
  shift
  PURPOSE=fast  # installs only what the fast tier runs (scripts/bootstrap.sh)
  TIER=(-m "not server and not slow")
  WORKERS=(-n auto --dist loadgroup)
  export FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-300}"  # the full suite fuzzes with 3,400 inputs a property
fi
PYTEST_ARGS=("$@")
set --  # bootstrap is sourced: it must not see this script's arguments
source "$ROOT/scripts/bootstrap.sh" "$PURPOSE"
cd "$ROOT"
echo "== ruff"
.venv/bin/ruff check .
echo "== generated artifacts are up to date"
.venv/bin/vllm-spec-exporter generate --check
echo "== pytest${TIER:+ (fast tier: ${TIER[*]})}"
rc=0
.venv/bin/pytest -p no:cacheprovider -ra --durations=25 "${WORKERS[@]}" "${TIER[@]}" "${PYTEST_ARGS[@]}" || rc=$?
# After pytest, so a picture or table waiting to be remade does not hide the tests' own results;
# the run still fails on it.
echo "== measured artifacts (pictures, benchmark tables) are up to date"
.venv/bin/python tools/measured.py || { [ "$rc" != 0 ] || rc=1; }
exit "$rc"
