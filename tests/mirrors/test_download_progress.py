"""Live download progress: ansible-playbook runs hf_snapshot in slices (until/retries + wait_budget) and the
llmops.sglang.sglang_progress callback prints, per slice, files done, bytes, rate and ETA - and the numbers move."""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from _mirror_util import control, http

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"^\[model\] localhost: (\d+)/(\d+) files, ([\d.]+) (B|KiB|MiB|GiB) of [\d.]+ \w+"
    r"(?:, ([\d.]+) (?:B|KiB|MiB|GiB)/s)?(?:, ETA (\S+))?( \(done\))?$"
)
UNIT = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

PLAY = """
- name: Download with progress
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Download the snapshot in one-second slices
      llmops.sglang.hf_snapshot:
        repo_id: sim-org/big-shard
        endpoint: "{{ endpoint }}"
        dest: "{{ dest }}"
        reserve_gib: 0
        connections: 2
        segment_mib: 1
        wait_budget: 1
      register: dl
      until: dl.done
      retries: 300  # a hang guard: about 6 slices are needed, more only on a starved machine
      delay: 0
"""


def test_the_callback_shows_the_download_moving(server, tmp_path):
    http(f"{server['control']}hub", "POST", json.dumps({"rate": 1 << 20}).encode())  # 2 MiB/s: about 6 slices
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT),
        ANSIBLE_CALLBACKS_ENABLED="llmops.sglang.sglang_progress",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    try:
        p = subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible-playbook"),
                "-i",
                "localhost,",
                str(play),
                "-e",
                json.dumps({"endpoint": server["hf_root"], "dest": str(tmp_path / "model")}),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
            cwd=tmp_path,
        )
    finally:
        http(f"{server['control']}hub", "POST", json.dumps({"rate": 0}).encode())
        control(server, "faults", "DELETE")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    lines = [m for m in (LINE.match(x.strip()) for x in p.stdout.splitlines()) if m]
    assert len(lines) >= 4, p.stdout[-3000:]
    done = [float(m.group(3)) * UNIT[m.group(4)] for m in lines]
    # it moves: never backwards, and at least four different figures (a last slice may only hash and move files). The
    # hub's pace caps a 1 s slice at about 2 MiB of 12, so a loaded machine gives more slices, never fewer figures.
    assert all(a <= b for a, b in itertools.pairwise(done)) and len(set(done)) >= 4, done
    # rate and ETA on every slice that moved the download while it runs (a starved slice may move nothing)
    moved = [m for m, before, now in zip(lines[:-1], [0.0, *done], done, strict=False) if now > before]
    assert moved and all(m.group(5) and m.group(6) for m in moved), [m.group(0) for m in lines]
    last = lines[-1]
    assert last.group(7) and last.group(1) == last.group(2)  # "N/N files ... (done)"
