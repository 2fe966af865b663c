"""The daemon's audit reads each GPU service's model-server settings (render's rules:
``commands.auditservers``) once per spec, not every cycle: 0.25 ms a service (14 ms to
40 ms for a hostile one, benchmarks/bench_audit_specs.py), recomputed though nothing
read had changed. Kept per service while the fields read stay the same, bounded, and
dropped once the service is gone. Calls are counted, never timed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm
from support.stepped_daemon import stepped_daemon

from swarmgpu.manager.commands import auditservers
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.commands.auditmemo import ServerMemo
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.swarmservice import read_service

VLLM = "vllm/vllm-openai:v0.8.5"


def service(sid: str, args: list[str], gpus: str = "2", env: Sequence[str] = (),
            labels: Mapping[str, str] | None = None) -> SwarmService:
    return read_service({
        "ID": sid, "Version": {"Index": 3},
        "Spec": {"Name": f"ai_{sid}", "Labels": {"swarmgpu.gpus": gpus, **(labels or {})},
                 "TaskTemplate": {"ContainerSpec": {"Image": VLLM, "Args": args,
                                                    "Env": list(env)}},
                 "Mode": {"Replicated": {"Replicas": 1}}},
    })


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The services whose server flags were read (render's rule called), in order."""
    got: list[str] = []
    rule = auditservers.server_warnings

    def counted(svc: Mapping[str, Any], req: GpuRequest | RequestError,
                prefix: str = "swarmgpu.", env_files: Any = None) -> list[str]:
        got.append(" ".join(str(a) for a in svc.get("command") or []))
        return rule(svc, req, prefix, env_files)

    monkeypatch.setattr(auditservers, "server_warnings", counted)
    return got


def snap(*services: SwarmService) -> Snapshot:
    return Snapshot([], list(services), [], {})


def test_the_daemons_cycles_read_an_unchanged_spec_once(
        monkeypatch: pytest.MonkeyPatch, reads: list[str]) -> None:
    class OneService(EmptySwarm):
        def services(self) -> list[SwarmService]:
            return [service("s1", ["--model", "m", "-tp", "4"])]  # (read anew each cycle)

        # (the daemon's writes, the workload model's record and the gate: taken, not kept)
        def update_swarm_labels(self, compute: Any, **_: Any) -> bool:
            return True

        def update_service_spec(self, service_id: str, compute: Any, **_: Any) -> bool:
            return True

    d = stepped_daemon(monkeypatch, OneService())
    for _ in range(3):
        d.cycle()
    assert len(reads) == 1


def test_the_findings_are_audits_own_and_a_changed_field_is_read_again(
        reads: list[str]) -> None:
    memo = ServerMemo()
    s1 = service("s1", ["--model", "m", "-tp", "4"])
    plain = audit(snap(s1))
    assert audit(snap(s1), servers=memo) == plain
    assert audit(snap(service("s1", ["--model", "m", "-tp", "4"])), servers=memo) == plain
    assert len(reads) == 2  # (once without the memo, once with it)
    for changed in (service("s1", ["--model", "m", "-tp", "2"]),
                    service("s1", ["--model", "m", "-tp", "2"], gpus="4"),
                    service("s1", ["--model", "m", "-tp", "2"], gpus="4",
                            env=["NUM_SHARD=2"])):
        assert audit(snap(changed), servers=memo) == audit(snap(changed))
    assert len(reads) == 2 + 3 * 2


def test_any_label_changed_reads_the_spec_again(reads: list[str]) -> None:
    """The labels are taken whole (parsing the request costs a fifth of the reading): a
    spec the daemon relabelled is read once more, then kept."""
    memo = ServerMemo()
    audit(snap(service("s1", ["-tp", "4"])), servers=memo)
    for _ in range(2):
        audit(snap(service("s1", ["-tp", "4"], labels={"com.example.team": "a"})),
              servers=memo)
    assert len(reads) == 2


def test_a_service_gone_is_dropped_and_the_memo_is_bounded(reads: list[str]) -> None:
    memo = ServerMemo(max_services=2)
    a, b, c = (service(s, ["-tp", "4"]) for s in ("a", "b", "c"))
    audit(snap(a, b), servers=memo)
    assert memo.ids() == {"a", "b"}
    audit(snap(a), servers=memo)
    assert memo.ids() == {"a"}
    audit(snap(a, b, c), servers=memo)
    assert len(memo.ids()) <= 2
    assert len(reads) == 4  # a, b, then b and c again (a kept)


def test_past_its_bound_the_memo_keeps_the_services_it_holds(reads: list[str]) -> None:
    """More services than it keeps, listed in the same order each cycle (the daemon's):
    the ones kept stay kept, the rest are read each cycle. Before, each service read put
    out the one kept longest, the next to be listed: every service was read every cycle,
    the memo kept nothing it was asked for again."""
    memo = ServerMemo(max_services=2)
    listed = [service(s, ["-tp", str(n)]) for n, s in enumerate(("a", "b", "c"), 2)]
    for _ in range(3):
        audit(snap(*listed), servers=memo)
    assert len(reads) == 3 + 2 * 1  # (all once, then c alone)
    assert memo.ids() == {"a", "b"}
