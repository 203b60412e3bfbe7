#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Judge the health of a host's NVIDIA GPUs from nvidia-smi -q and the kernel log
version_added: "0.3.0"
description:
  - Runs C(nvidia-smi -q) with C(LANG=C) and reads the kernel log of the current boot (C(journalctl -k -b), or
    C(dmesg) where journald is not available), then returns one check per GPU and topic, each with a severity
    (C(critical), C(warning), C(ok)) and one sentence saying what was expected, what was found and what to do.
  - "Checks: persistence mode, PCIe link generation and width against their maximum, uncorrectable ECC errors,
    retired pages, remapped rows (pending, failure), a required GPU reset, clock event (throttle) reasons,
    temperature against the slowdown temperature, NVLink fabric state and status, and NVIDIA Xid errors since boot."
  - A PCIe link below its maximum is only critical when O(under_load=true), since GPUs lower their link when idle.
  - With O(load_url), the module keeps the GPUs busy itself while it reads them - one OpenAI chat completion request
    to that URL, sent from the host, whose key is read from O(api_key_file) on the host (never an argument) - and
    judges the reading as under load.
  - Read-only; supports check mode (it runs the same read-only commands) and always reports C(changed=false).
  - See docs/gpu-health.md for every check, its severity and the public evidence behind it.
options:
  nvidia_smi:
    description: Path or name of the nvidia-smi binary; a bare name is searched in E(PATH).
    type: str
    default: nvidia-smi
  under_load:
    description:
      - Whether the GPUs are busy while this runs (a benchmark or a serving load in progress). Only then is a
        PCIe link below its maximum a fault.
    type: bool
    default: false
  fail_on:
    description:
      - The severity that fails the task, with the sentences of the checks that have it. V(never) only reports.
    type: str
    choices: [critical, warning, never]
    default: critical
  kernel_log:
    description:
      - Where the Xid lines are read. V(auto) uses C(journalctl -k -b) when journalctl exists and prints the
        boot's kernel messages, else C(dmesg).
        V(none) skips the Xid check.
    type: str
    choices: [auto, journalctl, dmesg, none]
    default: auto
  timeout:
    description: Seconds to wait for each command (a hung driver makes nvidia-smi block).
    type: int
    default: 60
  load_url:
    description:
      - An OpenAI-compatible C(/v1/chat/completions) URL (SGLang's on this host) that the module sends one generation
        request to and reads the GPUs while it runs. Implies O(under_load=true).
    type: str
  load_model:
    description: The model name the generation request asks for (SGLang's served model name).
    type: str
  load_tokens:
    description: Tokens the generation request asks for.
    type: int
    default: 256
  load_timeout:
    description: Seconds the generation request may take.
    type: int
    default: 120
  api_key_file:
    description:
      - "A systemd EnvironmentFile on the host holding the API key the request sends as C(Authorization: Bearer)
        (the server's 0600 environment file); a missing file or variable sends none."
    type: path
  api_key_name:
    description: The variable of O(api_key_file) that holds the key.
    type: str
    default: SGLANG_API_KEY
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details:
      - Reads nvidia-smi and the kernel log as outside check mode, but sends no generation request (O(load_url)), so
        no reading is taken under load.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Judge the GPUs of the host
  llmops.sglang.gpu_health:
  register: health

- name: Judge the PCIe links while a benchmark keeps the GPUs busy
  llmops.sglang.gpu_health:
    under_load: true
    fail_on: warning
"""

RETURN = r"""
verdict:
  description: The worst severity among the checks.
  returned: always
  type: str
  choices: [ok, warning, critical]
  sample: ok
checks:
  description: One entry per GPU and check, plus the Xid checks (one per GPU and Xid number).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The check.
      type: str
      choices: [persistence_mode, pcie_link, ecc_uncorrectable, retired_pages, remapped_rows, reset_required,
                clock_reasons, temperature, fabric, xid]
    gpu: {description: PCI bus id of the GPU (null for a host-wide check)., type: str}
    severity: {description: "critical, warning or ok.", type: str}
    message: {description: "One sentence: expected, found, what to do.", type: str}
summary:
  description: How many checks have each severity.
  returned: always
  type: dict
  sample: {ok: 48, warning: 0, critical: 0}
gpus:
  description: What was read per GPU (the keys of gpu_health_parse.GPU_KEYS).
  returned: always
  type: list
  elements: dict
load:
  description: With O(load_url), the generation request that kept the GPUs busy (its HTTP status and seconds).
  returned: when load_url is set
  type: dict
  sample: {status: 200, seconds: 3.2}
kernel_log_source:
  description: The command the Xid lines were read from, or null when none was read.
  returned: always
  type: str
  sample: journalctl -k -b
"""

import json
import os
import threading
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_health, gpu_health_parse
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import read_env_value

LOCALE = {"LANG": "C", "LC_ALL": "C"}


def kernel_log(module, choice, timeout):
    """(command string, text) of the kernel log, or (None, None) when it is not read or cannot be read."""
    if choice == "none":
        return None, None
    tried = []
    for name in ["journalctl", "dmesg"] if choice == "auto" else [choice]:
        path = module.get_bin_path(name)
        if not path:
            tried.append(f"{name} not found")
            continue
        cmd = [path, "-k", "-b", "--no-pager", "-q"] if name == "journalctl" else [path]
        rc, out, err = module.run_command(["timeout", str(timeout), *cmd], environ_update=LOCALE)
        if rc == 0 and not out.strip() and name == "journalctl":
            # A host whose journald keeps no kernel messages (a container, a volatile journal already rotated)
            # answers with nothing; dmesg may still hold the boot's ring buffer.
            tried.append("journalctl -k -b printed nothing")
            continue
        if rc == 0:
            return " ".join([name, *cmd[1:3]]) if name == "journalctl" else name, out
        last = (err or out).strip().splitlines()[-1:] or ["no output"]
        tried.append(f"{name} exited {rc}: {last[0]}")
    module.warn("The kernel log could not be read (" + "; ".join(tried) + "); the Xid check was skipped.")
    return None, None


class Load(threading.Thread):
    """One chat completion request in the background: what keeps the GPUs busy while nvidia-smi reads them."""

    def __init__(self, url, model, tokens, timeout, key):
        super().__init__(daemon=True)
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Count from one upwards, one number a line."}],
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        self.url, self.data, self.headers = url, json.dumps(body).encode(), headers
        self.timeout = timeout
        self.status, self.error, self.seconds = None, None, None

    def run(self):
        t0 = time.monotonic()
        try:
            with open_url(self.url, data=self.data, headers=self.headers, method="POST", timeout=self.timeout) as resp:
                resp.read()
                self.status = resp.status
        except urllib.error.HTTPError as exc:
            self.status, self.error = exc.code, "HTTP %d" % exc.code
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.error = str(getattr(exc, "reason", exc))
        self.seconds = round(time.monotonic() - t0, 2)


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "under_load": {"type": "bool", "default": False},
            "fail_on": {"type": "str", "default": "critical", "choices": ["critical", "warning", "never"]},
            "kernel_log": {"type": "str", "default": "auto", "choices": ["auto", "journalctl", "dmesg", "none"]},
            "timeout": {"type": "int", "default": 60},
            "load_url": {"type": "str"},
            "load_model": {"type": "str"},
            "load_tokens": {"type": "int", "default": 256, "no_log": False},
            "load_timeout": {"type": "int", "default": 120},
            "api_key_file": {"type": "path"},
            "api_key_name": {"type": "str", "default": "SGLANG_API_KEY"},
        },
        required_by={"load_url": "load_model"},
        supports_check_mode=True,
    )
    p = module.params
    smi = p["nvidia_smi"] if os.path.sep in p["nvidia_smi"] else module.get_bin_path(p["nvidia_smi"])
    if not smi or not os.access(smi, os.X_OK):
        module.fail_json(msg=f"expected the nvidia-smi binary '{p['nvidia_smi']}', found none; install the NVIDIA "
                         "driver (role nvidia_driver) or set nvidia_smi to its path")  # fmt: skip
    if p["timeout"] < 1:
        module.fail_json(msg=f"expected timeout of at least 1 second, found {p['timeout']}; raise it")
    load = None
    if p["load_url"]:
        if not p["load_url"].startswith(("http://", "https://")) or p["load_tokens"] < 1 or p["load_timeout"] < 1:
            module.fail_json(msg=f"expected load_url to be an http(s) URL and load_tokens, load_timeout >= 1; found "
                             f"{p['load_url']!r}, {p['load_tokens']}, {p['load_timeout']}; fix the task")  # fmt: skip
        key = read_env_value(p["api_key_file"], p["api_key_name"]) if p["api_key_file"] else None
        load = Load(p["load_url"], p["load_model"], p["load_tokens"], p["load_timeout"], key)
        if not module.check_mode:
            load.start()
            time.sleep(0.5)  # the request reaches the GPUs (prefill) before nvidia-smi reads them
    rc, out, err = module.run_command(["timeout", str(p["timeout"]), smi, "-q"], environ_update=LOCALE)
    if load is not None and load.is_alive():
        load.join(p["load_timeout"] + 5)
    if rc == 124:
        module.fail_json(msg=f"expected nvidia-smi -q to answer within {p['timeout']} s, found no answer; the driver "
                         "may be hung (check the kernel log for Xid errors) or the timeout too short")  # fmt: skip
    if rc != 0:
        first = (out or err).strip().splitlines()[:1] or ["no output"]
        module.fail_json(msg=f"expected 'nvidia-smi -q' to exit 0, found exit {rc}: {first[0]}; fix the driver "
                         "first (llmops.sglang.gpu_facts names its state)", rc=rc)  # fmt: skip
    try:
        gpus = gpu_health_parse.parse_smi_q(out)
        source, log = kernel_log(module, p["kernel_log"], p["timeout"])
        events = gpu_health_parse.parse_kernel_log(log) if log is not None else None
    except gpu_health_parse.HealthParseError as e:
        module.fail_json(msg=str(e))
    checks = gpu_health.verdict(gpus, events, p["under_load"] or load is not None)
    worst = gpu_health.worst(checks)
    result = {
        "changed": False,
        "verdict": worst,
        "checks": checks,
        "summary": gpu_health.summary(checks),
        "gpus": gpus,
        "kernel_log_source": source,
    }
    if load is not None and not module.check_mode:
        result["load"] = {"status": load.status, "seconds": load.seconds}
        if load.status != 200:
            module.fail_json(msg=f"expected the generation request that kept the GPUs busy to answer 200, found "
                             f"{load.error or load.status}; the reading was not under load. Check that SGLang serves "
                             f"{p['load_model']} at {p['load_url']}", **result)  # fmt: skip
    failing = {"critical": ("critical",), "warning": ("critical", "warning"), "never": ()}[p["fail_on"]]
    bad = [c["message"] for c in checks if c["severity"] in failing]
    if bad:
        module.fail_json(msg=" ".join(bad), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
