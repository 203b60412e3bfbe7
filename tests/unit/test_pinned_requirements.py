"""The router's hash-pinned requirements (plugins/module_utils/pinned_requirements.py, the filters lock_problem and
lock_unmet): what a lock pins, when it is not one, what a virtualenv lacks, and the role's own lock as shipped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import pinned_requirements as PR

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "roles" / "router" / "files" / "sglang-router-0.3.2.txt"
H1, H2 = "a" * 64, "b" * 64
LOCK = f"""# a comment
sglang-router==0.3.2 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
Typing_Extensions==4.16.0 --hash=sha256:{H1}
exceptiongroup==1.3.2 ; python_version < "3.11" --hash=sha256:{H2}
"""


def test_a_lock_pins_every_requirement_under_its_normal_name():
    assert PR.pins(LOCK) == {"sglang-router": "0.3.2", "typing-extensions": "4.16.0", "exceptiongroup": "1.3.2"}
    assert PR.problem(LOCK, "sglang_router", "0.3.2") is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "an empty file"),
        ("# only a comment\n", "an empty file"),
        (f"sglang-router>=0.3.2 --hash=sha256:{H1}\n", "requirements not pinned with == (sglang-router>=0.3.2)"),
        ("sglang-router==0.3.2\n", "requirements without a --hash=sha256: (sglang-router)"),
        (f"sglang-router==0.3.2 --hash=sha256:{H1[:40]}\n", "requirements without a --hash=sha256: (sglang-router)"),
        (f"sglang-router==0.3.1 --hash=sha256:{H1}\n", "sglang-router pinned at 0.3.1"),
        (f"aiohttp==3.14.5 --hash=sha256:{H1}\n", "no pin of sglang-router"),
        (f"sglang-router==0.3.2 --hash=sha256:{H1}\nfastapi\n", "requirements not pinned with == (fastapi)"),
    ],
)
def test_a_file_that_is_not_a_lock_of_the_version_is_named(text, says):
    assert PR.problem(text, "sglang-router", "0.3.2") == says


def test_the_unmet_pins_are_those_installed_at_another_version_or_not_at_all():
    installed = {"sglang_router": "0.3.2", "typing-extensions": "4.15.0", "pip": "24.0"}
    assert PR.unmet(LOCK, installed) == ["exceptiongroup==1.3.2", "typing-extensions==4.16.0"]
    assert PR.unmet(LOCK, {"sglang-router": "0.3.2", "typing_extensions": "4.16.0", "ExceptionGroup": "1.3.2"}) == []
    assert PR.unmet(LOCK, {}) == ["exceptiongroup==1.3.2", "sglang-router==0.3.2", "typing-extensions==4.16.0"]


def test_the_roles_own_lock_pins_the_default_router_with_a_sha256_for_every_file():
    text = SHIPPED.read_text()
    assert PR.problem(text, "sglang-router", "0.3.2") is None
    pinned = PR.pins(text)
    # the router's own dependencies (its wheel's Requires-Dist), and what CPython 3.10 needs besides
    assert {"aiohttp", "fastapi", "orjson", "setproctitle", "uvicorn", "exceptiongroup", "async-timeout"} <= set(pinned)
    hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", text)
    assert len(hashes) == len(set(hashes)) >= len(pinned)
    assert text.count("==") == len(pinned)  # one pin per package
