"""The agent's facts cache: the source read by a background thread at a fixed rate,
so a request only ever reads the cache and a hanging NVML call cannot block it; when
the last read failed, or is older than twice ``refresh_s``, the last good facts are
still served, marked stale (``server``: ``/facts``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from swarmgpu.agent.facts import FactSource, SourceError
from swarmgpu.core.andmore import and_more
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import peer_text

_log = logger.bind(component="agent")


@dataclass(frozen=True)
class FactsView:
    facts: NodeFacts | None
    age_s: float | None
    stale: bool
    last_error: str | None
    refresh_failures: int


class FactsCache:
    """Reads the source in a background thread at a fixed rate; readers never block."""

    def __init__(
        self,
        source: FactSource,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s must be > 0, got {refresh_s}")
        self.source = source
        self.refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._facts: NodeFacts | None = None
        self._read_at: float | None = None
        self._error: str | None = None
        self._failures = 0
        self._said = ""  # the facts' errors as the log last said them
        self._refused = False  # the last read raised SourceError
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="facts-refresh", daemon=True)
        # Called after each read that completed, or was refused (``SourceError``: a file
        # that cannot be used as given, which no restart mends) (systemd's READY and
        # watchdog: serve()); from the refresher only, so a read hung in NVML stops the
        # calls, and one that raised otherwise has the watchdog restart the agent. After
        # good reads alone, an agent whose file was refused never started (Type=notify)
        # and was killed by the watchdog mid-run: a restart loop.
        self.on_read: Callable[[], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        # A read hung in NVML cannot be interrupted; the thread is a daemon.
        self._thread.join(timeout_s)

    def refresh_once(self) -> None:
        try:
            facts = self.source.read()
        except Exception as e:  # any failure of the source: keep serving the last facts
            msg = f"reading facts from {self.source.spec} failed: {type(e).__name__}: {e}"
            with self._lock:
                # Said once while it lasts (a refused file was logged every refresh);
                # again when it changes, or after "readable again".
                if msg != self._error:
                    _log.warning(msg)
                self._error = msg
                self._failures += 1
                self._refused = isinstance(e, SourceError)
            if isinstance(e, SourceError) and self.on_read is not None:
                self.on_read()  # (a source that cannot work as given: no restart mends it)
            return
        with self._lock:
            if self._error is not None:
                _log.info("facts from {} readable again", self.source.spec)
            self._facts = facts
            self._read_at = self._clock()
            self._error = None
            self._refused = False
        self._say_errors(facts.errors)
        if self.on_read is not None:
            self.on_read()

    def _say_errors(self, errors: tuple[str, ...]) -> None:
        """The facts' own errors (no driver, a GPU lost), said when what is said changes
        (their first and count; the rest are in /healthz): served in /facts and /healthz,
        they were said in the daemon's log alone, not the node's."""
        line = (f"facts from {self.source.spec} are served with {len(errors)} error"
                f"{'' if len(errors) == 1 else 's'}: {peer_text(errors[0])}"
                f"{and_more(len(errors))}" if errors else "")
        if line == self._said:
            return
        if line:
            _log.warning(line)
        else:
            _log.info("facts from {} are served with no error again", self.source.spec)
        self._said = line

    def _run(self) -> None:
        next_at = self._clock()
        said = ""  # the last unexpected error said with its traceback
        while not self._stop.is_set():
            try:
                self.refresh_once()
            except Exception as e:  # (the source's own errors are caught inside)
                # One ended the thread: the last facts served for good, ageing, the
                # traceback on stderr alone. Said with it, until the error changes.
                text = f"{type(e).__name__}: {e}"
                _log.opt(exception=e if text != said else None).error(
                    "facts refresh failed unexpectedly ({}), a fault of swarmgpu: "
                    "please report it; retried at the next refresh", text)
                said = text
            next_at += self.refresh_s  # fixed rate, no drift
            delay = next_at - self._clock()
            if delay < 0:  # the read took longer than the period: start again from now
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    @property
    def refused(self) -> bool:
        """Whether the last read was refused (``SourceError``: a file's error)."""
        with self._lock:
            return self._refused

    def view(self) -> FactsView:
        with self._lock:
            facts, read_at, error, failures = (
                self._facts, self._read_at, self._error, self._failures
            )
        age = None if read_at is None else max(0.0, self._clock() - read_at)
        stale = facts is None or error is not None or (age is not None
                                                      and age > 2 * self.refresh_s)
        return FactsView(facts, age, stale, error, failures)
