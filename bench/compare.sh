#!/usr/bin/env bash
# tapegrad vs PyTorch on the same model, shapes and threads, side by side.
#
#   bash bench/compare.sh                 # small and minimind-26m, 2 rounds, 2 threads
#   ROUNDS=3 PRESETS=small bash bench/compare.sh
#
# Each round runs `tapegrad bench` and ../shared/bench/torch_minimind.py one after the other
# (alternating, so a change in machine load hits both), with OMP_WAIT_POLICY=passive (PyTorch's
# best setting here). Per preset it prints the median over the rounds of each side's tokens/s and
# peak RSS, and the ratios. tapegrad's figure is its median step; PyTorch's is the mean of its
# timed steps (what its script reports). OPENBLAS_CORETYPE and the rest of the environment are
# left as they are, and are the same for both.
#
# Environment: ROUNDS (2), THREADS (2), PRESETS ("small minimind-26m"), TAPEGRAD (build/tapegrad),
# STEPS (7 for tapegrad, PyTorch's --steps 5), JSON_DIR (keep every raw result there).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
torch_script="$here/../../shared/bench/torch_minimind.py"
tapegrad="${TAPEGRAD:-$repo/build/tapegrad}"
rounds="${ROUNDS:-2}"
threads="${THREADS:-2}"
presets="${PRESETS:-small minimind-26m}"
steps="${STEPS:-7}"
python="/usr/bin/python3"

[ -x "$tapegrad" ] || { echo "compare.sh: $tapegrad not built (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2)" >&2; exit 1; }
[ -f "$torch_script" ] || { echo "compare.sh: $torch_script not found" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "compare.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

out_dir="${JSON_DIR:-$(mktemp -d /tmp/tapegrad-compare-XXXXXX)}"
mkdir -p "$out_dir"
export OMP_WAIT_POLICY=passive

torch_preset() {
    case "$1" in
        small) echo small-char ;;
        minimind-26m) echo minimind-26M ;;
        tiny) echo tiny ;;
        *) echo "compare.sh: no PyTorch preset for '$1'" >&2; exit 1 ;;
    esac
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "env: OMP_WAIT_POLICY=$OMP_WAIT_POLICY OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; threads $threads; $rounds rounds; raw results in $out_dir"
for round in $(seq 1 "$rounds"); do
    for preset in $presets; do
        echo "round $round: $preset: tapegrad ..." >&2
        "$tapegrad" bench --preset "$preset" --threads "$threads" --steps "$steps" --json \
            > "$out_dir/tapegrad-$preset-$round.json"
        echo "round $round: $preset: pytorch ..." >&2
        "$python" "$torch_script" --preset "$(torch_preset "$preset")" --threads "$threads" --json \
            > "$out_dir/torch-$preset-$round.json"
    done
done

"$python" - "$out_dir" $presets <<'PY'
import glob, json, statistics, sys
out_dir, presets = sys.argv[1], sys.argv[2:]
def load(kind, preset):
    return [json.loads(open(p).read()) for p in sorted(glob.glob(f"{out_dir}/{kind}-{preset}-*.json"))]
for preset in presets:
    tg, pt = load("tapegrad", preset), load("torch", preset)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    tg_tps, pt_tps = med(tg, "tokens_per_s"), med(pt, "tokens_per_s")
    tg_rss, pt_rss = med(tg, "peak_rss_mb"), med(pt, "peak_rss_mb")
    t = tg[0]
    print(f"\n{preset}: dim {t['dim']}, {t['layers']} layers, {t['heads']}/{t['kv_heads']} heads, hidden {t['hidden']}, "
          f"vocab {t['vocab']}, seq {t['seq']}, batch {t['batch']}, {t['threads']} threads; medians of {len(tg)} rounds")
    print(f"| {'':22} | {'tapegrad':>10} | {'PyTorch':>10} | {'ratio':>7} |")
    print(f"|{'-'*24}|{'-'*12}|{'-'*12}|{'-'*9}|")
    print(f"| {'tokens/s':22} | {tg_tps:10.0f} | {pt_tps:10.0f} | {tg_tps/pt_tps:6.2f}x |")
    print(f"| {'ms per step':22} | {med(tg,'ms_per_step'):10.1f} | {med(pt,'ms_per_step'):10.1f} | {med(tg,'ms_per_step')/med(pt,'ms_per_step'):6.2f}x |")
    print(f"| {'peak RSS (MB)':22} | {tg_rss:10.0f} | {pt_rss:10.0f} | {tg_rss/pt_rss:6.2f}x |")
    print(f"| {'MFU (435 GFLOP/s)':22} | {100*med(tg,'mfu'):9.1f}% | {100*med(pt,'achieved_gflops')/435:9.1f}% | {'':7} |")
    print("rounds (tokens/s tapegrad / PyTorch): " +
          ", ".join(f"{a['tokens_per_s']:.0f} / {b['tokens_per_s']:.0f}" for a, b in zip(tg, pt)))
PY
