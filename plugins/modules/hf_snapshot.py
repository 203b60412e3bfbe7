#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Download a Hugging Face hub snapshot into a directory, verified, resumable across runs
version_added: "0.1.0"
description:
  - Resolves O(revision) to a commit, lists the commit's files from the hub API, checks the free disk space against
    what is still missing, downloads each file with plain HTTP (resuming a partial file left by an earlier, interrupted
    call with a C(Range) request), verifies every file's size and digest against the listing (sha256 = LFS oid for LFS
    files, git blob sha1 otherwise), and only then writes a completion marker C(.llmops-snapshot.json) with the commit.
  - When the marker says the snapshot for this repository, revision (or its commit) and patterns is complete, no
    network request is made - the marker and the file sizes are enough (O(verify=sha256) re-hashes every file).
  - Needs only the Python standard library on the host (no huggingface_hub).
  - Partial files live in C(DEST/.llmops-partial/) with the digest they belong to; they survive failed calls, so the
    next call continues where the last one stopped (huggingface_hub 2.x resumes only within one call).
  - With O(wait_budget) one call downloads for at most that long and returns RV(done=false) with the progress, so a
    task with C(until)/C(retries) shows progress between attempts.
author:
  - llmops.sglang developers (@llmops)
options:
  repo_id:
    description: Repository id, for example C(zai-org/GLM-5).
    type: str
    required: true
  revision:
    description: Branch, tag or 40-hex commit.
    type: str
    default: main
  repo_type:
    description: Kind of repository.
    type: str
    choices: [model, dataset]
    default: model
  endpoint:
    description: Hub base URL (a mirror or an air-gapped hub works the same way).
    type: str
    default: https://huggingface.co
  token:
    description: Access token for gated or private repositories. Prefer O(token_file), which keeps it out of task args.
    type: str
  token_file:
    description:
      - A systemd EnvironmentFile (C(KEY=VALUE) lines) to read the token from, variable O(token_env_name). A missing
        file or variable means no token.
    type: path
  token_env_name:
    description: Variable holding the token in O(token_file).
    type: str
    default: HF_TOKEN
  dest:
    description: Directory that receives the files (created).
    type: path
    required: true
  allow_patterns:
    description: Only files matching one of these globs (C(fnmatch); a pattern ending in C(/) means the folder).
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Skip files matching one of these globs.
    type: list
    elements: str
    default: []
  verify:
    description:
      - How an already complete snapshot is checked without the network. V(sizes) compares sizes with the marker,
        V(sha256) re-hashes every file (sha256 or git sha1 as listed). Downloads are always hashed.
    type: str
    choices: [sizes, sha256]
    default: sizes
  offline:
    description: Never contact the hub; fail unless a complete, verified snapshot is already in O(dest).
    type: bool
    default: false
  refresh:
    description:
      - Ask the hub which commit O(revision) points to even when a complete snapshot of it is present (a branch such
        as C(main) may have moved). Without it a complete snapshot is used as is.
    type: bool
    default: false
  wait_budget:
    description: Seconds this call may download before returning RV(done=false) (V(0) downloads everything).
    type: float
    default: 0
  retries:
    description: Reconnections per file within one call after a dropped transfer (each resumes with C(Range)).
    type: int
    default: 3
  timeout:
    description: Socket timeout in seconds for each request.
    type: int
    default: 60
  reserve_gib:
    description: Free space (GiB) that must remain on the file system after the download.
    type: float
    default: 1.0
  validate_certs:
    description: Validate TLS certificates.
    type: bool
    default: true
notes:
  - Xet - the module never asks for the Xet protocol and ignores C(X-Xet-Hash); it does a plain GET of C(/resolve),
    which the hub serves (directly or by redirecting to a storage bridge) for Xet-stored files too. The
    C(Authorization) header is sent only to the endpoint's host, never to the host a redirect points to.
  - Check mode resolves and lists (read-only requests) and reports what would be downloaded.
attributes:
  check_mode:
    description:
      - Can run in check_mode. It resolves the revision and lists the files (read-only requests), reports what would
        be downloaded or removed, and writes nothing.
    support: full
"""

EXAMPLES = r"""
- name: Download GLM-5 at a pinned commit, showing progress every 30 s
  llmops.sglang.hf_snapshot:
    repo_id: zai-org/GLM-5
    revision: 0123456789abcdef0123456789abcdef01234567
    dest: /opt/models/GLM-5
    token_file: /etc/sglang/sglang.env
    ignore_patterns: ["*.pth", "original/"]
    wait_budget: 30
  register: model_dl
  until: model_dl.done
  retries: 2000
  delay: 0
"""

RETURN = r"""
done:
  description: True when the snapshot is complete and verified (or the call failed); false when O(wait_budget) ran out.
  returned: always
  type: bool
commit:
  description: The commit the snapshot belongs to.
  returned: always
  type: str
source:
  description: V(marker) when the complete snapshot was used without the network, V(hub) otherwise.
  returned: always
  type: str
files:
  description: Number of files in the snapshot.
  returned: always
  type: int
bytes_total:
  description: Bytes of all files of the snapshot.
  returned: always
  type: int
bytes_done:
  description: Bytes present and verified (or written so far) for this snapshot.
  returned: always
  type: int
downloaded:
  description: Files written by this call.
  returned: always
  type: list
  elements: str
resumed:
  description: Files continued from a partial download, with the byte offset.
  returned: always
  type: list
  elements: dict
needed_bytes:
  description: Bytes that were still missing when this call started (from the listing).
  returned: when the hub was contacted
  type: int
free_bytes:
  description: Free bytes on the destination file system when this call started.
  returned: when the hub was contacted
  type: int
marker:
  description: Path of the completion marker.
  returned: always
  type: str
progress:
  description: One line, e.g. C(3/14 files, 1.20 GiB of 61.05 GiB).
  returned: always
  type: str
"""

import http.client
import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import (
    CHUNK,
    MARKER,
    PARTIAL_DIR,
    HubClient,
    HubError,
    check_local,
    expected_digest,
    filter_paths,
    free_bytes,
    hash_file,
    human,
    load_marker,
    marker_matches,
    new_hasher,
    read_env_value,
    safe_relpath,
)

DIR_MODE = 0o755
FILE_MODE = 0o644


class _Budget(Exception):
    pass


def _progress(n_done, n_total, b_done, b_total):
    return "%d/%d files, %s of %s" % (n_done, n_total, human(b_done), human(b_total))


def _makedirs(path):
    if not os.path.isdir(path):
        os.makedirs(path, mode=DIR_MODE, exist_ok=True)


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)


def download_file(client, url, part, meta_path, want, *, retries, deadline, on_bytes):
    """Download into ``part`` (continuing it when its meta matches ``want``); returns (resumed_from or None).
    Raises _Budget when the deadline passes (the partial file is kept), HubError when out of retries."""
    kind, digest, size = want["kind"], want["digest"], want["size"]
    meta = None
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = None
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have and (meta != want or have > size):
        os.unlink(part)
        have = 0
    _makedirs(os.path.dirname(part))
    _write_json(meta_path, want)
    hasher = hash_file(part, kind, size) if have else new_hasher(kind, size)
    resumed_from = have or None
    attempt = 0
    while have < size:
        headers = {"Range": "bytes=%d-" % have} if have else None
        try:
            resp = client.open(url, headers)
        except HubError as exc:
            if exc.status == 416 and have == size:
                break
            if exc.status is not None and exc.status < 500:
                raise
            attempt += 1
            if attempt > retries:
                raise
            time.sleep(min(2 * attempt, 10))
            continue
        with resp:
            status = resp.status
            if have and status == 200:
                # the server ignored the Range: start over
                have = 0
                hasher = new_hasher(kind, size)
                mode = "wb"
            elif have and status == 206:
                cr = resp.headers.get("Content-Range", "")
                if not cr.startswith("bytes %d-" % have):
                    raise HubError("%s answered Content-Range %r to Range bytes=%d-" % (url, cr, have))
                mode = "ab"
            else:
                mode = "wb"
            try:
                with open(part, mode) as f:
                    while True:
                        b = resp.read(CHUNK)
                        if not b:
                            break
                        f.write(b)
                        hasher.update(b)
                        have += len(b)
                        on_bytes(len(b))
                        if have > size:
                            raise HubError("%s sent more than the listed %d bytes" % (url, size))
                        if deadline is not None and time.time() >= deadline and have < size:
                            f.flush()
                            raise _Budget()
            except (OSError, ValueError, http.client.HTTPException) as exc:  # dropped connection, truncated body
                attempt += 1
                if attempt > retries:
                    raise HubError(
                        "the transfer of %s stopped at byte %d of %d (%s); %d bytes are kept in %s and the next "
                        "run resumes from there" % (url, have, size, exc, have, part)
                    ) from None
                time.sleep(min(2 * attempt, 10))
                continue
        if have < size:
            attempt += 1
            if attempt > retries:
                raise HubError(
                    "the transfer of %s ended at byte %d of %d; the next run resumes from there" % (url, have, size)
                )
    got = hasher.hexdigest()
    if got != digest:
        os.unlink(part)
        raise HubError(
            "%s: %s is %s, the listing says %s; the partial file was removed, the next run downloads it again"
            % (url, kind, got, digest)
        )
    return resumed_from


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            repo_type=dict(type="str", default="model", choices=["model", "dataset"]),
            endpoint=dict(type="str", default="https://huggingface.co"),
            token=dict(type="str", no_log=True),
            token_file=dict(type="path"),
            token_env_name=dict(type="str", default="HF_TOKEN"),
            dest=dict(type="path", required=True),
            allow_patterns=dict(type="list", elements="str", default=[]),
            ignore_patterns=dict(type="list", elements="str", default=[]),
            verify=dict(type="str", default="sizes", choices=["sizes", "sha256"]),
            offline=dict(type="bool", default=False),
            refresh=dict(type="bool", default=False),
            wait_budget=dict(type="float", default=0),
            retries=dict(type="int", default=3),
            timeout=dict(type="int", default=60),
            reserve_gib=dict(type="float", default=1.0),
            validate_certs=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("token", "token_file")],
        supports_check_mode=True,
    )
    p = module.params
    if p["retries"] < 0 or p["timeout"] <= 0:
        module.fail_json(msg="expected retries >= 0 and timeout > 0; found %s and %s" % (p["retries"], p["timeout"]))
    dest = p["dest"]
    marker_path = os.path.join(dest, MARKER)
    allow, ignore = p["allow_patterns"], p["ignore_patterns"]
    result = dict(changed=False, done=True, marker=marker_path, downloaded=[], resumed=[], repo_id=p["repo_id"])

    # ---- a complete snapshot: no network -------------------------------------------------------------------
    marker = load_marker(dest)
    complete = marker_matches(marker, p["repo_id"], p["repo_type"], p["revision"], allow=allow, ignore=ignore)
    if complete and not p["refresh"]:
        problems = check_local(dest, marker, rehash=p["verify"] == "sha256")
        if not problems:
            total = sum(f["size"] for f in marker["files"].values())
            result.update(
                commit=marker["commit"],
                revision=p["revision"],
                source="marker",
                files=len(marker["files"]),
                bytes_total=total,
                bytes_done=total,
                verified=p["verify"],
                progress=_progress(len(marker["files"]), len(marker["files"]), total, total),
                msg="%s@%s (%s) is complete in %s (%s checked, no network)"
                % (p["repo_id"], p["revision"], marker["commit"][:12], dest, p["verify"]),
            )
            module.exit_json(**result)
        if p["offline"]:
            module.fail_json(
                msg="the snapshot in %s is damaged: %s. Run without offline to repair it."
                % (dest, "; ".join(problems[:5])),
                problems=problems,
                **result,
            )
    elif p["offline"]:
        module.fail_json(
            msg="offline: expected a complete snapshot of %s@%s in %s (marker %s); found %s"
            % (
                p["repo_id"],
                p["revision"],
                dest,
                marker_path,
                "none" if marker is None else "one for %s@%s" % (marker.get("repo_id"), marker.get("revision")),
            ),
            **result,
        )

    # ---- the hub ---------------------------------------------------------------------------------------------
    token = p["token"]
    if p["token_file"]:
        token = read_env_value(p["token_file"], p["token_env_name"])
    client = HubClient(p["endpoint"], token, p["timeout"], p["validate_certs"], p["repo_type"])
    try:
        commit = client.resolve(p["repo_id"], p["revision"])
        entries = client.tree(p["repo_id"], commit)
    except HubError as exc:
        hint = ""
        if exc.status == 401 and exc.code == "GatedRepo":
            hint = " The repository is gated: accept its terms on the hub and set a token."
        elif exc.status == 401:
            hint = " Check the repository id and the token."
        module.fail_json(msg="cannot list %s@%s: %s.%s" % (p["repo_id"], p["revision"], exc, hint), **result)
    by_path = {}
    for e in entries:
        try:
            by_path[safe_relpath(e["path"])] = e
        except HubError as exc:
            module.fail_json(msg=str(exc), **result)
    wanted = filter_paths(sorted(by_path), allow, ignore)
    if not wanted:
        module.fail_json(
            msg="no file of %s@%s matches allow_patterns %s / ignore_patterns %s"
            % (p["repo_id"], commit, allow, ignore),
            **result,
        )
    files = {}
    for rel in wanted:
        kind, digest = expected_digest(by_path[rel])
        files[rel] = {"size": int(by_path[rel]["size"]), "kind": kind, "digest": digest}
    total = sum(f["size"] for f in files.values())
    result.update(commit=commit, revision=p["revision"], source="hub", files=len(files), bytes_total=total)

    # Which files are already right? Files recorded (verified) in the marker with the same digest are trusted by size;
    # other present files are hashed once.
    known = (marker or {}).get("files") or {}
    todo, done_bytes = [], 0
    for rel, want in files.items():
        path = os.path.join(dest, rel)
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size == want["size"]:
            k = known.get(rel)
            if (k and k.get("digest") == want["digest"] and p["verify"] == "sizes") or (
                hash_file(path, want["kind"], size).hexdigest() == want["digest"]
            ):
                done_bytes += size
                continue
        todo.append(rel)
    partial_root = os.path.join(dest, PARTIAL_DIR)
    partial_bytes = 0
    for rel in todo:
        part = os.path.join(partial_root, rel + ".incomplete")
        if os.path.isfile(part):
            partial_bytes += min(os.path.getsize(part), files[rel]["size"])
    needed = sum(files[r]["size"] for r in todo) - partial_bytes
    free = free_bytes(dest)
    result.update(needed_bytes=needed, free_bytes=free)
    stale = sorted(r for r in known if r not in files and os.path.exists(os.path.join(dest, r)))
    up_to_date = not todo and not stale and complete and marker.get("commit") == commit
    if up_to_date:
        result.update(
            bytes_done=total,
            progress=_progress(len(files), len(files), total, total),
            msg="%s@%s (%s) is complete in %s" % (p["repo_id"], p["revision"], commit[:12], dest),
        )
        module.exit_json(**result)
    reserve = int(p["reserve_gib"] * (1 << 30))
    if needed + reserve > free:
        module.fail_json(
            msg="not enough disk space in %s for %s@%s: %d files still need %s (+ %s reserve), %s is free"
            % (dest, p["repo_id"], commit[:12], len(todo), human(needed), human(reserve), human(free)),
            **result,
        )
    if module.check_mode:
        result.update(
            changed=True,
            bytes_done=done_bytes,
            would_download=todo,
            would_remove=stale,
            progress=_progress(len(files) - len(todo), len(files), done_bytes, total),
            msg="would download %d files (%s) of %s@%s into %s"
            % (len(todo), human(needed), p["repo_id"], commit[:12], dest),
        )
        module.exit_json(**result)

    # ---- download ----------------------------------------------------------------------------------------------
    _makedirs(dest)
    if os.path.exists(marker_path):
        os.unlink(marker_path)  # the directory is about to change: it is not a complete snapshot until re-marked
        result["changed"] = True
    for rel in stale:
        os.unlink(os.path.join(dest, rel))
        result["changed"] = True
    deadline = time.time() + p["wait_budget"] if p["wait_budget"] and p["wait_budget"] > 0 else None
    counter = {"bytes": done_bytes + partial_bytes}

    def on_bytes(n):
        counter["bytes"] += n

    n_done = len(files) - len(todo)
    for rel in todo:
        want = files[rel]
        part = os.path.join(partial_root, rel + ".incomplete")
        before = os.path.getsize(part) if os.path.isfile(part) else 0
        try:
            resumed_from = download_file(
                client,
                client.file_url(p["repo_id"], commit, rel),
                part,
                part + ".json",
                want,
                retries=p["retries"],
                deadline=deadline,
                on_bytes=on_bytes,
            )
        except _Budget:
            result.update(
                changed=True,
                done=False,
                bytes_done=counter["bytes"],
                progress=_progress(n_done, len(files), counter["bytes"], total),
                msg="downloading %s@%s: %s"
                % (p["repo_id"], commit[:12], _progress(n_done, len(files), counter["bytes"], total)),
            )
            module.exit_json(**result)
        except HubError as exc:
            result.update(
                changed=result["changed"] or counter["bytes"] > done_bytes + partial_bytes,
                bytes_done=counter["bytes"],
                progress=_progress(n_done, len(files), counter["bytes"], total),
            )
            module.fail_json(msg="download of %s@%s failed: %s" % (p["repo_id"], commit[:12], exc), **result)
        if resumed_from:
            result["resumed"].append({"path": rel, "from": resumed_from})
        if before and not resumed_from:
            counter["bytes"] -= before  # the partial was discarded
        final = os.path.join(dest, rel)
        _makedirs(os.path.dirname(final))
        os.chmod(part, FILE_MODE)
        os.replace(part, final)
        os.unlink(part + ".json")
        result["downloaded"].append(rel)
        result["changed"] = True
        n_done += 1
    shutil.rmtree(partial_root, ignore_errors=True)
    _write_json(
        marker_path,
        {
            "repo_id": p["repo_id"],
            "repo_type": p["repo_type"],
            "revision": p["revision"],
            "commit": commit,
            "allow_patterns": allow,
            "ignore_patterns": ignore,
            "files": files,
            "verified": "size and %s of every file against the hub listing"
            % "/".join(sorted({f["kind"] for f in files.values()})),
        },
    )
    result.update(
        changed=True,
        bytes_done=total,
        progress=_progress(len(files), len(files), total, total),
        msg="%s@%s (%s): %d files downloaded and verified into %s"
        % (p["repo_id"], p["revision"], commit[:12], len(result["downloaded"]), dest),
    )
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
