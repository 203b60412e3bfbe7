#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Start or restart an SGLang server and wait until its own start-up log proves it ready
version_added: "0.1.0"
description:
  - Starts or restarts the systemd unit that runs SGLang (or, given only O(log_path), launches nothing and waits
    on that log from its current end), then follows SGLang's start-up log until the required milestones are reached
    on every expected rank - KV cache allocated, CUDA-graph capture ended (skipped when graphs are disabled), the
    C(The server is fired up and ready to roll!) line - and, when O(health_url) is given, an HTTP GET returns 200.
  - Never matches output from before this launch. With O(log_source=file) the log file's inode and size are taken
    right before the start and only bytes written after that offset are read; a restart of a running unit stops it
    first and takes them once it has stopped, so what the old process logs while it shuts down is not read as the
    new launch's; rotation (inode change) and truncation are detected. With O(log_source=journal) only journal
    entries of the new unit invocation (C(_SYSTEMD_INVOCATION_ID)) are read.
  - Fails fast with the outcome (for example V(oom_cuda_graph), V(oom_kv_pool), V(oom_weights),
    V(sm120_shared_memory), V(port_in_use), V(nccl_error), V(crash), V(stalled)), a diagnosis computed from the
    log's own numbers, a machine-readable suggestion and the last 30 log lines, as soon as a failure signature
    appears, the unit dies, no line arrives for O(stall_timeout) seconds, or O(timeout) passes.
  - With O(wait_budget) one call waits at most that long and returns RV(done=false) with a RV(resume) token, so the
    task can run under C(until)/C(retries) and show progress between attempts (see EXAMPLES).
  - The log grammar lives in the collection's C(sglang_log) module_utils, shared with the C(sglang_progress)
    callback and C(bin/sglang-doctor); the waiting (log sources, the wait loop, the health-only loop) lives in
    C(sglang_wait), shared with C(sglang-doctor --follow).
  - Every parameter is checked before anything is started - finite, in range, paths of the right kind - and a
    problem is reported as one line saying what was expected, what was found and what to do.
author:
  - llmops.sglang developers (@llmops)
options:
  name:
    description:
      - The systemd unit that runs SGLang, for example C(sglang.service).
      - Required unless O(log_path) is given (log-only mode) or O(resume) is given.
    type: str
  state:
    description:
      - V(started) starts the unit when it is not active. When it is already active nothing is launched; with
        O(log_source=journal) the current invocation's log is checked from its start, with O(log_source=file) the
        O(health_url) decides (a file offers no way to tell this process's lines from an older one's).
      - V(restarted) always restarts the unit and waits for the new process.
    type: str
    choices: [started, restarted]
    default: started
  log_source:
    description:
      - Where SGLang's output is read. V(file) follows O(log_path) (the unit writes there, for example with
        C(StandardOutput=append:/var/log/sglang.log)). V(journal) reads C(journalctl _SYSTEMD_INVOCATION_ID=<id>).
      - Defaults to V(file) when O(log_path) is set, else V(journal).
    type: str
    choices: [file, journal]
  log_path:
    description:
      - The log file SGLang writes. Without O(name) the module launches nothing and waits on this file from its
        current end (or from O(log_offset)); the file must then exist. A directory or device is refused.
    type: path
  log_offset:
    description:
      - Log-only mode - byte offset to start reading at instead of the current end. V(0) reads the whole file.
      - Must lie within the file (0 to its size); an offset past the end is refused rather than read as a truncation,
        which would re-read an earlier run's lines.
    type: int
  expected_ranks:
    description:
      - Number of scheduler ranks whose KV allocation and graph capture must be seen. Default from the logged
        C(server_args) (tp_size x pp_size x dp_size (without DP attention) / nnodes). At least V(1).
    type: int
  wait_for:
    description:
      - The last milestone required. Earlier milestones are required on every expected rank.
    type: str
    choices: [kv_allocated, cuda_graph_captured, http_up, ready]
    default: ready
  health_url:
    description:
      - URL that must answer 200 once the log milestones are reached, for example C(http://127.0.0.1:30000/health)
        (SGLang 0.5.1+ answers 503 until warm-up passed). Without it the log decides.
      - Recorded in the RV(resume) token, so a resumed call need not repeat it (O(api_key) is never recorded, so repeat
        it when the URL needs it).
    type: str
  api_key:
    description:
      - Sent as C(Authorization Bearer) to O(health_url). SGLang lets C(/health) through without a key.
    type: str
  validate_certs:
    description: Validate TLS certificates of O(health_url).
    type: bool
    default: true
  timeout:
    description: Seconds since the launch after which the wait fails (total, across O(resume) calls). Above V(0).
    type: int
    default: 1800
  stall_timeout:
    description:
      - Fail when no new log line arrives for this many seconds (V(0) disables). Weight loading from slow disks
        prints little; keep this above the longest quiet phase.
    type: int
    default: 600
  wait_budget:
    description:
      - Seconds this call may wait before returning RV(done=false) with a RV(resume) token (V(0) waits until done).
    type: float
    default: 0
  resume:
    description:
      - Token from a previous call's RV(resume). Continues waiting on the same launch without launching again.
      - Every field of the token is checked; a hand-edited token is refused with what is wrong with it.
    type: str
  poll_interval:
    description: Seconds between cheap incremental reads of the log; a finite number above V(0).
    type: float
    default: 0.2
notes:
  - Check mode reports what would be launched and waits for nothing.
  - Milestone times are seconds since the launch (read from the log's own timestamps when a resumed call re-reads
    lines written earlier).
  - O(timeout) and O(stall_timeout) count from the launch recorded in the token, so retries do not extend them.
seealso:
  - name: SGLang readiness (docs/readiness.md)
    description: Log grammar, failure classes and the arithmetic behind the suggestions.
    link: https://github.com/sgl-project/sglang
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reports what would be started or restarted and waited for, without starting anything.
"""

EXAMPLES = r"""
- name: Restart SGLang and wait until it is ready and /health answers 200
  llmops.sglang.sglang_server:
    name: sglang.service
    state: restarted
    log_path: /var/log/sglang/server.log
    health_url: http://127.0.0.1:30000/health
    timeout: 2400
    stall_timeout: 900

# Progress between attempts: launch once, then wait in slices. The until loop re-runs the second task with the
# same arguments; the resume token pins the launch (offset/inode or invocation), so no attempt can match an older
# run's lines, and the sglang_progress callback prints phase, capture progress and KV tokens on each retry.
- name: Restart SGLang without waiting
  llmops.sglang.sglang_server:
    name: sglang.service
    state: restarted
    log_source: journal
    wait_budget: 0.1
  register: sglang_launch

- name: Wait for SGLang in 30-second slices
  llmops.sglang.sglang_server:
    resume: "{{ sglang_launch.resume }}"
    wait_budget: 30
    timeout: 2400
  register: sglang_wait
  until: sglang_wait.done
  retries: 80
  delay: 0
  when: not sglang_launch.done

- name: Wait on a log that something else launches (no unit), from its current end
  llmops.sglang.sglang_server:
    log_path: /tmp/sglang.log
    wait_for: kv_allocated
    expected_ranks: 8
    timeout: 900
"""

RETURN = r"""
done:
  description: True when the wait ended (ready or failed); false when O(wait_budget) ran out first.
  returned: always
  type: bool
outcome:
  description:
    - One of V(ready), V(oom_cuda_graph), V(oom_kv_pool), V(oom_weights), V(sm120_shared_memory), V(port_in_use),
      V(nccl_error), V(dist_init_timeout) (a multi-node rendezvous timed out, a node never joined), V(crash),
      V(stalled), V(incomplete) (still starting, or timed out).
  returned: always
  type: str
  sample: ready
phase:
  description: Last milestone reached (started, weights_loading, weights_loaded, kv_allocated, memory_pool_ready,
    cuda_graph_capturing, cuda_graph_captured, http_up, ready).
  returned: always
  type: str
  sample: cuda_graph_capturing
reached:
  description:
    - True when the wait reached O(wait_for) (and O(health_url) answered 200). With O(wait_for) before V(ready) - a
      node of a multi-node server other than the head waits for V(cuda_graph_captured) - RV(outcome) stays
      V(incomplete), since SGLang logs the ready line only on the head; RV(reached) says the wait succeeded.
  returned: always
  type: bool
launched:
  description: Whether this call started or restarted the unit.
  returned: always
  type: bool
resume:
  description: Token for O(resume) that continues waiting on this launch.
  returned: always
  type: str
elapsed:
  description: Seconds since the launch.
  returned: always
  type: float
milestones:
  description: Seconds since the launch at which each milestone was first seen.
  returned: always
  type: dict
  sample: {"weights_loading": 13.1, "weights_loaded": 375.2, "kv_allocated": 376.0, "ready": 485.4}
ranks:
  description: Per rank label as printed (V('') when the log has none), figures in GiB (SGLang prints "GB").
  returned: always
  type: dict
  sample: {"TP0": {"weights_gb": 61.0, "avail_after_weights_gb": 33.2, "kv_tokens": 425664, "k_size_gb": null,
           "v_size_gb": null, "kv_size_gb": 24.37, "avail_after_pool_gb": 8.61, "cuda_graph_seconds": 41.37,
           "cuda_graph_mem_gb": 3.12, "avail_after_graph_gb": 5.46}}
totals:
  description: Min/max across ranks (pre-load free memory, KV tokens, free memory after pool and graphs...).
  returned: always
  type: dict
max_total_num_tokens:
  description: Rank 0's max_total_num_tokens, null until printed.
  returned: always
  type: int
format:
  description: SGLang version window inferred from the log's line formats, for example C(0.5.9-0.5.10) or C(0.5.14+).
  returned: always
  type: str
server_args:
  description: Resolved values read from the C(server_args=ServerArgs(...)) line.
  returned: always
  type: dict
capture_progress:
  description: Latest CUDA-graph capture step (bs, index, total) while capturing.
  returned: when the log showed capture progress
  type: dict
diagnosis:
  description: One sentence explaining the state, with the log's own numbers.
  returned: always
  type: str
suggestion:
  description: Machine-readable fix, for example C({"action" lower_mem_fraction_static, "value" 0.90}).
  returned: on failure
  type: dict
log_tail:
  description: The last 30 log lines of this launch.
  returned: on failure
  type: list
  elements: str
failure:
  description: The log line with the failure signature the outcome rests on, its rank and the phase it stopped in.
  returned: on failure, when the log showed a failure signature
  type: dict
  sample: {"outcome": "oom_cuda_graph", "line": "Exception: Capture cuda graph failed: CUDA out of memory. ...",
           "rank": "TP3", "phase": "cuda_graph_capturing", "t": 1796033930.2}
  contains:
    t:
      description: The failure's time (epoch seconds, from the log line's own timestamp when it has one); the group
        verdict of a multi-node server compares it across nodes.
      type: float
    peer_lost:
      description: True when the failure is NCCL's error after a peer (another node) went away - an echo of a
        failure elsewhere.
      type: bool
rendezvous:
  description:
    - A multi-node rendezvous that timed out - V(side=head) with C(joined)/C(world) ranks and C(seconds) (torch's
      store), or V(side=node) with the C(host)/C(port) it could not reach and C(seconds).
  returned: when the log shows a rendezvous timeout
  type: dict
  sample: {"side": "node", "seconds": 600, "host": "10.0.0.10", "port": 20000}
unit:
  description: systemd state of the unit (ActiveState, SubState, MainPID, ExecMainStatus, InvocationID, ExecStartPre).
  returned: when O(name) is set
  type: dict
start_note:
  description:
    - The start needed more than one try, and why - systemd failed to spawn SGLang or its ExecStartPre step (status
      219/CGROUP, the previous invocation's control group still being released); the unit's failed state was reset
      and it was started again after a pause (at most three starts).
  returned: when the launch was tried more than once
  type: str
health:
  description: Last HTTP status of O(health_url).
  returned: when O(health_url) is set
  type: int
"""

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_server_run import run_module


def main():
    run_module()


if __name__ == "__main__":
    main()
