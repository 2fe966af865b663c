"""A facts file an agent serves, rewritten by a test (health on the real swarm).

First written in tests/test_health_swarm.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.gpu_nodes import RTX4090


class FactsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = RTX4090.facts().to_dict()
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)  # the agent never reads half a file

    def xid(self, uuid: str, code: int) -> None:
        g = next(g for g in self.data["gpus"] if g["uuid"] == uuid)
        h = g.setdefault("health", {"xid_events": []})
        h["xid_events"].append({"xid": code, "at": time.time()})
        self.write()
