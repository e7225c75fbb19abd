#!/usr/bin/env bash
# Runs the examples under the real launcher, torchrun (gloo, CPU): the seed's experiments 1 and 2,
# the Fashion-MNIST DDP comparison (CSV and PNG written to OUT_DIR), duplicate-free evaluation,
# and a token stream checkpointed on 2 ranks and resumed on 3 (examples/tokens/resume_demo.py).
# Usage, after the build:  bash examples/run_demos.sh [BUILD_DIR [OUT_DIR [NPROC]]]
# The interpreter is Debian's, /usr/bin/python3, unless DISTSAMPLER_PYTHON names another (the
# PyTorch 2 venv's .venv/bin/python, say).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
out=${2:-$build/demo}
nproc=${3:-2}
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# rdzv_endpoint localhost:0 lets the rendezvous pick a free port. Debian 12's torchrun (torch
# 1.13.1 on Python 3.11) crashes at start with the default --redirects 0 / --tee 0 (Python 3.11's
# IntFlag iteration skips the zero member, so "0" parses to None): redirecting and teeing stderr
# (2) avoids that and leaves stdout untouched.
launch() {
  "${DISTSAMPLER_PYTHON:-/usr/bin/python3}" -m distsampler.torchrun --nnodes=1 \
    --nproc_per_node="$nproc" --rdzv_backend=c10d --rdzv_endpoint=localhost:0 --redirects 2 \
    --tee 2 --log_dir "$logs" "$@"
}

echo "== Experiment 1: 16 items, batch 2, 2 epochs, $nproc ranks (values are item index + 1)"
launch examples/experiment1_set_epoch.py | sort -s -k1,2 -k3,3
echo
echo "== Experiment 2: 8 items, batch 4, 2 epochs of DDP, our sampler vs a shuffling DataLoader"
launch examples/experiment2_ddp_sharding.py | sort -s -k1,2 -k3,3
echo
echo "== Fashion-MNIST DDP: loss per step with epochs advancing, not advancing, no sampler"
launch examples/fashion_mnist_ddp.py --out "$out"
echo
echo "== Evaluation on 10,000 Fashion-MNIST test images, 3 ranks: every sample counted once"
nproc=3 launch examples/eval_accuracy.py
echo
echo "== A token stream (two sources mixed 0.7/0.3, best-fit packed): 2 ranks for 6 steps, a"
echo "   checkpoint, then 3 ranks for 6 more steps from it: the one-rank stream, token for token"
tokens="$out/tokens"
rm -rf "$tokens"
"${DISTSAMPLER_PYTHON:-/usr/bin/python3}" examples/tokens/write_indexed.py "$tokens" --sources 2 \
  --documents 300 --seed 2
nproc=2 launch examples/tokens/resume_demo.py "$tokens" --steps 0:6 --save "$tokens/ckpt.pt"
nproc=3 launch examples/tokens/resume_demo.py "$tokens" --steps 6:12 --resume "$tokens/ckpt.pt" \
  --check
