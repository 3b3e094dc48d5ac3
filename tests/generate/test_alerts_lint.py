"""mixtool-style lint of the generated alerts and rules, plus generation contracts (no tools needed).

Rules enforced (monitoring-mixins conventions, mixtool pkg/mixer/lint.go, kubernetes-mixin):
CamelCase alert names <= 40 chars, group names <= 40 chars, <= 20 rules per group, a known
severity, a static capitalised `summary` ending in a period, a templated `description`, a
`runbook_url` whose anchor exists in docs/runbooks.md, a `dashboard_url`, and
`level:metric:operations` recording-rule names that only read the exporter's schema.
"""

from __future__ import annotations

import re

import pytest
import yaml

from support.paths import ROOT
from vllm_spec_exporter import schema
from vllm_spec_exporter.mixin import config, generate, yaml_text
from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.rules import (
    alert_rules,
    alertmanager,
    fleet_counts,
    fleet_records,
    load,
    measured,
    positions,
    recording_rules,
    rule_files,
    runbooks,
    sources,
)

DEFAULT = MixinConfig()
DIRECT = DEFAULT.with_overrides({"source": "vllm"})
FILES = generate.render_all(DEFAULT)
# (root of the bundle's committed files, its config): with the sidecar, and without (direct/).
BUNDLES = (("", DEFAULT), (generate.DIRECT_ROOT, DIRECT))
ALERT_NAME = re.compile(r"^([A-Z]+[a-z0-9]+)+$")
RECORD_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
PROMQL_KEYWORDS = {
    "sum", "rate", "increase", "absent", "and", "or", "unless", "by", "without", "ignoring", "on",
    "group_left", "group_right", "max", "min", "avg", "count", "time", "changes", "sqrt", "group",
    "clamp_min", "clamp_max", "histogram_quantile",
    "max_over_time", "min_over_time", "avg_over_time", "last_over_time", "resets",
}


def _groups(path: str) -> list[dict]:
    return yaml.safe_load(FILES[path])["groups"]


def _alerts(root: str = "") -> list[dict]:
    return [r for g in _groups(root + rule_files.ALERTS_FILE) for r in g["rules"]]


# Every alert of both bundles, with the bundle it belongs to.
BUNDLE_ALERTS = [pytest.param(root, cfg, alert, id=f"{root or 'sidecar/'}{alert['alert']}")
                 for root, cfg in BUNDLES for alert in _alerts(root)]


def _github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub generates for headings: lower-case, spaces to '-', punctuation dropped."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


# --- contracts ------------------------------------------------------------------------------

def test_contract_alert_names_and_severities() -> None:
    by_name = {a["alert"]: a for a in _alerts()}
    assert by_name["SpecDecodeAcceptanceLow"]["labels"]["severity"] == "warning"
    assert by_name["SpecDecodeAcceptanceCritical"]["labels"]["severity"] == "critical"
    assert set(by_name) == {
        "SpecDecodeAcceptanceLow", "SpecDecodeAcceptanceCritical", "SpecDecodeDraftsStopped",
        "SpecDecodeNotPaying", "SpecDecodeMetricsMissing", "SpecDecodeVllmUnreachable", "SpecDecodeVllmRestarting",
        "SpecDecodeExporterDown", "SpecDecodeExporterAbsent", "SpecDecodeLossyVerification",
    }
    assert by_name["SpecDecodeLossyVerification"]["labels"]["severity"] == "warning"  # a config: never a page
    direct = {a["alert"]: a for a in _alerts(generate.DIRECT_ROOT)}
    assert set(direct) == {
        "SpecDecodeAcceptanceLow", "SpecDecodeAcceptanceCritical", "SpecDecodeDraftsStopped",
        "SpecDecodeNotPaying", "SpecDecodeMetricsMissing", "SpecDecodeVllmUnreachable", "SpecDecodeVllmRestarting",
        "SpecDecodeVllmAbsent",
    }
    assert direct["SpecDecodeVllmAbsent"]["labels"]["severity"] == "warning"


def test_committed_files_equal_a_fresh_generation() -> None:
    # The alerts half of `generate --check` (the CLI also renders the dashboards).
    stale = [rel for rel, text in FILES.items()
             if not (ROOT / rel).exists() or (ROOT / rel).read_text() != text]
    assert not stale, f"regenerate: {stale}"


def test_generation_is_deterministic() -> None:
    assert generate.render_all(MixinConfig()) == FILES


def test_prometheusrule_carries_byte_identical_groups() -> None:
    text = FILES[rule_files.PROMETHEUS_RULE_FILE]
    spec_block = text.split("\nspec:\n", 1)[1]
    dedented = "".join(line[2:] if line.strip() else line for line in spec_block.splitlines(keepends=True))
    rules_text = FILES[rule_files.RULES_FILE].removeprefix(yaml_text.CONFIG_HEADER).removeprefix("groups:\n")
    alerts_text = FILES[rule_files.ALERTS_FILE].removeprefix(yaml_text.CONFIG_HEADER).removeprefix("groups:\n")
    assert dedented == "groups:\n" + rules_text + alerts_text
    doc = yaml.safe_load(text)
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["spec"]["groups"] == _groups(rule_files.RULES_FILE) + _groups(rule_files.ALERTS_FILE)


# --- mixtool-style lint ----------------------------------------------------------------------

@pytest.mark.parametrize("path", [rule_files.RULES_FILE, rule_files.ALERTS_FILE])
def test_group_names_and_sizes(path: str) -> None:
    for group in _groups(path):
        assert len(group["name"]) <= 40, group["name"]
        assert 0 < len(group["rules"]) <= 20, group["name"]


@pytest.mark.parametrize(("root", "cfg", "alert"), BUNDLE_ALERTS)
def test_alert_conventions(root: str, cfg: MixinConfig, alert: dict) -> None:
    name = alert["alert"]
    assert ALERT_NAME.match(name) and len(name) <= 40, name
    assert alert["labels"]["severity"] in {DEFAULT.warning_severity, DEFAULT.critical_severity}
    notes = alert["annotations"]
    assert set(notes) == {"summary", "description", "runbook_url", "dashboard_url"}
    summary = notes["summary"]
    assert "{{" not in summary, "summary must be static (one sentence, no templating)"
    assert summary[0].isupper() and summary.endswith("."), summary
    if alert["expr"].startswith("absent("):
        # absent() has no series to name; the description names the bundle's selector instead.
        assert "{" + (cfg.vllm_selector if cfg.direct else cfg.exporter_selector) + "}" in notes["description"]
    else:
        assert "{{ $labels." in notes["description"], "description must name the affected series"
    assert notes["description"].endswith(".")
    # Each bundle links its own page, at the same path under its root.
    assert notes["runbook_url"] == (DEFAULT.runbook_url_pattern % name.lower()).replace(
        "/blob/main/docs/", f"/blob/main/{root}docs/")
    assert notes["dashboard_url"].startswith(f"/d/{DEFAULT.dashboard_uid_prefix}-overview")
    if not alert["expr"].startswith("absent("):
        assert "var-instance={{ $labels.instance | urlquery }}" in notes["dashboard_url"]


@pytest.mark.parametrize(("root", "cfg", "alert"), BUNDLE_ALERTS)
def test_runbook_anchor_exists_with_all_sections(root: str, cfg: MixinConfig, alert: dict) -> None:
    """The page the alert's runbook_url names exists in the checkout, has the anchor, and the
    section has the four parts."""
    page, anchor = alert["annotations"]["runbook_url"].split("/blob/main/", 1)[1].split("#")
    assert page == root + runbooks.RUNBOOKS_FILE
    runbook = (ROOT / page).read_text()
    assert runbook == FILES[page], f"stale {page}"
    assert anchor in _github_anchors(runbook)
    section = runbook.split(f"\n## {alert['alert']}\n", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### (\w+)$", section, flags=re.M)
    assert headings == ["Meaning", "Impact", "Diagnosis", "Mitigation"]
    for part in section.split("\n### ")[1:]:
        assert len(part.split("\n", 1)[1].strip()) > 80, f"{alert['alert']}: thin section {part[:20]}"


def test_acceptance_descriptions_humanize_the_ratio() -> None:
    by_name = {a["alert"]: a for a in _alerts()}
    for name in (alert_rules.ACCEPTANCE_LOW, alert_rules.ACCEPTANCE_CRITICAL):
        description = by_name[name]["annotations"]["description"]
        assert "{{ $value | humanizePercentage }}" in description
        # The model is named when the series have one (alert_rules.FOR_MODEL_ON), the server always.
        assert "$labels.model_name" in description and "{{ $labels.instance }}" in description


@pytest.mark.parametrize("root", ["", generate.DIRECT_ROOT])
def test_recording_rule_names_and_inputs(root: str) -> None:
    rules = [r for g in _groups(root + rule_files.RULES_FILE) for r in g["rules"]]
    # A name is one rule, or several told apart by their static labels (the acceptance bands).
    variants = [(r["record"], tuple(sorted(r.get("labels", {}).items()))) for r in rules]
    assert len(variants) == len(set(variants))
    recorded = sorted({r["record"] for r in rules})
    # Per-rate records: the source layer's and the per-server/fleet ones built on it.
    dashboard_records = {r["record"] for r in (*recording_rules.recording_rules(DEFAULT),
                                               *sources.source_rules(DEFAULT), *fleet_records.fleet_rules(DEFAULT),
                                               *fleet_counts.scrape_error_rules(DEFAULT),
                                               *load.load_group(DEFAULT)["rules"],
                                               *measured.measured_rules(DEFAULT))}
    windows = list(DEFAULT.windows.evidence)
    for name in recorded:
        assert RECORD_NAME.match(name), name
        if name in (fleet_counts.band_record(DEFAULT), positions.k_record(DEFAULT)):
            assert name.endswith(":count"), name  # a count of servers (positions) now, no window
        elif name in dashboard_records:
            assert name.endswith(DEFAULT.windows.rate_window), name  # every record has the one window
        else:  # evidence records name their alert window
            assert any(name.endswith(f"increase{w}") or name.endswith(f"_{w}") for w in windows), name
        if ":ratio_" in name:
            assert "_per_" in name, f"{name}: ratios join their two metrics with _per_"
    known = schema.exposed_names() | set(recorded) | {"up"}
    everything = _groups(root + rule_files.RULES_FILE) + _groups(root + rule_files.ALERTS_FILE)
    for rule in (r for g in everything for r in g["rules"]):
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # drop label values
        expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)  # matchers, ranges
        expr = re.sub(r"\boffset\s+[0-9a-z]+", "", expr)  # offset durations
        expr = re.sub(r"\b(by|without|ignoring|on|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
        names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)) - PROMQL_KEYWORDS
        assert names <= known, f"{rule.get('record') or rule.get('alert')}: unknown {names - known}"


def test_ratios_divide_by_guarded_denominators() -> None:
    guarded = {r["record"] for g in _groups(rule_files.RULES_FILE) for r in g["rules"] if r["expr"].endswith("> 0")}
    for rule in (r for g in _groups(rule_files.RULES_FILE) for r in g["rules"]):
        if ":confidence_" in rule["record"]:
            # Wilson bounds divide by the drafts record plus a positive constant only, the record
            # itself filtered with `> 0`.
            divisors = set(re.findall(r"/\n\(([a-z_:0-9]+)\{[^}]*\} \+ [0-9.]+\)", rule["expr"]))
            assert rule["expr"].count("/") == len(re.findall(r"/\n\(", rule["expr"])), rule["record"]
            assert divisors and divisors <= guarded, (rule["record"], divisors - guarded)
            continue
        if "/" in rule["expr"]:
            # Every division, wherever it sits (the band counts divide inside a comparison).
            assert all(d.endswith(" > 0") for d in _denominators(rule["expr"])), (rule["record"],
                                                                                   _denominators(rule["expr"]))
            # Never average ratios: an average may only hold a raw gauge (the batch's fallback).
            averaged = _arguments(rule["expr"], r"\bavg(?:_over_time)?\s*(?:(?:by|without)\s*\([^)]*\)\s*)?")
            assert all("/" not in a for a in averaged), ("never average ratios", rule["record"], averaged)


def _parenthesised(expr: str, start: int) -> str | None:
    """What the parenthesis at `start` encloses, up to its balancing one (None if it never closes)."""
    depth = 0
    for end in range(start, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[end], 0)
        if depth == 0:
            return expr[start + 1:end]
    return None


def _arguments(expr: str, function: str) -> list[str]:
    """The parenthesised argument of each call of `function` (a regex up to the parenthesis)."""
    found = (_parenthesised(expr, match.end() - 1) for match in re.finditer(function + r"\(", expr))
    return [inside for inside in found if inside is not None]


def _denominators(expr: str) -> list[str]:
    """The parenthesised operand after each `/` (after an optional `ignoring (…) group_left ()` or
    `on (…) group_right ()`)."""
    found = []
    for match in re.finditer(r"/\s*(?:(?:ignoring|on) \([^)]*\) group_(?:left|right) \(\)\s*)?", expr):
        start = match.end()
        assert expr[start] == "(", f"an unparenthesised denominator: {expr[start:start + 60]!r}"
        inside = _parenthesised(expr, start)
        if inside is not None:
            found.append(inside)
    return found


# --- the config drives the output ------------------------------------------------------------

def test_overrides_change_thresholds_labels_and_links() -> None:
    cfg = DEFAULT.with_overrides({
        "acceptance_warning_threshold": 0.6, "acceptance_critical_threshold": 0.45,
        "critical_severity": "page", "extra_alert_labels": {"team": "llm"},
        "rate_window": "5m", "exporter_selector": 'namespace="llm",container="spec"',
        "runbook_url_pattern": "https://runbooks.example/%s", "grafana_url": "https://grafana.example/",
        "fleet_labels": ["cluster", "job"],
    })
    files = {**rule_files.render(cfg), **alertmanager.render(cfg), **runbooks.render(cfg)}
    by_name = {a["alert"]: a for g in yaml.safe_load(files[rule_files.ALERTS_FILE])["groups"] for a in g["rules"]}
    low, critical = by_name[alert_rules.ACCEPTANCE_LOW], by_name[alert_rules.ACCEPTANCE_CRITICAL]
    assert 'confidence_upper_5m{namespace="llm",container="spec"} < 0.6\n' in low["expr"]
    assert "< 0.45\n" in critical["expr"]
    assert '{namespace="llm",container="spec"}' in low["expr"]  # the presence check uses the selector
    assert critical["labels"] == {"severity": "page", "team": "llm"}
    assert low["annotations"]["summary"] == "Speculative decoding acceptance is below 60%."
    assert low["annotations"]["runbook_url"] == "https://runbooks.example/specdecodeacceptancelow"
    assert low["annotations"]["dashboard_url"].startswith("https://grafana.example/d/vllm-spec-overview?var-job=")
    assert '{namespace="llm",container="spec"}' in files[rule_files.RULES_FILE]
    assert "cluster_job_model:vllm_spec_decode_accepted_per_draft_tokens:ratio_rate5m" in files[rule_files.RULES_FILE]
    # The fleet sums keep the selector's labels too: read back with it, they are still found.
    assert "sum by (cluster, job, namespace, container, model_name)" in files[rule_files.RULES_FILE]
    am = yaml.safe_load(files[alertmanager.ALERTMANAGER_FILE])
    assert am["route"]["routes"][0] == {"matchers": ['severity="page"'], "receiver": alertmanager.PAGER_RECEIVER}
    assert "`0.6`" not in files[rule_files.README_FILE]  # README documents defaults, not overrides
    assert "60%" in files[runbooks.RUNBOOKS_FILE]


def test_alertmanager_routes_and_inhibitions() -> None:
    am = yaml.safe_load(FILES[alertmanager.ALERTMANAGER_FILE])
    routes = {tuple(r["matchers"]): r["receiver"] for r in am["route"]["routes"]}
    assert routes == {('severity="critical"',): "spec-decode-pager", ('severity="warning"',): "spec-decode-chat"}
    assert am["route"]["receiver"] == "spec-decode-chat"  # unmatched alerts never page
    assert "model_name" in am["route"]["group_by"]
    target_down = am["inhibit_rules"][0]
    assert "SpecDecodeVllmUnreachable" in target_down["source_matchers"][0]
    for name in alert_rules.TRAFFIC_ALERTS:
        assert name in target_down["target_matchers"][0]
    assert target_down["equal"] == ["instance", "job"]
    receivers = {r["name"]: r for r in am["receivers"]}
    assert "routing_key_file" in receivers["spec-decode-pager"]["pagerduty_configs"][0]
    assert "api_url_file" in receivers["spec-decode-chat"]["slack_configs"][0]
    am_text = FILES[alertmanager.ALERTMANAGER_FILE]
    assert "routing_key:" not in am_text and "api_url:" not in am_text


def test_readme_lists_every_knob_with_its_comment() -> None:
    readme = FILES[rule_files.README_FILE]
    knobs = config.knobs()
    assert {name for _, name, _, _ in knobs} == set(MixinConfig.__dataclass_fields__)
    for _section, name, _default, comment in knobs:
        assert comment, f"config knob {name} has no comment in mixin/config.py"
        assert f"`{name}`" in readme
    assert "| Acceptance thresholds | `acceptance_warning_threshold` | `0.5` |" in readme


@pytest.mark.parametrize(("root", "cfg"), BUNDLES, ids=("sidecar", "direct"))
def test_every_alert_has_a_runbook(root: str, cfg: MixinConfig) -> None:
    """One section per alert of the bundle in its runbook page, each with the four parts, and no
    section for an alert the bundle does not have."""
    text = runbooks.markdown(cfg)
    sections = dict(re.findall(r"\n## (\S+)\n(.*?)(?=\n## |\Z)", text, re.S))
    assert set(sections) == {a["alert"] for a in _alerts(root)}
    for name, body in sections.items():
        parts = re.findall(r"^### (.+)$", body, re.M)
        assert parts == ["Meaning", "Impact", "Diagnosis", "Mitigation"], name


def test_templates_fail_loudly_on_a_missing_value() -> None:
    from vllm_spec_exporter.mixin import templates

    assert "target_down_for" in templates.placeholders("runbooks.md")
    values = runbooks.values(DEFAULT)
    del values["target_down_for"]
    with pytest.raises(KeyError, match="target_down_for"):
        templates.fill("runbooks.md", values)


def test_invalid_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="duration"):
        DEFAULT.with_overrides({"acceptance_low_for": "two minutes"})
    with pytest.raises(ValueError, match="critical_threshold"):
        DEFAULT.with_overrides({"acceptance_critical_threshold": 0.6})
    with pytest.raises(ValueError, match="acceptance_fast_short_window must be longer than 0s"):
        DEFAULT.with_overrides({"acceptance_fast_short_window": "0s"})
    with pytest.raises(ValueError, match="rate_window must be longer than 0s"):
        DEFAULT.with_overrides({"rate_window": "0m"})
    with pytest.raises(ValueError, match="counter_resets_threshold"):
        DEFAULT.with_overrides({"counter_resets_threshold": 0})
    with pytest.raises(ValueError, match="acceptance_overdispersion"):
        DEFAULT.with_overrides({"acceptance_overdispersion": 0.5})
    # The dashboards tell All from selected servers by `job!~"$instance"` (promql.Selectors.servers).
    with pytest.raises(ValueError, match="instance_label must name a label other than job"):
        DEFAULT.with_overrides({"instance_label": "job"})


def test_a_new_knob_is_validated_by_its_kind_alone() -> None:
    """A knob states its kind and constraints where it is declared; validate reads them, so a new
    duration or window knob needs no edit of validate (nor a name that ends the right way)."""
    from dataclasses import dataclass, fields

    from vllm_spec_exporter.mixin.knobs import Between, Kind, knob

    @dataclass(frozen=True)
    class Extended(MixinConfig):
        quiet_hold: str = knob("test", "5m", "A hold.", Kind.DURATION)
        lookback: str = knob("test", "", "A window, derived when empty.", Kind.WINDOW, derived=True)
        share: float = knob("test", 0.5, "A share.", Kind.RATIO, Between(0, 1))

    base = Extended()
    base.validate()
    assert base.with_overrides({"quiet_hold": "0s", "lookback": "3m"}).lookback == "3m"
    with pytest.raises(ValueError, match="quiet_hold must be a Prometheus duration"):
        base.with_overrides({"quiet_hold": "five minutes"})
    with pytest.raises(ValueError, match=r"lookback must be longer than 0s \(a range selector\)"):
        base.with_overrides({"lookback": "0s"})
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\], got 1.5"):
        base.with_overrides({"share": 1.5})
    kinds = {f.name: f.metadata["kind"] for f in fields(MixinConfig)}
    assert kinds["rate_window"] == "window" and kinds["acceptance_low_for"] == "duration"
    assert all(kinds.values()), [name for name, kind in kinds.items() if not kind]


# --- links into the dashboards ---------------------------------------------------------------

def _overview_dashboard(root: str = "") -> dict:
    import json

    for path in sorted((ROOT / root / "dashboards").glob("*.json")):
        model = json.loads(path.read_text())
        if model.get("uid") == f"{DEFAULT.dashboard_uid_prefix}-overview":
            return model
    pytest.fail("no dashboard with the uid the alerts link to")


def _panel_titles(panels: list[dict]) -> set[str]:
    titles = set()
    for panel in panels:
        titles.add(panel.get("title", ""))
        titles |= _panel_titles(panel.get("panels", []))
    return titles


def test_dashboard_links_select_existing_variables() -> None:
    variables = {v["name"] for v in _overview_dashboard()["templating"]["list"]}
    for alert in _alerts():
        for var in re.findall(r"var-([a-z_]+)=", alert["annotations"]["dashboard_url"]):
            assert var in variables, f"{alert['alert']} links to unknown dashboard variable {var}"


@pytest.mark.parametrize(("root", "cfg"), BUNDLES, ids=("sidecar", "direct"))
def test_panels_named_in_runbooks_exist(root: str, cfg: MixinConfig) -> None:
    """Each bundle's runbook page names only panels of that bundle's overview."""
    titles = _panel_titles(_overview_dashboard(root)["panels"])
    named = set(re.findall(r"\*\*([^*]+)\*\* panel", FILES[root + runbooks.RUNBOOKS_FILE]))
    assert len(named) >= (6 if cfg.direct else 8)  # the direct page has no sidecar-only panels
    assert named <= titles, f"runbooks name panels the dashboard does not have: {named - titles}"
