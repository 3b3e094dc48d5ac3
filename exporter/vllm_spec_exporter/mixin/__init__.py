"""The generators: every monitoring artifact rendered from one MixinConfig (`generate`).

Installed with the `[generate]` extra (the dashboards need grafana-foundation-sdk); the sidecar
never imports this package. By artifact, each package reading only the ones above it:

- here: `config` (the one MixinConfig, every knob), `windows` (every window and hold, from the
  scrape interval), `links` (uids, URLs, percentages), `templates` (fills the Markdown of
  templates/), `yaml_text`, `docs` (docs/metrics.md), `generate` (the command: a tuple of render
  functions, `--check`);
- `rules/`: the source layer, the quantities, recording and alerting rules, their files,
  Alertmanager's routing and the runbooks;
- `dashboards/`: the queries, panels and layout of both Grafana dashboards and their files;
- `deploy/`: the Kubernetes manifests and the compose stacks' Prometheus configs.
"""
