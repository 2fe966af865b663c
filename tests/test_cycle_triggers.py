"""What started each of the daemon's cycles, counted on its /metrics
(``swarmgpu_cycles_started_total{trigger}``, ``manager.cycle.triggers``).

Before, nothing said why a cycle ran: whether a fact change reached its label through
the facts watch or on the interval timer could only be guessed from how soon it came
(a timed assertion in the real-swarm test). Now each cycle counts what started it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from support.forged import DGX_F, RecordingSwarm, sw_node

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.triggers import CycleTriggers, follow_up
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes import boundedhttp

DRIVER = "swarmgpu.driver.version.full"


class Agent:
    """The node's agent: answers its facts, with the driver version it is told."""

    def __init__(self) -> None:
        self.driver = "535.104.05"

    def __call__(self, url: str, **_: Any) -> boundedhttp.Fetched:
        facts = replace(DGX_F, hostname="gpu-00", driver_version=self.driver)
        return boundedhttp.Fetched(200, json.dumps(facts.to_dict()).encode())


def started(d: Daemon) -> dict[str, float]:
    got = {why: d.metrics.registry.get_sample_value("swarmgpu_cycles_started_total",
                                                    {"trigger": why})
           for why in ("start", "interval", "facts", "event", "reconnect", "followup")}
    return {why: n for why, n in got.items() if n}


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> Agent:
    a = Agent()
    monkeypatch.setattr(boundedhttp, "get", a)
    return a


def daemon(tmp_path: Path) -> tuple[Daemon, RecordingSwarm]:
    sw = RecordingSwarm([sw_node("n-00", "gpu-00", {"gpu": "true"})], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none", watch_s=1,
                                     url_template="http://{hostname}:{port}"))
    return Daemon(cfg, swarm=sw), sw  # type: ignore[arg-type]


def test_a_fact_change_reaches_its_label_in_a_cycle_the_facts_watch_started(
        tmp_path: Path, agent: Agent) -> None:
    d, sw = daemon(tmp_path)
    d._safe_cycle()  # the scheduler's first run
    assert started(d) == {"start": 1}
    assert sw.node("n-00").labels[DRIVER] == "535.104.05"
    d._watch_facts()  # nothing changed: no cycle asked for
    assert not d._rerun.is_set()
    agent.driver = "550.54.15"
    d._watch_facts()
    assert d._rerun.is_set()
    d._safe_cycle()  # (run now: Daemon.trigger moved the job to now)
    assert sw.node("n-00").labels[DRIVER] == "550.54.15"
    assert started(d) == {"start": 1, "facts": 1}  # and not the timer
    d._safe_cycle()  # nothing asked since: the timer's
    assert started(d) == {"start": 1, "facts": 1, "interval": 1}


def test_an_ask_while_a_cycle_runs_reruns_it_counted_by_the_ask(
        tmp_path: Path, agent: Agent) -> None:
    d, _ = daemon(tmp_path)
    real_cycle = d.cycle
    asks = ["event", "reconnect"]  # one during each of the first two cycles

    def cycle(**kw: Any) -> Any:
        if asks:
            d.trigger(asks.pop(0))  # type: ignore[arg-type]
        return real_cycle(**kw)

    d.cycle = cycle  # type: ignore[method-assign]
    d._safe_cycle()
    assert started(d) == {"start": 1, "event": 1, "reconnect": 1}
    assert not d._rerun.is_set()


def test_the_first_ask_since_a_cycle_began_is_the_one_counted() -> None:
    counter = Counter("c", "c", ["trigger"], registry=(reg := CollectorRegistry()))
    t = CycleTriggers(counter)
    assert t.begin() == "start" and not t.is_set()
    t.ask("event")
    t.ask("facts")  # one cycle serves both: counted once, by the first
    assert t.is_set()
    assert t.begin() == "event" and not t.is_set()
    assert t.begin() == "interval"
    assert reg.get_sample_value("c_total", {"trigger": "facts"}) is None
    assert [reg.get_sample_value("c_total", {"trigger": w})
            for w in ("start", "event", "interval")] == [1, 1, 1]


def test_the_first_cycle_is_counted_start_even_with_an_ask_before_it() -> None:
    """The events thread starts beside the scheduler's first cycle: a node or service
    event in between made that cycle "event", and no "start" was ever counted. The
    first cycle, begun after the ask, serves it."""
    counter = Counter("c", "c", ["trigger"], registry=(reg := CollectorRegistry()))
    t = CycleTriggers(counter)
    t.ask("event")
    assert t.begin() == "start" and not t.is_set()
    assert reg.get_sample_value("c_total", {"trigger": "event"}) is None


def test_a_step_that_wrote_asks_for_the_next_cycle_counted_followup(
        tmp_path: Path, agent: Agent) -> None:
    """The placement, rebalance and preemption steps ask for a cycle a second after they
    wrote. They did so by ``threading.Timer(1.0, host.trigger)``, unchecked by mypy: once
    ``trigger`` took its reason each such timer died in its thread (a ``TypeError`` in 83
    warnings of stop 82's CI) and the next cycle waited for the interval."""
    d, _ = daemon(tmp_path)
    d._safe_cycle()
    follow_up(d.trigger, delay_s=0.0).join(5)
    assert d._rerun.is_set()
    d._safe_cycle()
    assert started(d) == {"start": 1, "followup": 1}


def test_no_step_starts_an_unchecked_timer_on_the_trigger() -> None:
    """Every timed ask goes through ``follow_up`` (typed); a bare ``threading.Timer``
    handed a ``trigger`` is the call that broke."""
    root = Path(__file__).resolve().parents[1] / "swarmgpu"
    bare = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "Timer"
                    and any(isinstance(a, ast.Attribute) and a.attr == "trigger"
                            for a in node.args)):
                bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bare == [], bare
