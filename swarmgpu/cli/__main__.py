"""python -m swarmgpu.cli"""

from swarmgpu.cli import main

main()
