"""``toolkit.cdi-spec`` and the CDI an engine vendors: each release of CDI knows the spec
versions up to its own (0.6.0 in Docker 25.0 and 26.0, 1.1.0 from Docker 29.2) and
refuses a spec of a later ``cdiVersion``, which the doctor, reading CDI's newest rules,
takes. Pure: the healthy fixture tree in cdi mode, its spec and docker info changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from swarmgpu.agent.doctor import Status, run_doctor

HEALTHY = Path(__file__).parent / "doctor_roots" / "healthy"
UA = "GPU-2a8c5b3e-9d1f-4c6a-8e7b-1f0d3c5a7b91"
UB = "GPU-7e4d2f1a-3b6c-4d8e-9a0f-5c1b7d3e9f24"
TOML = "etc/nvidia-container-runtime/config.toml"
# (CDI refuses a device of no edits: "invalid device, empty device edits")
EDITS = "containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}"
NET = "containerEdits: {netDevices: [{hostInterfaceName: eth1, name: eth1}]}\n"


def _root(tmp_path: Path, version: str, head: str = "") -> Path:
    """The healthy tree in cdi mode with /etc/cdi/nvidia.yaml naming both GPUs, of
    ``cdiVersion`` ``version``, ``head`` written before its devices."""
    root = tmp_path / "root"
    shutil.copytree(HEALTHY, root, symlinks=True)
    toml = root / TOML
    toml.write_text(toml.read_text().replace('mode = "auto"', 'mode = "cdi"'))
    (root / "etc/cdi").mkdir()
    (root / "etc/cdi/nvidia.yaml").write_text(
        f"cdiVersion: {version}\nkind: nvidia.com/gpu\n{head}devices:\n"
        f"  - name: {UA}\n    {EDITS}\n  - name: {UB}\n    {EDITS}\n")
    return root


def _check(root: Path, server: object) -> dict[str, Any]:
    fixture = root / ".swarmgpu-fixture/docker-info.json"
    info = {**json.loads(fixture.read_text()), "ServerVersion": server,
            "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
    fixture.write_text(json.dumps(info))
    out, _ = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "toolkit.cdi-spec"]
    return c


@pytest.mark.parametrize(("server", "version", "newest", "upgrade"), [
    ("25.0.16", "0.7.0", "0.6.0", "26.1.0"), ("26.0.2", "0.8.0", "0.6.0", "27.4.0"),
    ("27.3.1", "0.8.0", "0.7.0", "27.4.0"), ("28.0.4", "1.0.0", "0.8.0", "28.1.0"),
    ("29.1.5", "v1.1.0", "1.0.0", "29.2.0")])
def test_a_spec_newer_than_dockerds_cdi_takes_warns_naming_both_and_the_fix(
        tmp_path: Path, server: str, version: str, newest: str, upgrade: str) -> None:
    # the doctor took every cdiVersion CDI's newest release knows: dockerd of an older
    # CDI refuses the spec (docker run --device fails), and the doctor passed
    c = _check(_root(tmp_path, version), server)
    assert c["status"] == str(Status.WARN), c
    assert (f"(Docker {server}'s CDI takes cdiVersion {newest} at most and refuses "
            f"/etc/cdi/nvidia.yaml (cdiVersion {version.lstrip('v')}))") in c["found"], c
    assert c["fix"] == ("Set cdiVersion: 0.3.0 in /etc/cdi/nvidia.yaml (what its content "
                        f"needs), or upgrade Docker Engine to {upgrade} or later (docker "
                        "run --device; Swarm services do not use dockerd's CDI)."), c


@pytest.mark.parametrize(("server", "version"), [
    ("25.0.17", "0.8.0"), ("26.1.0", "0.7.0"), ("27.4.0", "0.8.0"), ("28.1.0", "1.0.0"),
    ("29.2.0", "1.1.0"), ("30.0.0", "1.1.0"), ("v29.7.2", "1.1.0"), ("20.10.24+dfsg1", "1.1.0"),
    ("24.0.0", "1.1.0"), ("dev", "1.1.0")])
def test_a_spec_dockerds_cdi_takes_or_an_engine_version_not_read_passes(
        tmp_path: Path, server: object, version: str) -> None:
    # (before 25 dockerd has no CDI; 25.0.17 took CDI v0.8.1 back from 28.0; a
    # ServerVersion of another type is named: test_doctor_cdi_engine_links.py)
    c = _check(_root(tmp_path, version), server)
    assert c["status"] == str(Status.OK), c


def test_a_spec_whose_content_needs_more_than_dockerd_takes_is_fixed_by_an_upgrade(
        tmp_path: Path) -> None:
    # (netDevices need 1.1.0: a lower cdiVersion is refused by every CDI)
    c = _check(_root(tmp_path, "1.1.0", head=NET), "28.5.2")
    assert c["status"] == str(Status.WARN), c
    assert c["fix"].startswith("Upgrade Docker Engine to 29.2.0 or later"), c


def _toolkit(root: Path, version: str) -> None:
    status = root / "var/lib/dpkg/status"
    status.write_text(status.read_text().replace("1.19.1-1", version))


@pytest.mark.parametrize(("toolkit", "version", "newest", "upgrade"), [
    ("1.18.1-1", "1.1.0", "1.0.0", "1.18.2"), ("1.17.8-1", "1.0.0", "0.8.0", "1.18.0"),
    ("1.15.0-1", "0.8.0", "0.7.0", "1.16.0")])
def test_a_spec_newer_than_the_runtimes_cdi_takes_fails_as_the_runtime_refuses_it(
        tmp_path: Path, toolkit: str, version: str, newest: str, upgrade: str) -> None:
    # the runtime's own CDI (nvidia-container-toolkit's go.mod) refuses the spec whole:
    # no GPU of it resolves, every GPU task fails to start, and the doctor passed
    root = _root(tmp_path, version)
    _toolkit(root, toolkit)
    c = _check(root, "20.10.24")
    assert c["status"] == str(Status.FAIL), c
    assert (f"(/etc/cdi/nvidia.yaml has cdiVersion {version}, newer than the {newest} "
            f"toolkit {toolkit}'s CDI takes (the runtime refuses the spec): set "
            f"cdiVersion: 0.3.0 (what its content needs), or upgrade "
            f"nvidia-container-toolkit to {upgrade} or later)") in c["found"], c


@pytest.mark.parametrize(("toolkit", "version"), [
    ("1.18.2-1", "1.1.0"), ("1.18.0-1", "1.0.0"), ("1.16.0-1", "0.8.0")])
def test_a_spec_the_runtimes_cdi_takes_passes(tmp_path: Path, toolkit: str,
                                              version: str) -> None:
    root = _root(tmp_path, version)
    _toolkit(root, toolkit)
    assert _check(root, "20.10.24")["status"] == str(Status.OK)


def test_a_toolkit_version_of_an_epoch_is_read_as_the_runtime_check_reads_it(
        tmp_path: Path) -> None:
    # dpkg's EPOCH:VERSION: the toolkit's mode check read 1.17.8, the CDI check nothing
    root = _root(tmp_path, "1.1.0")
    _toolkit(root, "1:1.17.8-1")
    c = _check(root, "20.10.24")
    assert c["status"] == str(Status.FAIL), c
    assert "newer than the 0.8.0 toolkit 1:1.17.8-1's CDI takes" in c["found"], c


def test_a_toolkit_version_past_any_number_is_not_read_and_stops_no_check(
        tmp_path: Path) -> None:
    # int() of 4,301 digits or more raises ValueError: the doctor ended in a traceback
    root = _root(tmp_path, "1.1.0")
    _toolkit(root, "1" * 5000 + ".0.0-1")
    assert _check(root, "20.10.24")["status"] == str(Status.OK)


@pytest.mark.parametrize("server", [
    "\u0662\u0669.\u0662.\u0660", "\uff12\uff19.2.0", "1" * 5000 + ".0.0", "29.2.0123456789"])
def test_an_engine_version_of_other_digits_or_past_any_release_is_not_read(
        server: str) -> None:
    # (re's \d is any Unicode digit, and int() takes them: Arabic-Indic 29.2.0 was 29.2.0)
    from swarmgpu.agent.doctor.cdispec import DOCKER_CDI, TOOLKIT_CDI, newest_taken

    assert newest_taken(DOCKER_CDI, server) is None
    assert newest_taken(TOOLKIT_CDI, server) is None


def _beside(root: Path, version: str, names: str) -> None:
    """/etc/cdi/new.yaml of ``cdiVersion`` ``version`` beside the tree's nvidia.yaml,
    naming ``names`` (one GPU or both, ``,``-separated)."""
    devices = "".join(f"  - name: {n}\n    {EDITS}\n" for n in names.split(","))
    (root / "etc/cdi/new.yaml").write_text(
        f"cdiVersion: {version}\nkind: nvidia.com/gpu\ndevices:\n{devices}")


def test_a_too_new_spec_beside_a_good_one_is_refused_alone_as_the_runtime_refuses_it(
        tmp_path: Path) -> None:
    # CDI's Cache.refresh (every release to v1.1.0) records the refused spec's error for
    # its path alone and loads the other specs: the good one's GPUs resolve (no conflict
    # with the refused one's, whose devices are never added), so a WARN naming it
    root = _root(tmp_path, "0.5.0")
    _beside(root, "0.8.0", f"{UA},{UB}")
    _toolkit(root, "1.15.0-1")
    c = _check(root, "20.10.24")
    assert c["status"] == str(Status.WARN), c
    assert c["found"].startswith("mode cdi; /etc/cdi/nvidia.yaml names each GPU advertised "
                                 "(/etc/cdi/new.yaml has cdiVersion 0.8.0, newer than the "
                                 "0.7.0 toolkit 1.15.0-1's CDI takes"), c
    assert "conflicting" not in c["why"] and "neither" not in c["found"], c


def test_a_gpu_only_a_too_new_spec_names_fails_beside_a_good_one(tmp_path: Path) -> None:
    root = _root(tmp_path, "0.5.0")
    (root / "etc/cdi/nvidia.yaml").write_text(
        f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: {UA}\n    {EDITS}\n")
    _beside(root, "0.8.0", UB)
    _toolkit(root, "1.15.0-1")
    c = _check(root, "20.10.24")
    assert c["status"] == str(Status.FAIL), c
    assert c["found"].startswith(f"/etc/cdi/nvidia.yaml names no device {UB} "
                                 "(/etc/cdi/new.yaml has cdiVersion 0.8.0, newer than"), c


def test_dockerd_refuses_the_too_new_spec_alone_beside_a_good_one(tmp_path: Path) -> None:
    # (dockerd's CDI cache, the same refresh: `docker run --device` of the good one's works)
    # (a device of its own: the runtime, whose CDI takes 0.7.0, resolves both specs)
    root = _root(tmp_path, "0.5.0")
    _beside(root, "0.7.0", "extra")
    c = _check(root, "26.0.2")
    assert c["status"] == str(Status.WARN), c
    assert ("(Docker 26.0.2's CDI takes cdiVersion 0.6.0 at most and refuses "
            "/etc/cdi/new.yaml (cdiVersion 0.7.0))") in c["found"], c
    assert "nvidia.yaml (cdiVersion" not in c["found"], c
