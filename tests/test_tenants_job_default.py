"""A job's default priority (the lowest class, ``placement.jobs.job_defaults``) under a
tenant's ceiling: a priority the tenant never asked for is no request above its limit.

Before, a job of a tenant with ``max_priority: 0`` in a cluster whose lowest class is
``batch=10`` was given 10, then capped by ``Tenants.apply`` with ``priority batch (10)
capped at 0 by tenant team-b``: `plan` said it was limited, `audit` raised a
``tenant-limit`` finding needing action (fix: "ask for no more") for a label the stack
never wrote, while ``render --check`` passed the same file: the gate and the daemon
disagreed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from support.forged import DGX_F, R4090_F, sw_node, sw_svc

from swarmgpu.core.config import Config, load_config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.cycle.placement import new_planner
from swarmgpu.manager.placement.records import ServicePlan

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
NODES = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")]
JOB = {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}


def _cfg(tmp_path: Path, classes: str) -> Config:
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent(f"""\
        preemption:
          priority_classes: "{classes}"
        tenants:
          team-a: {{stacks: ["team-a*"], max_priority: 100}}
          team-b: {{stacks: ["team-b*"], max_priority: 0}}
        """))
    return load_config(f, env={})


def _plan(cfg: Config, stack: str, **labels: str) -> ServicePlan:
    s = sw_svc(f"{stack}_train", {STACK_LABEL: stack, f"{P}gpus": "1",
                                  **{P + k: v for k, v in labels.items()}}, mode=JOB)
    (sp,) = new_planner(cfg).plan(NODES, [s], [], FACTS).services
    return sp


def test_a_jobs_default_priority_stays_within_its_tenants_ceiling(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "batch=10,normal=50,critical=1000")
    sp = _plan(cfg, "team-b-nightly")
    assert sp.request is not None
    assert (sp.request.priority, sp.request.limits) == (0, ())
    assert sp.request.preemptible is True  # (still batch work)
    # a tenant whose ceiling the lowest class is within gets that class, as before
    sp = _plan(cfg, "team-a-nightly")
    assert sp.request is not None
    assert (sp.request.priority, sp.request.priority_class, sp.request.limits) == (
        10, "batch", ())


def test_a_priority_the_job_asks_for_above_the_ceiling_is_still_capped(
        tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "batch=10,normal=50,critical=1000")
    sp = _plan(cfg, "team-b-nightly", priority="normal")
    assert sp.request is not None
    assert sp.request.priority == 0
    assert sp.request.limits == ("priority normal (50) capped at 0 by tenant team-b "
                                 "(its max_priority)",)
