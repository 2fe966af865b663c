"""Where the shared, read-only reference material lives (real captures, traces).

CI clones the project with a copy of ``shared/`` beside it; set SWARMGPU_SHARED to
point elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SWARMGPU_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
TOPOLOGY = FIXTURES / "topology"
CAPTURES = FIXTURES / "captures"
TRACES = SHARED / "traces" / "openb"
