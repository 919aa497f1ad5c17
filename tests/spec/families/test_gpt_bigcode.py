"""GPT-BigCode is described but not checked: its plan carries the unchecked warning."""
from __future__ import annotations

from family_oracle import spec


def test_warned() -> None:
    assert any("not one kvplan has checked" in w for w in spec("gpt_bigcode").warnings)
