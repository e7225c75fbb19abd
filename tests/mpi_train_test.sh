#!/usr/bin/env bash
# examples/mpi_train under mpirun: the correct sampler reaches >= 80% test accuracy with 2 and 4
# ranks, every rank ends with identical weights (mpi_train exits 3 otherwise), the epoch that does
# not advance replays its batches (per-step losses of consecutive epochs correlate) while the
# correct one does not, without a distributed sampler an epoch takes W times the steps, and the
# chart is drawn. Usage: mpi_train_test.sh MPI_TRAIN PLOT_SCRIPT WORK_DIR
set -euo pipefail
train=$1 plot=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
run() {  # run NP VARIANT [flags...]
  local np=$1 variant=$2
  shift 2
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$train" --variant "$variant" \
    --epochs 3 --out-dir "$work" "$@"
}
field() {  # field NP VARIANT COLUMN: a column of the run's summary
  awk -F, -v col="$3" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == col) c = i }
                       NR == 2 { print $c }' "$work/$2_np$1_summary.csv"
}
fail() { echo "FAIL: $*" >&2; exit 1; }

run 2 correct --min-accuracy 0.80 --threads 2
run 4 correct --min-accuracy 0.80
run 2 no-set-epoch
run 2 no-sampler
for v in correct no-set-epoch no-sampler; do
  [ "$(field 2 "$v" weights_identical)" = yes ] || fail "$v: weights differ between ranks"
done
[ "$(field 4 correct weights_identical)" = yes ] || fail "np 4: weights differ between ranks"
awk -v r="$(field 2 no-set-epoch epoch_loss_correlation)" 'BEGIN { exit !(r > 0.9) }' ||
  fail "no-set-epoch: consecutive epochs' losses do not correlate (r = $(field 2 no-set-epoch epoch_loss_correlation))"
awk -v r="$(field 2 correct epoch_loss_correlation)" 'BEGIN { exit !(r < 0.3 && r > -0.3) }' ||
  fail "correct: consecutive epochs' losses correlate (r = $(field 2 correct epoch_loss_correlation))"
[ "$(field 2 no-sampler steps_per_epoch)" -eq $((2 * $(field 2 correct steps_per_epoch))) ] ||
  fail "no-sampler: $(field 2 no-sampler steps_per_epoch) steps per epoch, expected twice correct's"
/usr/bin/python3 "$plot" "$work" 2 "$work/loss_curves_np2.png"
[ -s "$work/loss_curves_np2.png" ] || fail "no chart"
echo "mpi_train: ok"
