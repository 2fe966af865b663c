# swarmgpu: one image for both roles.
#   agent  (GPU nodes):  swarmgpu agent --source nvml --listen 0.0.0.0:9401
#   daemon (managers):   swarmgpu run --config /etc/swarmgpu/config.yml
# Deploying it on Swarm: stacks/swarmgpu.yml and docs/deploy.md.
#
# Two ways to build it (docs/deploy.md):
#   docker build -t swarmgpu .
#       anywhere with registry and package-index access: the public Python base, and
#       the wheels (swarmgpu's and its dependencies') built in the build stage.
#   scripts/build-image.sh
#       offline, what CI does: --build-arg BASE=local/debian-bookworm-python:latest (a
#       local debootstrap base) --build-arg WHEELS=dist/wheels (wheels made on the host)
#       and docker build --network=none: no registry, no index.
ARG BASE=python:3.11-slim

# --- build: a venv from wheels ----------------------------------------------------
FROM ${BASE} AS build
# Empty: build the wheels here, from the source in the context (needs the index).
# A folder of the build context (dist/wheels): install from it with --no-index only.
ARG WHEELS=
# The context is only what the image needs (.dockerignore): pyproject.toml, README.md,
# LICENSE, swarmgpu/ and, when there, dist/wheels/.
COPY . /src/
# pip and setuptools leave the venv afterwards: the image never installs.
RUN set -eu; \
    python3 -m venv /opt/swarmgpu; \
    pip="/opt/swarmgpu/bin/pip --disable-pip-version-check --no-cache-dir"; \
    if [ -n "$WHEELS" ]; then \
      test -d "/src/$WHEELS" || { echo "WHEELS=$WHEELS: no such folder in the build context" >&2; exit 1; }; \
      wheels="/src/$WHEELS"; \
    else \
      wheels=/wheels; \
      $pip wheel --wheel-dir "$wheels" /src; \
    fi; \
    $pip install --no-index --find-links "$wheels" swarmgpu; \
    $pip uninstall -y -q pip setuptools; \
    /opt/swarmgpu/bin/python -m compileall -q /opt/swarmgpu/lib; \
    /opt/swarmgpu/bin/swarmgpu --version

# --- runtime ----------------------------------------------------------------------
FROM ${BASE}
# OCI annotations (what `docker image inspect`, registries and scanners read). VERSION
# and the rest come from pyproject.toml (scripts/build-image.sh passes them; the
# defaults are the same values, tests/test_packaging.py keeps them in step); REVISION
# is the commit built, when the build knows it.
ARG VERSION=0.1.0
ARG REVISION=
ARG SOURCE=https://github.com/swarmgpu/swarmgpu
LABEL org.opencontainers.image.title="swarmgpu" \
      org.opencontainers.image.description="GPU-aware placement for Docker Swarm: GPU facts as node labels, topology-aware placement, rebalancing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.url="${SOURCE}" \
      org.opencontainers.image.documentation="${SOURCE}#readme"
# A fixed, unprivileged uid/gid (10001) by default. The agent needs nothing more for
# plain HTTP (the NVIDIA runtime hands it the device nodes); reading its node's Swarm
# key (0600 root) for HTTPS needs root in the container, as stacks/swarmgpu.yml runs it,
# with no capabilities. The daemon needs the engine: in the stack only through the
# docker-proxy service; with `docker run`, the socket's group is enough
# (`--group-add $(stat -c %g /var/run/docker.sock)`; a stack file cannot say that:
# docker stack deploy rejects `group_add`).
# The state dir is 10001:0 0770: the owner as above, and root (gid 0) of the stack's
# daemon, which has no CAP_DAC_OVERRIDE to write a directory it does not own. A named
# volume mounted there takes this owner and mode.
RUN echo 'swarmgpu:x:10001:10001:swarmgpu:/var/lib/swarmgpu:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'swarmgpu:x:10001:' >>/etc/group \
 && mkdir -p /var/lib/swarmgpu /etc/swarmgpu \
 && chown 10001:0 /var/lib/swarmgpu \
 && chmod 0770 /var/lib/swarmgpu
COPY --from=build /opt/swarmgpu /opt/swarmgpu
ENV PATH=/opt/swarmgpu/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SWARMGPU_LOG_FORMAT=json \
    SWARMGPU_STATE_DIR=/var/lib/swarmgpu
USER 10001:10001
WORKDIR /var/lib/swarmgpu
# 9401: agent (/facts, /metrics, /healthz); 9402: daemon (/metrics, /healthz, GPU map).
EXPOSE 9401 9402
# /healthz of whichever role runs here (found from its command line), with the image's
# own Python: no curl. start-period: the agent answers 503 until it has read its facts.
HEALTHCHECK --interval=10s --timeout=10s --start-period=60s --retries=3 \
    CMD ["/opt/swarmgpu/bin/python", "-m", "swarmgpu.core.healthcheck"]
# exec form: swarmgpu is PID 1 and gets SIGTERM itself (the daemon finishes its step).
ENTRYPOINT ["swarmgpu"]
CMD ["--help"]
