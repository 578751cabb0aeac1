#!/usr/bin/env bash
# The test suite may not depend on the machine's speed. This runs it RUNS times in a row (default 5)
# with a busy loop on every core beside it, then once confined to one core (taskset -c 0), and
# prints one line per run: its pytest summary and wall time. It stops at the first failing run.
#
#   bench/suite_under_load.sh [RUNS]        (from the repository root, after `make setup`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${1:-5}
python=${PYTHON:-.venv/bin/python}
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; hogs=(); }
trap stop_hogs EXIT

suite() {  # a label, then the command's prefix (empty, or taskset)
  local label=$1 started log
  shift
  started=$(date +%s)
  log=$(mktemp)
  if "$@" "$python" -m pytest -q -p no:cacheprovider >"$log" 2>&1; then
    echo "$label: $(tail -n 1 "$log") ($(( $(date +%s) - started )) s)"
  else
    echo "$label: FAILED ($(( $(date +%s) - started )) s); the failures:"
    grep -E "^(FAILED|ERROR|E )" "$log" | cut -c1-400 || tail -n 30 "$log"
    exit 1
  fi
}

for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  hogs+=($!)
done
echo "$(date -u +%FT%TZ): the suite $runs times beside a busy loop on each of $(nproc) cores, then once on one core"
for i in $(seq "$runs"); do
  suite "run $i of $runs, loaded"
done
stop_hogs
suite "one core (taskset -c 0)" taskset -c 0
