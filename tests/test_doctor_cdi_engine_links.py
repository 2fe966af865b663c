"""dockerd's CDI spec dir given as a symlink (``/etc/cdi -> /srv/cdi``): moby from
29.2.0 (daemon/cdi.go ``RegisterCDIDriver``, "cdi: resolve symlinks") resolves each dir
that exists with ``filepath.EvalSymlinks`` as it starts, and hands CDI the real dir,
whose released ``filepath.Walk`` would not follow the link: its cache reads the specs
there. So a FIFO there hangs dockerd's start as one in a plain dir does. Before, the
doctor read such a dir as released CDI's scan alone (a link never followed) and passed
the node. An older Docker hands CDI the link: nothing read there, as before.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.fifo import make_fifo, read_within, swapped_after_stat

from swarmgpu.agent.doctor import Status, enginelinks, read, run_doctor

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
TOML = "etc/nvidia-container-runtime/config.toml"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
EDITS = "containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}"


def _root(tmp_path: Path, target: str = "/srv/cdi") -> Path:
    """The healthy tree in legacy mode (the runtime reads no spec), /srv/cdi a dir and
    /srv/link a symlink to ``target``."""
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    toml.write_text(toml.read_text().replace('mode = "auto"', 'mode = "legacy"'))
    (root / "srv/cdi").mkdir(parents=True)
    os.symlink(target, root / "srv/link")
    return root


def _check(root: Path, server: str | None, dirs: list[str]) -> dict[str, Any]:
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    if server is None:  # (daemon.json's dirs, as dockerd reads it)
        fixture.unlink()
        path = root / "etc/docker/daemon.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "cdi-spec-dirs": dirs,
                                    "features": {"cdi": True}}))
    else:
        fixture.write_text(json.dumps({**json.loads(fixture.read_text()),
                                       "CDISpecDirs": dirs, "ServerVersion": server}))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


@pytest.mark.parametrize("server", ["29.2.0", "29.7.2", None])
@pytest.mark.parametrize("target", ["/srv/cdi", "cdi", "../srv/./cdi/"])
def test_a_fifo_in_a_symlinked_dir_dockerd_resolves_fails_the_node(
        tmp_path: Path, server: str | None, target: str) -> None:
    root = _root(tmp_path, target)
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, server, ["/srv/link"]), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert "/srv/cdi/pipe.yaml is a FIFO (a named pipe)" in c["found"], c
    assert "never comes up" in c["why"], c
    assert "Remove /srv/cdi/pipe.yaml" in c["fix"], c


@pytest.mark.parametrize("server", ["29.1.5", "28.5.2"])
def test_a_docker_that_hands_cdi_the_link_reads_nothing_there(
        tmp_path: Path, server: str) -> None:
    # (released CDI's filepath.Walk lstat's the dir: a link, skipped)
    root = _root(tmp_path)
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, server, ["/srv/link"]), fifo)
    assert c["status"] == str(Status.OK), c


def _linked_details(tmp_path: Path, server: str) -> str:
    """The one detail of a dockerd ``server`` given /srv/link, a spec behind it (ok)."""
    root = _root(tmp_path)
    (root / "srv/cdi/nvidia.yaml").write_text(
        f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: {UA}\n    {EDITS}\n")
    c = _check(root, server, ["/srv/link"])
    assert c["status"] == str(Status.OK), c
    (said,) = c["details"]
    assert isinstance(said, str), said
    return said


def test_the_details_name_the_link_and_the_specs_read_through_it(tmp_path: Path) -> None:
    said = _linked_details(tmp_path, "29.2.0")
    assert said.startswith("dockerd reads CDI specs from /srv/link (a symlink to /srv/cdi, "
                           "which dockerd 29.2 and later resolves as it starts): "
                           "nvidia.com/gpu in /srv/cdi/nvidia.yaml"), said


def test_a_link_to_nothing_or_a_loop_is_left_as_dockerd_leaves_it(tmp_path: Path) -> None:
    # (os.Stat fails: moby resolves nothing, CDI's Walk skips the link)
    root = _root(tmp_path, "/srv/none")
    os.symlink("loop", root / "srv/loop")
    c = _check(root, "29.2.0", ["/srv/link", "/srv/loop"])
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("server", ["29.2.0", None])
def test_a_dir_dockerd_drops_as_it_starts_stops_no_scan_of_a_later_one(
        tmp_path: Path, server: str | None) -> None:
    # moby from 29.2.0 (daemon/command/daemon.go, "cdi: skip scanning non-readable
    # dirs") drops a spec dir os.ReadDir fails on, absence aside, before CDI sees it: a
    # path through a file stops no scan, and the FIFO in the later dir hangs its start.
    # Before, the doctor stopped its scan there, as released CDI's would, and passed it.
    root = _root(tmp_path)
    (root / "srv/file").write_text("")
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, server, ["/srv/file/x", "/srv/cdi"]), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert "/srv/cdi/pipe.yaml is a FIFO (a named pipe)" in c["found"], c


def test_an_older_dockerd_stops_its_scan_at_such_a_dir(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "srv/file").write_text("")
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, "29.1.5", ["/srv/file/x", "/srv/cdi"]), fifo)
    assert c["status"] == str(Status.OK), c
    assert "its scan stops at /srv/file/x" in c["details"][0], c


def _check_no_version(root: Path, dirs: list[str]) -> dict[str, Any]:
    """``_check`` with docker info's ``ServerVersion`` left out (a proxy's, a fixture's)."""
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    info = {**json.loads(fixture.read_text()), "CDISpecDirs": dirs}
    del info["ServerVersion"]
    fixture.write_text(json.dumps(info))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


@pytest.mark.parametrize("server", ["dev", "master", "pr-51234",
                                    "0.0.0-20260105120000-3c1f0a9", "", None])
def test_a_dockerd_of_no_release_version_is_read_as_one_that_resolves_the_link(
        tmp_path: Path, server: str | None) -> None:
    # A build of moby's master (hack/make.sh: VERSION defaults to "dev", a branch's name,
    # pr-N; a nightly package is 0.0.0-<date>-<commit>) resolves the link as 29.2 does:
    # read as today's Docker, as without docker info. Before, read as one before 29.2:
    # the FIFO behind the link, which hangs its start, passed.
    root = _root(tmp_path)
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check_no_version(root, ["/srv/link"]) if server is None
                    else _check(root, server, ["/srv/link"]), fifo)
    assert c["status"] == str(Status.FAIL), c
    assert "/srv/cdi/pipe.yaml is a FIFO (a named pipe)" in c["found"], c


def test_a_link_through_a_file_and_dotdot_is_no_dir_dockerd_reads(tmp_path: Path) -> None:
    # /srv/link -> /srv/file/../cdi: the kernel's walk (dockerd's os.ReadDir, 29.2's
    # config check) and filepath.EvalSymlinks both stop at the file (ENOTDIR), so dockerd
    # drops the dir and reads nothing there. Before, the doctor popped ``..`` past the
    # file, read /srv/cdi and failed the node for its FIFO.
    root = _root(tmp_path, "/srv/file/../cdi")
    (root / "srv/file").write_text("")
    fifo = make_fifo(root / "srv/cdi/pipe.yaml")
    c = read_within(lambda: _check(root, "29.2.0", ["/srv/link"]), fifo)
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize("server", [29, ["29.2.0"], None, True])
def test_a_server_version_of_another_type_is_named(tmp_path: Path, server: Any) -> None:
    # dockerd sends ServerVersion as a text (moby system.Info): another type is a proxy's,
    # named as each part the checks read is (``infoparts``). Before, the check read it as
    # a Docker before 29.2 and before 25 alike, and said nothing of it.
    root = _root(tmp_path)
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    fixture.write_text(json.dumps({**json.loads(fixture.read_text()),
                                   "CDISpecDirs": ["/srv/link"], "ServerVersion": server}))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    assert c["status"] == str(Status.FAIL), c
    assert "docker info's ServerVersion is " in c["found"], c
    assert "proxy in front of the engine" in c["fix"], c


def test_an_older_dockerd_s_details_say_it_reads_nothing_through_the_link(
        tmp_path: Path) -> None:
    # Before 29.2 dockerd hands CDI the link, which its scan never follows: a spec behind
    # it is never read (`docker run --device` finds no device). Before, the details named
    # /srv/link alone ("no nvidia.com/gpu spec there"), nothing of why or the fix.
    said = _linked_details(tmp_path, "29.1.5")
    assert said.startswith(
        "dockerd reads CDI specs from /srv/link (a symlink to /srv/cdi, which a dockerd "
        "before 29.2 hands CDI as is, whose scan never follows it: no spec read there; "
        "name /srv/cdi in cdi-spec-dirs, or upgrade Docker Engine to 29.2 or later): "
        "no nvidia.com/gpu spec there"), said


@pytest.mark.parametrize("server", ["29.2.0", "28.5.2", None])
def test_a_spec_of_dockerds_dir_swapped_for_a_fifo_while_read_fails_the_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str | None) -> None:
    # A regular file when stat looked, a FIFO by the open (fstat of the non-blocking
    # fd): a FIFO is there now, whose read hangs dockerd's start as one seen by stat
    # does. Before, it was a read that failed, which dockerd only logs: ok, unsaid.
    root = _root(tmp_path)
    (root / "srv/cdi/swap.yaml").write_text("x: 1\n")
    fifo = swapped_after_stat(monkeypatch, root, "/srv/cdi/swap.yaml")
    c = read_within(lambda: _check(root, server, ["/srv/cdi"]), fifo)
    assert isinstance(c, dict), c
    assert c["status"] == str(Status.FAIL), c
    assert ("/srv/cdi/swap.yaml is a FIFO (a named pipe) (replaced while the doctor read "
            "it), not a spec: the runtime's read of it waits for a writer, for ever"
            in c["found"]), c
    assert "Remove /srv/cdi/swap.yaml" in c["fix"], c


def _denied_to_user(monkeypatch: pytest.MonkeyPatch, below: str) -> None:
    """The doctor run as a user who may not search ``below`` (a dir under the root)."""
    lstat, listdir = enginelinks.os.lstat, read.listdir_in_root

    def lstat_denied(path: Any, *args: Any, **kwargs: Any) -> Any:
        if f"/{below}" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return lstat(path, *args, **kwargs)

    def listdir_denied(root: str, rel: str) -> list[str]:
        if rel.startswith(below):
            raise PermissionError(13, "Permission denied")
        return listdir(root, rel)

    monkeypatch.setattr(enginelinks.os, "lstat", lstat_denied)
    monkeypatch.setattr(read, "listdir_in_root", listdir_denied)
    monkeypatch.setattr(read.os, "geteuid", lambda: 1000)


@pytest.mark.parametrize("listed", ["/srv/link", "/srv/cdi"])
def test_a_dockerd_spec_dir_denied_to_the_user_is_named_with_run_as_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: str) -> None:
    # dockerd (root) lists the dir, and 29.2 resolves the link to it: a FIFO there hangs
    # its start. A user may not look: before, the doctor said nothing of the dir, ok.
    root = _root(tmp_path)
    make_fifo(root / "srv/cdi/pipe.yaml")
    _denied_to_user(monkeypatch, "srv/cdi")
    c = _check(root, "29.2.0", [listed])
    assert c["status"] == str(Status.WARN), c
    assert (f"dockerd's CDI spec dir {listed} could not be read by this user (permission "
            "denied): a FIFO or device there, which hangs dockerd's start, goes unseen"
            in c["found"]), c
    assert c["fix"] == "Run the doctor as root, as dockerd reads its CDI spec dirs.", c


def test_an_older_dockerd_s_link_denied_to_the_user_is_no_matter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (before 29.2 dockerd hands CDI the link, never followed: nothing unseen behind it)
    root = _root(tmp_path)
    _denied_to_user(monkeypatch, "srv/cdi")
    c = _check(root, "29.1.5", ["/srv/link"])
    assert c["status"] == str(Status.OK), c


@pytest.mark.parametrize(("listed", "why"), [
    ("/srv/file/x", "cannot be looked up (not a directory)"),
    ("/srv/file", "is not a directory")])
def test_the_details_name_a_dir_a_dockerd_of_29_2_drops_as_it_starts(
        tmp_path: Path, listed: str, why: str) -> None:
    # (its config loading drops a dir os.ReadDir fails on: the details said dockerd read
    # specs from it, naming nothing of the drop)
    root = _root(tmp_path)
    (root / "srv/file").write_text("")
    c = _check(root, "29.2.0", [listed, "/srv/cdi"])
    assert c["status"] == str(Status.OK), c
    (said,) = c["details"]
    assert said.startswith(
        f"dockerd reads CDI specs from {listed} (dropped as dockerd 29.2 and later "
        f"starts: it {why}), /srv/cdi: "), said
