#!/usr/bin/python3
"""The docs test: every code block of README.md and docs/*.md runs, so the documentation cannot rot.

Each code block (4-space indented or ``` fenced) must be preceded, as its last non-blank line
before it, by exactly one rule in an HTML comment the reader does not see:

  <!-- docs-test: sh [cwd=scratch] [setup=NAME] [WORD=VALUE]... -->
      Run as a bash script (set -e) from the repository root (cwd=scratch: from a fresh folder
      whose entries are links to the repository's top-level entries, so writes stay out of the
      checkout). WORD=VALUE replaces the placeholder WORD (whole word) of the text by VALUE before
      running, e.g. PREFIX=$SCRATCH/prefix; $SCRATCH is this run's scratch folder, shared by all
      blocks. setup=NAME runs SETUPS[NAME] first. If the block has lines starting with "$ ",
      it is a transcript: each "$ " line (with its "\\" continuation lines) is a command, run
      alone with stderr merged into stdout, and the lines up to the next "$ " are its expected
      output, compared line by line (trailing blanks ignored); a line "..." stands for any
      number of lines, a line ending in " ..." for any line with that beginning.
  <!-- docs-test: sh copy -->
      The same, from a scratch copy of the source tree (no build*/ and .git), made once and
      shared by the blocks that ask for it: for commands that build from the source (pip).
  <!-- docs-test: python [torchrun=N] [prelude=NAME] [runs=K] -->
      Run with the interpreter running this test (sys.executable: the PyTorch stack under test,
      Debian's /usr/bin/python3 or PyTorch 2's venv) and PYTHONPATH=build/python after
      PRELUDES[NAME], which defines
      the free names the snippet uses, and before EPILOGUES[NAME]; under torchrun with N processes (gloo on CPU) if asked;
      K times in a row (a checkpointing snippet then also takes its resume branch).
  <!-- docs-test: cpp prelude=NAME -->
      Compiled as C++17 with -Wall -Wextra -Werror (unused variables allowed): the block's #include lines at the top, the
      rest inside main() after CPP_PRELUDES[NAME]'s body, linked against the built libraries
      that prelude names, and run.
  <!-- docs-test: cmake -->
      CMake lines appended to a minimal project (CMAKE_PROJECT below) whose app is
      tests/consumer/main.cc, configured with -DCMAKE_PREFIX_PATH=$SCRATCH/prefix (where an
      earlier block installed the build), built and run.
  <!-- docs-test: output -->
      The output the previous block printed (that block must be sh or python), compared as a
      transcript's output is.
  <!-- docs-test: output-of COMMAND -->
      The output of COMMAND (run as sh from $SCRATCH), compared as a transcript's output is.
  <!-- docs-test: usage -->
      A `distsampler` synopsis: for each command it shows, its flags are exactly those that
      `build/bin/distsampler COMMAND --help` lists.
  <!-- docs-test: in FILE -->
      The block's lines are in FILE (a tested file: a test compiles or runs them), consecutive,
      compared without indentation and trailing comments.
  <!-- docs-test: skip REASON -->
      Not run, for the concrete REASON given (kept for the few that cannot run in the suite).

A block without a rule, a rule without a block, an unknown rule or a failing block fails the test
with its file:line. Usage: docs_test.py [SOURCE_DIR [BUILD_DIR]] [--only FILE:LINE]...
[--python-only]. --python-only (for a second PyTorch stack) runs only the blocks that run Python
on the built package: python blocks, sh blocks with "PYTHONPATH=build/python /usr/bin/python3"
(where /usr/bin/python3 is replaced by this test's interpreter, as in every run), and the output
blocks right after those.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RULE = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+")
# The interpreter of the PyTorch stack under test: the one running this script.
PYTHON = sys.executable
# A sh block that runs a Python program on the built package; its /usr/bin/python3 is PYTHON.
PYTHON_SH = re.compile(r"PYTHONPATH=build/python /usr/bin/python3\b")
# --monitor_interval 0.1, torch 2's default: Debian's 1.13 checks its workers every 5 s, so
# each launch outlived its ranks by up to 5 s.
TORCHRUN = [PYTHON, "-m", "distsampler.torchrun", "--redirects", "2", "--tee", "2",
            "--monitor_interval", "0.1", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0"]
TIMEOUT = 300

# Shell setups (sh setup=NAME), run in the block's folder before it.
SETUPS = {
    # README "Install": the user's program that pkg-config builds.
    "consumer-main": 'cp "$SOURCE/tests/consumer/main.cc" .',
}

# Python preludes (python prelude=NAME): the free names a snippet uses.
_DDP = '''\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")                    # world size and rank from torchrun
rank = dist.get_rank()
dataset = TensorDataset(torch.arange(256.0))        # 2 batches of 64 per rank at world size 2
epochs = 2
'''
PRELUDES = {
    "ddp": _DDP,
    "ddp-checkpoint": _DDP + '''\
path = os.path.join(os.environ["SCRATCH"], "loader_checkpoint.pt")
time_to_save = True                                 # every batch; the second run resumes
model = torch.nn.Linear(1, 1)
''',
}

# What a script whose prelude is NAME ends with. A gloo process group left alive at exit can
# abort the process ("terminate called without an active exception": pytorch/pytorch#190489);
# PyTorch's documentation has every trainer call destroy_process_group at the end of main, as
# the examples here do (through distsampler.launch.destroy_distributed, which waits in a barrier
# first: Debian 13's torch 2.6 can hang in it otherwise). One README block failed that way, once
# in several full runs.
EPILOGUES = {
    "ddp": "\nfrom distsampler.launch import destroy_distributed\ndestroy_distributed()\n",
    "ddp-checkpoint": "\nfrom distsampler.launch import destroy_distributed\ndestroy_distributed()\n",
}

# C++ preludes (cpp prelude=NAME): includes, the body before the snippet, the libraries to link.
CPP_PRELUDES = {
    "sampler": {
        "head": "#include <cstdint>\n",
        "body": "const uint64_t dataset_size = 1000, world_size = 2, rank = 1, epochs = 2;\n",
        "libs": ["libdistsampler.a"],
    },
    "loader": {
        "head": "#include <distsampler/distsampler.h>\n"
                "#include <distsampler/loader/data_loader.h>\n"
                "#include <distsampler/loader/dataset.h>\n"
                "#include <memory>\n"
                "#include <vector>\n"
                "using namespace distsampler;\n",
        "body": "SampleSpec spec;\n"
                "spec.shape = {4};\n"
                "const auto dataset = std::make_shared<const InMemoryDataset>(\n"
                "    spec, std::vector<unsigned char>(400, 7), std::vector<int64_t>(100, 1));\n"
                "SamplerOptions sampler_options;\n"
                "sampler_options.size = 100;\n"
                "sampler_options.world_size = 2;\n"
                "const DistributedSampler sampler(sampler_options);\n"
                "const uint64_t e = 1;\n",
        "libs": ["libdistsampler_loader.a", "libdistsampler.a", "-lz", "-pthread"],
    },
}

# The project a `cmake` block's lines are appended to.
CMAKE_PROJECT = """\
cmake_minimum_required(VERSION 3.25)
project(app LANGUAGES CXX)
add_executable(app main.cc)
"""


class Block:
    def __init__(self, path, line, text, rule, rule_line):
        self.path, self.line, self.text, self.rule, self.rule_line = path, line, text, rule, rule_line
        self.output = None  # what it printed, for a following `output` block

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def scan(path, rel):
    """Code blocks of a Markdown file and their rules; errors for rules without a block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, errors = [], []
    pending = None  # (rule text, line number) of a rule waiting for its block
    list_indent = None  # content indent of the list item the text is in, if any
    i = 0
    while i < len(lines):
        line = lines[i]
        prev_blank = i == 0 or not lines[i - 1].strip()
        fence = FENCE.match(line)
        indented = (line.startswith("    ") and line.strip() and prev_blank and
                    (list_indent is None or len(line) - len(line.lstrip()) >= list_indent + 4))
        if fence or indented:
            start = i
            if fence:
                marker = fence.group(1)
                i += 1
                body = []
                while i < len(lines) and not lines[i].lstrip().startswith(marker):
                    body.append(lines[i])
                    i += 1
                i += 1
            else:
                body = []
                while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                    body.append(lines[i][4:])
                    i += 1
                while body and not body[-1].strip():
                    body.pop()
            rule, rule_line = pending if pending else (None, None)
            blocks.append(Block(rel, start + 1, "\n".join(body) + "\n", rule, rule_line))
            pending = None
            continue
        if line.strip():
            match = RULE.match(line)
            if pending:
                errors.append(f"{rel}:{pending[1]}: rule '{pending[0]}' is not followed by a "
                              "code block")
                pending = None
            if match:
                pending = (match.group(1), i + 1)
            elif "docs-test" in line:
                errors.append(f"{rel}:{i + 1}: malformed rule: {line.strip()}")
            item = LIST_ITEM.match(line)
            if item:
                list_indent = len(item.group(0))
            elif not line.startswith(" ") and prev_blank:
                list_indent = None
        i += 1
    if pending:
        errors.append(f"{rel}:{pending[1]}: rule '{pending[0]}' is not followed by a code block")
    return blocks, errors


def matches(expected, got):
    """Whether output `got` is what `expected` shows ("..." lines and line ends as wildcards; no
    lines: no output)."""
    if not expected.strip():
        return not got.strip()
    pattern = ""
    for line in expected.rstrip("\n").split("\n"):
        line = line.rstrip()
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
        elif line.endswith(" ..."):
            pattern += re.escape(line[:-3]) + r"[^\n]*\n"
        else:
            pattern += re.escape(line) + r"\n"
    text = "\n".join(l.rstrip() for l in got.rstrip("\n").split("\n")) + "\n"
    if not got.strip():
        text = ""
    return re.fullmatch(pattern, text) is not None


class Runner:
    def __init__(self, source, build):
        self.source, self.build = source, build
        self.scratch = tempfile.mkdtemp(prefix="docs_test.")
        self.copy = None
        self.env = dict(os.environ)
        for name in ("PYTHONPATH", "DISTSAMPLER_PYTHON_DIR"):
            self.env.pop(name, None)
        self.env.update(SCRATCH=self.scratch, SOURCE=source, BUILD=build)

    def folder(self, kind):
        if kind == "copy":
            if self.copy is None:
                self.copy = os.path.join(self.scratch, "source")
                os.makedirs(self.copy)
                subprocess.run(f"tar -C '{self.source}' --exclude='./build*' --exclude=./.git "
                               "--exclude=./.venv "
                               "--exclude='*.egg-info' --exclude=__pycache__ -cf - . | "
                               f"tar -C '{self.copy}' -xf -", shell=True, check=True)
            return self.copy
        if kind == "scratch":
            folder = tempfile.mkdtemp(dir=self.scratch, prefix="cwd.")
            for entry in os.listdir(self.source):
                if entry != ".git":
                    os.symlink(os.path.join(self.source, entry), os.path.join(folder, entry))
            return folder
        return self.source

    def sh(self, script, cwd):
        result = subprocess.run(["bash", "-c", script], cwd=cwd, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
        return result.returncode, result.stdout

    def run_sh(self, block, args):
        options = dict(a.split("=", 1) for a in args if "=" in a)
        text = block.text
        for word, value in options.items():
            if word.isupper():
                text = re.sub(rf"\b{word}\b", value, text)
        text = PYTHON_SH.sub(f"PYTHONPATH=build/python {PYTHON}", text)
        cwd = self.folder("copy" if "copy" in args else options.get("cwd", "root"))
        prefix = SETUPS[options["setup"]] + "\n" if "setup" in options else ""
        if not any(l.startswith("$ ") for l in text.split("\n")):
            code, out = self.sh("set -e\n" + prefix + text, cwd)
            block.output = out
            return None if code == 0 else f"exit status {code}; output:\n{out}"
        if prefix:
            self.sh(prefix, cwd)
        commands = []  # (command, expected output)
        lines = text.rstrip("\n").split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                return f"transcript line {i + 1} is neither a command nor its output"
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command += "\n" + lines[i]
            i += 1
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            commands.append((command, "\n".join(expected)))
        for command, expected in commands:
            code, out = self.sh(command, cwd)
            if not matches(expected, out):
                return (f"$ {command}\nprinted (exit status {code}):\n{out}\nwhere the docs "
                        f"show:\n{expected}")
        return None

    def run_python(self, block, args):
        options = dict(a.split("=", 1) for a in args if "=" in a)
        source = PRELUDES[options["prelude"]] if "prelude" in options else ""
        script = os.path.join(self.scratch, f"snippet_{block.line}.py")
        with open(script, "w") as f:
            f.write(source + f"# ---- {block.where} ----\n" + block.text +
                    EPILOGUES.get(options.get("prelude"), ""))
        env = dict(self.env, PYTHONPATH=os.path.join(self.build, "python"), OMP_NUM_THREADS="1")
        if "torchrun" in options:
            command = TORCHRUN + [f"--nproc_per_node={options['torchrun']}", script]
        else:
            command = [PYTHON, script]
        outputs = []
        for run in range(int(options.get("runs", 1))):
            result = subprocess.run(command, cwd=self.source, env=env, text=True, timeout=TIMEOUT,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            outputs.append(result.stdout)
            if result.returncode != 0:
                return f"run {run + 1}: exit status {result.returncode}; output:\n{result.stdout}"
        block.output = outputs[-1]
        return None

    def run_cpp(self, block, args):
        options = dict(a.split("=", 1) for a in args if "=" in a)
        prelude = CPP_PRELUDES[options["prelude"]]
        lines = block.text.split("\n")
        includes = [l for l in lines if l.startswith("#include")]
        body = [l for l in lines if not l.startswith("#include")]
        source = os.path.join(self.scratch, f"snippet_{block.line}.cc")
        with open(source, "w") as f:
            f.write(prelude["head"] + "\n".join(includes) + "\n\nint main() {\n" +
                    prelude["body"] + f"// ---- {block.where} ----\n" + "\n".join(body) +
                    "\nreturn 0;\n}\n")
        binary = source[:-3]
        libs = [l if l.startswith("-") else os.path.join(self.build, l) for l in prelude["libs"]]
        # -Wno-unused-variable: a snippet's loop may leave its body to a comment.
        command = ["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable", "-O1",
                   "-I", os.path.join(self.source, "include"),
                   "-I", os.path.join(self.build, "include"), source, "-o", binary] + libs
        result = subprocess.run(command, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=TIMEOUT)
        if result.returncode != 0:
            return f"does not compile ({' '.join(command)}):\n{result.stdout}"
        code, out = self.sh(binary, self.scratch)
        return None if code == 0 else f"exit status {code}; output:\n{out}"

    def run_cmake(self, block, args):
        project = os.path.join(self.scratch, f"cmake_{block.line}")
        os.makedirs(project)
        with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
            f.write(CMAKE_PROJECT + block.text)
        shutil.copy(os.path.join(self.source, "tests", "consumer", "main.cc"), project)
        prefix = os.path.join(self.scratch, "prefix")
        code, out = self.sh(f"cmake -S . -B b -DCMAKE_PREFIX_PATH='{prefix}' >/dev/null && "
                            "cmake --build b >/dev/null && b/app", project)
        return None if code == 0 else f"exit status {code}; output:\n{out}"

    def run_usage(self, block, args):
        cli = os.path.join(self.build, "bin", "distsampler")
        shown = {}
        for line in block.text.split("\n"):
            words = line.split()
            if words[:1] == ["distsampler"] and len(words) > 1 and not words[1].startswith("-"):
                command = words[1]
                shown[command] = set()
            elif words[:1] == ["distsampler"]:
                command = None
                code, _ = self.sh(line.strip().replace("distsampler", f"'{cli}'", 1), self.scratch)
                if code != 0:
                    return f"{line.strip()}: exit status {code}"
            if command:
                shown[command] |= set(re.findall(r"--[a-z][a-z-]*", line))
        for command, flags in shown.items():
            code, help_text = self.sh(f"'{cli}' {command} --help", self.scratch)
            if code != 0:
                return f"distsampler {command} --help: exit status {code}"
            # A flag line: indented, flags (and their value names) up to a gap of 2+ blanks.
            listed = set()
            for line in help_text.split("\n"):
                if re.match(r"\s+--[a-z]", line):
                    listed |= set(re.findall(r"--[a-z][a-z-]*", re.split(r"\s{2,}", line.strip())[0]))
            listed |= set(re.findall(r"(--[a-z][a-z-]*)", "\n".join(
                l for l in help_text.split("\n") if l.strip().startswith("usage:"))))
            listed.discard("--help")
            if flags != listed:
                return (f"distsampler {command}: the docs show {sorted(flags - listed)} that "
                        f"--help does not list, and lack {sorted(listed - flags)}")
        return None

    def run_in(self, block, args):
        path = os.path.join(self.source, args[0])
        if not os.path.isfile(path):
            return f"no file {args[0]}"

        def norm(line):
            return re.sub(r"\s+(//|#)\s.*$", "", line.strip())
        want = [norm(l) for l in block.text.split("\n") if l.strip()]
        have = [norm(l) for l in open(path, encoding="utf-8").read().split("\n")]
        for start in range(len(have) - len(want) + 1):
            if have[start:start + len(want)] == want:
                return None
        return f"{args[0]} does not hold these lines"

    def run_block(self, block, previous):
        kind, *args = block.rule.split()
        if kind == "skip":
            return None if args else "skip needs a reason"
        if kind == "sh":
            return self.run_sh(block, args)
        if kind == "python":
            return self.run_python(block, args)
        if kind == "cpp":
            return self.run_cpp(block, args)
        if kind == "cmake":
            return self.run_cmake(block, args)
        if kind == "usage":
            return self.run_usage(block, args)
        if kind == "in":
            return self.run_in(block, args)
        if kind == "output":
            if previous is None or previous.output is None:
                return "no previous sh or python block's output to compare with"
            if not matches(block.text, previous.output):
                return f"{previous.where} printed:\n{previous.output}\nwhere the docs show the above"
            return None
        if kind == "output-of":
            code, out = self.sh(" ".join(args), self.scratch)
            if not matches(block.text, out):
                return f"{' '.join(args)} printed (exit status {code}):\n{out}"
            return None
        return f"unknown rule '{kind}'"


def main():
    argv = sys.argv[1:]
    only = []
    while "--only" in argv:
        k = argv.index("--only")
        only.append(argv[k + 1])
        del argv[k:k + 2]
    python_only = "--python-only" in argv
    argv = [a for a in argv if a != "--python-only"]
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.abspath(argv[0]) if argv else os.path.dirname(os.path.dirname(here))
    build = os.path.abspath(argv[1]) if len(argv) > 1 else os.path.join(source, "build")
    files = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(
        os.path.join(source, "docs")) if f.endswith(".md"))
    blocks, errors = [], []
    for rel in files:
        found, problems = scan(os.path.join(source, rel), rel)
        blocks += found
        errors += problems
    for block in blocks:
        if block.rule is None:
            errors.append(f"{block.where}: code block without a docs-test rule:\n{block.text}")
    runner = Runner(source, build)
    counts = {}
    started = time.time()
    previous = None
    selected = None  # in --python-only, whether the block just before was run
    if python_only:
        print(f"only the blocks that run Python, with {PYTHON}", flush=True)
    try:
        for block in blocks:
            if block.rule is None:
                continue
            kind = block.rule.split()[0]
            counts.setdefault(block.path, {}).setdefault(kind, 0)
            counts[block.path][kind] += 1
            if only and block.where not in only:
                continue
            if python_only:
                runs_python = kind == "sh" and PYTHON_SH.search(block.text) is not None
                selected = (kind == "python" or runs_python or
                            (kind == "output" and bool(selected)))
                if not selected:
                    continue
            t = time.time()
            try:
                problem = runner.run_block(block, previous)
            except subprocess.TimeoutExpired as e:
                problem = f"timed out after {e.timeout} s"
            status = "skip" if kind == "skip" else ("FAIL" if problem else "ok")
            print(f"{status:4} {block.where} [{block.rule}] {time.time() - t:.1f} s", flush=True)
            if kind == "skip":
                print(f"     reason: {block.rule[5:]}")
                if os.environ.get("DISTSAMPLER_SKIP_LOG"):  # printed by scripts/test.sh at its end
                    with open(os.environ["DISTSAMPLER_SKIP_LOG"], "a") as log:
                        log.write(f"docs: {block.where}: {block.rule[5:]}\n")
            if problem:
                errors.append(f"{block.where} [{block.rule}]: {problem}")
            previous = block
    finally:
        shutil.rmtree(runner.scratch, ignore_errors=True)
    print("\nrules:", "; ".join(f"{path}: " + ", ".join(f"{k} {n}" for k, n in sorted(c.items()))
                               for path, c in counts.items()))
    print(f"{len(blocks)} blocks in {len(files)} files, {time.time() - started:.0f} s")
    for error in errors:
        print(f"\nFAIL {error}")
    print("docs: " + ("ok" if not errors else f"{len(errors)} problem(s)"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
