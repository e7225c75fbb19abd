#!/usr/bin/env bash
# A user's script type-checks against the installed package: `cmake --install --component
# python` into a DESTDIR, then, from a folder outside the source tree with only that install on
# PYTHONPATH:
# 1. check_stub.py: py.typed and _core.pyi are installed, the stub names every public name of the
#    extension (and, with --regenerate, is what python/stubgen.py writes for it now);
# 2. `mypy --strict user_script.py` passes (mypy of PYTHON, with PYTHON's torch and numpy);
# 3. the script with a str where the API takes an int fails, naming the argument: the check sees
#    the package's types (a package mypy could not read would make every call Any and pass).
# Usage: mypy_test.sh CMAKE BUILD_DIR PYTHON WORK_DIR [--regenerate STUBGEN_PY]
set -euo pipefail
cmake="$1" build="$2" python="$3" work="$4"
shift 4
here=$(cd "$(dirname "$0")" && pwd)
unset PYTHONPATH DISTSAMPLER_PYTHON_DIR
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cd "$work"

DESTDIR="$work/root" "$cmake" --install "$build" --prefix /usr/local --component python >/dev/null
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site="$work/root/usr/local/lib/python$version/dist-packages"
where=$(PYTHONPATH="$site" "$python" -c 'import distsampler; print(distsampler.__file__)')
[ "$where" = "$site/distsampler/__init__.py" ] || fail "imported $where, not the install in $site"
"$python" "$here/check_stub.py" "$site" "$@"

"$python" -m mypy --version ||
  fail "$python has no mypy (Debian: python3-mypy; the venv: requirements/torch2.txt)"
cp "$here/user_script.py" "$work/user_script.py"
# An empty --config-file: none of the source tree's settings; the cache outlives $work.
check() {
  PYTHONPATH="$site" "$python" -m mypy --config-file= --strict --cache-dir "$work.mypy-cache" \
    --no-error-summary "$@"
}
check user_script.py || fail "mypy --strict on tests/typing/user_script.py (above)"
echo "mypy --strict: user_script.py passes against $site"

# str where an int is expected: on the drop-in sampler and on a policy sampler.
for change in 's/seed=1234, drop_last=False/seed="1234", drop_last=False/' \
              's/num_samples=500/num_samples="500"/'; do
  sed "$change" user_script.py >broken.py
  ! cmp -s user_script.py broken.py || fail "sed '$change' changed nothing in user_script.py"
  if out=$(check broken.py 2>&1); then
    fail "mypy --strict passed user_script.py with sed '$change' applied"
  fi
  [[ $out == *'incompatible type "str"; expected'*int* ]] ||
    fail "mypy on user_script.py with sed '$change' failed, but not for the str: $out"
  echo "mypy --strict rejects sed '$change': ${out%%$'\n'*}"
done
echo "typing: ok"
