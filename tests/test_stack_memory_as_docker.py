"""A stack's memory (deploy.resources, tmpfs size) read as docker's units.RAMInBytes
reads it: Go's strconv reads ASCII digits only, and no space but one between number and
unit. Python's \\d took Arabic-Indic digits ('\\u0664G' was 4 GiB to the plan, a
deploy error to docker) and \\s* any spaces around ('  4G ', '4\\tG')."""

from __future__ import annotations

import pytest

from swarmgpu.manager.commands.swarmspec import memory_bytes


@pytest.mark.parametrize("text", ["\u0664G", "\uff14G", "1.\u0665G", " 4G", "4G ", "4  G",
                                  "4\tG", "4\nG", "4G\n"])
def test_a_memory_docker_refuses_is_not_an_amount(text: str) -> None:
    assert memory_bytes(text) is None


@pytest.mark.parametrize(("text", "got"), [
    ("4G", 4 << 30), ("4 G", 4 << 30), ("1.5GiB", 3 << 29), ("512m", 512 << 20),
    ("100", 100), (1024, 1024),
])
def test_a_memory_docker_reads_is_read_alike(text: str | int, got: int) -> None:
    assert memory_bytes(text) == got
