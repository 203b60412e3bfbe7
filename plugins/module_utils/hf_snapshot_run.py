# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The ``hf_snapshot`` module's engine: its parameters, the account it writes as, and one snapshot's download and
verification from the hub (or a fleet peer) into the destination, under the shared lock on shared storage.

``plugins/modules/hf_snapshot.py`` is the module's documentation and a ``main()`` that calls ``run_module``; the hub's
API is ``hf_hub``, the transfers ``hf_transfer``/``hf_http``, the local checks ``hf_local``, the lock ``hf_lock``.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

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


def download(module):
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


def run_module():
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
            download(module)
    except OSError as exc:  # after the block: root again
        module.fail_json(
            msg="cannot write %s as %s: %s%s"
            % (exc.filename or module.params["dest"], account or "root", exc.strerror or exc, write_hint(exc, account))
        )
