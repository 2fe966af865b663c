"""The `swarmgpu` command line: the top layer, the only one that may import every other.

One module per kind of command (``node``, ``manager``, ``sim``, ``config``, ``proxy``:
the docker-proxy); ``logs`` sets up logging for all of them, ``said`` starts their error
lines (``swarmgpu COMMAND:``), ``exitcodes`` the codes a service manager acts on (a
config error's, which systemd does not restart); ``lastcycle`` reads how the
daemon's last cycle ended (``status --json``), ``daemonmoves`` its move proposals, or
why they were not read (``plan``); ``strictopts`` the number options' types; ``main``
is the group that gathers them (the ``swarmgpu`` console script and
``python -m swarmgpu.cli``).
"""

from __future__ import annotations

import click

from swarmgpu.cli import config, manager, node, proxy, sim

# Every command's exit status, in one place (`swarmgpu --help`; README "Exit codes").
# 2 is also click's own status for a usage error (an unknown option, a missing file).
EXIT_CODES = """\b
Exit codes:
  facts, node-config    0 printed; 2 the fact source cannot be opened or read (a
                        source that lists no GPU and says why: facts prints them
                        all the same, the error on stderr)
  agent                 runs until stopped (SIGTERM ends it); 78 bad --listen,
                        --refresh-s, --allowed-hosts, --trusted-proxies or token
                        at start; 2 bad source, profile or identity at start, or
                        cannot listen
  doctor                0 no check failed (warnings are advice); 1 a check failed;
                        2 could not run (--root no directory, a source that
                        cannot be opened, a malformed fixture file)
  run                   0 --once done, or stopped by SIGTERM/SIGINT (--once too)
                        after the writes and node reads in flight (a second
                        signal ends it at once: 130, 143); 78 bad config; 2
                        another run holds state_dir's lock, engine unreachable
                        (after 60 s of retries; --once: at once), or --once
                        whose cycle could not ask or read the engine (it went
                        away)
  audit                 0 clean or advisories only; 1 findings needing action
                        (--strict: any finding); 2 could not run
  plan                  0 shown; 1 planning a service raised (status failed: a
                        fault to report); 2 bad config or the swarm cannot be read
  status                0 shown; 2 bad config or the swarm cannot be read
  apply                 0 written (or nothing held back; --dry-run: shown); 1 a
                        service unknown, not annotated, or its write failed; 2 bad
                        config or the swarm cannot be read
  render                0 the stack was written (--check: it is valid); 1 the stack
                        is invalid: every error printed, nothing written; 2 the
                        file, the config or the swarm could not be read, or a bad
                        option (-n docker refuses, --check with -o)
  simulate, simulate-derive
                        0 done; 2 bad option or trace (nothing replayed), --plot
                        without matplotlib
  config check          0 valid; 2 invalid or unreadable (every problem printed)
  config show-defaults  0
  docker-proxy          runs until stopped (SIGTERM, SIGINT: 0 once the turns in
                        flight end); 2 bad --listen/--upstream/--prefix/
                        --own-service or cannot listen"""


@click.group(epilog=EXIT_CODES)
@click.version_option(package_name="swarmgpu")
def main() -> None:
    """GPU-aware placement for Docker Swarm."""


main.add_command(config.config)
main.add_command(node.facts)
main.add_command(node.agent)
main.add_command(node.doctor)
main.add_command(node.node_config_cmd)
main.add_command(manager.run)
main.add_command(manager.audit)
main.add_command(manager.plan)
main.add_command(manager.render)
main.add_command(manager.status)
main.add_command(manager.apply_cmd)
main.add_command(proxy.docker_proxy)
main.add_command(sim.simulate)
main.add_command(sim.simulate_derive)

__all__ = ["main"]
