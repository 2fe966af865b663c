"""`swarmgpu run --once` as a user runs it, over a swarm of GPU nodes whose agents never
answer: the engine is a stand-in (no dockerd), the agents one loopback port that takes
connections and says nothing, so each read waits out its deadline.

    python tests/support/once_slow_agents.py TMPDIR NODES TIMEOUT_S

Prints ``LISTED`` when the cycle's snapshot lists the nodes (the signal handlers are in
place by then), then whatever the command says; exits with its status.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

LISTED = "once-slow-agents: nodes listed"


def main(tmp: Path, nodes: int, timeout_s: float) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support
    from support.empty_swarm import EmptySwarm
    from support.forged import sw_node
    from swarmgpu.cli import main as cli
    from swarmgpu.manager import daemon

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4096)  # connects complete in the kernel; nothing is ever answered
    port = silent.getsockname()[1]

    class GpuSwarm(EmptySwarm):
        def nodes(self) -> list:  # type: ignore[type-arg]
            print(LISTED, file=sys.stderr, flush=True)
            return [sw_node(f"n-{i:03d}", f"gpu-{i:03d}", {"gpu": "true"}) for i in range(nodes)]

    daemon.SwarmClient = lambda *_a, **_k: GpuSwarm()  # type: ignore[assignment,misc]
    cfg = tmp / "config.yml"
    cfg.write_text(
        json.dumps(
            {  # JSON is YAML
                "state_dir": str(tmp / "state"),
                "sync": {"watch_events": False},
                "agents": {"identity": "none", "port": port, "timeout_s": timeout_s},
            }
        )
    )
    cli(["run", "--once", "--config", str(cfg)])


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
