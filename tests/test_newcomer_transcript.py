"""docs/newcomer-transcript.md says what the code says: its `swarmgpu doctor` output
lists the checks the live node's doctor runs, in their order, and its header counts
and exit code are those of its own lines."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from support.paths import REPO

from swarmgpu.cli import main

TRANSCRIPT = (REPO / "docs" / "newcomer-transcript.md").read_text()
_LINE = re.compile(r"^    (OK|WARN|FAIL|SKIP) +([\w.-]+): ", re.M)


def _doctor_block() -> str:
    start = TRANSCRIPT.index("    $ swarmgpu doctor\n")
    return TRANSCRIPT[start:TRANSCRIPT.index("    [exit", start)]


def test_the_transcript_s_doctor_header_and_exit_match_its_lines() -> None:
    block = _doctor_block()
    statuses = [s for s, _ in _LINE.findall(block)]
    counts = {s.lower(): statuses.count(s) for s in ("OK", "WARN", "FAIL", "SKIP")}
    head = ", ".join(f"{n} {s}" for s, n in counts.items())
    assert f"  {head}\n" in block.splitlines(keepends=True)[1]
    after = TRANSCRIPT[TRANSCRIPT.index(block) + len(block):]
    assert after.startswith(f"    [exit {1 if counts['fail'] else 0}]")


def test_the_transcript_s_doctor_is_what_the_doctor_command_prints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`swarmgpu doctor` as the walk ran it (no dockerd, no NVML, no agent), through the
    command itself: the walk's output predated five checks, and a test that called
    run_doctor with arguments of its own choosing missed a sixth the command adds
    (agents.service, the daemon's default service): a newcomer saw lines the doc
    never showed."""
    import swarmgpu.cli.node as node
    import swarmgpu.swarm.identity as identity
    from swarmgpu.agent.doctor import FactsRead, factsread

    monkeypatch.setattr(node, "_docker_info", lambda: (None, "no socket"))
    monkeypatch.setattr(node, "_open", lambda *a: object())
    monkeypatch.setattr(factsread, "read_facts_within",
                        lambda *a: FactsRead(None, error="no NVML"))
    monkeypatch.setattr(identity, "probe_agent_scheme", lambda: None)
    res = CliRunner().invoke(main, ["doctor"])
    ran = [m[1] for m in re.finditer(r"^(?:OK|WARN|FAIL|SKIP) +([\w.-]+): ", res.output,
                                     re.M)]
    assert [cid for _, cid in _LINE.findall(_doctor_block())] == ran
