"""What the facts watch compares of an agent's answer (``Daemon._compare_facts``): what a
cycle acts on, the GPUs and their health as the policy judges it (``health.assess``),
not every reading.

A GPU's clock reasons flip all day: idle while it waits for work, the software power cap
under load. Compared as read, with the correctable counters (ECC, NVLink CRC) as they
grow, they started a full cycle every ``agents.watch_s`` on a cluster at work, though no
label and no health state changed with them.
"""

from __future__ import annotations

import json
from typing import Any

from swarmgpu.core.health import HealthSignals, assess
from swarmgpu.core.model import NodeFacts


def _judged(health: HealthSignals | None) -> list[list[Any]] | None:
    """One GPU's findings (None: its signals unread, which the health policy tells apart
    from none found: it then reads the node's metrics page)."""
    if health is None:
        return None
    return [[str(f.effect), f.reason, str(f.action), f.xid_at, f.xid] for f in assess(health)]


def facts_key(f: NodeFacts) -> str:
    """``f`` as the facts watch compares it: without its read time, each GPU's health
    signals as their findings, the GPUs by index and each one's MIG devices by UUID (an
    agent listing them in another order changes nothing a cycle acts on: labels take
    the lowest-indexed GPU; compared as listed, each such answer started a cycle), the
    links matrix, which is by list position, reordered with them."""
    d = f.to_dict()
    d["node"].pop("collected_at", None)
    for row, gpu in zip(d["gpus"], f.gpus, strict=True):
        row["health"] = _judged(gpu.health)
        row["mig_devices"].sort(key=lambda m: str(m.get("uuid")))
    rows = d["gpus"]
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["index"],
                                                     str(rows[i].get("pci_bus_id")),
                                                     rows[i]["uuid"]))
    d["gpus"] = [rows[i] for i in order]
    links = d.get("links")
    if links and len(links) == len(order):  # (by list position: reordered with the GPUs)
        d["links"] = [[links[i][j] for j in order] for i in order]
    return json.dumps(d, sort_keys=True)
