#!/usr/bin/env bash
# Installs what swarmgpu's demo and tests need on a fresh Debian/Ubuntu machine, as root:
# the real parts (dockerd, iproute2, busybox for the offline image, Prometheus' promtool,
# Chromium for the GPU map, systemd-analyze, debootstrap for the container image) and a
# virtualenv in .venv with the project and its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { printf '\n=== %s ===\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh: must run as root (apt, network namespaces, dockerd); as a user: sudo bash scripts/setup.sh" >&2
  exit 1
fi

log "apt packages"
apt-get update
apt_packages=(
  docker.io        # Engine 20.10: one dockerd per test node (tests start their own)
  iptables
  iproute2         # ip netns / veth / bridge for the one-machine swarm
  busybox-static   # the registry-free local/busybox:latest test image
  util-linux       # nsenter, unshare
  ca-certificates
  prometheus       # promtool checks the /metrics text the way Prometheus parses it;
                   # the real Prometheus scrapes the agents over HTTPS with a token
  openssl          # test_identity makes a swarm-like CA and forged node certificates
  chromium         # headless browser tests of the GPU map page
  systemd          # systemd-analyze verify/security of the units
  debootstrap      # the local base image for the container image test
)
apt-get install -y --no-install-recommends "${apt_packages[@]}"

# The tests start their own namespaced dockerds; a host dockerd/containerd that the
# package install may have started would only get in the way (FORWARD DROP, shared
# containerd), so stop them if they run.
if command -v systemctl >/dev/null 2>&1; then
  systemctl stop docker.socket docker.service containerd.service >/dev/null 2>&1 || true
fi

if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
  py_minor="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  apt-get install -y --no-install-recommends python3-venv "python${py_minor}-venv" \
    || apt-get install -y --no-install-recommends python3-venv
fi

log "versions"
uname -a
python3 --version
dockerd --version
docker --version 2>/dev/null || echo "docker CLI: missing"
ip -V
busybox | head -n 1 || true
iptables --version

log "venv"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --upgrade pip
.venv/bin/python -m pip install -e '.[test]'
.venv/bin/python -m pip --version

