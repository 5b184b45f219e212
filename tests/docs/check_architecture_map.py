#!/usr/bin/python3
"""Checks that docs/architecture.md's folder table ("The tree") and the tree
agree both ways: every folder it names exists, and every folder of the tree
that it must name is named. Run by ctest (architecture_map); exits 1 listing
each difference.

    tests/docs/check_architecture_map.py [--root DIR]
    tests/docs/check_architecture_map.py --self-test

The folders that must be named: every top folder but hidden ones, and the
subfolders of the product's folders (PRODUCT) to the second level; an
include/ folder belongs to its parent. The tree is what git tracks (a clean
clone), or, outside a git checkout, what is on disk but build folders.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

PRODUCT = {"common", "proto", "controller", "kernels", "client", "relay", "daemon",
           "programs", "python"}
SECTION = "## The tree"
ROW = re.compile(r"^\|\s*`([^`]+)/`\s*\|")


def tracked_files(root: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "build", "__pycache__"))
                       and not d.endswith(".egg-info")]
        files += [os.path.normpath(os.path.join(rel_dir, f)) for f in filenames]
    return files


def required_folders(files: list[str]) -> set[str]:
    folders = set()
    for f in files:
        parts = f.split("/")
        if len(parts) < 2 or parts[0].startswith("."):
            continue
        folders.add(parts[0])
        if parts[0] in PRODUCT and len(parts) > 2 and parts[1] != "include":
            folders.add(parts[0] + "/" + parts[1])
            if parts[0] == "proto" and len(parts) > 3:  # proto/gnmr/v1: the package path
                folders.add("/".join(parts[:3]))
    return folders


def mapped_folders(doc: str) -> list[str]:
    if SECTION not in doc:
        return []
    body = doc.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in body.splitlines() if (m := ROW.match(line))]


def check(root: str) -> list[str]:
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        mapped = mapped_folders(f.read())
    if not mapped:
        return [f'docs/architecture.md: no "{SECTION}" table']
    files = tracked_files(root)
    required = required_folders(files)
    problems = []
    for folder in mapped:
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f"docs/architecture.md names {folder}/, which is not in the tree")
    problems += [f"docs/architecture.md: {folder}/ is missing from \"{SECTION[3:]}\""
                 for folder in sorted(required - set(mapped))]
    dups = sorted({f for f in mapped if mapped.count(f) > 1})
    problems += [f"docs/architecture.md names {f}/ twice" for f in dups]
    return problems


def self_test() -> int:
    with tempfile.TemporaryDirectory() as root:
        def write(rel: str, text: str = "") -> None:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        table = "\n".join(f"| `{d}/` | x |" for d in ("daemon", "daemon/job", "docs", "tests"))
        write("docs/architecture.md", f"# A\n\n{SECTION}\n\n| folder | what |\n|--|--|\n{table}\n\n## Next\n")
        write("daemon/job/job.cc")
        write("daemon/job/include/x.h")
        write("tests/daemon/t.cc")
        if check(root):
            print("self-test: a tree that agrees was reported:", check(root))
            return 1
        write("daemon/store/s.cc")      # a product subfolder the table lacks
        write("bench/b.cc")             # a top folder the table lacks
        os.remove(os.path.join(root, "tests/daemon/t.cc"))
        os.rmdir(os.path.join(root, "tests/daemon"))
        os.rmdir(os.path.join(root, "tests"))  # a named folder that is gone
        found = check(root)
        expected = ["daemon/store/", "bench/", "tests/"]
        if len(found) != 3 or not all(any(e in p for p in found) for e in expected):
            print("self-test: expected one finding for each of", expected, "got", found)
            return 1
    print("self-test: ok (3 planted differences found, a tree that agrees passes)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--self-test", action="store_true",
                    help="plant differences in a temporary tree and check they are found")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} difference(s) between docs/architecture.md and the tree")
        return 1
    print("docs/architecture.md's map and the tree agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
