#!/usr/bin/env bash
# Preparing data (docs/data.md; the figures of a run go to docs/results.md): `tapegrad prepare`
# against sentencepiece's spm_train on the same generated 200 MB corpus (BPE, vocabulary 6400,
# 2 threads), the two run in turn RUNS times; then the peak RSS and time of preparing a 2 GB text
# corpus and a 2 GB JSONL corpus (MiniMind's {"text": ...} lines); then text whose chunks are all
# distinct, BPE's worst case: 4.2 and 16.8 MB of random-letter words and of random letters without
# a space, and spm_train on the 4.2 MB of words (it refuses the letters: no line is under its
# 4192-byte limit). The corpora are made by build/corpus_gen (bench/corpus_gen.c: generated prose
# and Debian's fortunes, or --distinct) under $PREPARE_BENCH_DIR (default
# /tmp/tapegrad-prepare-bench, about 4.5 GB; kept between calls, removed by hand). Prints one line
# per run, then medians.
# usage: bench/prepare_bench.sh [RUNS]        (build/ must hold tapegrad and corpus_gen: cmake --build build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
work=${PREPARE_BENCH_DIR:-/tmp/tapegrad-prepare-bench}
bin=$(realpath build/tapegrad)
gen=$(realpath build/corpus_gen)
bash scripts/deps.sh sentencepiece time fortunes >/dev/null
mkdir -p "$work"
cd "$work"
make_corpus() { # FILE BYTES SEED [--jsonl]
  [ -s "$1" ] || "$gen" --bytes "$2" --seed "$3" ${4:-} --fortunes /usr/share/games/fortunes >"$1"
}
make_corpus c200.txt 200000000 1
make_corpus c2g.txt 2000000000 2
make_corpus c2g.jsonl 2000000000 3 --jsonl
for kind in words letters; do
  [ -s "w4-$kind.txt" ] || "$gen" --bytes 4200000 --seed 4 --distinct "$kind" >"w4-$kind.txt"
  [ -s "w17-$kind.txt" ] || "$gen" --bytes 16800000 --seed 5 --distinct "$kind" >"w17-$kind.txt"
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')), $(nproc) cores"
echo "load before: $(uptime)"
results=$work/results.tsv
: >"$results"
# LABEL COMMAND...: wall seconds, peak RSS (MB), user and system seconds, into results.tsv
measure() {
  local label=$1
  shift
  /usr/bin/time -f "%e %M %U %S" -o time.txt "$@" >"$label.log" 2>&1 || { echo "$label failed:"; tail -20 "$label.log"; exit 1; }
  read -r wall rss user sys <time.txt
  printf '%s\t%s\t%d\t%s\t%s\n' "$label" "$wall" $((rss / 1024)) "$user" "$sys" | tee -a "$results"
}
printf 'label\twall_s\tpeak_rss_MB\tuser_s\tsys_s\n'
for i in $(seq "$runs"); do
  rm -rf ds200 spm && mkdir spm
  measure tapegrad-200MB "$bin" prepare --data c200.txt --out ds200 --tokenizer bpe --vocab 6400 --threads 2
  measure spm_train-200MB spm_train --input=c200.txt --model_prefix=spm/m --vocab_size=6400 --model_type=bpe \
    --num_threads=2 --minloglevel=2
done
rm -rf ds2g ds2gj
measure tapegrad-2GB-text "$bin" prepare --data c2g.txt --out ds2g --tokenizer bpe --vocab 6400 --threads 2
measure tapegrad-2GB-jsonl "$bin" prepare --data c2g.jsonl --out ds2gj --tokenizer bpe --vocab 6400 --special-tokens chatml --threads 2
for kind in words letters; do
  for size in 4 17; do
    rm -rf "d$size-$kind"
    measure "tapegrad-distinct-$kind-${size}MB" "$bin" prepare --data "w$size-$kind.txt" --out "d$size-$kind" --tokenizer bpe --vocab 6400 --threads 2
  done
done
rm -rf spm && mkdir spm
measure spm_train-distinct-words-4MB spm_train --input=w4-words.txt --model_prefix=spm/d --vocab_size=6400 --model_type=bpe \
  --num_threads=2 --minloglevel=2
echo "load after: $(uptime)"
echo
echo "tapegrad's own account of the 2 GB JSONL preparation (progress lines, then the summary):"
cat tapegrad-2GB-jsonl.log
echo
echo "medians:"
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for label in $(cut -f1 "$results" | sort -u); do
  n=$(awk -F'\t' -v l="$label" '$1 == l' "$results" | wc -l)
  wall=$(awk -F'\t' -v l="$label" '$1 == l { print $2 }' "$results" | median)
  rss=$(awk -F'\t' -v l="$label" '$1 == l { print $3 }' "$results" | median)
  echo "$label: $n run(s), wall $wall s, peak RSS $rss MB"
done
