#!/usr/bin/env bash
# The main job. With no arguments: `vllm-spec-exporter demo` (a real vLLM on the CPU with a tiny
# generated model, the exporter, Prometheus + Alertmanager, phased traffic, a live terminal view).
# With arguments: any vllm-spec-exporter command, e.g. `serve --target http://host:8000`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Only the demo without --target needs the vLLM venv.
if [ "${1:-demo}" != demo ] || [[ " $* " == *" --target"* ]]; then export SKIP_VLLM=1; fi
source "$ROOT/scripts/bootstrap.sh"
if [ $# -eq 0 ]; then set -- demo; fi
exec "$ROOT/.venv/bin/vllm-spec-exporter" "$@"
