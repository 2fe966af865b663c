"""A number written with a leading zero (``parallel: 010``) in a file only swarmgpu reads:
8 to swarmgpu's reader (go-yaml v3 and YAML 1.1 read a leading 0 as octal), 10 to a
YAML 1.2 reader (ruamel.yaml, an editor's schema check). Refused, naming the key, its
line and both readings; a stack, docker's file, keeps docker's octal (``mode: 0444``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.file import load_facts
from swarmgpu.agent.facts.profile import ProfileError, load_profile
from swarmgpu.allocator.workload import WorkloadError, load_file
from swarmgpu.cli import main
from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.yamlfile import parse_yaml


@pytest.mark.parametrize(("written", "fix"), [
    ("010", "write 8 or 10"), ("+010", "write 8 or 10"), ("0_10", "write 8 or 10"),
    ("0010", "write 8 or 10"), ("!!int 010", "write 8 or 10"), ("017", "write 15 or 17"),
    ("08", "write 8"), ("07", "write 7"),
])
@pytest.mark.parametrize(("section", "key", "line"), [
    ("agents", "parallel", 3), ("agents", "timeout_s", 3), ("sync", "interval_s", 3),
])
def test_a_leading_zero_number_is_refused_naming_the_key_its_line_and_the_fix(
        tmp_path: Path, written: str, fix: str, section: str, key: str, line: int) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"dry_run: true\n{section}:\n  {key}: {written}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, env={})
    said = str(exc.value)
    assert f"{section}.{key} at line {line}: " in said, said
    assert "leading 0" in said and said.endswith(f"{fix} (quote it if it is text)"), said


def test_config_check_says_it_with_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("queues:\n  research: {guaranteed: 2, max: 010}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "queues.research.max at line 2: 010 has a leading 0: 8 to swarmgpu" in res.output
    assert "10 to a YAML 1.2 reader" in res.output, res.output


@pytest.mark.parametrize(("written", "read"), [
    ("0o10", 8), ("0b10", 2), ("0x10", 16), ("0", 0), ("10", 10), ("1_0", 10),
])
def test_the_prefixed_forms_and_plain_numbers_are_read_as_before(
        tmp_path: Path, written: str, read: int) -> None:
    # 0o10 and 0b10 are one number to every reader that takes them as one (YAML 1.1 has
    # no 0o, YAML 1.2 no 0b: text there, which no typed key takes): not ambiguous.
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"preemption:\n  max_per_hour: {written}\n")
    assert load_config(cfg, env={}).preemption.max_per_hour == read


def test_quoted_text_and_a_fraction_are_not_numbers_with_a_leading_zero(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  service: '010'\nsync:\n  interval_s: 010.5\n")
    got = load_config(cfg, env={})
    assert got.agents.service == "010" and got.sync.interval_s == 10.5


def test_a_pinned_workload_file_refuses_it_too(tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.yml"
    shapes.write_text("- {gpus: 1, share: 0.5, weight: 3}\n- {gpus: 02, weight: 1}\n")
    with pytest.raises(WorkloadError) as exc:
        load_file(shapes)
    assert "[1].gpus at line 2: 02 has a leading 0" in str(exc.value), exc.value


def test_a_stack_keeps_dockers_octal() -> None:
    # docker stack deploy (go-yaml v3, v2 before docker 28) and docker compose (compose-go:
    # `mode: 0440` is 0o440) read a leading 0 as octal: one reading among docker's readers.
    stack = "services:\n  s:\n    configs:\n      - {source: c, mode: 0444}\n"
    got = parse_yaml(stack, "stack", ValueError, docker=True)
    assert got["services"]["s"]["configs"][0]["mode"] == 0o444


def test_the_agents_facts_and_profile_files_refuse_it_too(tmp_path: Path) -> None:
    facts = tmp_path / "facts.yml"
    facts.write_text("node: {hostname: n1}\ngpus:\n  - {index: 0, memory_mib: 081920}\n")
    with pytest.raises(SourceError) as exc:
        load_facts(facts)
    assert "gpus[0].memory_mib at line 3: 081920 has a leading 0" in str(exc.value)
    profile = tmp_path / "profile.yml"
    profile.write_text("default: {util: 010}\n")
    with pytest.raises(ProfileError) as perr:
        load_profile(profile, NodeFacts(hostname="n1"))
    assert "default.util at line 1: 010 has a leading 0: 8 to swarmgpu" in str(perr.value)


def test_every_leading_zero_number_of_a_file_is_named(tmp_path: Path) -> None:
    # Before, only the first was said: fixed, the next refusal named the second, a
    # config check per number. The first is said whole, the next three by key and line.
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  parallel: 010\n  timeout_s: 017\nsync:\n  interval_s: 08\n"
                   "preemption:\n  max_per_hour: 09\nhistory:\n  samples: 0240\n"
                   "  max_gpus: 01\n")
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, env={})
    said = str(exc.value)
    assert "agents.parallel at line 2: 010 has a leading 0: 8 to swarmgpu" in said, said
    assert said.endswith("; also agents.timeout_s at line 3 (017), sync.interval_s at line 5 "
                         "(08), preemption.max_per_hour at line 7 (09) (and 2 more): the same "
                         "for each"), said
