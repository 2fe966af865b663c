"""Each holder's GPU memory use against its share (swarmgpu.manager.services.overshare), pure; the
agent's page parsed back by the daemon's reader. On the real swarm:
tests/test_overshare_swarm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.empty_swarm import EmptySwarm
from support.overshare import G1, G2, F, metrics_for, service_use
from support.placement import DGX

from swarmgpu.core.config import Config
from swarmgpu.core.samples import GpuProcess
from swarmgpu.manager.cycle.observe import ObserveStep
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.placement import Holding
from swarmgpu.manager.services.overshare import Watch, annotate, findings, owners
from swarmgpu.swarm.client import SwarmService, SwarmTask

LEDGER = {"a": {DGX.id: Holding("a", DGX.id, (G1.uuid,), (500,))},
          "b": {DGX.id: Holding("b", DGX.id, (G1.uuid,), (500,))},
          "w": {DGX.id: Holding("w", DGX.id, (G2.uuid,), (1000,))}}
# Swarm's own word on each container: (task, service) on DGX (tests/test_attribution_checked.py
# has what happens to a process Swarm does not place there).
OWNERS = owners([SwarmService(f"sid-{n}", n, {}, (), (), "replicated", 1, None, 1)
                 for n in "abwx"],
                [SwarmTask(t, f"sid-{n}", DGX.id, 1, "running", "running", (), container_id=c)
                 for t, n, c in (("ta", "a", "c" * 64), ("tb", "b", "d" * 64),
                                 ("tw", "w", "e" * 64), ("tx", "x", "f" * 64))])


def test_use_against_share_per_holder() -> None:
    m = metrics_for({G1.uuid: (GpuProcess(10, 30000, None, "c" * 64, "ta", "a"),
                            GpuProcess(11, 2000, None, "c" * 64, "ta", "a"),
                            GpuProcess(12, 4000, None, "d" * 64, "tb", "b"),
                            GpuProcess(13, 999)),  # a host process: nobody's
                  G2.uuid: (GpuProcess(20, 40000, None, "e" * 64, "tw", "w"),)})
    uses = {(u.service, u.uuid): u for u in service_use([DGX], LEDGER, {DGX.id: F}, m,
                                                         OWNERS)}
    a, b, w = uses["a", G1.uuid], uses["b", G1.uuid], uses["w", G2.uuid]
    assert (a.used_mib, a.share_mib, a.over, a.tasks, a.pids) == (32000, 20268, True, ("ta",),
                                                                  (10, 11))
    assert (b.used_mib, b.share_mib, b.over) == (4000, 20268, False)
    assert (w.used_mib, w.share_mib, w.over) == (40000, 40537, False)  # a whole GPU (40537 MiB)
    (f,) = findings(uses.values())
    assert f.kind == "over-share" and f.subject == "a" and f.actual == "32000 MiB"
    assert "uses 32000 MiB of GPU 1" in f.message and "share is 20268 MiB" in f.message


def test_a_service_on_a_gpu_it_does_not_hold_is_over() -> None:
    m = metrics_for({G1.uuid: (GpuProcess(10, 100, None, "f" * 64, "tx", "x"),)})
    uses = {(u.service, u.uuid): u for u in service_use([DGX], LEDGER, {DGX.id: F}, m,
                                                         OWNERS)}
    assert uses["x", G1.uuid].over and uses["x", G1.uuid].share_mib == 0
    assert not uses["a", G1.uuid].over  # the holders use nothing


def test_no_processes_listed_judges_nothing() -> None:
    assert service_use([DGX], LEDGER, {DGX.id: F}, metrics_for({})) == []


def test_watch_window_and_map_annotation() -> None:
    now = [100.0]
    w = Watch(clock=lambda: now[0])
    over = metrics_for({G1.uuid: (GpuProcess(10, 30000, None, "c" * 64, "ta", "a"),)})
    w.update(service_use([DGX], LEDGER, {DGX.id: F}, over, OWNERS))
    assert w.due(60) == []
    now[0] = 170.0
    w.update(service_use([DGX], LEDGER, {DGX.id: F}, over, OWNERS))
    assert [u.service for u in w.due(60)] == ["a"]
    w.update(service_use([DGX], LEDGER, {DGX.id: F}, metrics_for(
        {G1.uuid: (GpuProcess(10, 100, None, "c" * 64, "ta", "a"),)}), OWNERS))
    assert w.due(0) == [] and w.since == {}
    doc: dict[str, Any] = {"nodes": [{"id": DGX.id, "gpus": [{"uuid": G1.uuid, "holders": [
        {"service": "a"}, {"service": "b"}]}]}]}
    annotate(doc, service_use([DGX], LEDGER, {DGX.id: F}, over, OWNERS))
    a, b = doc["nodes"][0]["gpus"][0]["holders"]
    assert a == {"service": "a", "memory_used_mib": 30000, "memory_share_mib": 20268,
                 "over_share": True}
    assert b["over_share"] is False


def test_a_new_term_starts_every_over_share_window_anew(tmp_path: Path) -> None:
    """a was over its share once in this daemon's last term; another manager led for an
    hour (a may have kept within it throughout). Elected again, one reading over is no
    whole window: nothing is due. Before, the window the last term opened stood, and a
    was restarted on that one reading."""
    d = Daemon(Config(state_dir=str(tmp_path)), swarm=EmptySwarm())  # type: ignore[arg-type]
    d.use(daemon_steps(d))
    observe = next(s for s in d.pipeline.steps if isinstance(s, ObserveStep))
    now = [100.0]
    observe.watch.clock = lambda: now[0]
    over = metrics_for({G1.uuid: (GpuProcess(10, 30000, None, "c" * 64, "ta", "a"),)})
    observe.watch.update(service_use([DGX], LEDGER, {DGX.id: F}, over, OWNERS))
    d.pipeline.stand_by()  # a cycle found this daemon a follower
    now[0] = 3700.0
    observe.watch.update(service_use([DGX], LEDGER, {DGX.id: F}, over, OWNERS))
    assert observe.watch.due(600) == []


def test_unnamed_processes_are_named_from_swarms_task_list() -> None:
    from swarmgpu.manager.services.overshare import owners
    from swarmgpu.swarm.client import SwarmService, SwarmTask

    svc = SwarmService("sid-a", "a", {}, (), (), "replicated", 1, None, 1)
    task = SwarmTask("ta", "sid-a", DGX.id, 1, "running", "running", (),
                     container_id="c" * 64)
    m = metrics_for({G1.uuid: (GpuProcess(10, 30000, None, "c" * 64),)})  # no engine access
    (u, _b) = service_use([DGX], LEDGER, {DGX.id: F}, m, owners([svc], [task]))
    assert (u.service, u.tasks, u.used_mib, u.over) == ("a", ("ta",), 30000, True)


def test_overshare_config_is_checked(tmp_path: object) -> None:
    import json
    from pathlib import Path

    import pytest

    from swarmgpu.core.config import ConfigError, load_config

    p = Path(str(tmp_path)) / "c.yml"
    p.write_text(json.dumps({"placement": {"overshare": "kill"}}))
    with pytest.raises(ConfigError, match=r"placement\.overshare: 'kill'"):
        load_config(str(p))
    p.write_text(json.dumps({"placement": {"overshare": "restart", "overshare_window_s": 5}}))
    assert load_config(str(p)).placement.overshare == "restart"
