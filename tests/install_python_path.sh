#!/usr/bin/env bash
# `cmake --install` puts the Python package where the prefix's python3 finds it: installs the build
# into a DESTDIR under the prefixes /usr and /usr/local, then imports distsampler with the
# interpreter's own sys.path, its site directories moved into the DESTDIR. Under /usr the package
# goes where Debian's own python3-* packages go, /usr/lib/python3/dist-packages.
# Usage: install_python_path.sh CMAKE BUILD_DIR PYTHON WORK_DIR
set -euo pipefail
cmake="$1" build="$2" python="$3" work="$4"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
for prefix in /usr /usr/local; do
  root="$work/root${prefix//\//_}"
  DESTDIR="$root" "$cmake" --install "$build" --prefix "$prefix" >/dev/null
  env -u PYTHONPATH "$python" -c '
import sys
root, prefix = sys.argv[1:]
sys.path[:] = [root + p if p.endswith("-packages") else p for p in sys.path]
import distsampler
where = distsampler.__file__
assert where.startswith(root + prefix + "/"), f"imported {where}, not the one installed in {root}"
if prefix == "/usr":
    want = root + "/usr/lib/python3/dist-packages/distsampler/__init__.py"
    assert where == want, f"installed as {where}, want {want}"
print(f"--prefix {prefix}: {where[len(root):]}")
' "$root" "$prefix"
done
echo "install_python_path: ok"
