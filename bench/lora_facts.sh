#!/usr/bin/env bash
# LoRA against full fine-tuning on the invented-facts task of docs/sft.md, near the size of
# tests/test_chat.c (the tiny preset, 20 people): the same base (600 steps on generated English),
# the same conversations and steps; each fine-tuned model asked the held-out phrasings (greedy)
# and scored.
#
#   bash bench/lora_facts.sh [FOLDER]             # into checkpoints/lora-facts
#   RANKS="8 16" LORA_LR=1e-2 STEPS=2000 BASE_STEPS=600 PRESET=small THREADS=2 bash bench/lora_facts.sh /tmp/lora-facts
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${TAPEGRAD:-$here/../build/tapegrad}"
out="${1:-checkpoints/lora-facts}"
steps="${STEPS:-2000}" base_steps="${BASE_STEPS:-600}" preset="${PRESET:-tiny}" threads="${THREADS:-1}" ranks="${RANKS:-8 16}" lora_lr="${LORA_LR:-1e-2}"
[ -x "$tapegrad" ] || { echo "lora_facts.sh: $tapegrad not built" >&2; exit 1; }
mkdir -p "$out"
echo "$(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -e "$out/english.txt" ] || "$here/../build/corpus_gen" --bytes 200000 --seed 11 >"$out/english.txt"
[ -e "$out/base/latest" ] || "$tapegrad" train --preset "$preset" --threads "$threads" --tokenizer bpe --vocab 512 --special-tokens chatml \
    --data "$out/english.txt" --steps "$base_steps" --batch 16 --eval-every 0 --sample-tokens 0 --out "$out/base" >"$out/base.log" 2>&1
[ -e "$out/facts/test.jsonl" ] || /usr/bin/python3 "$here/../scripts/sft_facts.py" generate --people 20 --seed 3 --out "$out/facts" >/dev/null
printf '| fine-tuning | lr | trained parameters | held-out questions answered right | time |\n|---|---:|---:|---:|---:|\n'
for mode in full $ranks; do
    run="$out/sft-$mode"
    rm -rf "$run"
    flags=()
    lr=3e-3
    [ "$mode" = full ] || { flags=(--lora-rank "$mode"); lr=$lora_lr; }
    start=$(date +%s.%N)
    "$tapegrad" sft --init-from "$out/base" --data "$out/facts/train.jsonl" --threads "$threads" --seq 96 --steps "$steps" --batch 16 \
        --lr "$lr" --eval-every 0 "${flags[@]}" --out "$run" >"$out/sft-$mode.log" 2>&1
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')
    "$tapegrad" chat --run "$run" --jsonl --temperature 0 --tokens 32 <"$out/facts/test.jsonl" >"$out/sft-$mode.replies.jsonl"
    score=$(/usr/bin/python3 "$here/../scripts/sft_facts.py" score "$out/facts/test.jsonl" "$out/sft-$mode.replies.jsonl")
    params=$(grep -oE '[0-9]+ trainable' "$out/sft-$mode.log" | cut -d' ' -f1 || true)
    [ -n "$params" ] || params=$(grep -oE 'model: [0-9]+ parameters' "$out/sft-$mode.log" | grep -oE '[0-9]+')
    printf '| %s | %s | %s | %s | %s s |\n' "$mode" "$lr" "$params" "$score" "$secs"
done
