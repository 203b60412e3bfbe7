# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Scope sgl-kernel's CMake build to the fleet's GPUs, and point its GitHub downloads at a mirror.

Run by the llmops.sglang.sglang role on the builder, in the checkout, before the sgl-kernel build:

    sgl_kernel_scope.py CMakeLists.txt --gencode -gencode=arch=compute_120a,code=sm_120a [--git-mirror URL]

Upstream's sgl-kernel/CMakeLists.txt compiles a -gencode list of its own (SGL_KERNEL_CUDA_FLAGS: sm_90 always,
sm_80/sm_89 below SM90, sm_90a, sm_100a/sm_120a from CUDA 12.8, sm_103a from CUDA 13) and clears torch's arch
flags, so TORCH_CUDA_ARCH_LIST changes nothing. This removes every -gencode line of the SGL_KERNEL_CUDA_FLAGS
set()/list(APPEND) blocks and puts the given ones in the set() block instead. Other flag lists (FA3's Hopper-only
SGL_FLASH_KERNEL_CUDA_FLAGS) are left alone. With --git-mirror, every `GIT_REPOSITORY https://github.com/ORG/NAME`
becomes `GIT_REPOSITORY URL/ORG/NAME.git`. Prints a JSON summary: removed and added gencodes, repositories.
Exit status 2 with a one-line message when the file does not have the expected shape.
"""

import argparse
import json
import re
import sys

GENCODE_LINE = re.compile(r'^\s*"-gencode=arch=compute_\w+,code=sm_\w+"\s*(#.*)?$')
OPEN = re.compile(r"^\s*(set|list)\s*\(\s*(?:APPEND\s+)?(\w+)\b")
REPO = re.compile(r"^(\s*GIT_REPOSITORY\s+)\"?https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?\"?\s*$")
FLAGS = "SGL_KERNEL_CUDA_FLAGS"


def scope(text, gencodes, git_mirror=""):
    lines = text.splitlines(keepends=True)
    out, removed, block, inserted, repos = [], [], None, False, []
    for line in lines:
        m = OPEN.match(line)
        if m and block is None and ")" not in line.split("#", 1)[0]:
            block = m.group(2)
            out.append(line)
            if block == FLAGS and m.group(1) == "set" and not inserted:
                indent = "    "
                out.extend(f'{indent}"{g}"\n' for g in gencodes)
                inserted = True
            continue
        if block is not None and line.split("#", 1)[0].strip().startswith(")"):
            block = None
        elif block == FLAGS and GENCODE_LINE.match(line):
            removed.append(line.strip().split()[0].strip('"'))
            continue
        r = REPO.match(line)
        if r:
            url = f"{git_mirror.rstrip('/')}/{r.group(2)}/{r.group(3)}.git" if git_mirror else line.split()[1]
            repos.append(url.strip('"'))
            if git_mirror:
                out.append(f"{r.group(1)}{url}\n")
                continue
        out.append(line)
    if not inserted or not removed:
        raise ValueError(
            f"expected a set({FLAGS} ...) block with -gencode lines in sgl-kernel's CMakeLists.txt, found "
            f"{'none' if not inserted else 'no -gencode line'}: this sgl-kernel lays its arch list out differently; "
            "pin another SGLang ref or report it"
        )
    return "".join(out), {"removed": removed, "gencodes": list(gencodes), "repositories": repos}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cmakelists")
    p.add_argument("--gencode", action="append", required=True)
    p.add_argument("--git-mirror", default="")
    a = p.parse_args(argv)
    try:
        with open(a.cmakelists, encoding="utf-8") as f:
            text = f.read()
        new, summary = scope(text, a.gencode, a.git_mirror)
    except (OSError, ValueError) as e:
        print(f"sgl-kernel scoping failed: {e}", file=sys.stderr)
        return 2
    with open(a.cmakelists, "w", encoding="utf-8") as f:
        f.write(new)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
