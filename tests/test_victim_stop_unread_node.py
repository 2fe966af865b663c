"""A preemption's stop reads the victims' node again before writing anything
(``cycle.victimstop.close_gates``). Read so with a part it cannot read (a key twice, a
proxy's null: ``SwarmNode.unread``), its gate write is refused (``_labels_readable``):
the stop is not made, none of the victims' specs written. Before, their specs were
written first, and the refused gate write left the stop half made and counted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.forged import RecordingSwarm, sw_node, sw_svc

from swarmgpu.manager.cycle.victimstop import close_gates
from swarmgpu.manager.placement import Holding, assign_key, gate_key
from swarmgpu.manager.placement.preempt import Candidate, Preemption

P = "swarmgpu."
GPUS = ("GPU-a", "GPU-b")


class _Gate:
    """The actuator's gate, its writes recorded (none should come)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def service_spec(self, sid: str, *_: Any) -> None:
        self.writes.append(("service", sid))

    def node_labels(self, nid: str, *_: Any) -> None:
        self.writes.append(("node", nid))


def test_a_victims_node_read_again_unread_stops_none() -> None:
    h = Holding("a", "n1", GPUS, (1000, 1000))
    labels = {assign_key(P, "a"): h.label_value(), gate_key(P, "a"): "true"}
    node = replace(sw_node("n1", "gpu-1", labels), unread="node gpu-1: 'Labels' twice")
    sw = RecordingSwarm([node], [sw_svc("a", {f"{P}gpus": "2"})], [])
    victim = Candidate("a", "id-a", "n1", 0, "", GPUS, h)
    p = Preemption("h", "id-h", 100, "n1", "gpu-1", (victim,))
    gate, closing = _Gate(), []
    got = close_gates(gate, sw, P, p, [victim], 5000.0, closing)  # type: ignore[arg-type]
    assert (got, gate.writes, closing) == (False, [], [])
