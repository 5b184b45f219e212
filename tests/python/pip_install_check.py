"""ctest python_pip_install: the package as a user installs it.

Makes a fresh venv (--system-site-packages, so Debian's python3-torch is
visible) in a temporary directory, `pip install --no-build-isolation
--no-index <repo>/python` into it, then runs pip_train_loop.py with the
venv's python from the temporary directory, without PYTHONPATH: a 20-step
training loop against a real gnmrd that must import gnmr from the venv.
Then the same package from the repository root (`pip install .`).

The extension is built by setup.py through CMake. To keep the test
affordable it reuses this build tree (GNMR_BUILD_DIR: `cmake --build
<build> --target _gnmr`, a no-op when up to date) instead of a fresh
Release configure; a user's `pip install ./python` makes that fresh build
(README). Exit 77 (skip) without the venv module or pip.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: pip_install_check.py <source dir> <build dir>", file=sys.stderr)
        return 2
    source, build = sys.argv[1], sys.argv[2]
    for mod in ("venv", "ensurepip", "setuptools", "wheel"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: cannot import {mod} ({e}): needs python3-venv, python3-setuptools "
                  "and python3-wheel (scripts/install_deps.sh)", flush=True)
            return 77
    tmp = tempfile.mkdtemp(prefix="gnmr-pip-")
    try:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        py = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["GNMR_BUILD_DIR"] = build
        env["PIP_NO_INPUT"] = "1"
        subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        os.path.join(source, "python")], check=True, env=env, cwd=tmp)
        del env["GNMR_BUILD_DIR"]
        # The loop's helpers (gnmrd_process) come by path, never gnmr.
        with open(os.path.join(source, "CMakeLists.txt")) as f:
            version = re.search(r"project\(\s*gnmr\s+VERSION\s+([0-9.]+)", f.read()).group(1)
        r = subprocess.run([py, os.path.join(HERE, "pip_train_loop.py"), venv, version],
                           env=env, cwd=tmp)
        if r.returncode != 0:
            return r.returncode
        # The same package from the repository root (root setup.py).
        env["GNMR_BUILD_DIR"] = build
        subprocess.run([py, "-m", "pip", "uninstall", "-y", "gnmr"], check=True, env=env)
        subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "."],
                       check=True, env=env, cwd=source)
        check = ("import gnmr, gnmr.torch, sys; "
                 "assert gnmr.__file__.startswith(sys.prefix), gnmr.__file__; "
                 f"assert gnmr.__version__ == {version!r}, gnmr.__version__; print('root install ok')")
        return subprocess.run([py, "-c", check], env=env, cwd=tmp).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
