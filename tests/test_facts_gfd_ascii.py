"""A GFD label's MIG profile in other scripts' digits: re's \\d took 'mig-1g.\\u0665gb'
(an Arabic-Indic 5) as a MIG device of profile '1g.\\u0665gb', a name no request
(swarmgpu.mig=1g.5gb) matches; GFD writes ASCII, so such a label is this source's error."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.gfd import GfdSource
from swarmgpu.agent.facts.naming import parse_profile

BASE = ("nvidia.com/gpu.product=NVIDIA-A100\nnvidia.com/gpu.memory=40960\n"
        "nvidia.com/gpu.count=1\nnvidia.com/mig.strategy=mixed\n")


@pytest.mark.parametrize("key", ["mig-1g.\u0665gb.count", "mig-\u0661g.5gb.count",
                                 "mig-1g.\uff15gb.memory"])
def test_a_mig_label_with_digits_not_ascii_is_this_sources_error(
        tmp_path: Path, key: str) -> None:
    f = tmp_path / "gfd"
    f.write_text(BASE + f"nvidia.com/{key}=1\n")
    with pytest.raises(SourceError, match=r"nvidia\.com/mig-.*: .*ASCII"):
        GfdSource(f, hostname="n").read()


def test_a_profile_name_with_digits_not_ascii_is_no_profile() -> None:
    with pytest.raises(ValueError, match="is not a MIG profile name"):
        parse_profile("1g.\u0665gb")
