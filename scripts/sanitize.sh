#!/usr/bin/env bash
# Builds the threaded code (the loader layer, prefetch.h) and its tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/) and ThreadSanitizer (build-tsan/), and runs those
# tests. scripts/test.sh calls it.
# Usage:  bash scripts/sanitize.sh [asan|tsan]...   (both when no argument)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
tests="env_test prefetch_test node_order_test dataset_test idx_test npy_test data_loader_test"
for kind in "${@:-asan tsan}"; do
  for k in $kind; do
    case "$k" in
      asan) flags="address,undefined" ;;
      tsan) flags="thread" ;;
      *) echo "error: unknown sanitizer '$k'; allowed: asan, tsan" >&2; exit 2 ;;
    esac
    dir="build-$k"
    echo "== $k (-fsanitize=$flags): building the loader tests in $dir/"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTSAMPLER_WERROR=ON \
      -DDISTSAMPLER_SANITIZE="$flags" -DDISTSAMPLER_BUILD_TOOLS=OFF \
      -DDISTSAMPLER_BUILD_EXAMPLES=OFF -DDISTSAMPLER_INSTALL=OFF >/dev/null
    cmake --build "$dir" -j "$jobs" --target loader_tests
    for t in $tests; do
      echo "-- $k: $t"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$dir/bin/$t" --gtest_brief=1
    done
  done
done
echo "sanitizers: all loader tests passed"
