"""`swarmgpu docker-proxy`: the daemon's least-privilege door to the engine socket."""

from __future__ import annotations

import sys

import click

from swarmgpu.cli.logs import setup_logging


@click.command("docker-proxy")
@click.option("--listen", default="unix:///run/swarmgpu/docker.sock", show_default=True,
              envvar="SWARMGPU_PROXY_LISTEN",
              help="unix://PATH (mode 0660) or tcp://127.0.0.1:PORT (or [::1]: every local "
                   "user may use it, docs/security.md); point the daemon's docker_host "
                   "(DOCKER_HOST) at it.")
@click.option("--upstream", default="unix:///var/run/docker.sock", show_default=True,
              envvar="SWARMGPU_PROXY_UPSTREAM", help="The manager's engine socket.")
@click.option("--prefix", default="swarmgpu.", show_default=True,
              envvar="SWARMGPU_SYNC_PREFIX",
              help="The daemon's sync.prefix: the label keys its writes may change.")
@click.option("--own-service", default="", envvar="SWARMGPU_PROXY_SERVICE",
              help="The ID of the Swarm service this proxy runs as ({{.Service.ID}} in the "
                   "stack): every write to it is refused, so the daemon cannot restart the "
                   "proxy. The whole ID (a name or short ID is refused: it would match "
                   "no write). Empty when it is not a service (systemd).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Log lines as text, or one JSON object each.")
def docker_proxy(listen: str, upstream: str, prefix: str, own_service: str,
                 log_format: str) -> None:
    """Forward to the Docker socket only the calls the daemon makes, framed strictly
    and with writes that change only what the daemon changes; 400/403 for the rest
    (the list: docs/security.md, swarmgpu.swarm.dockerproxy.ALLOWED_CALLS)."""
    from swarmgpu.manager.engine.proxy_policy import write_checks
    from swarmgpu.swarm.dockerproxy import serve

    setup_logging("INFO", log_format)
    try:
        serve(listen, upstream, write_checks(prefix), own_service=own_service or None)
    except (ValueError, OSError) as exc:
        click.echo(f"swarmgpu docker-proxy: {exc}", err=True)
        sys.exit(2)
