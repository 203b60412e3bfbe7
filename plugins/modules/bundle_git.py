#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_git
short_description: Put the git source of a build into an offline bundle, as one git bundle file at its commit
version_added: "0.3.0"
description:
  - Fetches O(url) into a bare mirror under O(cache_dir) (kept between runs), resolves O(ref) (a tag, a branch or a
    commit) to its commit, and writes C(git/NAME-COMMIT.bundle) into the bundle O(root) with C(git bundle create) -
    the commit's whole history under the ref's name and every tag it contains (setuptools-scm reads the version from
    them), so a host builds from it with C(git clone -b REF FILE).
  - The file is made with one pack thread, so the same commit gives the same bytes, and written under a temporary
    name first. Files of other commits of O(name) in C(git/) are removed.
  - Returns the file's manifest source for M(llmops.sglang.bundle_manifest). A ref the repository does not have is
    refused in one line before the bundle changes.
requirements:
  - git on the host that makes the bundle
options:
  root:
    description: The bundle's directory.
    type: path
    required: true
  name:
    description: The source's name, the start of its file name (V(sglang), V(flash-attention)).
    type: str
    required: true
  url:
    description: The repository's URL.
    type: str
    required: true
  ref:
    description: The tag, branch or commit that is built.
    type: str
    required: true
  cache_dir:
    description: Where the bare mirrors are kept between runs. Created 0700.
    type: path
    default: ~/.cache/llmops-sglang/bundle-git
  timeout:
    description: Seconds one fetch may take.
    type: int
    default: 3600
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    support: full
    details:
      - Resolves the ref with C(git ls-remote) (a commit is taken as given) and reports whether the bundle's file would
        be written or others removed; fetches nothing and writes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Put SGLang's source at v0.5.9 into the bundle
  llmops.sglang.bundle_git:
    root: /srv/bundles/glm5-fleet
    name: sglang
    url: https://github.com/sgl-project/sglang.git
    ref: v0.5.9
"""

RETURN = r"""
commit:
  description: The commit the ref names.
  returned: success
  type: str
path:
  description: The file, relative to O(root).
  returned: success
  type: str
sources:
  description: The file's manifest source, keyed by its path relative to O(root).
  returned: success
  type: dict
removed:
  description: Files of other commits removed from the bundle.
  returned: success
  type: list
  elements: str
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
REF = re.compile(r"\A(?!-)(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}\Z")
URL = re.compile(r"\A(https?://|ssh://|git@|file://|/)[^\s]+\Z")
COMMIT = re.compile(r"\A[0-9a-f]{40}\Z")


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "ref": {"type": "str", "required": True},
            "cache_dir": {"type": "path", "default": "~/.cache/llmops-sglang/bundle-git"},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    root, name, url, ref = p["root"], p["name"], p["url"], p["ref"]
    for value, form, says in ((name, NAME, "a name of letters, digits, '.', '_' or '-'"),
                              (ref, REF, "a tag, branch or commit"), (url, URL, "a git URL")):  # fmt: skip
        if not form.match(value):
            module.fail_json(msg="expected %s; found %r; fix it" % (says, value))
    if not os.path.isdir(root) or os.path.islink(root):
        module.fail_json(msg="expected the bundle's directory at %s; found none; create it first" % root)
    git = module.get_bin_path("git", required=True)
    mirror = os.path.join(p["cache_dir"], name + ".git")
    env = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}

    def run(argv, what):
        rc, out, err = module.run_command(["timeout", str(p["timeout"]), git, *argv], environ_update=env)
        if rc != 0:
            lines = [line for line in (err or out).strip().splitlines() if line.strip()]
            module.fail_json(msg="git could not %s: %s; nothing in the bundle changed"
                                 % (what, lines[-1] if lines else "exit %d" % rc))  # fmt: skip
        return out

    if module.check_mode:
        if COMMIT.match(ref):
            commit = ref
        else:
            refs = {}
            for line in run(["ls-remote", "--", url, "refs/tags/" + ref, "refs/tags/%s^{}" % ref, "refs/heads/" + ref],
                            "read the refs of %s" % url).splitlines():  # fmt: skip
                sha, _, refname = line.partition("\t")
                refs[refname] = sha
            commit = refs.get("refs/tags/%s^{}" % ref) or refs.get("refs/tags/" + ref) or refs.get("refs/heads/" + ref)
            if not commit:
                module.fail_json(
                    msg="expected %s to name a commit of %s; found none; set it to a tag, branch or commit the "
                    "repository has; nothing in the bundle changed" % (ref, url)
                )
        rel = "git/%s-%s.bundle" % (name, commit)
        dest_dir = os.path.join(root, "git")
        others = [
            "git/" + o
            for o in (sorted(os.listdir(dest_dir)) if os.path.isdir(dest_dir) else [])
            if o.startswith(name + "-")
            and o.endswith(".bundle")
            and "git/" + o != rel
            and COMMIT.match(o[len(name) + 1 : -len(".bundle")])
        ]
        source = {"kind": "git", "url": url, "commit": commit, "ref": ref}
        module.exit_json(changed=not os.path.isfile(os.path.join(root, rel)) or bool(others), commit=commit, path=rel,
                         sources={rel: source}, removed=others)  # fmt: skip
    os.makedirs(p["cache_dir"], mode=0o700, exist_ok=True)
    if not os.path.isdir(mirror):
        run(["clone", "--quiet", "--mirror", "--", url, mirror], "copy %s" % url)
    else:
        run(["--git-dir", mirror, "remote", "set-url", "origin", url], "point the mirror at %s" % url)
        run(["--git-dir", mirror, "fetch", "--quiet", "--prune", "--prune-tags", "origin"], "fetch %s" % url)
    rc, out, _ = module.run_command([git, "--git-dir", mirror, "rev-parse", "--verify", "--quiet", ref + "^{commit}"])
    commit = out.strip()
    if rc != 0 or not COMMIT.match(commit):
        module.fail_json(msg="expected %s to name a commit of %s; found none; set it to a tag, branch or commit the "
                             "repository has; nothing in the bundle changed" % (ref, url))  # fmt: skip
    # the ref under its own name (a commit gets a branch named after it), and the tags the commit contains
    rc, out, _ = module.run_command([git, "--git-dir", mirror, "show-ref", "--verify", "--quiet", "refs/tags/" + ref])
    if rc == 0:
        head = "refs/tags/" + ref
    elif module.run_command([git, "--git-dir", mirror, "show-ref", "--verify", "--quiet", "refs/heads/" + ref])[0] == 0:
        head = "refs/heads/" + ref
    else:
        head = "refs/heads/llmops-" + commit
        run(["--git-dir", mirror, "update-ref", head, commit], "name the commit %s" % commit)
    tags = [t for t in run(["--git-dir", mirror, "tag", "--merged", commit], "list the tags of %s" % commit).split()
            if "refs/tags/" + t != head]  # fmt: skip

    rel = "git/%s-%s.bundle" % (name, commit)
    dest_dir = os.path.join(root, "git")
    if os.path.islink(dest_dir):
        module.fail_json(msg="expected %s to be a directory; found a link; remove it" % dest_dir)
    os.makedirs(dest_dir, mode=0o755, exist_ok=True)
    target = os.path.join(root, rel)
    changed = False
    if not os.path.isfile(target):
        fd, tmp = tempfile.mkstemp(prefix=".bundle-git-", suffix=".bundle", dir=dest_dir)
        os.close(fd)
        os.unlink(tmp)  # git bundle create writes the file itself
        try:
            run(["--git-dir", mirror, "-c", "pack.threads=1", "bundle", "create", "--quiet", tmp, head]
                + ["refs/tags/" + t for t in tags], "write the bundle of %s" % commit)  # fmt: skip
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        changed = True
    removed = []
    for other in sorted(os.listdir(dest_dir)):
        if other.startswith(name + "-") and other.endswith(".bundle") and "git/" + other != rel:
            rest = other[len(name) + 1 : -len(".bundle")]
            if COMMIT.match(rest):
                os.unlink(os.path.join(dest_dir, other))
                removed.append("git/" + other)
    source = {"kind": "git", "url": url, "commit": commit, "ref": ref}
    module.exit_json(changed=changed or bool(removed), commit=commit, path=rel, sources={rel: source}, removed=removed)


if __name__ == "__main__":
    main()
