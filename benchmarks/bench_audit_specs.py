"""How long `swarmgpu audit` (and so each daemon cycle, whose map takes audit's findings)
takes to read hostile GPU service specs, beside an ordinary one in the same run.

The daemon audits every GPU service's spec each cycle (render's model-server checks:
``commands.model_servers``, ``commands.cudavisible``, ``commands.devshm``). A spec is
written by its owner, so a hostile one must cost about what an ordinary one does: a
2 MiB ``sh -c`` script, server or shell words repeated thousands of times, a 2 MiB
command string, an 8 MiB ``CUDA_VISIBLE_DEVICES``. Each is timed (median of
``--rounds``) beside the reference, a vLLM service of four GPUs: read anew, as
`swarmgpu audit` reads it, and as the daemon's next cycles read it (its findings kept
while the spec's fields stay the same: ``commands.auditmemo``), the spec listed anew
each cycle as the daemon lists it.

    python benchmarks/bench_audit_specs.py [--rounds 5]

The figures are this machine's; the tests (tests/test_audit_model_servers.py,
tests/test_audit_servers_memo.py) check what is read, never how long it takes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.commands.auditmemo import ServerMemo
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.swarmservice import read_service

VLLM = "vllm/vllm-openai:v0.8.5@sha256:" + "a" * 64
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def service(args: list[str], command: Any = None, env: list[str] | None = None) -> SwarmService:
    """A GPU service as the engine lists one (`docker stack deploy`, no render)."""
    container: dict[str, Any] = {"Image": VLLM, "Args": args, "Env": env or []}
    if command is not None:
        container["Command"] = command
    return listed(container)


def fresh(v: Any) -> Any:
    """A copy of ``v`` down to its texts: each cycle's list decodes new ones, which a kept
    reading is compared with character by character, not by identity."""
    if isinstance(v, str):
        return (v + ".")[:-1]
    return [fresh(x) for x in v] if isinstance(v, list) else v


def listed(container: dict[str, Any]) -> SwarmService:
    """The service read from a fresh copy of its spec, as each cycle's list gives it."""
    return read_service({
        "ID": "s1", "Version": {"Index": 3},
        "Spec": {"Name": "ai_llm", "Labels": {"swarmgpu.gpus": "4"},
                 "TaskTemplate": {"ContainerSpec": {k: fresh(v) for k, v in container.items()}},
                 "Mode": {"Replicated": {"Replicas": 1}}},
    })


def cases() -> dict[str, SwarmService]:
    return {
        "reference: vllm -tp 4": service(["--model", MODEL, "-tp", "4"]),
        "sh -c script of 2 MiB": service([], ["sh", "-c",
                                              "vllm serve m -tp 4 " + "x " * (1 << 20)]),
        "'vllm serve' x 1,400": service([], ["vllm", "serve"] * 1400),
        "'-/sh' x 3,000": service([], ["-/sh"] * 3000),
        "command string of 2 MiB": service([], "vllm serve m -tp 4 " + "x " * (1 << 20)),
        "CUDA_VISIBLE_DEVICES of 8 MiB": service(
            ["--model", MODEL, "-tp", "4"],
            env=["CUDA_VISIBLE_DEVICES=0,5," + "1," * (4 << 20)]),
    }


def median_s(svc: SwarmService, rounds: int, memo: ServerMemo | None = None) -> float:
    """The median audit of ``svc`` listed anew each round; with ``memo``, after a first
    cycle's audit (not timed) filled it."""
    container = dict(svc.spec["TaskTemplate"]["ContainerSpec"])
    if memo is not None:
        audit(Snapshot([], [listed(container)], [], {}), servers=memo)
    took: list[float] = []
    for _ in range(rounds):
        snap = Snapshot([], [listed(container)], [], {})
        start = time.perf_counter()
        audit(snap, servers=memo)
        took.append(time.perf_counter() - start)
    return statistics.median(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="timed audits per case")
    args = ap.parse_args()
    rounds = max(1, args.rounds)
    timed = {name: (median_s(svc, rounds), median_s(svc, rounds, ServerMemo()))
             for name, svc in cases().items()}
    ref = next(iter(timed.values()))[0]
    print(f"{'spec':34} {'audit ms (median)':>18} {'x reference':>12} "
          f"{'next cycles ms':>15} {'x reference':>12}")
    for name, (s, kept) in timed.items():
        print(f"{name:34} {s * 1000:18.2f} {s / ref if ref else 0.0:12.1f} "
              f"{kept * 1000:15.3f} {kept / ref if ref else 0.0:12.2f}")


if __name__ == "__main__":
    main()
