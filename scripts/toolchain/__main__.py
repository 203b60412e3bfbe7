"""python -m toolchain [sm120|arch|cmake|torch|all] (from scripts/): run the real-toolchain proofs, print their tables.

No argument: sm120, arch and cmake (what `make test` checks too); `all` adds torch (several GB: make toolchain-check).
`ci`: `all`, once per change of the pins (pins_key()): skipped when .ci/toolchain-check.passed (committed) or
TOOLCHAIN_CACHE holds a pass for the same pins.
"""

import hashlib
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from . import archprobe, cache, sglkernel_cmake, sm120

ROOT = Path(__file__).resolve().parents[2]


def pins_key() -> tuple:
    """(sha256[:16], pins): the versions the checks depend on -- torch and flash-attn as the roles pin them, the CUDA
    wheels and the toolchain code itself."""
    pins = {}
    for rel, var in (
        ("roles/python_env/defaults/main.yml", "python_env_torch_version"),
        ("roles/flash_attn/defaults/main.yml", "flash_attn_version"),
    ):
        m = re.search(rf"^{var}:\s*\"?([^\"\s]+)", (ROOT / rel).read_text(), re.M)
        pins[var] = m.group(1) if m else None
    pins["cuda_wheels"] = cache.CUDA_WHEELS
    code = [*sorted(Path(__file__).parent.glob("*.py")), ROOT / "roles" / "python_env" / "files" / "torch_check.py"]
    pins["code"] = hashlib.sha256(b"".join(p.read_bytes() for p in code)).hexdigest()
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16], pins


RECORD = ROOT / ".ci" / "toolchain-check.passed"


def _recorded_passes() -> dict:
    """{pins key: date} of committed passes: one line per pass, 'KEY DATE SECONDS', written by `ci` after a pass.
    A fresh CI machine has no TOOLCHAIN_CACHE, so this file is what makes the check run once per change of the pins."""
    if not RECORD.is_file():
        return {}
    return {ln.split()[0]: ln.split()[1] for ln in RECORD.read_text().splitlines() if len(ln.split()) >= 2}


def main(argv=None):
    what = (argv if argv is not None else sys.argv[1:]) or ["sm120", "arch", "cmake"]
    if what == ["ci"]:
        key, pins = pins_key()
        stamp = cache.CACHE / f"toolchain-check-{key}.json"
        passed = _recorded_passes()
        if key in passed:
            print(
                f"toolchain-check: pins unchanged ({key}, passed {passed[key]} per {RECORD.relative_to(ROOT)}), skipped"
            )
            return 0
        if stamp.is_file():
            print(f"toolchain-check: pins unchanged ({key}, passed {json.loads(stamp.read_text())['passed']}), skipped")
            return 0
        start = time.monotonic()
        rc = main(["all"])
        if rc == 0:
            when = datetime.now(UTC).isoformat(timespec="seconds")
            cache.CACHE.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps({"passed": when, "pins": pins}, indent=1) + "\n")
            with RECORD.open("a") as f:
                f.write(f"{key} {when} {round(time.monotonic() - start)}s\n")
            print(f"toolchain-check: passed for pins {key}; commit {RECORD.relative_to(ROOT)} so CI skips these pins")
        return rc
    if "all" in what:
        what = ["sm120", "arch", "cmake", "torch"]
    failed = False
    try:
        for part in what:
            start = time.monotonic()
            if part == "sm120":
                res = sm120.run()
                print(
                    f"## SM120 extend-attention shared memory (Triton {res['triton']}, pinned by torch {res['torch']})"
                )
                print(sm120.table(res))
                bad = [lbl for lbl, r in res["releases"] if not r["fits"]]
                failed |= bad != ["0.5.8"]
                print(f"\nexceeding the limit: {', '.join(bad) or 'none'} (expected: 0.5.8 only)")
            elif part == "arch":
                rows = archprobe.run()
                print("## Arch flags through nvcc 13.0, fatbinary read by cuobjdump")
                print(archprobe.table(rows))
                failed |= not all(r["exact"] for r in rows)
            elif part == "cmake":
                rows = sglkernel_cmake.run()
                print("## sgl-kernel's libraries: the role's scoping through the real CMake and nvcc")
                print(sglkernel_cmake.table(rows))
                for r in rows:
                    print(
                        f"- {r['fleet']}, {r['variant']}: "
                        + "; ".join(
                            f"{lib}: {'scoped to ' if v['scoped'] else 'kept '}{' '.join(v['kept'])}"
                            for lib, v in r["summary"]["libraries"].items()
                        )
                    )
            elif part == "torch":
                from . import torchcheck

                res = torchcheck.run()
                print("## torch, real")
                print(json.dumps(res, indent=1))
                failed |= not res["ok"]
            else:
                print(f"toolchain: expected sm120, arch, cmake, torch or all, found {part}", file=sys.stderr)
                return 2
            print(f"({part}: {time.monotonic() - start:.1f} s)\n")
    except cache.ToolchainError as e:
        print(f"toolchain: {e}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
