#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Benchmark a ready SGLang server with its own client and judge it against the host's baseline
version_added: "0.3.0"
description:
  - Runs SGLang's serving benchmark, C(python -m sglang.bench_serving) from the served venv, against the server on
    this host, bounded in requests and time, with random token ids of fixed lengths and a fixed seed (no dataset is
    downloaded), and reads the output throughput, the TTFT and ITL percentiles and the completed requests from the
    line the client writes.
  - Keeps the figures in O(state_file) per build set, model commit and benchmark settings. The first run of a host
    becomes its baseline. A later run is judged against the baseline of the same build set and model commit or, the
    first time a build set or commit runs (a roll, an upgrade), against the baseline of what ran before it.
  - A run whose output throughput is more than O(max_slowdown_pct) percent below its reference is C(slower); one in
    which a request did not complete is C(failed). With O(gate=true) either fails the task with the figures.
  - The API key is read on the host from O(api_key_file) (or given in O(api_key)) and handed to the client in its
    environment, never on its command line.
  - See docs/serving.md for what the figures mean, and what they mean on simulated nodes.
options:
  python:
    description: The Python interpreter of the served venv (the one SGLang runs from).
    type: path
    required: true
  base_url:
    description: The server's base URL, e.g. C(http://127.0.0.1:30000).
    type: str
    required: true
  tokenizer:
    description: The model directory the client reads the tokenizer from (the served model's).
    type: path
    required: true
  num_prompts:
    description: Requests the benchmark sends.
    type: int
    default: 32
  input_len:
    description: Prompt tokens per request.
    type: int
    default: 256
  output_len:
    description: Generated tokens per request.
    type: int
    default: 128
  max_concurrency:
    description: Requests in flight at most.
    type: int
    default: 8
  seed:
    description: The client's random seed.
    type: int
    default: 1
  timeout:
    description: Seconds the client may run; past them it is ended and the task fails.
    type: int
    default: 300
  state_file:
    description: The host's benchmark figures (JSON, no secret), written when the figures change.
    type: path
    required: true
  build_set:
    description: The build set the server runs from (part of the baseline's key).
    type: str
    default: ""
  model_commit:
    description: The model commit the server serves (part of the baseline's key).
    type: str
    default: ""
  max_slowdown_pct:
    description: How many percent of output throughput below its reference a run may lose and still pass.
    type: float
    default: 15
  gate:
    description: Whether a C(slower) or C(failed) verdict fails the task (the figures are kept either way).
    type: bool
    default: true
  launched:
    description:
      - Whether SGLang (re)started in this run. When false the benchmark runs only when the last run of the same
        build set, model commit and settings was judged C(slower) or C(failed) (so a run after a failed gate proves
        the server again); otherwise it returns verdict C(not due) and sends nothing to a serving server.
    type: bool
    default: true
  host:
    description: The name of the host in messages.
    type: str
    default: this host
  api_key_file:
    description:
      - A systemd EnvironmentFile on the host holding the server's API key (the 0600 environment file); a missing
        file or variable sends none.
    type: path
  api_key_name:
    description: The variable of O(api_key_file) that holds the key.
    type: str
    default: SGLANG_API_KEY
  api_key:
    description:
      - The key itself, for a server whose key is not in a file on this host (the router, benchmarked from a replica's
        head). Given to the client in its environment like the file's; takes the place of O(api_key_file).
    type: str
  variable_prefix:
    description: The prefix of the inventory variables the messages name (C(server_bench) names
      C(server_bench_timeout), C(server_bench_max_slowdown_pct)).
    type: str
    default: server_bench
  environment:
    description: Variables the client runs with besides this module's environment (the server's own, e.g. its
      C(PYTHONPATH)); C(OPENAI_API_KEY) and C(API_KEY) are not taken from here.
    type: dict
    default: {}
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details:
      - Sends no request and writes nothing; returns verdict C(not run).
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Benchmark the server and compare it with the host's baseline
  llmops.sglang.sglang_bench:
    python: /opt/llmops/venv/bin/python
    base_url: http://127.0.0.1:30000
    tokenizer: /srv/models/glm-5
    state_file: /var/lib/llmops/server-bench.json
    build_set: set-20261201T101500Z
    model_commit: 0123456789abcdef0123456789abcdef01234567
    api_key_file: /etc/llmops/sglang.env
"""

RETURN = r"""
verdict:
  description:
    - C(baseline) (first run), C(ok), C(slower), C(failed); C(not run) in check mode; C(not due) when O(launched=false)
      and the last run of the same key passed.
  returned: always
  type: str
  sample: ok
figures:
  description: The run's figures (throughput in requests or tokens per second, times in ms).
  returned: when the client ran
  type: dict
  sample: {completed: 32, duration: 9.8, request_throughput: 3.27, output_throughput: 418.2, median_ttft_ms: 95.1,
           p99_ttft_ms: 180.4, median_itl_ms: 17.9, p99_itl_ms: 25.3}
reference:
  description: The baseline figures the run was compared with (null for a first run).
  returned: when the client ran
  type: dict
slowdown_pct:
  description: Percent of output throughput below the reference (negative when faster), null without one.
  returned: when the client ran
  type: float
  sample: 2.5
message:
  description: For a C(slower) or C(failed) run, the sentence saying what was expected, found and what to do.
  returned: when the client ran
  type: str
max_slowdown_pct:
  description: The allowed slowdown the run was judged with (O(max_slowdown_pct)).
  returned: when the client ran
  type: float
build_set:
  description: O(build_set), for the tasks that read this result.
  returned: always
  type: str
model_commit:
  description: O(model_commit), for the tasks that read this result.
  returned: always
  type: str
python:
  description: O(python), for the tasks that read this result (the router's benchmark runs the same client).
  returned: always
  type: str
tokenizer:
  description: O(tokenizer), for the tasks that read this result.
  returned: always
  type: str
"""

import json
import os
import re
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_bench
from ansible_collections.llmops.sglang.plugins.module_utils.deployment_record import utc_stamp
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import read_env_value
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole


def run_client(module, argv, env, timeout, cwd):
    """(rc, output tail) of the client under GNU timeout, which ends the client's whole process group past ``timeout``
    (rc 124, or 137 when it had to kill); rc None means it was ended."""
    rc, out, err = module.run_command(["timeout", "-k", "10", str(timeout), *argv], cwd=cwd, environ_update=env)
    tail = ((out or "") + (err or ""))[-2000:]
    return (None if rc in (124, 137) else rc), tail


def write_state(path, state):
    write_whole(path, json.dumps(state, indent=2, sort_keys=True) + "\n", 0o644, prefix=".sglang-bench-")


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "base_url": {"type": "str", "required": True},
            "tokenizer": {"type": "path", "required": True},
            "num_prompts": {"type": "int", "default": 32},
            "input_len": {"type": "int", "default": 256},
            "output_len": {"type": "int", "default": 128},
            "max_concurrency": {"type": "int", "default": 8},
            "seed": {"type": "int", "default": 1},
            "timeout": {"type": "int", "default": 300},
            "state_file": {"type": "path", "required": True},
            "build_set": {"type": "str", "default": ""},
            "model_commit": {"type": "str", "default": ""},
            "max_slowdown_pct": {"type": "float", "default": 15},
            "gate": {"type": "bool", "default": True},
            "launched": {"type": "bool", "default": True},
            "host": {"type": "str", "default": "this host"},
            "api_key_file": {"type": "path"},
            "api_key_name": {"type": "str", "default": "SGLANG_API_KEY", "no_log": False},
            "environment": {"type": "dict", "default": {}},
            "api_key": {"type": "str", "no_log": True},
            "variable_prefix": {"type": "str", "default": "server_bench"},
        },
        mutually_exclusive=[("api_key", "api_key_file")],
        supports_check_mode=True,
    )
    p = module.params
    echo = {k: p[k] for k in ("build_set", "model_commit", "python", "tokenizer")}
    knob = p["variable_prefix"]
    settings = {k: p[k] for k in sglang_bench.SETTINGS}
    try:
        sglang_bench.check_settings(settings)
        sglang_bench.check_slowdown(p["max_slowdown_pct"])
    except sglang_bench.BenchError as e:
        module.fail_json(msg=str(e))
    if not re.match(r"[a-z][a-z0-9_]*\Z", p["variable_prefix"]):
        module.fail_json(msg="expected variable_prefix as a variable name such as server_bench; found %r; fix the task"
                         % p["variable_prefix"])  # fmt: skip
    if not p["base_url"].startswith(("http://", "https://")) or p["timeout"] < 1:
        module.fail_json(msg="expected base_url as an http(s) URL and timeout >= 1; found %r, %s; fix the task"
                         % (p["base_url"], p["timeout"]))  # fmt: skip
    if not os.access(p["python"], os.X_OK):
        module.fail_json(msg="expected the served venv's Python at %s; found none; run the python_env stage"
                         % p["python"])  # fmt: skip
    if module.check_mode:
        module.exit_json(changed=False, verdict="not run", **echo)
    try:
        state_text = open(p["state_file"]).read() if os.path.exists(p["state_file"]) else ""
    except OSError as e:
        module.fail_json(msg="%s: expected to read %s; found %s; fix its permissions" % (p["host"], p["state_file"], e))
    state = sglang_bench.load_state(state_text)
    if not p["launched"] and not sglang_bench.due(state, p["build_set"], p["model_commit"], settings):
        module.exit_json(changed=False, verdict="not due", **echo)
    # The client's environment: this one, the server's variables, no key but the server's own (an empty value is no
    # key to SGLang's client), the hub offline (the benchmark reads only the local tokenizer).
    env = {str(k): str(v) for k, v in (p["environment"] or {}).items()}
    env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", OPENAI_API_KEY="", API_KEY="")
    key = p["api_key"] or (read_env_value(p["api_key_file"], p["api_key_name"]) if p["api_key_file"] else None)
    if key:
        env["OPENAI_API_KEY"] = key
        module.no_log_values.add(key)
    with tempfile.TemporaryDirectory(prefix="llmops-bench-") as work:
        os.chmod(work, 0o700)
        out_file = os.path.join(work, "bench.jsonl")
        argv = sglang_bench.client_argv(p["python"], p["base_url"], p["tokenizer"], settings, out_file)
        started = time.monotonic()
        rc, tail = run_client(module, argv, env, p["timeout"], work)
        seconds = round(time.monotonic() - started, 1)
        if rc is None:
            module.fail_json(msg="%s: expected SGLang's benchmark to finish within %d s; it did not and was ended; "
                             "raise %s_timeout or lower %s_prompts" % (p["host"], p["timeout"], knob, knob),
                             output_tail=tail)  # fmt: skip
        text = open(out_file).read() if os.path.exists(out_file) else ""
    try:
        if rc != 0:
            raise sglang_bench.BenchError("expected SGLang's benchmark client to exit 0; found exit %s: %s"
                                          % (rc, (tail.strip().splitlines() or ["no output"])[-1][:300]))  # fmt: skip
        figures = sglang_bench.read_output(text)
        result = sglang_bench.judge(
            figures, state, build_set=p["build_set"], model_commit=p["model_commit"],
            settings=settings, max_slowdown_pct=p["max_slowdown_pct"], host=p["host"], stamp=utc_stamp(),
            knob=knob + "_max_slowdown_pct")  # fmt: skip
    except sglang_bench.BenchError as e:
        module.fail_json(msg="%s: %s" % (p["host"], e), output_tail=tail)
    try:
        write_state(p["state_file"], result["state"])
    except OSError as e:
        module.fail_json(msg="%s: expected to write %s; found %s; fix its directory" % (p["host"], p["state_file"], e))
    out = {
        "changed": True,
        "verdict": result["verdict"],
        "figures": figures,
        "reference": result["reference"],
        "slowdown_pct": result["slowdown_pct"],
        "message": result["message"],
        "seconds": seconds,
        "max_slowdown_pct": p["max_slowdown_pct"],
        **echo,
    }
    if p["gate"] and result["verdict"] in ("slower", "failed"):
        module.fail_json(msg=result["message"], **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
