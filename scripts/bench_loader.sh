#!/usr/bin/env bash
# The loader's throughput against torch.utils.data.DataLoader on Fashion-MNIST, in one run
# (bench/loader/). Usage, as root on Debian 12:  bash scripts/bench_loader.sh [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_TEST_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project
cmake --build build --target loader_throughput
/usr/bin/python3 bench/loader/loader_compare.py build/bin/loader_throughput "$@"
