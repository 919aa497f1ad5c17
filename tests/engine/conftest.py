"""Engine test fixtures (helpers live in engine_helpers.py)."""
from __future__ import annotations

import pytest
from engine_helpers import reference


@pytest.fixture(scope="session")
def llama_reference() -> tuple[list[list[int]], list[list[int]]]:
    return reference("tiny-llama")
