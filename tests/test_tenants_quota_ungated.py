"""A service held whole at its queue's max is still gated (``placement.service``).

A stack deployed without render (``docker stack deploy`` of a file with only
``swarmgpu.*`` labels, no hold) runs its task before the daemon's first cycle, with no
device list: it may see every GPU of its node (a CUDA image's ``all``). Placement adopts
such a service (its gate and env template written, the task restarted to wait for its
gate). Held whole at its queue's max it was not: ``plan_service`` returned before the
gating step with no write, so the task ran on with every GPU of its node, counted against
no quota -- a tenant at its max (or a stack of ``default: {max: 0}``, "no GPU at all")
kept GPUs by skipping render. A service pending for lack of room was adopted all along.
"""

from __future__ import annotations

from pathlib import Path

from support.forged import sw_svc
from support.ungated import R_UUIDS, P, tenants_config, ungated
from support.ungated import plan_two as _plan

from swarmgpu.core.config import Config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.placement import Holding, assign_key, gate_constraint, gate_key
from swarmgpu.manager.placement.records import ServicePlan, Status
from swarmgpu.swarm.client import SwarmService, SwarmTask


def _cfg(tmp_path: Path) -> Config:
    return tenants_config(tmp_path, """\
        tenants:
          team-b: {stacks: ["team-b*"], max: 2}
          default: {max: 0}
        """)



def _ungated(name: str, stack: str) -> tuple[SwarmService, SwarmTask]:
    return ungated(name, stack, {f"{P}gpus": "2"})


def _gated_wait(sp: ServicePlan, why: str) -> None:
    assert sp.status == Status.PENDING and why in (sp.reason or ""), sp.reason
    assert not sp.placements
    assert sp.writes.add_constraints == (gate_constraint(P, sp.name),)
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in sp.writes.add_env)
    assert sp.decision is not None and "placed now" not in sp.decision[1]


def test_a_stack_of_a_tenant_with_no_gpus_deployed_without_render_is_gated(
        tmp_path: Path) -> None:
    s, t = _ungated("adhoc_train", "adhoc")
    sp = _plan(_cfg(tmp_path), [s], [t])["adhoc_train"]
    _gated_wait(sp, "queue default at its quota: max 0 GPUs")


def test_a_tenant_at_its_max_deploying_without_render_is_gated(tmp_path: Path) -> None:
    holder = sw_svc("team-b_a", {STACK_LABEL: "team-b", f"{P}gpus": "2"})
    held = {assign_key(P, "team-b_a"): Holding("team-b_a", "n-4090", R_UUIDS[:2],
                                               (1000, 1000)).label_value(),
            gate_key(P, "team-b_a"): "true"}
    running = SwarmTask("t-a", holder.id, "n-4090", 1, "running", "running", ())
    s, t = _ungated("team-b_b", "team-b")
    by = _plan(_cfg(tmp_path), [holder, s], [running, t], held)
    assert by["team-b_a"].status == Status.PLACED
    _gated_wait(by["team-b_b"], "queue team-b at its quota: max 2 GPUs, 2 used")


def test_a_gated_service_held_at_its_max_gets_no_write(tmp_path: Path) -> None:
    s = sw_svc("adhoc_train", {STACK_LABEL: "adhoc", f"{P}gpus": "2"})
    sp = _plan(_cfg(tmp_path), [s], [])["adhoc_train"]
    assert sp.status == Status.PENDING and "at its quota" in (sp.reason or "")
    assert not sp.writes and sp.decision is None
