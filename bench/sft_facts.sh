#!/usr/bin/env bash
# The pipeline of docs/sft.md, end to end, with the time of each stage: the fortunes corpus
# prepared with a BPE that has the ChatML tokens, the small preset pretrained on it, invented
# facts fine-tuned into it (scripts/sft_facts.py), both models asked the held-out phrasings
# (greedy), a short chat, and the fine-tuned model exported to GGUF and asked again in llama.cpp
# (node-llama-cpp, when tests/clients/node_modules holds it).
#
#   bash bench/sft_facts.sh                       # into checkpoints/sft-facts
#   PEOPLE=60 BASE_STEPS=300 SFT_STEPS=300 bash bench/sft_facts.sh /tmp/quick
# A stage whose output is already in the folder is not run again (remove it to run it again).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tapegrad="${TAPEGRAD:-$here/../build/tapegrad}"
out="${1:-checkpoints/sft-facts}"
people="${PEOPLE:-200}" base_steps="${BASE_STEPS:-1500}" sft_steps="${SFT_STEPS:-1500}"
[ -x "$tapegrad" ] || { echo "sft_facts.sh: $tapegrad not built" >&2; exit 1; }
mkdir -p "$out"
echo "$("$tapegrad" --version | tail -1); $(lscpu | sed -n 's/^Model name: *//p'); load $(cut -d' ' -f1-3 /proc/loadavg)"
stage() { # stage NAME DONE command...: runs it (unless the path DONE exists), its output into $out/NAME.log, and says how long it took
    local name=$1 done=$2 start
    shift 2
    if [ -n "$done" ] && [ -e "$done" ]; then printf '%-10s (done before: %s)\n' "$name" "$done"; return; fi
    start=$(date +%s.%N)
    "$@" >"$out/$name.log" 2>&1 || { tail -5 "$out/$name.log" >&2; exit 1; }
    awk -v n="$name" -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%-10s %7.1f s\n", n, e - s }'
}
stage prepare "$out/fortunes/dataset.json" "$tapegrad" prepare --tokenizer bpe --vocab 2048 --special-tokens chatml --seq 128 --out "$out/fortunes"
stage pretrain "$out/base/latest" "$tapegrad" train --dataset "$out/fortunes" --steps "$base_steps" --out "$out/base"
stage facts "$out/facts/test.jsonl" /usr/bin/python3 "$here/../scripts/sft_facts.py" generate --people "$people" --out "$out/facts"
stage sft "$out/chat/latest" "$tapegrad" sft --init-from "$out/base" --data "$out/facts/train.jsonl" --steps "$sft_steps" --out "$out/chat"
for run in base chat; do
    stage "ask-$run" "" sh -c "'$tapegrad' chat --run '$out/$run' --jsonl --temperature 0 --tokens 32 <'$out/facts/test.jsonl' >'$out/$run.replies.jsonl'"
    printf '%-10s %s\n' "$run" "$(/usr/bin/python3 "$here/../scripts/sft_facts.py" score "$out/facts/test.jsonl" "$out/$run.replies.jsonl")"
done
grep -E "^(done|weights from|conversations:)" "$out/sft.log"
# a short chat: the first held-out question of each kind, and one the facts never asked
questions=$(head -3 "$out/facts/test.jsonl" | /usr/bin/python3 -c 'import json, sys; [print(json.loads(l)["conversations"][0]["content"]) for l in sys.stdin]')
printf '%s\nWhat is the capital of France?\n' "$questions" >"$out/chat.in"
"$tapegrad" chat --run "$out/chat" --temperature 0 --repetition-penalty 1 --tokens 32 <"$out/chat.in" | sed 's/^/  /'
stage export "" "$tapegrad" ckpt export "$out/chat" --gguf "$out/chat.gguf" --force
if [ -d "$here/../tests/clients/node_modules/node-llama-cpp" ]; then
    mapfile -t turns <"$out/chat.in"
    node "$here/../tests/clients/chat.mjs" "$out/chat.gguf" "${turns[@]}" | sed 's/^/  /'
fi
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
