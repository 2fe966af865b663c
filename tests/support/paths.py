"""Where the tests' reference material lives: real captures and the openb trace.

Both are in the repository, so a plain clone runs every test: the captures under
tests/fixtures/ (provenance and licence per file in tests/fixtures/SOURCES.md), the
trace inside the package (swarmgpu/sim/traces/openb/, CC BY 4.0), as installed users
get it.
"""

from __future__ import annotations

from pathlib import Path

from swarmgpu.sim.traces import OPENB

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TOPOLOGY = FIXTURES / "topology"
CAPTURES = FIXTURES / "captures"
TRACES = OPENB
