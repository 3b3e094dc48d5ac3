# Stand-in for python:3.11-slim-bookworm, for the container tests only (tests/stack/test_containers.py):
# no container registry is reachable on the test machines, so the official image cannot be pulled.
#
# MINBASE is Debian 12 minbase made with debootstrap (tests/support/docker.py) with python3,
# python3-venv, python-is-python3, passwd and Debian's pip/setuptools/wheel wheels. What this adds
# makes it behave like the official image where the exporter's Dockerfile relies on it:
# `python` and `python -m venv` work, `python -m pip` is there (pip, setuptools, wheel installed
# with a RECORD, so `pip uninstall` works), and there is no PEP 668 "externally managed" marker.
# Differences that remain: CPython is Debian's /usr/bin/python3.11 (3.11.2), not a /usr/local build
# of the latest 3.11.x, and the image is larger (Debian's full stdlib packages).
ARG MINBASE
FROM ${MINBASE}
ENV LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
# Offline: pip installs itself, setuptools and wheel from Debian's bundled wheels into /usr/local.
RUN rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \
    && set -- /usr/share/python-wheels/pip-*.whl \
    && python3 "$1/pip" install --no-index --no-cache-dir \
       --disable-pip-version-check --root-user-action=ignore \
       --find-links /usr/share/python-wheels pip setuptools wheel \
    && python -m pip --version \
    && python -m venv /tmp/venv-check && rm -rf /tmp/venv-check
CMD ["python3"]
