"""Rebalance policies as plugins: each with its own config section, defaults and checks
(core.rebalanceconfig, manager.rebalance.policies); the flat keys of older releases
still read, with a deprecation note."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.core.commalist import comma_list
from swarmgpu.core.config import ConfigError, describe_defaults, load_config, load_config_report
from swarmgpu.core.rebalanceconfig import (
    FLAT_KEYS,
    POLICY_ORDER,
    RebalanceConfig,
    policy_names,
)
from swarmgpu.manager.rebalance.policies import PLUGINS, enabled

REPO = Path(__file__).resolve().parent.parent

# Every flat key of the last release with the flat layout, set off its default.
OLD = {"hot_util_pct": 80.0, "hot_clear_pct": 70.0, "hot_window_s": 120.0,
       "idle_util_pct": 10.0, "idle_clear_pct": 20.0, "idle_window_s": 240.0,
       "frag_pct": 30.0, "frag_window_s": 200.0, "spread_high_pct": 95.0,
       "spread_low_pct": 5.0, "defrag_max_moves": 3, "fragmentation_moves_per_hour": 2,
       "fragmentation_moves_per_100_placements": 1.5, "health_drain_node": True,
       "cooldown_s": 900.0, "max_moves_per_cycle": 2}
NEW = {"cooldown_s": 900.0, "max_moves_per_cycle": 2,
       "hotspot": {"util_pct": 80.0, "clear_pct": 70.0, "window_s": 120.0},
       "consolidation": {"idle_util_pct": 10.0, "idle_clear_pct": 20.0,
                         "idle_window_s": 240.0, "frag_pct": 30.0, "frag_window_s": 200.0},
       "spread": {"high_pct": 95.0, "low_pct": 5.0}, "defrag": {"max_moves": 3},
       "fragmentation": {"moves_per_hour": 2, "moves_per_100_placements": 1.5},
       "health": {"drain_node": True}}


def _file(tmp: Path, rebalance: object, name: str = "c.yml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump({"rebalance": rebalance}))
    return p


def test_every_flat_key_reads_as_its_policys_key(tmp_path: Path) -> None:
    assert set(OLD) - {"cooldown_s", "max_moves_per_cycle"} == set(FLAT_KEYS)
    notes: list[str] = []
    old = load_config(_file(tmp_path, OLD), env={}, notes=notes)
    new = load_config(_file(tmp_path, NEW, "n.yml"), env={})
    assert old == new
    assert new.rebalance.hotspot.util_pct == 80.0 and new.rebalance.health.drain_node
    assert len(notes) == len(FLAT_KEYS)
    assert ("rebalance.hot_util_pct: deprecated, read as rebalance.hotspot.util_pct (each "
            "policy has its section now: docs/rebalancing.md); move it there") in notes


def test_config_check_notes_each_old_key_and_passes(tmp_path: Path) -> None:
    path = _file(tmp_path, {"hot_window_s": 60, "health_drain_node": True})
    res = CliRunner().invoke(main, ["config", "check", str(path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert f"{path}: note: rebalance.hot_window_s: deprecated, read as " \
           "rebalance.hotspot.window_s (each policy has its section now: " \
           "docs/rebalancing.md); move it there" in lines
    assert any("rebalance.health_drain_node: deprecated, read as "
               "rebalance.health.drain_node" in ln for ln in lines)
    assert lines[-1] == f"{path}: ok (2 deprecated key(s) read: see the notes)"
    res = CliRunner().invoke(main, ["config", "check", str(_file(tmp_path, NEW, "n.yml"))])
    assert res.exit_code == 0 and ": note: " not in res.output, res.output


@pytest.mark.parametrize("argv", [
    ["audit"], ["status"], ["plan"], ["apply", "--service", "web", "--dry-run"],
    ["run", "--once", "--dry-run"], ["render", "--check", "-n", "s", "-"]])
def test_every_command_says_the_notes_as_config_check(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """audit, status and plan read an older layout's keys without a word: only run (in
    its log) and config check said them. Every command that loads the configuration
    says them now, as config check does, before it reaches the engine (none here)."""
    path = _file(tmp_path, {"hot_window_s": 60})
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'gone.sock'}")
    monkeypatch.delenv("SWARMGPU_DOCKER_HOST", raising=False)
    monkeypatch.setenv("SWARMGPU_STATE_DIR", str(tmp_path / "state"))
    res = CliRunner().invoke(main, [*argv, "--config", str(path)], input="services: {}\n")
    assert f"{path}: note: rebalance.hot_window_s: deprecated, read as " \
           "rebalance.hotspot.window_s" in res.output, res.output


def test_a_key_given_both_ways_is_an_error(tmp_path: Path) -> None:
    path = _file(tmp_path, {"hot_util_pct": 80, "hotspot": {"util_pct": 90}})
    with pytest.raises(ConfigError, match=r"rebalance\.hot_util_pct: given twice, also as "
                       r"rebalance\.hotspot\.util_pct; keep only rebalance\.hotspot\.util_pct"):
        load_config(path, env={})
    with pytest.raises(ConfigError, match=r"rebalance\.hot_util_pct: cannot go into "
                       r"rebalance\.hotspot, which is not a mapping"):
        load_config(_file(tmp_path, {"hot_util_pct": 80, "hotspot": 3}), env={})


def test_an_old_keys_error_is_located_at_its_own_line(tmp_path: Path) -> None:
    """Strict config locates each error FILE:LINE; a flat key of an older release is
    checked as its policy's key, at the line the file wrote it on."""
    path = tmp_path / "old.yml"
    path.write_text("rebalance:\n  max_moves_per_cycle: 1\n  hot_util_pct: 150\n")
    _, errors = load_config_report(path, env={})
    assert errors == [f"{path}:3: rebalance.hotspot.util_pct: 150.0 is not a percentage "
                      "0-100"], errors


def test_each_policy_checks_its_own_section(tmp_path: Path) -> None:
    cases = {"hotspot": ({"clear_pct": 90}, r"rebalance\.hotspot\.clear_pct: must be <= "
                                            r"util_pct"),
             "consolidation": ({"idle_window_s": 0}, r"rebalance\.consolidation\."
                                                     r"idle_window_s: must be > 0"),
             "spread": ({"low_pct": 95}, r"rebalance\.spread\.low_pct: must be below"),
             "defrag": ({"max_moves": -1}, r"rebalance\.defrag\.max_moves: must be >= 0"),
             "fragmentation": ({"moves_per_hour": -1}, r"rebalance\.fragmentation\."
                                                      r"moves_per_hour: must be >= 0"),
             "health": ({"drain_nodes": True}, r"rebalance\.health\.drain_nodes: unknown "
                                               r"key; did you mean 'drain_node'")}
    assert set(cases) == set(POLICY_ORDER)
    for policy, (keys, msg) in cases.items():
        with pytest.raises(ConfigError, match=msg):
            load_config(_file(tmp_path, {policy: keys}), env={})
    _, errors = load_config_report(_file(tmp_path, {"consolidation": {"idle_clear_pct": 80}}),
                                   env={})
    assert any("consolidation.idle_clear_pct must be below hotspot.clear_pct" in e
               for e in errors), errors


def test_show_defaults_has_one_section_per_policy() -> None:
    text = describe_defaults()
    doc = yaml.safe_load(text)["rebalance"]
    for name in POLICY_ORDER:
        section = doc[name]
        want = dataclasses.asdict(getattr(RebalanceConfig(), name))
        assert section == want, (name, section)
    assert not set(doc) & set(FLAT_KEYS)
    res = CliRunner().invoke(main, ["config", "show-defaults"])
    assert res.exit_code == 0 and "  hotspot:\n    util_pct: 85.0\n" in res.output


def test_the_shipped_config_uses_the_sections(tmp_path: Path) -> None:
    notes: list[str] = []
    cfg = load_config(REPO / "systemd" / "config.yml", env={}, notes=notes)
    assert notes == [] and cfg.rebalance == dataclasses.replace(
        RebalanceConfig(), metrics_url_template=cfg.rebalance.metrics_url_template)


def test_env_overrides_still_apply_beside_old_keys(tmp_path: Path) -> None:
    cfg = load_config(_file(tmp_path, {"hot_window_s": 60}),
                      env={"SWARMGPU_SYNC_INTERVAL_S": "12"})
    assert cfg.sync.interval_s == 12.0 and cfg.rebalance.hotspot.window_s == 60.0


def test_the_plugins_run_in_order_each_with_its_section() -> None:
    assert set(PLUGINS) == set(POLICY_ORDER)
    rb = RebalanceConfig(policies=" spread, health,,hotspot,spread ")
    got = enabled(rb)
    assert [p.name for p in got] == ["health", "hotspot", "spread"]  # POLICY_ORDER
    rb = RebalanceConfig()
    for p in enabled(rb):  # each built from its own section
        assert vars(p)["cfg"] is getattr(rb, p.name)
    assert policy_names(" a, b,,a ") == ("a", "b") and comma_list(" a, b,,a ") == ["a", "b",
                                                                                 "a"]
    assert not RebalanceConfig(policies="hotspot").health_policy
    assert RebalanceConfig(policies="hotspot , health").health_policy


def test_a_statement_is_kept_or_dropped_as_one() -> None:
    """Moves tried together (consolidation, defragmentation) reserve their targets in
    the statement's own ledger; only ``commit`` makes them the pass's."""
    from swarmgpu.manager.placement import Holding
    from swarmgpu.manager.rebalance.context import Context, Inputs
    from swarmgpu.manager.rebalance.moves import Move, Trigger

    held = {"a": {"n1": Holding("a", "n1", ("G1",), (500,))}}
    ctx = Context.build(Inputs(nodes=[], services=[], tasks=[], facts={}, ledger=held,
                               gpus={}, node_signals={}, cfg=RebalanceConfig(), now=0.0))
    move = Move("a", "id-a", "n1", "h1", ("G1",), (500,), "n2", "h2", (0,), ("G2",),
                (500,), Trigger.DEFRAG, None, "r", "g")
    st = ctx.statement(evict=[("a", "n1")])
    st.move(move)
    assert st.ledger["a"] == {"n2": Holding("a", "n2", ("G2",), (500,))}
    assert ctx.ledger == held and ctx.moves == []  # dropped: nothing changed
    st.commit()
    assert ctx.moves == [move] and set(ctx.ledger["a"]) == {"n1", "n2"}  # make-before-break
