#!/usr/bin/env bash
# tapegrad against PyTorch on the same model, shapes and threads, side by side, for every kernel
# path this CPU runs (amx, avx512bf16, avx512, avx2, generic: lib/cpu.h), in both precisions, in
# one run: fp32 against PyTorch in fp32, bf16 (`tapegrad bench --precision bf16`) against
# PyTorch's bf16 autocast. PyTorch runs the project's own reference, bench/torch_reference.py
# (the model of bench/torch_model.py, which the parity test holds tapegrad to).
#
#   bash bench/compare.sh                        # small and minimind-26m, 2 rounds, 2 threads, every path
#   ROUNDS=1 PRESETS=tiny STEPS=2 bash bench/compare.sh       # a quick look
#   ROUNDS=3 PRESETS=small PATHS=avx2 bash bench/compare.sh
#   ROUNDS=1 PRESETS=minimind-3 bash bench/compare.sh         # MiniMind-3's dense model, QK-norm on both sides
#   PRECISIONS=bf16 PATHS=avx512bf16 bash bench/compare.sh     # the bf16 tables of one path only
#   FFNS="swiglu relu" bash bench/compare.sh                   # the ReLU FFN too
#
# Each round runs, per preset, FFN and precision, the reference and then `tapegrad bench` once
# per path (TAPEGRAD_ISA=path), one after the other, so that a change in the machine's load hits
# all of them. Both report their median step. The reference runs PyTorch at its best: OpenBLAS's
# fitting kernel and OMP_WAIT_POLICY=passive (bench/torch_reference.py says how). For the avx2
# table PyTorch is held to AVX2 as well, as on a CPU without AVX-512: OPENBLAS_CORETYPE=Haswell,
# ATEN_CPU_CAPABILITY=avx2, DNNL_MAX_CPU_ISA=AVX2; tapegrad's avx2 run gets the same environment
# (TORCH_MATCH=0 compares avx2 with PyTorch as it runs here). The bf16 paths (avx512bf16, amx) run
# avx512's fp32 code, so their fp32 table is left out when avx512's is there. Per path, preset and
# precision it prints the median over the rounds of each side's tokens/s, ms per step and peak
# RSS, the ratios, and the MFU of both against the ceiling `tapegrad bench` measures here: the
# path's FP32 multiply-add for fp32, its bf16 instruction's for bf16. Figures of a run go to
# docs/results.md with the date, the commit, the CPU and the command.
#
# Environment: ROUNDS (2), THREADS (2), PRESETS ("small minimind-26m"), FFNS (swiglu), PRECISIONS
# ("fp32 bf16"), PATHS (every path the binary runs here, from `tapegrad --version`), TORCH_MATCH (1),
# STEPS (7, both sides), TAPEGRAD (build/tapegrad; without one, build-bench/tapegrad, built first), JSON_DIR (keep every
# raw result there). Needs /usr/bin/python3 with torch (apt-get install python3-torch).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
reference="$here/torch_reference.py"
rounds="${ROUNDS:-2}"
threads="${THREADS:-2}"
presets="${PRESETS:-small minimind-26m}"
ffns="${FFNS:-swiglu}"
steps="${STEPS:-7}"
precisions="${PRECISIONS:-fp32 bf16}"
torch_match="${TORCH_MATCH:-1}"
python="/usr/bin/python3"

"$python" -c 'import torch' 2>/dev/null || { echo "compare.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
if [ -n "${TAPEGRAD:-}" ]; then
    tapegrad="$TAPEGRAD"
    [ -x "$tapegrad" ] || { echo "compare.sh: TAPEGRAD=$tapegrad is not a program" >&2; exit 1; }
elif [ -x "$repo/build/tapegrad" ]; then
    tapegrad="$repo/build/tapegrad"
else   # a fresh clone: the program alone, in a build folder of its own
    tapegrad="$repo/build-bench/tapegrad"
    echo "compare.sh: no build/tapegrad; building $tapegrad (Release, without tests and examples) ..." >&2
    cmake -S "$repo" -B "$repo/build-bench" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_TESTS=OFF -DTAPEGRAD_EXAMPLES=OFF >&2
    cmake --build "$repo/build-bench" -j"$(nproc)" >&2
    [ -x "$tapegrad" ] || { echo "compare.sh: the build made no $tapegrad" >&2; exit 1; }
fi
# "kernels: avx512 on ... (this CPU runs: avx512 avx2 generic)"
paths="${PATHS:-$("$tapegrad" --version | sed -n 's/.*this CPU runs: *\([^)]*\)).*/\1/p')}"
[ -n "$paths" ] || { echo "compare.sh: no kernel paths from '$tapegrad --version'" >&2; exit 1; }

out_dir="${JSON_DIR:-$(mktemp -d /tmp/tapegrad-compare-XXXXXX)}"
mkdir -p "$out_dir"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# the PyTorch setting a path is compared with: "native" or "avx2" (held to AVX2)
torch_kind() { if [ "$1" = avx2 ] && [ "$torch_match" = 1 ]; then echo avx2; else echo native; fi; }
kind_env() { if [ "$1" = avx2 ]; then echo "OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2"; fi; }
kinds="$(for p in $paths; do torch_kind "$p"; done | sort -u | tr '\n' ' ')"

echo "machine: $(nproc) cores, $("$tapegrad" --version | sed -n 's/^kernels: [a-z0-9]* on \(.*\) (this CPU runs.*/\1/p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown); paths: $paths; precisions: $precisions; FFNs: $ffns; PyTorch settings: $kinds; OMP_WAIT_POLICY=$OMP_WAIT_POLICY OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; threads $threads; $rounds rounds of $steps steps; raw results in $out_dir"
# the bf16 paths run avx512's fp32 code: their fp32 table would repeat avx512's
same_fp32_code() { [ "$1" = fp32 ] && case "$2" in avx512bf16|amx) [[ " $paths " == *" avx512 "* ]] ;; *) false ;; esac; }
for round in $(seq 1 "$rounds"); do
    for preset in $presets; do
        for ffn in $ffns; do
            for precision in $precisions; do
                for kind in $kinds; do
                    # PyTorch held to AVX2 has no bf16 autocast (its bf16 kernels want AVX-512), and
                    # tapegrad's avx2 path runs bf16 as rounded operands on the fp32 kernel: no table
                    [ "$precision" = bf16 ] && [ "$kind" = avx2 ] && continue
                    tag="$preset-$ffn-$precision"
                    echo "round $round: $tag: pytorch ($kind) ..." >&2
                    env $(kind_env "$kind") "$python" "$reference" --preset "$preset" --ffn "$ffn" --threads "$threads" \
                        --steps "$steps" --precision "$precision" --json > "$out_dir/torch-$tag-$kind-$round.json"
                    for path in $paths; do
                        [ "$(torch_kind "$path")" = "$kind" ] || continue
                        same_fp32_code "$precision" "$path" && continue
                        echo "round $round: $tag: tapegrad ($path) ..." >&2
                        env $(kind_env "$kind") TAPEGRAD_ISA="$path" "$tapegrad" bench --preset "$preset" --ffn "$ffn" \
                            --threads "$threads" --steps "$steps" --precision "$precision" --json \
                            > "$out_dir/tapegrad-$tag-$path-$round.json"
                    done
                done
            done
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$out_dir" "$torch_match" "$paths" "$precisions" "$ffns" $presets <<'PY'
import glob, json, statistics, sys
out_dir, torch_match, paths, precisions, ffns, presets = (sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(),
                                                          sys.argv[4].split(), sys.argv[5].split(), sys.argv[6:])
SAME_MODEL = ("params", "dim", "layers", "heads", "kv_heads", "hidden", "vocab", "seq", "batch", "threads")
def load(pattern):
    return [json.loads(open(p).read()) for p in sorted(glob.glob(f"{out_dir}/{pattern}"))]
med = lambda rs, k: statistics.median(r[k] for r in rs)
for path in paths:
    kind = "avx2" if path == "avx2" and torch_match else "native"
    torch_note = ("PyTorch held to AVX2 (OPENBLAS_CORETYPE=Haswell, ATEN_CPU_CAPABILITY=avx2)" if kind == "avx2"
                  else "PyTorch as it runs on this CPU")
    for preset, ffn, precision in [(p, f, q) for p in presets for f in ffns for q in precisions]:
        tag = f"{preset}-{ffn}-{precision}"
        tg, pt = load(f"tapegrad-{tag}-{path}-*.json"), load(f"torch-{tag}-{kind}-*.json")
        if not tg or not pt:
            continue
        t, p = tg[0], pt[0]
        differ = [k for k in SAME_MODEL if t.get(k) != p.get(k)]
        if differ:
            sys.exit("compare.sh: tapegrad and the reference ran different models for " + tag + ": " +
                     ", ".join(f"{k} {t.get(k)} against {p.get(k)}" for k in differ))
        versus = "PyTorch bf16 autocast" if precision == "bf16" else "PyTorch fp32"
        peak = med(tg, "peak_gflops")
        tg_tps, pt_tps = med(tg, "tokens_per_s"), med(pt, "tokens_per_s")
        tg_rss, pt_rss = med(tg, "peak_rss_mb"), med(pt, "peak_rss_mb")
        print(f"\n{precision}: path {path} on {t['cpu']}; tapegrad --precision {precision} vs {versus}; {preset} ({ffn}): "
              f"dim {t['dim']}, {t['layers']} layers, {t['heads']}/{t['kv_heads']} heads, hidden {t['hidden']}, "
              f"vocab {t['vocab']}, seq {t['seq']}, batch {t['batch']}, {t['params']} parameters, {t['threads']} threads; "
              f"medians of {len(tg)} rounds; {torch_note}")
        plan = t.get("gemm_plan")
        if plan:
            print(f"tapegrad GEMM plan: tile {plan['mr']}x{plan['nr']}, kc {plan['kc']}, nc {plan['nc']}, mc {plan['mc']} "
                  f"(caches from {plan['caches']}); PyTorch {p.get('torch')}, OpenBLAS kernel {p.get('openblas_core', '?')}"
                  f"{' (chosen by the reference: OpenBLAS alone would take a lower one)' if p.get('openblas_core_auto') else ''}")
        print(f"| {'':40} | {'tapegrad':>10} | {'PyTorch':>10} | {'ratio':>7} |")
        print(f"|{'-'*42}|{'-'*12}|{'-'*12}|{'-'*9}|")
        print(f"| {'tokens/s':40} | {tg_tps:10.0f} | {pt_tps:10.0f} | {tg_tps/pt_tps:6.2f}x |")
        print(f"| {'ms per step':40} | {med(tg,'ms_per_step'):10.1f} | {med(pt,'ms_per_step'):10.1f} | {med(tg,'ms_per_step')/med(pt,'ms_per_step'):6.2f}x |")
        print(f"| {'peak RSS (MB)':40} | {tg_rss:10.0f} | {pt_rss:10.0f} | {tg_rss/pt_rss:6.2f}x |")
        ceiling = t.get("peak", path)   # the instruction the ceiling is of
        print(f"| {f'MFU (of {peak:.0f} GFLOP/s, {ceiling})':40} | {100*med(tg,'mfu'):9.1f}% | {100*med(pt,'achieved_gflops')/peak:9.1f}% | {'':7} |")
        print("rounds (tokens/s tapegrad / PyTorch): " +
              ", ".join(f"{a['tokens_per_s']:.0f} / {b['tokens_per_s']:.0f}" for a, b in zip(tg, pt)))
PY
