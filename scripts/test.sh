#!/usr/bin/env bash
# The project's test command, for developers and CI alike: bash scripts/test.sh [pytest args...]
#
# Why a script: CI (.ci/run) and people must run exactly the same thing. Integration tests start
# their own broker (Docker if a daemon answers, else a Tansu subprocess; see tests/broker.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
if [[ ! -x "$python" ]]; then
    echo "scripts/test.sh: no .venv; run: python3 -m venv .venv && .venv/bin/pip install -e '.[dev,test]'" >&2
    exit 2
fi

# testcontainers' reaper (Ryuk) is pulled from a registry we cannot reach; tests clean up themselves.
export TESTCONTAINERS_RYUK_DISABLED="${TESTCONTAINERS_RYUK_DISABLED:-true}"

exec "$python" -m pytest -q "$@"
