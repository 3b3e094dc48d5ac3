"""Deployment: the Kubernetes manifests (Kustomize base, sidecar component, example overlay) and
the compose stacks' Prometheus configs, from the same MixinConfig as the rules and dashboards they
load. Reads rules/ and dashboards/ for the files it packages.
"""
