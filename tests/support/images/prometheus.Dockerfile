# Stand-ins for prom/prometheus and prom/alertmanager, for the container tests only
# (tests/test_containers.py): no container registry is reachable on the test machines.
#
# Debian 12's packages (Prometheus 2.42, Alertmanager 0.25) on the Debian minbase
# (tests/support/docker.py), laid out like the official images where compose relies on it: the
# binary is the entrypoint, it runs as nobody, the data folder (/prometheus, /alertmanager) belongs
# to nobody so a fresh named volume does too, and wget is there for the healthchecks (the official
# images are busybox-based). Differences that remain: older versions than the compose files pin
# (v3.5.0 and v0.28.1); the rules need >= 2.42 and the Alertmanager config passes 0.25.
ARG BASE
FROM ${BASE} AS packages
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       prometheus prometheus-alertmanager wget \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && install -d -o nobody -g nogroup /prometheus /alertmanager

FROM packages AS prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

FROM packages AS alertmanager
USER nobody
WORKDIR /alertmanager
EXPOSE 9093
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
