#!/usr/bin/env bash
# From a clone to a passing test suite: installs missing packages, builds, runs every test.
# usage: scripts/test.sh            (build directory: build/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh python3-torch chromium openmpi-bin libopenmpi-dev
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
