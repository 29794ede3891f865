#!/usr/bin/env bash
# From a clone to a passing test suite: installs missing packages, builds, runs every test.
# usage: scripts/test.sh            (build directory: build/)
set -euo pipefail
cd "$(dirname "$0")/.."
# Node.js (20 or newer) runs the client checks; Debian's own package is used only where none is installed
node_pkgs=()
command -v npm >/dev/null 2>&1 || node_pkgs=(nodejs npm)
bash scripts/deps.sh fortunes python3-torch chromium openmpi-bin libopenmpi-dev clang curl "${node_pkgs[@]}"
# the client checks' npm packages, exactly as tests/clients/package-lock.json pins them: Hugging
# Face's JavaScript tokenizers and node-llama-cpp with its prebuilt linux-x64 llama.cpp (no
# install scripts: nothing is built or downloaded beyond the packages). node-llama-cpp needs
# Node.js 20 or newer; an older one (Debian 12's own is 18) is said here, once, not by failing tests.
if [ "${TAPEGRAD_SKIP_CLIENTS:-0}" != 1 ]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -lt 20 ]; then
    echo "test.sh: the client checks need Node.js 20 or newer, found $(node --version 2>/dev/null || echo none);" \
         "install a newer Node.js, or run with TAPEGRAD_SKIP_CLIENTS=1 to skip those checks" >&2
    exit 1
  fi
  (cd tests/clients && npm ci --ignore-scripts --omit=optional --no-audit --no-fund)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
