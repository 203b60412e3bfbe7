"""Which command-line options the release the stand-in plays accepts: exactly the real release's, from its wheel.

The table (``sim_release_options.json`` beside this file, or the file ``SGLANG_SIM_RELEASE_OPTIONS`` names) is written
by the mirror build (sim/mirrors/sglang_cli.py reads each served release's ``server_args.py``); nothing here is
typed by hand. ``SGLANG_SIM_RELEASE`` picks the release; unset, it is the release the stand-in's own version counts
from. The check builds an ``argparse`` parser with the release's option strings, arities, ``prog`` and
``allow_abbrev`` and lets argparse decide, so an unknown option, an ambiguous prefix (``--cuda-graph-max-bs`` in
0.5.20+, which only has ``-decode``/``-prefill``) or a unique prefix (``--tp``) behave as in that release.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from sglang.version import __version__

TABLE = Path(__file__).with_name("sim_release_options.json")


class _Error(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Error(message)


def _key(version: str):
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    return tuple(int(x or 0) for x in m.groups()) if m else (0, 0, 0, 0)


def load():
    path = os.environ.get("SGLANG_SIM_RELEASE_OPTIONS") or (str(TABLE) if TABLE.is_file() else "")
    if not path:
        return None
    return json.loads(Path(path).read_text())


def default_release(table) -> str:
    """The release the stand-in's version counts from: itself when it is a release, else the newest one below."""
    if table.get("default"):
        return table["default"]
    own = __version__
    if own in table["releases"]:
        return own
    below = [v for v in table["releases"] if _key(v) < _key(own)]
    return max(below, key=_key) if below else min(table["releases"], key=_key)


def parser(spec) -> argparse.ArgumentParser:
    p = _Parser(prog=spec.get("prog") or "launch_server.py", allow_abbrev=spec["allow_abbrev"], add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    for i, opt in enumerate(spec["options"]):
        names = [n for n in opt["names"] if n not in ("-h", "--help")]
        if not names:
            continue
        arity = opt["arity"]
        if arity == 0:
            p.add_argument(*names, dest=f"o{i}", action="store_true")
        elif arity == 1:
            p.add_argument(*names, dest=f"o{i}")
        else:
            p.add_argument(*names, dest=f"o{i}", nargs=arity)
    return p


def check(spec, argv):
    """argparse's error message for argv under the release's options, or None."""
    try:
        parser(spec).parse_args(list(argv))
    except _Error as e:
        return str(e)
    return None


def enforce(argv) -> str | None:
    """Exit 2 with argparse's message when the release the stand-in plays does not accept argv; returns the release
    checked (None when there is no table and no release was asked for)."""
    table = load()
    wanted = os.environ.get("SGLANG_SIM_RELEASE")
    if table is None:
        if wanted:
            sys.stderr.write(
                f"stand-in: SGLANG_SIM_RELEASE={wanted} but no option table (sim_release_options.json, written by "
                "the mirror build, or SGLANG_SIM_RELEASE_OPTIONS)\n"
            )
            raise SystemExit(2)
        return None
    release = wanted or default_release(table)
    spec = table["releases"].get(release)
    if spec is None:
        sys.stderr.write(
            "stand-in: no option table for SGLang {} (have {})\n".format(release, ", ".join(sorted(table["releases"])))
        )
        raise SystemExit(2)
    error = check(spec, argv)
    if error:
        prog = spec.get("prog") or "launch_server.py"
        sys.stderr.write(f"usage: {prog} [-h] ...\n{prog}: error: {error}\n")
        raise SystemExit(2)
    return release
