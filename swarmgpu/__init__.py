"""swarmgpu: GPU-aware placement for Docker Swarm."""

__version__ = "0.1.0"
