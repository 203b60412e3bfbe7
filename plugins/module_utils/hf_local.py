# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What is already on disk for a snapshot, and the checks of the module's inputs that need no network.

- ``check_inputs``: one-line errors (expected, found, what to do) for a bad repo id, endpoint, destination or token
  file, before anything on the host changes.
- the verified-files record ``DEST/.llmops-partial/verified.json``: files this snapshot already verified, trusted by
  size and mtime so a later call does not hash them again.
- ``bytes_on_disk``: what the partial files of the files still to fetch already hold (from their segment state).
- the failure record ``DEST/.llmops-partial/failed.json``: a fan-out seed whose download failed says so, and its share
  answers its receivers ``410`` at once instead of ``404`` ("not yet") until their ``peer_wait`` ends.
- the streak record ``DEST/.llmops-partial/streak.json``: the source's failures and last byte, carried across the
  calls of one wait_budget loop so that retries, peer_down and peer_wait bound the loop, not one call.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import json
import math
import os
import pwd
import re
import time

from ansible_collections.llmops.sglang.plugins.module_utils.file_identity import ROOT_SQUASH_HINT, as_root
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import PARTIAL_DIR, hash_file
from ansible_collections.llmops.sglang.plugins.module_utils.hf_transfer import load_state, save_json

REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
LOCK_OWNER = re.compile(r"^[A-Za-z0-9_:@-][A-Za-z0-9._:@-]{0,252}$")
TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_.~+/=:-]*$")
VERIFIED = "verified.json"
FAILED = "failed.json"  # read by roles/model/files/model_share.py (the share's copy of the name)
STREAK = "streak.json"  # the source's streak, carried from one call of a loop to the next
STREAK_FRESH = 300


def _account_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def _nearest_existing(path):
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def check_inputs(p):
    """The first problem with the module's parameters as one line, or None."""
    repo = p["repo_id"]
    if not REPO_ID.match(repo or "") or ".." in repo or repo.endswith((".git", ".")):
        return (
            "repo_id: expected ORG/NAME made of letters, digits, '.', '_' and '-' (for example zai-org/GLM-5); found "
            "%r; correct the repository id" % repo
        )
    ep = p["endpoint"] or ""
    m = re.match(r"^(https?)://([^/\s?#]+)(/[^\s?#]*)?$", ep)
    if not m:
        return "endpoint: expected an http(s) URL such as https://huggingface.co; found %r; correct the endpoint" % ep
    if p.get("peer_url") and not re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", p["peer_url"]):
        return "peer_url: expected an http(s) URL such as http://10.0.0.5:8765; found %r" % p["peer_url"]
    for name, lo, hi in (("connections", 1, 64), ("retries", 0, 100), ("timeout", 1, 3600), ("segment_mib", 0, 65536)):
        if not lo <= p[name] <= hi:
            return "%s: expected an integer from %d to %d; found %s" % (name, lo, hi, p[name])
    if not 1 <= p.get("peer_timeout", 15) <= 300:
        return "peer_timeout: expected an integer from 1 to 300; found %s" % p.get("peer_timeout")
    for name in ("wait_budget", "reserve_gib", "peer_wait", "peer_down"):
        if not math.isfinite(p.get(name, 0)) or p.get(name, 0) < 0:
            return "%s: expected a finite number >= 0; found %s" % (name, p[name])
    owner = p.get("lock_owner")
    if owner is not None and not LOCK_OWNER.match(owner):
        return (
            "lock_owner: expected a host name of letters, digits and ._:@- (at most 253, not starting with '.'); "
            "found %r; pass the inventory host name" % owner
        )
    stale = p.get("lock_stale", 300)
    if not math.isfinite(stale) or not 30 <= stale <= 86400:
        return "lock_stale: expected seconds from 30 to 86400; found %s" % stale
    dest = p["dest"]
    if os.path.lexists(dest) and not os.path.isdir(dest):
        return "dest: expected a directory (or a path to create); found an existing file %s; choose a directory" % dest
    base = _nearest_existing(dest)
    if not os.path.isdir(base):
        return "dest: expected a path below directories; found %s is a file; choose another path" % base
    try:
        st = os.statvfs(base)
    except OSError as exc:
        return "dest: cannot inspect %s (%s); choose a directory on a local disk" % (base, exc.strerror)
    if st.f_blocks == 0:
        return (
            "dest: expected a directory on a disk; found %s on a pseudo file system without storage (such as /proc or "
            "/sys); choose a directory on a disk" % dest
        )
    if not os.access(base, os.W_OK | os.X_OK, effective_ids=True):  # as run_as when the module writes as it
        if st.f_flag & os.ST_RDONLY:
            why = " (read-only file system)"
        elif os.geteuid() == 0:
            why = " for root (%s)" % ROOT_SQUASH_HINT
        else:
            why = " for %s" % _account_name(os.geteuid())
        return "dest: expected a writable directory; found %s not writable%s; choose a writable path or fix it" % (
            base,
            why,
        )
    if p.get("token_file") and os.path.lexists(p["token_file"]):
        tf = p["token_file"]
        if not os.path.isfile(tf):
            return "token_file: expected a file of KEY=VALUE lines; found %s is not a regular file" % tf
        try:
            with as_root(), open(tf, "rb") as f:  # a root-only file, also while the module writes as run_as
                raw = f.read(1 << 20)
            raw.decode("utf-8")
            if b"\0" in raw:
                raise ValueError("NUL byte")
        except OSError as exc:
            return "token_file: cannot read %s (%s); run as a user that can read it" % (tf, exc.strerror)
        except ValueError:
            return (
                "token_file: expected a text EnvironmentFile with %s=VALUE lines; found binary data in %s; rewrite it "
                "(the model role writes it from model_hf_token)" % (p["token_env_name"], tf)
            )
    return None


def token_problem(token):
    """Why a token cannot be one (never showing it), or None."""
    if token is None or TOKEN_CHARS.match(token):
        return None
    kinds = []
    for ch, name in ((" ", "a space"), ("\n", "a newline"), ("\t", "a tab"), ('"', "a quote"), ("'", "a quote")):
        if ch in token and name not in kinds:
            kinds.append(name)
    other = [c for c in token if not TOKEN_CHARS.match(c) and c not in " \n\t\"'"]
    if other:
        kinds.append("%d other character(s) outside letters, digits and _.~+/=:-" % len(other))
    return "found %d characters (not shown) with %s" % (len(token), ", ".join(kinds))


# ------------------------------------------------------------------------------------------- verified-files record
def load_verified(dest, commit):
    try:
        with open(os.path.join(dest, PARTIAL_DIR, VERIFIED), encoding="utf-8") as f:
            data = json.load(f)
        return data["files"] if data.get("commit") == commit and isinstance(data.get("files"), dict) else {}
    except (OSError, ValueError, KeyError, AttributeError):
        return {}


def save_verified(dest, commit, files):
    root = os.path.join(dest, PARTIAL_DIR)
    if not os.path.isdir(root):
        os.makedirs(root, mode=0o755, exist_ok=True)
    save_json(os.path.join(root, VERIFIED), {"commit": commit, "files": files})


def save_failure(dest, commit):
    """Record that the download of ``commit`` into ``dest`` failed, and when (the share compares it with its start).
    Best effort: on a full disk there may be no room for it, and the download's own error is what the user needs;
    the receivers then wait for their peer_wait."""
    root = os.path.join(dest, PARTIAL_DIR)
    try:
        os.makedirs(root, mode=0o755, exist_ok=True)
        save_json(os.path.join(root, FAILED), {"commit": commit, "failed_at": time.time()})
    except OSError:
        pass


def clear_failure(dest):
    """Forget an earlier failure: this call downloads again."""
    try:
        os.unlink(os.path.join(dest, PARTIAL_DIR, FAILED))
    except FileNotFoundError:
        pass


def stamp(path):
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def present_files(dest, files, known, verified, *, trust_marker):
    """(files still to fetch, bytes already right, the verified record) for the listing ``files``. A file is right
    when the marker (``known``, same digest; with ``trust_marker``) or this snapshot's verified record (same digest,
    size and mtime) vouches for it, or else when its hash matches: then it is recorded, so it is hashed once."""
    todo, done_bytes, record = [], 0, {}
    for rel, want in files.items():
        path = os.path.join(dest, rel)
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size == want["size"]:
            k, rec = known.get(rel), verified.get(rel)
            if (
                (trust_marker and k and k.get("digest") == want["digest"])
                or (rec and rec.get("digest") == want["digest"] and rec.get("stamp") == stamp(path))
                or hash_file(path, want["kind"], size).hexdigest() == want["digest"]
            ):
                done_bytes += size
                record[rel] = {"digest": want["digest"], "stamp": stamp(path)}
                continue
        todo.append(rel)
    return todo, done_bytes, record


def part_path(dest, rel):
    return os.path.join(dest, PARTIAL_DIR, rel + ".incomplete")


def bytes_on_disk(dest, rel, want, segment_bytes):
    """Bytes of ``rel`` already written (per its segment state) that a later call keeps."""
    part = part_path(dest, rel)
    if not os.path.exists(part):
        return 0
    segs = load_state(part + ".json", want, segment_bytes)
    return sum(s[2] for s in segs) if segs else 0


def load_streak(dest):
    """What the previous call of one until/retries loop left about its source: when it last sent a byte (the wait for
    a file the seed does not have yet), since when it has failed without answering (peer_down) and how many requests
    in a row failed (retries). One call lasts about wait_budget seconds, shorter than those bounds, so they count
    across the calls of the loop; without this a source that fails for good would be asked again until
    model_download_max_hours. A fresh streak when there is no record or it is older than STREAK_FRESH seconds (an
    earlier, unrelated run)."""
    now = time.time()
    fresh = {"last_progress": now, "failing_since": None, "errors": 0}
    try:
        with open(os.path.join(dest, PARTIAL_DIR, STREAK), encoding="utf-8") as f:
            data = json.load(f)
        if now - float(data["saved_at"]) > STREAK_FRESH:
            return fresh
        since = data.get("failing_since")
        return {
            "last_progress": float(data["last_progress"]),
            "failing_since": None if since is None else float(since),
            "errors": max(0, int(data.get("errors", 0))),
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return fresh


def save_streak(dest, transfer, failed):
    """Keep the transfer's streak for the loop's next call; a failed call ends the loop, so the next run starts a
    fresh streak (its retries are its own)."""
    path = os.path.join(dest, PARTIAL_DIR, STREAK)
    if failed:
        if os.path.exists(path):
            os.unlink(path)
        return
    if os.path.isdir(os.path.dirname(path)):
        save_json(
            path,
            {
                "last_progress": transfer.last_progress,
                "failing_since": transfer.peer_failing_since,
                "errors": transfer.errors,
                "saved_at": time.time(),
            },
        )


def read_peer_token(path):
    """The share's secret from a file (first line, stripped), or the OSError/ValueError explaining why not."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as exc:
        return exc
    if not token or token_problem(token):
        return ValueError("expected one line with the share's secret (letters, digits and _.~+/=:-)")
    return token
