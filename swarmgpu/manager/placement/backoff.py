"""The back-off of re-placing a service Swarm will not run where its GPUs are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Re-placing a GPU task Swarm will not run where its devices are (``converge``).
REPLACE_BACKOFF_S = 10.0  # the wait after the first re-placement (or failure seen)
REPLACE_BACKOFF_MAX_S = 600.0
_FAILURES_KEPT = 16  # failed/rejected task ids remembered per service (2**16 >> the cap)
# Doublings counted at most: the cap is reached long before, and 2 ** 1024 is no float
# (the count of re-placements has no bound of its own: a task that never starts).
_DOUBLINGS_MAX = 32
_LABEL_ATTEMPTS_MAX = 999  # what ``adopt`` reads back (three digits): far past the cap


@dataclass
class Backoff:
    """One service's re-placements, and the failed or rejected tasks Swarm reported for
    it: each doubles the wait before the next re-placement (``REPLACE_BACKOFF_S`` up
    to ``REPLACE_BACKOFF_MAX_S``), so a service whose tasks keep failing to start is
    not moved around in a loop. Dropped once all its replicas run."""

    attempts: int = 0
    since: float | None = None  # the last re-placement, or the first failure seen
    failures: set[str] = field(default_factory=set)

    def saw_failures(self, ids: Sequence[str], now: float) -> None:
        for i in ids:
            if len(self.failures) >= _FAILURES_KEPT:
                break
            if i not in self.failures:
                self.failures.add(i)
                if self.since is None:
                    self.since = now

    def replaced(self, now: float) -> None:
        self.attempts += 1
        self.since = now

    def adopt(self, label: str | None) -> None:
        """Take the count and time recorded on the service (``REPLACED_STATE``) when
        they are newer than what this planner saw itself (a restart, a new leader, a
        one-shot `plan`). A value that does not parse, or one from the future, is none:
        it could only delay its own service anyway."""
        attempts, _, at = (label or "").partition("@")
        if not (attempts.isascii() and attempts.isdigit() and len(attempts) <= 3
                and at.isascii() and at.isdigit() and len(at) <= 12):
            return
        if int(attempts) > self.attempts:
            self.attempts, self.since = int(attempts), float(at)

    def label(self) -> str:
        # Written at most as ``adopt`` reads it: a longer count would reset a new leader's
        # wait to its first 10 s.
        return f"{min(self.attempts, _LABEL_ATTEMPTS_MAX)}@{int(self.since or 0)}"

    def delay(self) -> float:
        n = self.attempts + len(self.failures)
        if n == 0:
            return 0.0
        return min(REPLACE_BACKOFF_MAX_S, REPLACE_BACKOFF_S * 2.0 ** min(n - 1, _DOUBLINGS_MAX))

    def wait_left(self, now: float) -> float:
        return 0.0 if self.since is None else max(0.0, self.since + self.delay() - now)

    def key(self) -> tuple[int, int]:
        return (self.attempts, len(self.failures))

    def describe(self) -> str:
        return (f"{self.attempts} re-placement(s), {len(self.failures)} task(s) failed or "
                f"rejected; next wait {self.delay():.0f} s, at most "
                f"{REPLACE_BACKOFF_MAX_S:.0f} s")
