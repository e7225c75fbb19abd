#!/usr/bin/env bash
# Builds the threaded code (the loader layer, prefetch.h) and its tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/) and ThreadSanitizer (build-tsan/), and runs those
# tests. The ASan build also builds the adversarial suite (tests/adversarial/) and the CLI, and
# runs them: state mutations, loader file mutants, the CLI matrix (tests/cli_binary_test.sh) and
# random CLI argument lists. Only the targets these need are built. scripts/test.sh calls it.
# Usage:  bash scripts/sanitize.sh [asan|tsan]...   (both when no argument)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
tests="env_test prefetch_test node_order_test plan_feed_test dataset_test idx_test indexed_test npy_test data_loader_test
  tokens_test stream_test mix_test plan_test plan_golden_test edits_test"
for kind in "${@:-asan tsan}"; do
  for k in $kind; do
    case "$k" in
      asan) flags="address,undefined" targets="loader_tests adversarial_tests" tools=ON
            run="$tests state_mutation_test loader_mutation_test" ;;
      # Neither runs the *WhenSlow tests: they need tests/support/read_latency.cc preloaded, and a
      # sanitizer's runtime must be loaded first (ctest's indexed_slow_reads runs them).
      # node_order_test and plan_feed_test's node test fork local ranks after threads started,
      # which ThreadSanitizer does not support (it kills the child): ASan and ctest run them.
      tsan) flags="thread" targets="loader_tests" tools=OFF run="${tests/node_order_test /}" ;;
      *) echo "error: unknown sanitizer '$k'; allowed: asan, tsan" >&2; exit 2 ;;
    esac
    dir="build-$k"
    echo "== $k (-fsanitize=$flags): building $targets in $dir/"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTSAMPLER_WERROR=ON \
      -DDISTSAMPLER_SANITIZE="$flags" -DDISTSAMPLER_BUILD_TOOLS=$tools \
      -DDISTSAMPLER_BUILD_EXAMPLES=OFF -DDISTSAMPLER_INSTALL=OFF >/dev/null
    cmake --build "$dir" -j "$jobs" --target $targets
    for t in $run; do
      echo "-- $k: $t"
      skip="*WhenSlow"
      [ "$k" = tsan ] && [ "$t" = plan_feed_test ] && skip="$skip:*Outlives*"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$dir/bin/$t" --gtest_brief=1 \
        "--gtest_filter=-$skip"
    done
    if [ "$k" = asan ]; then
      # The CLI under ASan + UBSan: the matrix of output failures and bad arguments, then random
      # argument lists (fixed seed; any sanitizer report, signal or stray exit status fails).
      version=$(sed -n 's/^project(distsampler VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
      export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
      echo "-- $k: cli_binary_test.sh"
      bash tests/cli_binary_test.sh "$dir/bin/distsampler" "$version"
      echo "-- $k: cli_random_args.py"
      /usr/bin/python3 tests/adversarial/cli_random_args.py "$dir/bin/distsampler" --jobs "$jobs"
      unset ASAN_OPTIONS UBSAN_OPTIONS
    fi
  done
done
echo "sanitizers: all loader and adversarial tests passed"
