"""XID events from NVML: one watcher thread per NVML module.

The thread registers every GPU for critical XID events and waits on them forever; the
facts only copy what it has seen (``XidWatcher.attach``), so a wait that hangs in the
driver never blocks a read (the facts then say the watch is stalled).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol

from swarmgpu.agent.facts.nvml_session import Nvml, ensure_alive, error_text
from swarmgpu.core.health import MAX_XID_EVENTS, HealthSignals, XidEvent


class GpuHealthRead(Protocol):
    """What the watcher puts events on: one GPU's read (nvml's, by index)."""

    index: int
    health: HealthSignals | None


_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
WAIT_MS = 1000
STALLED_S = 30.0  # a wait loop silent this long is reported stalled


class XidWatcher:
    """One thread: register every GPU for critical XID events, then wait on them forever.

    Reads never wait on it: ``attach`` copies the events seen so far under a lock. The
    thread's own NVML calls may hang (a GPU off the bus); the facts then say so."""

    def __init__(self, mod: Any) -> None:
        self.nv = Nvml(mod)
        self.lock = threading.Lock()
        self.events: dict[int, deque[XidEvent]] = {}
        self.problem: str | None = None
        self.beat = time.monotonic()
        self.started = False

    def start(self) -> None:
        threading.Thread(target=self._run, name="nvml-xid", daemon=True).start()
        self.started = True

    def _run(self) -> None:
        nv = self.nv
        try:
            event_set = nv.call("nvmlEventSetCreate")
            if event_set is None:
                self._set_problem("XID events unavailable (nvmlEventSetCreate failed)")
                return
            count = int(nv.call("nvmlDeviceGetCount") or 0)
            refused = []
            for i in range(count):
                h = nv.call("nvmlDeviceGetHandleByIndex", i)
                if h is None or not self._registered(h, event_set):
                    refused.append(i)
            if refused:
                self._set_problem(f"XID events not available for GPU(s) {refused} "
                                  "(NOT_SUPPORTED: a VM or an old driver?)")
            while ensure_alive(nv.mod):
                self.beat = time.monotonic()
                ev = nv.call("nvmlEventSetWait", event_set, WAIT_MS)
                if ev is None:
                    continue  # NVML_ERROR_TIMEOUT: nothing happened
                self._record(ev)
        except Exception as e:  # GpuLost and any driver surprise end the watch, reported
            self._set_problem(f"XID watch stopped: {error_text(e)}")

    def _registered(self, h: Any, event_set: Any) -> bool:
        """Register one GPU; pynvml returns None either way, so success is no exception."""
        fn = getattr(self.nv.mod, "nvmlDeviceRegisterEvents", None)
        if fn is None:
            return False
        try:
            fn(h, _XID_CRITICAL, event_set)
        except self.nv.error_cls:
            return False
        return True

    def _record(self, ev: Any) -> None:
        if int(getattr(ev, "eventType", 0)) & _XID_CRITICAL == 0:
            return
        index = self.nv.call("nvmlDeviceGetIndex", ev.device)
        if not isinstance(index, int):
            return
        with self.lock:
            q = self.events.setdefault(index, deque(maxlen=MAX_XID_EVENTS))
            q.append(XidEvent(int(ev.eventData), time.time()))

    def _set_problem(self, text: str) -> None:
        with self.lock:
            self.problem = text

    def attach(self, reads: Iterable[GpuHealthRead]) -> list[str]:
        """Put the events seen so far on each GPU's health; the watch's problems."""
        with self.lock:
            events = {i: tuple(q) for i, q in self.events.items()}
            problem = self.problem
        for r in reads:
            if r.index in events:
                r.health = replace(r.health or HealthSignals(), xid_events=events[r.index])
        notes = [f"nvml: {problem}"] if problem else []
        silent = time.monotonic() - self.beat
        if problem is None and self.started and silent > STALLED_S + WAIT_MS / 1000:
            notes.append(f"nvml: XID event wait has not returned for {silent:.0f}s "
                         "(hung in the driver); XID events may be missed")
        return notes


_watchers: dict[int, XidWatcher] = {}
_watchers_lock = threading.Lock()



def xid_watcher(mod: Any) -> XidWatcher:
    """The module's watcher, started on first use."""
    with _watchers_lock:
        w = _watchers.get(id(mod))
        if w is None or w.nv.mod is not mod:
            w = _watchers[id(mod)] = XidWatcher(mod)
            w.start()
        return w
