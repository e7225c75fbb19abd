# Sourced by the other scripts: installs the Debian packages they need when any is missing.
# Nothing else is downloaded; everything comes from Debian 12's archive.

# Packages for building the library, the CLI and the C++ tests (nlohmann-json3-dev: the header-only
# JSON parser of the checkpoint reader, src/state.cc).
DISTSAMPLER_BUILD_PACKAGES="g++ cmake make libgtest-dev nlohmann-json3-dev"
# Packages for the loader layer, the MPI training example and its chart (examples/, scripts/train.sh).
DISTSAMPLER_LOADER_PACKAGES="zlib1g-dev openmpi-bin libopenmpi-dev dataset-fashion-mnist python3-matplotlib libcli11-dev"
# Packages the Python tests and the PyTorch oracle need.
DISTSAMPLER_TEST_PACKAGES="python3 python3-torch python3-pytest python3-numpy"
# Packages the benchmarks need (scripts/bench.sh): Google Benchmark, libtorch, PyTorch.
DISTSAMPLER_BENCH_PACKAGES="libbenchmark-dev libtorch-dev python3-torch python3-numpy time"
# The MPI layer and its kill-and-resume tests; clang with libFuzzer for the state fuzz target.
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES openmpi-bin libopenmpi-dev clang-14 libclang-rt-14-dev"
# The Python package (pybind11 extension against /usr/bin/python3) is part of the default build;
# the torchrun examples also need matplotlib and the Fashion-MNIST data.
DISTSAMPLER_BUILD_PACKAGES="$DISTSAMPLER_BUILD_PACKAGES python3-dev pybind11-dev python3-pybind11 python3-numpy"
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-matplotlib dataset-fashion-mnist"
# Packaging tests: the wheel and `pip install .` (pyproject.toml, setuptools driving CMake) in
# venvs, and pkg-config for the installed library (tests/python_wheel_test.sh, tests/consumer/).
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-pip python3-venv python3-build"
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-setuptools python3-wheel pkgconf"
# The libtorch adapter's test and example (distsampler::libtorch); without it CMake skips both.
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES libtorch-dev"
DISTSAMPLER_DEMO_PACKAGES="python3-torch python3-numpy python3-matplotlib dataset-fashion-mnist"

ensure_packages() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "Installing missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "error: packages ${missing[*]} are missing; run as root or install them with apt-get" >&2
    return 1
  fi
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

# Configures and builds into build/ (Release, warnings as errors); extra cmake flags as arguments.
build_project() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDISTSAMPLER_WERROR=ON "$@" &&
    cmake --build build -j "$jobs"
}
