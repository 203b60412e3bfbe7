"""python -m toolchain [sm120|arch|cmake|torch|all] (from scripts/): run the real-toolchain proofs, print their tables.

No argument: sm120, arch and cmake (what `make test` checks too); `all` adds torch (several GB: make toolchain-check).
"""

import json
import sys
import time

from . import archprobe, cache, sglkernel_cmake, sm120


def main(argv=None):
    what = (argv if argv is not None else sys.argv[1:]) or ["sm120", "arch", "cmake"]
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
