#!/usr/bin/env bash
# examples/libtorch_train as the README runs it: `--help` works without mpirun, a bad value exits 2
# (tests/examples_help_test.sh checks the flags further), and under mpirun -np 2 it trains to
# >= 70% test accuracy and exits 0 with every rank holding identical weights (it exits 3
# otherwise). Usage: libtorch_train_test.sh BINARY
set -euo pipefail
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

help=$("$bin" --help) || fail "--help exited $?"
grep -q -- "--epochs" <<<"$help" || fail "--help does not list --epochs"
rc=0 && "$bin" --epochs 0 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "--epochs 0 exited $rc, expected 2"

out=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$bin") || fail "mpirun exited $?: $out"
echo "$out"
grep -q "weights identical on all ranks: yes" <<<"$out" || fail "weights differ between ranks"
[ "$(grep -c '^epoch ' <<<"$out")" -eq 3 ] || fail "expected 3 epochs"
accuracy=$(sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' <<<"$out")
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.70) }' || fail "test accuracy $accuracy < 0.70"
echo "libtorch_train: ok"
