#!/usr/bin/env bash
# scripts/deps.sh's package decisions against this machine's real archive (apt's lists), under
# the callers' `set -euo pipefail`, many times over: a probe that pipes into a reader which exits
# first (apt-cache policy | grep -q) fails at random there, and did, on fresh machines
# (issue 28). The oracle is independent of deps.sh: `apt-cache madison`, whole output.
#
# Usage: tests/deps_test.sh DEPS_SH   (scripts/deps.sh, or a variant of it to test)
set -euo pipefail
source "${1:?usage: deps_test.sh DEPS_SH}"
rounds=8
fail=0
problem() { echo "FAIL: $*"; fail=1; }
offered() {  # the oracle: every name of the group $1 has a version in apt's lists
  local name out
  for name in ${1//,/ }; do
    out=$(apt-cache madison "$name" 2>/dev/null) || return 1
    [ -n "$out" ] || return 1
  done
}
choice="distsampler-no-such-package,g++|$DISTSAMPLER_CLANG_PACKAGES"
choice=${choice%|}
expected=
for a in ${choice//|/ }; do
  offered "$a" && expected=$a && break
done
if [ -z "$expected" ]; then
  if [ "$(id -u)" = 0 ]; then apt-get update -q >/dev/null; fi
  for a in ${choice//|/ }; do
    offered "$a" && expected=$a && break
  done
fi
[ -n "$expected" ] || { echo "FAIL: apt's lists offer none of $choice (run apt-get update)"; exit 1; }
echo "the archive's choice for the clang group: $expected"
for i in $(seq $rounds); do
  got=$(deb_choose "$choice" 2>&1) || got="(failed: $got)"
  [ "$got" = "$expected" ] || { problem "round $i: deb_choose chose $got, the archive offers $expected"; break; }
  deb_offered "${expected%%,*}" || { problem "round $i: deb_offered ${expected%%,*} said no"; break; }
  ! deb_offered distsampler-no-such-package || { problem "round $i: an absent package offered"; break; }
  deb_installed bash || { problem "round $i: deb_installed bash said no"; break; }
  ! deb_installed distsampler-no-such-package || { problem "round $i: an absent package installed"; break; }
done
# A choice the archive cannot meet fails with one line naming it.
if err=$(deb_choose "distsampler-no-such-package|distsampler-no-such-package-either" 2>&1); then
  problem "deb_choose met an impossible choice with '$err'"
elif [ "$(printf '%s\n' "$err" | wc -l)" != 1 ] || [[ $err != *distsampler-no-such-package* ]]; then
  problem "deb_choose's refusal is not one line naming the choice: $err"
fi
[ $fail = 0 ] && echo "ok: $rounds rounds of deb_choose, deb_offered and deb_installed under pipefail"
exit $fail
