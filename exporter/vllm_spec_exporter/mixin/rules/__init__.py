"""Rules: what Prometheus (or vmalert) evaluates, and what tells an on-call engineer about it.

`sources` names every raw series; `quantities` defines each spec-decode quantity once in PromQL;
`recording_rules` (with `fleet_records`, `fleet_counts`, `positions`, and `load`: the running batch
and the speed-up estimated at it) records them; `alert_rules` holds every alert's expression;
`rule_files` writes alerts/*.yaml, the PrometheusRule and alerts/README.md; `alertmanager` the
routing; `runbooks` docs/runbooks.md. Reads only the generators' top level (config, windows,
links, templates), never dashboards/ or deploy/.
"""
