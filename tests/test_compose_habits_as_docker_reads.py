"""What render says of compose habits is what every docker CLI on this machine does with
them, deploying to a stand-in engine (``support.docker_clis``): the Compose-specification
keys format 3.8 lacks (``cpus``, ``mem_reservation``, ``platform``, ``profiles``,
``pull_policy``) are refused by `docker stack deploy`, as render refuses them with their
fix; and a ``.env`` beside the stack is not read (moby#29133), as render warns.

CI installs docker: with no docker CLI these tests fail, they do not skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.docker_clis import Engine, deployed, docker_clis, engine

from swarmgpu.manager.commands.render import check_stack

CLIS: list[tuple[str, str] | None] = [*docker_clis()]


@pytest.fixture(scope="module", params=CLIS or [None], ids=lambda c: c and f"{c[0]}-{c[1]}")
def cli(request: pytest.FixtureRequest) -> Iterator[tuple[str, Engine]]:
    """Each docker CLI found, with a stand-in engine to deploy to."""
    if request.param is None:
        pytest.fail(
            "no docker CLI in /usr/bin, /usr/local/bin or on PATH: it is the oracle of this test"
        )
    with engine() as server:
        yield request.param[0], server


@pytest.mark.parametrize(
    "line",
    ["cpus: 2", "mem_reservation: 1g", "platform: linux/amd64", "profiles: [debug]",
     "pull_policy: always"],
)
def test_a_key_render_refuses_is_one_docker_refuses(
    line: str, cli: tuple[str, Engine], tmp_path: Path
) -> None:
    path, server = cli
    key = line.partition(":")[0]
    text = f'version: "3.8"\nservices:\n  web:\n    image: nginx:1.27\n    {line}\n'
    spec, err = deployed(path, server, text, tmp_path)
    assert spec is None and f"Additional property {key} is not allowed" in err, err
    (ours,) = check_stack(text).errors
    assert ours.startswith(f"services.web.{key}: docker stack deploy refuses it; "), ours


def test_a_dotenv_is_not_read_as_render_warns(cli: tuple[str, Engine], tmp_path: Path) -> None:
    path, server = cli
    (tmp_path / ".env").write_text("SG_DOTENV_TAG=1.27\n")
    text = 'version: "3.8"\nservices:\n  web:\n    image: nginx:${SG_DOTENV_TAG:-latest}\n'
    spec, err = deployed(path, server, text, tmp_path)
    assert spec is not None, err
    image = spec["TaskTemplate"]["ContainerSpec"]["Image"]
    checked = check_stack(text, environ={}, env_base=str(tmp_path))
    assert image == checked.stack["services"]["web"]["image"] == "nginx:latest"
    said = [n for n in checked.notes if n.startswith("WARNING: .env sets SG_DOTENV_TAG")]
    assert said, checked.notes
