"""The ``engine:`` section: how much of the engine's answers the daemon reads
(``swarm.answerjson``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MIB = 1024 * 1024
MAX_ANSWER_MIB = 64 * 1024  # (64 GiB: more is a typo, not a swarm's answer)


@dataclass(frozen=True)
class EngineConfig:
    """The daemon's reads of the engine (docs/reliability.md, the engine answers row)."""

    max_answer_mib: int = 512
    """The most of one engine answer read, in MiB; past it the answer is refused (a
    5,000-task list is some 8 MiB, its decode several times that)."""

    @property
    def max_answer_bytes(self) -> int:
        return self.max_answer_mib * MIB

    def problems(self, where: str, add: Callable[[str], None]) -> None:
        """Each value out of range, given to ``add``."""
        if not 1 <= self.max_answer_mib <= MAX_ANSWER_MIB:
            add(f"{where}.max_answer_mib: {self.max_answer_mib} is out of range; use 1 to "
                f"{MAX_ANSWER_MIB} MiB (512, the default, holds a 5,000-task list many "
                "times over)")
