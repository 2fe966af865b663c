"""swarmgpu: GPU-aware placement for Docker Swarm.

One package per process and layer, imports going down only: ``cli`` -> ``sim`` ->
``agent`` | ``manager`` -> ``allocator`` | ``swarm`` -> ``core`` (README.md, "Layout";
every module in docs/layout.md; tests/test_layout.py holds the rule).
"""

__version__ = "0.1.0"
