"""A ledger entry (a label on Swarm, read back, never a guess) in other scripts' digits
is no holding: re's \\d took 'GPU-a@\\u0665\\u0660\\u0660' (Arabic-Indic 500) as half of
GPU-a, a milli swarmgpu never writes."""

from __future__ import annotations

import pytest

from swarmgpu.manager.placement.ledger import parse_holding


@pytest.mark.parametrize("value", ["GPU-a@\u0665\u0660\u0660", "GPU-a@\uff15\uff10\uff10",
                                   "s1=GPU-a@\u0665\u0660\u0660"])
def test_a_milli_in_other_digits_is_no_holding(value: str) -> None:
    assert parse_holding("svc", "node", value) is None


def test_a_milli_in_ascii_digits_is_read() -> None:
    h = parse_holding("svc", "node", "GPU-a@500")
    assert h is not None and h.milli == (500,)
