"""Every command's exit codes are documented: in `swarmgpu --help` and in the README."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from support.paths import REPO

from swarmgpu.cli import EXIT_CODES, main
from swarmgpu.cli.exitcodes import CONFIG_ERROR


def _commands() -> list[str]:
    out = []
    for name, cmd in main.commands.items():
        if isinstance(cmd, click.Group):
            out += [f"{name} {sub}" for sub in cmd.commands]
        else:
            out.append(name)
    return out


def _documented(text: str) -> set[str]:
    """Command names at the start of each entry (comma-separated), as in EXIT_CODES."""
    names: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"^ {2}(\S[^0-9]*?)(?: {2,}|$)", line)
        if m:
            names |= {n.strip() for n in m.group(1).split(",") if n.strip()}
    return names


def test_help_lists_exit_codes_for_every_command() -> None:
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and "Exit codes:" in res.output
    missing = set(_commands()) - _documented(EXIT_CODES)
    assert not missing, f"no exit codes documented for {sorted(missing)}"


def test_readme_lists_the_same_exit_codes() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    body = textwrap.indent(EXIT_CODES.split("Exit codes:\n", 1)[1], "  ")  # a code block
    assert body in section, "README's Exit codes section differs from `swarmgpu --help`"


def _entry(name: str) -> str:
    """The text of ``name``'s entry in EXIT_CODES (its first line and those under it)."""
    lines = EXIT_CODES.split("Exit codes:\n", 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {name} "))
    rest = lines[start + 1 :]
    end = next((i for i, ln in enumerate(rest) if not ln.startswith("   ")), len(rest))
    return " ".join(ln.strip() for ln in [lines[start], *rest[:end]])


def test_doctor_that_cannot_run_exits_2_as_documented(tmp_path: Path) -> None:
    """Before: `--help` and the README listed 0 and 1 for doctor; a --root that is no
    directory, or a source that cannot be opened, exits 2 (docs/doctor.md)."""
    res = CliRunner().invoke(main, ["doctor", "--root", str(tmp_path / "none")])
    assert res.exit_code == 2 and "is not a directory" in res.output
    res = CliRunner().invoke(main, ["doctor", "--root", str(tmp_path), "--source", "bogus"])
    assert res.exit_code == 2 and "not understood" in res.output
    assert "; 2 " in _entry("doctor"), _entry("doctor")


def test_every_option_says_what_it_does() -> None:
    # `swarmgpu audit --help` listed "--config PATH" and "--json" with no word of what
    # they take or print (so did plan, render, status, apply, doctor, simulate).
    bare = []
    for name in _commands():
        cmd: click.Command = main
        for part in name.split():
            assert isinstance(cmd, click.Group)
            cmd = cmd.commands[part]
        bare += [f"{name} {p.opts[0]}" for p in cmd.params
                 if isinstance(p, click.Option) and not p.help]
    assert not bare, f"options with no help text: {bare}"


def test_plans_exit_1_for_a_service_whose_planning_raised_is_documented() -> None:
    """`plan` exits 1 when planning a service raised (status failed, a fault to report:
    README's `plan` section says so), but its Exit codes entry listed 0 and 2 alone, so a
    script reading the help took 1 for no code plan has."""
    from swarmgpu.manager.commands.plan import plan_exit
    from swarmgpu.manager.placement import ServicePlan, State, Status

    assert plan_exit([ServicePlan("bad", "id-bad", None, "", Status.FAILED, State.FAILED)]) == 1
    entry = next(e for e in _entries() if "plan" in e.split("  ", 1)[0].split(", "))
    assert "; 1 " in entry, entry


def _entries() -> list[str]:
    """Each entry of EXIT_CODES as one line (its first line and those under it)."""
    out: list[str] = []
    for ln in EXIT_CODES.split("Exit codes:\n", 1)[1].splitlines():
        if ln.startswith("   ") and out:
            out[-1] += " " + ln.strip()
        else:
            out.append(ln.strip())
    return out


@pytest.mark.parametrize(("option", "value"), [("--trusted-proxies", "bogus"),
                                              ("--allowed-hosts", "a b")])
def test_agent_options_refused_at_start_are_in_its_exit_codes(option: str, value: str) -> None:
    """Before: `agent` exits on a bad --trusted-proxies or --allowed-hosts, but its
    entry named only source, profile, identity, token, --listen and --refresh-s."""
    res = CliRunner().invoke(main, ["agent", "--source", "file:/none", option, value])
    assert res.exit_code == CONFIG_ERROR and f"swarmgpu agent: {option}" in res.output, res.output
    assert option in _entry("agent"), _entry("agent")
    assert f"{CONFIG_ERROR} bad" in _entry("agent"), _entry("agent")


def test_run_entry_names_its_config_exit() -> None:
    """Before: `run`'s entry said "2 bad config", which exits CONFIG_ERROR (78)."""
    entry = _entry("run")
    assert f"{CONFIG_ERROR} bad config" in entry and "2 bad config" not in entry, entry
