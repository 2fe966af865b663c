"""A gpu-memory of a card's marketed size, on GPUs that report less (as nvidia-smi and
NVML do): the pending reason names the model, the MiB it reports and the request that
fits. The GPUs are the captures' (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fake_pynvml.builder import build_layout
from support.paths import CAPTURES
from support.placement import node, svc

from swarmgpu.agent.facts.gfd import GfdSource
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.commands.render import check_stack, render_stack
from swarmgpu.manager.placement import plan_placement
from swarmgpu.swarm.client import SwarmNode

A100_40GB = "gfd_labels_a100-sxm4-40gb_mig-none_drv450_cloudnativedocs.json"  # 40537 MiB
A100_40GB_DGX2H = "gfd_labels_a100-sxm4-40gb_dgx2h_k8sdeviceplugin_readme.yaml"  # 39538 MiB


def _nvml(layout: str, host: str, tmp_path: Path) -> NodeFacts:
    b = build_layout(layout, tmp_path / host)
    return NvmlSource(hostname=host, nvml_module=b.nvml, sysfs_root=b.sysfs).read()


def _cluster(
    tmp_path: Path, *layouts: str, gfd: tuple[str, ...] = (A100_40GB,)
) -> tuple[list[SwarmNode], dict[str, NodeFacts]]:
    """Nodes of the NVML layouts (``build_layout``) and GFD captures named."""
    nodes, facts = [], {}
    for i, name in enumerate(layouts):
        host = f"{name}-{i}"
        nodes.append(node(f"n-{host}", host))
        facts[f"n-{host}"] = _nvml(name, host, tmp_path)
    for i, capture in enumerate(gfd):
        host = f"a100-{i}"
        nodes.append(node(f"n-{host}", host))
        facts[f"n-{host}"] = GfdSource(CAPTURES / capture, hostname=host).read()
    return nodes, facts


def _reason(nodes: list[SwarmNode], facts: dict[str, NodeFacts], **labels: str) -> str:
    s = svc("llm", {f"swarmgpu.{k.replace('_', '-')}": v for k, v in labels.items()})
    sp = plan_placement(nodes, [s], [], facts).services[0]
    assert sp.status == "pending" and not sp.placements, sp.reason
    return sp.reason or ""


def _placed(nodes: list[SwarmNode], facts: dict[str, NodeFacts], **labels: str) -> str:
    s = svc("llm", {f"swarmgpu.{k.replace('_', '-')}": v for k, v in labels.items()})
    sp = plan_placement(nodes, [s], [], facts).services[0]
    assert sp.status == "placed", sp.reason
    return sp.placements[0].hostname


def test_80gb_on_h100s_names_the_h100_its_reported_mib_and_the_request_that_fits(
    tmp_path: Path,
) -> None:
    # 8x H100 80GB HBM3 (nvidia-smi -q: 81559 MiB each) and an A100-SXM4-40GB (GFD):
    # 80GB is 81920 MiB, which no GPU has. The reason named the A100 node, "0 free".
    nodes, facts = _cluster(tmp_path, "hgx_h100_nv18")
    why = _reason(nodes, facts, gpus="1", gpu_memory="80GB")
    assert why.startswith("needs 1 GPU >= 80 GiB; no GPU has 81920 MiB"), why
    assert "NVIDIA H100 80GB HBM3, reports 81559 MiB" in why
    assert "nvidia-smi" in why and "sold as" in why
    assert "swarmgpu.gpu-memory: 81559" in why
    assert 'swarmgpu.gpu-product: "NVIDIA H100 80GB HBM3"' in why
    assert "a100-0" not in why  # the node that "came closest" had nothing to do with it
    # Either request it gives is placed, on the H100s.
    assert _placed(nodes, facts, gpus="1", gpu_memory="81559").startswith("hgx_h100")
    assert _placed(nodes, facts, gpus="1", gpu_product="NVIDIA H100 80GB HBM3").startswith(
        "hgx_h100"
    )
    # A share asks the same of its GPU's memory.
    assert "81559" in _reason(nodes, facts, gpu_fraction="0.5", gpu_memory="80GB")


def test_a_model_reporting_several_totals_gets_the_least_as_the_request(tmp_path: Path) -> None:
    # Two A100-SXM4-40GB captures: 40537 MiB (driver 450) and 39538 MiB (the DGX-2H
    # labels), both below 40GB's 40960; the first is 1.0 % short, the second 3.5 %.
    nodes, facts = _cluster(tmp_path, gfd=(A100_40GB, A100_40GB_DGX2H))
    why = _reason(nodes, facts, gpu_memory="40GB")
    assert "A100-SXM4-40GB, reports 39538 to 40537 MiB" in why, why
    assert "swarmgpu.gpu-memory: 39538" in why
    assert _placed(nodes, facts, gpu_memory="39538")


def test_141gb_on_an_h200_names_it(tmp_path: Path) -> None:
    # The project's own H200 (143771 MiB; 141GB is 144384 MiB).
    nodes, facts = _cluster(tmp_path, "h200_vm", gfd=())
    why = _reason(nodes, facts, gpu_memory="141GB")
    assert "NVIDIA H200, reports 143771 MiB" in why and "gpu-memory: 143771" in why, why


def test_a_gpu_product_asked_is_kept_and_limits_the_models_named(tmp_path: Path) -> None:
    nodes, facts = _cluster(tmp_path, "hgx_h100_nv18")
    why = _reason(nodes, facts, gpu_memory="80GB", gpu_product="*H100*")
    assert "swarmgpu.gpu-memory: 81559" in why and "gpu-product:" not in why, why
    # Only A100s asked: their 40537 MiB is nowhere near 80GB; the H100 is not named.
    why = _reason(nodes, facts, gpu_memory="80GB", gpu_product="*A100*")
    assert "H100" not in why and "sold as" not in why, why


@pytest.mark.parametrize("memory", ["96GB", "88GB", "100GiB"])
def test_a_size_well_above_every_gpu_gets_no_hint(tmp_path: Path, memory: str) -> None:
    # More than 10 % above what the H100 reports: a bigger card is meant, not this one.
    nodes, facts = _cluster(tmp_path, "hgx_h100_nv18")
    why = _reason(nodes, facts, gpu_memory=memory)
    assert "best node" in why and "sold as" not in why, why


def test_a_gpu_in_mig_mode_is_not_offered_whole(tmp_path: Path) -> None:
    # The H100 of the MIG capture is in MIG mode: never handed out whole, never named.
    nodes, facts = _cluster(tmp_path, "h100_mig")
    why = _reason(nodes, facts, gpu_memory="80GB")
    assert "H100" not in why and "sold as" not in why, why


def test_render_and_plan_show_the_reason_and_render_check_says_nothing(tmp_path: Path) -> None:
    nodes, facts = _cluster(tmp_path, "hgx_h100_nv18")
    text = """
services:
  llm:
    image: busybox
    deploy:
      labels: {swarmgpu.gpus: "1", swarmgpu.gpu-memory: 80GB}
"""
    _, plan = render_stack(text, "st", nodes, [], [], facts)
    sp = next(s for s in plan.services if s.name == "st_llm")
    assert sp.status == "pending" and "reports 81559 MiB" in (sp.reason or ""), sp.reason
    shown = render_plan([sp], ungranted=[], workload={}, health=[], moves=None, listen="x")
    assert "  why: needs 1 GPU >= 80 GiB; no GPU has 81920 MiB" in shown, shown
    # --check is offline: no GPU facts, nothing to say of the size (nor an error).
    checked = check_stack(text)
    assert not checked.errors and not any("MiB" in n for n in checked.notes), checked.notes
