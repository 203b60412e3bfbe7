#!/usr/bin/env python3
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Lint the user-facing documentation (make lint).

User-facing: README.md, docs/*.md (every page there, whoever adds it), roles/*/README.md, CHANGELOG.md,
changelogs/changelog.yaml and changelogs/fragments/*, and the DOCUMENTATION of every plugin. They must carry:

- no internal work-item reference ("issue 24", "items 2 and 3"); an upstream project's PR or issue number written
  with its project and a `#` (SGLang's PR #14311) is a fact users can follow and stays allowed;
- no development remark (TODO, FIXME, XXX);
- no commit hash: a word of 7 to 40 hexadecimal characters with a digit and a letter, outside code spans and code
  blocks (a model commit or a digest shown as a value belongs in backticks);
- no dangling reference: every relative link (and its #anchor, for a Markdown page) resolves, every repository path
  and every `make TARGET` the text names exists, and every role-style variable in backticks is a name the code uses;
- a `version_added` no later than the collection's version in galaxy.yml.

The shipped code's own prose - each plugin file's docstring (module_utils included) and each playbook's header
comment, which an operator reads to learn what a file does - carries no work-item reference either.

Developer pages (CONTRIBUTING.md, docs/development.md, docs/testing.md, sim/ and tests/ READMEs) get the link, path
and make-target checks only. Prints one line per finding, `FILE:LINE: what`, and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

WORK_ITEM = re.compile(r"\b(?:issues?|items?)\s+\d+", re.IGNORECASE)
REMARK = re.compile(r"\b(?:TODO|FIXME|XXX)\b")
HEX_WORD = re.compile(r"(?<![\w./+-])[0-9a-f]{7,40}(?![\w/+-])")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`+([^`]+)`+")
MAKE_TARGET = re.compile(r"\bmake\s+([a-z][a-z0-9-]*)")
PATH_ROOTS = (
    "bin/",
    "defaults/",
    "tasks/",
    "templates/",
    "changelogs/",
    "docs/",
    "inventories/",
    "meta/",
    "molecule/",
    "playbooks/",
    "plugins/",
    "roles/",
    "scripts/",
    "sim/",
    "tests/",
)
ROOT_FILES = {"site.yml", "galaxy.yml", "Makefile", "requirements.txt", "execution-environment.yml", "ansible.cfg"}
VAR_PREFIXES = (
    "llmops",
    "preflight",
    "nvidia_repo",
    "nvidia_driver",
    "cuda_toolkit",
    "python_env",
    "flash_attn",
    "sglang",
    "model",
    "server",
    "router",
    "fleet_firewall",
)
VAR = re.compile(r"^(?:" + "|".join(VAR_PREFIXES) + r")_[a-z0-9_]*[a-z0-9]$")
DEV_PAGES = {"CONTRIBUTING.md", "docs/development.md", "docs/testing.md"}


def user_files(root: Path) -> list[Path]:
    files = [root / "README.md", root / "CHANGELOG.md"]
    files += sorted((root / "docs").glob("*.md"))
    files += sorted((root / "roles").glob("*/README.md"))
    files.append(root / "changelogs" / "changelog.yaml")
    files += sorted((root / "changelogs" / "fragments").glob("*.y*ml"))
    return [f for f in files if f.is_file()]


def dev_files(root: Path) -> list[Path]:
    files = [root / p for p in ("CONTRIBUTING.md", "sim/README.md", "tests/sanity/README.md")]
    return [f for f in files if f.is_file()]


def plugin_docs(root: Path) -> list[tuple[Path, int, str]]:
    """(file, first line, text) of each plugin's DOCUMENTATION (Python) or whole YAML doc file (filters)."""
    out = []
    for f in sorted((root / "plugins").glob("*/*.py")):
        src = f.read_text(encoding="utf-8")
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets):
                if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    out.append((f, node.lineno, node.value.value))
    for f in sorted((root / "plugins").glob("*/*.yml")):
        out.append((f, 1, f.read_text(encoding="utf-8")))
    return out


def shipped_prose(root: Path) -> list[tuple[Path, int, str]]:
    """(file, first line, text) of each plugin file's module docstring and each playbook's leading comment block."""
    out = []
    for f in sorted((root / "plugins").rglob("*.py")):
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        first = tree.body[0] if tree.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            out.append((f, first.lineno, first.value.value))
    for f in sorted((root / "playbooks").glob("*.yml")):
        lines = f.read_text(encoding="utf-8").splitlines()
        head = []
        for line in lines:
            if line.startswith("#") or line.strip() in {"", "---"}:
                head.append(line)
            else:
                break
        out.append((f, 1, "\n".join(head)))
    return out


def make_targets(root: Path) -> set[str]:
    targets = set()
    mk = root / "Makefile"
    if mk.is_file():
        for line in mk.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^([a-z][a-z0-9 -]*):(?!=)", line)
            if m:
                targets.update(m.group(1).split())
            if line.startswith(".PHONY:"):
                targets.update(line.split(":", 1)[1].split())
    return targets


def code_words(root: Path) -> set[str]:
    """Every identifier in the roles, playbooks, plugins and inventories: a documented variable must be one."""
    words: set[str] = set()
    for sub in ("roles", "playbooks", "plugins", "inventories", "bin"):
        for f in (root / sub).rglob("*"):
            if f.is_file() and f.suffix in {".yml", ".yaml", ".py", ".j2", ""} and "README" not in f.name:
                try:
                    words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read_text(encoding="utf-8")))
                except (UnicodeDecodeError, OSError):
                    continue
    return words


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def strip_code(lines: list[str]) -> list[tuple[str, str]]:
    """Per line: (prose without code, the line as is); a fenced block's lines are empty in both."""
    out = []
    fence = False
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append(("", ""))
            continue
        if fence:
            out.append(("", ""))
            continue
        prose = CODE_SPAN.sub(" ", line)
        prose = re.sub(r"\b[CVIOM]\([^)]*\)", " ", prose)  # ansible-doc markup: C(code), V(value), ...
        prose = re.sub(r"\]\([^)]*\)", "]", prose)  # link targets
        out.append((prose, line))
    return out


class Linter:
    def __init__(self, root: Path):
        self.root = root
        self.findings: list[str] = []
        self.targets = make_targets(root)
        self._words: set[str] | None = None

    @property
    def words(self) -> set[str]:
        if self._words is None:
            self._words = code_words(self.root)
        return self._words

    def report(self, f: Path, n: int, what: str) -> None:
        self.findings.append(f"{f.relative_to(self.root)}:{n}: {what}")

    def wording(self, f: Path, first: int, text: str) -> None:
        for i, (prose, _) in enumerate(strip_code(text.splitlines())):
            n = first + i
            for m in WORK_ITEM.finditer(prose):
                self.report(f, n, f"internal work-item reference {m.group(0)!r}: say what changed, not which ticket")
            for m in REMARK.finditer(prose):
                self.report(f, n, f"development remark {m.group(0)!r}: users read this file")
            for m in HEX_WORD.finditer(prose):
                w = m.group(0)
                if re.search(r"[0-9]", w) and re.search(r"[a-f]", w):
                    self.report(f, n, f"commit hash {w!r}: user docs name releases, not commits")

    def references(self, f: Path, text: str) -> None:
        markdown = f.suffix == ".md"
        for n, (_prose, line) in enumerate(strip_code(text.splitlines()), 1):
            if markdown:
                for m in LINK.finditer(CODE_SPAN.sub(" ", line)):
                    self.link(f, n, m.group(1) or m.group(2))
            for span in CODE_SPAN.findall(line):
                self.code_span(f, n, span.strip())

    def link(self, f: Path, n: int, target: str) -> None:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            return
        path, _, anchor = target.partition("#")
        dest = (f.parent / path).resolve() if path else f
        if not dest.exists():
            self.report(f, n, f"link {target!r} does not resolve: no {path}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            self.report(f, n, f"link {target!r}: {dest.name} has no heading with the anchor #{anchor}")

    def code_span(self, f: Path, n: int, span: str) -> None:
        m = MAKE_TARGET.match(span)
        if m:
            self.make_target(f, n, m.group(1))
            return
        word = span.split(maxsplit=1)[0] if span.split() else ""
        if word.startswith(PATH_ROOTS) or word in ROOT_FILES:
            self.repo_path(f, n, word)
        elif VAR.match(span) and span not in self.words:
            self.report(f, n, f"variable {span!r} is named nowhere in roles/, playbooks/, plugins/ or inventories/")

    def repo_path(self, f: Path, n: int, word: str) -> None:
        path = re.split(r"[:#]", word, maxsplit=1)[0].rstrip(".,;)")
        if any(c in path for c in "<>*…{}$") or "..." in path or path.endswith("/."):
            return
        # as written from the repository root, beside the page (a role's README), or in every role (meta/main.yml)
        if not ((self.root / path).exists() or (f.parent / path).exists() or any(self.root.glob(f"roles/*/{path}"))):
            self.report(f, n, f"path {path!r} does not exist in the repository")

    def make_target(self, f: Path, n: int, target: str) -> None:
        if target not in self.targets:
            self.report(f, n, f"'make {target}': the Makefile has no such target")

    def version_added(self, f: Path, first: int, text: str, collection: tuple[int, ...]) -> None:
        for i, line in enumerate(text.splitlines()):
            m = re.match(r"""^\s*version_added:\s*["']?(\d+)\.(\d+)\.(\d+)["']?\s*$""", line)
            if m and tuple(int(x) for x in m.groups()) > collection:
                v = ".".join(m.groups())
                ver = ".".join(map(str, collection))
                self.report(f, first + i, f"version_added {v} is later than the collection's version {ver}")

    def run(self) -> list[str]:
        for f in user_files(self.root):
            text = f.read_text(encoding="utf-8")
            rel = str(f.relative_to(self.root))
            if rel not in DEV_PAGES:
                self.wording(f, 1, text)
            if not rel.startswith(("CHANGELOG", "changelogs/")):  # history names what a release removed
                self.references(f, text)
        for f in dev_files(self.root):
            self.references(f, f.read_text(encoding="utf-8"))
        collection = galaxy_version(self.root)
        for f, first, text in plugin_docs(self.root):
            self.wording(f, first, text)
            if collection:
                self.version_added(f, first, text, collection)
        for f, first, text in shipped_prose(self.root):
            for i, line in enumerate(text.splitlines()):
                for m in WORK_ITEM.finditer(line):
                    self.report(f, first + i, f"internal work-item reference {m.group(0)!r}: say what the file does")
        return self.findings


def galaxy_version(root: Path) -> tuple[int, ...] | None:
    g = root / "galaxy.yml"
    if not g.is_file():
        return None
    m = re.search(r"^version:\s*[\"']?(\d+)\.(\d+)\.(\d+)", g.read_text(encoding="utf-8"), re.MULTILINE)
    return tuple(int(x) for x in m.groups()) if m else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args(argv)
    findings = Linter(args.root.resolve()).run()
    for line in findings:
        print(line)
    if findings:
        print(f"doc-lint: {len(findings)} finding(s) in the user-facing docs", file=sys.stderr)
        return 1
    print("doc-lint: user-facing docs clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
