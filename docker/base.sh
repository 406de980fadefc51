#!/usr/bin/env bash
# Build a Debian bookworm base image locally, for machines that cannot pull from a registry.
#
#   bash docker/base.sh python   # -> chronos-base-python:bookworm (python3, venv, CA certs)
#   bash docker/base.sh java     # -> chronos-base-java:bookworm   (OpenJDK 17 JRE headless)
#
# Why: the Dockerfiles start FROM an ordinary base given as a build argument (BASE); where
# docker.io is reachable, python:3.11-slim-bookworm and eclipse-temurin:17-jre do. Where it is
# not (our CI), debootstrap installs a minimal Debian from the Debian mirror, which is
# reachable, into a directory that `docker import` turns into an image (about 30 s for the
# python one). An image that exists already is kept; CHRONOS_REBUILD_BASE=1 rebuilds it.
set -euo pipefail

kind="${1:?usage: docker/base.sh python|java}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
case "$kind" in
    python) tag="chronos-base-python:bookworm"; packages="python3,python3-venv,ca-certificates" ;;
    java) tag="chronos-base-java:bookworm"; packages="openjdk-17-jre-headless,ca-certificates" ;;
    *) echo "unknown base '$kind' (python or java)" >&2; exit 2 ;;
esac

if [[ "${CHRONOS_REBUILD_BASE:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >&2
    else
        echo "debootstrap is needed to build $tag (apt-get install debootstrap)" >&2
        exit 1
    fi
fi

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
started=$SECONDS
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >&2
# What an image needs no more: package lists, caches, docs and manual pages.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$tag" >&2
echo "built $tag in $((SECONDS - started)) s, $(docker image inspect -f '{{.Size}}' "$tag") bytes" >&2
echo "$tag"
