"""A service spec part that is not what Docker sends (a proxy's string where an object or
a list goes) fails that one service, naming the field and the fix: in ``audit``, the
grants check and a preemption victim's choice and write; the other services go on.
Before, each raised an AttributeError (or read a string's characters) that failed the
whole audit, the grants step or the preemption."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.forged import DGX_F, R4090_F, T_UUID, RecordingSwarm, sw_node, sw_svc, victim_cluster
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig, PreemptionConfig
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.cycle.grants import ImageEnvs, void_one
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.victimspec import victim_spec
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.envs import env_template
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.grants import find_ungranted, images_to_read
from swarmgpu.manager.services.overshare import Restarter, ServiceUse
from swarmgpu.swarm.client import SwarmService, SwarmTask, service_from_api
from swarmgpu.swarm.specread import UnreadSpec, spec_count

P = "swarmgpu."


@pytest.fixture
def errors() -> Iterator[list[str]]:
    yield from log_lines("ERROR")
GPU_RES = {"Reservations": {"GenericResources": [
    {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}]}}


def _service(name: str, spec: dict[str, Any]) -> SwarmService:
    return SwarmService(id=f"id-{name}", name=name, labels={}, constraints=(), env=(),
                        mode="replicated", replicas=1, max_replicas_per_node=None,
                        version=1, spec={"Name": name, **spec})


# (the spec's TaskTemplate, the field the finding names)
UNREAD_RESOURCES = [
    ("x", "TaskTemplate"),
    ({"Resources": "x"}, "TaskTemplate.Resources"),
    ({"Resources": {"Reservations": "x"}}, "TaskTemplate.Resources.Reservations"),
    ({"Resources": {"Reservations": {"GenericResources": "x"}}}, "GenericResources"),
    ({"Resources": {"Reservations": {"GenericResources": ["x"]}}}, "GenericResources[]"),
]


@pytest.mark.parametrize(("tt", "field"), UNREAD_RESOURCES)
def test_audit_names_an_unreadable_reservation_as_that_services_finding(
        tt: Any, field: str) -> None:
    plain = _service("plain", {"TaskTemplate": {"Resources": GPU_RES}})
    bad = _service("bad", {"TaskTemplate": tt})
    found = audit(Snapshot(nodes=[], services=[bad, plain], tasks=[], facts={}))
    assert [(f.kind, f.subject) for f in found] == [
        ("unreadable-spec", "bad"), ("swarm-gpu-reservation", "plain")]
    assert field in found[0].message and "Docker sends" in found[0].message
    assert "check any proxy" in found[0].message  # the fix
    assert not found[0].advisory


# --- grants: that service listed with the reason, never written; the others go on -------

def _task(svc: SwarmService, nid: str) -> SwarmTask:
    return SwarmTask(f"t-{svc.name}", svc.id, nid, 1, "running", "running", ())


def _app(name: str, tt: Any = None) -> SwarmService:
    good = {"ContainerSpec": {"Image": "local/app:1", "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    return _service(name, {"TaskTemplate": good if tt is None else tt})


# (the spec's parts, the field the reason names)
UNREAD_GRANTS = [
    ({"TaskTemplate": "x"}, "TaskTemplate"),
    ({"TaskTemplate": {"ContainerSpec": "x"}}, "TaskTemplate.ContainerSpec"),
    ({"TaskTemplate": {"ContainerSpec": {"Env": "A=1"}}}, "ContainerSpec.Env"),
    ({"TaskTemplate": {"ContainerSpec": {"Mounts": 5}}}, "ContainerSpec.Mounts"),
    ({"TaskTemplate": {"Resources": "x"}}, "TaskTemplate.Resources"),
    ({"TaskTemplate": {"Resources": {"Reservations": "x"}}},
     "TaskTemplate.Resources.Reservations"),
    ({"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": ["x"]}}}},
     "GenericResources[]"),
    ({"Labels": 5}, "Labels"),
]


@pytest.mark.parametrize(("parts", "field"), UNREAD_GRANTS)
def test_grants_list_an_unreadable_service_with_the_field_and_check_the_others(
        parts: dict[str, Any], field: str) -> None:
    bad = _service("bad", parts)
    app = _app("app")
    tasks = [_task(bad, "g"), _task(app, "g")]
    gpu = {"g": "gpu-1"}
    assert images_to_read([bad, app], tasks, gpu, P) == ["local/app:1"]
    found = find_ungranted([bad, app], tasks, gpu, prefix=P, managed=set(), images={})
    assert [u.service for u in found] == ["app", "bad"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in found[0].reason
    u = found[1]
    assert field in u.reason and "Docker sends" in u.reason
    assert not u.known and not u.voidable  # unknown, so listed; never written to
    assert "make its spec readable" in u.fix


# Labels that are no object beside swarmgpu's device template: its labels are read for
# the template's grant (before: a TypeError or AttributeError failed the whole step)
TEMPLATED = {"ContainerSpec": {"Image": "local/app:1", "Env": [env_template(P)]}}


@pytest.mark.parametrize("labels", [5, True, [1], ["x"]])
def test_grants_list_a_templated_service_whose_labels_cannot_be_read(
        labels: Any, errors: list[str]) -> None:
    bad = _service("bad", {"Labels": labels, "TaskTemplate": TEMPLATED})
    app = _app("app")
    tasks = [_task(bad, "g"), _task(app, "g")]
    found = find_ungranted([bad, app], tasks, {"g": "gpu-1"}, prefix=P, managed=set(),
                           images={})
    assert [u.service for u in found] == ["app", "bad"]
    u = found[1]
    assert "Labels is" in u.reason and "Docker sends" in u.reason and not u.voidable
    (ua,) = find_ungranted([app], tasks[1:], {"g": "gpu-1"}, prefix=P, managed=set(),
                           images={})
    sw = _Specs({"Name": "app", "Labels": labels, "TaskTemplate": TEMPLATED})
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    assert not void_one(gate, ua, prefix=P, managed=False, grants="env",
                        images=ImageEnvs(sw))  # type: ignore[arg-type]
    assert sw.writes == 0 and any("Labels is" in line for line in errors)


class _Specs:
    """swarmgpu's SwarmClient's read-modify-write over one in-memory spec."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.writes = 0

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **_: Any) -> bool:
        new = compute(copy.deepcopy(self.spec))
        if new is None or new == self.spec:
            return False
        self.writes += 1
        return True


@pytest.mark.parametrize(("parts", "field"), UNREAD_GRANTS[:4])
def test_a_void_write_on_a_spec_unreadable_at_write_time_writes_nothing(
        parts: dict[str, Any], field: str, errors: list[str]) -> None:
    app = _app("app")
    (u,) = find_ungranted([app], [_task(app, "g")], {"g": "gpu-1"}, prefix=P,
                          managed=set(), images={})
    sw = _Specs({"Name": "app", **parts})  # what Swarm answers when the write reads it
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    landed = void_one(gate, u, prefix=P, managed=False, grants="env",
                      images=ImageEnvs(sw))  # type: ignore[arg-type]
    assert not landed and sw.writes == 0
    assert any("cannot be read" in line and field in line for line in errors)


# Task spec parts the void leaves as they are but the write's change list reads (before:
# an AttributeError or ValueError out of the whole grants step, no later service voided)
UNREAD_TASK_PARTS = [({"Placement": "x"}, "TaskTemplate.Placement"),
                     ({"Placement": {"Constraints": 5}}, "Placement.Constraints"),
                     ({"ForceUpdate": "lots"}, "TaskTemplate.ForceUpdate")]


@pytest.mark.parametrize(("part", "field"), UNREAD_TASK_PARTS)
def test_a_void_write_whose_other_task_spec_parts_cannot_be_read_writes_nothing(
        part: dict[str, Any], field: str, errors: list[str]) -> None:
    app = _app("app")
    (u,) = find_ungranted([app], [_task(app, "g")], {"g": "gpu-1"}, prefix=P,
                          managed=set(), images={})
    sw = _Specs({"Name": "app", "TaskTemplate": {**app.spec["TaskTemplate"], **part}})
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    assert not void_one(gate, u, prefix=P, managed=False, grants="env",
                        images=ImageEnvs(sw))  # type: ignore[arg-type]
    assert sw.writes == 0
    assert any("cannot be read" in line and field in line for line in errors)


def test_an_unreadable_count_outside_a_reservation_is_not_told_to_fix_a_reservation(
        ) -> None:
    with pytest.raises(UnreadSpec) as got:
        spec_count("lots", "TaskTemplate.ForceUpdate")
    assert "reservation" not in str(got.value) and "check any proxy" in str(got.value)
    with pytest.raises(UnreadSpec, match="update the service's reservation"):
        spec_count("lots", "TaskTemplate.Resources.Reservations.NanoCPUs")


@pytest.mark.parametrize(("part", "field"), [
    ({"ContainerSpec": {"Image": "busybox", "Env": "A=1"}}, "ContainerSpec.Env"),
    ({"Placement": {"Constraints": "node.role==worker"}}, "Placement.Constraints")])
def test_placement_writes_no_text_back_as_its_letters_for_env_or_constraints(
        part: dict[str, Any], field: str) -> None:
    """Before, placed: its next write put back ["A", "=", "1"] (the change list read the
    text's letters as lines, as ``service_compute`` does)."""
    base = victim_cluster({})
    svcs = [service_from_api({"ID": s.id, "Version": {"Index": 1}, "Spec": {
        **s.spec, "TaskTemplate": {**s.spec["TaskTemplate"], **part}}})
        if s.name == "third" else s for s in base.services()]
    snap = Snapshot(base.nodes(), svcs, base.tasks(), {}, swarm_labels=base.swarm_labels())
    (third,) = [sp for sp in make_plan(snap, Config()).services if sp.name == "third"]
    assert third.status == "failed" and field in (third.reason or "")


# --- a preemption victim: never chosen on an unreadable spec, skipped at its write -------

R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
UNREAD_VICTIM = [
    ({"Placement": "x"}, "TaskTemplate.Placement"),
    ({"Placement": {"Constraints": "node.role==worker"}}, "Placement.Constraints"),
    ({"ContainerSpec": {"Env": "A=1"}}, "ContainerSpec.Env"),
    ({"ForceUpdate": "lots"}, "TaskTemplate.ForceUpdate"),  # (the write's change list)
]


def _holders(bad_a: dict[str, Any] | None = None, *, wants: int = 2,
             bad: str = "a") -> RecordingSwarm:
    """a and b (priority 0, 2 GPUs each) and filler (not preemptible, 4) fill n-4090;
    h1 (priority 100) wants ``wants`` RTX 4090s: a is the victim (by name; both for 4),
    unless its TaskTemplate has ``bad_a``'s parts (``bad``'s, where named)."""
    held = {"a": R[:2], "b": R[2:4], "filler": R[4:]}
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    svcs = [sw_svc(name, {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(uuids),
                          **({f"{P}priority": "50", f"{P}preemptible": "false"}
                             if name == "filler" else {})})
            for name, uuids in held.items()]
    svcs.append(sw_svc("h1", {f"{P}gpus": str(wants), f"{P}gpu-product": "*RTX 4090*",
                              f"{P}priority": "100"}))
    if bad_a is not None:
        i = [s.name for s in svcs].index(bad)
        a = svcs[i]
        svcs[i] = dataclasses.replace(a, spec={**a.spec, "TaskTemplate": {
            **a.spec["TaskTemplate"], **bad_a}})
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "h1" else "n-4090", 1,
                       "pending" if s.name == "h1" else "running", "running", ())
             for s in svcs]
    return RecordingSwarm(nodes, svcs, tasks)


def _cycle(sw: RecordingSwarm, snap_of: RecordingSwarm | None = None) -> list[Any]:
    of = snap_of or sw
    snap = Snapshot(of.nodes(), of.services(), of.tasks(), {}, swarm_labels=of.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    return Preempter(cfg).cycle(sw, snap, make_plan(snap, cfg), FACTS,  # type: ignore[arg-type]
                                now=5000.0)


@pytest.fixture
def said() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def test_a_holder_whose_spec_the_victim_write_cannot_read_is_never_chosen(
        said: list[str]) -> None:
    assert [v.service for p in _cycle(_holders()) for v in p.victims] == ["a"]  # as a rule
    sw = _holders({"Placement": "x"})
    done = _cycle(sw)
    assert [(p.service, [v.service for v in p.victims]) for p in done] == [("h1", ["b"])]
    assert gate_key(P, "a") in sw.node("n-4090").labels  # a left as it is
    assert gate_key(P, "b") not in sw.node("n-4090").labels
    assert not [ln for ln in said if "failed unexpectedly" in ln]
    (why,) = [ln for ln in said if "not taken as a victim" in ln]
    assert "TaskTemplate.Placement" in why and "check any proxy" in why


@pytest.mark.parametrize(("bad", "field"), UNREAD_VICTIM)
def test_a_victim_whose_spec_is_unreadable_at_its_write_is_skipped_with_the_reason(
        bad: dict[str, Any], field: str, said: list[str]) -> None:
    sw = _holders(bad)
    assert _cycle(sw, snap_of=_holders()) == []  # chosen on the snapshot's readable spec
    assert gate_key(P, "a") in sw.node("n-4090").labels  # none stopped
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-a").labels
    assert not [ln for ln in said if "failed unexpectedly" in ln]
    (why,) = [ln for ln in said if "a skipped, its spec cannot be read" in ln]
    assert field in why and "none of a stopped for h1" in why


@pytest.mark.parametrize(("bad", "field"), UNREAD_VICTIM)
def test_the_victim_write_with_a_renewal_names_the_unreadable_part(
        bad: dict[str, Any], field: str) -> None:
    spec = {"Name": "v", "Labels": {P + "devices.n1": "0"}, "TaskTemplate": bad}
    renew = SimpleNamespace(version=2)
    with pytest.raises(UnreadSpec, match=field.replace(".", r"\.")):
        victim_spec(P, "n1", "rec", renew)(spec)  # type: ignore[arg-type]


def test_a_victim_set_with_a_spec_unreadable_at_write_time_is_written_none_of(
        said: list[str]) -> None:
    assert [v.service for p in _cycle(_holders(wants=4)) for v in p.victims] == ["a", "b"]
    sw = _holders({"Placement": "x"}, wants=4, bad="b")
    assert _cycle(sw, snap_of=_holders(wants=4)) == []  # chosen on readable specs
    # a's write (a job's would run it anew: stopped) never made for a set not stopped
    assert [c for c in sw.calls if c[0] != "swarm"] == []  # (the hour taken, given back)
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-a").labels
    (why,) = [ln for ln in said if "b skipped, its spec cannot be read" in ln]
    assert "TaskTemplate.Placement" in why and "none of a, b stopped for h1" in why


# --- an over-share restart: that one not done, nothing written --------------------------

def test_an_overshare_restart_of_a_spec_with_unreadable_labels_is_not_done(
        tmp_path: Path, said: list[str]) -> None:
    base = victim_cluster({})
    third = base.service("id-third")
    svcs = [dataclasses.replace(s, spec={**s.spec, "Labels": "x"}) if s is third else s
            for s in base.services()]
    sw = RecordingSwarm(base.nodes(), svcs, base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=1.0)  # type: ignore[arg-type]
    u = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                   ("t-third",), (), ())
    assert not r._bounce(sw.service("id-third"), u, MOVED_AT)
    assert sw.calls == []  # no mark, no gate closed
    (why,) = [ln for ln in said if "over-share restart of third" in ln]
    assert "Labels is str" in why and "check any proxy" in why


def test_plan_and_status_say_a_holder_passed_over_for_its_unreadable_spec() -> None:
    """The daemon logged that a holder whose spec its victim write cannot read is not
    taken as a victim, but `plan` (text, JSON) and `status` said nothing of it: a
    preemptor's wait had no cause shown. Its plan now says it, the field and the fix."""
    from swarmgpu.manager.commands.plan import render_plan
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
    from swarmgpu.manager.web.cluster_view import render_status

    of = _holders({"Placement": "x"})
    snap = Snapshot(of.nodes(), of.services(), of.tasks(), {}, swarm_labels=of.swarm_labels())
    plan = plan_as_daemon(snap, Config(preemption=PreemptionConfig(dry_run=False)))
    by = {sp.name: sp for sp in plan.services}
    (note,) = [w for w in by["a"].warnings if w.startswith("preemption: ")]
    assert "a holds GPUs but is not taken as a victim" in note
    assert "TaskTemplate.Placement" in note and "fix: " in note, note
    assert not [w for w in by["b"].warnings if "not taken as a victim" in w]
    assert note in by["a"].to_dict()["warnings"]  # `plan --json`
    text = render_plan(plan.services, ungranted=[], workload={}, health=[], moves=None,
                       listen="x")
    assert f"  note: {note}" in text.splitlines(), text
    doc = {"nodes": [], "pending": [], "services": [sp.to_dict() for sp in plan.services]}
    lines = render_status(doc).splitlines()
    assert lines[lines.index("preemption, of services not pending:") + 1] == f"  {note}"
