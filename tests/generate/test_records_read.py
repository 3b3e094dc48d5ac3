"""Every recorded series is read: by an alert, a dashboard, a runbook, or the documented API.

A record nobody reads costs a series per (server, model[, position]) at every evaluation for
nothing: delete records that nothing reads. For both sources (the sidecar's counters
and vLLM's own) and for the scrape intervals whose windows differ (the alert windows derive from
`scrape_interval`), this builds the rule files, both dashboards and the runbooks, and follows the
reads: a record is live when an alert, a dashboard query or a runbook query names it, when it is
in recording_rules.PUBLIC_RECORDS (the documented API for users' own alerts and panels), or when a
live record's expression reads it. Every other record fails the test. And the other way: every
record those readers name is recorded (a runbook step reading a removed record answers nothing).
"""

from __future__ import annotations

import json
import re

import pytest

from vllm_spec_exporter.mixin.config import MixinConfig
from vllm_spec_exporter.mixin.dashboards import fleet, overview
from vllm_spec_exporter.mixin.rules import alert_rules, recording_rules, runbooks

NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# A record's name, `level:metric:operations` (two colons; no scraped series has two).
RECORD_NAME = re.compile(r"(?<![A-Za-z0-9_:])[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_]+:[A-Za-z0-9_]+(?![A-Za-z0-9_:])")
CONFIGS = [(source, interval) for source in ("exporter", "vllm") for interval in ("15s", "30s", "60s")]


def names_in(text: str) -> set[str]:
    return set(NAME.findall(text))


def readers(cfg: MixinConfig) -> dict[str, str]:
    """What reads records, as text: the alert rules, both dashboards, the runbooks."""
    return {
        "alerts": json.dumps(alert_rules.alert_groups(cfg)),
        "overview dashboard": json.dumps(overview.build(cfg)),
        "fleet dashboard": json.dumps(fleet.build(cfg)),
        "runbooks": runbooks.markdown(cfg),
    }


def reached(rules: dict[str, str], texts: list[str], public: tuple[str, ...]) -> set[str]:
    """The records `texts` or `public` name, and every record their expressions read, transitively."""
    live = set(public)
    for text in texts:
        live |= names_in(text) & rules.keys()
    todo = list(live)
    while todo:
        for name in names_in(rules[todo.pop()]) & rules.keys():
            if name not in live:
                live.add(name)
                todo.append(name)
    return live


def live_records(cfg: MixinConfig) -> tuple[dict[str, str], set[str]]:
    """{record: expression} of every recording rule, and the records something reads."""
    groups = recording_rules.recording_groups(cfg)
    rules: dict[str, str] = {}
    variants: set[tuple[str, tuple]] = set()
    for rule in (r for g in groups for r in g["rules"]):
        # One name may be several rules only told apart by their static labels (the bands).
        variant = (rule["record"], tuple(sorted(rule.get("labels", {}).items())))
        assert variant not in variants, f"a record twice: {variant}"
        variants.add(variant)
        rules[rule["record"]] = "\n".join(filter(None, (rules.get(rule["record"]), rule["expr"])))
    return rules, reached(rules, list(readers(cfg).values()), recording_rules.public_records(cfg))


@pytest.mark.parametrize(("source", "scrape_interval"), CONFIGS)
def test_every_record_is_read(source: str, scrape_interval: str) -> None:
    cfg = MixinConfig().with_overrides({"source": source, "scrape_interval": scrape_interval})
    rules, live = live_records(cfg)
    unread = sorted(rules.keys() - live)
    assert unread == [], f"records nothing reads (source={source}, scrape_interval={scrape_interval}): {unread}"


@pytest.mark.parametrize("source", ["exporter", "vllm"])
def test_the_public_records_exist_and_are_documented(source: str) -> None:
    """The documented API is recorded in both bundles, and the README's records table marks it."""
    from vllm_spec_exporter.mixin.rules import rule_files
    cfg = MixinConfig().with_overrides({"source": source})
    rules, _ = live_records(cfg)
    public = recording_rules.public_records(cfg)
    assert public and set(public) <= rules.keys()
    readme = rule_files.render(cfg)[rule_files.README_FILE]
    for name in public:
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` |"))
        assert "API" in row, row


def missing_records(rules: dict[str, str], texts: dict[str, str]) -> dict[str, list[str]]:
    """{reader: the record names it reads that no rule records}."""
    found = {reader: sorted(set(RECORD_NAME.findall(text)) - rules.keys()) for reader, text in texts.items()}
    return {reader: names for reader, names in found.items() if names}


@pytest.mark.parametrize(("source", "scrape_interval"), CONFIGS)
def test_every_record_read_is_recorded(source: str, scrape_interval: str) -> None:
    cfg = MixinConfig().with_overrides({"source": source, "scrape_interval": scrape_interval})
    rules, _ = live_records(cfg)
    texts = readers(cfg)
    assert all(RECORD_NAME.fullmatch(name) for name in rules)  # the pattern knows every record's name
    assert missing_records(rules, texts) == {}, f"source={source}, scrape_interval={scrape_interval}"


@pytest.mark.parametrize(("window", "expected_readers"), [
    ("fast_long", {"overview dashboard", "runbooks"}),  # the overview's band, the runbook's evidence step
    ("fast_short", {"alerts", "runbooks"}),  # the acceptance alerts' recovery, quoted in their runbooks
])
def test_a_read_record_not_recorded_fails(window: str, expected_readers: set[str]) -> None:
    """The check can fail: without a read lower bound, each of its readers is found."""
    cfg = MixinConfig()
    rules, _ = live_records(cfg)
    lower = recording_rules.evidence_names(getattr(cfg.windows, window)).lower
    del rules[lower]
    missing = missing_records(rules, readers(cfg))
    assert set(missing) == expected_readers and all(m == [lower] for m in missing.values())


def test_an_unread_record_fails() -> None:
    """The check can fail: a record no reader names is found, and so is one only it reads."""
    cfg = MixinConfig()
    rules, live = live_records(cfg)
    assert live <= rules.keys()
    orphan = {"record": "instance_model:orphan:rate1m", "expr": "sum(instance_model:orphan_input:rate1m)"}
    feeder = {"record": "instance_model:orphan_input:rate1m", "expr": "vector(1)"}
    rules |= {r["record"]: r["expr"] for r in (orphan, feeder)}
    unread = rules.keys() - reached(rules, list(readers(cfg).values()), recording_rules.public_records(cfg))
    assert unread == {feeder["record"], orphan["record"]}
