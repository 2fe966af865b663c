"""What `docker stack config` reads of stack files, and what render reads of them, in
one shape to compare: each service's image, environment, labels, and the deploy fields
render places by.

``docker stack config -c A [-c B]`` prints the file docker's loader makes of them (merged,
interpolated, each list form made its mapping) and needs no daemon: it is the oracle of
tests/test_render_as_docker_config.py. Debian 12's docker 20.10 (what CI installs) has no
``stack config``, so the oracle is recorded, as the NVML fake is built from captures: per
case its files, environment and ``.env``, and docker's reading or its error, in
``RECORDING`` (provenance in tests/fixtures/SOURCES.md). The test reads the recording; where
a CLI of 28 or later with ``stack config`` is found it also runs every case live and
compares. ``RERECORD`` records again (the case's folder written ``<folder>``, so a
recording holds no machine's path).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.docker_clis import docker_clis
from support.paths import FIXTURES
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

RECORDING = FIXTURES / "docker-stack-config" / "cases.json"
RERECORD = ".venv/bin/python -m pytest tests/test_render_as_docker_config.py --record-docker-config"
# The CLI the recording is of reads plain values as docker 28 and later do (go-yaml v3);
# older ones read some apart (docs/deploy.md), so they are not compared with it.
RECORDED_MAJOR = 28
FOLDER = "<folder>"


def config_clis() -> list[tuple[str, str]]:
    """(path, version) of the docker CLIs found (``docker_clis``) that have ``docker stack
    config``."""
    out = []
    for path, version in docker_clis():
        res = subprocess.run([path, "stack", "config", "--help"], capture_output=True,
                             text=True, check=False, timeout=30)
        if res.returncode == 0 and "--compose-file" in res.stdout:  # 20.10: stack's help
            out.append((path, version))
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
        return None, res.stderr.strip().replace(str(folder), FOLDER)
    got = yaml.safe_load(res.stdout.replace(str(folder), FOLDER))
    assert isinstance(got, dict), res.stdout
    return got, ""


def case_inputs(files: Sequence[tuple[str, str]], environ: Mapping[str, str], dotenv: str
                ) -> dict[str, Any]:
    """A case's inputs as a recording holds them (JSON: each file a [name, text] list)."""
    return {"files": [[name, text] for name, text in files], "environ": dict(environ),
            "dotenv": dotenv}


def record_case(cli: str, inputs: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """``inputs`` (``case_inputs``) and what ``cli`` reads of them, run in ``folder``:
    its reading (``output``) or None and its error (``error``)."""
    (folder / ".env").write_text(inputs["dotenv"])
    files = [(name, text) for name, text in inputs["files"]]
    got, error = docker_config(cli, files, inputs["environ"], folder)
    # the recording is JSON: what docker printed must read back the same from it
    assert json.loads(json.dumps(got)) == got, got
    return {**inputs, "output": got, "error": error}


def cli_version(cli: str) -> str:
    """What ``cli --version`` prints: ``Docker version 28.2.2, build e6534b4``."""
    res = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True,
                         timeout=30)
    return res.stdout.strip()


def recorded_major(recording: Mapping[str, Any]) -> int:
    """The major version of the CLI a recording is of."""
    found = re.fullmatch(r"Docker version (\d+)\.\d+\.\d+.*", recording["cli"])
    assert found, f"{RECORDING}: not a docker CLI's version: {recording['cli']!r}"
    return int(found.group(1))


def write_recording(cli: str, cases: Mapping[str, Mapping[str, Any]]) -> None:
    """Write ``cases`` (name: ``record_case``'s) as ``cli``'s recording, with its
    provenance."""
    data = {
        "cli": cli_version(cli),
        "command": f"docker stack config -c a.yml [-c b.yml], run in {FOLDER} (which holds "
                   "the files and .env) with only the case's environment, PATH, "
                   f"DOCKER_CONFIG={FOLDER} and DOCKER_HOST=unix:///nonexistent/docker.sock",
        "recorded": datetime.now(UTC).date().isoformat(),
        "re-record": RERECORD,
        "cases": dict(cases),
    }
    RECORDING.parent.mkdir(exist_ok=True)
    RECORDING.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def load_recording() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDING.read_text())
    return data


def recorded(recording: Mapping[str, Any], name: str, inputs: Mapping[str, Any]
             ) -> tuple[dict[str, Any] | None, str]:
    """What docker read of case ``name`` as recorded: its reading, or None and its error.
    Fails, saying how to record again, where the recording has no such case or one of
    other inputs (the test's case changed since)."""
    got = recording["cases"].get(name)
    if got is None or any(got[k] != v for k, v in inputs.items()):
        why = "has no recording" if got is None else "was recorded with other inputs"
        pytest.fail(f"case {name!r} {why} in {RECORDING.relative_to(FIXTURES.parents[1])}: "
                    f"record again with a docker CLI of {RECORDED_MAJOR} or later that has "
                    f"`docker stack config` (tests/fixtures/SOURCES.md): {RERECORD}",
                    pytrace=False)
    return got["output"], got["error"]


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
