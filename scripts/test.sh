#!/usr/bin/env bash
# The project's test command, for developers and CI alike: bash scripts/test.sh [pytest args...]
#
# Why a script: CI (.ci/run) and people must run exactly the same thing. Integration tests start
# their own broker (tests/broker.py). CHRONOS_TEST_BROKERS lists the brokers, default
# "kafka tansu": the whole suite runs on the first (Apache Kafka, what users run), then the
# integration tests run again on each further one (Tansu, the embedded default of chronos dev).
# CHRONOS_TEST_BROKERS=kafka runs the suite once.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
if [[ ! -x "$python" ]]; then
    echo "scripts/test.sh: no .venv; run: bash .ci/run (or python3 -m venv .venv && .venv/bin/pip install -e '.[dev,test,bench,spark]')" >&2
    exit 2
fi

# testcontainers' reaper (Ryuk) is pulled from a registry we cannot reach; tests clean up themselves.
export TESTCONTAINERS_RYUK_DISABLED="${TESTCONTAINERS_RYUK_DISABLED:-true}"

read -r -a brokers <<< "${CHRONOS_TEST_BROKERS:-kafka tansu}"
status=0
for i in "${!brokers[@]}"; do
    broker="${brokers[$i]}"
    echo "[scripts/test.sh] broker: $broker" >&2
    if [[ $i == 0 ]]; then
        CHRONOS_TEST_BROKER="$broker" "$python" -m pytest -q "$@" || status=$?
    else
        CHRONOS_TEST_BROKER="$broker" "$python" -m pytest -q -m integration "$@" || status=$?
    fi
done
exit "$status"
