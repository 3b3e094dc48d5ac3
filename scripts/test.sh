#!/usr/bin/env bash
# The full test suite, on a fresh machine too: installs what is missing, then lint, stale-artifact
# check, and every test (unit, promtool, real Prometheus/Alertmanager, real vLLM on the CPU).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh" test
cd "$ROOT"
echo "== ruff"
.venv/bin/ruff check .
echo "== generated artifacts are up to date"
.venv/bin/vllm-spec-exporter generate --check
echo "== pytest"
exec .venv/bin/pytest -p no:cacheprovider -ra "$@"
