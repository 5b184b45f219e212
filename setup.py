"""`pip install --no-build-isolation .` from the repository root: the gnmr
Python package of python/ (python/setup.py holds its description)."""
import runpy

runpy.run_path("python/setup.py", run_name="__main__")
