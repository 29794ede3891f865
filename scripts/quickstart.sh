#!/usr/bin/env bash
# From a clone to a trained model and a printed sample: installs missing packages (including
# Debian's `fortunes`, the default corpus), builds, prepares the fortunes corpus once into a
# dataset folder (checkpoints/fortunes-char: a char tokenizer, the last 10% held out; a second call
# finds it prepared and reuses it), trains the `small` preset on it for a few minutes on 2 cores,
# and prints a sample. The run folder lands in checkpoints/.
# usage: scripts/quickstart.sh [extra flags for `tapegrad train`]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh fortunes
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
./build/tapegrad prepare --tokenizer char --seq 128 --out checkpoints/fortunes-char
./build/tapegrad train --dataset checkpoints/fortunes-char "$@"
