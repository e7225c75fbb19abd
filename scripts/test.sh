#!/usr/bin/env bash
# Builds everything and runs every test (C++ through ctest, Python through pytest under ctest).
# Usage, as root on Debian 12:  bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_TEST_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project -DDISTSAMPLER_BUILD_TESTS=ON  # demo.sh leaves it OFF in the cache
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"

# The loader layer again, under AddressSanitizer+UBSan and ThreadSanitizer (separate builds).
cd ..
bash scripts/sanitize.sh
