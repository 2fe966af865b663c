"""The fact source read within a deadline: NVML's init and GPU count have none of their
own (the agent bounds each GPU's read, ``facts.nvml``), and a GPU fallen off the bus can
hold ``nvmlInit`` for minutes; the doctor is what an operator runs exactly then."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from swarmgpu.core.model import NodeFacts

FACTS_DEADLINE_S = 20.0


class Source(Protocol):
    def read(self) -> NodeFacts: ...


@dataclass(frozen=True)
class FactsRead:
    facts: NodeFacts | None
    error: str | None = None  # why there are no facts (gpu.facts says it)
    hung: bool = False  # the read did not return: its thread is left behind


def read_facts_within(src: Source, spec: str, timeout_s: float = FACTS_DEADLINE_S) -> FactsRead:
    """``src.read()`` in a daemon thread, waited on for ``timeout_s``. A call hung in the
    driver cannot be cancelled: the thread is abandoned (a daemon thread: it never holds
    the process), and the caller must not wait at exit for anything it holds."""
    got: list[NodeFacts] = []
    failed: list[str] = []

    def run() -> None:
        try:
            got.append(src.read())
        except Exception as exc:  # a doctor must report, not crash: gpu.facts names it
            # A file source's error starts with its spec already ("file:X: ...",
            # "file:X.gpus[0]...": the field's path): said once.
            said = str(exc)
            failed.append(said if said.startswith(spec) else f"{spec}: {said}")

    t = threading.Thread(target=run, name="doctor-facts", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        who = "NVML" if spec == "nvml" else "the source"
        return FactsRead(None, f"{spec}: {who} did not answer within {timeout_s:g} s", hung=True)
    if failed:
        return FactsRead(None, failed[0])
    return FactsRead(got[0] if got else None)
