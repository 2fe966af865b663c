"""The README's first screen for operators: what it names exists and says what the
code and the tools say (commands, files, versions, the units' exposure figures)."""

from __future__ import annotations

import re
import shutil
import subprocess

from click.testing import CliRunner
from support.paths import REPO

from swarmgpu.cli import main

README = (REPO / "README.md").read_text()
FIRST = README.split("## Two commands for a newcomer", 1)[0]


def test_first_screen_has_the_operator_sections_in_order() -> None:
    heads = re.findall(r"^## (.+)$", FIRST, re.M)
    assert heads == ["Requirements", "Install", "Set up a GPU node",
                     "Run the manager and the agents", "Deploy a GPU stack", "Watch it"]
    assert "bash scripts/demo.sh" in README and "bash .ci/run" in README


def test_every_swarmgpu_command_it_names_exists() -> None:
    names = set(re.findall(r"(?:`|^ +|&& )swarmgpu ([a-z][a-z-]+)", FIRST, re.M))
    assert {"render", "node-config", "doctor", "status", "plan", "audit", "config", "agent",
            "run"} <= names, names
    assert names <= set(main.commands), names - set(main.commands)


def test_every_repo_path_it_names_exists() -> None:
    paths = set(re.findall(r"(?<![/\w])((?:scripts|stacks|systemd|docs)/[\w./*-]+)", FIRST))
    assert paths
    for p in paths:
        p = p.rstrip(".,")
        assert list(REPO.glob(p)), p


def test_toolkit_versions_match_doctor() -> None:
    """The toolkit versions given are the ones `doctor` checks against."""
    from swarmgpu.agent.doctor.view import JIT_CDI_DEFAULT_FROM, SWARM_IN_CDI_FROM

    assert "1.19.0 or later in any mode" in FIRST and 'mode = "legacy"' in FIRST
    assert SWARM_IN_CDI_FROM == (1, 19, 0) and JIT_CDI_DEFAULT_FROM == (1, 18, 0)
    assert "1.18.0 made `jit-cdi` the default" in FIRST


def test_render_pipe_is_the_documented_option() -> None:
    res = CliRunner().invoke(main, ["render", "--help"])
    assert res.exit_code == 0 and "-n, --stack" in res.output
    assert "swarmgpu render stack.yml -n NAME | docker stack deploy -c - NAME" in FIRST


def test_unit_exposure_figures_are_what_systemd_analyze_says() -> None:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze missing (systemd)"
    text = " ".join(README.split())
    daemon = re.search(r"`systemd/swarmgpu\.service` \(daemon, [^)]*exposure (\d\.\d)", text)
    agent = re.search(r"`systemd/swarmgpu-agent\.service` \([^)]*?(\d\.\d)\)", text)
    assert daemon and agent, "the README gives both units' exposure"
    said = {"swarmgpu.service": daemon.group(1), "swarmgpu-agent.service": agent.group(1)}
    for unit, figure in said.items():
        r = subprocess.run([tool, "security", "--offline=true", str(REPO / "systemd" / unit)],
                           capture_output=True, text=True, timeout=60, check=False)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
        assert m, r.stdout + r.stderr
        assert m.group(1) == figure, (unit, m.group(1), figure)


def test_docs_name_the_mig_flag_the_cli_has() -> None:
    """docs/facts-schema.md used to name `--mig-layout`; the option is `--mig`."""
    res = CliRunner().invoke(main, ["facts", "--help"])
    assert "--mig TEXT" in res.output and "--mig-layout" not in res.output
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        assert "--mig-layout" not in doc.read_text(), doc.name
    assert "`--mig LAYOUT`" in (REPO / "docs" / "facts-schema.md").read_text()
