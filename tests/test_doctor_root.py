"""`swarmgpu doctor --root DIR`: the node's files as the node itself sees them (symlinks
resolved inside the root, as after a chroot) and its runtime looked up as dockerd would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from swarmgpu.agent.doctor import Check, Status, run_doctor

ROOTS = Path(__file__).parent / "doctor_roots"


def _healthy_copy(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root, symlinks=True)
    return root


def _by_id(root: Path) -> tuple[dict[str, Check], int]:
    text, code = run_doctor(str(root), as_json=True)
    return {
        c["id"]: Check(c["id"], Status(c["status"]), c["found"], c["why"], c["fix"])
        for c in json.loads(text)["checks"]
    }, code


def _relink(root: Path, rel: str, to: str, link: str) -> None:
    """Move ``rel`` to ``to`` (inside the root) and leave at ``rel`` a symlink ``link``."""
    src, dst = root / rel, root / to.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)
    src.symlink_to(link)


# --- symlinks inside the root resolve inside it, never on the host ---------------------


def test_absolute_symlink_to_daemon_json_is_read_inside_the_root(tmp_path: Path) -> None:
    # /etc/docker/daemon.json -> /srv/conf/daemon.json, as config management lays it out:
    # on the host /srv/conf/daemon.json is absent (or another node's file).
    root = _healthy_copy(tmp_path)
    _relink(root, "etc/docker/daemon.json", "/srv/conf/daemon.json", "/srv/conf/daemon.json")
    checks, code = _by_id(root)
    assert checks["docker.daemon-json"].status is Status.OK, checks["docker.daemon-json"]
    assert code == 0, checks


def test_absolute_symlinked_directory_on_the_way_is_followed_inside_the_root(
    tmp_path: Path,
) -> None:
    root = _healthy_copy(tmp_path)
    _relink(root, "etc/nvidia-container-runtime", "/opt/nvidia/etc", "/opt/nvidia/etc")
    checks, code = _by_id(root)
    c = checks["toolkit.swarm-resource"]
    assert c.status is Status.OK and code == 0, c


def test_dotdot_in_a_symlink_does_not_climb_out_of_the_root(tmp_path: Path) -> None:
    # As after chroot: /.. is /, so ../../../../../srv/x is <root>/srv/x, never the host's.
    root = _healthy_copy(tmp_path)
    _relink(
        root, "etc/docker/daemon.json", "/srv/conf/daemon.json", "../" * 12 + "srv/conf/daemon.json"
    )
    checks, code = _by_id(root)
    assert checks["docker.daemon-json"].status is Status.OK and code == 0, checks


def test_absolute_symlink_to_the_nvidia_runtime_is_found_inside_the_root(tmp_path: Path) -> None:
    root = _healthy_copy(tmp_path)
    daemon_path = root / "etc/docker/daemon.json"
    daemon = json.loads(daemon_path.read_text())
    daemon["runtimes"]["nvidia"]["path"] = "/usr/bin/nvidia-container-runtime"
    daemon_path.write_text(json.dumps(daemon))
    real = root / "usr/local/nvidia/toolkit/nvidia-container-runtime"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/nvidia-container-runtime").unlink(missing_ok=True)
    (root / "usr/bin/nvidia-container-runtime").symlink_to(
        "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    )
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.OK, c


def test_absolute_symlink_loop_inside_the_root_is_a_loop(tmp_path: Path) -> None:
    # On the host /etc/docker/a does not exist: read there, it was "does not exist".
    root = _healthy_copy(tmp_path)
    docker = root / "etc/docker"
    (docker / "daemon.json").unlink()
    (docker / "daemon.json").symlink_to("/etc/docker/a")
    (docker / "a").symlink_to("/etc/docker/b")
    (docker / "b").symlink_to("/etc/docker/a")
    c = _by_id(root)[0]["docker.daemon-json"]
    assert c.status is Status.FAIL and "symlink loop" in c.found, c


def test_forty_symlinks_resolve_and_the_forty_first_is_a_loop(tmp_path: Path) -> None:
    # The kernel follows at most 40 symlinks in one lookup (MAXSYMLINKS).
    root = _healthy_copy(tmp_path)
    docker = root / "etc/docker"
    (docker / "daemon.json").rename(docker / "real.json")
    (docker / "l39").symlink_to("/etc/docker/real.json")
    for i in range(38, 0, -1):
        (docker / f"l{i}").symlink_to(f"/etc/docker/l{i + 1}")
    (docker / "daemon.json").symlink_to("/etc/docker/l1")  # 40 links: l1..l39 and this
    assert _by_id(root)[0]["docker.daemon-json"].status is Status.OK
    (docker / "daemon.json").unlink()
    (docker / "l0").symlink_to("/etc/docker/l1")
    (docker / "daemon.json").symlink_to("/etc/docker/l0")  # the 41st
    c = _by_id(root)[0]["docker.daemon-json"]
    assert c.status is Status.FAIL and "symlink loop" in c.found, c
