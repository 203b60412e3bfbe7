"""The built collection carries only what users need, and works once installed, from outside the repository."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import yaml
from conftest import COLLECTION, ROOT, tool

# What the tarball may hold at its top level. Everything else in this repository is project tooling, simulation or
# tests, left out by galaxy.yml's build_ignore; a new top-level file or directory must be added to one of the two.
SHIPPED = {
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "CHANGELOG.md",
    "changelogs",  # changelogs/changelog.yaml, the releases in antsibull-changelog's format
    "LICENSE",
    "meta",
    "plugins",
    "roles",
    "playbooks",
    "docs",
    "inventories",
}
# Inside directories that ship, what must not.
NOT_SHIPPED = ("inventories/sim", "__pycache__", ".pyc")
DEBIAN_APACHE = Path("/usr/share/common-licenses/Apache-2.0")


def members(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tf:
        return [m.name.removeprefix("./") for m in tf.getmembers()]


def test_the_tarball_ships_the_collection_and_none_of_the_project_tooling(tarball):
    names = members(tarball)
    top = {n.split("/", 1)[0] for n in names}
    assert top <= SHIPPED, f"not collection content (add to build_ignore in galaxy.yml): {sorted(top - SHIPPED)}"
    assert {"LICENSE", "meta", "plugins", "roles", "playbooks"} <= top
    assert [n for n in names if any(x in n for x in NOT_SHIPPED)] == []
    assert "playbooks/site.yml" in names and "inventories/example/hosts.yml" in names


def test_the_tarball_names_its_license_and_carries_its_text(tarball):
    with tarfile.open(tarball) as tf:
        info = json.load(tf.extractfile("MANIFEST.json"))["collection_info"]
        text = tf.extractfile("LICENSE").read()
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert info["license"] == ["Apache-2.0"] and info["version"] == galaxy["version"]
    assert b"Apache License" in text and b"Version 2.0, January 2004" in text
    if DEBIAN_APACHE.exists():  # Debian's copy of the license text, meant to be reproduced verbatim
        assert text == DEBIAN_APACHE.read_bytes()
    # No made-up addresses: a key is either unset or a real https URL.
    for key in ("repository", "documentation", "homepage", "issues"):
        url = info.get(key)
        assert url is None or (url.startswith("https://") and ".invalid" not in url and "example." not in url), url


def test_ansible_doc_documents_every_module_role_and_callback_of_the_installed_collection(installed):
    modules = sorted(f"{COLLECTION}.{p.stem}" for p in (ROOT / "plugins" / "modules").glob("*.py"))
    callbacks = sorted(f"{COLLECTION}.{p.stem}" for p in (ROOT / "plugins" / "callback").glob("*.py"))
    roles = sorted(f"{COLLECTION}.{p.name}" for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
    assert modules and callbacks and roles
    for kind, names in (("module", modules), ("callback", callbacks), ("role", roles)):
        p = installed.run([tool("ansible-doc"), "-t", kind, "--json", *names])
        assert p.returncode == 0, p.stdout + p.stderr
        docs = json.loads(p.stdout)
        assert sorted(docs) == names, f"{kind}s without documentation: {sorted(set(names) - set(docs))}\n{p.stderr}"
        for name, doc in docs.items():
            if kind == "role":
                assert Path(doc["path"]) == installed.path, (name, doc["path"])
                assert doc["entry_points"]["main"]["short_description"], name
            else:
                assert Path(doc["doc"]["filename"]).is_relative_to(installed.path), (name, doc["doc"]["filename"])
                assert doc["doc"]["short_description"], name


def test_the_site_playbook_runs_by_name_from_outside_the_repository(installed):
    inventory = installed.outside / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu_servers:\n      hosts:\n        gpu01:\n")
    site = f"{COLLECTION}.site"
    p = installed.run([tool("ansible-playbook"), "-i", str(inventory), site, "--syntax-check"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"playbook: {installed.path}/playbooks/site.yml" in p.stdout, p.stdout
    tags = installed.run([tool("ansible-playbook"), "-i", str(inventory), site, "--list-tags"])
    assert tags.returncode == 0, tags.stdout + tags.stderr
    found = set()
    for line in tags.stdout.splitlines():
        if "TASK TAGS:" in line:
            found |= {t.strip() for t in line.split("[", 1)[1].rstrip("]").split(",") if t.strip()}
    # every stage, as README documents them: preflight (always), driver, cuda, build, model, server
    assert {"always", "preflight", "driver", "cuda", "build", "model", "server"} <= found, found
    # nothing was installed or cached under the (temporary) home
    leaked = installed.home / ".ansible" / "collections" / "ansible_collections"
    assert not leaked.exists() or not any(leaked.iterdir())


# --- the operator's tools and the callback, from the installed collection (no node) ----------------------------------
LOGS = ROOT / "tests" / "unit" / "fixtures" / "logs"
MODEL = ROOT / "tests" / "unit" / "fixtures" / "models" / "glm5-like"
TOOLS = "ansible_collections.llmops.sglang.plugins.plugin_utils"
# The lines docs/operator-guide.md tells users to put in their ansible.cfg.
USER_CFG = "[defaults]\ncallbacks_enabled = llmops.sglang.sglang_progress\n"


def _tool(installed, name, *args):
    """python3 -m <the installed collection's tool>, with only the installed collections path on PYTHONPATH."""
    return installed.run([sys.executable, "-m", f"{TOOLS}.{name}", *args], PYTHONPATH=str(installed.collections))


def test_the_doctor_and_the_planner_run_from_the_installed_collection(installed):
    p = _tool(installed, "sglang_doctor_cli", str(LOGS / "v0_5_9_glm5_ready.log"), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["outcome"] == "ready"
    p = _tool(installed, "sglang_doctor_cli", str(LOGS / "v0_5_9_glm5_capture_oom.log"))
    assert p.returncode == 1 and "diagnosis: CUDA out of memory" in p.stdout, p.stdout + p.stderr
    # the planner on the same model's config with the figures that log measured
    p = _tool(
        installed,
        "sglang_plan_cli",
        *("--model", str(MODEL / "config.json"), "--gpu-mem-mib", "97887", "--tp", "8"),
        *("--sglang-version", "0.5.9", "--gpu-arch", "sm_120", "--json"),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["kv_tokens"] > 0
    # the modules came from the installed copy, not from this checkout
    where = installed.run(
        [sys.executable, "-c", f"import {TOOLS}.sglang_doctor_cli as m; print(m.__file__)"],
        PYTHONPATH=str(installed.collections),
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.path), where.stdout + where.stderr


def test_the_callback_summary_and_report_of_the_installed_collection(installed):
    """ansible.cfg as the docs give it; llmops.sglang.sglang_server in its log-only mode on a real log; the summary is
    printed and the report lands in the user's state directory, outside the installed collection."""
    (installed.outside / "ansible.cfg").write_text(USER_CFG)
    log = installed.outside / "server.log"
    log.write_bytes((LOGS / "v0_5_9_glm5_ready.log").read_bytes())
    play = installed.outside / "watch.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Read a saved SGLang log",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Read the log from its start",
                            "llmops.sglang.sglang_server": {"log_path": str(log), "log_offset": 0, "timeout": 60},
                        }
                    ],
                }
            ]
        )
    )
    p = installed.run(
        [tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        ANSIBLE_CONFIG=str(installed.outside / "ansible.cfg"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "[sglang] localhost: ready (phase ready, format 0.5.9)" in out, out[-3000:]
    assert "GPU memory" in out and "#tokens 425664" in out, out[-3000:]
    line = [x for x in out.splitlines() if x.startswith("[sglang] report: ")]
    assert line, out[-3000:]
    index = Path(line[-1].split(": ", 1)[1])
    assert index.parent.parent == installed.home / ".local" / "state" / "llmops-sglang" / "reports", index
    assert index.is_file() and not index.is_relative_to(installed.path)
    assert not list(installed.path.rglob("report.json"))
