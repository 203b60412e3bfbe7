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

from ansible_collections.llmops.sglang.plugins.module_utils.hf_snapshot_run import run_module


def main():
    run_module()


if __name__ == "__main__":
    main()
