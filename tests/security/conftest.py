"""Fixtures of the security cases."""

from __future__ import annotations

import pytest
import server_checks


@pytest.fixture(scope="session")
def server_problems():
    """problems(**overrides): the server role's input-check sentences for its defaults with ``overrides``."""
    return server_checks.problems
