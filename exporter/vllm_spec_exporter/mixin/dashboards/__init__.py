"""Dashboards: both Grafana dashboards, built with grafana-foundation-sdk from one MixinConfig.

`promql` holds every query (functions of the config, reading the records of rules/); `crowd` the
rankings of the crowded per-server panels; `panels`, `presets` and `layout` build and place
panels; `shared_panels` are those both dashboards show; `frame` is what surrounds them; `overview`
and `fleet` only arrange panels; `dashboard_files` writes the JSON, its ConfigMap, the linter's
exclusions and dashboards/README.md. Reads rules/ for record names, never deploy/.
"""
