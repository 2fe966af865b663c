"""Loading the configuration for every command, and `swarmgpu config`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from swarmgpu.cli.said import say_error
from swarmgpu.core.boundedfile import FileRefused, read_bounded_text
from swarmgpu.core.config import Config, ConfigError, describe_defaults, load_config_report
from swarmgpu.core.configvalues import locate_in
from swarmgpu.core.envfile import parse_env_file
from swarmgpu.core.envnames import unread_variables
from swarmgpu.core.hourcapped import hour_capped
from swarmgpu.core.yamlfile import Lines, read_yaml_lines

CONFIG_HELP = "YAML config (default: built-in defaults)."


class ConfigPath(click.Path):
    """A config file's path; an empty one is refused naming the option (``Path('')``
    is '.': it was refused as "config file .: a directory", naming no option)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            option = not isinstance(param, click.Argument)
            leave = ", or leave the option out for the built-in defaults" if option else ""
            self.fail(f"an empty path; give the path of the YAML file{leave}", param, ctx)
        return super().convert(value, param, ctx)


def locate(message: str, path: str | os.PathLike[str] | None) -> str:
    """``message`` (``key: what is wrong``) located in the config file at ``path``, as
    ``load_config_report`` locates its own: for a check made outside it (below)."""
    lines: Lines = {}
    if path is not None:
        with contextlib.suppress(ConfigError):  # unreadable: its own error says so
            lines = read_yaml_lines(Path(path), "config", ConfigError, sole=True)[1]
    return locate_in(message, path, lines, {})


def warning_at(message: str, path: str | None) -> str:
    """A warning (``key: why``) located as an error is: ``FILE:LINE: warning: ...``."""
    located = locate(message, path)
    return f"{located[:len(located) - len(message)]}warning: {message}"


def load_checked(path: str | None, notes: list[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Config:
    """The configuration, checked as a whole: the keys, then what the layers above the
    configuration check (a pinned ``placement.workload`` file must parse; the workload
    model owns that format). Raises ConfigError with every problem found. ``notes``
    gets the deprecation notes (keys of an older layout, still read). ``env``: the
    environment whose SWARMGPU_* overrides apply (None: this process's)."""
    env = os.environ if env is None else env
    cfg, errors = load_config_report(path, env=env, notes=notes)
    # (a relative path is said once, by the report: not read from this shell's directory)
    if cfg.placement.workload != "auto" and os.path.isabs(cfg.placement.workload):
        from swarmgpu.allocator.workload import WorkloadError, load_file

        try:
            load_file(cfg.placement.workload)
        except WorkloadError as exc:
            errors.append(locate(f"placement.workload: {exc} (or use 'auto')", path))
    if os.path.isabs(cfg.http.token_file):
        from swarmgpu.manager.web.webauth import token_file_problem

        # The daemon's token opens the map from anywhere: one this process can read and
        # that is short or malformed is refused here, not found out by a guesser.
        if (why := token_file_problem(cfg.http.token_file)) is not None:
            var = "SWARMGPU_HTTP_TOKEN_FILE"
            errors.append(f"{var}: {why}" if var in env else locate(why, path))
    if os.path.isabs(cfg.agents.token_file):
        from swarmgpu.swarm.identity import agent_token_problem

        # The agents' token opens their /metrics (and /facts in token mode): a short one
        # is refused here, as the agents refuse it at start.
        if (why := agent_token_problem(cfg.agents.token_file)) is not None:
            var = "SWARMGPU_AGENTS_TOKEN_FILE"
            errors.append(f"{var}: {why}" if var in env else locate(why, path))
    if errors:
        raise ConfigError(errors)
    return cfg


def say_notes(where: str | None, notes: list[str]) -> None:
    """The configuration's deprecation notes (keys of an older layout, still read), on
    stderr: the one way every command that loads the configuration says them."""
    for note in notes:
        click.echo(f"{where or 'configuration'}: note: {note}", err=True)


def load_cfg(path: str | None, *, config_exit: int = 2, **overrides: Any) -> Config:
    """The checked configuration of a command (``run``, ``audit``, ...): its errors end
    the command (exit ``config_exit``: ``run``'s is ``exitcodes.CONFIG_ERROR``), its
    deprecation notes are said (``say_notes``)."""
    notes: list[str] = []
    try:
        cfg = load_checked(path, notes)
    except ConfigError as exc:
        say_notes(path, notes)
        for err in exc.errors:
            say_error(f"configuration error: {err}")
        sys.exit(config_exit)
    say_notes(path, notes)
    for w in hour_capped(cfg):  # (valid: said at every start too)
        click.echo(warning_at(w, path), err=True)
    import dataclasses

    for k, v in overrides.items():
        if v is not None:
            cfg = dataclasses.replace(cfg, **{k: v})
    return cfg


@click.group()
def config() -> None:
    """Check or show the daemon configuration."""


def unit_env(env_file: str | None) -> Mapping[str, str] | None:
    """The environment a check applies: ``env_file``'s variables alone (the systemd
    unit's EnvironmentFile: its daemon never sees this shell's), or None (this
    process's). Exit 2 naming the file when it cannot be read as systemd reads it."""
    if env_file is None:
        return None
    try:
        return parse_env_file(read_bounded_text(env_file, 1024 * 1024))
    except (OSError, FileRefused, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        click.echo(f"{env_file}: env file: cannot read it ({why})", err=True)
        sys.exit(2)


@config.command("check")
@click.option("--env-file", type=click.Path(dir_okay=False),
              help="The unit's EnvironmentFile (/etc/swarmgpu/env): its SWARMGPU_* "
                   "overrides are checked as the daemon systemd starts applies them, "
                   "instead of this shell's.")
@click.argument("path", type=ConfigPath())
def config_check(path: str, env_file: str | None) -> None:
    """Validate a config file: every problem, each with its key and the fix.

    Exit 0 valid, 2 invalid (or unreadable). Each error is located: FILE:LINE: for a
    key of the file, FILE: for the whole file (unreadable, not YAML, not a mapping),
    the variable's name for one of the environment's SWARMGPU_*
    overrides (checked with it, as the daemon would apply them; with --env-file, those
    of that file alone). A key of an older
    layout that is still read gets a deprecation note (not an error) naming where it
    goes now. A tenant whose globs match the agents' service (agents.service) gets a
    warning (not an error): the daemon would take that service for the tenant's."""
    notes: list[str] = []
    env = unit_env(env_file)
    try:
        cfg = load_checked(path, notes, env)
    except ConfigError as exc:
        say_notes(path, notes)
        if len(exc.errors) > 1:
            click.echo(f"{path}: {len(exc.errors)} errors", err=True)
        for err in exc.errors:
            click.echo(_named_once(err, path), err=True)
        sys.exit(2)
    say_notes(path, notes)
    from swarmgpu.core.tenants import agents_service_takers
    from swarmgpu.manager.services.tenants import Tenants, specs_of

    # valid, but the agents' service may be a tenant's: said, not refused (exit 0)
    warnings = [f"{path}: warning: {w}" for w in agents_service_takers(
        specs_of(Tenants.from_config(cfg)), cfg.agents.service)]
    warnings += [warning_at(w, path) for w in hour_capped(cfg)]
    warnings += [f"warning: {w}" for w in unread_variables(
        os.environ if env is None else env, Config, all_of=env is not None)]
    for w in warnings:
        click.echo(w, err=True)
    said = [f"{len(notes)} deprecated key(s) read: see the notes"] if notes else []
    said += [f"{len(warnings)} warning(s): see above"] if warnings else []
    click.echo(f"{path}: ok" + (f" ({'; '.join(said)})" if said else ""))


def _named_once(err: str, path: str) -> str:
    """``err`` as `config check` prints it, ``FILE:`` first and the file named once: a
    file-level error names the file itself (``config file FILE: why``), which read
    "c.yml: config file c.yml: cannot read it"; ``config file FILE:L:C:`` (a YAML
    syntax error) is ``FILE:L:C:``."""
    if err.startswith((f"{path}:", "SWARMGPU_")):  # located already
        return err
    head = f"config file {Path(path)}:"
    if err.startswith(head) and not err.startswith(head + " "):
        return f"{path}:{err.removeprefix(head)}"
    return f"{path}: {err.removeprefix(f'config file {Path(path)}: ')}"


@config.command("show-defaults")
def config_defaults() -> None:
    """Print every key with its default."""
    click.echo(describe_defaults(), nl=False)
