#!/usr/bin/env bash
# Build the images of a deployment: chronos:local and chronos-kafka:local (and, with `tansu`,
# the Tansu test image). Prints build times and image sizes.
#
#   bash docker/build.sh            # chronos + kafka
#   bash docker/build.sh chronos    # one of: chronos, kafka, tansu
#
# Another release's chronos image (a rolling upgrade's "before"): CHRONOS_SOURCE is its checkout
# (e.g. `git worktree add /tmp/chronos-0.23 <commit>`), CHRONOS_TAG the tag (chronos:local):
#
#   CHRONOS_SOURCE=/tmp/chronos-0.23 CHRONOS_TAG=chronos:0.23 bash docker/build.sh chronos
#
# Bases: CHRONOS_PYTHON_BASE and CHRONOS_JAVA_BASE name them (e.g. python:3.11-slim-bookworm
# and eclipse-temurin:17-jre where a registry is reachable); unset, docker/base.sh builds them
# from the Debian mirror once (no registry needed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi

report() {  # tag, seconds
    local size
    size="$(docker image inspect -f '{{.Size}}' "$1")"
    echo "$1: built in $2 s (its base included), $((size / 1000000)) MB" >&2
}

build_chronos() {
    local started=$SECONDS base ctx source tag
    source="${CHRONOS_SOURCE:-$repo}"
    tag="${CHRONOS_TAG:-chronos:local}"
    base="${CHRONOS_PYTHON_BASE:-$(bash "$here/base.sh" python)}"
    ctx="$(mktemp -d)"
    trap 'rm -rf "$ctx"' RETURN
    cp -r "$source/pyproject.toml" "$source/README.md" "$source/chronos" "$source/proxy" "$ctx/"
    find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
    # The wheels of chronos and its dependencies, built here: the container then needs no
    # network, nor this machine's proxy CA. (Python 3.11 here and in the base: same ABI.)
    "$python" -m pip wheel --quiet --wheel-dir "$ctx/wheels" "$ctx" >&2
    docker build --network host -f "$here/Dockerfile" --build-arg "BASE=$base" \
        -t "$tag" "$ctx" >&2
    report "$tag" $((SECONDS - started))
}

build_kafka() {
    local started=$SECONDS base ctx libs
    base="${CHRONOS_JAVA_BASE:-$(bash "$here/base.sh" java)}"
    libs="$("$python" -m chronos.devstack.kafka fetch)"
    ctx="$(mktemp -d)"
    trap 'rm -rf "$ctx"' RETURN
    cp "$here/kafka/Dockerfile" "$here/kafka/entrypoint.sh" "$ctx/"
    cp -r "$libs" "$ctx/libs"
    rm -f "$ctx/libs/.complete"
    docker build --network host --build-arg "BASE=$base" -t chronos-kafka:local "$ctx" >&2
    report chronos-kafka:local $((SECONDS - started))
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(chronos kafka)
for target in "${targets[@]}"; do
    case "$target" in
        chronos) build_chronos ;;
        kafka) build_kafka ;;
        tansu) bash "$here/tansu/build.sh" ;;
        *) echo "unknown image '$target' (chronos, kafka, tansu)" >&2; exit 2 ;;
    esac
done
