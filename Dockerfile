# swarmgpu: one image for both roles.
#   agent  (GPU nodes):  swarmgpu agent --source nvml --listen 0.0.0.0:9401
#   daemon (managers):   swarmgpu run --config /etc/swarmgpu/config.yml
# Built offline by scripts/build-image.sh: the base comes from a local debootstrap
# and every Python package from the wheels in dist/wheels (no registry, no index).
# Deploying it on Swarm: stacks/swarmgpu.yml and docs/deploy.md.
ARG BASE=local/debian-bookworm-python:latest

# --- build: a venv from wheels only ----------------------------------------------
FROM ${BASE} AS build
COPY dist/wheels/ /wheels/
# --no-index: the build has no network (docker build --network=none) and must never
# want one. pip and setuptools leave the venv afterwards: the image never installs.
RUN python3 -m venv /opt/swarmgpu \
 && /opt/swarmgpu/bin/pip install --no-index --find-links /wheels --no-cache-dir \
      --disable-pip-version-check swarmgpu \
 && /opt/swarmgpu/bin/pip uninstall -y -q pip setuptools \
 && /opt/swarmgpu/bin/python -m compileall -q /opt/swarmgpu/lib \
 && /opt/swarmgpu/bin/swarmgpu --version

# --- runtime ----------------------------------------------------------------------
FROM ${BASE}
# A fixed, unprivileged uid/gid (10001) for both roles. The agent needs nothing more
# (the NVIDIA runtime hands it the device nodes). The daemon needs the docker socket:
# run it with the socket's group (docker run --group-add $(stat -c %g
# /var/run/docker.sock), or ContainerSpec.Groups / `group_add` in a stack), never as root.
RUN echo 'swarmgpu:x:10001:10001:swarmgpu:/var/lib/swarmgpu:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'swarmgpu:x:10001:' >>/etc/group \
 && mkdir -p /var/lib/swarmgpu /etc/swarmgpu \
 && chown 10001:10001 /var/lib/swarmgpu
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
# exec form: swarmgpu is PID 1 and gets SIGTERM itself (the daemon finishes its step).
ENTRYPOINT ["swarmgpu"]
CMD ["--help"]
