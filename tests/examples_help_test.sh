#!/usr/bin/env bash
# The example programs' flags (CLI11): --help prints the usage and exits 0, an unknown flag or a bad
# value exits 2 with one line on stderr naming it. The MPI programs (mpi_*, libtorch_train) also
# under `mpirun -np 2`, where one rank prints, every rank leaves through MPI_Finalize (no
# MPI_Abort), and nothing hangs. Usage: examples_help_test.sh MPIRUN PROGRAM...   (MPIRUN may be empty)
set -uo pipefail
mpirun_exe=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  echo "--- stdout:" >&2 && cat "$work/out" >&2
  echo "--- stderr:" >&2 && cat "$work/err" >&2
  failures=$((failures + 1))
}

# expect CODE PATTERN... -- COMMAND...: exit code CODE, each fixed-string PATTERN in the output
# (stdout then stderr), never an MPI_Abort.
expect() {
  local code=$1 patterns=()
  shift
  while [ "$1" != -- ]; do patterns+=("$1") && shift; done
  shift
  timeout 120 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local what="'$*'"
  [ "$rc" -eq "$code" ] || { fail "$what exited $rc, expected $code"; return 1; }
  local p
  for p in "${patterns[@]}"; do
    cat "$work/out" "$work/err" | grep -qF -- "$p" || { fail "$what: no '$p' in the output"; return 1; }
  done
  if grep -qi "MPI_ABORT" "$work/out" "$work/err"; then fail "$what called MPI_Abort"; return 1; fi
  echo "ok: $what -> $rc"
}

# lines FILE PATTERN N: exactly N lines of FILE contain PATTERN.
lines() {
  local n
  n=$(grep -cF -- "$2" "$1")
  [ "$n" -eq "$3" ] || fail "$n lines with '$2' in $(basename "$1"), expected $3"
}

for program in "$@"; do
  name=$(basename "$program")
  case $name in
    mpi_train) flag=--variant bad=(--variant nope) named=nope ;;
    mpi_checkpoint) flag=--checkpoint-every bad=(--batch 0) named=--batch ;;
    policy_report) flag=DIR bad=() named= ;;
    libtorch_train) flag=--epochs bad=(--epochs 0) named=--epochs ;;
    *) echo "unknown program $program" >&2 && exit 1 ;;
  esac
  launchers=(direct)
  if [[ $name == mpi_* || $name == libtorch_train ]]; then
    [ -n "$mpirun_exe" ] || { echo "no mpirun for $name" >&2 && exit 1; }
    launchers+=(mpirun)
  fi
  for launcher in "${launchers[@]}"; do
    run=("$program")
    # btl_tcp_if_include=lo: one host; Open MPI 5 (Debian 13) otherwise writes "Unable to find
    # reachable pairing between local and remote interfaces" to stderr here.
    [ "$launcher" = mpirun ] && run=(env OMPI_MCA_btl_tcp_if_include=lo "$mpirun_exe"
                                     --allow-run-as-root --oversubscribe -np 2 "$program")
    # --help: the usage once (one rank prints it), with the flags, exit 0.
    expect 0 "Usage: $name" "$flag" -- "${run[@]}" --help && lines "$work/out" "Usage:" 1
    [ -s "$work/err" ] && fail "$name --help ($launcher) wrote to stderr"
    # An unknown flag: exit 2, one line naming it.
    expect 2 "--no-such-flag" -- "${run[@]}" --no-such-flag && lines "$work/err" "error:" 1
    [ "$launcher" = direct ] && [ "$(wc -l <"$work/err")" -ne 1 ] &&
      fail "$name --no-such-flag wrote $(wc -l <"$work/err") lines to stderr, expected 1"
    # A bad value: exit 2, naming the flag and the value.
    if [ ${#bad[@]} -gt 0 ]; then
      expect 2 "${bad[0]}" "$named" -- "${run[@]}" "${bad[@]}" && lines "$work/err" "error:" 1
    fi
  done
done
[ "$failures" -eq 0 ] || { echo "examples_help: $failures failures" >&2 && exit 1; }
echo "examples_help: ok"
