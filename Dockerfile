# vllm-spec-exporter: the Prometheus sidecar that shows whether vLLM speculative decoding pays off.
#
#   docker build -t vllm-spec-exporter:0.1.0 .
#   docker run --rm -p 127.0.0.1:9850:9850 --read-only vllm-spec-exporter:0.1.0 \
#       serve --listen 0.0.0.0:9850 --target http://my-vllm:8000
#
# Base: python:3.11-slim-bookworm, pinned by tag (Debian 12 + CPython 3.11, what the project is
# developed and tested on). Pin the digest too where you build it:
#   docker buildx imagetools inspect python:3.11-slim-bookworm   # -> FROM python:3.11-slim-bookworm@sha256:...
# (This repository's build machine has no registry access to look the digest up.)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: install the package and its dependencies into a self-contained venv ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Only what the wheel needs (see .dockerignore): no tests, fixtures, venvs or caches.
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# Every dependency ships wheels (bcrypt and PyYAML included), so no compiler is ever installed.
# pip and setuptools are then removed from the venv: the runtime image needs no installer.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && /opt/venv/bin/vllm-spec-exporter --version

# ---- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="vllm-spec-exporter" \
      org.opencontainers.image.description="Prometheus sidecar: is vLLM speculative decoding paying off?" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed, numeric non-root uid/gid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
# The base image's own pip/setuptools/wheel go too: nothing installs anything at run time.
RUN groupadd --system --gid 65532 exporter \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin exporter \
    && python -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel
COPY --from=build /opt/venv /opt/venv
# Bytecode was compiled at install time; never write .pyc at run time (read-only root fs).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9850
# Liveness of the poll loop (/healthz is 200 while polls progress, even with vLLM down). python,
# not curl: the slim image has no curl. Assumes the default port and plain HTTP; with
# --web-config-file (TLS or basic auth) override this check.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9850/healthz', timeout=3)"]
ENTRYPOINT ["vllm-spec-exporter"]
# 0.0.0.0 inside the container (127.0.0.1 would be unreachable from outside it); publish the port
# on the host's 127.0.0.1 or a private network.
CMD ["serve", "--listen", "0.0.0.0:9850", "--target", "http://127.0.0.1:8000"]
