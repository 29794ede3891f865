#!/usr/bin/env bash
# LoRA against full fine-tuning on minimind-26m: peak RSS, positions per second and the size of
# what each run saves, the runs one after the other on the same base and the same conversations;
# each rank with the token rows of --lora-tokens auto (the default) and without (R-none), and the
# time of `sample` drawing 256 tokens with each run (greedy, the whole command).
# The base is minimind-26m after 1 step on a generated corpus (its weights do not change the cost
# of a step); the conversations are scripts/sft_facts.py's.
#
#   bash bench/lora_minimind.sh [FOLDER]          # into checkpoints/lora-bench
#   STEPS=30 RANKS="8 16" bash bench/lora_minimind.sh /tmp/lora-bench
# A stage whose output is already in the folder is not run again (remove it to run it again).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${TAPEGRAD:-$here/../build/tapegrad}"
out="${1:-checkpoints/lora-bench}"
steps="${STEPS:-20}" ranks="${RANKS:-8 16}"
[ -x "$tapegrad" ] || { echo "lora_minimind.sh: $tapegrad not built" >&2; exit 1; }
mkdir -p "$out"
echo "$("$tapegrad" --version | tail -1); $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); $(nproc) cores"
[ -e "$out/corpus.txt" ] || "$here/../build/corpus_gen" --bytes 3000000 --seed 7 >"$out/corpus.txt"
[ -e "$out/data/dataset.json" ] || "$tapegrad" prepare --data "$out/corpus.txt" --tokenizer bpe --vocab 6400 --special-tokens chatml \
    --seq 256 --out "$out/data" >"$out/prepare.log" 2>&1
[ -e "$out/base/latest" ] || "$tapegrad" train --dataset "$out/data" --preset minimind-26m --steps 1 --batch 8 --eval-every 0 \
    --sample-tokens 0 --out "$out/base" >"$out/base.log" 2>&1
[ -e "$out/facts/train.jsonl" ] || /usr/bin/python3 "$here/../scripts/sft_facts.py" generate --people 200 --out "$out/facts" >/dev/null
modes="full"
for rank in $ranks; do modes="$modes $rank $rank-none"; done
printf '| run | trained parameters | peak RSS | positions/s (mean of steps 2..%s) | saved checkpoint | sample: 256 tokens | load before / after |\n|---|---:|---:|---:|---:|---:|---|\n' "$steps"
for mode in $modes; do
    run="$out/sft-$mode"
    rm -rf "$run"
    lora=()
    case "$mode" in
        full) ;;
        *-none) lora=(--lora-rank "${mode%-none}" --lora-tokens none) ;;
        *) lora=(--lora-rank "$mode") ;;
    esac
    before=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -v "$tapegrad" sft --init-from "$out/base" --data "$out/facts/train.jsonl" --seq 256 --batch 8 --steps "$steps" \
        --log-every 1 --eval-every 0 --ckpt-every 0 --threads 2 "${lora[@]}" --out "$run" >"$out/sft-$mode.log" 2>&1
    after=$(cut -d' ' -f1 /proc/loadavg)
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$out/sft-$mode.log")
    tps=$(grep -E '^step [0-9]+/' "$out/sft-$mode.log" | awk 'NR > 1 { for (i = 1; i < NF; i++) if ($(i + 1) == "tok/s") { s += $i; n++ } } END { printf "%.0f", s / n }')
    params=$(grep -oE '^LoRA rank .*: [0-9]+ trainable' "$out/sft-$mode.log" | grep -oE '[0-9]+ trainable' | cut -d' ' -f1 || true)
    [ -n "$params" ] || params=$(grep -oE 'model: [0-9]+ parameters' "$out/sft-$mode.log" | grep -oE '[0-9]+')
    size=$(stat -c %s "$run"/ckpt-*.tgck)
    start=$(date +%s.%N)
    "$tapegrad" sample --run "$run" --prompt "Hello" --tokens 256 --temperature 0 --threads 2 >"$out/sample-$mode.txt" 2>&1
    sample_s=$(echo "$(date +%s.%N) - $start" | bc -l)
    printf '| %s | %s | %.0f MiB | %s | %.1f MiB | %.2f s | %s / %s |\n' "$mode" "$params" "$(echo "$rss / 1024" | bc -l)" "$tps" \
        "$(echo "$size / 1048576" | bc -l)" "$sample_s" "$before" "$after"
done
for mode in $ranks; do
    "$tapegrad" ckpt export "$out/sft-$mode-none" --gguf-adapter "$out/sft-$mode.gguf" --force >/dev/null
    echo "rank $mode GGUF adapter: $(stat -c %s "$out/sft-$mode.gguf") bytes"
done
