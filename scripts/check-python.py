"""Refuse a Python that the pinned control-node tools do not support, and say which one was found."""

import sys

found = sys.version_info[:2]
if not (3, 11) <= found < (3, 14):
    sys.exit(
        f"setup: {sys.executable} is Python {found[0]}.{found[1]}; the pinned tools (ansible-core 2.19) need "
        "Python 3.11, 3.12 or 3.13. Debian 12's python3 is 3.11. Run: make setup PYTHON=/path/to/python3.11"
    )
print(f"setup: using {sys.executable} (Python {found[0]}.{found[1]})")
