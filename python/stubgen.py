"""Writes distsampler/_core.pyi, the extension's type stub, from the built module: mypy's stubgen
reads the signatures pybind11 puts in each docstring. Run by python/CMakeLists.txt after the
extension links (the build tree, the wheel); tests/typing/check_stub.py runs it again to compare.
Nothing keeps the stub by hand: it is the module's, for the mypy this runs with.

Usage: python stubgen.py DIR   (DIR holds the package: DIR/distsampler/_core*.so; the stub is
written to DIR/distsampler/_core.pyi)
"""
import sys


def main(directory: str) -> int:
    sys.dont_write_bytecode = True  # no __pycache__ beside the files that are installed
    sys.path.insert(0, directory)  # this tree's distsampler, before any installed one
    # Not `python -m mypy.stubgen`: a mypyc-compiled mypy (Debian's) has no code object to run.
    from mypy.stubgen import main as stubgen

    stubgen(["--quiet", "-m", "distsampler._core", "-o", directory])
    # mypy before 1.4 (Debian 12's 1.0.1) leaves out the module's dunder variables.
    import distsampler._core as core

    path = f"{directory}/distsampler/_core.pyi"
    with open(path, encoding="utf-8") as stub:
        text = stub.read()
    if isinstance(getattr(core, "__version__", None), str) and "\n__version__:" not in text:
        with open(path, "a", encoding="utf-8") as stub:
            stub.write("__version__: str\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
