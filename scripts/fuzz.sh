#!/usr/bin/env bash
# Runs every libFuzzer target longer than the test command does (20 s each there).
# Usage:  bash scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 600; needs a configured build/)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
cmake --build build --target state_fuzz loader_fuzz
mkdir -p build/tests/state_fuzz_corpus build/tests/loader_fuzz_corpus
build/bin/state_fuzz -max_total_time="$seconds" -timeout=5 -print_final_stats=1 \
  build/tests/state_fuzz_corpus tests/fuzz/corpus
build/bin/loader_fuzz -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
  -print_final_stats=1 build/tests/loader_fuzz_corpus tests/fuzz/corpus_loader
echo "fuzz: no finding in ${seconds} s per target"
