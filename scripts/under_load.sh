#!/usr/bin/env bash
# Run tests again and again while stress-ng loads every core: the check that no test depends on
# the machine's speed (a deadline, a fixed sleep, a timing precondition). CI machines are loaded;
# a test that passes only on an idle machine blocks everyone there.
#
#   bash scripts/under_load.sh RUNS [pytest args...]
#   bash scripts/under_load.sh 5 -m "not integration"     # the unit suite, five times
#   CHRONOS_TEST_BROKER=kafka bash scripts/under_load.sh 2 -m integration
#
# STRESS_CPU (default 4) stress-ng workers run for the whole time; each run's failures are
# listed at the end (the runs go on after a failure, so one flaky test cannot hide another).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs="${1:?usage: scripts/under_load.sh RUNS [pytest args...]}"
shift
python=.venv/bin/python
if ! command -v stress-ng >/dev/null; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y stress-ng >/dev/null
    else
        echo "scripts/under_load.sh: install stress-ng (Debian: apt-get install stress-ng)" >&2
        exit 2
    fi
fi
export TESTCONTAINERS_RYUK_DISABLED="${TESTCONTAINERS_RYUK_DISABLED:-true}"

stress-ng --cpu "${STRESS_CPU:-4}" --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null || true' EXIT

report="$(mktemp -d)"
status=0
for run in $(seq 1 "$runs"); do
    start=$(date +%s)
    if "$python" -m pytest -q -p no:cacheprovider -rf "$@" > "$report/run$run.log" 2>&1; then
        result=passed
    else
        result=failed
        status=1
    fi
    echo "[under_load] run $run/$runs: $result in $(( $(date +%s) - start )) s ($(tail -1 "$report/run$run.log"))"
    grep '^FAILED' "$report/run$run.log" | sed "s/^/[under_load] run $run: /" || true
done
echo "[under_load] logs: $report"
exit "$status"
