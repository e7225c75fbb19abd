#!/usr/bin/env bash
# One-shot check of every Feistel gather kernel (versions 1 and 2; portable = SSE2 on x86-64,
# SSE4.1, AVX2, AVX-512) against the scalar operator(), for a machine that has AVX-512 (issue 28).
#
# Why: the dispatch (detail::select_simd_level, src/feistel.cc) chooses a kernel only once it has
# run and matched operator() on a CPU with its instruction set. The AVX-512 kernels passed this
# check on an AVX-512 machine (the CPU and compiler are named at kAvx512Verified in
# src/feistel.cc and in CHANGELOG.md), so the dispatch chooses them on AVX-512 CPUs. Run it again
# on a new CPU or compiler. On a MISMATCH of an avx512 kernel: set kAvx512Verified back to false
# (AVX-512 CPUs then take AVX2), turn Feistel.DispatchChoosesAvx512OnlyWithEveryFeature's
# expectation for the full set to kAvx2, and record the CPU, compiler and MISMATCH lines.
#
# Usage, from anywhere, on any Linux machine with a C++17 compiler (g++ or clang++; CXX to pick
# one). Nothing else: no cmake, no gtest, no network. It builds the checker
# (scripts/device_check_avx512.cc with the library's src/feistel*.cc) in a temporary directory:
#   bash scripts/device_check_avx512.sh
# Prints the CPU's flags from /proc/cpuinfo, the dispatch's choice, per version and kernel
# "match" or "MISMATCH" (or "not available on this CPU") with the cases, indices and ns per index
# at n = 10^7, and exits non-zero on any mismatch or build failure. About 30 s of checking on one
# core plus the build; a limit of 240 s on the checker. When $OUT is set, a copy of the output is
# written to $OUT/device_check_avx512.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

log=/dev/null
if [[ -n "${OUT:-}" && -d "${OUT}" ]]; then log="$OUT/device_check_avx512.log"; fi
exec > >(tee "$log") 2>&1

cxx="${CXX:-}"
if [[ -z "$cxx" ]]; then
  for c in g++ c++ clang++; do
    if command -v "$c" >/dev/null; then
      cxx="$c"
      break
    fi
  done
fi
if [[ -z "$cxx" ]]; then
  echo "FAIL: no C++ compiler (g++, c++ or clang++; or set CXX)"
  exit 2
fi

echo "== machine"
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' ||
  uname -m), $(nproc 2>/dev/null || echo '?') cores"
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
line="/proc/cpuinfo flags:"
for f in sse4_1 avx2 avx512f avx512vl avx512bw avx512dq; do
  if [[ "$flags" == *" $f "* ]]; then line+=" $f=yes"; else line+=" $f=no"; fi
done
echo "$line"
has_avx512=yes
for f in avx2 avx512f avx512vl avx512bw avx512dq; do
  [[ "$flags" == *" $f "* ]] || has_avx512=no
done
echo "compiler: $("$cxx" --version | head -n 1)"
if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
  git -C "$root" diff --quiet HEAD -- src include scripts || commit+=" (with local changes)"
fi
echo "commit: ${commit:-unknown (not a git checkout)}"

echo "== build"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sources=("$root/scripts/device_check_avx512.cc")
for s in "$root"/src/feistel*.cc; do sources+=("$s"); done
jobs=$(nproc 2>/dev/null || echo 2)
pids=()
objects=()
for s in "${sources[@]}"; do
  o="$work/$(basename "$s" .cc).o"
  objects+=("$o")
  # Release flags as CMake's (-O3 -DNDEBUG); the kernels carry their own target attributes.
  "$cxx" -std=c++17 -O3 -DNDEBUG -Wall -Wextra -I"$root/include" -I"$root/src" -c "$s" -o "$o" &
  pids+=($!)
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || build_failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || build_failed=1; done
if [[ -n "${build_failed:-}" ]] || ! "$cxx" -o "$work/check" "${objects[@]}"; then
  echo "FAIL: the checker did not build (errors above)"
  exit 2
fi
echo "built $work/check from ${#sources[@]} sources"

echo "== check"
limit=()
if command -v timeout >/dev/null; then limit=(timeout 240); fi
rc=0
"${limit[@]}" "$work/check" | tee "$work/check.txt" || rc=${PIPESTATUS[0]}

echo "== verdict"
if ((rc != 0)); then
  echo "FAIL (exit $rc): report the MISMATCH lines above; an avx512 one among them means"
  echo "kAvx512Verified in src/feistel.cc goes back to false (the comment there says the rest)"
  exit "$rc"
fi
matched=$(grep -cE '^v[12] +avx512 +match ' "$work/check.txt" || true)
if [[ "$has_avx512" == yes && "$matched" != 2 ]]; then
  echo "FAIL: /proc/cpuinfo lists AVX-512, but the library did not run both AVX-512 kernels"
  exit 3
fi
if [[ "$matched" == 2 ]]; then
  echo "AVX-512 machine, every kernel matched: the dispatch's choice of the AVX-512 kernels"
  echo "(kAvx512Verified in src/feistel.cc) holds on this CPU and compiler too."
else
  echo "AVX-512: not available on this CPU; the other kernels matched. The AVX-512 kernels are"
  echo "checked only on an AVX-512 machine."
fi
