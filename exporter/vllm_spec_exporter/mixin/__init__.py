"""The generators: every monitoring artifact rendered from one MixinConfig (`generate`).

Installed with the `[generate]` extra (the dashboards need grafana-foundation-sdk); the sidecar
never imports this package. By concern: `config` (the config object) and `links` (URLs, uids,
percentages); alert rules, rule files, Alertmanager and runbooks; `promql` (queries), `panels`,
`presets`, `layout`, `shared_panels`, `frame`, one module per dashboard and `dashboard_files`;
`kubernetes`; `docs`; `templates` (the Markdown templates of the READMEs). `generate` lists the
render functions.
"""
