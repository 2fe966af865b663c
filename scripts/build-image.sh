#!/usr/bin/env bash
# Build the swarmgpu image with no registry and no network inside the build.
#
#   scripts/build-image.sh [TAG]          # -> local/swarmgpu:TAG (default: the version)
#
# 1. Base image local/debian-bookworm-python:latest, made from a debootstrap rootfs
#    (Debian bookworm minbase + python3 3.11), imported into the engine when missing.
#    The stripped rootfs tarball is cached under $SWARMGPU_CI_CACHE
#    (/var/cache/swarmgpu-ci), so only the first run pays for debootstrap.
# 2. Wheels for swarmgpu and every dependency, built/downloaded on the host into
#    dist/wheels (the host may reach PyPI; the build cannot).
# 3. `docker build --network=none`: installs from dist/wheels only (--no-index).
#
# The engine is whatever the docker CLI talks to (DOCKER_HOST or the local socket).
# Needs root for debootstrap (once). Prints the image size at the end.
# Environment: SWARMGPU_CI_CACHE, SWARMGPU_BASE_IMAGE, SWARMGPU_DEBIAN_MIRROR.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${SWARMGPU_CI_CACHE:-/var/cache/swarmgpu-ci}
BASE=${SWARMGPU_BASE_IMAGE:-local/debian-bookworm-python:latest}
MIRROR=${SWARMGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
TAG=${1:-$VERSION}
IMAGE=local/swarmgpu:$TAG
BASE_TAR=$CACHE/debian-bookworm-python.tar

log() { printf '[build-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'build-image: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker CLI not found (apt-get install docker.io)"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || die "no docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}); start dockerd or set DOCKER_HOST"

# --- 1. base image -------------------------------------------------------------
make_base_tar() {
  command -v debootstrap >/dev/null \
    || die "debootstrap not found: apt-get install -y debootstrap (needed once to make $BASE)"
  [ "$(id -u)" -eq 0 ] || die "debootstrap needs root (run once as root to fill $CACHE)"
  mkdir -p "$CACHE"
  local root
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  log "debootstrap bookworm into $root (once; about 1-2 min)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { rm -rf "$root"; die "debootstrap failed; see $CACHE/debootstrap.log"; }
  # Nothing the image runs needs docs, man pages, locales or apt's caches.
  rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
         "$root"/usr/share/locale/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
         "$root"/var/log/* "$root"/tmp/*
  find "$root" -name __pycache__ -type d -prune -exec rm -rf {} +
  tar --numeric-owner -C "$root" -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$root"
}

t0=$(date +%s)
if docker image inspect "$BASE" >/dev/null 2>&1; then
  log "base $BASE already in the engine"
else
  [ -s "$BASE_TAR" ] || make_base_tar
  log "importing $BASE from $BASE_TAR"
  docker import --change 'CMD ["/usr/bin/python3"]' "$BASE_TAR" "$BASE" >/dev/null
fi
t1=$(date +%s)

# --- 2. wheels -----------------------------------------------------------------
# swarmgpu's own wheel, then every dependency as a wheel for the IMAGE's Python
# (3.11, this machine's architecture), whatever Python runs this script, so the image
# installs with --no-index. Cached: pip reuses what is already in dist/wheels.
PY=${PYTHON:-python3}
IMAGE_PY=${SWARMGPU_IMAGE_PYTHON:-3.11}  # bookworm's python3
ARCH=$(uname -m)
mkdir -p dist/wheels
rm -f dist/wheels/swarmgpu-*.whl
log "building wheels into dist/wheels (for CPython $IMAGE_PY $ARCH)"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w dist/wheels . >&2
platforms=()
for p in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  platforms+=(--platform "${p}_$ARCH")
done
abi=cp${IMAGE_PY/./}
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  --python-version "$IMAGE_PY" --implementation cp --abi "$abi" --abi abi3 --abi none \
  "${platforms[@]}" --platform any --find-links dist/wheels -d dist/wheels \
  "dist/wheels/swarmgpu-$VERSION-py3-none-any.whl" >&2 \
  || die "could not get every dependency as a wheel for CPython $IMAGE_PY $ARCH (see above)"
t2=$(date +%s)

# --- 3. image --------------------------------------------------------------------
log "docker build --network=none -t $IMAGE"
SOURCE=$(sed -n 's/^Source = "\(.*\)"/\1/p' pyproject.toml | head -n1)
REVISION=$(git rev-parse HEAD 2>/dev/null || true)
docker build --network=none --build-arg "BASE=$BASE" --build-arg WHEELS=dist/wheels \
  --build-arg "VERSION=$VERSION" --build-arg "SOURCE=$SOURCE" --build-arg "REVISION=$REVISION" \
  -t "$IMAGE" -f Dockerfile . >&2
t3=$(date +%s)
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(docker image inspect --format '{{.Size}}' "$BASE")
log "built $IMAGE: $((size / 1000000)) MB (base $((base_size / 1000000)) MB);" \
    "base $((t1 - t0)) s, wheels $((t2 - t1)) s, build $((t3 - t2)) s"
echo "$IMAGE"
