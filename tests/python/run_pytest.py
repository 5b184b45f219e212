"""ctest entry for the Python tests: exit 77 (skip) when pytest, torch or the
built gnmr module cannot be imported; a run that collects no tests fails."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))



def main() -> int:
    for mod in ("pytest", "torch", "gnmr._gnmr"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"SKIP: cannot import {mod} ({e}); the Python tests need pytest, "
                  "Debian's python3-torch and the built gnmr module", flush=True)
            return 77
    if not os.environ.get("GNMRD") or not os.access(os.environ["GNMRD"], os.X_OK):
        print("FAIL: GNMRD must name the gnmrd binary", flush=True)
        return 1

    import pytest

    rc = pytest.main(["-q", "-p", "no:cacheprovider", HERE] + sys.argv[1:])
    if rc == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("FAIL: no tests collected", flush=True)
        return 1
    return int(rc)


if __name__ == "__main__":  # spawned DP ranks re-import this module
    sys.exit(main())
