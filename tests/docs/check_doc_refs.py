#!/usr/bin/python3
"""Checks that every document the tree cites is in the tree. Run by ctest
(docs_refs); exits 1 listing each bad reference as file:line.

    tests/docs/check_doc_refs.py [--root DIR]   # check the tree
    tests/docs/check_doc_refs.py --self-test    # plants bad references, expects them found

The repository stands alone: the design is stated in docs/*.md, so a
comment or a page points there. Flagged, in the tracked source, build and
documentation files:
  - a citation of an outside product specification (the upper-case word
    that names it, not part of an identifier such as AF_UNSPEC), or of a
    path into a checkout's ../shared folder;
  - docs/NAME.md (or, inside docs/, a Markdown link or NAME.md) naming a
    file that does not exist;
  - a section named after a page: `docs/x.md, "Heading"` or `x.md#anchor`
    (any page of the tree, deploy/README.md too). The quoted text must
    start a heading of that page or the bold lead-in of one of its
    paragraphs (`**Text.**`); case, backticks, a section number and line
    breaks do not count, and a quote the line break cuts short is a prefix.
    An anchor must be the GitHub anchor of one of the page's headings;
  - a path into the tree's folders (`kernels/cuda/launch_ring.h`,
    `tests/kernels/x_test.cc`) naming a file that is not there, unless git
    ignores it (a generated results file).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

EXTENSIONS = (".h", ".cc", ".cu", ".cuh", ".c", ".py", ".proto", ".md", ".sh", ".txt",
              ".yaml", ".yml", ".cmake", ".service", ".json", ".toml", ".cfg")

# Built from parts so that this file does not cite what it looks for.
_WORD = "SP" + "EC"
OUTSIDE_SPEC = re.compile(r"(?<![A-Za-z0-9_])" + _WORD + r"(?![A-Za-z0-9_])")
SHARED_DIR = re.compile(r"\.\./shared\b|/work/shared\b")

# A page, then optionally `, "Section"` (the quote may run to the line's end)
# or `#anchor`.
PAGE_REF = re.compile(
    r"(?<![\w/.-])(?P<path>(?:[\w.-]+/)*[\w-]+\.md)\b"
    r"(?:#(?P<anchor>[\w-]+)|(?:,\s*|\s+)\"(?P<quote>[\w`][^\"]*)(?P<closed>\")?)?")
# Files that name made-up paths on purpose: their self-tests plant them.
PLANTS_PATHS = {"scripts/check_layers.py", "tests/docs/check_architecture_map.py"}
PATH_EXTENSIONS = r"(?:h|cc|cu|cuh|c|py|proto|md|sh|txt|cmake|yaml|yml|json)"
MD_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+|\d+\.\s+)?\*\*(?P<text>.+?)\*\*")
COMMENT_LEAD = re.compile(r"^\s*(?://+|#+|\*+|/\*+|\"\"\")?\s*")


def tracked_files(root: str) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: walk it
        names = []
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            names += [os.path.relpath(os.path.join(top, f), root) for f in files]
    return sorted(n for n in names if n.endswith(EXTENSIONS)
                  and os.path.isfile(os.path.join(root, n)))


def source_path_pattern(files: list[str]) -> re.Pattern:
    """Paths that start with one of the tree's top folders."""
    tops = sorted({f.split("/")[0] for f in files if "/" in f})
    return re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, tops)) + r")/[\w./-]*?\."
                      + PATH_EXTENSIONS + r")(?![\w-]|\.\w)")


def ignored_by_git(root: str, paths: list[str]) -> set[str]:
    if not paths:
        return set()
    try:
        out = subprocess.run(["git", "-C", root, "check-ignore", "--no-index", "--stdin"],
                             input="\n".join(paths), capture_output=True, text=True).stdout
    except OSError:
        return set()
    return set(out.split())


def normalize(text: str) -> str:
    """Case, backticks, spacing and a section number ("2. ") do not count."""
    text = re.sub(r"^\d+(?:\.\d+)*\.?\s+", "", text.strip())
    return " ".join(text.replace("`", "").split()).lower()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Pages:
    """The headings and bold lead-ins of the tree's Markdown pages."""

    def __init__(self, root: str):
        self.root = root
        self.cache: dict[str, tuple[list[str], set[str]]] = {}

    def sections(self, rel: str) -> tuple[list[str], set[str]]:
        if rel not in self.cache:
            names, anchors = [], set()
            in_code = False
            with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("```"):
                        in_code = not in_code
                        continue
                    if in_code:
                        continue
                    m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                    if m:
                        names.append(normalize(m.group(1)))
                        anchors.add(slug(m.group(1)))
                        continue
                    m = BOLD_LEAD.match(line)
                    if m:
                        names.append(normalize(m.group("text")))
            self.cache[rel] = (names, anchors)
        return self.cache[rel]


def resolve(root: str, src: str, path: str) -> str | None:
    """The tracked page a reference in `src` means, relative to root."""
    here = os.path.dirname(src)
    candidates = [os.path.normpath(os.path.join(here, path)), os.path.normpath(path)]
    if path.startswith("docs/") or "/" not in path:
        candidates.append(os.path.normpath(path if "/" in path else os.path.join("docs", path)))
    for c in candidates:
        if not c.startswith("..") and os.path.isfile(os.path.join(root, c)):
            return c
    return None


def check_section(pages: Pages, page: str, quote: str | None, closed: bool,
                  anchor: str | None) -> str | None:
    names, anchors = pages.sections(page)
    if anchor is not None:
        return None if anchor in anchors else f"no heading with anchor #{anchor} in {page}"
    want = normalize(quote or "")
    if not want:
        return None
    if any(n.startswith(want) for n in names):
        return None
    # A closed quote may also name a section with its trailing punctuation.
    if closed and any(n.rstrip(".:") == want.rstrip(".:") for n in names):
        return None
    return f"no heading or bold lead-in starting \"{quote}\" in {page}"


def check_file(root: str, rel: str, pages: Pages, tree: set[str], paths: re.Pattern,
               missing: dict[str, list[str]]) -> list[str]:
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    is_md = rel.endswith(".md")
    problems = []
    for i, line in enumerate(lines):
        where = f"{rel}:{i + 1}"
        if _WORD in line and OUTSIDE_SPEC.search(line):
            problems.append(f"{where}: cites an outside specification: {line.strip()}")
        if "shared" in line:
            for m in SHARED_DIR.finditer(line):
                problems.append(f"{where}: points outside the repository ({m.group(0)})")
        if is_md and "](" in line:
            for m in MD_LINK.finditer(line):
                target = m.group("target")
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(rel), path))
                if not os.path.exists(os.path.join(root, full)):
                    problems.append(f"{where}: link to a missing file: {target}")
                elif anchor and full.endswith(".md") and anchor not in pages.sections(full)[1]:
                    problems.append(f"{where}: no heading with anchor #{anchor} in {full}")
        if "/" in line and rel not in PLANTS_PATHS:
            for m in paths.finditer(line):
                p = m.group(1)
                if p not in tree and not os.path.exists(os.path.join(root, p)) \
                        and not (p.startswith("docs/") and p.endswith(".md")):  # a page: below
                    missing.setdefault(p, []).append(where)
        if ".md" not in line:
            continue
        for m in PAGE_REF.finditer(line):
            path = m.group("path")
            if "/" in path and not path.startswith("docs/") and (
                    m.group("quote") is None and m.group("anchor") is None
                    or not os.path.isfile(os.path.join(root, path))):
                continue  # another folder's README, a generated results page
            if "/" not in path and not (is_md and rel.startswith("docs/")) \
                    and m.group("quote") is None and m.group("anchor") is None:
                continue  # a bare file name outside docs/
            page = resolve(root, rel, path)
            if page is None:
                if path.startswith("docs/") or rel.startswith("docs/"):
                    problems.append(f"{where}: no such page: {path}")
                continue
            quote, closed = m.group("quote"), m.group("closed") is not None
            if m.group("quote") is None and m.group("anchor") is None and i + 1 < len(lines) \
                    and not line[m.end():].strip(" ,").strip():
                # `docs/x.md,` then `"Heading"` on the comment's next line.
                nxt = COMMENT_LEAD.sub("", lines[i + 1], count=1)
                q = re.match(r"\"([^\"]*)(\")?", nxt)
                if q:
                    quote, closed = q.group(1), q.group(2) is not None
            bad = check_section(pages, page, quote, closed, m.group("anchor"))
            if bad:
                problems.append(f"{where}: {bad}")
    return list(dict.fromkeys(problems))  # a Markdown link's text may repeat its target


def check_tree(root: str) -> list[str]:
    pages = Pages(root)
    files = tracked_files(root)
    tree = set(files)
    paths = source_path_pattern(files)
    missing: dict[str, list[str]] = {}
    problems = []
    for rel in files:
        if rel != "tests/docs/check_doc_refs.py":  # it plants bad references
            problems += check_file(root, rel, pages, tree, paths, missing)
    generated = ignored_by_git(root, sorted(missing))
    for p, wheres in sorted(missing.items()):
        if p not in generated:
            problems += [f"{where}: no such file in the tree: {p}" for where in wheres]
    return problems


def self_test() -> int:
    """Plants one bad reference of each kind in a scratch tree."""
    cases = {
        "a.cc": "// The rule (" + _WORD + " section 4).\n",
        "b.py": "# see ../shared/notes.md\n",
        "c.h": "// See docs/missing.md.\n",
        "d.cc": "// See docs/page.md, \"No such heading\".\n",
        "e.md": "See [the page](docs/page.md#no-such-anchor).\n",
        "f.h": "// Wrapped (docs/page.md,\n// \"Nor this\").\n",
        "g.cc": "// Tested by src/missing_test.cc.\n",
    }
    good = ("// AF_UNSPEC and FOO_UNSPECIFIED; docs/page.md, \"Real heading\";\n"
            "// docs/page.md, \"Bold lead\"; docs/page.md, \"Real\n"
            "// [x](docs/page.md#real-heading); src/real.h, src/real.h.in\n")
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        os.makedirs(os.path.join(tmp, "src"))
        for name in ("real.h", "real.h.in"):
            open(os.path.join(tmp, "src", name), "w").close()
        with open(os.path.join(tmp, "docs", "page.md"), "w") as f:
            f.write("# Page\n\n## Real heading\n\n**Bold lead.** Text.\n")
        with open(os.path.join(tmp, "good.cc"), "w") as f:
            f.write(good)
        for name, text in cases.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        found = check_tree(tmp)
    failed = 0
    for name in cases:
        if not any(p.startswith(name + ":") for p in found):
            print(f"self-test: the bad reference in {name} was not found")
            failed = 1
    for p in found:
        if p.startswith("good.cc:"):
            print(f"self-test: a good reference was flagged: {p}")
            failed = 1
    print("self-test " + ("failed" if failed else f"passed ({len(found)} planted, all found)"))
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    found = check_tree(os.path.abspath(args.root))
    summary = (f"{len(found)} bad reference(s): cite docs/<page>.md and a section that "
               "exists, and paths that exist" if found
               else "every document and path the tree cites is in the tree")
    print("\n".join(found + [summary]))
    return int(bool(found))


if __name__ == "__main__":
    sys.exit(main())
