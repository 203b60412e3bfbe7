"""The molecule verifiers read ansible-playbook's output with the tests' own reader (tests/playbook_output.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
