#!/usr/bin/env bash
# The Python package installed as a user installs it, with README.md's commands, from a copy of the
# source tree (build files never land in the checkout): `pip install --no-build-isolation .` into
# a venv, then imported from elsewhere; a wheel from `python3 -m build --no-isolation --wheel`
# installed into a fresh venv, whose version metadata must be the C++ library's, and the Python
# tests (tests/python) run against that installed package. Also: the sdist has what CMake needs.
# The copy's project(VERSION) is bumped first (0.1.0 -> 0.1.100): the package metadata and
# __version__ must follow it, so a version written anywhere but CMakeLists.txt fails here.
# Usage: python_wheel_test.sh SOURCE_DIR VERSION WORK_DIR DISTSAMPLER_BIN GOLDEN_DIR [PYTHON]
set -euo pipefail
source_dir="$1" version="$2" work="$3" cli="$4" golden="$5" python="${6:-/usr/bin/python3}"
unset PYTHONPATH DISTSAMPLER_PYTHON_DIR
step() { echo "== $*"; }
fail() { echo "FAIL: $*"; exit 1; }
check_pip_show() { [ "$1" = "$version" ] || fail "pip show distsampler: version '$1', want $version"; }
rm -rf "$work"
mkdir -p "$work/src"
tar -C "$source_dir" --exclude='./build*' --exclude=./.git --exclude='*.egg-info' \
  --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
bumped="${version%.*}.$((${version##*.} + 100))"
sed -i "s/^project(distsampler VERSION $version /project(distsampler VERSION $bumped /" \
  "$work/src/CMakeLists.txt"
grep -q "^project(distsampler VERSION $bumped " "$work/src/CMakeLists.txt" ||
  fail "no 'project(distsampler VERSION $version ...' in CMakeLists.txt"
version="$bumped"

step "pip install into a venv"
cd "$work/src"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-build-isolation .
cd "$work"
"$work/venv/bin/python" -c "import distsampler.torch"
got=$("$work/venv/bin/pip" show distsampler | sed -n 's/^Version: //p')
check_pip_show "$got"

step "wheel, installed into a fresh venv"
cd "$work/src"
"$python" -m build --no-isolation --wheel
wheels=(dist/distsampler-"$version"-*.whl)
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || fail "not one wheel: ${wheels[*]}"
"$python" -m venv --system-site-packages "$work/venv2"
"$work/venv2/bin/pip" install "${wheels[0]}"
cd "$work"
got=$("$work/venv2/bin/pip" show distsampler | sed -n 's/^Version: //p')
check_pip_show "$got"
site=$("$work/venv2/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$work/venv2/bin/python" - "$version" "$site" <<'PY'
import importlib.metadata
import sys

import distsampler

version, site = sys.argv[1:]
assert distsampler.__file__.startswith(site + "/"), f"imported {distsampler.__file__}, not {site}"
meta = importlib.metadata.version("distsampler")
assert meta == distsampler.__version__ == version, (meta, distsampler.__version__, version)
print(f"distsampler {meta} (metadata) == {distsampler.__version__} (version.h), from {site}")
PY

step "tests/python against the installed wheel"
# conftest.py puts DISTSAMPLER_PYTHON_DIR first on sys.path: the venv's site-packages here.
DISTSAMPLER_PYTHON_DIR="$site" DISTSAMPLER_BIN="$cli" DISTSAMPLER_GOLDEN_DIR="$golden" \
  OMP_NUM_THREADS=1 "$work/venv2/bin/python" -m pytest -q -p no:cacheprovider \
  "$source_dir/tests/python"

step "the sdist holds what the CMake build reads"
cd "$work/src"
"$python" -m build --no-isolation --sdist
mkdir "$work/sdist"
tar -C "$work/sdist" --strip-components=1 -xzf dist/distsampler-"$version".tar.gz
cmake -S "$work/sdist" -B "$work/sdist-build" -DDISTSAMPLER_BUILD_TESTS=OFF \
  -DDISTSAMPLER_BUILD_TOOLS=OFF -DDISTSAMPLER_BUILD_EXAMPLES=OFF -DDISTSAMPLER_BUILD_LOADER=OFF \
  -DDISTSAMPLER_BUILD_MPI=OFF >/dev/null
echo "python_wheel: ok"
