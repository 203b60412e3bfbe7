# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
# Managed by llmops.sglang (roles/sglang). The `git describe` of an SGLang checkout that setuptools-scm turns into
# its version (SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG git_describe_command), for upstream's tagging:
#
# since v0.5.7 each release is tagged on its own branch (release/vX.Y.Z) and main never contains the tag, so
# `git describe` of main finds v0.5.6.post2 (0.5.6.post2.dev1625, upstream PR #17950). Upstream's
# python/tools/get_version_tag.py answers with the highest tag of the clone instead, which is right for main but
# makes a commit on an old release branch claim the newest release. This answers:
#   1. HEAD has a version tag: that tag (v0.5.9);
#   2. else the nearest tag HEAD contains (git describe), unless a higher tag exists whose merge-base with HEAD
#      descends from that one and is not HEAD itself: then HEAD is on main past that release's branch point, and the
#      answer is that tag
#      with the distance from the merge-base (v0.5.23-1-gabc1234 -> setuptools-scm 0.5.24.dev1+gabc1234);
#   3. no tag in reach: the highest tag with the distance from the merge-base, or nothing (setuptools-scm then falls
#      back to 0.0.0, which the role refuses).
# A commit on release/v0.5.8 after v0.5.8 stays v0.5.8-1-g... (0.5.9.dev1+g...). Prints one line; stdlib only.
#
#   python3 sglang_describe.py [--json]      (in the checkout)
import json
import re
import subprocess
import sys

TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:\.?post(\d+))?$")


def git(*args):
    proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def key(tag):
    m = TAG.match(tag)
    return tuple(int(x or 0) for x in m.groups()) if m else None


def describe():
    exact = [t for t in git("tag", "--points-at", "HEAD").split() if key(t)]
    if exact:
        return max(exact, key=key), "exact"
    tags = sorted((t for t in git("tag", "--list", "v*").split() if key(t)), key=key)
    if not tags:
        return "", "no version tags"
    near = git("describe", "--tags", "--long", "--match", "v*.*.*")
    near_tag = near.rsplit("-", 2)[0] if near else ""
    head = git("rev-parse", "HEAD")
    for tag in reversed(tags):
        if near_tag and key(tag) <= key(near_tag):
            return near, "nearest tag"
        base = git("merge-base", tag, "HEAD")
        if not base or base == head:  # unrelated, or a tag made after HEAD on HEAD's own branch
            continue
        if (
            near_tag
            and subprocess.run(["git", "merge-base", "--is-ancestor", near_tag, base], check=False).returncode != 0
        ):
            continue
        distance = git("rev-list", "--count", base + "..HEAD")
        return "{}-{}-g{}".format(tag, distance, git("rev-parse", "--short", "HEAD")), "branch point of " + tag
    return near, "nearest tag"


def main():
    out, how = describe()
    if "--json" in sys.argv:
        m = re.match(r"^(v[^-]+)(?:-(\d+)-g([0-9a-f]+))?$", out or "")
        print(
            json.dumps(
                {
                    "describe": out,
                    "how": how,
                    "tag": m.group(1) if m else None,
                    "release": m.group(1)[1:] if m else None,
                    "distance": int(m.group(2) or 0) if m else None,
                }
            )
        )
        return 0
    if not out:
        sys.stderr.write(f"sglang_describe: {how}\n")
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
