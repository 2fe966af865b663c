"""A FIFO in dockerd's CDI spec dirs fails the node, as one in the runtime's does (stop
80): moby (daemon/command/daemon.go, daemon/cdi.go ``createCDICache``) builds its CDI
cache with ``cdi.NewCache`` before its API serves, and CDI (v1.1.0 pkg/cdi cache.go,
auto-refresh on by default) reads every spec file whole then, and again in its watcher
on each write in those dirs, holding the cache's lock: the read of a FIFO waits for a
writer for ever, so dockerd never comes up after a restart. Before, the doctor read
dockerd's dirs for their versions alone and passed the node.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.fifo import make_fifo, read_within

from swarmgpu.agent.doctor import Status, run_doctor

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
TOML = "etc/nvidia-container-runtime/config.toml"


def _root(tmp_path: Path, mode: str) -> Path:
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    toml.write_text(toml.read_text().replace('mode = "auto"', f'mode = "{mode}"'))
    return root


def _check(root: Path, dirs: list[str]) -> dict[str, Any]:
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    fixture.write_text(json.dumps({**json.loads(fixture.read_text()), "CDISpecDirs": dirs,
                                   "ServerVersion": "28.5.2"}))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_fifo_only_dockerd_reads_fails_the_node(tmp_path: Path, mode: str) -> None:
    # (the runtime reads no spec in these modes: dockerd alone meets it)
    root = _root(tmp_path, mode)
    (root / "srv/dcdi").mkdir(parents=True)
    fifo = make_fifo(root / "srv/dcdi/pipe.yaml")
    c = read_within(lambda: _check(root, ["/srv/dcdi"]), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert "/srv/dcdi/pipe.yaml is a FIFO (a named pipe)" in c["found"], c
    assert "dockerd" in c["why"] and "never comes up" in c["why"], c
    assert "Remove /srv/dcdi/pipe.yaml" in c["fix"], c


def test_a_fifo_both_read_is_named_once_with_both_effects(tmp_path: Path) -> None:
    root = _root(tmp_path, "cdi")
    (root / "etc/cdi").mkdir(parents=True)
    fifo = make_fifo(root / "etc/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, ["/etc/cdi", "/var/run/cdi"]), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert c["found"].count("/etc/cdi/pipe.yaml is a FIFO") == 1, c
    assert "GPU task" in c["why"] and "dockerd" in c["why"], c
    assert c["fix"].count("Remove /etc/cdi/pipe.yaml") == 1, c


def test_a_fifo_in_a_dir_dockerd_does_not_read_is_not_its_fault(tmp_path: Path) -> None:
    # (its CDI off: docker info lists no spec dir)
    root = _root(tmp_path, "auto")
    (root / "etc/cdi").mkdir(parents=True)
    fifo = make_fifo(root / "etc/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, []), fifo)
    assert c["status"] == str(Status.OK), c


def _no_docker_info(root: Path, daemon: dict[str, Any] | None = None) -> dict[str, Any]:
    (root / ".swarmgpu-fixture/docker-info.json").unlink()
    if daemon is not None:
        path = root / "etc/docker/daemon.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **daemon}))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


def test_without_docker_info_a_fifo_dockerd_may_not_read_is_a_warning(
        tmp_path: Path) -> None:
    """(stop 80 read) Without docker info, daemon.json's default dirs are a guess: Docker
    before 25 has no CDI and 25.0 to 28.1 read none without features.cdi true, so a
    dockerd that may never read the FIFO was said never to come up: a FAIL."""
    root = _root(tmp_path, "legacy")
    (root / "etc/cdi").mkdir(parents=True)
    fifo = make_fifo(root / "etc/cdi/pipe.yaml")
    c = read_within(lambda: _no_docker_info(root), fifo)
    assert c["status"] == str(Status.WARN), c
    assert "/etc/cdi/pipe.yaml is a FIFO" in c["found"], c
    assert "28.2" in c["why"] and "features.cdi" in c["why"], c
    assert "Remove /etc/cdi/pipe.yaml" in c["fix"], c


def test_without_docker_info_a_fifo_where_daemon_json_turns_cdi_on_fails(
        tmp_path: Path) -> None:
    root = _root(tmp_path, "legacy")
    (root / "etc/cdi").mkdir(parents=True)
    fifo = make_fifo(root / "etc/cdi/pipe.yaml")
    c = read_within(lambda: _no_docker_info(root, {"features": {"cdi": True}}), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert "never comes up" in c["why"], c
