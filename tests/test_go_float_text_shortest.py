"""Go's shortest 'g' text of a float (``strconv.FormatFloat(f, 'g', -1, 64|32)``), as
docker/cli gives a float label or env value, at a power of two.

Below a power of two the floats are twice as close as above it, so the decimal nearest
``f`` with N digits may fall outside what reads back as ``f`` while another N-digit
decimal, on the wide side, reads back: Go (Ryu, shortest) writes that one. Before,
``goscalar`` tried only the nearest, then took a digit more (17 digits where Go writes
16), so a label docker would set to ``7.120236347223045e-307`` was compared as
``7.1202363472230444e-307``.
"""

from __future__ import annotations

import random
import struct

import pytest

from swarmgpu.core.goscalar import float32_text, float64_text


@pytest.mark.parametrize(("f", "go"), [
    (2.0 ** -1017, "7.120236347223045e-307"),  # repr's (and Go's) shortest: 16 digits
    (2.0 ** -1007, "7.291122019556398e-304"),
    (1.0, "1"), (1e6, "1e+06"), (123456.0, "123456"), (1e-4, "0.0001"),
    (1e-5, "1e-05"), (-0.0, "-0"), (1e21, "1e+21"), (0.1, "0.1"),
])
def test_float64_text_is_gos_shortest(f: float, go: str) -> None:
    assert float64_text(f) == go


def test_float64_text_has_reprs_digits() -> None:
    """Python's repr is the shortest text that reads back, the nearest of those (as Ryu):
    the same digits as Go's, in another layout."""
    rng = random.Random(7)
    floats = [2.0 ** e for e in range(-1074, 1024)]
    floats += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
               for _ in range(20000)]
    for f in floats:
        if f != f or f in (float("inf"), float("-inf")) or f == 0:
            continue
        text = float64_text(f)
        assert float(text) == f, (f, text)
        ours = text.lstrip("-").split("e")[0].replace(".", "").strip("0")
        want = repr(abs(f)).split("e")[0].replace(".", "").strip("0")
        assert ours == want, (f, text)


@pytest.mark.parametrize(("f", "go"), [
    (2.0 ** 87, "1.5474251e+26"),  # 8 digits: 1.54742505e+26 was one more than Go's
    (2.0 ** 90, "1.2379401e+27"),
    (2.0 ** -96, "1.2621775e-29"),
    (0.1, "0.1"), (16777216.0, "1.6777216e+07"),
])
def test_float32_text_is_gos_shortest(f: float, go: str) -> None:
    assert float32_text(f) == go
