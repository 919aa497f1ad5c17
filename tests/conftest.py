import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not REFERENCE.exists():
        pytest.skip("../shared/reference is not present")
    return REFERENCE
