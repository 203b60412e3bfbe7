"""The install tasks' skip rule (plugins/module_utils/installed_packages.py) on this machine's real dpkg database.

The oracle is dpkg itself: a second dpkg-query with the long status words (``${db:Status-Status}``,
``${db:Status-Eflag}``) says which packages are installed; the rule reads the three-letter abbreviation the roles'
read uses. Everything here is read from this host's dpkg (Debian 12), nothing is written by hand but the names of a
package that does not exist and of versions that are not installed.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import installed_packages as ip

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (Debian)")


def dpkg(fmt: str, *patterns: str) -> str:
    return subprocess.run(
        ["dpkg-query", "-W", "-f=" + fmt, *patterns], check=True, capture_output=True, text=True
    ).stdout


def test_the_rule_finds_exactly_the_packages_dpkg_calls_installed():
    # '*' lists every package dpkg knows, also those it knows as not installed (or with configuration files only)
    known = dpkg(ip.QUERY_FORMAT.replace("\\n", "\n"), "*")
    status = dpkg("${binary:Package} ${Version} ${db:Status-Status} ${db:Status-Eflag}\n", "*")
    oracle = {f[0]: f[1] for f in (line.split() for line in status.splitlines()) if f[2:] == ["installed", "ok"]}
    assert len(oracle) > 100 and len(known.splitlines()) > len(oracle)  # the database also holds others
    parsed = ip.parse(known)
    # a multi-arch package (binutils-common:amd64) is also found under its bare name
    bare = {name.split(":", 1)[0]: version for name, version in oracle.items()}
    assert parsed == {**bare, **oracle}


def test_an_installed_package_at_its_version_is_not_missing_anything_else_is():
    installed = ip.parse(dpkg(ip.QUERY_FORMAT.replace("\\n", "\n")))
    version = dpkg("${Version}", "dpkg")
    assert version and installed["dpkg"] == version
    assert ip.missing("dpkg", installed) == []
    assert ip.missing(["dpkg", f"dpkg={version}"], installed) == []
    wanted = [f"dpkg={version}", "dpkg=0.0-1", "llmops-no-such-package", "dpkg=1.*", "dpkg>=1.0", "dpkg/bookworm"]
    assert ip.missing(wanted, installed) == wanted[1:]  # a wrong version, an unknown name, patterns and relations
    # nothing read in this run (not Debian, or check mode before the read): every entry is missing, apt decides
    assert ip.missing(["dpkg"], None) == ["dpkg"] and ip.missing("dpkg", "") == ["dpkg"]


def test_a_multiarch_package_is_found_under_both_names():
    out = dpkg("${binary:Package}\n")
    qualified = [name for name in out.split() if ":" in name]
    installed = ip.parse(dpkg(ip.QUERY_FORMAT.replace("\\n", "\n")))
    for name in qualified[:5]:
        bare = name.split(":", 1)[0]
        assert ip.missing([name, bare], installed) == [], name


def test_only_installed_without_an_error_flag_counts():
    # the abbreviations dpkg-query(1) documents: desired action, status, error flag
    text = "a 1 ii \nb 1 hi \nc 1 rc \nd 1 iU \ne 1 iiR\nf 1 un \n"
    assert ip.parse(text) == {"a": "1", "b": "1"}


def test_a_package_file_named_the_debian_way_says_its_package_and_version():
    # the keyring file roles/nvidia_repo/defaults/main.yml installs, as NVIDIA names it
    default = (ip.__file__.rsplit("/plugins/", 1)[0]) + "/roles/nvidia_repo/defaults/main.yml"
    url = next(line.split('"')[1] for line in open(default) if line.startswith("nvidia_repo_keyring_url:"))
    assert url.endswith("cuda-keyring_1.1-1_all.deb")
    assert ip.deb_entry("http://mirror.invalid/debian12/x86_64/cuda-keyring_1.1-1_all.deb") == "cuda-keyring=1.1-1"
    assert ip.deb_entry("/tmp/pkgs/libfoo1_2%3a1.2-3_amd64.deb") == "libfoo1=2:1.2-3"
    for odd in ("http://mirror.invalid/keyring.deb", "/tmp/a_b.deb", "http://mirror.invalid/x_1_all.deb.asc", ""):
        assert ip.deb_entry(odd) == odd
