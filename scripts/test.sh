#!/usr/bin/env bash
# From a clone to a passing test suite: installs missing packages, builds, runs every test.
# usage: scripts/test.sh            (build directory: build/)
set -euo pipefail
cd "$(dirname "$0")/.."
# Node.js (20 or newer) runs the client checks; Debian's own package is used only where none is installed
node_pkgs=()
command -v npm >/dev/null 2>&1 || node_pkgs=(nodejs npm)
bash scripts/deps.sh python3-torch chromium openmpi-bin libopenmpi-dev "${node_pkgs[@]}"
# the client checks' npm packages, exactly as tests/clients/package-lock.json pins them: Hugging
# Face's JavaScript tokenizers and node-llama-cpp with its prebuilt linux-x64 llama.cpp (no
# install scripts: nothing is built or downloaded beyond the packages)
(cd tests/clients && npm ci --ignore-scripts --omit=optional --no-audit --no-fund)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
