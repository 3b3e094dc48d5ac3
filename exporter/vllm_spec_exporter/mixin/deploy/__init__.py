"""Deployment: the forms each monitoring stack reads, from the same MixinConfig as the rules and
dashboards they load. `kubernetes` (Kustomize base, sidecar component, example overlay), `compose`
(the compose stacks' Prometheus configs), `gmp` (Google Managed Prometheus objects), `jsonnet` with
`jsonnet_config` and `jsonnet_template` (the kube-prometheus mixin, templated over `_config`), and
`guide` (docs/deploy.md, which form for which stack). Reads rules/ and dashboards/ for the files it
packages.
"""
