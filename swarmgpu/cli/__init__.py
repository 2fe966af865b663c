"""The `swarmgpu` command line: the top layer, the only one that may import every other.

One module per kind of command (``node``, ``manager``, ``sim``, ``config``); ``main`` is the
group that gathers them (the ``swarmgpu`` console script and ``python -m swarmgpu.cli``).
"""

from __future__ import annotations

import click

from swarmgpu.cli import config, manager, node, sim


@click.group()
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
main.add_command(sim.simulate)
main.add_command(sim.simulate_derive)

__all__ = ["main"]
