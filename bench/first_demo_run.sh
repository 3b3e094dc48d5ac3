#!/usr/bin/env bash
# The first-run cost, measured the way a user meets it: the first demo run (`bash scripts/run.sh`) from a
# fresh clone with EMPTY caches — the project's (VLLM_SPEC_EXPORTER_CACHE), pip's, vLLM's and
# torch inductor's (XDG_CACHE_HOME, TORCHINDUCTOR_CACHE_DIR): a warm ~/.cache/pip or
# /tmp/torchinductor_<user> would make the run less than empty. The machine's local wheel folders
# (pip.conf find-links) stay: they are part of the machine. Prints the load average before and after
# and the wall time; keeps the demo's output and verdict, then deletes the clone and the caches
# (~3.5 GB each).
#
# Usage: bash bench/first_demo_run.sh GIT-REF NAME [SCRATCH-DIR] [-- extra run.sh arguments]
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash bench/first_demo_run.sh GIT-REF NAME [SCRATCH-DIR] [-- extra run.sh arguments]" >&2
  exit 2
fi
ref="$1" name="$2"
shift 2
scratch="${TMPDIR:-/tmp}"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then scratch="$1"; shift; fi
[ "${1:-}" != "--" ] || shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="$scratch/first-demo-$name"
rm -rf "$run" && mkdir -p "$run"
# Whatever ends the run (Ctrl-C too): the ~3.5 GB of clone and caches go; the output stays.
cleanup() { rm -rf "$run/clone" "$run/cache" "$run/xdg" "$run/inductor"; }
trap cleanup EXIT
git clone -q "$repo" "$run/clone" && git -C "$run/clone" checkout -q "$ref"
mkdir -p "$run/cache" "$run/xdg" "$run/inductor"
echo "ref $(git -C "$run/clone" rev-parse --short HEAD), load before: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S) UTC"
started=$SECONDS
rc=0
# Every output line stamped with the seconds since the start: the log shows where the time goes.
(cd "$run/clone" && env VLLM_SPEC_EXPORTER_CACHE="$run/cache" XDG_CACHE_HOME="$run/xdg" \
   TORCHINDUCTOR_CACHE_DIR="$run/inductor" bash scripts/run.sh "$@" < /dev/null 2>&1) \
  | while IFS= read -r line; do printf '%4d %s\n' "$((SECONDS - started))" "$line"; done > "$run/output.txt" \
  || rc=$?
took=$((SECONDS - started))
echo "exit $rc, wall $((took / 60)) min $((took % 60)) s, load after: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S) UTC"
grep -E '\[bootstrap\].*installs took|vLLM ready|verdict:|^  [a-z ]+\+[0-9]+ s' "$run/output.txt" || true
cp "$run"/cache/demo-logs/*/verdict.txt "$run/verdict.txt" 2>/dev/null || true
echo "kept: $run/output.txt $run/verdict.txt"
exit "$rc"
