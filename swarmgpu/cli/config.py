"""Loading the configuration for every command, and `swarmgpu config`."""

from __future__ import annotations

import sys
from typing import Any

import click

from swarmgpu.core.config import Config, ConfigError, describe_defaults, load_config


def load_checked(path: str | None) -> Config:
    """load_config, then what the layers above the configuration check: a pinned
    ``placement.workload`` file must parse (the workload model owns that format)."""
    cfg = load_config(path)
    if cfg.placement.workload != "auto":
        from swarmgpu.allocator.workload import WorkloadError, load_file

        try:
            load_file(cfg.placement.workload)
        except WorkloadError as exc:
            raise ConfigError(f"placement.workload: {exc} (or use 'auto')") from None
    return cfg


def load_cfg(path: str | None, **overrides: Any) -> Config:
    try:
        cfg = load_checked(path)
    except ConfigError as exc:
        click.echo(f"swarmgpu: configuration error: {exc}", err=True)
        sys.exit(2)
    import dataclasses

    for k, v in overrides.items():
        if v is not None:
            cfg = dataclasses.replace(cfg, **{k: v})
    return cfg


@click.group()
def config() -> None:
    """Check or show the daemon configuration."""


@config.command("check")
@click.argument("path", type=click.Path())
def config_check(path: str) -> None:
    """Validate a config file; exit 2 with the key and the fix when it is wrong."""
    try:
        load_checked(path)
    except ConfigError as exc:
        click.echo(f"{path}: {exc}", err=True)
        sys.exit(2)
    click.echo(f"{path}: ok")


@config.command("show-defaults")
def config_defaults() -> None:
    """Print every key with its default."""
    click.echo(describe_defaults(), nl=False)
