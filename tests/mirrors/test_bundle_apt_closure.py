"""The bundle_apt module against the stand-in NVIDIA Ubuntu 24.04 repository: apt's own resolver in a private state
puts the driver's closure into a bundle, a second run changes nothing, a changed pin replaces the files, bad requests
are refused before the bundle changes, and the host's own apt state is never touched."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _module_util import ROOT, _env
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_apt as A

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")

MODULE = "ansible_collections.llmops.sglang.plugins.modules.bundle_apt"
PINNED = "580.95.05-0ubuntu1"
NEWER = "580.105.08-0ubuntu1"


def driver_pin(version):
    """The nvidia_driver role's own apt pin for ``version``, rendered from its template as the role renders it."""
    role = ROOT / "roles" / "nvidia_driver"
    variables = {
        "nvidia_driver_pin_sources": yaml.safe_load((role / "vars" / "main.yml").read_text())[
            "nvidia_driver_pin_sources"
        ],
        "llmops_driver_version": version,
        "nvidia_driver_fabricmanager_wanted": False,
        "ansible_managed": "managed",
    }
    text = (role / "templates" / "nvidia-driver.pref.j2").read_text()
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def run(args, check_mode=False):
    argfile = Path(args["root"]).parent / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args | {"_ansible_check_mode": check_mode}}))
    p = subprocess.run(
        [sys.executable, "-m", MODULE, str(argfile)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    try:
        return json.loads(p.stdout), p.stdout + p.stderr
    except ValueError:
        return {"failed": True, "msg": "no JSON"}, p.stdout + p.stderr


@pytest.fixture
def request_for(built, server, tmp_path):
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    url = server["apt"].replace("/debian12/", "/ubuntu2404/")
    root = tmp_path / "bundle"
    root.mkdir()

    def make(*packages, **extra):
        version = packages[0].partition("=")[2] or PINNED
        return {
            "preferences": driver_pin(version),
            "root": str(root),
            "release": "ubuntu-24.04",
            "packages": list(packages),
            "sources": [f"deb [signed-by={keyring}] {url} /"],
            "state_dir": str(tmp_path / "apt-state"),
        } | extra

    return make


def offline_plan(root, state_dir, packages):
    """What apt plans for ``packages`` given only the bundle's own files of ubuntu-24.04 as its source (the line a host
    installing from the bundle gets), with the same pin: [(package, version, arch)]."""
    line = A.source_line(str(root), "ubuntu-24.04")
    assert line == f"deb [trusted=yes] file:{root}/apt/ubuntu-24.04 ./"
    paths = A.prepare(str(state_dir), [line], driver_pin(PINNED))
    opts = A.options(paths, "x86_64", True)
    env = {"LC_ALL": "C", "PATH": os.environ["PATH"]}
    subprocess.run(A.update_argv(opts), capture_output=True, text=True, env=env, check=True, timeout=120)
    plan = subprocess.run(
        A.plan_argv(opts, list(packages)), capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    return A.parse_plan(plan.stdout)


def host_apt_state():
    """What the host's own apt has: its lists and archives by name and size, and its dpkg status's hash."""
    seen = {}
    for d in ("/var/lib/apt/lists", "/var/cache/apt/archives"):
        for dirpath, _, files in os.walk(d):
            for name in files:
                path = os.path.join(dirpath, name)
                if os.path.isfile(path):
                    seen[path] = os.path.getsize(path)
    seen["status"] = hashlib.sha256(Path("/var/lib/dpkg/status").read_bytes()).hexdigest()
    return seen


def test_the_driver_closure_lands_in_the_bundle_once_and_a_new_pin_replaces_it(request_for, tmp_path):
    before = host_apt_state()
    pkgs = (f"nvidia-headless-580-open={PINNED}", f"nvidia-utils-580={PINNED}")
    res, out = run(request_for(*pkgs))
    assert not res.get("failed"), out
    assert res["changed"] is True
    names = {e["package"]: e["version"] for e in res["packages"]}
    # the metapackages and what they depend on, each at the pinned version: the closure, not just the request
    assert names["nvidia-headless-580-open"] == PINNED and names["nvidia-utils-580"] == PINNED
    assert "libnvidia-compute-580" in names and "nvidia-dkms-580-open" in names, sorted(names)
    assert set(names.values()) >= {PINNED}
    dest = tmp_path / "bundle" / "apt" / "ubuntu-24.04"
    files = sorted(p.name for p in dest.iterdir())
    assert files == sorted([Path(e["path"]).name for e in res["packages"]] + ["Packages"]) == sorted(res["added"])
    assert res["sources"]["apt/ubuntu-24.04/Packages"] == {
        "kind": "index",
        "name": "apt-packages-ubuntu-24.04",
        "of": "apt/ubuntu-24.04",
    }
    for e in res["packages"]:
        fields = subprocess.run(
            ["dpkg-deb", "-f", tmp_path / "bundle" / e["path"], "Package", "Version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"Package: {e['package']}" in fields and f"Version: {e['version']}" in fields
        assert res["sources"][e["path"]] == {
            "kind": "apt",
            "package": e["package"],
            "version": e["version"],
            "arch": e["arch"],
            "distro": "ubuntu-24.04",
            "vendor": "ubuntu",
        }
    assert res["bytes"] == sum(p.stat().st_size for p in dest.iterdir() if p.name != "Packages")
    assert offline_plan(tmp_path / "bundle", tmp_path / "offline-state", pkgs) == sorted(
        (e["package"], e["version"], e["arch"]) for e in res["packages"]
    )
    assert oct((tmp_path / "apt-state" / "ubuntu-24.04-amd64").stat().st_mode & 0o777) == "0o700"

    again, out = run(request_for(*pkgs))
    assert again["changed"] is False and again["added"] == [] and again["removed"] == [], out
    assert again["sources"] == res["sources"]

    check, out = run(request_for(*(p.replace(PINNED, NEWER) for p in pkgs)), check_mode=True)
    assert check["changed"] is True, out
    assert sorted(p.name for p in dest.iterdir()) == files  # check mode changed nothing

    newer, out = run(request_for(*(p.replace(PINNED, NEWER) for p in pkgs)))
    assert newer["changed"] is True, out
    assert sorted(newer["removed"]) == sorted(set(files) - {"Packages"}) == sorted(check["removed"])
    assert {e["version"] for e in newer["packages"] if e["package"].endswith("580")} == {NEWER}
    assert sorted(p.name for p in dest.iterdir()) == sorted(newer["added"]) == sorted(check["added"] + ["Packages"])
    assert host_apt_state() == before


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"packages": ["nvidia-utils-580=9.9-1"]}, "apt could not resolve the packages for ubuntu-24.04"),
        ({"packages": ["nvidia-utils-580; rm -rf /"]}, "expected each package as NAME or NAME=VERSION"),
        ({"release": "../ubuntu"}, "expected an OS release such as ubuntu-24.04"),
        ({"sources": ["deb http://127.0.0.1:9/ /"]}, "expected each apt source as one line"),
        ({"sources": ["deb [arch=amd64] http://127.0.0.1:9/ /"]}, "expected each apt source to name its keyring"),
        (
            {"sources": ["deb [signed-by=/nonexistent.gpg] http://127.0.0.1:9/ /"]},
            "expected the keyring /nonexistent.gpg",
        ),
        ({"sources": ["deb [signed-by={keyring}] http://127.0.0.1:9/nothing/ /"]}, "apt could not read the sources"),
    ],
)
def test_a_bad_request_is_refused_in_one_line_and_the_bundle_is_unchanged(
    request_for, built, tmp_path, change, expected
):
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    change = {k: [s.replace("{keyring}", str(keyring)) for s in v] if k == "sources" else v for k, v in change.items()}
    (tmp_path / "bundle" / "keep.txt").write_text("x")
    res, out = run(request_for(f"nvidia-utils-580={PINNED}", **change))
    assert res.get("failed") is True, out
    assert res["msg"].startswith(expected), res["msg"]
    assert "\n" not in res["msg"] and "Traceback" not in out
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == ["keep.txt"]
