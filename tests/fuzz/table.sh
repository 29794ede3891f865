#!/usr/bin/env bash
# The summary of a fuzzing run (tests/fuzz/run.sh writes build-fuzz/fuzz-results/summary.tsv) as
# the Markdown table of docs/reliability.md (a campaign).
# usage: tests/fuzz/table.sh [SUMMARY.tsv]
set -euo pipefail
summary=${1:-build-fuzz/fuzz-results/summary.tsv}
echo '| harness | seconds | executions | exec/s | cov | ft | corpus | crashes, leaks, timeouts |'
echo '|---|---:|---:|---:|---:|---:|---:|---:|'
tail -n +2 "$summary" | while IFS=$'\t' read -r h s e r c f u x; do
  echo "| $h | $s | $e | $r | $c | $f | $u | $x |"
done
tail -n +2 "$summary" | awk -F'\t' '{s += $2; e += $3} END {printf "\n%d harnesses, %d s in all (%.1f h), %d executions\n", NR, s, s / 3600, e}'
