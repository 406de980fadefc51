#!/usr/bin/env bash
# Install the `docker compose` v2 plugin where no package has it (Debian bookworm ships only
# docker-compose 1.29, and Docker's own apt repository may be out of reach): build it from the
# Go module proxy (pinned release; about 1.5 min on two cores), then put it where the docker CLI
# looks for plugins. Does nothing when `docker compose` already answers. Needs a Go that can
# fetch the toolchain compose asks for (1.21 or later: bookworm's golang-go 1.19 cannot; a
# go.dev tarball or bookworm-backports can) and a module proxy that serves the checksum
# database too (proxy.golang.org does).
#
#   bash docker/compose-v2.sh            # /usr/local/lib/docker/cli-plugins (root), else ~/.docker
set -euo pipefail

version="${COMPOSE_VERSION:-v2.40.3}"
if docker compose version >/dev/null 2>&1; then
    docker compose version
    exit 0
fi
command -v go >/dev/null || { echo "compose-v2.sh: needs the Go toolchain" >&2; exit 1; }
if [[ $(id -u) -eq 0 ]]; then plugins=/usr/local/lib/docker/cli-plugins; else plugins="$HOME/.docker/cli-plugins"; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# `go install module@version` refuses a module whose go.mod has exclude directives (compose's
# has): fetch the module's source and build its cmd package instead.
export GOFLAGS=-mod=mod
(cd "$work" && go mod init compose-build >/dev/null 2>&1)
src="$(cd "$work" && go mod download -json "github.com/docker/compose/v2@$version" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && go build -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" \
    -o "$work/docker-compose" ./cmd)
mkdir -p "$plugins"
install -m 0755 "$work/docker-compose" "$plugins/docker-compose"
docker compose version
