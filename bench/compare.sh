#!/usr/bin/env bash
# tapegrad vs PyTorch on the same model, shapes and threads, side by side, for every kernel path
# this CPU runs (amx, avx512bf16, avx512, avx2, generic: lib/cpu.h) and in both precisions, in the
# same run: fp32 against PyTorch in fp32, bf16 (`tapegrad bench --precision bf16`) against
# PyTorch's bf16 autocast (`torch_minimind.py --autocast bf16`: forward and loss under
# torch.autocast("cpu", torch.bfloat16), master weights and AdamW in fp32).
#
#   bash bench/compare.sh                        # small and minimind-26m, 2 rounds, 2 threads, every path
#   ROUNDS=3 PRESETS=small PATHS=avx2 bash bench/compare.sh
#   PRECISIONS=bf16 PATHS=avx512bf16 bash bench/compare.sh   # the bf16 tables of one path only
#
# Each round runs, per preset, ../shared/bench/torch_minimind.py and `tapegrad bench` once per
# path (TAPEGRAD_ISA=path), one after the other, so a change in machine load hits all of them.
# PyTorch runs with OMP_WAIT_POLICY=passive (its best setting here). For the avx2 table PyTorch is
# held to AVX2 too, as it would be on a CPU without AVX-512: OPENBLAS_CORETYPE=Haswell (OpenBLAS's
# AVX2 kernels), ATEN_CPU_CAPABILITY=avx2, DNNL_MAX_CPU_ISA=AVX2; tapegrad's avx2 run gets the same
# environment. The bf16 paths (avx512bf16, amx) run avx512's fp32 code, so their fp32 table is
# left out when avx512's is there. The avx512 and generic tables compare with PyTorch as it runs on this machine
# (TORCH_MATCH=0 uses that for avx2 as well). Per path and preset it prints the median over the
# rounds of each side's tokens/s, ms per step and peak RSS, the ratios, and the MFU of both
# against the ceiling that `tapegrad bench` measures on this machine: the path's FP32 multiply-add
# for fp32, its bf16 instruction's (vdpbf16ps, AMX tdpbf16ps) for bf16 (on a path without one
# tapegrad's bf16 rounds the operands and runs the fp32 kernel, and the fp32 ceiling stands).
# tapegrad's figure is its median step; PyTorch's is the mean of its timed steps (what its script
# reports).
#
# Environment: ROUNDS (2), THREADS (2), PRESETS ("small minimind-26m"), PRECISIONS ("fp32 bf16"), PATHS (every path the
# binary runs here, from `tapegrad --version`), TORCH_MATCH (1), TAPEGRAD (build/tapegrad),
# TORCH_SCRIPT (../shared/bench/torch_minimind.py beside the checkout),
# STEPS (7 for tapegrad, PyTorch's --steps 5), JSON_DIR (keep every raw result there).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# the shared/ folder beside the checkout (or beside the folder of worktrees)
torch_script="${TORCH_SCRIPT:-$here/../../shared/bench/torch_minimind.py}"
[ -f "$torch_script" ] || torch_script="$here/../../../shared/bench/torch_minimind.py"
tapegrad="${TAPEGRAD:-$repo/build/tapegrad}"
rounds="${ROUNDS:-2}"
threads="${THREADS:-2}"
presets="${PRESETS:-small minimind-26m}"
steps="${STEPS:-7}"
precisions="${PRECISIONS:-fp32 bf16}"
torch_match="${TORCH_MATCH:-1}"
python="/usr/bin/python3"

[ -x "$tapegrad" ] || { echo "compare.sh: $tapegrad not built (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2)" >&2; exit 1; }
[ -f "$torch_script" ] || { echo "compare.sh: $torch_script not found" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "compare.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
# "kernels: avx512 on ... (this CPU runs: avx512 avx2 generic)"
paths="${PATHS:-$("$tapegrad" --version | sed -n 's/.*this CPU runs: *\([^)]*\)).*/\1/p')}"
[ -n "$paths" ] || { echo "compare.sh: no kernel paths from '$tapegrad --version'" >&2; exit 1; }

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
# the PyTorch setting a path is compared with: "native" or "avx2" (held to AVX2)
torch_kind() { if [ "$1" = avx2 ] && [ "$torch_match" = 1 ]; then echo avx2; else echo native; fi; }
kind_env() { if [ "$1" = avx2 ]; then echo "OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2"; fi; }
kinds="$(for p in $paths; do torch_kind "$p"; done | sort -u | tr '\n' ' ')"

echo "machine: $(nproc) cores, $("$tapegrad" --version | sed -n 's/^kernels: [a-z0-9]* on \(.*\) (this CPU runs.*/\1/p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "paths: $paths; precisions: $precisions; PyTorch settings: $kinds; OMP_WAIT_POLICY=$OMP_WAIT_POLICY OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; threads $threads; $rounds rounds; raw results in $out_dir"
# the bf16 paths run avx512's fp32 code: their fp32 table would repeat avx512's
same_fp32_code() { [ "$1" = fp32 ] && case "$2" in avx512bf16|amx) [[ " $paths " == *" avx512 "* ]] ;; *) false ;; esac; }
# PyTorch's autocast argument for a precision
autocast() { if [ "$1" = bf16 ]; then echo bf16; else echo none; fi; }
for round in $(seq 1 "$rounds"); do
    for preset in $presets; do
        for precision in $precisions; do
            for kind in $kinds; do
                # PyTorch held to AVX2 has no bf16 autocast (its bf16 kernels want AVX-512), and
                # tapegrad's avx2 path runs bf16 as rounded operands on the fp32 kernel: no table
                [ "$precision" = bf16 ] && [ "$kind" = avx2 ] && continue
                echo "round $round: $preset $precision: pytorch ($kind) ..." >&2
                env $(kind_env "$kind") "$python" "$torch_script" --preset "$(torch_preset "$preset")" --threads "$threads" \
                    --autocast "$(autocast "$precision")" --json > "$out_dir/torch-$preset-$kind-$precision-$round.json"
                for path in $paths; do
                    [ "$(torch_kind "$path")" = "$kind" ] || continue
                    same_fp32_code "$precision" "$path" && continue
                    echo "round $round: $preset $precision: tapegrad ($path) ..." >&2
                    env $(kind_env "$kind") TAPEGRAD_ISA="$path" "$tapegrad" bench --preset "$preset" --threads "$threads" \
                        --steps "$steps" --precision "$precision" --json > "$out_dir/tapegrad-$preset-$path-$precision-$round.json"
                done
            done
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$out_dir" "$torch_match" "$paths" "$precisions" $presets <<'PY'
import glob, json, statistics, sys
out_dir, torch_match, paths, precisions, presets = (sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(), sys.argv[4].split(),
                                                    sys.argv[5:])
def load(pattern):
    return [json.loads(open(p).read()) for p in sorted(glob.glob(f"{out_dir}/{pattern}"))]
med = lambda rs, k: statistics.median(r[k] for r in rs)
for path in paths:
    kind = "avx2" if path == "avx2" and torch_match else "native"
    torch_note = ("PyTorch held to AVX2 (OPENBLAS_CORETYPE=Haswell, ATEN_CPU_CAPABILITY=avx2)" if kind == "avx2"
                  else "PyTorch as it runs on this CPU")
    for preset, precision in [(p, q) for p in presets for q in precisions]:
        tg, pt = load(f"tapegrad-{preset}-{path}-{precision}-*.json"), load(f"torch-{preset}-{kind}-{precision}-*.json")
        if not tg or not pt:
            continue
        versus = "PyTorch bf16 autocast" if precision == "bf16" else "PyTorch fp32"
        t = tg[0]
        peak = med(tg, "peak_gflops")
        tg_tps, pt_tps = med(tg, "tokens_per_s"), med(pt, "tokens_per_s")
        tg_rss, pt_rss = med(tg, "peak_rss_mb"), med(pt, "peak_rss_mb")
        print(f"\n{precision}: path {path} on {t['cpu']}; tapegrad --precision {precision} vs {versus}; {preset}: dim {t['dim']}, {t['layers']} layers, {t['heads']}/{t['kv_heads']} heads, "
              f"hidden {t['hidden']}, vocab {t['vocab']}, seq {t['seq']}, batch {t['batch']}, {t['threads']} threads; "
              f"medians of {len(tg)} rounds; {torch_note}")
        plan = t.get("gemm_plan")
        if plan:
            print(f"tapegrad GEMM plan: tile {plan['mr']}x{plan['nr']}, kc {plan['kc']}, nc {plan['nc']}, mc {plan['mc']} "
                  f"(caches from {plan['caches']}); PyTorch's OpenBLAS kernel: {pt[0].get('openblas_core', '?')}"
                  f"{' (chosen by the script: OpenBLAS would fall back to a slow one)' if pt[0].get('openblas_core_auto') else ''}")
        print(f"| {'':30} | {'tapegrad':>10} | {'PyTorch':>10} | {'ratio':>7} |")
        print(f"|{'-'*32}|{'-'*12}|{'-'*12}|{'-'*9}|")
        print(f"| {'tokens/s':30} | {tg_tps:10.0f} | {pt_tps:10.0f} | {tg_tps/pt_tps:6.2f}x |")
        print(f"| {'ms per step':30} | {med(tg,'ms_per_step'):10.1f} | {med(pt,'ms_per_step'):10.1f} | {med(tg,'ms_per_step')/med(pt,'ms_per_step'):6.2f}x |")
        print(f"| {'peak RSS (MB)':30} | {tg_rss:10.0f} | {pt_rss:10.0f} | {tg_rss/pt_rss:6.2f}x |")
        ceiling = t.get("peak", path)   # the instruction the ceiling is of
        print(f"| {f'MFU (of {peak:.0f} GFLOP/s, {ceiling})':30} | {100*med(tg,'mfu'):9.1f}% | {100*med(pt,'achieved_gflops')/peak:9.1f}% | {'':7} |")
        print("rounds (tokens/s tapegrad / PyTorch): " +
              ", ".join(f"{a['tokens_per_s']:.0f} / {b['tokens_per_s']:.0f}" for a, b in zip(tg, pt)))
PY
