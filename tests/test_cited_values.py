"""A value the test support gives where no capture of tests/fixtures has it is cited:
named once in the support, its public source recorded in tests/fixtures/SOURCES.md."""

from __future__ import annotations

from support.fake_pynvml.builder import RTX4090_MIB, layouts
from support.gpu_nodes import RTX4090
from support.paths import FIXTURES


def test_the_rtx_4090_memory_is_one_cited_value() -> None:
    """The RTX 4090's 24564 MiB was written in three places with no capture or source
    behind it. It is one value, and SOURCES.md names where it was seen."""
    assert RTX4090.memory_mib == RTX4090_MIB
    given = {name: lay["memory_mib"] for name, lay in layouts().items()
             if "rtx4090" in name}
    assert given and set(given.values()) == {RTX4090_MIB}
    sources = (FIXTURES / "SOURCES.md").read_text()
    row = next(line for line in sources.splitlines() if line.startswith("| `RTX4090_MIB`"))
    assert f"`RTX4090_MIB` = {RTX4090_MIB}" in row
    assert "`thamada/nvidia-smi` `package/RTX4090_smi.py`" in row
    assert f"{RTX4090_MIB}MiB" in row and f"Total : {RTX4090_MIB} MiB" in row
