#!/usr/bin/env bash
# The one benchmark command. Builds the benchmarks and runs, side by side in one run: ours,
# PyTorch's DistributedSampler and torch.randperm, libtorch's DistributedRandomSampler, the CLI,
# the Python package, and the loader against torch's DataLoader; writes docs/benchmarks.md
# (a few minutes). Usage, as root on Debian 12:  bash scripts/bench.sh [--full]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_BENCH_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project -DDISTSAMPLER_BUILD_BENCHMARKS=ON
cmake --build build --target loader_throughput
/usr/bin/python3 bench/compare.py --build build --write docs/benchmarks.md "$@"
