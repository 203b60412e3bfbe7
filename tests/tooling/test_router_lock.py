"""scripts/router-lock.py without the network: the committed lock is what its render() writes for the lock's own pins
and hashes, and a target's markers decide what it adds (what pip, evaluating markers for the Python it runs on, leaves
out)."""

import importlib.util
import re
import zipfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("router_lock", ROOT / "scripts" / "router-lock.py")
router_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(router_lock)
LOCK = ROOT / "roles" / "router" / "files" / "sglang-router-0.3.2.txt"


def test_the_committed_lock_is_what_the_script_renders_for_its_pins_and_hashes():
    text = LOCK.read_text()
    digests = defaultdict(lambda: defaultdict(set))
    for name, version, body in re.findall(
        r"(?m)^([a-z0-9-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}.*\n)+)", text
    ):
        digests[name][version] |= set(re.findall(r"[0-9a-f]{64}", body))
    assert len(digests) == 27
    assert router_lock.render("0.3.2", digests) == text
    assert router_lock.problem(text, "sglang-router", "0.3.2") is None


def wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_a_targets_markers_decide_what_it_needs_besides(tmp_path):
    files = [
        wheel(
            tmp_path,
            "anyio",
            "4.16.0",
            ['exceptiongroup>=1.0.2; python_version < "3.11"', "idna>=2.8", 'trio>=0.32.0; extra == "trio"'],
        ),
        wheel(tmp_path, "idna", "3.21", []),
    ]
    assert router_lock.missing(files, "3.10", "x86_64") == ["exceptiongroup>=1.0.2"]
    assert router_lock.missing(files, "3.11", "aarch64") == []
