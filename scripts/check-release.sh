#!/usr/bin/env bash
# The short check of one Debian release that CI runs in a fresh root of the release the host is
# not (.ci/run): every target built with the project's warning flags as errors (the library, the
# CLI, the Python extension, the examples, every test, the clang fuzz targets), then a short run
# of the main job's parts on that release's own compilers and Debian's torch: the C++ token-stream
# and CLI tests, the CLI binary matrix, the consumer build of every public header, the MPI layer,
# the whole Python suite on Debian's torch (the drop-in through DataLoader workers, token
# streams read step by step), and token sources read from a real S3 server (s3_tokens). The
# README's test command (scripts/test.sh) runs all of it and more.
# Usage, as root on Debian 12 or 13:  bash scripts/check-release.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
mkdir -p build
export DISTSAMPLER_SKIP_LOG="$PWD/build/skipped.txt"
: >"$DISTSAMPLER_SKIP_LOG"
ensure_packages $DISTSAMPLER_BUILD_PACKAGES $DISTSAMPLER_TEST_PACKAGES $DISTSAMPLER_LOADER_PACKAGES
echo "Debian $(cat /etc/debian_version): $(g++ --version | head -n 1);" \
  "$(/usr/bin/python3 -c 'import sys, torch; print(f"torch {torch.__version__} at {sys.executable}")')"
# The object store the s3:// token-source test reads from (requirements/s3.txt: no torch, so it is
# made on either release).
s3_python=$(ensure_s3_venv)
build_project -DDISTSAMPLER_BUILD_TESTS=ON -DDISTSAMPLER_REQUIRE_ALL_TESTS=ON \
  -UDISTSAMPLER_TORCH2_PYTHON -DDISTSAMPLER_S3_PYTHON="$s3_python"
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" \
  -R '^([A-Za-z]+/)?(Mix|EditMix|Plan|Edit|Tokens)Test\.|^(Cli|Indexed)\.|^(cli_binary|consumer_find_package|mpi_test|layers|pytest|s3_tokens)$'
echo "== Skipped: $(sort -u "$DISTSAMPLER_SKIP_LOG" | grep -c . || true)"
sort -u "$DISTSAMPLER_SKIP_LOG" | sed 's/^/  /'
