"""`docker.daemon-keys`: a daemon.json key dockerd does not know stops dockerd from
starting ("the following directives don't match any configuration option")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from swarmgpu.agent.doctor import Check, Status, run_doctor

ROOTS = Path(__file__).parent / "doctor_roots"


def _keys_check(tmp_path: Path, **extra: Any) -> tuple[Check, int]:
    """docker.daemon-keys of the healthy root with ``extra`` keys in its daemon.json."""
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "healthy", root)
    daemon_path = root / "etc/docker/daemon.json"
    daemon = json.loads(daemon_path.read_text())
    daemon.update({k.replace("_", "-"): v for k, v in extra.items()})
    daemon_path.write_text(json.dumps(daemon))
    text, code = run_doctor(str(root), as_json=True)
    (c,) = [c for c in json.loads(text)["checks"] if c["id"] == "docker.daemon-keys"]
    return Check(c["id"], Status(c["status"]), c["found"], c["why"], c["fix"]), code


def test_a_misspelt_key_fails_naming_it_and_the_key_meant(tmp_path: Path) -> None:
    c, code = _keys_check(tmp_path, default_runtim="nvidia")
    assert code == 1 and c.status is Status.FAIL, c
    assert '"default-runtim"' in c.found and "don't match any configuration option" in c.why
    assert 'did you mean "default-runtime"?' in c.found, c
    assert "systemctl restart docker" in c.fix and '"default-runtim"' in c.fix, c


def test_keys_of_an_unknown_object_are_what_dockerd_names(tmp_path: Path) -> None:
    # dockerd reads an object's keys as top-level options (moby configValuesSet): of
    # "runtime": {"nvidia": ...} it names "nvidia"
    c, _ = _keys_check(tmp_path, runtime={"nvidia": {"path": "nvidia-container-runtime"}})
    assert c.status is Status.FAIL, c
    assert '"nvidia" (inside "runtime")' in c.found and '"runtimes"' in c.found, c


def test_keys_dockerd_reads_pass(tmp_path: Path) -> None:
    c, code = _keys_check(
        tmp_path,
        proxies={"http-proxy": "http://proxy:3128", "no-proxy": "localhost"},
        log_opts={"max-size": "10m", "anything": "the driver checks it"},
        features={"cdi": True},
        builder={"gc": {"enabled": True}},
        default_ulimits={"nofile": {"Name": "nofile", "Hard": 64000, "Soft": 64000}},
        live_restore=True,
        min_api_version="1.24",
    )
    assert code == 0 and c.status is Status.OK, c


def test_a_flag_name_dockerd_accepts_but_ignores_warns(tmp_path: Path) -> None:
    # --node-generic-resource is a flag, so dockerd starts; the file's key is the plural
    c, code = _keys_check(tmp_path, node_generic_resource=["NVIDIA-GPU=GPU-x"])
    assert code == 0 and c.status is Status.WARN, c
    assert '"node-generic-resource"' in c.found and '"node-generic-resources"' in c.fix, c


def test_a_case_slip_is_unknown_with_the_key_meant(tmp_path: Path) -> None:
    c, _ = _keys_check(tmp_path, Live_Restore=True)
    assert c.status is Status.FAIL and 'did you mean "live-restore"?' in c.found, c
