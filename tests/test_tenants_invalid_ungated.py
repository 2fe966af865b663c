"""An invalid request is still gated (``placement.service``). Pure.

A stack deployed straight with ``docker stack deploy`` (no render, so no gate) whose
swarmgpu label is malformed -- ``swarmgpu.gpus: two``, another tenant's queue -- runs its
task where Swarm puts it, before the daemon's first cycle, with no device list: on a GPU
node it may see every GPU there (a CUDA image's ``all``), counted against no quota.
``plan_service`` returned for an invalid request before the gating step, writing
nothing, so the task ran on so for as long as the label stayed broken: a tenant at its
max, or of ``default: {max: 0}``, kept GPUs by breaking a label and skipping render. Its
gate and env template are now adopted as a valid request's are (the operator's
``placement.adopt_ungated`` decides), nothing placed: its task waits behind a gate no
node opens until its labels are fixed. A gated one, or one whose labels broke after it
was placed (it keeps what it holds), gets no write.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from support.forged import sw_svc
from support.ungated import R_UUIDS, P, tenants_config
from support.ungated import plan_two as _plan
from support.ungated import ungated as _ungated

from swarmgpu.core.config import Config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.placement import Holding, assign_key, gate_constraint, gate_key
from swarmgpu.manager.placement.records import ServicePlan, State, Status
from swarmgpu.swarm.client import SwarmTask


def _cfg(tmp_path: Path, more: str = "") -> Config:
    return tenants_config(tmp_path, textwrap.dedent("""\
        queues:
          research: {max: 8}
        tenants:
          team-a: {stacks: ["team-a*"], queues: [research]}
          team-b: {stacks: ["team-b*"], max: 2}
          default: {max: 0}
        """) + more)



def _gated_invalid(sp: ServicePlan, why: str) -> None:
    assert sp.status == Status.INVALID and sp.state == State.INVALID, sp.status
    assert why in (sp.reason or ""), sp.reason
    assert not sp.placements
    assert sp.writes.add_constraints == (gate_constraint(P, sp.name),)
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in sp.writes.add_env)
    assert sp.decision is not None and "placed now" not in sp.decision[1]
    assert "invalid" in sp.decision[1]


def test_a_malformed_label_deployed_without_render_is_gated(tmp_path: Path) -> None:
    s, t = _ungated("team-b_train", "team-b", {f"{P}gpus": "two"})
    _gated_invalid(_plan(_cfg(tmp_path), [s], [t])["team-b_train"], f"{P}gpus")


def test_another_tenants_queue_deployed_without_render_is_gated(tmp_path: Path) -> None:
    s, t = _ungated("team-b_train", "team-b", {f"{P}queue": "research"})
    _gated_invalid(_plan(_cfg(tmp_path), [s], [t])["team-b_train"], "tenant team-a's")


def test_a_broken_label_of_a_stack_of_no_gpus_deployed_without_render_is_gated(
        tmp_path: Path) -> None:
    s, t = _ungated("adhoc_train", "adhoc", {f"{P}gpus": "1", f"{P}priority": "high-ish"})
    _gated_invalid(_plan(_cfg(tmp_path), [s], [t])["adhoc_train"], f"{P}priority")


def test_without_adopt_ungated_an_invalid_request_is_reported_not_written(
        tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "placement: {adopt_ungated: false}\n")
    s, t = _ungated("team-b_train", "team-b", {f"{P}gpus": "two"})
    sp = _plan(cfg, [s], [t])["team-b_train"]
    assert sp.status == Status.INVALID and not sp.writes
    assert "not gated" in (sp.reason or "") and f"{P}gpus" in (sp.reason or ""), sp.reason


def test_a_gated_invalid_request_gets_no_write(tmp_path: Path) -> None:
    s = sw_svc("team-b_train", {STACK_LABEL: "team-b", f"{P}gpus": "two"})
    sp = _plan(_cfg(tmp_path), [s], [])["team-b_train"]
    assert sp.status == Status.INVALID and not sp.writes and sp.decision is None


def test_a_holder_whose_label_broke_keeps_its_gpus_and_gets_no_write(tmp_path: Path) -> None:
    holder = sw_svc("team-b_a", {STACK_LABEL: "team-b", f"{P}gpus": "two"})
    held = {assign_key(P, "team-b_a"): Holding("team-b_a", "n-4090", R_UUIDS[:2],
                                               (1000, 1000)).label_value(),
            gate_key(P, "team-b_a"): "true"}
    running = SwarmTask("t-a", holder.id, "n-4090", 1, "running", "running", ())
    sp = _plan(_cfg(tmp_path), [holder], [running], held)["team-b_a"]
    assert sp.status == Status.INVALID and not sp.writes and not sp.node_remove


def test_a_job_with_a_broken_label_deployed_without_render_is_gated(tmp_path: Path) -> None:
    s = sw_svc("team-b_once", {STACK_LABEL: "team-b", f"{P}gpus": "two"}, gated=False,
               mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}})
    t = SwarmTask("t-once", s.id, "n-4090", 1, "running", "running", ())
    sp = _plan(_cfg(tmp_path), [s], [t])["team-b_once"]
    assert sp.status == Status.INVALID
    assert sp.writes.add_constraints == (gate_constraint(P, "team-b_once"),)


def test_a_request_in_the_container_labels_alone_is_not_gated(tmp_path: Path) -> None:
    """Without it the service were one of no request, which runs ungated (and ``audit``
    says a gate on such a service waits for nothing): nothing is written, as before."""
    s, t = _ungated("team-b_web", "team-b", {})
    tt = {**s.spec["TaskTemplate"], "ContainerSpec": {"Image": "busybox", "Env": [],
                                                      "Labels": {f"{P}gpus": "1"}}}
    s = dataclasses.replace(s, spec={**s.spec, "TaskTemplate": tt})
    sp = _plan(_cfg(tmp_path), [s], [t])["team-b_web"]
    assert sp.status == Status.INVALID and "deploy.labels" in (sp.reason or "")
    assert not sp.writes and sp.decision is None


def test_a_holder_that_breaks_its_label_and_drops_its_gate_is_gated_again(
        tmp_path: Path) -> None:
    """`docker service update --label-add swarmgpu.gpus=two --constraint-rm <gate>
    --env-rm NVIDIA_VISIBLE_DEVICES`: its task restarts wherever Swarm puts it, with no
    device list. It keeps what it holds, and its gate and env go back (its task
    restarted behind the gate, which only its held node opens)."""
    holder = sw_svc("team-b_a", {STACK_LABEL: "team-b", f"{P}gpus": "two"}, gated=False)
    held = {assign_key(P, "team-b_a"): Holding("team-b_a", "n-4090", R_UUIDS[:2],
                                               (1000, 1000)).label_value(),
            gate_key(P, "team-b_a"): "true"}
    running = SwarmTask("t-a", holder.id, "n-dgx", 1, "running", "running", ())
    sp = _plan(_cfg(tmp_path), [holder], [running], held)["team-b_a"]
    assert sp.status == Status.INVALID and not sp.node_remove
    _gated_invalid(sp, f"{P}gpus")
