#!/usr/bin/env bash
# The Python package built as users of the package index build it (README.md, "Install"), from a
# clean copy of the tracked source (what CI's fresh clone holds; nothing of the checkout's build/
# or .venv/), with the build dependencies pyproject.toml pins fetched from the index:
# 1. `pip install .` with build isolation into a venv of Debian's /usr/bin/python3 that sees its
#    torch and numpy (--system-site-packages), then imported from elsewhere, version ==
#    project(VERSION).
# 2. `python -m build` (the `build` package from the index, pinned, in that venv): an sdist, and a
#    wheel built from that sdist, installed into that venv. The sdist holds what the CMake build
#    reads and neither build/ nor .venv/ (the copy is given both) nor the venv/ and dist/ these
#    commands make; the wheel holds the files step 1 installed, the extension among them.
# Steps 1 and 2 run README.md's "Install" commands as the README shows them (its two blocks are
# `docs-test: in` this file, so the docs test does not build the package a second and third time).
# 3. That wheel installed into a fresh venv: the metadata's version is __version__ (version.h),
#    every module imports, and tests/python/test_torch_sampler.py (parity with PyTorch's
#    DistributedSampler, resume) runs against the installed package.
# The copy's project(VERSION) is bumped first (0.1.0 -> 0.1.100): the package metadata and
# __version__ must follow it, so a version written anywhere but CMakeLists.txt fails here.
# Usage: python_wheel_test.sh SOURCE_DIR VERSION WORK_DIR DISTSAMPLER_BIN GOLDEN_DIR [PYTHON]
# PYTHON (default /usr/bin/python3, the README's) makes step 3's venv: Python of the same version.
set -euo pipefail
source_dir="$1" version="$2" work="$3" cli="$4" golden="$5" python="${6:-/usr/bin/python3}"
unset PYTHONPATH DISTSAMPLER_PYTHON_DIR
step() { echo "== $* ($SECONDS s)"; }
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work/src"

step "a clean copy of the tracked source"
# The tracked files as the working tree has them (a file deleted and not yet committed is skipped).
git -C "$source_dir" ls-files -z |
  (cd "$source_dir" && while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done) |
  tar -C "$source_dir" --null -T - -cf - | tar -C "$work/src" -xf -
[ -f "$work/src/pyproject.toml" ] || fail "no pyproject.toml among $source_dir's tracked files"
bumped="${version%.*}.$((${version##*.} + 100))"
sed -i "s/^project(distsampler VERSION $version /project(distsampler VERSION $bumped /" \
  "$work/src/CMakeLists.txt"
grep -q "^project(distsampler VERSION $bumped " "$work/src/CMakeLists.txt" ||
  fail "no 'project(distsampler VERSION $version ...' in CMakeLists.txt"
version="$bumped"

step "pip install . (build isolation) into a venv: README.md's commands"
cd "$work/src"
/usr/bin/python3 -m venv --system-site-packages venv
venv/bin/pip install .
venv/bin/python -c "import distsampler.torch"
venv/bin/pip show distsampler
cd "$work"
"$work/src/venv/bin/python" -c "import distsampler.torch"  # from outside the source tree too
got=$("$work/src/venv/bin/pip" show distsampler | sed -n 's/^Version: //p')
[ "$got" = "$version" ] || fail "pip show distsampler: version '$got', want $version"
# The package's files as pip installed them (RECORD), without the .pyc files pip compiled.
"$work/src/venv/bin/pip" show --files distsampler | sed -n 's|^ *\(distsampler/.*\)|\1|p' |
  grep -v __pycache__ | sort >"$work/installed.txt"

step "python -m build: an sdist and the wheel built from it, installed: README.md's commands"
mkdir -p "$work/src/build" "$work/src/.venv"  # a user's checkout has these; the sdist must not
touch "$work/src/build/CMakeCache.txt" "$work/src/.venv/pyvenv.cfg"
cd "$work/src"
# A pipeline (not `|| ...`, under which bash ignores set -e): a failing command stops the group.
{
  venv/bin/pip install build==1.6.1
  venv/bin/python -m build
  venv/bin/pip install dist/distsampler-*.whl
} 2>&1 | tee "$work/build.log"
sdists=("$work"/src/dist/distsampler-"$version".tar.gz)
wheels=("$work"/src/dist/distsampler-"$version"-*.whl)
[ -f "${sdists[0]}" ] || fail "no sdist distsampler-$version.tar.gz in dist/: $(ls "$work/src/dist")"
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || fail "not one wheel: ${wheels[*]}"
grep -q "Building wheel from sdist" "$work/build.log" ||
  fail "python -m build did not say it built the wheel (from the sdist)"
tar -tzf "${sdists[0]}" | sed "s|^distsampler-$version/||" | sort >"$work/sdist.txt"
for need in PKG-INFO pyproject.toml CMakeLists.txt LICENSE README.md cmake/version.h.in \
  include/distsampler/sampler.h src/sampler.cc python/CMakeLists.txt python/_core.cpp \
  python/distsampler/__init__.py; do
  grep -qx "$need" "$work/sdist.txt" || fail "the sdist lacks $need"
done
if grep -E '^(build|\.venv|venv|dist|tests|\.git)/' "$work/sdist.txt"; then
  fail "the sdist holds the files above"
fi
"$work/src/venv/bin/python" -m zipfile -l "${wheels[0]}" | awk 'NR > 1 {print $1}' |
  grep '^distsampler/' | sort >"$work/wheel.txt"
grep -q '^distsampler/_core\.cpython-.*\.so$' "$work/wheel.txt" || fail "no extension in the wheel"
# PEP 561: the marker and the extension's stub, generated in the wheel's build (python/stubgen.py).
for need in distsampler/py.typed distsampler/_core.pyi; do
  grep -qx "$need" "$work/wheel.txt" || fail "the wheel lacks $need"
done
# Every module of python/distsampler/ (python/CMakeLists.txt lists them for the build and install).
(cd "$work/src/python" && ls distsampler/*.py) | sort >"$work/modules.txt"
grep '\.py$' "$work/wheel.txt" | diff "$work/modules.txt" - ||
  fail "the wheel's modules (>) are not python/distsampler/*.py (<): python/CMakeLists.txt's list"
diff "$work/installed.txt" "$work/wheel.txt" ||
  fail "pip install . installed other files (<) than the wheel from the sdist holds (>)"
echo "sdist: $(wc -l <"$work/sdist.txt") files; wheel == pip install .: $(tr '\n' ' ' <"$work/wheel.txt")"

step "the wheel, installed into a fresh venv"
"$python" -m venv --system-site-packages "$work/venv2"
"$work/venv2/bin/pip" install --quiet "${wheels[0]}"
cd "$work"
site=$("$work/venv2/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
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

step "every module imports; the PyTorch parity tests against the installed wheel"
# But the framework adapters, which import their framework (not in this venv): distsampler.hf
# (transformers, imported by tests/python/test_hf.py on .venv) and distsampler.litgpt and
# distsampler.olmo_core (tests/llm, on .venv-llm), both from the build tree.
grep -vxE 'distsampler/(hf|litgpt|olmo_core)\.py' "$work/modules.txt" | sed 's|/|.|; s|\.py$||' |
  xargs "$work/venv2/bin/python" -c 'import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]'
# The installed stub names every public name of the installed extension (tests/typing/).
"$work/venv2/bin/python" "$work/src/tests/typing/check_stub.py" "$site"
# The copy's tests (the same snapshot as the package). conftest.py puts DISTSAMPLER_PYTHON_DIR
# first on sys.path: the venv's site-packages here. The whole of tests/python runs against the
# build tree (test pytest); here the file that compares with torch's DistributedSampler.
DISTSAMPLER_PYTHON_DIR="$site" DISTSAMPLER_BIN="$cli" DISTSAMPLER_GOLDEN_DIR="$golden" \
  OMP_NUM_THREADS=1 "$work/venv2/bin/python" -m pytest -q -p no:cacheprovider \
  "$work/src/tests/python/test_torch_sampler.py"
step "done"
echo "python_wheel: ok"
