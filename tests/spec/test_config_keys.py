"""The lists behind the unread-key warning stay honest: a key listed as read by a family rule is
read somewhere in kvplan, and no key is both read and called irrelevant."""
from __future__ import annotations

from pathlib import Path

from kvplan.spec.config_keys import IRRELEVANT, READ_ELSEWHERE
from kvplan.spec.config_schema import SCHEMA_KEYS

PKG = Path(__file__).resolve().parents[2] / "kvplan"


def test_every_key_said_to_be_read_is_read() -> None:
    source = "\n".join(p.read_text() for p in PKG.rglob("*.py") if p.name != "config_keys.py")
    assert [k for k in sorted(READ_ELSEWHERE) if f'"{k}"' not in source] == []


def test_no_key_is_both_read_and_irrelevant() -> None:
    assert (READ_ELSEWHERE | SCHEMA_KEYS) & IRRELEVANT == set()
