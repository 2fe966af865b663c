"""A Swarm job (``replicated-job``, ``global-job``) over its GPU share: never restarted by
``placement.overshare: restart``, and said so. Any write of a job's spec (the restart's
cool-down mark) starts a new run of it, and its gate closed on a node has Swarm reject
its tasks completed there and run them again. It was said at info as a move's "never
moved": a share deployed as a job with a long-running command dodged the restart
without a word to the operator. Now the restart's refusal (a warning once while it
lasts, with the fix: ``restartrefusal.refused``) and audit's ``over-share`` finding say it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from swarmgpu.core.config import Config
from swarmgpu.swarm.client import SwarmService

JOB_MODES = ("replicated-job", "global-job")


def not_restarted(mode: str, prefix: str) -> str:
    """Why a job of ``mode`` over its share is not restarted, and the fix (a share is
    ``gpu-fraction``'s alone: ``gpu-memory`` is the least memory a GPU must have, which
    the fix once said to drop too, and a job without it may land on a GPU too small)."""
    return (f"a job ({mode}): never restarted by placement.overshare: restart (a write of "
            f"its spec runs it anew); ask whole GPUs (no {prefix}gpu-fraction) so it "
            "shares none")


def job_modes(services: Iterable[SwarmService], cfg: Config) -> dict[str, str]:
    """Service name -> mode, of the jobs among ``services`` (none unless the restart is
    on: ``placement.overshare: restart``)."""
    if cfg.placement.overshare != "restart":
        return {}
    return {s.name: s.mode for s in services if s.mode in JOB_MODES}


def job_note(jobs: Mapping[str, str] | None, service: str, prefix: str) -> str:
    """What audit's over-share finding of ``service`` says first where it is one of
    ``jobs`` (``job_modes``; None: the restart is off, none is said)."""
    mode = (jobs or {}).get(service)
    return "" if mode is None else f"{not_restarted(mode, prefix)}; "
