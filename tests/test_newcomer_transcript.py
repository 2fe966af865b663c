"""docs/newcomer-transcript.md says what the code says: its `swarmgpu doctor` output
lists the checks the live node's doctor runs, in their order, and its header counts
and exit code are those of its own lines."""

from __future__ import annotations

import re

from support.paths import REPO

from swarmgpu.agent.doctor import run_doctor
from swarmgpu.agent.procroot import proc_root_view

TRANSCRIPT = (REPO / "docs" / "newcomer-transcript.md").read_text()
_LINE = re.compile(r"^    (OK|WARN|FAIL|SKIP) +([\w.-]+): ", re.M)


def _doctor_block() -> str:
    start = TRANSCRIPT.index("    $ swarmgpu doctor\n")
    return TRANSCRIPT[start:TRANSCRIPT.index("    [exit", start)]


def test_the_transcript_s_doctor_runs_the_checks_the_code_runs() -> None:
    """The walk's doctor output predated four checks (docker.engine, docker.daemon-keys,
    toolkit.grants, gpu.facts): a newcomer comparing their run with it saw lines the
    doc never showed."""
    shown = [cid for _, cid in _LINE.findall(_doctor_block())]
    # The live node's run (`swarmgpu doctor`, root /): its probes all made.
    text, _ = run_doctor("/", agent_probed=True, engine_probed=True,
                         docker_error="no socket", facts_error="no NVML",
                         proc_root=proc_root_view("/proc"))
    ran = [m[1] for m in re.finditer(r"^(?:OK|WARN|FAIL|SKIP) +([\w.-]+): ", text, re.M)]
    assert shown == ran


def test_the_transcript_s_doctor_header_and_exit_match_its_lines() -> None:
    block = _doctor_block()
    statuses = [s for s, _ in _LINE.findall(block)]
    counts = {s.lower(): statuses.count(s) for s in ("OK", "WARN", "FAIL", "SKIP")}
    head = ", ".join(f"{n} {s}" for s, n in counts.items())
    assert f"  {head}\n" in block.splitlines(keepends=True)[1]
    after = TRANSCRIPT[TRANSCRIPT.index(block) + len(block):]
    assert after.startswith(f"    [exit {1 if counts['fail'] else 0}]")
