#!/usr/bin/env bash
# Builds the benchmarks and runs ours, PyTorch's DistributedSampler and torch.randperm, and
# libtorch's DistributedRandomSampler side by side; writes docs/benchmarks.md (a few minutes).
# Usage, as root on Debian 12:  bash scripts/bench.sh [--full]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_BENCH_PACKAGES
build_project -DDISTSAMPLER_BUILD_BENCHMARKS=ON
/usr/bin/python3 bench/compare.py --build build --write docs/benchmarks.md "$@"
