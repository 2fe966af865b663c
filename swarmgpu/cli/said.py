"""How a command's error lines start: ``swarmgpu COMMAND:`` (``swarmgpu config check``
for a subcommand), wherever the line is written. What several commands share (loading
the configuration, reading the swarm, opening a fact source) said ``swarmgpu:`` alone,
so `plan`'s errors read unlike `audit`'s and a script could not tell which one failed.
"""

from __future__ import annotations

import click


def prefix() -> str:
    """``swarmgpu`` and the running command's path under it (the root's own name is
    how it was started, ``main`` or ``__main__.py``: never shown)."""
    names: list[str] = []
    ctx = click.get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.command.name or ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["swarmgpu", *reversed(names)])


def say_error(message: str) -> None:
    """``message`` on stderr, after the running command's ``swarmgpu COMMAND:``."""
    click.echo(f"{prefix()}: {message}", err=True)
