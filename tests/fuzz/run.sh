#!/usr/bin/env bash
# The fuzzing campaign: every harness of tests/fuzz (or those named) for SECONDS each, one after
# the other, under libFuzzer with ASan + UBSan, a memory limit and a per-input time limit.
# Prints per harness the executions, coverage (cov: edges, ft: features), the corpus size and
# the failures (crashes, leaks, timeouts, out-of-memory: their inputs are in
# build-fuzz/fuzz-results/artifacts/<harness>/), then the whole as a Markdown table (table.sh),
# and `uptime` before and after. Exits non-zero when any harness failed.
#
# usage: tests/fuzz/run.sh SECONDS [HARNESS...]       e.g. tests/fuzz/run.sh 600 (the campaign)
# Needs clang and libclang-rt-14-dev (bash scripts/deps.sh clang libclang-rt-14-dev). Builds
# build-fuzz (FUZZ_BUILD to change it); the corpus grows in build-fuzz/fuzz-results/corpus/, the
# committed seeds (tests/fuzz/corpus/) and regressions (tests/fuzz/regressions/) are only read.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: tests/fuzz/run.sh SECONDS [HARNESS...]}
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(checkpoint checkpoint_raw safetensors tokenizer tokenizer_json tokfile run_files report corpus jsonl
  conversation serve_request)
build=${FUZZ_BUILD:-build-fuzz}
results=$build/fuzz-results

CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_FUZZ=ON -DTAPEGRAD_WERROR=ON >/dev/null
cmake --build "$build" -j2 >/dev/null
mkdir -p "$results"
# the harnesses' scratch files, in memory when it can; a crashed harness leaves its own behind
export TAPEGRAD_FUZZ_TMP
TAPEGRAD_FUZZ_TMP=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/tapegrad-fuzz-run.XXXXXX")
trap 'rm -rf "$TAPEGRAD_FUZZ_TMP"' EXIT
summary=$results/summary.tsv
printf 'harness\tseconds\texecutions\texec_per_s\tcov\tft\tcorpus\tfailures\n' >"$summary"
echo "load before: $(uptime)"
failed=0
for h in "${harnesses[@]}"; do
  corpus=$results/corpus/$h artifacts=$results/artifacts/$h log=$results/$h.log
  mkdir -p "$corpus" "$artifacts"
  rm -f "$artifacts"/*
  seeds=(tests/fuzz/corpus/"$h")
  [ -d tests/fuzz/regressions/"$h" ] && seeds+=(tests/fuzz/regressions/"$h")
  # new inputs go to the first folder; -timeout catches hangs, -rss_limit_mb (also the malloc
  # limit) runaway allocations; ASan reports leaks at the end of every input that leaked
  set +e
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  units=$(find "$corpus" -type f | wc -l)
  failures=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  if [ "$rc" -ne 0 ] || [ "$failures" -ne 0 ]; then
    failed=1
    [ "$failures" -ne 0 ] || failures="exit $rc"
    echo "== $h FAILED ($failures); the end of $log:"
    tail -40 "$log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$h" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$units" \
    "$failures" >>"$summary"
  echo "$h: ${execs:-?} executions (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus $units, failures $failures"
done
echo "load after: $(uptime)"
echo
bash tests/fuzz/table.sh "$summary"
exit $failed
