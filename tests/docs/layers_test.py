"""docs/design.md's layer table against the tree (issue 22): every public header under
include/distsampler/ and every source under src/ is in the table, every name in it exists, each
public header has its test file (tests/cpp/<name>_test.cc, or tests/dist/ for MPI; the umbrella
header excepted), and no file includes a header of a layer below its own. The folders too: every
folder of include/distsampler/ and src/ is one the table names, and every folder the "Layers"
section names (in the table or its text: `launch/`, `quality/`, ...) exists, so the section and
the tree cannot drift apart when a folder is renamed.

Usage: python3 layers_test.py [REPO_ROOT]   (exit code 0 when all holds; each violation printed)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
INCLUDE = ROOT / "include" / "distsampler"
SRC = ROOT / "src"
# Headers generated at build time, and the umbrella (which includes everything by design).
GENERATED = {"version.h"}
UMBRELLA = "distsampler.h"
# Headers whose test is not tests/cpp/<stem>_test.cc: (path of the test, why).
TESTS_ELSEWHERE = {
    # The .dochash digest, tested with the text lookup it serves (hashlib's vectors).
    "blake2b.h": "tests/cpp/where_test.cc",
    "launch/mpi.h": "tests/dist/mpi_test.cc",
    # The Feistel order's versions, tested through FeistelPermutation (feistel.h).
    "libtorch/sampler.h": "tests/cpp/libtorch_sampler_test.cc",
    # Header-only over the runtime: its test compares the example's batches with Python's.
    "libtorch/tokens.h": "tests/dist/libtorch_tokens.py",
    "loader/data_loader.h": "tests/cpp/data_loader_test.cc",
    "loader/dataset.h": "tests/cpp/dataset_test.cc",
    "loader/idx.h": "tests/cpp/idx_test.cc",
    "loader/npy.h": "tests/cpp/npy_test.cc",
}


def layers_section():
    return (ROOT / "docs" / "design.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]


def layer_table():
    """{layer: (headers, sources)} from the indented block after '## Layers'."""
    section = layers_section()
    block = [line for line in section.splitlines() if line.startswith("    ")]
    header_line = block[0]
    column = header_line.index("sources")
    layers, current = {}, None
    for line in block[1:]:
        name = line[4:15].strip()
        if name:
            current = name
            layers[current] = ([], [])
        layers[current][0].extend(line[15:column].split())
        layers[current][1].extend(line[column:].split())
    return layers


def named_folders():
    """The folders the Layers section's text names outside the table: tokens such as `quality/`,
    (tools/), python/distsampler/ (a name and a slash, not part of a file's path)."""
    text = "\n".join(line for line in layers_section().splitlines()
                     if not line.startswith("    "))
    return sorted(set(re.findall(r"(?<![\w/.])([a-z_]+(?:/[a-z_]+)*/)(?![\w.])", text)))


def folder_problems(layers):
    """Folders of the tree the table does not name, and folders the section names that are
    missing. A folder the text names exists at the repository root, in include/distsampler/ or
    in src/."""
    problems = []
    table = {str(pathlib.Path(name).parent) for headers, sources in layers.values()
             for name in headers + sources} - {"."}
    for top in (INCLUDE, SRC):
        for folder in sorted(p for p in top.rglob("*") if p.is_dir() and p.name != "__pycache__"):
            name = str(folder.relative_to(top))
            if name not in table:
                problems.append(f"folder {folder.relative_to(ROOT)}/ is in no layer of "
                                "docs/design.md")
    for name in named_folders():
        if not any((base / name).is_dir() for base in (ROOT, INCLUDE, SRC)):
            problems.append(f"docs/design.md's Layers section names {name}, which is not a "
                            "folder of the repository, include/distsampler/ or src/")
    return problems


def includes(path: pathlib.Path):
    return re.findall(r'#include "distsampler/([^"]+)"', path.read_text())


def main() -> int:
    problems = []
    layers = layer_table()
    problems += folder_problems(layers)
    order = list(layers)
    rank_of = {}
    for index, (layer, (headers, sources)) in enumerate(layers.items()):
        for name in headers:
            rank_of[("include", name)] = index
            if not (INCLUDE / name).is_file():
                problems.append(f"{layer}: header {name} is not in include/distsampler/")
        for name in sources:
            rank_of[("src", name)] = index
            if not (SRC / name).is_file():
                problems.append(f"{layer}: source {name} is not in src/")
    tree_headers = sorted(str(p.relative_to(INCLUDE)) for p in INCLUDE.rglob("*.h"))
    tree_sources = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*")
                          if p.suffix in (".h", ".cc"))
    for name in tree_headers:
        if name not in GENERATED and ("include", name) not in rank_of:
            problems.append(f"header {name} is in no layer of docs/design.md")
    for name in tree_sources:
        if ("src", name) not in rank_of:
            problems.append(f"source src/{name} is in no layer of docs/design.md")
    for name in tree_headers:
        if name in GENERATED or name == UMBRELLA:
            continue
        test = TESTS_ELSEWHERE.get(name, f"tests/cpp/{pathlib.Path(name).stem}_test.cc")
        if not (ROOT / test).is_file():
            problems.append(f"header {name} has no test file ({test})")
    # Includes point upward: a file's layer is at least the layer of everything it includes.
    files = [(("include", n), INCLUDE / n) for n in tree_headers if n not in GENERATED]
    files += [(("src", n), SRC / n) for n in tree_sources]
    for key, path in files:
        if key not in rank_of or key[1] == UMBRELLA:
            continue
        for target in includes(path):
            target_rank = rank_of.get(("include", target))
            if target in GENERATED or target_rank is None:
                continue
            if target_rank > rank_of[key]:
                problems.append(f"{key[0]}/{key[1]} ({order[rank_of[key]]}) includes {target} "
                                f"({order[target_rank]}), a layer below it")
    for problem in problems:
        print(problem)
    print(f"layers: {len(tree_headers)} headers, {len(tree_sources)} sources, "
          f"{len(named_folders())} folders named, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
