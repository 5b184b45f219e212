"""ctest entry for the Python tests: exit 77 (skip) when pytest, torch or the
built gnmr module cannot be imported; a run that collects no tests fails.
Arguments go to pytest (test files given run instead of the directory)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))



def main() -> int:
    for mod in ("pytest", "torch", "gnmr._gnmr"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: cannot import {mod} ({e}); the Python tests need pytest, "
                  "PyTorch (scripts/python_env.sh's venv, or Debian's python3-torch) and the "
                  "built gnmr module", flush=True)
            return 77
    if not os.environ.get("GNMRD") or not os.access(os.environ["GNMRD"], os.X_OK):
        print("FAIL: GNMRD must name the gnmrd binary", flush=True)
        return 1

    import pytest

    # Arguments: pytest's; test files named there replace the whole directory.
    args = sys.argv[1:]
    if not any(a.endswith(".py") and not a.startswith("-") for a in args):
        args.append(HERE)
    skips = _ModuleSkips()
    rc = pytest.main(["-q", "-p", "no:cacheprovider"] + args, plugins=[skips])
    if rc == pytest.ExitCode.NO_TESTS_COLLECTED:
        if skips.reasons:  # e.g. torch.compile tests on PyTorch 1.13: a skip, said why
            print("SKIP: every test file skipped itself: " + "; ".join(skips.reasons), flush=True)
            return 77
        print("FAIL: no tests collected", flush=True)
        return 1
    return int(rc)


class _ModuleSkips:
    """Test files that skipped themselves at collection, with the reason."""

    def __init__(self) -> None:
        self.reasons = []

    def pytest_collectreport(self, report) -> None:
        if report.skipped:
            self.reasons.append(str(report.longrepr[-1]) if isinstance(report.longrepr, tuple)
                                else str(report.longrepr))


if __name__ == "__main__":  # spawned DP ranks re-import this module
    sys.exit(main())
