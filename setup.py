"""The setuptools half of pyproject.toml: builds the extension distsampler._core with the
project's own CMake (only the core library and the extension: no tests, tools or examples) and
takes the version from CMakeLists.txt's project(VERSION), the one source of the C++ library's
version. Build files go to build/setuptools/, out of the source tree's way."""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = os.path.join("build", "setuptools")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*distsampler\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    if match is None:
        raise RuntimeError("CMakeLists.txt has no project(distsampler VERSION X.Y.Z)")
    return match.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        off = ["TESTS", "TOOLS", "EXAMPLES", "BENCHMARKS", "LOADER", "MPI"]
        # The interpreter's real path: a venv's python and the one it was made from then share a
        # build folder (and the extension, which depends only on the base interpreter).
        python = os.path.realpath(sys.executable)
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DDISTSAMPLER_BUILD_PYTHON=ON", "-DDISTSAMPLER_INSTALL=OFF",
                     f"-DDISTSAMPLER_PYTHON={python}"]
        configure += [f"-DDISTSAMPLER_BUILD_{name}=OFF" for name in off]
        subprocess.run(configure, check=True)
        build = ["cmake", "--build", build_dir, "--target", "distsampler_python"]
        # build_ext -j N, else CMAKE_BUILD_PARALLEL_LEVEL (read by cmake), else one job a core.
        if self.parallel:
            build += ["--parallel", str(self.parallel)]
        elif "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build += ["--parallel", str(os.cpu_count() or 1)]
        subprocess.run(build, check=True)
        built = glob.glob(os.path.join(build_dir, "python", "distsampler", "_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _core*.so in {build_dir}/python/distsampler: {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


os.makedirs(os.path.join(ROOT, BUILD_BASE), exist_ok=True)
setup(
    version=cmake_version(),
    package_dir={"": "python"},
    packages=["distsampler"],
    ext_modules=[Extension("distsampler._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
