#!/usr/bin/env bash
# Builds the CLI and runs the main job: `distsampler demo`, then the PyTorch examples under torchrun.
# Usage, as root on Debian 12:  bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project -DDISTSAMPLER_BUILD_TESTS=OFF
build/bin/distsampler demo

# --- Step: the PyTorch drop-in under torchrun (gloo, CPU): the seed's experiments 1 and 2 and a
# --- Fashion-MNIST DDP comparison, chart and CSV in build/demo/.
ensure_packages $DISTSAMPLER_DEMO_PACKAGES
echo
bash examples/run_demos.sh build build/demo 2

# Step: data-parallel training on Fashion-MNIST under MPI, the three sampler variants, and the
# loss chart (scripts/train.sh; prints where the chart is).
bash scripts/train.sh
