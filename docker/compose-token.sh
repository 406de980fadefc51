#!/usr/bin/env bash
# Make the tokens of the compose deployment (docker/compose.yaml), once:
#   docker/tokens.toml  the tokens file every service mounts (hashes only)
#   docker/token.txt    your token: send, cancel, reschedule and status to any topic
#   docker/proxy.env    the proxy's token for the nodes' admin API (status questions)
# Run again with --force to replace them (rotation: the services re-read tokens.toml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -f "$here/tokens.toml" && "${1:-}" != "--force" ]]; then
    echo "$here/tokens.toml exists (--force replaces it)" >&2
    exit 0
fi
umask 077
token() { docker run --rm --entrypoint chronos chronos:local token "$@"; }
field() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
you="$(token --name you --topic '*' --op send --op cancel --op reschedule --op status)"
proxy="$(token --name proxy --op admin)"
{ field tokens_file_entry <<< "$you"; echo; field tokens_file_entry <<< "$proxy"; } > "$here/tokens.toml"
field token <<< "$you" > "$here/token.txt"
echo "CHRONOS_PROXY__STATUS_TOKEN=$(field token <<< "$proxy")" > "$here/proxy.env"
# The containers run as uid 10001: they must be able to read the tokens file.
chmod 0644 "$here/tokens.toml"
echo "wrote $here/tokens.toml, $here/token.txt, $here/proxy.env" >&2
