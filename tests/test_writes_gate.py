"""Every engine write goes through the actuator's gate (``actuator.Writes``), and the gate
refuses a write that would replace a task without a decision.

The scan reads every module of the package: a call of one of the client's write methods,
or of a docker SDK method that writes to the engine, outside the gate and the client
that defines them, fails the test (with the place named). The scan is shown to catch
such calls, written the ways a module could write them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import pytest

from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.taskspec import restarts_on, task_changes

PACKAGE = Path(__file__).resolve().parent.parent / "swarmgpu"
# The client's writes: only the gate calls them.
CLIENT_WRITES = {"update_node_labels", "update_service_spec", "update_swarm_labels",
                 "_post_service_update", "_post_swarm_update"}
GATE = {"swarmgpu/manager/engine/actuator.py"}
CLIENT = {"swarmgpu/swarm/client.py"}


@functools.cache
def sdk_writes() -> frozenset[str]:
    """The docker SDK's low-level methods that write to the engine (POST, PUT, DELETE)."""
    out: set[str] = set()
    for name, fn in inspect.getmembers(docker.APIClient, inspect.isfunction):
        if name.startswith("_"):
            continue
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        if re.search(r"self\._(post|put|delete)\w*\(", src):
            out.add(name)
    return frozenset(out)


# A docker SDK write is one through an object that reads as a docker client, or any
# call of such a name in a module that imports the SDK (the simulator's in-memory world
# and the allocator have methods of the same names, and write no engine). Generic names
# also used for threads, processes and timers count only through a docker-ish object.
COMMON = {"start", "stop", "kill", "wait", "restart", "pause", "unpause", "attach",
          "build", "pull", "push", "prune", "remove", "update", "create", "commit",
          "resize", "rename", "export", "put_archive", "init", "join", "leave", "connect",
          "disconnect", "login", "exec_start", "exec_create", "exec_resize", "upgrade"}
DOCKERISH = re.compile(r"(^|[._])(api|_api|docker|client|engine|cli)($|[._])", re.I)


def violations(source: str, where: str) -> list[str]:
    """Calls in ``source`` that write to the engine outside the gate."""
    writes = sdk_writes()
    out: list[str] = []
    tree = ast.parse(source)
    sdk = any((isinstance(n, ast.Import) and any(a.name.split(".")[0] == "docker"
                                                for a in n.names))
              or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "docker")
              for n in ast.walk(tree))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        receiver = ast.unparse(node.func.value)
        if name in CLIENT_WRITES and where not in GATE | CLIENT:
            out.append(f"{where}:{node.lineno}: {receiver}.{name}(...) writes outside "
                       "actuator.Writes")
        elif name in writes and where not in CLIENT and (
                DOCKERISH.search(receiver) or (sdk and name not in COMMON)):
            out.append(f"{where}:{node.lineno}: {receiver}.{name}(...) is a docker SDK write "
                       "outside the client and its gate")
    return out


def test_every_write_goes_through_the_gate() -> None:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        found += violations(path.read_text(), rel)
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("snippet", [
    "self.swarm.update_node_labels(nid, compute)",
    "swarm.update_service_spec(sid, lambda s: s)",
    "d.swarm.update_swarm_labels(c)",
    "self._api.update_service(sid, version, task_template=tt)",
    "client.api.remove_service('x')",
    "docker.APIClient().create_service(tt)",
    "api.update_node(nid, 1, spec)",
    "self.api.kill(cid)",
])
def test_the_scan_catches_a_write_outside_the_gate(snippet: str) -> None:
    assert violations(snippet, "swarmgpu/manager/somewhere.py"), snippet
    assert violations(f"import docker\nx.{snippet.rsplit('.', 1)[1]}",
                      "swarmgpu/agent/x.py") or snippet.rsplit(".", 1)[1].split("(")[0] \
        in COMMON | CLIENT_WRITES
    assert not violations("threading.Timer(1, f).start(); proc.kill(); t.join(); "
                          "world.remove_service(s)", "swarmgpu/manager/somewhere.py")


# --- the gate: a write that replaces a task needs its decision ----------------------------


class OneObjectSwarm:
    """SwarmClient's three writes over one service spec, one node's and the swarm's
    labels (the client's contract: compute gets what is there, None is no write)."""

    def __init__(self, spec: Mapping[str, Any], labels: Mapping[str, str]) -> None:
        self.spec = dict(spec)
        self.labels = dict(labels)
        self.swarm = {}  # type: dict[str, str]

    def update_service_spec(self, sid: str, compute: Callable[..., Any], **_: Any) -> bool:
        new = compute(self.spec)
        if new is None or new == self.spec:
            return False
        self.spec = dict(new)
        return True

    def update_node_labels(self, nid: str, compute: Callable[..., Any], **_: Any) -> bool:
        new = compute(self.labels)
        if new is None or dict(new) == self.labels:
            return False
        self.labels = dict(new)
        return True

    def update_swarm_labels(self, compute: Callable[..., Any], **_: Any) -> bool:
        new = compute(self.swarm)
        if new is None:
            return False
        self.swarm = dict(new)
        return True


SPEC: dict[str, Any] = {"Name": "s", "Labels": {"a": "1"},
        "TaskTemplate": {"ContainerSpec": {"Image": "x", "Env": ["A=1"]},
                         "Placement": {"Constraints": ["node.labels.swarmgpu.service.s==true"]},
                         "ForceUpdate": 0}}


def with_env(spec: Mapping[str, Any], *env: str) -> dict[str, Any]:
    tt = dict(spec["TaskTemplate"])
    tt["ContainerSpec"] = {**tt["ContainerSpec"], "Env": [*tt["ContainerSpec"]["Env"], *env]}
    return {**spec, "TaskTemplate": tt}


def test_a_task_spec_change_without_a_decision_is_refused() -> None:
    sw = OneObjectSwarm(SPEC, {"swarmgpu.service.s": "true"})
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    assert not gate.service_spec("s", lambda cur: with_env(cur, "B=2"))
    assert sw.spec == SPEC and gate.refused_restarts == 1
    # Labels restart nothing: no decision needed.
    assert gate.service_spec("s", lambda cur: {**cur, "Labels": {"a": "2"}})
    # With a decision it is written, and the decision recorded with what changed.
    assert gate.service_spec("s", lambda cur: with_env(cur, "B=2"), Why("operator", "asked"))
    assert sw.spec["TaskTemplate"]["ContainerSpec"]["Env"] == ["A=1", "B=2"]
    assert gate.decided[-1][1:] == (Why("operator", "asked"), "add env B=2")


def test_closing_a_gate_without_a_decision_is_refused() -> None:
    sw = OneObjectSwarm(SPEC, {"swarmgpu.service.s": "true", "other": "x"})
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]

    def close(cur: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in cur.items() if k != "swarmgpu.service.s"}

    assert not gate.node_labels("n", close)
    assert sw.labels["swarmgpu.service.s"] == "true" and gate.refused_restarts == 1
    assert gate.node_labels("n", lambda cur: {**cur, "other": "y"})  # no gate: no decision
    assert gate.node_labels("n", close, Why("preempt", "room for high"))
    assert "swarmgpu.service.s" not in sw.labels
    # A writer's own default decision (the mover's) covers its writes.
    sw.labels["swarmgpu.service.s"] = "true"
    mover = Writes(sw, dry_run=False, who="m", why=Why("move", "a move"))  # type: ignore[arg-type]
    assert mover.node_labels("n", close)


def test_dry_run_refuses_every_write() -> None:
    sw = OneObjectSwarm(SPEC, {})
    gate = Writes(sw, dry_run=True, who="test")  # type: ignore[arg-type]
    assert not gate.service_spec("s", lambda cur: {**cur, "Labels": {}}, Why("place", "x"))
    assert not gate.swarm_labels(lambda cur: {"k": "v"})
    assert gate.refused == 2 and sw.spec == SPEC and sw.swarm == {}


# --- which writes replace a task (swarmkit's IsTaskDirty) ----------------------------------


def node(labels: Mapping[str, str]) -> SwarmNode:
    return SwarmNode(id="n1", hostname="h", addr="a", role="worker", state="ready",
                     availability="active", labels=dict(labels), engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={})


def with_constraints(spec: Mapping[str, Any], *cons: str) -> dict[str, Any]:
    tt = dict(spec["TaskTemplate"])
    tt["Placement"] = {"Constraints": list(cons)}
    return {**spec, "TaskTemplate": tt}


def test_what_replaces_a_running_task() -> None:
    gated = node({"swarmgpu.service.s": "true"})
    assert task_changes(SPEC, {**SPEC, "Labels": {}}) == []  # labels: nothing
    assert task_changes(SPEC, with_env(SPEC, "B=2")) == ["add env B=2"]
    assert restarts_on(SPEC, with_env(SPEC, "B=2"), [gated])
    forced = {**SPEC, "TaskTemplate": {**SPEC["TaskTemplate"], "ForceUpdate": 1}}
    assert task_changes(SPEC, forced) == ["ForceUpdate 0 -> 1 (every task is replaced)"]
    # A change of placement alone leaves a task whose node satisfies it.
    hold = with_constraints(SPEC, "node.labels.swarmgpu.hold==true")
    assert not restarts_on(hold, SPEC, [gated])  # the hold replaced by a gate it has
    assert restarts_on(SPEC, hold, [gated])  # a constraint its node does not satisfy
    assert restarts_on(SPEC, with_constraints(SPEC, "node.labels.x==1"), [node({})])
    assert not restarts_on(SPEC, with_constraints(SPEC, "node.labels.x==1"),
                           [node({"x": "1"})])


def test_an_endpoint_change_replaces_a_task_and_needs_a_decision() -> None:
    # swarmkit's IsTaskDirty compares the service's EndpointSpec with the one its task
    # was made with, beside the task spec: a write that changes it (published ports, its
    # mode) replaces every task. The gate read the task template alone and let it through
    # with no decision, as "nothing in its task spec".
    ports = {**SPEC, "EndpointSpec": {"Ports": [{"TargetPort": 80, "PublishedPort": 8080}]}}
    assert task_changes(SPEC, ports) == ["change EndpointSpec"]
    assert restarts_on(SPEC, ports, [node({"swarmgpu.service.s": "true"})])
    assert not restarts_on(ports, ports, [node({})])
    sw = OneObjectSwarm(SPEC, {})
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    assert not gate.service_spec("s", lambda cur: {**cur, **ports})
    assert sw.spec == SPEC and gate.refused_restarts == 1
    assert gate.service_spec("s", lambda cur: {**cur, **ports}, Why("operator", "asked"))
    assert gate.decided[-1][2] == "change EndpointSpec"


def test_closing_a_gate_spelled_in_another_case_needs_a_decision() -> None:
    # Swarm compares a constraint's value with the label's case-insensitively: a gate
    # written "True" or "TRUE" (by hand) is open for ``==true``, and its removal stops
    # the task there. The gate counted only "true" as open and let that close undecided.
    for value in ("True", "TRUE"):
        sw = OneObjectSwarm(SPEC, {"swarmgpu.service.s": value})
        gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
        assert not gate.node_labels("n", lambda cur: {})
        assert sw.labels == {"swarmgpu.service.s": value} and gate.refused_restarts == 1
        # Written "true" it stays open: no decision needed.
        assert gate.node_labels("n", lambda cur: {"swarmgpu.service.s": "true"})
