"""MIG requests through the planner: which device a service holds, and when it changes."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import DGX_A100
from support.paths import TOPOLOGY
from support.placement import DGX, FACTS, apply, svc

from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.manager.placement import plan_placement
from swarmgpu.manager.placement.queues import replica_milli
from swarmgpu.manager.services.requests import GpuRequest, parse_request

DGX_FACTS = {"n-dgx": FACTS["n-dgx"]}  # GPU 0 runs MIG: 3g.20gb, 2g.10gb, 1g.5gb x2


def _profile_of(uuid: str) -> str:
    return {m.uuid: m.profile for g in FACTS["n-dgx"].gpus for m in g.mig_devices}[uuid]


def test_mig_request_keeps_its_gpu_product() -> None:
    s = svc("slice", {"swarmgpu.mig": "1g.5gb", "swarmgpu.gpu-product": "*H100*"})
    sp = plan_placement([DGX], [s], [], DGX_FACTS).services[0]
    assert sp.status == "pending" and not sp.placements, "an A100's slice is no H100's"
    ok = svc("slice", {"swarmgpu.mig": "1g.5gb", "swarmgpu.gpu-product": "*A100*"})
    sp = plan_placement([DGX], [ok], [], DGX_FACTS).services[0]
    assert sp.status == "placed" and _profile_of(sp.placements[0].uuids[0]) == "1g.5gb"


def test_mig_holding_follows_a_changed_profile() -> None:
    s = svc("slice", {"swarmgpu.mig": "1g.5gb"})
    plan = plan_placement([DGX], [s], [], DGX_FACTS)
    nodes = apply([DGX], plan)
    s1 = replace(
        s,
        labels={**s.labels, **plan.services[0].service_labels_set, "swarmgpu.mig": "3g.20gb"},
        force_update=1,
    )
    sp = plan_placement(nodes, [s1], [], DGX_FACTS).services[0]
    (p,) = sp.placements
    assert _profile_of(p.uuids[0]) == "3g.20gb", "kept the 1g.5gb device it no longer asks"


def test_a_profile_no_gpu_of_the_product_has_names_those_it_offers() -> None:
    """7g.80gb on the DGX's A100-40GB can never be free there: the reason said only "no
    allowed node has one free"; now it names the profiles that GPU model offers."""
    s = svc("slice", {"swarmgpu.mig": "7g.80gb"})
    sp = plan_placement([DGX], [s], [], DGX_FACTS).services[0]
    assert sp.status == "pending" and sp.reason
    assert "no GPU model in the cluster has 7g.80gb" in sp.reason, sp.reason
    assert "NVIDIA A100-SXM4-40GB offers 1g.5gb, 1g.5gb+me, 1g.10gb" in sp.reason
    # a profile the A100-40GB can have, only not free: the reason is as it was
    s = svc("slice", {"swarmgpu.mig": "7g.40gb"})
    sp = plan_placement([DGX], [s], [], DGX_FACTS).services[0]
    assert sp.reason and sp.reason.endswith("no allowed node has one free"), sp.reason


def test_compute_instances_are_handed_out_each_once_sharing_their_instance() -> None:
    """A DGX whose GPU 0 holds a 3g.20gb GPU instance split into three 1c compute
    instances (``--mig 0:1c.3g.20gb*3,...``): the facts give the three one GPU instance
    (its memory each), and three services asking 1c.3g.20gb get one each, a fourth
    waits; a queue counts each as 1/7 of a GPU. They were never handed out."""
    facts = TopoSource(TOPOLOGY / DGX_A100.capture, hostname=DGX_A100.hostname,
                       product=DGX_A100.product, memory_mib=DGX_A100.memory_mib,
                       mig_layout="0:1c.3g.20gb*3,2g.10gb,1g.5gb*2").read()
    cis = [m for m in facts.gpus[0].mig_devices if m.profile == "1c.3g.20gb"]
    assert len(cis) == 3 and len({m.gi_id for m in cis}) == 1
    assert [m.ci_id for m in cis] == [0, 1, 2] and {m.memory_mib for m in cis} == {20 * 1024}
    assert len({m.gi_id for m in facts.gpus[0].mig_devices}) == 4  # 3g, 2g, 1g, 1g
    services = [svc(f"s{i}", {"swarmgpu.mig": "1c.3g.20gb"}) for i in range(4)]
    plan = plan_placement([DGX], services, [], {"n-dgx": facts})
    got = {sp.name: sp for sp in plan.services}
    held = [got[f"s{i}"].placements[0].uuids[0] for i in range(3)]
    assert sorted(held) == sorted(m.uuid for m in cis)
    assert got["s3"].status == "pending" and not got["s3"].placements
    req = parse_request(services[0].labels)
    assert isinstance(req, GpuRequest) and replica_milli(req) == 143  # 1/7, rounded up
