"""What the daemon writes when the owner changed nothing: no task restarts (issue 34).

Swarm replaces a running task when its task spec changes (swarmkit ``IsTaskDirty``) and
stops one whose node no longer meets its constraints. A re-read of the same facts in
another order, or swarmgpu's own record spelled another way (a hand edit, an earlier
or later release), is no change of the owner's: the daemon's write for it, if any,
changes neither. Pure: facts, nodes and specs in, the plan out."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from support.forged import DGX_F, R4090_F, sw_node
from support.placement import DGX, R4090, settle
from support.placement import FACTS as PLACE_FACTS
from support.placement import svc as place_svc
from support.write_paths import reread, svc

from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.cycle.grants import ImageEnvs, void_one
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.placement import (
    Holding,
    Planner,
    assign_key,
    devices_key,
    env_template,
    gate_constraint,
    gate_key,
    plan_placement,
)
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.services.grants import find_ungranted
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm.client import SwarmError, SwarmTask, service_from_api
from swarmgpu.swarm.labels import desired_labels, plan_node_labels

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
A100 = Gpu(0, "GPU-a", "NVIDIA A100-SXM4-80GB", 81920, "00000000:07:00.0", 8, 0)
H100 = Gpu(1, "GPU-h", "NVIDIA H100 80GB HBM3", 81559, "00000000:0F:00.0", 9, 0)


def test_a_mixed_nodes_labels_do_not_depend_on_the_order_its_gpus_are_read() -> None:
    # One A100 and one H100: the product (a tie) and the compute capability came from
    # whichever GPU the agent listed first, so a listing in another order flipped
    # gpu.product, gpu.compute.major and gpu.family -- labels a running task's
    # constraint reads. They follow the GPUs' indices now, as NVML numbers them.
    listed = NodeFacts(hostname="n", gpus=(A100, H100))
    reordered = replace(listed, gpus=(H100, A100))
    want = desired_labels(listed)
    assert desired_labels(reordered) == want
    assert want[P + "gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert want[P + "gpu.compute.major"] == "8"
    node = sw_node("n1", "gpu-node-1", want)
    t = SwarmTask("t1", "id-m", "n1", 1, "running", "running",
                  ("node.labels.swarmgpu.gpu.family==ampere",))
    plan = plan_node_labels(node, reordered, tasks=[t], prefix=P, allow_disruptive=True)
    assert plan.empty and plan.held == ()


def _running(ledger: str) -> tuple[Any, list[Any], list[SwarmTask]]:
    """A 2-GPU service whose task runs on n-dgx: its ledger entry there spelled
    ``ledger``, its device list label gone (a re-deploy of its stack file dropped it)."""
    a, b = DGX_F.gpus[0].uuid, DGX_F.gpus[1].uuid
    s = svc("web", {f"{P}gpus": "2"},
            [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"], [gate_constraint(P, "web")])
    ns = [sw_node("n-dgx", "gpu-node-1", {assign_key(P, "web"): ledger.format(a=a, b=b),
                                          gate_key(P, "web"): "true"}),
          sw_node("n-4090", "gpu-node-2")]
    return s, ns, [SwarmTask("t1", "id-web", "n-dgx", 1, "running", "running", ())]


@pytest.mark.parametrize("ledger", ["{a}@1000,{b}", "{a}, {b}", " {a},{b}@1000 "])
def test_a_ledger_entry_spelled_another_way_is_no_re_placement(ledger: str) -> None:
    # The same holding as swarmgpu writes it ("{a},{b}"), spelled otherwise. With a
    # device list to write back (the owner's re-deploy dropped it), the
    # spelling read as "the GPUs it holds where its task runs changed": a ForceUpdate,
    # and the model server restarted under a re-placement that was none.
    s, ns, tasks = _running(ledger)
    (sp,) = Planner(prefix=P).plan(ns, [s], tasks, FACTS).services
    a, b = DGX_F.gpus[0].uuid, DGX_F.gpus[1].uuid
    assert sp.service_labels_set.get(devices_key(P, "n-dgx")) == f"{a},{b}"
    assert not sp.force_update and sp.decision is None
    new = service_compute(sp.writes)(s.spec)
    assert new is not None and new["TaskTemplate"] == s.spec["TaskTemplate"]


def test_a_new_planner_over_facts_read_in_another_order_writes_nothing() -> None:
    # A daemon restarted (or a new leader: a planner with no memory) over settled
    # services -- whole GPUs, a MIG slice, a half GPU, two packed replicas -- whose
    # agents list their GPUs and MIG devices in another order: no spec write, no node
    # write, nothing held.
    half = place_svc("half", {f"{P}gpu-fraction": "0.5"})
    services = [place_svc("whole", {f"{P}gpus": "2"}), place_svc("slice", {f"{P}mig": "1g.5gb"}),
                replace(half, env=(*half.env, *env_lines(P))),
                place_svc("pack", {f"{P}gpus": "1", f"{P}pack": "always"}, replicas=2)]
    nodes, services, _ = settle([DGX, R4090], services)
    tasks = [SwarmTask(f"t-{s.name}-{i}", s.id, p.node_id, p.slot or 1, "running", "running", ())
             for s in services for i, p in enumerate(
                 plan_placement(nodes, [s], [], PLACE_FACTS).services[0].placements)]
    for facts in (PLACE_FACTS, {k: reread(f) for k, f in PLACE_FACTS.items()}):
        plan = plan_placement(nodes, services, tasks, facts)
        assert plan.node_set == {} and plan.node_remove == {}
        assert {sp.name: (sp.status, bool(sp.writes), sp.held) for sp in plan.services} == {
            s.name: ("placed", False, ()) for s in services}


class _Images:
    """An engine's image env (``None``: not there; "broken": the engine cannot answer)
    and one service spec, read-modify-written as swarmgpu's client does."""

    def __init__(self, spec: dict[str, Any], images: dict[str, tuple[str, ...] | None]) -> None:
        self.spec, self.images, self.writes = spec, images, 0

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        if ref == "broken":
            raise SwarmError("engine said no")
        return self.images.get(ref)

    def update_service_spec(self, _sid: str, compute: Any, **_: Any) -> bool:
        new = compute(copy.deepcopy(self.spec))
        if new is None or new == self.spec:
            return False
        self.spec, self.writes = new, self.writes + 1
        return True


@pytest.mark.parametrize("ref, max_reads, voided", [
    ("plain:1", 0, False),  # its read waits: this cycle's reads were spent on others
    ("broken", 32, False),  # the engine could not be asked this time
    ("gone:1", 32, True),  # not on the manager's engine: taken as CUDA images behave
    ("plain:1", 32, False),  # read: its env grants nothing
])
def test_void_waits_for_an_image_env_it_could_not_read(ref: str, max_reads: int,
                                                        voided: bool) -> None:
    # placement.ungranted: void over a service on a GPU node whose own env names no GPU:
    # whether it sees GPUs rests on its image's env. Unread (a restarted daemon's first
    # cycle over more images than it reads at once, an engine error), it was voided as
    # unknown: restarted, for nothing the owner changed, where a later read finds
    # nothing to void. It waits for the read now; an image the engine says it does not
    # have is still taken as CUDA images behave.
    spec = {"Name": "app", "Labels": {},
            "TaskTemplate": {"ContainerSpec": {"Image": ref, "Env": ["A=1"]}, "ForceUpdate": 0}}
    s = service_from_api({"ID": "id-app", "Spec": spec, "Version": {"Index": 3}})
    sw = _Images(copy.deepcopy(spec), {"plain:1": ("PATH=/bin",), "gone:1": None})
    images = ImageEnvs(sw, max_reads=max_reads)  # type: ignore[arg-type]
    (u,) = find_ungranted([s], [SwarmTask("t1", s.id, "g", 1, "running", "running", ())],
                          {"g": "gpu-1"}, prefix=P, managed=set(),
                          images=images.lookup([ref])) or [None]
    if u is None:  # (read: nothing to void, nothing found)
        assert not voided and max_reads
        return
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    assert void_one(gate, u, prefix=P, managed=False, grants="env", images=images) is voided
    assert sw.writes == int(voided) and gate.refused_restarts == 0


def test_a_device_list_in_another_order_is_no_new_device_map() -> None:
    # One replica of two runs on n-dgx, the other waits (no room). Its device list there
    # names the GPUs it holds in another order than swarmgpu writes them (a re-deployed
    # render, another release, a hand edit): the same GPUs, which the container numbers
    # by bus id whatever the order. Taken for a new map the waiting task must be made
    # with, it was a ForceUpdate -- the running replica restarted for it.
    held = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)[:4]
    h = Holding("web", "n-dgx", held, (1000,) * 4)
    for listed in (held, held[::-1], held[1:] + held[:1]):
        s = svc("web", {f"{P}gpus": "4", f"{P}gpu-product": "*A100*",
                        devices_key(P, "n-dgx"): ",".join(listed)},
                [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"], [gate_constraint(P, "web")])
        s = service_from_api({"ID": s.id, "Version": {"Index": 1}, "Spec": {
            **s.spec, "Mode": {"Replicated": {"Replicas": 2}}}})
        ns = [sw_node("n-dgx", "gpu-node-1", {assign_key(P, "web"): h.label_value(),
                                              gate_key(P, "web"): "true"}),
              sw_node("n-4090", "gpu-node-2")]
        tasks = [SwarmTask("t1", s.id, "n-dgx", 1, "running", "running", ()),
                 SwarmTask("t2", s.id, "", 2, "pending", "running", ())]
        (sp,) = Planner(prefix=P).plan(ns, [s], tasks, FACTS).services
        assert sp.status == "pending" and len(sp.placements) == 1
        assert not sp.force_update and devices_key(P, "n-dgx") not in sp.service_labels_set
