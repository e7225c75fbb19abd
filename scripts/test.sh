#!/usr/bin/env bash
# Builds everything and runs every test (C++ through ctest, Python through pytest under ctest).
# The Python suite runs on two PyTorch stacks: Debian's (/usr/bin/python3, python3-torch) and
# PyTorch 2 in .venv (made here from requirements/torch2.txt when missing; its tests end in _torch2).
# Usage, as root on Debian 12 or 13:  bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_TEST_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
torch2_python=$(ensure_torch2_venv)
stack='import sys, torch; print(f"torch {torch.__version__} at {sys.executable}")'
echo "PyTorch stacks under test: $(/usr/bin/python3 -c "$stack"); $("$torch2_python" -c "$stack")"
# demo.sh leaves the tests OFF in the cache.
# The extension is built with the venv's pybind11 (>= 2.12 reads numpy 2 arrays; Debian 12's 2.10
# misreads them), so the one build serves both stacks, as `pip install .` builds it for users.
build_project -DDISTSAMPLER_BUILD_TESTS=ON -DDISTSAMPLER_TORCH2_PYTHON="$torch2_python" \
  -Dpybind11_DIR="$("$torch2_python" -m pybind11 --cmakedir)"
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"

# The loader layer again, under AddressSanitizer+UBSan and ThreadSanitizer (separate builds).
cd ..
bash scripts/sanitize.sh
