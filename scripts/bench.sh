#!/usr/bin/env bash
# The one benchmark command. Builds the benchmarks and runs, side by side in one run: ours,
# PyTorch's DistributedSampler and torch.randperm (Debian's 1.13 and the index's 2.x from .venv),
# libtorch's DistributedRandomSampler, the CLI, the Python package, and the loader against torch's
# DataLoader; writes docs/benchmarks.md (a few minutes). Then the peers stage (bench/peers.py):
# Grain, MosaicML Streaming, torchdata and torch 2 from their own venv .venv-peers (made here from
# requirements/peers.txt, a few minutes the first time), written as the "Peers" section of
# docs/benchmarks.md, and bench/peers_quality.py: the quality battery's structure-aware statistics
# on their orders, a section of docs/quality.md; and the tokens stage (bench/tokens.py):
# megatron-core's BlendedDataset + GPTDataset index build (from .venv) and Grain's packing against
# `distsampler tokens plan` on 100 Megatron-format sources written to build/tokens-bench (about
# 3.5 GB on disk, kept between runs), the "Token streams" section of docs/benchmarks.md, and
# bench/tokens_blend_change.py: Megatron's blend weights changed at a resume against ours, and
# bench/tokens_plan.py: the planner warm, cold and behind a slow file system against the one
# before issue 41 (sources in build/tokens-plan-bench, about 4 GB), bench/tokens_loader.py (tokens
# through the loader, the plan feed), bench/tokens_scale.py (the first batch at 10^8 and
# 10^10 documents: each 10^10 set needs 41 GB free, is written, measured and removed),
# bench/tokens_s3.py (s3:// sources on a local SeaweedFS from .venv-s3, requirements/s3.txt) and
# bench/tokens_locality.py (the locality order's rho against the peers' shuffles) and
# bench/tokens_locality_loss.py (the held-out loss of docs/tokens_run.md's model in each order).
# With DISTSAMPLER_MEGATRON_LM naming a Megatron-LM source at core_v0.16.1 (fetched locally, never
# committed), bench/tokens_prepare.py: `python -m distsampler.prepare` against its
# tools/preprocess_data.py and datatrove's tokenizer, from .venv-prepare
# (requirements/prepare-bench.txt): 4 files at 2 workers, one large file at 1 and 2 workers and
# ours as Ray tasks (and a SLURM array where `sinfo` answers), each run's peak memory, the
# "Preparing data" section of docs/benchmarks.md.
# DISTSAMPLER_BENCH_PEERS=0 skips all three, DISTSAMPLER_BENCH_TOKENS=0 the tokens stage.
# Usage, as root on Debian 12 or 13:  bash scripts/bench.sh [--full]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_BENCH_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project -DDISTSAMPLER_BUILD_BENCHMARKS=ON
cmake --build build --target loader_throughput
# torch.randperm of the PyTorch 2 stack the tests use too, beside Debian's.
torch2_python=$(ensure_torch2_venv)
/usr/bin/python3 bench/compare.py --build build --torch2-python "$torch2_python" \
  --write docs/benchmarks.md "$@"
if [ "${DISTSAMPLER_BENCH_PEERS:-1}" != 0 ]; then
  peers_python=$(ensure_peers_venv)
  PYTHONPATH=build/python "$peers_python" bench/peers.py --write docs/benchmarks.md
  # The quality battery's structure-aware statistics on Grain's and Streaming's orders.
  cmake --build build --target quality
  PYTHONPATH=build/python "$peers_python" bench/peers_quality.py build/bin/quality \
    --write docs/quality.md
  if [ "${DISTSAMPLER_BENCH_TOKENS:-1}" != 0 ]; then
    "$peers_python" bench/tokens.py --build build --torch2-python "$torch2_python" \
      --write docs/benchmarks.md
    # Megatron's blend weights changed at a resume, against ours (seconds; megatron-core's venv).
    "$torch2_python" bench/tokens_blend_change.py --distsampler build/bin/distsampler \
      --write docs/benchmarks.md
    # Planning the token stream (issue 41): warm, cold and behind 1 ms a read, against the
    # planner before issue 41, built from its commit in build/tokens-plan-bench/baseline.
    cmake --build build --target read_latency
    "$torch2_python" bench/tokens_plan.py --build build --write docs/benchmarks.md
    # Tokens through TokenStream.loader() with the plan feed (workers, the loop's wait, one
    # planner per node under torchrun), and the first batch at 10^8 documents cold and warm.
    OMP_NUM_THREADS=1 "$torch2_python" bench/tokens_loader.py --build build --write docs/benchmarks.md
    OMP_NUM_THREADS=1 "$torch2_python" bench/tokens_scale.py --build build --write docs/benchmarks.md
    # Sources in an object store (issue 40): tokens from a local SeaweedFS (.venv-s3) against
    # local files, bytes fetched under a bounded cache by eviction policy, the loop's wait behind
    # 50 ms a request; the locality order's rho against the global shuffle and Streaming's py1e
    # and py1br, and the held-out loss of a model trained in it.
    s3_python=$(ensure_s3_venv)
    OMP_NUM_THREADS=1 "$torch2_python" bench/tokens_s3.py --build build --s3-python "$s3_python" \
      --write docs/benchmarks.md
    "$peers_python" bench/tokens_locality.py --build build --write docs/benchmarks.md
    "$torch2_python" bench/tokens_locality_loss.py --build build --write docs/benchmarks.md
    if [ -n "${DISTSAMPLER_MEGATRON_LM:-}" ]; then
      PYTHONPATH=build/python "$(ensure_prepare_bench_venv)" bench/tokens_prepare.py \
        --megatron-lm "$DISTSAMPLER_MEGATRON_LM" --write docs/benchmarks.md
    else
      echo "bench/tokens_prepare.py: not run (set DISTSAMPLER_MEGATRON_LM to a Megatron-LM" \
        "source at core_v0.16.1)"
    fi
  fi
fi
