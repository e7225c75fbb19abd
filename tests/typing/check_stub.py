"""The installed package's typing files: py.typed, and _core.pyi beside the extension naming
every public name of the module and of each of its classes (so the stub is the module's, not a
stale one). With --regenerate, python/stubgen.py run again on a copy gives the same text (for a
package built with the mypy this interpreter has).

Usage: check_stub.py SITE_DIR [--regenerate STUBGEN_PY]
"""
import ast
import importlib
import os
import shutil
import sys
import tempfile


def stub_names(tree: ast.Module) -> "dict[str, set[str]]":
    """Top-level names of the stub, '' -> module level, each class -> its members."""
    names: "dict[str, set[str]]" = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[""].add(node.name)
            names[node.name] = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names[node.name].add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names[node.name].add(item.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[""].add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[""].add(node.target.id)
    return names


def main(site: str, *options: str) -> int:
    sys.path.insert(0, site)
    sys.dont_write_bytecode = True
    core = importlib.import_module("distsampler._core")
    package = os.path.dirname(core.__file__)
    assert package == os.path.join(site, "distsampler"), f"imported {core.__file__}, not {site}"
    assert os.path.isfile(os.path.join(package, "py.typed")), f"no py.typed in {package}"
    stub = os.path.join(package, "_core.pyi")
    assert os.path.isfile(stub), f"no _core.pyi beside {core.__file__}"
    with open(stub, encoding="utf-8") as f:
        text = f.read()
    names = stub_names(ast.parse(text))
    missing = [name for name in dir(core) if not name.startswith("_") and name not in names[""]]
    for name in sorted(names[""]):
        cls = getattr(core, name, None)
        if name in names and isinstance(cls, type):
            missing += [f"{name}.{member}" for member in vars(cls)
                        if not member.startswith("_") and member not in names[name]]
    missing += [name for name in ("__version__",) if name not in names[""]]
    assert not missing, f"{stub} lacks {', '.join(missing)}: it is not this module's stub"
    extra = [name for name in names[""] if not hasattr(core, name)]
    assert not extra, f"{stub} names {', '.join(extra)}, which the module lacks"
    print(f"{stub}: {len(names[''])} names, every public name of the module")
    if options[:1] == ("--regenerate",):
        with tempfile.TemporaryDirectory() as work:
            shutil.copytree(package, os.path.join(work, "distsampler"),
                            ignore=shutil.ignore_patterns("_core.pyi", "__pycache__"))
            stubgen = options[1]
            status = os.spawnv(os.P_WAIT, sys.executable, [sys.executable, stubgen, work])
            assert status == 0, f"{stubgen} exited {status}"
            with open(os.path.join(work, "distsampler", "_core.pyi"), encoding="utf-8") as f:
                again = f.read()
        assert again == text, f"{stub} differs from what {stubgen} generates now"
        print(f"{stub}: the same text as {stubgen} generates now")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
