"""``swarmgpu doctor`` fed a ``docker info`` whose inner parts are not what dockerd sends
(a proxy's string where an object goes, a list, null, a number, a megabyte of text):
each check runs; those that read the part fail, naming it and the fix, and they alone
(before, one part not read failed the whole doctor through ``docker.info``, and
``runtime.default`` read a list as Runtimes as "nvidia" not running). Before, a number as
``Runtimes`` or ``GenericResources`` crashed the doctor, and a string as ``Swarm``
crashed its read of Swarm's lists; what it quoted was as long as the engine's text.
The agents' checks read Swarm's lists: a task list that is no list, or a task whose
ServiceID or NodeID is a list, crashed those the same way. Pure: the answers are
given as data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.unread import listed_client, task

from swarmgpu.agent.doctor import READERS, Status, info_problems, run_doctor
from swarmgpu.cli import main
from swarmgpu.cli.node import swarm_read
from swarmgpu.manager.nodes import sync
from swarmgpu.swarm import client as swarm_client
from swarmgpu.swarm.client import SwarmError, task_from_api

ROOT = Path(__file__).parent / "doctor_roots" / "healthy"
INFO = ROOT / ".swarmgpu-fixture" / "docker-info.json"

# Each part the checks read and the type dockerd sends it as (moby system.Info); Go
# sends a nil map or slice as null, which reads as absent.
PARTS: dict[str, type] = {
    "Swarm": dict, "Swarm.LocalNodeState": str, "Swarm.ControlAvailable": bool,
    "Swarm.NodeID": str, "Swarm.Error": str, "DefaultRuntime": str, "Runtimes": dict,
    "GenericResources": list, "CgroupDriver": str, "DockerRootDir": str, "CDISpecDirs": list,
    "ServerVersion": str,
}
NIL = {"Runtimes", "GenericResources", "CDISpecDirs"}
HUGE = "y" * 1_000_000
VALUES: dict[str, Any] = {"text": "x", "list": [1, "a"], "null": None, "number": 7,
                          "bool": True, "object": {"a": 1}, "huge": HUGE}


def _info(**parts: Any) -> dict[str, Any]:
    """The healthy fixture's docker info as a manager's, each dotted part replaced."""
    info: dict[str, Any] = json.loads(INFO.read_text())
    info["Swarm"] = {"LocalNodeState": "active", "NodeID": "n1", "ControlAvailable": True,
                     "Error": ""}
    info["DockerRootDir"] = "/var/lib/docker"
    for dotted, value in parts.items():
        *path, key = dotted.split(".")
        at = info
        for p in path:
            at = at[p]
        at[key] = value
    return info


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A manager's lists read from ``_ListsClient`` (no tasks), never from an engine;
    no agent asked."""
    monkeypatch.setattr(swarm_client, "SwarmClient", lambda timeout_s: _ListsClient([]))
    monkeypatch.setattr(sync, "fetch_agents", lambda client, cfg, nodes: {})


def _doctor(info: dict[str, Any], as_json: bool) -> tuple[str, int]:
    # (an agent on plain HTTP: agent.identity then reads DockerRootDir, and only warns)
    return run_doctor(str(ROOT), docker_info=info, as_json=as_json, engine_probed=True,
                      agent_probed=True, agent_scheme="http", agents_service="swarmgpu_agent",
                      swarm=swarm_read(info, None, "swarmgpu_agent", "swarmgpu.", ""))


def _failed(out: str) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in json.loads(out)["checks"] if c["status"] == "fail"}


def _named(part: str, value: Any) -> str | None:
    """What the checks reading ``part`` say of it as ``value``; None: it reads."""
    if (value is None and part in NIL) or type(value) is PARTS[part]:
        # a list's entries are each read: [1, "a"] holds no generic resource, no text
        if value == [1, "a"]:
            return {"GenericResources": "docker info's GenericResources[0] is ",
                    "CDISpecDirs": "docker info's CDISpecDirs holds 1"}[part]
        return None
    return f"docker info's {part} is "


@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize("part", sorted(PARTS))
def test_a_part_of_another_type_fails_only_the_checks_that_read_it(part: str,
                                                                    kind: str) -> None:
    info = _info(**{part: VALUES[kind]})
    out, code = _doctor(info, as_json=True)
    failed = _failed(out)  # valid JSON whatever came
    text, _ = _doctor(info, as_json=False)
    # a megabyte of the engine's text is never quoted whole
    assert max(len(line) for line in (*out.splitlines(), *text.splitlines())) < 2000
    named = _named(part, VALUES[kind])
    if named is None:  # (a value of its type may be a finding, its own checks' alone)
        assert set(failed) <= set(READERS[part]), failed
        assert not any("docker info's" in c["found"] for c in failed.values()), failed
        return
    assert sorted(failed) == sorted(READERS[part]) and code == 1, failed
    for cid, c in failed.items():
        assert named in c["found"] and "proxy in front of the engine" in c["fix"], c
        assert f"FAIL  {cid}: {named}" in text, text[:500]


@pytest.mark.parametrize("entry", [
    "NVIDIA-GPU=GPU-1", None, 7, [1],
    {"NamedResourceSpec": "GPU-1"},
    {"NamedResourceSpec": {"Kind": ["NVIDIA-GPU"], "Value": "GPU-1"}},
    {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "two"}},
])
def test_a_generic_resource_entry_not_read_is_named_and_left_out(entry: Any) -> None:
    info = _info(GenericResources=[entry, *_info()["GenericResources"]])
    problems = info_problems(info)
    assert len(problems) == 1 and "docker info's GenericResources[0]" in problems[0]
    out, _ = _doctor(info, as_json=True)
    # (compared without it, dockerd's list would differ from daemon.json's for nothing)
    (c,) = _failed(out).values()
    assert c["id"] == "resources.generic" and "GenericResources[0]" in c["found"], c


def test_a_well_formed_info_adds_no_finding_and_reads_as_before() -> None:
    out, code = _doctor(_info(), as_json=True)
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert not _failed(out) and code == 0, checks
    assert checks["docker.engine"]["found"] == "dockerd answers; Swarm manager, node n1"
    assert checks["runtime.default"]["found"].endswith("the running dockerd agrees")


def test_swarm_not_an_object_says_so_for_the_swarm_read() -> None:
    read = swarm_read(_info(Swarm="active"), None, "swarmgpu_agent", "swarmgpu.", "")
    assert read.error is not None and "docker info's Swarm is str 'active'" in read.error
    read = swarm_read(_info(**{"Swarm.ControlAvailable": "true"}), None, "x", "p.", "")
    assert read.error is not None and "Swarm.ControlAvailable is str" in read.error


def test_doctor_json_of_a_fixture_tree_with_such_an_info_is_valid_json(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOT, root, symlinks=True)
    (root / ".swarmgpu-fixture/docker-info.json").write_text(
        json.dumps(_info(Runtimes=7, CgroupDriver=["systemd"])))
    res = CliRunner().invoke(main, ["doctor", "--root", str(root), "--json"])
    assert res.exit_code == 1, res.output
    failed = _failed(res.output)
    assert sorted(failed) == ["cgroup.dev-char-links", "runtime.default"], failed
    assert "Runtimes is int 7" in failed["runtime.default"]["found"], failed
    assert "CgroupDriver is list" in failed["cgroup.dev-char-links"]["found"], failed


def test_runtimes_a_list_fails_runtime_default_alone_and_the_rest_report() -> None:
    out, code = _doctor(_info(Runtimes=["nvidia", "runc"]), as_json=True)
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 1 and list(_failed(out)) == ["runtime.default"], checks
    # (before, read as no runtimes: "the running dockerd uses nvidia", a restart advised)
    assert checks["runtime.default"]["found"].startswith("docker info's Runtimes is list")
    assert checks["docker.engine"]["status"] == "ok", checks["docker.engine"]
    assert checks["resources.generic"]["status"] == "ok", checks["resources.generic"]


def test_a_part_no_check_reads_fails_nothing() -> None:
    out, code = _doctor(_info(**{"Swarm.Nodes": "3"}), as_json=True)
    assert code == 0 and not _failed(out), out


def test_a_top_level_answer_that_is_no_object_still_fails_the_doctor(
        tmp_path: Path) -> None:
    # live: the engine's answer is not read at all (cli.node._docker_info says why)
    out, code = run_doctor(str(ROOT), as_json=True, engine_probed=True, docker_error=(
        "docker info: the engine's answer is no JSON object (a list): it is not read"))
    assert code == 1 and list(_failed(out)) == ["docker.engine"], out
    # a fixture tree's: the doctor cannot run at all
    root = tmp_path / "root"
    shutil.copytree(ROOT, root, symlinks=True)
    (root / ".swarmgpu-fixture/docker-info.json").write_text("[]")
    res = CliRunner().invoke(main, ["doctor", "--root", str(root), "--json"])
    assert res.exit_code == 2 and "expected a JSON object" in res.output, res.output


# --- Swarm's lists, as the agents' checks read them -----------------------------------


@pytest.mark.parametrize("listed", [None, 7, True, "tasks", {"ID": "t"}])
def test_a_task_list_that_is_no_list_is_the_engines_error(listed: Any) -> None:
    with pytest.raises(SwarmError, match="the engine's task list is"):
        listed_client(listed).tasks()


@pytest.mark.parametrize("field", ["ServiceID", "NodeID", "DesiredState"])
@pytest.mark.parametrize("value", [["s"], {"a": 1}, 7])
def test_a_task_field_of_another_type_is_named(field: str, value: Any) -> None:
    with pytest.raises(SwarmError, match=f"{field} is .*, not a text"):
        task_from_api(task(**{field: value}))
    with pytest.raises(SwarmError, match=r"Status\.State is .*, not a text"):
        task_from_api(task(Status={"State": value}))


@pytest.mark.parametrize("tasks", [None, 7, [task(ServiceID=["s"])], [task(NodeID={})]])
def test_the_agents_check_names_a_task_list_not_read_and_does_not_crash(
        monkeypatch: pytest.MonkeyPatch, tasks: Any) -> None:
    monkeypatch.setattr(swarm_client, "SwarmClient",
                        lambda timeout_s: _ListsClient(tasks))
    read = swarm_read(_info(), None, "swarmgpu_agent", "swarmgpu.", "")
    out, _ = run_doctor(str(ROOT), as_json=True, agents_service="swarmgpu_agent",
                        swarm=read)
    (c,) = [c for c in json.loads(out)["checks"] if c["id"] == "agents.service"]
    assert c["status"] == str(Status.SKIP) and "task" in c["found"], c


class _ListsClient:
    """A manager's engine listing one agents' service, a GPU node and ``tasks``."""

    def __init__(self, tasks: Any) -> None:
        self.client = listed_client(tasks)

    def services(self) -> list[Any]:
        return [swarm_client.service_from_api(
            {"ID": "s", "Spec": {"Name": "swarmgpu_agent", "TaskTemplate": {}}})]

    def tasks(self, filters: Any = None) -> list[Any]:
        return self.client.tasks(filters)

    def nodes(self) -> list[Any]:
        return []

    def unkeyed(self) -> Any:
        return self.client.unkeyed()


def test_a_named_generic_resource_without_value_reads_as_empty_not_unread() -> None:
    # Go's NamedGenericResource.Value is omitempty: dockerd advertises "SPARE=" (swarmkit
    # genericresource.Parse: '' is no number, so a named value) without it
    from swarmgpu.agent.doctor.resources import from_docker_info

    info = _info(GenericResources=[{"NamedResourceSpec": {"Kind": "SPARE"}}])
    assert info_problems(info) == []
    assert [(r.kind, r.value) for r in from_docker_info(info) or []] == [("SPARE", "")]


def test_a_discrete_generic_resource_of_zero_reads_as_zero_not_unread() -> None:
    # Go's DiscreteGenericResource.Value is omitempty: dockerd sends a 0 without it
    from swarmgpu.agent.doctor.resources import from_docker_info

    info = _info(GenericResources=[{"DiscreteResourceSpec": {"Kind": "SPARE"}}])
    assert info_problems(info) == []
    assert [(r.kind, r.value) for r in from_docker_info(info) or []] == [("SPARE", "0")]
