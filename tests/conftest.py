import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# calibrations written by tests go to a throwaway folder, never the user's data folder
os.environ.setdefault("KVPLAN_HOME", tempfile.mkdtemp(prefix="kvplan-test-home-"))

import pytest
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"  # copies; see SOURCES.md there


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE
