from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from support.placement import node

from swarmgpu.core.config import ConfigError, describe_defaults, load_config
from swarmgpu.core.labelkeys import usable_label_key
from swarmgpu.swarm.constraints import (
    ConstraintError,
    node_labels_satisfy,
    node_satisfies,
    parse_constraint,
)


@pytest.mark.parametrize(("key", "ok"), [
    ("swarmgpu.gpu.count", True), ("nvidia.com/gpu.count", False), ("a", False),
    ("_x.y-z", True), ("9abc", False),
])
def test_key_rule(key: str, ok: bool) -> None:
    assert usable_label_key(key) is ok


def test_eval_case_insensitive_and_missing_is_empty() -> None:
    cs = [parse_constraint("node.labels.a==Foo"), parse_constraint("node.labels.b!=x"),
          parse_constraint("node.role==worker")]
    assert node_labels_satisfy(cs, {"a": "foo"})
    assert not node_labels_satisfy(cs, {"a": "foo", "b": "X"})
    assert not node_labels_satisfy([parse_constraint("node.labels.a!=x")], {"a": "X"})
    assert node_labels_satisfy([parse_constraint("node.labels.a!=x")], {})


def test_bad_constraint() -> None:
    with pytest.raises(ConstraintError, match="invalid"):
        parse_constraint("node.labels.nvidia.com/gpu.count==8")
    with pytest.raises(ConstraintError, match="expected"):
        parse_constraint("node.labels.a>=3")


def test_config_defaults_and_typos(tmp_path: Path) -> None:
    cfg = load_config(None, env={})
    assert cfg.agents.port == 9401 and cfg.http.listen.startswith("127.0.0.1:")
    f = tmp_path / "c.yml"
    f.write_text("sync:\n  intervl_s: 5\n")
    typo = r"sync\.intervl_s: unknown key; did you mean 'interval_s'"
    with pytest.raises(ConfigError, match=typo):
        load_config(f, env={})
    f.write_text("agents: {port: abc}\n")
    with pytest.raises(ConfigError, match=r"agents\.port: expected a whole number"):
        load_config(f, env={})
    f.write_text("sync: {prefix: 'nvidia.com/'}\n")
    with pytest.raises(ConfigError, match=r"sync\.prefix"):
        load_config(f, env={})
    f.write_text("- a\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(f, env={})


def test_env_override() -> None:
    cfg = load_config(None, env={"SWARMGPU_SYNC_INTERVAL_S": "7", "SWARMGPU_DRY_RUN": "true"})
    assert cfg.sync.interval_s == 7.0 and cfg.dry_run is True
    with pytest.raises(ConfigError, match="interval_s"):
        load_config(None, env={"SWARMGPU_SYNC_INTERVAL_S": "soon"})


def test_defaults_document_every_section() -> None:
    text = describe_defaults()
    for section in ("agents:", "sync:", "http:", "log:"):
        assert section in text


def test_config_check_reads_a_pinned_workload_file(tmp_path: Path) -> None:
    """The workload model owns its file format; `config check` still reports a bad file
    with the key, and a good one passes."""
    from click.testing import CliRunner

    from swarmgpu.cli import main

    bad, good, cfg = tmp_path / "bad.yml", tmp_path / "good.yml", tmp_path / "c.yml"
    bad.write_text("- {gpus: -1}\n")
    good.write_text("- {gpus: 1, share: 0.5, cpu: 4, weight: 3}\n")
    cfg.write_text(f"placement:\n  workload: {bad}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and "placement.workload:" in res.output, res.output
    cfg.write_text(f"placement:\n  workload: {good}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 0 and res.output.endswith(": ok\n"), res.output


def test_a_field_swarmkit_does_not_know_matches_no_node() -> None:
    """swarmkit's NodeMatches refuses every node on a key it does not read (a typo such
    as node.platform==linux, or node.labels. with no label): Swarm never runs the task,
    so the planner must not pick a node for it."""
    n = replace(node("n-a", "node-a"), os="linux", labels={"": "x"})
    for text in ("node.platform==linux", "node.label.pool==a", "engine.label.x!=y",
                 "node.labels.==x", "node.labels.!=y", "engine.labels.!=y", "hostname==node-a"):
        assert not node_satisfies([parse_constraint(text)], n), text


@pytest.mark.parametrize(("text", "ok"), [
    ("node.ip==10.0.0.5", True), ("node.ip!=10.0.0.5", False), ("node.ip==10.0.0.6", False),
    ("node.ip==10.0.0.0/24", True), ("node.ip!=10.0.0.0/24", False),
    ("node.ip==10.0.1.0/24", False), ("node.ip!=10.0.1.0/24", True),
    ("NODE.IP==10.0.0.5", True), ("node.ip==host-a", False), ("node.ip!=host-a", False),
    ("node.ip==::ffff:10.0.0.5", True),
])
def test_node_ip_is_read_as_swarmkit_reads_it(text: str, ok: bool) -> None:
    """An address or a CIDR subnet against Status.Addr; a malformed one matches no node,
    with either operator."""
    n = replace(node("n-a", "node-a"), addr="10.0.0.5")
    assert node_satisfies([parse_constraint(text)], n) is ok


@pytest.mark.parametrize("text", [
    "node.labels.\u017fsd==true",  # Go's (?i)[a-z] is [A-Za-z\u017f\u212a]
    "node.labels.dis\u212a==a\u017f",
    "  node.labels.a  ==  b c\u00a0",  # TrimSpace: Unicode spaces around each side
])
def test_parse_accepts_what_swarmkit_accepts(text: str) -> None:
    """A constraint Swarm runs under is never dropped as unparsable (the planner would
    ignore it and hold GPUs on a node Swarm refuses)."""
    c = parse_constraint(text)
    assert c.op == "==" and not c.field.startswith(" ") and c.value == c.value.strip()


@pytest.mark.parametrize(("text", "why"), [
    ("node.labels.a==", "value ''"),  # an empty value
    ("node.labels.a!=b=c", "value 'b=c'"),
    ("node.labels.a!=b==c", "key 'node.labels.a!=b'"),  # '==' is looked for first
    ("node.labels.a==b\x0bc", "value"),  # Go's \s is [\t\n\f\r ]: no \v
    ("\x1cnode.labels.a==b", "key"),  # TrimSpace keeps U+001C (str.strip drops it)
    ("node.labels.a==\u00e4", "value"),
    ("node.labels.a==x!", "value"),
])
def test_parse_refuses_what_swarmkit_refuses(text: str, why: str) -> None:
    with pytest.raises(ConstraintError, match=re.escape(why)):
        parse_constraint(text)


def test_values_compare_as_go_equal_fold() -> None:
    """strings.EqualFold: the long s folds to s, the Kelvin sign to k; nothing else
    outside ASCII folds to a letter a constraint can hold."""
    n = node("n-a", "node-a", {"disk": "\u017fsd", "kind": "\u212aX", "t": "\u0130"})
    assert node_satisfies([parse_constraint("node.labels.disk==SSD")], n)
    assert node_satisfies([parse_constraint("node.labels.kind==kx")], n)
    assert not node_satisfies([parse_constraint("node.labels.t==i")], n)
    assert node_labels_satisfy([parse_constraint("node.labels.disk==ssd")], n.labels)


def test_every_constraint_the_docs_show_is_one_swarm_takes() -> None:
    """A constraint shown in README or docs/ in backticks (`node.labels...==...`) parses
    as swarmkit's does: the label table once showed `...count!=`, which Swarm refuses
    (its value may not be empty)."""
    repo = Path(__file__).resolve().parent.parent
    shown: list[tuple[str, str]] = []
    for doc in [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]:
        for c in re.findall(r"`(node\.(?:labels|platform|role|hostname|id)[^`\s]*"
                            r"\s*(?:==|!=)[^`]*)`", doc.read_text()):
            shown.append((doc.name, c))
    assert len(shown) > 20, shown
    bad = []
    for where, c in shown:
        if "<" in c or "$" in c:  # a placeholder (`<profile>`, `${VAR}`), not a constraint
            continue
        try:
            parse_constraint(c)
        except ConstraintError as e:
            bad.append(f"{where}: {c!r}: {e}")
    assert not bad, bad
