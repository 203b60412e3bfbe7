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
    what is still missing, downloads with O(connections) parallel keep-alive connections (several files at once, files
    larger than O(segment_mib) in byte-range segments), verifies every file's size and digest against the listing
    (sha256 = LFS oid for LFS files, git blob sha1 otherwise), and only then writes a completion marker
    C(.llmops-snapshot.json) with the commit.
  - Each segment is resumable across calls - its progress is saved next to the partial file and never claims more
    than is on disk; a finished segment is never fetched again. A file whose digest does not match is never moved into
    place - its segments are checked against their own sha256 and only changed ones are fetched again.
  - Retries C(429) and C(5xx) answers and dropped connections with exponential backoff, honouring C(Retry-After).
  - With O(peer_url), file bytes come from a peer host that already holds the verified snapshot (once per fleet),
    while the commit and every file's digest still come from the hub.
  - When the marker says the snapshot for this repository, revision (or its commit) and patterns is complete, no
    network request is made - the marker and the file sizes are enough (O(verify=sha256) re-hashes every file).
  - With O(by_commit), O(dest) holds one directory per commit (C(DEST/COMMIT)), so a new revision downloads beside the
    ones on disk (the model role's C(llmops_model_revisions_dir)); the marker of the newest complete snapshot for a
    branch or tag still answers without the network.
  - Needs only the Python standard library on the host (no huggingface_hub).
  - Partial files live in C(DEST/.llmops-partial/) with the digest they belong to; they survive failed calls, so the
    next call continues where the last one stopped (huggingface_hub 2.x resumes only within one call).
  - With O(wait_budget) one call downloads for at most that long and returns RV(done=false) with the progress, so a
    task with C(until)/C(retries) shows progress between attempts. The source's failures are counted across those
    calls (in C(DEST/.llmops-partial/streak.json)), so O(retries) and O(peer_down) end the loop, not only one call.
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
  by_commit:
    description: O(dest) is a root of one directory per commit; the snapshot goes into C(DEST/COMMIT).
    type: bool
    default: false
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
    description:
      - Tries per segment within one call after a dropped transfer, a C(429) or a C(5xx) answer (each resumes with
        C(Range)); also for the listing requests.
      - Across the calls of a O(wait_budget) loop, more than O(retries) failed requests per connection in a row with no
        byte in between also end the download.
    type: int
    default: 3
  connections:
    description: Parallel connections (worker threads, each with one 1 MiB buffer), V(1) to V(64).
    type: int
    default: 8
  segment_mib:
    description:
      - Files larger than this many MiB are fetched in byte-range segments of this size, in parallel. V(0) fetches
        every file whole over one connection (for a source without C(Range) support).
    type: int
    default: 64
  peer_url:
    description:
      - Base URL of a peer that serves a snapshot directory of the same commit (C(PEER_URL/COMMIT/PATH), the model
        role's share). File bytes come from there; the commit and every digest still come from the hub and every
        file is verified.
      - The peer may still be downloading - a file it does not have yet (C(404)) is asked for again every second,
        for up to O(peer_wait) seconds without progress.
    type: str
  peer_wait:
    description: With O(peer_url), seconds without any new byte from the peer before the call fails.
    type: float
    default: 1800
  lock_owner:
    description:
      - On shared storage (one O(dest) several hosts see), the name of this host (the model role passes
        C(inventory_hostname)). One host per commit takes the lock C(DEST/.llmops-lock-COMMIT) (a directory renamed
        into place with its holder's record in it, atomic on a network file system) and downloads; every other
        host's call returns RV(done=false) with RV(waiting_for) and writes nothing until the holder's marker is there,
        then verifies the snapshot read-only.
      - Unset, no lock is taken (one host per directory).
    type: str
  lock_stale:
    description:
      - With O(lock_owner), seconds after the holder's last heartbeat (it refreshes the lock at every call and every 10
        seconds while it downloads) after which another host takes the lock over and resumes from the partial files.
        The hosts' clocks must agree within a small part of it.
    type: float
    default: 300
  run_as:
    description:
      - Write every file, directory and lock as this account instead of root (its uid, gid and groups; the token files
        are still read as root). A share exported with C(root_squash) maps root to its anonymous account, which can
        write nothing there; the account must own O(dest) on the file server, with the same uid on every host that
        mounts it.
      - Unset, files are written as the user the module runs as.
    type: str
  peer_token_file:
    description:
      - With O(peer_url), a file (0600) holding the share's per-run secret, sent as C(Authorization) to the peer's
        host only. File URLs are C(PEER_URL/COMMIT/PATH), so the peer serves a file only for the commit asked.
    type: path
  peer_timeout:
    description: With O(peer_url), the connect and read timeout in seconds of each request to the peer.
    type: int
    default: 15
  peer_down:
    description:
      - With O(peer_url), seconds of errors in a row (refused or timed-out connections, C(5xx)) after which the
        call fails naming the peer; a receiver whose seed failed fails within O(peer_down) + O(peer_timeout).
    type: float
    default: 30
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
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details:
      - It resolves the revision and lists the files (read-only requests), reports what would be downloaded or
        removed, and writes nothing.
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
waiting_for:
  description: With O(lock_owner), the host holding the download's lock when this call waited for it.
  returned: when the call waited for another host
  type: str
done:
  description: True when the snapshot is complete and verified (or the call failed); false when O(wait_budget) ran out.
  returned: always
  type: bool
dest:
  description: The snapshot's directory (with O(by_commit), C(DEST/COMMIT)).
  returned: always
  type: str
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
rate:
  description: Bytes per second fetched by this call.
  returned: when the hub was contacted
  type: float
eta_seconds:
  description: Estimated seconds to completion at this call's rate (null when unknown).
  returned: when the hub was contacted
  type: float
refetched:
  description: Files whose finished segments changed on disk and were fetched again (path and segment indexes).
  returned: always
  type: list
  elements: dict
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
  description: One line, e.g. C(3/14 files, 1.20 GiB of 61.05 GiB, 85.3 MiB/s, ETA 12m05s).
  returned: always
  type: str
"""

import contextlib
import os
import shutil
import time
from urllib.parse import quote as urllib_quote
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import (
    COMMIT_RE,
    MARKER,
    PARTIAL_DIR,
    HubClient,
    HubError,
    access_hint,
    check_local,
    expected_digest,
    filter_paths,
    find_snapshot,
    free_bytes,
    human,
    load_marker,
    marker_matches,
    read_env_value,
    safe_relpath,
)
from ansible_collections.llmops.sglang.plugins.module_utils.file_identity import (
    ROOT_SQUASH_HINT,
    account_ids,
    acting_as,
    as_root,
    denied,
    regain_root,
)
from ansible_collections.llmops.sglang.plugins.module_utils.hf_lock import SharedLock
from ansible_collections.llmops.sglang.plugins.module_utils.hf_local import (
    bytes_on_disk,
    check_inputs,
    clear_failure,
    load_streak,
    read_peer_token,
    load_verified,
    part_path,
    present_files,
    save_failure,
    save_streak,
    save_verified,
    stamp,
    token_problem,
)
from ansible_collections.llmops.sglang.plugins.module_utils.hf_http import Fetcher
from ansible_collections.llmops.sglang.plugins.module_utils.hf_transfer import FileJob, Transfer, save_json

DIR_MODE = 0o755
FILE_MODE = 0o644
USER_AGENT = "llmops.sglang-hf_snapshot/2"


def _duration(s):
    s = round(s)
    if s >= 3600:
        return "%dh%02dm" % (s // 3600, s % 3600 // 60)
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


def _progress(n_done, n_total, b_done, b_total, *, rate=None, eta=None):
    text = "%d/%d files, %s of %s" % (n_done, n_total, human(b_done), human(b_total))
    if rate:
        text += ", %s/s" % human(rate)
    if eta is not None:
        text += ", ETA %s" % _duration(eta)
    return text


def _makedirs(path):
    if not os.path.isdir(path):
        os.makedirs(path, mode=DIR_MODE, exist_ok=True)


def argument_spec():
    return dict(
        repo_id=dict(type="str", required=True),
        revision=dict(type="str", default="main"),
        repo_type=dict(type="str", default="model", choices=["model", "dataset"]),
        endpoint=dict(type="str", default="https://huggingface.co"),
        token=dict(type="str", no_log=True),
        token_file=dict(type="path"),
        token_env_name=dict(type="str", default="HF_TOKEN"),
        dest=dict(type="path", required=True),
        by_commit=dict(type="bool", default=False),
        allow_patterns=dict(type="list", elements="str", default=[]),
        ignore_patterns=dict(type="list", elements="str", default=[]),
        verify=dict(type="str", default="sizes", choices=["sizes", "sha256"]),
        offline=dict(type="bool", default=False),
        refresh=dict(type="bool", default=False),
        wait_budget=dict(type="float", default=0),
        retries=dict(type="int", default=3),
        connections=dict(type="int", default=8),
        segment_mib=dict(type="int", default=64),
        peer_url=dict(type="str"),
        peer_wait=dict(type="float", default=1800),
        peer_token_file=dict(type="path", no_log=False),
        lock_owner=dict(type="str"),
        lock_stale=dict(type="float", default=300),
        run_as=dict(type="str"),
        peer_timeout=dict(type="int", default=15),
        peer_down=dict(type="float", default=30),
        timeout=dict(type="int", default=60),
        reserve_gib=dict(type="float", default=1.0),
        validate_certs=dict(type="bool", default=True),
    )


def write_hint(exc, account):
    """What to do about a refused write on the model's directory."""
    if not denied(exc):
        return ""
    if account:
        return "; the directory must belong to %s on the file server (the same uid on every host)" % account
    return "; " + ROOT_SQUASH_HINT


def run_module(module):
    p = module.params
    problem = check_inputs(p)
    if problem:
        module.fail_json(msg=problem)
    allow, ignore = p["allow_patterns"], p["ignore_patterns"]
    dest = root = p["dest"]
    if p["by_commit"]:  # ROOT/COMMIT: the complete snapshot of this revision when there is one, else its commit's
        dest = find_snapshot(root, p["repo_id"], p["repo_type"], p["revision"], allow=allow, ignore=ignore) or (
            os.path.join(root, p["revision"]) if COMMIT_RE.match(p["revision"]) else root
        )
    marker_path = os.path.join(dest, MARKER)
    result = dict(
        changed=False,
        done=True,
        dest=dest,
        marker=marker_path,
        downloaded=[],
        resumed=[],
        refetched=[],
        repo_id=p["repo_id"],
    )

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
        with as_root():  # a root-only file, also while writing as run_as
            token = read_env_value(p["token_file"], p["token_env_name"])
    bad_token = token_problem(token)
    if bad_token:
        where = "%s in %s" % (p["token_env_name"], p["token_file"]) if p["token_file"] else "token"
        module.fail_json(
            msg="%s: expected one line of token characters; %s; set the token again (model_hf_token)"
            % (where, bad_token),
            **result,
        )
    client = HubClient(p["endpoint"], token, p["timeout"], p["validate_certs"], p["repo_type"], retries=p["retries"])
    try:
        commit = client.resolve(p["repo_id"], p["revision"])
        entries = client.tree(p["repo_id"], commit)
    except HubError as exc:
        module.fail_json(
            msg="cannot list %s@%s: %s.%s" % (p["repo_id"], p["revision"], exc, access_hint(exc)), **result
        )
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
    if p["by_commit"] and dest != os.path.join(root, commit):  # the commit's own directory, and its own marker
        dest = os.path.join(root, commit)
        marker_path = os.path.join(dest, MARKER)
        marker = load_marker(dest)
        complete = marker_matches(marker, p["repo_id"], p["repo_type"], p["revision"], allow=allow, ignore=ignore)
    result.update(dest=dest, marker=marker_path)
    lock = None
    if p["lock_owner"] and not module.check_mode:
        lock = SharedLock(root, commit, p["lock_owner"], stale_after=p["lock_stale"])
        try:
            _makedirs(root)
            holder = lock.acquire()
        except OSError as exc:
            module.fail_json(
                msg="cannot take the download's lock %s as %s: %s%s"
                % (lock.path, p["run_as"] or "root", exc.strerror or exc, write_hint(exc, p["run_as"])),
                **result,
            )
        if holder is not None:  # another host downloads this commit: wait, write nothing
            who = str(holder.get("owner") or "another host")
            result.update(
                done=False,
                waiting_for=who,
                progress="%d/%d files verified by %s" % (len(load_verified(dest, commit)), len(files), who),
                msg="waiting for %s, which downloads %s@%s into %s (its last heartbeat %d s ago; taken over after %d s "
                "without one)" % (who, p["repo_id"], commit[:12], dest, holder["age"], p["lock_stale"]),
            )
            module.exit_json(**result)

    # Which files are already right? In the marker (same digest) or in this snapshot's verified record (same size and
    # mtime): trusted; any other present file of the right size is hashed once and recorded.
    known = (marker or {}).get("files") or {}
    verified = load_verified(dest, commit)
    todo, done_bytes, newly_verified = present_files(dest, files, known, verified, trust_marker=p["verify"] == "sizes")
    segment_bytes = p["segment_mib"] << 20
    partial_bytes = sum(bytes_on_disk(dest, rel, files[rel], segment_bytes) for rel in todo)
    needed = sum(files[r]["size"] for r in todo) - partial_bytes
    free = free_bytes(dest)
    result.update(needed_bytes=needed, free_bytes=free)
    stale = sorted(r for r in known if r not in files and os.path.exists(os.path.join(dest, r)))
    if not todo and not stale and complete and marker.get("commit") == commit:
        if lock:
            lock.release()
        result.update(
            bytes_done=total,
            progress=_progress(len(files), len(files), total, total),
            msg="%s@%s (%s) is complete in %s" % (p["repo_id"], p["revision"], commit[:12], dest),
        )
        module.exit_json(**result)
    reserve = int(p["reserve_gib"] * (1 << 30))
    seed = not p["peer_url"] and not module.check_mode  # a share may serve this directory to the fleet
    if needed + reserve > free:
        if seed:
            save_failure(dest, commit)
        if lock:
            lock.release()
        module.fail_json(
            msg="not enough disk space in %s for %s@%s: %d files still need %s (+ %s reserve), %s is free; free space "
            "or lower model_reserve_gib"
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
    clear_failure(dest)
    if os.path.exists(marker_path):
        os.unlink(marker_path)  # the directory is about to change: it is not a complete snapshot until re-marked
        result["changed"] = True
    for rel in stale:
        os.unlink(os.path.join(dest, rel))
        result["changed"] = True
    if newly_verified != verified:
        save_verified(dest, commit, newly_verified)
    verified = newly_verified
    t0 = time.time()
    stop_at = t0 + p["wait_budget"] if p["wait_budget"] > 0 else None
    base = p["peer_url"].rstrip("/") if p["peer_url"] else None
    peer = None
    if base:
        with as_root():
            peer_token = read_peer_token(p["peer_token_file"]) if p["peer_token_file"] else None
        if isinstance(peer_token, Exception):
            module.fail_json(msg="peer_token_file: cannot read %s (%s)" % (p["peer_token_file"], peer_token), **result)
        peer = (base.split("://", 1)[1].split("/", 1)[0], peer_token) if peer_token else None
    jobs = [
        FileJob(
            rel,
            "%s/%s/%s" % (base, commit, urllib_quote(rel)) if base else client.file_url(p["repo_id"], commit, rel),
            files[rel],
            part_path(dest, rel),
            segment_bytes,
        )
        for rel in todo
    ]
    for j in jobs:
        if j.resumed_from:
            result["resumed"].append({"path": j.rel, "from": j.resumed_from})
    state = {"n_done": len(files) - len(todo)}

    def finish(job):
        final = os.path.join(dest, job.rel)
        _makedirs(os.path.dirname(final))
        job.close()
        os.chmod(job.part, FILE_MODE)
        os.replace(job.part, final)
        if os.path.exists(job.state_path):
            os.unlink(job.state_path)
        verified[job.rel] = {"digest": job.want["digest"], "stamp": stamp(final)}
        save_verified(dest, commit, verified)
        result["downloaded"].append(job.rel)
        state["n_done"] += 1

    origin = "%s://%s" % urlsplit(client.endpoint)[:2]
    streak = load_streak(dest)
    transfer = Transfer(
        jobs,
        connections=p["connections"],
        retries=p["retries"],
        fetcher_factory=lambda: Fetcher(
            origin, token, p["peer_timeout"] if base else p["timeout"], client.ssl_context, USER_AGENT, peer=peer
        ),
        stop_at=stop_at,
        on_tick=(lambda t: lock.beat(every=10.0)) if lock else None,
        split=segment_bytes > 0,
        wait_missing=p["peer_wait"] if base else None,
        last_progress=streak["last_progress"],
        peer_down=p["peer_down"] if base else None,
        peer_failing_since=streak["failing_since"] if base else None,
        errors=streak["errors"],
    )
    failure = None
    try:
        finished = transfer.run(finish)
    except HubError as exc:
        failure, finished = exc, False
    save_streak(dest, transfer, failed=failure is not None)
    elapsed = max(time.time() - t0, 1e-6)
    bytes_now = done_bytes + transfer.done_bytes()
    rate = transfer.bytes_fetched / elapsed
    left = total - bytes_now
    eta = left / rate if rate > 0 and left > 0 else (0.0 if left <= 0 else None)
    result.update(
        changed=result["changed"] or transfer.bytes_fetched > 0 or bool(result["downloaded"]),
        bytes_done=bytes_now,
        bytes_fetched=transfer.bytes_fetched,
        rate=round(rate, 1),
        eta_seconds=None if eta is None else round(eta, 1),
        connections=p["connections"],
        requests=transfer.requests,
        hash_seconds=round(transfer.hash_seconds, 3),
        refetched=transfer.refetched,
        progress=_progress(state["n_done"], len(files), bytes_now, total, rate=rate, eta=eta),
    )
    if failure is not None:
        if seed:
            save_failure(dest, commit)  # the share answers the receivers 410 now, not 404 until their peer_wait
        if lock:
            lock.release()  # another host may try at once
        module.fail_json(
            msg="download of %s@%s failed: %s%s" % (p["repo_id"], commit[:12], failure, access_hint(failure)),
            **result,
        )
    if not finished:
        result.update(done=False, msg="downloading %s@%s: %s" % (p["repo_id"], commit[:12], result["progress"]))
        module.exit_json(**result)
    shutil.rmtree(os.path.join(dest, PARTIAL_DIR), ignore_errors=True)
    save_json(
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
    os.chmod(marker_path, FILE_MODE)
    if lock:
        lock.release()  # the marker is there: the waiting hosts verify it
    result.update(
        changed=True,
        msg="%s@%s (%s): %d files downloaded and verified into %s%s"
        % (
            p["repo_id"],
            p["revision"],
            commit[:12],
            len(result["downloaded"]),
            dest,
            " (bytes from %s)" % base if base else "",
        ),
    )
    module.exit_json(**result)


def _root_first(report):
    def call(*args, **kwargs):
        regain_root()
        return report(*args, **kwargs)

    return call


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(), mutually_exclusive=[("token", "token_file")], supports_check_mode=True
    )
    account = module.params["run_as"]
    ids = account_ids(account) if account else None
    if isinstance(ids, str):
        module.fail_json(
            msg="run_as: %s; create the account that owns the model's directory on the file server, with the same "
            "uid on every host (the model role's model_storage_account and model_storage_uid)" % ids
        )
    if ids and os.geteuid() != 0:
        module.fail_json(
            msg="run_as %s: expected the module to run as root (become: true); found uid %d" % (account, os.geteuid())
        )
    if ids:  # the result is printed as root: Ansible's payload is in a root-only directory
        for name in ("exit_json", "fail_json"):
            setattr(module, name, _root_first(getattr(module, name)))
    try:
        with acting_as(ids) if ids else contextlib.nullcontext():
            run_module(module)
    except OSError as exc:  # after the block: root again
        module.fail_json(
            msg="cannot write %s as %s: %s%s"
            % (exc.filename or module.params["dest"], account or "root", exc.strerror or exc, write_hint(exc, account))
        )


if __name__ == "__main__":
    main()
