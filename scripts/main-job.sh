#!/usr/bin/env bash
# From a clone to a working tapegrad: installs missing packages, builds, checks the build.
# usage: scripts/main-job.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
./build/tapegrad --help
./build/tapegrad selftest
