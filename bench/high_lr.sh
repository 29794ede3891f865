#!/usr/bin/env bash
# Does a high-learning-rate run keep its starting speed? At lr 3e-2 attention probabilities and
# activations underflow; a core that takes a microcode assist on each subnormal float slows down
# as the run goes on, unless the threads flush subnormals to zero (lib/fpmode.h). This trains the
# compare-ffn case (both FFNs, one seed, lr 3e-2) and prints, per run, the median tokens/s of the
# steps 11-30 against that of the last 20 steps, and their ratio (1.00: no slowdown).
#
#   bash bench/high_lr.sh                      # 300 steps of the small preset, 2 threads
#   STEPS=100 TAPEGRAD=old/build/tapegrad bash bench/high_lr.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${TAPEGRAD:-$here/../build/tapegrad}"
steps="${STEPS:-300}"
out="$(mktemp -d /tmp/tapegrad-high-lr-XXXXXX)"
[ -x "$tapegrad" ] || { echo "high_lr.sh: $tapegrad not built" >&2; exit 1; }
echo "$("$tapegrad" --version | tail -1); lr 3e-2, $steps steps, 2 threads; runs in $out"
start=$(date +%s.%N)
"$tapegrad" compare-ffn --seeds 1 --lrs 3e-2 --steps "$steps" --threads 2 --out "$out/study" > "$out/log.txt" 2>&1 ||
    { tail -5 "$out/log.txt" >&2; exit 1; }
awk -v start="$start" -v now="$(date +%s.%N)" 'BEGIN { printf "wall time %.1f s\n", now - start }'
for metrics in "$out"/study/*/metrics.jsonl; do
    /usr/bin/python3 - "$metrics" <<'PY'
import json, statistics, sys
path = sys.argv[1]
rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
first = statistics.median(r["tokens_per_s"] for r in rows[10:30])
last = statistics.median(r["tokens_per_s"] for r in rows[-20:])
print(f"{path.split('/')[-2]:>40}: steps 11-30 {first:8.0f} tok/s, last 20 {last:8.0f} tok/s, ratio {last / first:.2f}, "
      f"final loss {rows[-1]['loss']:.3f}")
PY
done
