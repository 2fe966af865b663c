"""Services deployed without render (no gate) on a DGX and an RTX 4090 node, planned by
the daemon's planner under a tenants config: the ungated-service tests' shared setup."""

from __future__ import annotations

import textwrap
from pathlib import Path

from support.forged import DGX_F, R4090_F, sw_node, sw_svc
from swarmgpu.core.config import Config, load_config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.cycle.placement import new_planner
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)


def tenants_config(tmp_path: Path, text: str) -> Config:
    """The config whose YAML is ``text`` (dedented), read as the daemon reads it."""
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(text))
    return load_config(f, env={})


def plan_two(cfg: Config, svcs: list[SwarmService], tasks: list[SwarmTask],
             held: dict[str, str] | None = None) -> dict[str, ServicePlan]:
    """Each service's plan, by name, on the DGX and the 4090 (its labels ``held``)."""
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2", held)]
    plan = new_planner(cfg).plan(nodes, svcs, tasks, FACTS)
    return {sp.name: sp for sp in plan.services}


def ungated(name: str, stack: str, labels: dict[str, str]) -> tuple[SwarmService, SwarmTask]:
    """A service of ``stack`` with ``labels``, no gate, its task running on the 4090."""
    s = sw_svc(name, {STACK_LABEL: stack, **labels}, gated=False)
    return s, SwarmTask(f"t-{name}", s.id, "n-4090", 1, "running", "running", ())
