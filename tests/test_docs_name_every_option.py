"""Docs and CLI in step: every option a command's `--help` prints is named on the page
that describes the command, and every option a page's `swarmgpu COMMAND ...` line gives
is one that command has (a newcomer copies those lines)."""

from __future__ import annotations

import re

import click
from support.paths import REPO

from swarmgpu.cli import main

# The page(s) that describe each command to its reader.
PAGES = {
    "facts": ["docs/facts-schema.md"],
    "agent": ["docs/systemd.md", "docs/security.md", "docs/facts-schema.md"],
    "doctor": ["docs/doctor.md"],
    "node-config": ["docs/deploy.md", "docs/facts-schema.md"],
    "run": ["README.md"],
    "audit": ["README.md"],
    "plan": ["README.md"],
    "status": ["README.md"],
    "apply": ["README.md"],
    "render": ["docs/requests.md"],
    "simulate": ["docs/simulate.md"],
    "simulate-derive": ["docs/simulate.md"],
    "config check": ["docs/systemd.md"],
    "config show-defaults": ["docs/systemd.md"],
    "docker-proxy": ["docs/security.md"],
}
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _commands(group: click.Group = main, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out |= _commands(cmd, f"{prefix}{name} ")
        else:
            out[prefix + name] = cmd
    return out


def _options(cmd: click.Command) -> list[list[str]]:
    return [p.opts + p.secondary_opts for p in cmd.params if isinstance(p, click.Option)]


def test_every_command_has_a_page() -> None:
    assert set(_commands()) == set(PAGES)


def test_every_option_of_help_is_on_its_command_s_page() -> None:
    missing = []
    for name, cmd in _commands().items():
        text = " ".join((REPO / page).read_text() for page in PAGES[name])
        for opts in _options(cmd):
            longs = [o for o in opts if o.startswith("--")]
            if not any(re.search(rf"{re.escape(o)}(?![\w-])", text) for o in longs):
                missing.append(f"{name} {longs[0]} (not in {', '.join(PAGES[name])})")
    assert not missing, missing


def _command_lines(text: str) -> list[str]:
    """Code the reader copies: one-line `spans` and indented lines (continuations joined)."""
    code = re.sub(r"\\\n\s*", " ", text)
    return re.findall(r"`([^`\n]+)`", text) + re.findall(r"^(?: {4}|\t)\$? ?(.*)$", code, re.M)


def test_every_option_a_page_gives_a_command_is_one_it_has() -> None:
    commands = _commands()
    unknown = []
    for page in DOCS:
        for line in _command_lines(page.read_text()):
            # Up to a pipe, `;`, `&&` or a comment: what follows is another command's.
            for m in re.finditer(r"\bswarmgpu ([a-z][a-z-]+(?: (?:check|show-defaults)\b)?)"
                                 r"(?!:)([^|;&#]*)", line):
                cmd = commands.get(m.group(1))
                if cmd is None:
                    continue
                have = {o for opts in _options(cmd) for o in opts} | {"--help"}
                unknown += [f"{page.name}: swarmgpu {m.group(1)} {o}"
                            for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", m.group(2))
                            if o not in have]
    assert not unknown, unknown


def test_readme_s_simulate_synopsis_names_every_simulate_option() -> None:
    """Before: it left out --speedup, --priorities, --drain and --progress, and read as
    the whole command."""
    readme = " ".join((REPO / "README.md").read_text().split())
    synopsis = re.search(r"`swarmgpu simulate \[[^`]*`", readme)
    assert synopsis, "README has no `swarmgpu simulate [...]` synopsis"
    missing = [opts[0] for opts in _options(_commands()["simulate"])
               if not any(re.search(rf"{re.escape(o)}(?![\w-])", synopsis.group(0))
                          for o in opts)]
    assert not missing, missing
