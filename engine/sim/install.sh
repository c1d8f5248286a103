#!/usr/bin/env bash
# ds4 installer: clone (or update) the engine at a pinned ref and build it.
set -euo pipefail

DS4_REPO="${DS4_REPO:-https://github.com/Entrpi/ds4.git}"
DS4_REF="${DS4_REF:-v0.2.0}"
DS4_SRC_DIR="${DS4_SRC_DIR:-$HOME/code/ds4}"
CUDA_ARCH="${CUDA_ARCH:-sm_121}"
BUILD_JOBS="${BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}"

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

command -v git >/dev/null || die "git is required"
command -v make >/dev/null || die "make is required"

if [ -d "$DS4_SRC_DIR/.git" ]; then
    log "updating $DS4_SRC_DIR to $DS4_REF"
    if [ "$(git -C "$DS4_SRC_DIR" remote get-url origin)" != "$DS4_REPO" ]; then
        git -C "$DS4_SRC_DIR" remote set-url origin "$DS4_REPO"
    fi
    git -C "$DS4_SRC_DIR" fetch --depth 1 origin "$DS4_REF"
    git -C "$DS4_SRC_DIR" reset --hard FETCH_HEAD
else
    log "cloning $DS4_REPO ($DS4_REF) into $DS4_SRC_DIR"
    mkdir -p "$(dirname "$DS4_SRC_DIR")"
    git clone --depth 1 -b "$DS4_REF" "$DS4_REPO" "$DS4_SRC_DIR"
fi

cd "$DS4_SRC_DIR"
case "$CUDA_ARCH" in
    sm_121|sm_121a) log "building: make cuda-spark"; make -j"$BUILD_JOBS" cuda-spark ;;
    *)              log "building: make cuda CUDA_ARCH=$CUDA_ARCH"; make -j"$BUILD_JOBS" cuda CUDA_ARCH="$CUDA_ARCH" ;;
esac

for b in ds4-server; do
    [ -x "$DS4_SRC_DIR/$b" ] || die "build did not produce $b"
done
log "done: $DS4_SRC_DIR/ds4-server"
