#!/usr/bin/env bash
# Whether two builds give the same results, bit for bit: the quick start's run in fp32 and bf16,
# a BPE base of 300 steps and a LoRA fine-tune of it on invented facts, each hashed (metrics.jsonl
# without its timings, the weights exported as safetensors without their metadata, GGUF files, the
# merged LoRA run, the adapter GGUF, the tokenizer). Run it once per build and compare the lines.
# It trains on Debian's fortunes (scripts/deps.sh fortunes): 3,600 steps in all.
# usage: bench/same_results.sh TAPEGRAD OUTDIR   (runs already finished in OUTDIR are reused)
set -euo pipefail
tg=$1; out=$2; mkdir -p "$out"
h() { sha256sum "$1" | cut -c1-16; }
tensors() { python3 -c '
import json,struct,sys,hashlib
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n]); h.pop("__metadata__",None)
print(hashlib.sha256(json.dumps(h,sort_keys=True).encode()+b[8+n:]).hexdigest()[:16])' "$1"; }
metrics() { python3 -c '
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); d.pop("tokens_per_s",None); d.pop("elapsed_s",None); print(json.dumps(d,sort_keys=True))' "$1" | sha256sum | cut -c1-16; }
exports() { # RUN NAME: safetensors and gguf into their own folder
  rm -rf "$out/x-$2"; mkdir -p "$out/x-$2"
  "$tg" ckpt export "$1" --safetensors "$out/x-$2/model.safetensors" >/dev/null
  "$tg" ckpt export "$1" --gguf "$out/x-$2/model.gguf" >/dev/null
}
[ -e "$out/fortunes-char/dataset.json" ] || "$tg" prepare --tokenizer char --seq 128 --out "$out/fortunes-char" >/dev/null
for p in fp32 bf16; do
  if [ ! -e "$out/q-$p/.complete" ]; then
    rm -rf "$out/q-$p"; "$tg" train --dataset "$out/fortunes-char" --precision $p --out "$out/q-$p" >"$out/q-$p.log" 2>&1; touch "$out/q-$p/.complete"
  fi
  exports "$out/q-$p" q-$p
  echo "q-$p metrics $(metrics "$out/q-$p/metrics.jsonl") weights $(tensors "$out/x-q-$p/model.safetensors") gguf $(h "$out/x-q-$p/model.gguf")"
done
[ -e "$out/fortunes-bpe/dataset.json" ] || "$tg" prepare --tokenizer bpe --vocab 2048 --special-tokens chatml --seq 128 --out "$out/fortunes-bpe" >/dev/null
[ -e "$out/base/.complete" ] || { rm -rf "$out/base"; "$tg" train --dataset "$out/fortunes-bpe" --steps 300 --out "$out/base" >"$out/base.log" 2>&1; touch "$out/base/.complete"; }
exports "$out/base" base
echo "base metrics $(metrics "$out/base/metrics.jsonl") weights $(tensors "$out/x-base/model.safetensors") gguf $(h "$out/x-base/model.gguf") tokenizer $(h "$out/fortunes-bpe/tokenizer.txt")"
[ -e "$out/facts/train.jsonl" ] || /usr/bin/python3 "$(dirname "$0")/../scripts/sft_facts.py" generate --people 40 --out "$out/facts" >/dev/null
[ -e "$out/lora/.complete" ] || { rm -rf "$out/lora"; "$tg" sft --init-from "$out/base" --data "$out/facts/train.jsonl" --steps 300 --lora-rank 16 --out "$out/lora" >"$out/lora.log" 2>&1; touch "$out/lora/.complete"; }
rm -rf "$out/merged"; "$tg" ckpt merge "$out/lora" --out "$out/merged" >/dev/null
exports "$out/merged" merged
# the run trains token rows beside its adapters (--lora-tokens auto): the adapter goes with its base
rm -f "$out/lora-adapter.gguf" "$out/lora-base.gguf"
"$tg" ckpt export "$out/lora" --gguf-adapter "$out/lora-adapter.gguf" --gguf-base "$out/lora-base.gguf" >/dev/null
echo "lora metrics $(metrics "$out/lora/metrics.jsonl") merged $(tensors "$out/x-merged/model.safetensors") gguf $(h "$out/x-merged/model.gguf") adapter $(h "$out/lora-adapter.gguf") base $(h "$out/lora-base.gguf")"
