#!/usr/bin/python3
"""Checks that each of gnmrd's defaults is written once. Run by ctest
(daemon_defaults_once); exits 1 listing each default written twice.

    tests/daemon_config/check_defaults_once.py [--root DIR]   # check the tree
    tests/daemon_config/check_defaults_once.py --self-test    # plants copies, expects them found

A default lives in DaemonConfig (daemon/daemon_config/daemon_config.h) or,
where gnmrd hands the key to a module, in that module's Options; --help,
the startup log, the docs table and deploy/gnmrd.example.yaml are generated
from it or checked against it (tests/daemon_config/daemon_config_test.cc).
Flagged:
  - a string literal of the key table or the command line
    (config_keys.cc, command_line.cc) that states a default ("(default
    2000)", "default 7d"): --help appends the default from DaemonConfig{};
  - a DaemonConfig member that gnmrd's main copies into a module's Options
    field (`o.registry.max_jobs = c.max_jobs;`) but is initialized with a
    value of its own instead of from that field
    (`uint32_t max_jobs = RegistryOptions{}.max_jobs;`), unless OWN_DEFAULT
    says why gnmrd's default differs from the module's.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

CONFIG_DIR = "daemon/daemon_config"
HELP_SOURCES = ("config_keys.cc", "command_line.cc")
MAIN = "programs/gnmrd/main.cc"

# Members that gnmrd defaults differently from the module they configure.
OWN_DEFAULT = {
    "job_idle_expiry_ms": "RegistryOptions::idle_expiry is 0 (never) for embedders and tests; "
                          "gnmrd removes a job idle for 7d",
}

# Fewer mirrors than this means main.cc's wiring was not understood.
MIN_MIRRORS = 20

STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
# "default" and a value after it; "(default " (the generator's) and
# "defaults" are fine.
STATED_DEFAULT = re.compile(r"\bdefault\b[ :]+[^\s|]", re.IGNORECASE)
# `field = c.member;`, through a cast or a duration at most: a value
# copied into an Options field (not an object built from it, as
# std::make_shared<MemoryBudget>(c.memory_budget) is).
WIRING = re.compile(
    r"^\s*([A-Za-z_][\w.]*)\s*=\s*((?:static_cast<[\w:]+>|std::chrono::\w+)?\(?"
    r"\s*(?:c|config)\.(\w+)\s*\)?)\s*;", re.M)


def strip_comments(text: str) -> str:
    """C++ text with // and /* */ comments blanked, string literals kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "\"'":  # a string or character literal, kept whole
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            end = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def stated_defaults(path: str, rel: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        code = strip_comments(f.read())
    problems = []
    for m in STRING.finditer(code):
        if STATED_DEFAULT.search(m.group(1)):
            line = code.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{line}: help states a default by hand: \"{m.group(1)}\" "
                            "(--help appends DaemonConfig{}'s: HelpWithDefault)")
    return problems


def daemon_config_members(header: str) -> dict[str, tuple[str, int]]:
    """DaemonConfig's members: name -> (initializer, line); "" when none."""
    code = strip_comments(header)
    start = code.find("struct DaemonConfig {")
    if start < 0:
        return {}
    end = code.find("\n};", start)
    body_start = code.index("{", start) + 1
    members = {}
    offset = body_start
    for stmt in code[body_start:end].split(";"):
        text = " ".join(stmt.split())
        line = code.count("\n", 0, offset + len(stmt) - len(stmt.lstrip())) + 1
        offset += len(stmt) + 1
        decl, _, init = text.partition("=")
        names = re.findall(r"(\w+)$", decl.strip())
        if not names or "(" in decl:
            continue  # a function, or the end of the body
        members[names[0]] = (init.strip(), line)
    return members


def check(root: str) -> list[str]:
    problems = []
    for name in HELP_SOURCES:
        rel = f"{CONFIG_DIR}/{name}"
        problems += stated_defaults(os.path.join(root, rel), rel)

    header_rel = f"{CONFIG_DIR}/daemon_config.h"
    with open(os.path.join(root, header_rel), encoding="utf-8") as f:
        members = daemon_config_members(f.read())
    if not os.path.exists(os.path.join(root, MAIN)):
        return problems + [f"gnmrd's main.cc not found at {MAIN}"]
    with open(os.path.join(root, MAIN), encoding="utf-8") as f:
        main = strip_comments(f.read())

    mirrors: dict[str, list[str]] = {}
    for m in WIRING.finditer(main):
        lhs, member = m.group(1), m.group(3)
        if member in members:
            mirrors.setdefault(member, []).append(lhs)
    if len(mirrors) < MIN_MIRRORS:
        problems.append(f"{MAIN}: found {len(mirrors)} DaemonConfig members copied into "
                        f"Options, expected at least {MIN_MIRRORS}: has the wiring changed form?")
    for member, targets in sorted(mirrors.items()):
        init, line = members[member]
        if not init or member in OWN_DEFAULT:
            continue
        fields = {t.rsplit(".", 1)[-1] for t in targets}
        if any(re.search(r"\{\}\s*(?:\.\w+)*\.\s*" + re.escape(fld) + r"\b", init)
               for fld in fields):
            continue
        problems.append(f"{header_rel}:{line}: DaemonConfig::{member} = {init} repeats the default "
                        f"of {' and '.join(sorted(set(targets)))} ({MAIN}): initialize it "
                        "from that Options field, or say in OWN_DEFAULT why it differs")
    return problems


def self_test() -> int:
    with tempfile.TemporaryDirectory() as root:
        def write(rel: str, text: str) -> None:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)

        wiring = "".join(f"  o.f{i} = c.m{i};\n" for i in range(MIN_MIRRORS))
        members = "".join(f"  int m{i} = Options{{}}.f{i};\n" for i in range(MIN_MIRRORS))
        write(f"{CONFIG_DIR}/config_keys.cc",
              '{"a", "a", "N", "close a step // not a comment\\n(default 2000)"},\n'
              '// (default 50) in a comment is fine\n'
              '{"b", "b", "N", "defaults, and a " "(default "},\n')
        write(f"{CONFIG_DIR}/command_line.cc", 'p.Add("x", "unix:/p; default 7d");\n')
        write(f"{CONFIG_DIR}/daemon_config.h",
              "struct DaemonConfig {\n" + members +
              "  uint32_t max_jobs = 1024;  // planted\n"
              "  uint64_t job_idle_expiry_ms = 7;\n"
              "  uint32_t max_units =\n      JobOptions{}.max_units;\n"
              "  std::string trace_dir;\n"
              "  bool Describe() const;\n};\n")
        write("programs/gnmrd/main.cc",
              "void F(const DaemonConfig& c, const DaemonConfig& config) {\n" + wiring +
              "  o.registry.max_jobs = c.max_jobs;\n"
              "  o.registry.idle_expiry = std::chrono::milliseconds(c.job_idle_expiry_ms);\n"
              "  o.job.max_units = static_cast<size_t>(c.max_units);\n"
              "  t.dir = config.trace_dir;\n}\n")
        found = check(root)
        expected = [
            f"{CONFIG_DIR}/config_keys.cc:1:",
            f"{CONFIG_DIR}/command_line.cc:1:",
            f"{CONFIG_DIR}/daemon_config.h:{MIN_MIRRORS + 2}: DaemonConfig::max_jobs = 1024",
        ]
        ok = len(found) == len(expected) and all(
            any(p.startswith(e) for p in found) for e in expected)
        if not ok:
            print("self-test failed: expected problems starting with:\n  " +
                  "\n  ".join(expected) + "\nfound:\n  " + "\n  ".join(found))
            return 1
        print(f"self-test: the {len(found)} planted copies were found")
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} default(s) written twice")
        return 1
    print("every gnmrd default is written once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
