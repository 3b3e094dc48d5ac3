# Stand-ins for prom/prometheus and prom/alertmanager, for the container tests only
# (tests/stack/test_containers.py): no container registry is reachable on the test machines.
#
# Debian testing's packages (Prometheus 3.x, Alertmanager 0.3x): the very debs scripts/bootstrap.sh
# downloads into the cache for the other tests, copied into the build context by
# tests/support/docker.py and unpacked with dpkg-deb (their Go binaries link only against libc and
# need glibc >= 2.34, which Debian 12's 2.36 provides; installing them with apt would drag in
# testing's libc). On the Debian minbase,
# laid out like the official images where compose relies on it: the binary is the entrypoint, it
# runs as nobody, the data folder (/prometheus, /alertmanager) belongs to nobody so a fresh named
# volume does too, and wget is there for the healthchecks (the official images are busybox-based).
# What remains different: the patch release (the compose files pin the current LTS, v3.13.x; Debian
# packages 3.5.x) — the same major versions.
ARG BASE
FROM ${BASE} AS packages
COPY debs/ /tmp/debs/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && for deb in /tmp/debs/*.deb; do dpkg-deb -x "$deb" /; done \
    && rm -rf /tmp/debs \
    && /usr/bin/prometheus --version && /usr/bin/prometheus-alertmanager --version \
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
