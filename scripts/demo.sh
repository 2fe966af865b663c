#!/usr/bin/env bash
# The newcomer's main command: installs what is needed (scripts/setup.sh), then brings up a
# real 3-node Swarm on this one machine with GPU nodes faked from real captures, runs the
# daemon, deploys the example stacks and prints `swarmgpu status`. Needs root.
# Options are passed to scripts/demo.py (e.g. --keep to leave it running with the GPU map).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/demo.sh: needs root (network namespaces, dockerd, apt); as a user: sudo bash scripts/demo.sh" >&2
  exit 1
fi
bash scripts/setup.sh >/tmp/swarmgpu-setup.log 2>&1 || {
  echo "setup failed; see /tmp/swarmgpu-setup.log" >&2; tail -n 30 /tmp/swarmgpu-setup.log >&2; exit 1; }
exec .venv/bin/python scripts/demo.py "$@"
