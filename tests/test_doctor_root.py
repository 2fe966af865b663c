"""`swarmgpu doctor --root DIR`: the node's files as the node itself sees them (symlinks
resolved inside the root, as after a chroot) and its runtime looked up as dockerd would."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from swarmgpu.agent.doctor import (
    Check,
    Status,
    check_default_runtime,
    find_runtime,
    read_view,
    run_doctor,
)
from swarmgpu.agent.doctor import read as doctor_read

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


# --- a part swapped for a symlink between the lookup and the open stays in the root ---
# A hostile container writing its own rootfs, or an image being unpacked, can turn a
# directory into a symlink to the host at any moment. Each test makes that swap at the
# last moment before the read (or stat), where a resolve-then-open lookup is blind.


def _swap_for_symlink(path: Path, to: Path) -> Callable[[], None]:
    """What the hostile writer does: ``path`` (a directory) moved aside, still inside the
    root, and in its place a symlink to ``to``, outside it."""

    def swap() -> None:
        path.rename(path.with_name(path.name + ".moved"))
        path.symlink_to(to)

    return swap


def _swap_before(
    monkeypatch: pytest.MonkeyPatch, owner: object, name: str, suffix: str, swap: Callable[[], None]
) -> list[bool]:
    """``owner.name`` (a reader) runs ``swap`` just before its first call on a path ending
    in ``suffix``; the returned list is non-empty once it has."""
    real = getattr(owner, name)
    done: list[bool] = []

    def call(*args: object, **kwargs: object) -> object:
        if not done and str(args[0]).endswith(suffix):
            done.append(True)
            swap()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, call)
    return done


def test_a_directory_swapped_for_a_symlink_before_the_open_is_not_read_outside_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _healthy_copy(tmp_path)
    inside = json.loads((root / "etc/docker/daemon.json").read_text())
    host = tmp_path / "host"
    (host / "docker").mkdir(parents=True)
    (host / "docker/daemon.json").write_text('{"read": "the host\'s file"}')
    swapped = _swap_before(
        monkeypatch, doctor_read, "read_head", "daemon.json", _swap_for_symlink(root / "etc", host)
    )
    view = read_view(str(root))
    assert swapped
    assert view.daemon_json.data == inside, view.daemon_json


def test_a_device_directory_swapped_for_a_symlink_before_the_stat_is_not_the_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under --root a device node is looked at with stat: the host's /dev/null through a
    # swapped <root>/dev was a character device of the node.
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev/nvidia0").write_text("")
    host = tmp_path / "host"
    host.mkdir()
    (host / "nvidia0").symlink_to("/dev/null")
    swapped = _swap_before(
        monkeypatch, os, "stat", "nvidia0", _swap_for_symlink(root / "dev", host)
    )
    nodes = read_view(str(root)).dev_nodes
    assert swapped
    assert nodes == {"nvidia0": None}, nodes


def test_a_runtime_directory_swapped_for_a_symlink_before_the_stat_is_not_the_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    _install(root, f"usr/bin/{RUNTIME}", 0o644)
    host = tmp_path / "host"
    _install(host, f"bin/{RUNTIME}")
    swapped = _swap_before(monkeypatch, os, "stat", RUNTIME, _swap_for_symlink(root / "usr", host))
    found = find_runtime(str(root), f"/usr/bin/{RUNTIME}")
    assert swapped
    assert found.found is None and found.not_executable, found  # the root's, not executable


def _swap_before_walking_into(
    monkeypatch: pytest.MonkeyPatch, part: str, swap: Callable[[], None]
) -> list[bool]:
    """The walk looked at ``part`` (a directory, no link); ``swap`` runs just before it
    opens it to walk on. The returned list is non-empty once it has."""
    real = os.open
    swapped: list[bool] = []

    def open_(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == part and dir_fd is not None and not swapped:
            swapped.append(True)
            swap()
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_)
    return swapped


def test_a_directory_swapped_for_a_symlink_during_the_walk_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Looked at (a directory, no link), then swapped before it is opened: the open does
    # not follow the new link, the file is unreadable, never the host's.
    root = _healthy_copy(tmp_path)
    host = tmp_path / "host"
    (host / "docker").mkdir(parents=True)
    (host / "docker/daemon.json").write_text("{}")
    swapped = _swap_before_walking_into(monkeypatch, "etc", _swap_for_symlink(root / "etc", host))
    fds = len(os.listdir("/proc/self/fd"))
    parsed = read_view(str(root)).daemon_json
    assert swapped
    assert parsed.data is None, parsed
    assert "changed while the doctor read it" in (parsed.error or ""), parsed
    assert len(os.listdir("/proc/self/fd")) == fds  # every directory fd closed


def test_a_directory_swapped_for_a_file_during_the_walk_is_said_to_have_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Looked at (a directory), then a file before it is walked into: the kernel says "Not
    # a directory", which read as if the node's /etc were a file. It changed while read.
    root = _healthy_copy(tmp_path)
    etc = root / "etc"

    def swap() -> None:
        etc.rename(root / "etc.moved")
        etc.write_text("")

    swapped = _swap_before_walking_into(monkeypatch, "etc", swap)
    c = _by_id(root)[0]["docker.daemon-json"]
    assert swapped
    assert c.status is Status.FAIL, c
    assert f"{etc} changed while the doctor read it" in c.found, c
    assert "Not a directory" not in c.found and "again" in c.fix, c


def test_a_symlink_swapped_for_a_directory_before_it_is_read_is_said_to_have_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Looked at (a link), then a directory before the link is read: the kernel's EINVAL
    # ("not a link") went out as the file's error.
    root = _healthy_copy(tmp_path)
    _relink(root, "etc/docker", "/srv/docker", "/srv/docker")
    link = root / "etc/docker"

    def swap() -> None:
        link.unlink()
        shutil.copytree(root / "srv/docker", link)

    swapped = _swap_before(monkeypatch, os, "readlink", "docker", swap)
    c = _by_id(root)[0]["docker.daemon-json"]
    assert swapped
    assert c.status is Status.FAIL and f"{link} changed while the doctor read it" in c.found, c


def test_a_file_where_a_directory_belongs_is_not_a_directory(tmp_path: Path) -> None:
    # No change while read: /etc/docker is a file on the node too, and the node's own
    # open says so.
    root = _healthy_copy(tmp_path)
    shutil.rmtree(root / "etc/docker")
    (root / "etc/docker").write_text("")
    c = _by_id(root)[0]["docker.daemon-json"]
    assert c.status is Status.FAIL and "Not a directory" in c.found, c
    assert "changed" not in c.found, c


def test_the_file_swapped_for_a_symlink_before_the_open_is_said_so_not_a_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk saw a file; the open (O_NOFOLLOW) then meets a symlink and the kernel says
    # ELOOP. One link is no loop (the walk counts links itself): it changed while read.
    root = _healthy_copy(tmp_path)
    daemon = root / "etc/docker/daemon.json"

    def swap() -> None:
        daemon.rename(daemon.with_name("moved.json"))
        daemon.symlink_to("/etc/docker/moved.json")

    swapped = _swap_before(monkeypatch, doctor_read, "read_head", "daemon.json", swap)
    c = _by_id(root)[0]["docker.daemon-json"]
    assert swapped
    assert c.status is Status.FAIL and "became a symlink while" in c.found, c
    assert "loop" not in c.found and "again" in c.fix, c
    monkeypatch.undo()
    assert _by_id(root)[0]["docker.daemon-json"].status is Status.OK  # read again: resolved


# --- a bare runtime name is looked up on PATH, as dockerd does -------------------------

ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUNTIME = "nvidia-container-runtime"


def _install(root: Path, rel: str, mode: int = 0o755) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)


def _bare_runtime_root(tmp_path: Path) -> Path:
    """The healthy root, its daemon.json naming the runtime bare, no binary installed."""
    root = _healthy_copy(tmp_path)
    for d in ROOT_PATH.split(":"):
        (root / d.lstrip("/") / RUNTIME).unlink(missing_ok=True)
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    assert daemon["runtimes"]["nvidia"]["path"] == RUNTIME
    return root


def test_bare_runtime_not_on_the_roots_path_is_a_finding(tmp_path: Path) -> None:
    # dockerd starts; every container it then runs through the runtime fails
    root = _bare_runtime_root(tmp_path)
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.FAIL, c
    assert f"{RUNTIME} is not on the root's standard PATH ({ROOT_PATH})" in c.found, c
    assert "exec.LookPath" in c.why and "nvidia-container-toolkit" in c.fix, c


def test_bare_runtime_without_an_execute_bit_is_named(tmp_path: Path) -> None:
    root = _bare_runtime_root(tmp_path)
    _install(root, f"usr/bin/{RUNTIME}", 0o644)
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.FAIL and f"/usr/bin/{RUNTIME} is not executable" in c.found, c
    assert f"chmod 755 /usr/bin/{RUNTIME}" in c.fix, c


def test_bare_runtime_is_the_first_executable_on_path(tmp_path: Path) -> None:
    # exec.LookPath passes over a file without an execute bit and takes the next one
    root = _bare_runtime_root(tmp_path)
    _install(root, f"usr/local/sbin/{RUNTIME}", 0o644)
    _install(root, f"bin/{RUNTIME}")
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.OK, c
    assert f"found at /bin/{RUNTIME} on the root's standard PATH" in c.found, c


def test_an_absolute_runtime_path_is_named_with_one_leading_slash(tmp_path: Path) -> None:
    # posixpath.normpath keeps a leading "//" (POSIX leaves its meaning open): "/" joined
    # to "/usr/bin/x" was named //usr/bin/x, in the finding and in its chmod
    root = _healthy_copy(tmp_path)
    _install(root, f"usr/bin/{RUNTIME}", 0o644)
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    daemon["runtimes"]["nvidia"]["path"] = f"/usr/bin/{RUNTIME}"
    (root / "etc/docker/daemon.json").write_text(json.dumps(daemon))
    c = _by_id(root)[0]["runtime.default"]
    assert c.status is Status.FAIL and f": /usr/bin/{RUNTIME} is not executable" in c.found, c
    assert f"`chmod 755 /usr/bin/{RUNTIME}`" in c.fix, c
    for name in (f"/usr/bin/{RUNTIME}", f"//usr/bin/{RUNTIME}", f"usr/bin/../bin/{RUNTIME}"):
        assert find_runtime(str(root), name).not_executable == (f"/usr/bin/{RUNTIME}",), name
    assert find_runtime("/", "/bin/sh").found == "/bin/sh"


def test_bare_runtime_on_the_live_node_is_looked_up_on_the_environments_path(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    _install(tmp_path, f"bin/{RUNTIME}")
    found = find_runtime("/", RUNTIME, env_path=f"relative/dir::{tmp_path}/none:{bin_dir}")
    assert found.found == f"{bin_dir}/{RUNTIME}", found
    view = dataclasses.replace(read_view(str(ROOTS / "healthy")), runtime=found)
    c = check_default_runtime(view)
    assert c.status is Status.OK and "on this environment's PATH" in c.found, c
    missing = find_runtime("/", RUNTIME, env_path=f"{tmp_path}/none")
    c = check_default_runtime(dataclasses.replace(view, runtime=missing))
    assert c.status is Status.FAIL and f"environment's PATH ({tmp_path}/none)" in c.found, c
    assert "systemctl show docker" in c.why, c


# --- a runtime path the kernel refuses is a finding, never a crash ---------------------
# JSON spells a NUL as \u0000 and lets a string be any length; os.stat raises ValueError
# on the one and ENAMETOOLONG on the other, as the node's kernel refuses them to dockerd.


@pytest.mark.parametrize(
    ("path", "shown", "why"),
    [
        (
            "/usr/bin/nvidia\u0000-container-runtime",
            "/usr/bin/nvidia\\x00-container-runtime",
            "NUL",
        ),
        ("nvidia-container-runtime\u0000", "nvidia-container-runtime\\x00", "NUL"),
        ("/usr/bin/" + "n" * 256, "/usr/bin/nnn", "255 bytes"),
        ("/usr" * 1100, "/usr/usr", "4096 bytes"),
    ],
    ids=["nul-in-a-path", "nul-in-a-bare-name", "a-part-over-name-max", "over-path-max"],
)
def test_a_runtime_path_the_os_refuses_is_a_finding_naming_it(
    tmp_path: Path, path: str, shown: str, why: str
) -> None:
    root = _healthy_copy(tmp_path)
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    daemon["runtimes"]["nvidia"]["path"] = path
    (root / "etc/docker/daemon.json").write_text(json.dumps(daemon))
    checks, code = _by_id(root)
    c = checks["runtime.default"]
    assert code == 1 and c.status is Status.FAIL, c
    assert f"runtimes.nvidia.path {shown}" in c.found and why in c.found, c
    assert "\u0000" not in c.found and len(c.found) < 400, c
    assert "runtimes.nvidia.path" in c.fix and "systemctl restart docker" in c.fix, c
    for live in ("/", str(root)):  # on the node itself os.stat is given the whole path
        assert find_runtime(live, path).refused, live
