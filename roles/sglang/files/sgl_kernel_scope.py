# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Scope sgl-kernel's CMake build to the fleet's GPUs, and point its GitHub downloads at a mirror.

Run by the llmops.sglang.sglang role on the builder, in the checkout, before the sgl-kernel build:

    sgl_kernel_scope.py CMakeLists.txt --gencode -gencode=arch=compute_120a,code=sm_120a [--git-mirror URL]

Upstream's sgl-kernel/CMakeLists.txt compiles a -gencode list of its own (SGL_KERNEL_CUDA_FLAGS: sm_90 always,
sm_80/sm_89 below SM90, sm_90a, sm_100a/sm_120a from CUDA 12.8, sm_103a from CUDA 13) and clears torch's arch
flags, so TORCH_CUDA_ARCH_LIST changes nothing. This removes every -gencode line of the SGL_KERNEL_CUDA_FLAGS
set()/list(APPEND) blocks (the main library: common_ops twice, spatial_ops, deep_gemm_cpp) and puts the given ones
in the set() block instead.

The libraries with lists of their own are cut to the fleet where that leaves something to build: FA3
(SGL_FLASH_KERNEL_CUDA_FLAGS, upstream sm_90a, + sm_80/sm_86 below SM90) and FlashMLA (FLASHMLA_CUDA_FLAGS in
cmake/flashmla.cmake next to the file, upstream sm_90a + sm_100a): their -gencode lines for targets the fleet does not
have are removed. A library none of whose targets the fleet has keeps its list (upstream builds it unconditionally:
FA3 is forced ON from CUDA 12.4, flashmla.cmake is always included; its kernels do not run on the fleet's GPUs).

With --git-mirror, every `GIT_REPOSITORY https://github.com/ORG/NAME` becomes `GIT_REPOSITORY URL/ORG/NAME.git`.
Prints a JSON summary: removed and added gencodes, per library what it keeps, repositories. Exit status 2 with a
one-line message when the file does not have the expected shape.
"""

import argparse
import json
import os
import re
import sys

GENCODE_LINE = re.compile(r'^\s*"-gencode=arch=compute_\w+,code=(sm_\w+)"\s*(#.*)?$')
OPEN = re.compile(r"^\s*(set|list)\s*\(\s*(?:APPEND\s+)?(\w+)\b")
REPO = re.compile(r"^(\s*GIT_REPOSITORY\s+)\"?https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?\"?\s*$")
FLAGS = "SGL_KERNEL_CUDA_FLAGS"
# Libraries with a -gencode list of their own: variable -> (library, the file that holds the list, next to CMakeLists)
OWN_LISTS = {
    "SGL_FLASH_KERNEL_CUDA_FLAGS": ("flash_ops (FA3)", "CMakeLists.txt"),
    "FLASHMLA_CUDA_FLAGS": ("flashmla_ops (FlashMLA)", "cmake/flashmla.cmake"),
}


def _blocks(text):
    """Yield (line, variable of the set()/list() block the line is in, or None; True for the block's opening line)."""
    block = None
    for line in text.splitlines(keepends=True):
        m = OPEN.match(line)
        if m and block is None and ")" not in line.split("#", 1)[0]:
            block = m.group(2)
            yield line, block, True
            continue
        if block is not None and line.split("#", 1)[0].strip().startswith(")"):
            yield line, None, False
            block = None
            continue
        yield line, block, False


def _own_lists(text, codes, libraries, where):
    """Cut the per-library lists of `text` to the fleet's codes (sm_120a, ...) where something is left."""
    found = {}
    for line, block, _ in _blocks(text):
        g = GENCODE_LINE.match(line) if block in OWN_LISTS else None
        if g:
            found.setdefault(block, []).append(g.group(1))
    keep = {}
    for var, upstream in found.items():
        kept = [c for c in upstream if c in codes]
        keep[var] = kept if kept else upstream
        libraries[OWN_LISTS[var][0]] = {
            "file": where,
            "upstream": upstream,
            "kept": keep[var],
            "scoped": bool(kept),
            "note": "" if kept else "no fleet GPU runs these kernels; upstream builds the library unconditionally",
        }
    out, removed = [], []
    for line, block, _ in _blocks(text):
        g = GENCODE_LINE.match(line) if block in keep else None
        if g and g.group(1) not in keep[block]:
            removed.append(line.strip().split()[0].strip('"'))
            continue
        out.append(line)
    return "".join(out), removed


def _repository(line, git_mirror):
    """(the line, with its GitHub GIT_REPOSITORY pointed at the mirror when one is given; the URL) or (line, None)."""
    r = REPO.match(line)
    if not r:
        return line, None
    if not git_mirror:
        return line, line.split()[1].strip('"')
    url = f"{git_mirror.rstrip('/')}/{r.group(2)}/{r.group(3)}.git"
    return f"{r.group(1)}{url}\n", url


def scope(text, gencodes, git_mirror="", extra=None):
    """Scope CMakeLists.txt `text` (and `extra`: {relative path: text} of included files, e.g. cmake/flashmla.cmake).

    Returns (new text, summary, {relative path: new text})."""
    codes = {g.rsplit("code=", 1)[1] for g in gencodes}
    out, removed, inserted, repos = [], [], False, []
    for line, block, opening in _blocks(text):
        if opening:
            out.append(line)
            if block == FLAGS and OPEN.match(line).group(1) == "set" and not inserted:
                out.extend(f'    "{g}"\n' for g in gencodes)
                inserted = True
            continue
        if block == FLAGS and GENCODE_LINE.match(line):
            removed.append(line.strip().split()[0].strip('"'))
            continue
        rewritten, url = _repository(line, git_mirror)
        if url:
            repos.append(url)
        out.append(rewritten)
    if not inserted or not removed:
        raise ValueError(
            f"expected a set({FLAGS} ...) block with -gencode lines in sgl-kernel's CMakeLists.txt, found "
            f"{'none' if not inserted else 'no -gencode line'}: this sgl-kernel lays its arch list out differently; "
            "pin another SGLang ref or report it"
        )
    libraries = {
        "common_ops, spatial_ops, deep_gemm_cpp": {
            "file": "CMakeLists.txt",
            "upstream": [r.rsplit("code=", 1)[1] for r in removed],
            "kept": sorted(codes),
            "scoped": True,
            "note": "",
        }
    }
    new, own_removed = _own_lists("".join(out), codes, libraries, "CMakeLists.txt")
    files = {}
    for rel, original in (extra or {}).items():
        lines = [_repository(x, git_mirror) for x in original.splitlines(keepends=True)]
        repos.extend(url for _, url in lines if url)
        files[rel], more = _own_lists("".join(x for x, _ in lines), codes, libraries, rel)
        own_removed += more
    summary = {
        "removed": removed,
        "gencodes": list(gencodes),
        "removed_from_libraries": own_removed,
        "libraries": libraries,
        "repositories": repos,
    }
    return new, summary, files


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cmakelists")
    p.add_argument("--gencode", action="append", required=True)
    p.add_argument("--git-mirror", default="")
    a = p.parse_args(argv)
    try:
        with open(a.cmakelists, encoding="utf-8") as f:
            text = f.read()
        root = os.path.dirname(os.path.abspath(a.cmakelists))
        extra = {}
        for rel in sorted({path for _, path in OWN_LISTS.values() if path != "CMakeLists.txt"}):
            if os.path.isfile(os.path.join(root, rel)):
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    extra[rel] = f.read()
        new, summary, files = scope(text, a.gencode, a.git_mirror, extra)
    except (OSError, ValueError) as e:
        print(f"sgl-kernel scoping failed: {e}", file=sys.stderr)
        return 2
    with open(a.cmakelists, "w", encoding="utf-8") as f:
        f.write(new)
    for rel, body in files.items():
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(body)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
