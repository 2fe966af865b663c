"""What `docker stack config` reads of stack files, and what render reads of them, in
one shape to compare: each service's image, environment, labels, and the deploy fields
render places by.

``docker stack config -c A [-c B]`` prints the file docker's loader makes of them (merged,
interpolated, each list form made its mapping) and needs no daemon: it is the oracle of
tests/test_render_as_docker_config.py. Debian 12's docker 20.10 has no ``stack config``,
so only the CLIs that have it are used.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from support.docker_clis import docker_clis
from swarmgpu.manager.commands.swarmspec import (
    constraints_of,
    env_list,
    host_ports_of,
    max_replicas_of,
    mode_of,
    preferences_of,
    read_labels,
    replicas_of,
    reservations_of,
)


def config_clis() -> list[str]:
    """The docker CLIs found (``docker_clis``) that have ``docker stack config``."""
    out = []
    for path, _ in docker_clis():
        res = subprocess.run([path, "stack", "config", "--help"], capture_output=True,
                             text=True, check=False, timeout=30)
        if res.returncode == 0 and "--compose-file" in res.stdout:  # 20.10: stack's help
            out.append(path)
    return out


def docker_config(cli: str, files: Sequence[tuple[str, str]], environ: Mapping[str, str],
                  folder: Path) -> tuple[dict[str, Any] | None, str]:
    """The stack ``cli`` makes of ``files`` (name, text), written into ``folder`` and run
    there with only ``environ`` (and PATH) set, no daemon reachable; or None and its
    error."""
    args = [cli, "stack", "config"]
    for name, text in files:
        (folder / name).write_text(text)
        args += ["-c", str(folder / name)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DOCKER_CONFIG": str(folder),
           "DOCKER_HOST": "unix:///nonexistent/docker.sock", **environ}
    res = subprocess.run(args, capture_output=True, text=True, env=env, cwd=folder,
                         check=False, timeout=60)
    if res.returncode != 0:
        return None, res.stderr.strip()
    got = yaml.safe_load(res.stdout)
    assert isinstance(got, dict), res.stdout
    return got, ""


def _render_env(svc: Mapping[str, Any], name: str, environ: Mapping[str, str]
                ) -> dict[str, str | None]:
    """``environment`` as render reads it, a value it leaves empty or bare taken from
    ``environ`` as docker takes it at deploy (loader.go updateEnvironment): render writes
    such a name back as it is, for docker to fill."""
    out: dict[str, str | None] = {}
    for line in env_list(svc, name):
        k, eq, v = line.partition("=")
        out[k] = environ[k] if not v and k in environ else v if eq else None
    return out


def reads(stack: Mapping[str, Any], environ: Mapping[str, str], *, docker: bool
          ) -> dict[str, dict[str, Any]]:
    """Per service what Swarm is given of it, read by render's own readers (swarmspec)
    from ``stack``: docker's output (``docker``) or render's reading of the files."""
    out = {}
    for name, svc in stack["services"].items():
        deploy = svc.get("deploy") or {}
        placement = deploy.get("placement") or {}
        env = ({k: None if v is None else str(v) for k, v in
                (svc.get("environment") or {}).items()} if docker
               else _render_env(svc, name, environ))
        out[str(name)] = {
            "image": svc.get("image"), "environment": env,
            "labels": read_labels(svc, name), "deploy.labels": read_labels(deploy, name),
            "replicas": replicas_of(deploy, name), "mode": mode_of(deploy, name),
            "constraints": constraints_of(placement, name),
            "preferences": preferences_of(placement, name),
            "max_replicas_per_node": max_replicas_of(placement, name),
            "reservations": reservations_of(deploy, name), "host ports": host_ports_of(svc),
        }
    return out
