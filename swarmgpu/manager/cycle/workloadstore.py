"""The workload model placement starts from (a pinned file, the one stored in Swarm, or
the prior) and keeps in Swarm while it learns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loguru import logger

from swarmgpu.allocator.workload import STATE_KEY, WorkloadError, WorkloadModel, load_file
from swarmgpu.core.config import Config
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.swarm.client import BudgetCut, SwarmError, SwarmService


def pinned_workload(cfg: Config) -> WorkloadModel | None:
    """The pinned file's model (``placement.workload: FILE``), None for 'auto'. Read
    once, at start, as the config is: each new term's planner read the file again, so
    an edit applied at some term change, unsaid, and a file broken meanwhile stopped
    placement for every cycle of that term. A pinned model never learns: one for all."""
    pc = cfg.placement
    return None if pc.workload == "auto" else load_file(pc.workload)


def load_workload(cfg: Config, swarm: Any = None, services: Sequence[SwarmService] = (),
                  pinned: WorkloadModel | None = None) -> WorkloadModel:
    """The model placement starts from: the pinned file (``pinned``, as read at start;
    None: read now), else the one stored in Swarm (the services live now were counted
    before it was stored), else the prior."""
    pc = cfg.placement
    if pc.workload != "auto":
        return pinned if pinned is not None else load_file(pc.workload)
    text = None
    getter = getattr(swarm, "swarm_labels", None)
    if getter is not None:
        try:
            text = getter().get(cfg.sync.prefix + STATE_KEY)
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            logger.warning("placement: cannot read the stored workload model: {}", exc)
    model = WorkloadModel.prior(pc.workload_window)
    if text:
        try:
            model = WorkloadModel.loads(text, pc.workload_window)
        except WorkloadError as exc:
            logger.warning("placement: {}", exc)
        else:
            for s in services:
                model.mark_seen(s.id)
    return model


def store_workload(swarm: Any, cfg: Config, model: WorkloadModel) -> bool:
    """Keep the learned model in Swarm (a label on the swarm object), so a restarted
    daemon or a new leader starts from it."""
    key = cfg.sync.prefix + STATE_KEY
    text = model.dumps()

    def compute(labels: Mapping[str, str]) -> Mapping[str, str] | None:
        return None if labels.get(key) == text else {**labels, key: text}

    try:
        return Writes(swarm, dry_run=cfg.dry_run, who="placement",
                      prefix=cfg.sync.prefix).swarm_labels(compute)
    except SwarmError as exc:
        logger.warning("placement: cannot store the workload model: {}", exc)
        return False
