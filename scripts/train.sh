#!/usr/bin/env bash
# The seed's experiment on a real training run: data-parallel softmax regression on Fashion-MNIST
# under `mpirun -np N` (examples/mpi_train.cc), with the three sampler variants (correct; epoch
# not advancing; no distributed sampler), then the chart of their loss curves.
# Usage, as root on Debian 12:  bash scripts/train.sh
#   NP="2 4" EPOCHS=3 OUT=build/train  (the defaults) choose the world sizes, epochs, output dir.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
build_project -DDISTSAMPLER_BUILD_EXAMPLES=ON
NP=${NP:-2 4}
EPOCHS=${EPOCHS:-3}
OUT=${OUT:-build/train}
mkdir -p "$OUT"
mpirun_flags=(--allow-run-as-root --oversubscribe)
for np in $NP; do
  for variant in correct no-set-epoch no-sampler; do
    mpirun "${mpirun_flags[@]}" -np "$np" build/bin/mpi_train --variant "$variant" \
      --epochs "$EPOCHS" --out-dir "$OUT"
  done
  /usr/bin/python3 examples/plot_losses.py "$OUT" "$np" "$OUT/loss_curves_np$np.png"
done
echo
echo "Per-step losses and accuracies: $OUT/<variant>_np<N>.csv and <variant>_np<N>_summary.csv"
echo "Charts: $(ls "$OUT"/loss_curves_np*.png | tr '\n' ' ')"
