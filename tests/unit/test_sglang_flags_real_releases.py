"""plugins/module_utils/sglang_flags.py against the real SGLang wheels (PyPI, fetched into the shared release cache at
test time, never committed): every window's edges and every release the cache holds from OLDEST_CHECKED on.

- server flags: the spelling chosen for a release is registered by that release's own argparse (read from its wheel
  by sim/mirrors/sglang_cli.py), the argv planned for it parses under it, and the file:line evidence is exact;
- the SM120 fix: the file that defines _get_block_sizes_for_extend_attention is where the window says, and the fix's
  line is in it exactly from 0.5.9;
- compiled extensions: the .so modules in each wheel's RECORD are the window's, at the RECORD lines cited.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))
sys.path.insert(0, str(ROOT / "sim" / "sglang" / "python"))
import sglang_cli  # noqa: E402
import sglang_releases  # noqa: E402
from sglang.srt import sim_release_options  # noqa: E402


def _edges():
    """Every release named as a window's first or last, plus the releases just across each edge."""
    out = {F.OLDEST_CHECKED, F.NEWEST_CHECKED}
    tables = [F.FIX_FILE_WINDOWS, F.FIX_CARRIED_WINDOWS, F.RUST_EXTENSION_WINDOWS, *F.SERVER_FLAGS.values()]
    for windows in tables:
        for first, last, _value, _evidence in windows:
            out |= {v for v in (first, last) if v}
    return out


@pytest.fixture(scope="module")
def wheels():
    have = {
        v: p for v, p in sglang_releases.cached_wheels().items() if F.release_key(v) >= F.release_key(F.OLDEST_CHECKED)
    }
    try:
        for v in _edges() - set(have):
            have[v] = sglang_releases.download_wheel(f"sglang=={v}")
    except (RuntimeError, OSError) as e:  # no network and no cache: say so, do not pretend
        pytest.skip(f"real SGLang wheels not available: {e}")
    return dict(sorted(have.items(), key=lambda kv: F.release_key(kv[0])))


@pytest.fixture(scope="module")
def specs(wheels):
    return {v: sglang_cli.options(p) for v, p in wheels.items()}


def _located(spec):
    return {n: f"{o['file']}:{o['line']}" for o in spec["options"] for n in o["names"]}


def test_the_edges_of_every_window_are_checked(wheels):
    assert _edges() <= set(wheels)
    assert len(wheels) >= len(_edges())


def test_each_release_registers_the_flags_planned_for_it(specs):
    keys = ("api_key", "admin_api_key")
    values = {name: "1" for name in F.SERVER_FLAGS if name not in keys} | {"enable_metrics": True}
    for version, spec in specs.items():
        names = set(sglang_cli.option_names(spec))
        for option in F.SERVER_FLAGS:
            flag = F.server_flag(version, option)
            if flag is None:  # a release without the option (--admin-api-key before 0.5.8) registers no spelling of it
                assert not {f for _, _, f, _ in F.SERVER_FLAGS[option] if f} & names, (version, option)
            else:
                assert flag in names, (version, option)
        argv = [*F.server_argv(version, values), F.server_flag(version, "api_key"), "k"]
        assert sim_release_options.check(spec, argv) is None, version
        assert spec["allow_abbrev"] is True, version


def test_the_old_graph_flag_is_ambiguous_from_020_and_the_new_one_unknown_before_014(specs):
    for version, spec in specs.items():
        old = sim_release_options.check(spec, ["--cuda-graph-max-bs", "8"])
        new = sim_release_options.check(spec, ["--cuda-graph-max-bs-decode", "8"])
        k = F.release_key(version)
        assert (old is None) == (k < F.release_key("0.5.20")), (version, old)
        if old:
            assert (
                old == "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
                "--cuda-graph-max-bs-prefill"
            )
        assert (new is None) == (k >= F.release_key("0.5.14")), (version, new)


def test_flag_evidence_cites_the_real_lines(specs):
    checked = 0
    for windows in F.SERVER_FLAGS.values():
        for _first, _last, flag, evidence in windows:
            for version, where in re.findall(r"(\d+\.\d+\.\d+(?:\.post\d+)?) ([\w/.]+\.py:\d+)", evidence):
                assert _located(specs[version])[flag] == where, (flag, version)
                checked += 1
    assert checked >= 2 * len(F.SERVER_FLAGS)


def _fix_file(wheel):
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if n.endswith("/extend_attention.py"):
                text = z.read(n).decode()
                if "def _get_block_sizes_for_extend_attention" in text:
                    return n, text
    return None, None


def test_sm120_fix_file_and_presence_per_release(wheels):
    marker = re.compile(F.FIX_MARKER, re.M)
    for version, wheel in wheels.items():
        path, text = _fix_file(wheel)
        fix = F.sm120_fix(version)
        assert "python/" + path == fix["path"], version
        m = marker.search(text)
        assert bool(m) == fix["carried"], version
        for windows in (F.FIX_FILE_WINDOWS, F.FIX_CARRIED_WINDOWS):
            for _f, _l, _v, evidence in windows:
                for ev_version, _ev_file, line in re.findall(r"(\S+) (sglang/\S+\.py|same file):(\d+)", evidence):
                    if ev_version == version:
                        assert m and text[: m.start()].count("\n") + 1 == int(line), (version, evidence)


def test_compiled_extensions_per_release(wheels):
    for version, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as z:
            record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
            lines = z.read(record).decode().splitlines()
        found = {
            i + 1: line.split(",")[0][: -len(".so")].split(".cpython")[0].replace("/", ".")
            for i, line in enumerate(lines)
            if line.split(",")[0].endswith(".so")
        }
        assert sorted(found.values()) == sorted(F.rust_extensions(version)["modules"]), version
        for _f, _l, _modules, evidence in F.RUST_EXTENSION_WINDOWS:
            for ev_version, cites in re.findall(r"(\d+\.\d+\.\d+(?:\.post\d+)?) (?:\S+/)?RECORD:([\d,-]+)", evidence):
                if ev_version != version:
                    continue
                cited = set()
                for part in cites.split(","):
                    lo, _, hi = part.partition("-")
                    cited |= set(range(int(lo), int(hi or lo) + 1))
                assert cited == set(found), (version, evidence)


def test_versions_between_releases_count_from_the_release_before():
    assert F.sm120_fix("0.5.24.dev1+gabc1234")["path"] == F.NEW_FIX_FILE
    assert F.sm120_fix("0.5.16.dev5+gabc1234")["path"] == F.OLD_FIX_FILE  # after 0.5.15.x, before 0.5.16
    assert F.sm120_fix("0.5.9.dev1+gabc1234")["carried"] is False  # v0.5.8 plus commits
    assert F.sm120_fix("main") == F.sm120_fix(F.NEWEST_CHECKED)
    assert F.server_flag("v0.5.19", "cuda_graph_max_bs") == "--cuda-graph-max-bs-decode"
    assert F.server_flag("0.5.13.post1", "cuda_graph_max_bs") == "--cuda-graph-max-bs"
    with pytest.raises(F.FlagError, match="expected an SGLang release"):
        F.release_key("latest")
