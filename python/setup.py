"""The gnmr package for pip and `python -m build`: metadata, and the
extension gnmr._gnmr built with CMake. Runs from python/ or, through the
root setup.py, from the repository root.

The C++ sources live in the repository around this directory, so the
package builds from a checkout (pip builds local directories in place),
not from an sdist. The version is the root CMakeLists.txt's
project(VERSION): one source, also behind gnmr/version.h and
gnmr.__version__.

Environment:
  GNMR_BUILD_DIR    an existing, configured CMake build tree of this
                    checkout (e.g. `build`): only `_gnmr` is (re)built there
                    and its module copied; what ctest `python_pip_install`
                    uses. Default: a fresh Release build under python/build/.
  GNMR_CMAKE_ARGS   extra arguments for the fresh configure (space separated).
  CMAKE_BUILD_PARALLEL_LEVEL  jobs (default: 2).
  ccache is used when it is on PATH (GNMR_NO_CCACHE=1: not); its own
  CCACHE_* variables pass through, so repeated installs are quick.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def project_version() -> str:
    cmake = ROOT / "CMakeLists.txt"
    if not cmake.is_file():
        sys.exit(f"gnmr: {cmake} not found: build the package from a GNMR checkout "
                 "(pip install ./python), not from an sdist")
    m = re.search(r"project\(\s*gnmr\s+VERSION\s+([0-9][0-9.]*)", cmake.read_text())
    if not m:
        sys.exit(f"gnmr: no project(gnmr VERSION x.y.z) in {cmake}")
    return m.group(1)


class CMakeBuild(build_ext):
    """Runs CMake instead of compiling sources itself."""

    def build_extension(self, ext: Extension) -> None:
        dest = Path(self.get_ext_fullpath(ext.name)).resolve()
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        build_dir = os.environ.get("GNMR_BUILD_DIR")
        if build_dir:
            build = Path(build_dir).resolve()
            if not (build / "CMakeCache.txt").is_file():
                sys.exit(f"gnmr: GNMR_BUILD_DIR={build_dir} is not a configured CMake build tree")
        else:
            build = Path(self.build_temp).resolve() / "cmake"
            self._configure(build)
        subprocess.run(["cmake", "--build", str(build), "--target", "_gnmr", "-j", jobs],
                       check=True)
        built = sorted((build / "python" / "gnmr").glob("_gnmr*.so"))
        if not built:
            sys.exit(f"gnmr: the build made no _gnmr module under {build}/python/gnmr "
                     "(see CMake's message: Python development files or pybind11 missing?)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)

    def _configure(self, build: Path) -> None:
        args = ["cmake", "-S", str(ROOT), "-B", str(build),
                "-DCMAKE_BUILD_TYPE=Release",
                "-DGNMR_BUILD_TESTS=OFF", "-DGNMR_BUILD_BENCH=OFF",
                # The interpreter running pip: a venv's python has the same
                # headers and ABI as the one it was made from.
                f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args.append("-GNinja")
        if shutil.which("ccache") and not os.environ.get("GNMR_NO_CCACHE"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        args += shlex.split(os.environ.get("GNMR_CMAKE_ARGS", ""))
        if (build / "CMakeCache.txt").is_file():  # keep the generator it was made with
            args = [a for a in args if a != "-GNinja"]
        subprocess.run(args, check=True)


# Paths relative to where setup runs: python/ (pip install ./python) or the
# repository root (pip install ., through ../setup.py).
_PACKAGE = os.path.relpath(HERE / "gnmr", Path.cwd())

setup(
    name="gnmr",
    version=project_version(),
    description="GNMR client library and PyTorch adapter (gnmr.torch.Monitor)",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    # torch is optional (gnmr.torch needs it): Debian's python3-torch
    # (1.13, the oldest supported; the ASan suite tests it), visible to a
    # venv made with --system-site-packages, or pip's torch (2.15 is what
    # the main suite tests; docs/integrations.md, "Environment").
    # (Debian's reports 1.13.0a0, a pre-release to pip: hence the a0.)
    extras_require={"torch": ["torch>=1.13.0a0"]},
    packages=["gnmr", "gnmr.integrations"],
    package_dir={"gnmr": _PACKAGE,
                 "gnmr.integrations": os.path.join(_PACKAGE, "integrations")},
    ext_modules=[Extension("gnmr._gnmr", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Build files under python/build/ from either place (the root's build/
    # is the CMake build tree of the README).
    options={"build": {"build_base": str(HERE / "build")}},
    zip_safe=False,
)
