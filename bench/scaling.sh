#!/usr/bin/env bash
# How tapegrad's cost grows: tokens/s and peak RSS against the context length (small preset,
# batch 16) and against the model size (the three presets at their default shapes), measured
# with `tapegrad bench`. Each point is the median over ROUNDS runs (default 2).
#
#   bash bench/scaling.sh
#   ROUNDS=1 SEQS="64 128" PRESETS="tiny small" bash bench/scaling.sh   # fewer points
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${TAPEGRAD:-$here/../build/tapegrad}"
rounds="${ROUNDS:-2}"
seqs="${SEQS:-64 128 256 512 1024}"
presets="${PRESETS:-tiny small minimind-26m}"
threads="${THREADS:-2}"
[ -x "$tapegrad" ] || { echo "scaling.sh: $tapegrad not built" >&2; exit 1; }
out_dir="${JSON_DIR:-$(mktemp -d /tmp/tapegrad-scaling-XXXXXX)}"
mkdir -p "$out_dir"

run() {   # name, then tapegrad bench flags
    local name="$1"; shift
    for round in $(seq 1 "$rounds"); do
        echo "$name round $round ..." >&2
        "$tapegrad" bench --threads "$threads" --json "$@" > "$out_dir/$name-$round.json"
    done
}
for seq in $seqs; do run "seq$seq" --preset small --seq "$seq" --steps 5; done
for preset in $presets; do run "model-$preset" --preset "$preset" --steps 5; done

/usr/bin/python3 - "$out_dir" "$seqs" "$presets" <<'PY'
import glob, json, statistics, sys
d, seqs, presets = sys.argv[1], [int(s) for s in sys.argv[2].split()], sys.argv[3].split()
def point(name):
    rs = [json.loads(open(p).read()) for p in sorted(glob.glob(f"{d}/{name}-*.json"))]
    med = lambda k: statistics.median(r[k] for r in rs)
    return rs[0], med("tokens_per_s"), med("peak_rss_mb"), med("mfu"), med("ms_per_step")
print("small preset (dim 128, 8 layers, batch 16), against the context length:")
print("| seq | tokens/step | tokens/s | ms/step | MFU | peak RSS (MB) |")
print("|---:|---:|---:|---:|---:|---:|")
for seq in seqs:
    r, tps, rss, mfu, ms = point(f"seq{seq}")
    print(f"| {seq} | {r['batch']*r['seq']} | {tps:.0f} | {ms:.0f} | {100*mfu:.1f}% | {rss:.0f} |")
print("\nagainst the model size (each preset at its own shapes):")
print("| preset | parameters | batch x seq | tokens/s | ms/step | MFU | peak RSS (MB) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for preset in presets:
    r, tps, rss, mfu, ms = point(f"model-{preset}")
    print(f"| {preset} | {r['params']/1e6:.2f}M | {r['batch']} x {r['seq']} | {tps:.0f} | {ms:.0f} | {100*mfu:.1f}% | {rss:.0f} |")
PY
